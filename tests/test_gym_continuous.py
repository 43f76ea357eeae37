"""PGC-A3C on Gymnasium envs with a Box action space (a diagonal-Gaussian head) or an observation
Gymnasium flattens (Discrete: one-hot), and the refusal of the spaces still unsupported
(training/pgc_a3c_gym/model.py, training/gym_envs.py; docs/gymnasium.md)."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.gym_envs import check_private_param, make_param_vector_env
from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig
from ldp_audit.training.pgc_a3c_gym.model import LOG_STD_RANGE, Network, loss_gradients
from ldp_audit.training.pgc_a3c_gym.trainer import train
from tests.test_gym_pgc import reference_release, reference_returns


def _torch_gaussian_gradient(net, theta, obs, acts, rew, steps, boot, *, gamma, lam, beta):
    """The printed loss of one episode with a Gaussian head, -A_t log N(a_t; mu_t, std^2) -
    beta H + lambda (V_hat - V)^2, differentiated by torch autograd (log-std clamped to
    LOG_STD_RANGE as the model does)."""
    import torch

    th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    h_, o_, a_ = net.hidden, net.obs_dim, net.n_actions
    wc = th[: h_ * o_].reshape(h_, o_)
    wp = th[h_ * o_ : h_ * o_ + a_ * h_].reshape(a_, h_)
    wv = th[h_ * o_ + a_ * h_ : h_ * (o_ + a_ + 1)]
    log_std = th[h_ * (o_ + a_ + 1) :].clamp(*LOG_STD_RANGE)
    T = int(steps)
    s = torch.tensor(np.asarray(obs[: T + 1], dtype=np.float64))
    h = torch.relu(s @ wc.T)
    mu, v = h @ wp.T, h @ wv
    vhat, adv = reference_returns(v, rew, T, boot, gamma=gamma)
    dist = torch.distributions.Normal(mu[:T], log_std.exp())
    logp = dist.log_prob(torch.tensor(np.asarray(acts[:T], dtype=np.float64))).sum(1)
    ent = dist.entropy().sum(1)
    lp = -(logp * adv).sum() - beta * ent.sum()
    lv = ((vhat - v[:T]) ** 2).sum()
    (lp + lam * lv).backward()
    return th.grad.numpy()


def test_gaussian_gradient_matches_torch_autograd() -> None:
    """The Box head's gradient (mean and log-std) in the one vectorised loss, against torch; a
    log-std outside LOG_STD_RANGE gets none (clamped)."""
    pytest.importorskip("torch")
    net = Network(obs_dim=5, n_actions=2, hidden=4, box=((-2.0, -1.0), (2.0, 1.0)))
    assert net.dim == 4 * (5 + 2 + 1) + 2 and net.draws == 3
    rng = np.random.default_rng(7)
    m, L = 4, 6
    theta = rng.normal(size=(m, net.dim))
    theta[2, -1] = -25.0  # below the clamp: no gradient for it
    obs = rng.normal(size=(m, L + 1, 5))
    acts = rng.normal(size=(m, L, 2))
    rew = rng.normal(size=(m, L))
    lengths = np.array([6, 2, 1, 4])
    boot = np.array([True, False, True, False])
    g = loss_gradients(net, theta, obs, acts, rew, lengths, boot, gamma=0.9, lam=0.5, beta=0.01)
    assert g[2, -1] == 0.0 and np.all(g[[0, 1, 3], -2:] != 0.0)
    for i in range(m):
        ref = _torch_gaussian_gradient(net, theta[i], obs[i], acts[i], rew[i], lengths[i],
                                       boot[i], gamma=0.9, lam=0.5, beta=0.01)  # fmt: skip
        np.testing.assert_allclose(g[i], ref, rtol=1e-9, atol=1e-12)


def test_box_actions_explore_within_the_bounds_and_are_clipped_at_the_env() -> None:
    """Acting: an explored action is uniform within the Box's bounds; the mean (argmax acting)
    may lie outside and is sent to the env clipped (Pendulum: a torque of 100 steps as 2)."""
    net = Network(obs_dim=3, n_actions=1, hidden=4, box=((-2.0,), (2.0,)))
    theta = np.tile(net.init(np.random.default_rng(0)), (3, 1))
    theta[:, 4 * 3 : 4 * 3 + 4] = 50.0  # a large mean
    obs = np.ones((3, 3))
    u = np.array([[0.1, 0.0], [0.1, 0.75], [0.9, 0.3]])  # rows 0, 1 explore (alpha 0.5)
    a = net.act(theta, obs, u, np.full(3, 0.5), sample=False)
    np.testing.assert_allclose(a[:2, 0], [-2.0, 1.0])
    assert a[2, 0] > 2.0  # the mean, unclipped: the log-prob is of the action taken
    info, _ = check_private_param("Pendulum-v1", "g", [5.0, 10.0])
    assert info.box == ((-2.0,), (2.0,)) and info.n_actions == 1
    env = make_param_vector_env(info, "g", 2)
    env.set_param(np.arange(2), np.array([10.0, 10.0]))
    env.reset(seed=[3, 3])
    obs, *_ = env.step(np.array([[100.0], [2.0]]))
    env.close()
    np.testing.assert_array_equal(obs[0], obs[1])


def _ledger_and_noise(tmp_path, env_id: str, name: str, values: tuple) -> tuple:
    cfg = GymPgcConfig(env_id=env_id, private_param=name, values=values, mechanism="laplace",
                       epsilon=1.0, rounds=2, n_agents=3, max_submissions=12,
                       episode_steps=30)  # fmt: skip
    run = tmp_path / env_id
    train(cfg, seed=4, run_dir=run)
    from ldp_audit.accountant.ledger import Ledger

    states = Ledger(str(run / "ledger.sqlite")).states()
    tr, sec = np.load(run / "transcript.npz"), np.load(run / "secrets.npz")
    mech = cfg.make_mechanism()
    noise = tr["report"] - mech.clip_rows(sec["gradient"])
    events = sorted({e for st in states.values() for e, _ in st.history()})
    return cfg, sum(st.n for st in states.values()), events, noise, mech.scale


def test_box_reports_are_charged_and_noised_as_discrete_ones(tmp_path) -> None:
    """A Box-action env (Pendulum's g) and a Discrete one (MountainCar's force), the same
    privacy settings: every report charged once with the same event (epsilon / rounds each),
    and released as clip(gradient) + Laplace(C / (epsilon / rounds)) noise. The noise's mean
    absolute value is b within 6 b / sqrt(n) (n >= 12 x 65 Laplace draws; |Lap(b)| has mean b,
    sd b: a false failure has probability < 1e-8 by the normal approximation; fixed seed)."""
    out = [
        _ledger_and_noise(tmp_path, "Pendulum-v1", "g", (5.0, 20.0)),
        _ledger_and_noise(tmp_path, "MountainCarContinuous-v0", "power", (0.001, 0.003)),
        _ledger_and_noise(tmp_path, "MountainCar-v0", "force", (0.0005, 0.002)),
    ]
    assert [cfg.network.continuous for cfg, *_ in out] == [True, True, False]
    (_, n0, ev0, _, b0) = out[0]
    for _cfg, n, events, noise, b in out:
        assert n == noise.shape[0] == 12 and events == ev0 and b == b0
        assert abs(np.abs(noise).mean() / b - 1.0) < 6.0 / math.sqrt(noise.size)


class SlipLake(FrozenLakeEnv):
    """FrozenLake (4x4, not slippery) whose action is replaced by a random one (drawn from the
    env's seeded generator) with probability ``slip``: a numeric attribute read in ``step``."""

    def __init__(self, render_mode=None) -> None:
        super().__init__(render_mode=render_mode, is_slippery=False)
        self.slip = 0.0

    def step(self, a):
        if self.np_random.random() < self.slip:
            a = int(self.np_random.integers(4))
        return super().step(a)


if "TestSlipLake-v0" not in gym.registry:
    gym.register("TestSlipLake-v0", entry_point=f"{__name__}:SlipLake", max_episode_steps=40)


def test_a_frozenlake_run_trains_and_is_attacked(tmp_path, capsys) -> None:
    """A Discrete(16) observation is one-hot encoded by Gymnasium's FlattenObservation (it was
    refused: 'only Box observations'): the network reads 16 numbers; train and attack from the
    CLI."""
    run = tmp_path / "lake"
    argv = ["train", "pgc-a3c", "--env", "TestSlipLake-v0", "--private-param", "slip=0,0.5",
            "--mechanism", "none", "--agents", "4", "--max-submissions", "16", "--out",
            str(run), "--no-progress", "--json"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    cfg = GymPgcConfig.from_dict(json.loads((run / "config.json").read_text())["config"])
    assert cfg.info.obs_dim == 16 and cfg.network.dim == 16 * (16 + 4 + 1)
    obs = np.load(run / "secrets.npz")["gradient"]
    assert obs.shape == (16, cfg.network.dim)
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "10", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n"] == 16 and res["k"] == 2


class SpacesCartPole(CartPoleEnv):
    """CartPole with the action or observation space a test names (never stepped here)."""

    def __init__(self, action_space=None, observation_space=None, render_mode=None) -> None:
        super().__init__(render_mode=render_mode)
        self.action_space = action_space or self.action_space
        self.observation_space = observation_space or self.observation_space


_SPACES = {
    "TestTupleAct-v0": {  # supported since 2026-12-07 where all leaves are discrete or all Box
        "action_space": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,))))
    },
    "TestDictAct-v0": {"action_space": gym.spaces.Dict({"a": gym.spaces.Text(3)})},
    "TestUnboundedAct-v0": {"action_space": gym.spaces.Box(-np.inf, np.inf, (1,))},
    # finite but huge (session 56 probe): 1e200 trained until "a gradient is not finite"; at
    # 1e308 the bounds' width overflowed and the probe sent NaN actions, blaming the env
    "TestHugeAct-v0": {"action_space": gym.spaces.Box(-1e200, 1e200, (1,), np.float64)},
    "TestWidestAct-v0": {"action_space": gym.spaces.Box(-1e308, 1e308, (1,), np.float64)},
    "TestSequenceObs-v0": {"observation_space": gym.spaces.Sequence(gym.spaces.Discrete(2))},
}
for _id, _kw in _SPACES.items():
    if _id not in gym.registry:
        gym.register(_id, entry_point=f"{__name__}:SpacesCartPole", kwargs=_kw)


@pytest.mark.parametrize(
    ("env_id", "match"),
    [
        ("TestTupleAct-v0", r"Tuple\(Discrete\(2\), Box.*: a Tuple of Box and Discrete action"),
        ("TestDictAct-v0", r"action space Dict\('a': Text.*: a Dict of Text action space is not"),
        ("TestUnboundedAct-v0", r"action space Box\(-inf, inf, .*needs finite bounds"),
        ("TestHugeAct-v0", r"action space Box\(-1e\+200, 1e\+200, .*at most 1e\+100 in magn"),
        ("TestWidestAct-v0", r"action space Box\(-1e\+308, 1e\+308, .*at most 1e\+100 in magn"),
        ("TestSequenceObs-v0", r"observation space Sequence\(Discrete\(2\).*can flatten"),
    ],
)
def test_unsupported_spaces_are_refused_naming_the_space(tmp_path, capsys, env_id, match):
    with pytest.raises(InvalidParameterError, match=match):
        check_private_param(env_id, "length", [0.5, 1.0])
    argv = ["train", "pgc-a3c", "--env", env_id, "--private-param", "length=0.5,1",
            "--mechanism", "none", "--out", str(tmp_path / "r"), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and env_id in err


@pytest.mark.parametrize(
    ("env_id", "name", "values"),
    [("Pendulum-v1", "m", [-1, 1]), ("Pendulum-v1", "l", [0, 1]),
     ("MountainCarContinuous-v0", "power", [-0.0015, 0.0015])],
)  # fmt: skip
def test_a_physical_constant_of_the_continuous_envs_must_be_positive(env_id, name, values):
    """Pendulum's mass was accepted at -1 and trained on (2026-12-07 probe), as CartPole's
    negative pole length once was: Gymnasium's Pendulum and MountainCarContinuous constants are
    physical constants too."""
    with pytest.raises(InvalidParameterError, match=f"'{name}' of .* is a physical constant"):
        check_private_param(env_id, name, values)


def test_a_bound_beyond_the_action_box_is_refused_saying_why() -> None:
    """Pendulum's max_torque 4 acts as 2: its action space is Box(-2, 2) as made, and actions are
    clipped to it (the probe refused the pair naming only 'a speed cap' as the cause)."""
    with pytest.raises(
        InvalidParameterError,
        match=r"candidates 2.0 and 4.0 give the same .* clipped to Box\(-2.0, 2.0, \(1,\)",
    ):
        check_private_param("Pendulum-v1", "max_torque", [1, 2, 4])


def test_attack_recovers_pendulum_gravity_and_stays_under_its_ceiling_with_laplace(tmp_path):
    """benchmarks/gym_leakage.py's Pendulum rows (60 agents, 10 shadows, seed 0; measured 0.833
    [0.715, 0.917] and, Laplace eps 1, 0.317 under 0.576): without privacy the 95% interval
    lies above chance 1/3 (the Gaussian head's reports carry g); at Laplace epsilon 1 no
    violation."""
    from ldp_audit.attacks.dynamics_run_dir import attack_private_param_run, score_private_param_run

    out = {}
    for mech in ("none", "laplace"):
        cfg = GymPgcConfig(env_id="Pendulum-v1", private_param="g", values=(5.0, 10.0, 20.0),
                           mechanism=mech, epsilon=1.0, max_submissions=60)  # fmt: skip
        train(cfg, seed=0, run_dir=tmp_path / mech)
        pred = attack_private_param_run(tmp_path / mech, n_shadow=10, seed=1)
        out[mech] = score_private_param_run(tmp_path / mech, pred)
    assert out["none"].accuracy_ci[0] > 1 / 3 and out["none"].n == 60
    assert not out["laplace"].violation


class IntBoxEnv(gym.Env):
    """A Box(0, 4) action space of integers; the env records the actions it is sent."""

    def __init__(self, render_mode=None) -> None:
        self.action_space = gym.spaces.Box(0, 4, (1,), np.int64)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
        self.k, self.sent = 1.0, []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, a):
        self.sent.append(int(a[0]))
        return np.full(1, self.k * a[0] / 8, np.float32), 0.0, False, False, {}


if "TestIntBox-v0" not in gym.registry:
    gym.register("TestIntBox-v0", entry_point=f"{__name__}:IntBoxEnv", max_episode_steps=10)


def test_an_integer_box_gets_its_actions_rounded_not_cut() -> None:
    """An integer Box's actions were cast (3.7 -> 3): the uniform exploration within [0, 4)
    never sent 4. Rounded now, after the clip."""
    info, _ = check_private_param("TestIntBox-v0", "k", [1.0, 2.0])
    env = make_param_vector_env(info, "k", 4)
    env.set_param(np.arange(4), np.ones(4))
    env.reset(seed=[0] * 4)
    env.step(np.array([[3.7], [0.4], [9.0], [-3.0]]))
    assert [e.unwrapped.sent[-1] for e in env.inner.envs] == [4, 0, 4, 0]
    env.close()


@pytest.mark.parametrize(("acting", "mechanism"), [("argmax", "none"), ("sample", "laplace")])
def test_box_trainer_is_the_straightforward_implementation(acting: str, mechanism: str) -> None:
    """The lock-step trainer with one agent slot on Pendulum against PGC-A3C written plainly for
    a Gaussian head: one ``gym.make`` env, a Python loop per step drawing 1 + A uniforms from the
    trial's acting stream, the action clipped for the env only, torch autograd of the printed
    loss, the mechanism's own ``privatize``, eq. 22 by hand: the same scores, theta within 1e-8."""
    pytest.importorskip("torch")
    from scipy.special import ndtri

    from ldp_audit.training.pgc_a3c.engine import TrialStream, mechanism_rng
    from ldp_audit.training.pgc_a3c_gym.model import SEED_BOUND

    cfg = GymPgcConfig(env_id="Pendulum-v1", private_param="g", values=(5.0, 20.0),
                       mechanism=mechanism, epsilon=1.0 if mechanism == "laplace" else math.inf,
                       n_agents=1, max_submissions=12, episode_steps=40,
                       acting=acting)  # fmt: skip
    res = train(cfg, seed=5)
    net, st, mech_rng = cfg.network, TrialStream(5, 0), mechanism_rng(5)
    mech, theta, buf, scores = cfg.make_mechanism(), net.init(st.init), [], []
    env = gym.make(cfg.env_id, max_episode_steps=cfg.steps)
    while len(scores) < cfg.max_submissions:
        env.unwrapped.g = cfg.values[int(st.reset.integers(len(cfg.values)))]
        o, _ = env.reset(seed=int(st.reset.integers(0, SEED_BOUND)))
        alpha = max(0.0, cfg.alpha_start - len(scores) / cfg.alpha_decay)
        obs, acts, rews, term, trunc = [np.asarray(o, np.float64)], [], [], False, False
        while not (term or trunc) and len(acts) < cfg.steps:
            u = st.act.random(2)
            mu = net.logits(theta[None], obs[-1][None])[0]
            if u[0] < alpha:
                a = -2.0 + u[1:] * 4.0
            elif acting == "sample":
                a = mu + np.exp(theta[-1]) * ndtri(u[1:])
            else:
                a = mu
            o, r, term, trunc, _ = env.step(np.clip(a, -2.0, 2.0).astype(np.float32))
            obs.append(np.asarray(o, np.float64))
            acts.append(a)
            rews.append(float(r))
        ep = (np.array(obs), np.array(acts), rews, len(acts), not term)
        g = _torch_gaussian_gradient(net, theta, *ep, gamma=cfg.gamma, lam=cfg.lam, beta=cfg.beta)
        theta, buf = reference_release(g, buf, theta, cfg, mech, mech_rng, mechanism == "none")
        scores.append(sum(rews))
    env.close()
    np.testing.assert_allclose(res.zeta[0], scores, rtol=1e-12)
    np.testing.assert_allclose(res.theta[0], theta, rtol=1e-8, atol=1e-10)
