"""PGC-A3C on any Gymnasium environment (training/pgc_a3c_gym/trainer.py, training/gym_envs.py;
issue 27)."""

from __future__ import annotations

import faulthandler
import json
import math
import re
import signal
import sqlite3
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from ldp_audit.cli import main
from ldp_audit.errors import BudgetExceeded, InvalidParameterError, RunDirectoryError
from ldp_audit.training.gym_envs import check_private_param, make_param_vector_env
from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig
from ldp_audit.training.pgc_a3c_gym.model import Network, loss_gradients
from ldp_audit.training.pgc_a3c_gym.trainer import train

ACRO = ("Acrobot-v1", "LINK_MASS_1", (0.5, 1.0, 2.0))
CAR = ("MountainCar-v0", "force", (0.0008, 0.001, 0.0012))


@pytest.mark.parametrize(("env_id", "name", "values"), [ACRO, CAR])
def test_native_batch_steps_like_gymnasium(env_id: str, name: str, values: tuple) -> None:
    """Same seeds, values and actions: the batch gives Gymnasium's observations, rewards and
    terminations; its float64 state agrees to rounding (NumPy's array x**2 vs a scalar pow)."""
    info, vals = check_private_param(env_id, name, values)
    assert info.native
    n = len(vals)
    ve = make_param_vector_env(info, name, n)
    ve.set_param(np.arange(n), np.array(vals))
    seeds = [5, 6, 7]
    obs, _ = ve.reset(seed=seeds)
    envs = [gym.make(env_id).unwrapped for _ in range(n)]
    ref = []
    for e, s, v in zip(envs, seeds, vals, strict=True):
        setattr(e, name, v)
        ref.append(e.reset(seed=s)[0])
    assert np.array_equal(obs, np.array(ref))
    rng = np.random.default_rng(0)
    for _ in range(150):
        a = rng.integers(0, 3, n)
        obs, r, term, trunc, _ = ve.step(a)
        for i, e in enumerate(envs):
            o, rr, tt, tr, _ = e.step(int(a[i]))
            assert np.array_equal(o, obs[i]) and rr == r[i] and tt == term[i] and not trunc[i]
            np.testing.assert_allclose(ve.state[i], np.asarray(e.state, float), rtol=1e-12)
            if tt:
                e.reset(seed=99)
                ve.reset(seed=[99], options={"reset_mask": np.arange(n) == i})


def test_sync_path_sets_the_attribute_and_cartpole_derived_quantities() -> None:
    info, _ = check_private_param("CartPole-v1", "masspole", (0.05, 0.2))
    assert not info.native
    ve = make_param_vector_env(info, "masspole", 2)
    ve.set_param(np.arange(2), np.array([0.05, 0.2]))
    u = [e.unwrapped for e in ve.inner.envs]
    assert [x.masspole for x in u] == [0.05, 0.2]
    assert [x.total_mass for x in u] == [0.05 + 1.0, 0.2 + 1.0]
    assert [x.polemass_length for x in u] == [0.05 * 0.5, 0.2 * 0.5]
    ve.close()


def reference_returns(v, rew, T: int, boot: bool, *, gamma: float):
    """The n-step returns and advantages of eqs. 15-16, written plainly (a loop over t): the
    reference both heads' torch gradients use (tests/test_gym_continuous.py too)."""
    import torch

    with torch.no_grad():
        boot_v = v[T] if boot else torch.tensor(0.0, dtype=torch.float64)
        vhat = torch.zeros(T, dtype=torch.float64)
        for t in range(T):
            vhat[t] = (
                sum(gamma ** (j - t) * rew[j] for j in range(t, T)) + gamma ** (T - t) * boot_v
            )
        return vhat, vhat - v[:T]


def reference_release(g, buf, theta, cfg, mech, mech_rng, baseline: bool):
    """One report of the plain loops: the baseline's L1 clip to C/2 (no noise), the mechanism,
    and eq. 22 when the buffer is full; returns (theta, buffer)."""
    if baseline:
        g = g / max(1.0, np.abs(g).sum() / (cfg.effective_clip / 2))
    buf.append(mech.privatize(g[None], mech_rng)[0])
    if len(buf) == cfg.effective_buffer_size:
        return theta - cfg.eta * np.mean(buf, axis=0), []  # eq. 22
    return theta, buf


def torch_forward(net, theta, obs, steps):
    """The network on one episode by torch: (theta as a leaf, logits z, values v, T)."""
    import torch

    th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
    h_, o_, a_ = net.hidden, net.obs_dim, net.n_actions
    wc = th[: h_ * o_].reshape(h_, o_)
    wp = th[h_ * o_ : h_ * o_ + a_ * h_].reshape(a_, h_)
    wv = th[h_ * o_ + a_ * h_ :]
    T = int(steps)
    s = torch.tensor(np.asarray(obs[: T + 1], dtype=np.float64))
    h = torch.relu(s @ wc.T)
    return th, h @ wp.T, h @ wv, T


def _torch_gradient(net, theta, obs, acts, rew, steps, boot, *, gamma, lam, beta):
    """The printed loss of one episode (eqs. 15-18) differentiated by torch autograd."""
    import torch

    th, z, v, T = torch_forward(net, theta, obs, steps)
    vhat, adv = reference_returns(v, rew, T, boot, gamma=gamma)
    logp = torch.log_softmax(z[:T], dim=1)
    ent = -(logp.exp() * logp).sum(1)
    lp = -(logp[torch.arange(T), torch.tensor(np.asarray(acts[:T]))] * adv).sum() - beta * ent.sum()
    lv = ((vhat - v[:T]) ** 2).sum()
    (lp + lam * lv).backward()
    return th.grad.numpy()


def test_gradient_matches_torch_autograd() -> None:
    pytest.importorskip("torch")
    net = Network(obs_dim=6, n_actions=3, hidden=5)
    rng = np.random.default_rng(1)
    m, L = 4, 7
    theta = rng.normal(size=(m, net.dim))
    obs = rng.normal(size=(m, L + 1, 6))
    acts = rng.integers(0, 3, size=(m, L))
    rew = rng.normal(size=(m, L))
    lengths = np.array([7, 3, 1, 5])
    boot = np.array([True, False, True, False])
    g = loss_gradients(net, theta, obs, acts, rew, lengths, boot, gamma=0.9, lam=0.5, beta=0.01)
    for i in range(m):
        ref = _torch_gradient(net, theta[i], obs[i], acts[i], rew[i], lengths[i], boot[i],
                              gamma=0.9, lam=0.5, beta=0.01)  # fmt: skip
        np.testing.assert_allclose(g[i], ref, rtol=1e-9, atol=1e-12)


def _straightforward_train(cfg: GymPgcConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """PGC-A3C written plainly for one agent slot and one trial: one ``gym.make`` env, a Python
    loop per step, torch autograd for the loss, the mechanism's own ``privatize``, eq. 22 by
    hand. It draws from the trainer's documented streams (initial theta, acting uniforms,
    value then reset seed per agent, the mechanism noise). Returns (scores, final theta)."""
    from ldp_audit.training.pgc_a3c.engine import TrialStream, mechanism_rng
    from ldp_audit.training.pgc_a3c_gym.model import SEED_BOUND

    assert cfg.n_agents == 1 and cfg.trials == 1 and cfg.rounds == 1
    net, st, mech_rng = cfg.network, TrialStream(seed, 0), mechanism_rng(seed)
    mech, theta, buf, scores = cfg.make_mechanism(), net.init(st.init), [], []
    env = gym.make(cfg.env_id, max_episode_steps=cfg.steps)
    while len(scores) < cfg.max_submissions:
        value = cfg.values[int(st.reset.integers(len(cfg.values)))]
        setattr(env.unwrapped, cfg.private_param, value)
        o, _ = env.reset(seed=int(st.reset.integers(0, SEED_BOUND)))
        alpha = max(0.0, cfg.alpha_start - len(scores) / cfg.alpha_decay)
        obs, acts, rews, term = [np.asarray(o, dtype=np.float64)], [], [], False
        while not term and len(acts) < cfg.steps:
            u = st.act.random()
            z = net.logits(theta[None], obs[-1][None])[0]
            if u < alpha:
                a = min(int(u / alpha * net.n_actions), net.n_actions - 1)
            elif cfg.acting == "sample":  # the inverse CDF of pi at (u - alpha) / (1 - alpha)
                cdf = np.cumsum(np.exp(z - z.max()) / np.exp(z - z.max()).sum())
                v = (u - alpha) / (1.0 - alpha)
                a = min(int(np.sum(cdf <= v)), net.n_actions - 1)
            else:
                a = int(np.argmax(z))
            o, r, term, trunc, _ = env.step(a)
            obs.append(np.asarray(o, dtype=np.float64))
            acts.append(a)
            rews.append(float(r))
            if trunc:
                break
        g = _torch_gradient(net, theta, np.array(obs), acts, rews, len(acts), not term,
                            gamma=cfg.gamma, lam=cfg.lam, beta=cfg.beta)  # fmt: skip
        theta, buf = reference_release(g, buf, theta, cfg, mech, mech_rng, cfg.mechanism == "none")
        scores.append(sum(rews))
    env.close()
    return np.array(scores), theta


@pytest.mark.parametrize(
    ("env_id", "name", "values", "mechanism", "acting"),
    [("CartPole-v1", "force_mag", (5.0, 20.0), "laplace", "argmax"),  # SyncVectorEnv path
     ("Acrobot-v1", "LINK_MASS_2", (0.5, 2.0), "none", "argmax"),  # native batched physics
     ("MountainCar-v0", "force", (0.0005, 0.002), "none", "sample")],
)  # fmt: skip
def test_trainer_is_the_straightforward_implementation(env_id, name, values, mechanism, acting):
    """The lock-step trainer with one agent slot against PGC-A3C written plainly: the same
    scores and the same final theta (float rounding of numpy vs torch only)."""
    pytest.importorskip("torch")
    cfg = GymPgcConfig(env_id=env_id, private_param=name, values=values, mechanism=mechanism,
                       epsilon=1.0 if mechanism == "laplace" else math.inf, n_agents=1,
                       max_submissions=12, episode_steps=60, acting=acting)  # fmt: skip
    res = train(cfg, seed=5)
    scores, theta = _straightforward_train(cfg, 5)
    np.testing.assert_array_equal(res.zeta[0], scores)
    np.testing.assert_allclose(res.theta[0], theta, rtol=1e-8, atol=1e-10)


def test_each_score_is_its_own_episodes_return(monkeypatch) -> None:
    """Rows that end at the same step: each score sums its own episode's rewards (a shorter
    episode's score once summed the rewards left in its row by an earlier, longer one)."""
    from ldp_audit.training.pgc_a3c_gym import engine

    lengths: list[np.ndarray] = []
    real = engine.episode_loss

    def spy(cfg, theta, obs, acts, rew, steps, *a):
        lengths.append(np.asarray(steps).copy())
        return real(cfg, theta, obs, acts, rew, steps, *a)

    cfg = GymPgcConfig(env_id="CartPole-v1", private_param="length", values=(0.25, 1.0),
                       mechanism="none", max_submissions=60)  # fmt: skip
    monkeypatch.setattr(engine, "episode_loss", spy)
    res = train(cfg, seed=0)
    # CartPole pays 1 per step: a score is its episode's length, in submission order
    np.testing.assert_array_equal(res.zeta[0], np.concatenate(lengths).astype(float))
    assert any(np.unique(x).size > 1 for x in lengths)  # rows of different lengths ended together


def empty_obs_cartpole() -> gym.Env:
    """CartPole observing nothing (a Box of shape (0,)): its network saw only zeros."""
    env = gym.make("CartPole-v1")
    return gym.wrappers.TransformObservation(env, lambda o: o[:0], gym.spaces.Box(-1, 1, (0,)))


if "TestEmptyObs-v0" not in gym.registry:
    gym.register("TestEmptyObs-v0", entry_point=f"{__name__}:empty_obs_cartpole")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"env_id": "NoSuchEnv-v0"}, "unknown Gymnasium environment id 'NoSuchEnv-v0'"),
        ({"env_id": "my_mod:MyEnv-v0"}, "give it as --env-module my_mod --env MyEnv-v0"),
        ({"env_id": "TestEmptyObs-v0", "private_param": "length"}, r"Box\(.*\(0,\).*at least one"),
        ({"private_param": "LINK_MASS_9"}, "'LINK_MASS_9' is not an attribute of AcrobotEnv"),
        ({"private_param": "book_or_nips"}, "'book_or_nips' of AcrobotEnv is not numeric"),
        ({"values": (1.0,)}, "'LINK_MASS_1' needs at least two candidate values"),
        (
            {"values": (1.0, 2.0, 1.0)},
            r"'LINK_MASS_1' \(values\): candidate values must be distinct",
        ),
        (
            {"values": (1.0, math.nan)},
            r"'LINK_MASS_1' \(values\): candidate nan is not a finite number",
        ),
        ({"values": (1.0, True)}, "candidate True is not a finite number"),
        ({"values": (1.0, "2")}, "candidate '2' is not a finite number"),
        (
            {"env_id": "CartPole-v1", "private_param": "length", "values": (0.5, 1e-300)},
            "'length': env 'CartPole-v1' fails with value 1e-300: .*non-finite observation",
        ),
        (
            {"env_id": "CartPole-v1", "private_param": "polemass_length", "values": (0.1, 1)},
            "'polemass_length' of CartPole is derived from masspole, masscart and length",
        ),
        ({"probe_timeout": True}, r"probe_timeout must be a real number in \(0, .*got True"),
        ({"probe_timeout": "60"}, r"probe_timeout must be a real number in \(0, .*got '60'"),
        ({"probe_timeout": 0}, r"probe_timeout must be a real number in \(0, .*got 0"),
        ({"probe_timeout": -1.0}, r"probe_timeout must be a real number in \(0, .*got -1.0"),
    ],
)
def test_bad_input_is_named_before_any_episode(kwargs: dict, match: str) -> None:
    base = {"env_id": ACRO[0], "private_param": ACRO[1], "values": ACRO[2], "mechanism": "none"}
    with pytest.raises(InvalidParameterError, match=match):
        GymPgcConfig(**{**base, **kwargs})


def _cfg(**kw: object) -> GymPgcConfig:
    base = {
        "env_id": CAR[0],
        "private_param": CAR[1],
        "values": CAR[2],
        "mechanism": "laplace",
        "epsilon": 1.0,
        "trials": 2,
        "n_agents": 3,
        "max_submissions": 12,
        "episode_steps": 30,
    }
    return GymPgcConfig(**{**base, **kw})


def test_run_directory_records_the_parameter_and_charges_every_report(tmp_path) -> None:
    cfg = _cfg(rounds=2)
    run = tmp_path / "run"
    res = train(cfg, seed=3, run_dir=run)
    doc = json.loads((run / "config.json").read_text())
    assert doc["algorithm"] == "pgc-a3c-gym"
    assert doc["private_parameter"] == {
        "env_id": "MountainCar-v0",
        "name": "force",
        "values": [0.0008, 0.001, 0.0012],
        "env_module": None,
    }
    tr = np.load(run / "transcript.npz")
    sec = np.load(run / "secrets.npz")
    n = tr["report"].shape[0]
    assert n == 24 and tr["report"].shape[1] == cfg.network.dim == 16 * (2 + 3 + 1)
    assert set(np.unique(sec["value"])) <= set(cfg.values)
    # an agent keeps its value over its rounds, and reports at epsilon / rounds each
    for t, a in {(int(x), int(y)) for x, y in zip(tr["trial"], tr["agent"], strict=True)}:
        sel = (tr["trial"] == t) & (tr["agent"] == a)
        assert np.unique(sec["value"][sel]).size == 1 and sel.sum() <= 2
    with sqlite3.connect(run / "ledger.sqlite") as con:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type='table'")]
    assert tables  # the ledger file is the accountant's
    from ldp_audit.accountant.ledger import Ledger

    led = Ledger(str(run / "ledger.sqlite"))
    ids = {f"{int(t)}/{int(a)}" for t, a in zip(tr["trial"], tr["agent"], strict=True)}
    assert ids <= set(led.agents())
    assert res.privacy["epsilon_per_submission"] == 0.5
    # same seed, same run
    res2 = train(cfg, seed=3, transcript=True)
    assert np.array_equal(res2.transcript["report"], tr["report"])
    assert np.array_equal(res2.theta, res.theta)


def test_budget_is_enforced_before_release() -> None:
    cfg = _cfg(budget=0.5, epsilon=1.0)  # one report of 1.0 exceeds 0.5
    with pytest.raises(BudgetExceeded):
        train(cfg, seed=0, transcript=True)


def test_cli_train_attack_report_on_mountaincar(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    args = ["train", "pgc-a3c", "--env", "MountainCar-v0", "--private-param",
            "force=0.0006,0.0014", "--mechanism", "none", "--agents", "4", "--episode-steps",
            "60", "--max-submissions", "16", "--out", str(run), "--no-progress",
            "--json"]  # fmt: skip
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algorithm"] == "pgc-a3c-gym" and out["private_parameter"]["name"] == "force"
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "8", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["attack"] == "dynamics-private-parameter" and res["n"] == 16 and res["k"] == 2
    assert res["extra"]["parameter"] == "force"
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) in (0, 1)
    assert (tmp_path / "rep" / "index.html").exists()


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--env", "Acrobot-v1", "--private-param", "LINK_MASS_1=1"], "at least two"),
        (["--env", "Acrobot-v1", "--private-param", "LINK_MASS_1=1,nan"], "finite number"),
        (["--env", "Acrobot-v1", "--private-param", "a.b=1,2"], "a property with a setter"),
        (["--env", "Acrobot-v1"], "--env needs --private-param"),
        (["--private-param", "gravity=9,10"], "need --env"),
        (["--probe-timeout", "5"], "--probe-timeout need --env"),
        (
            ["--env", "Acrobot-v1", "--private-param", "dt=0.2,0.1", "--probe-timeout", "0"],
            "--probe-timeout must be a finite number in (0, 1e+06], got '0'",
        ),
        (
            ["--env", "Acrobot-v1", "--private-param", "dt=0.2,0.1", "--probe-timeout", "True"],
            "--probe-timeout must be a finite number in (0, 1e+06], got 'True'",
        ),
        (
            ["--env", "Acrobot-v1", "--private-param", "dt=0.2,0.1", "--stop-at-target"],
            "--stop-at-target: options of the CartPole engine",
        ),  # fmt: skip
    ],
)
def test_cli_bad_input_exits_2(tmp_path, capsys, extra: list, match: str) -> None:
    out = tmp_path / "run"
    try:
        code = main(["train", "pgc-a3c", "--mechanism", "none", "--out", str(out), *extra])
    except SystemExit as exc:  # argparse's own refusal of a malformed value
        code = exc.code
    assert code == 2 and match in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--mechanism", "laplace", "--epsilon", "1e-300"], "the parameters could move by"),
        # the advice names only options of this path (--clip, --aggregator-lr are refused here)
        (["--mechanism", "laplace", "--epsilon", "1e-300"], "raise --epsilon or lower --eta\n"),
        (["--mechanism", "none", "--resume"], "--resume: an interrupted pgc-a3c-gym run"),
    ],
)
def test_cli_gym_run_refused_before_any_episode(tmp_path, capsys, extra, match) -> None:
    """--epsilon 1e-300 trained until theta overflowed ("a gradient is not finite", an
    interrupted run left behind); --resume named an internal run_mode. Both now refused first."""
    out = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--env", "CartPole-v1", "--private-param", "force_mag=5,20",
            "--max-submissions", "40", "--no-progress", "--out", str(out)]  # fmt: skip
    if "--resume" in extra:  # an earlier run to resume
        assert main([*argv, "--mechanism", "none"]) == 0
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main([*argv, *extra]) == 2
    assert match in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing written


def test_cli_gym_refusal_of_a_non_empty_out_suggests_no_resume(tmp_path, capsys) -> None:
    """--env runs cannot be resumed (refused above), so the refusal of a non-empty --out does
    not suggest --resume (it did: '(or --resume to continue it)')."""
    (tmp_path / "junk").write_text("x")
    argv = ["train", "pgc-a3c", "--env", "CartPole-v1", "--private-param", "force_mag=5,20",
            "--mechanism", "none", "--no-progress", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--overwrite" in err and "--resume" not in err, err


def test_train_refuses_a_non_empty_run_dir_without_suggesting_resume(tmp_path) -> None:
    """train(run_dir=...) of the Python API: a non-empty folder is refused before anything is
    written, the message suggesting overwrite=True and not --resume (a gym run cannot resume)."""
    (tmp_path / "junk").write_text("x")
    cfg = GymPgcConfig(env_id=CAR[0], private_param=CAR[1], values=CAR[2], mechanism="none",
                       trials=1, n_agents=2, max_submissions=2, episode_steps=5)  # fmt: skip
    with pytest.raises(RunDirectoryError, match="overwrite=True") as exc:
        train(cfg, run_dir=tmp_path)
    assert "--resume" not in str(exc.value)
    assert [p.name for p in tmp_path.iterdir()] == ["junk"]


def test_cartpole_gravity_runs_on_the_paper_engine(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # each run without --out lands in runs/pgc-a3c-<ts>, here
    common = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1",
              "--max-submissions", "30", "--no-progress", "--json"]  # fmt: skip
    assert main([*common, "--env", "CartPole-v1", "--private-param", "gravity=9.7,9.8,9.9"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(common) == 0
    b = json.loads(capsys.readouterr().out)
    a.pop("seconds"), b.pop("seconds")
    assert a.pop("run_dir") != b.pop("run_dir")  # two runs kept, in two folders
    assert a == b  # the same engine, the same results


def test_shadow_rollouts_on_the_sync_path_reset_rows_that_end_again() -> None:
    """Rows whose episode is over keep stepping; Gymnasium's SyncVectorEnv (autoreset
    DISABLED) must have each of them reset every time it ends, or its step asserts."""
    from ldp_audit.training.pgc_a3c_gym.model import episode_gradients

    cfg = GymPgcConfig(
        env_id="CartPole-v1",
        private_param="length",
        values=(0.25, 1.0),
        mechanism="none",
        episode_steps=120,
    )
    theta = np.zeros(cfg.network.dim)  # uniform policy: some poles fall fast, others late
    grads, scores = episode_gradients(
        cfg, np.broadcast_to(theta, (6, theta.size)), np.repeat([0.25, 1.0], 3),
        np.random.default_rng(0), np.full(6, 1.0),
    )  # fmt: skip
    assert grads.shape == (6, cfg.network.dim) and np.isfinite(grads).all()
    assert scores.min() >= 1 and scores.max() <= 120 and np.unique(scores).size > 1


@pytest.mark.slow
def test_attack_recovers_acrobot_link_mass_and_stays_under_its_ceiling_with_laplace(
    tmp_path,
) -> None:
    """benchmarks/gym_leakage.py's Acrobot rows (60 agents, 10 shadows, seed 0): without
    privacy, the 95% Clopper-Pearson interval of the accuracy lies above chance 1/3; at Laplace
    epsilon 1 it does not exceed the ceiling e / (e + 2) (no violation)."""
    from ldp_audit.attacks.dynamics_run_dir import attack_private_param_run, score_private_param_run

    out = {}
    for mech, name in (("none", "LINK_MASS_2"), ("laplace", "LINK_MASS_1")):
        cfg = GymPgcConfig(env_id="Acrobot-v1", private_param=name, values=(0.5, 1.0, 2.0),
                           mechanism=mech, epsilon=1.0, max_submissions=60)  # fmt: skip
        run = tmp_path / mech
        train(cfg, seed=0, run_dir=run)
        pred = attack_private_param_run(run, n_shadow=10, seed=1)
        out[mech] = score_private_param_run(run, pred)
    assert out["none"].accuracy_ci[0] > 1 / 3 and out["none"].n == 60
    assert out["laplace"].ceiling == pytest.approx(math.e / (math.e + 2))
    assert not out["laplace"].violation


USER_ENV = """
import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class WindyCartPole(CartPoleEnv):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.wind = 0.0

    def step(self, action):
        self.force_mag = 10.0 + self.wind
        return super().step(action)


if "TestWindyCartPole-v0" not in gym.registry:
    gym.register("TestWindyCartPole-v0", entry_point=f"{__name__}:WindyCartPole",
                 max_episode_steps=100)
"""


def test_user_env_through_env_module(tmp_path, monkeypatch, capsys) -> None:
    """A user env registered by --env-module: train, then attack (which imports the module only
    when told to: a run directory never makes the toolkit import code)."""
    (tmp_path / "my_test_envs.py").write_text(USER_ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    args = ["train", "pgc-a3c", "--env-module", "my_test_envs", "--env", "TestWindyCartPole-v0",
            "--private-param", "wind=-5,5", "--mechanism", "none", "--max-submissions", "12",
            "--out", str(run), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    doc = json.loads((run / "config.json").read_text())
    assert doc["private_parameter"]["env_module"] == "my_test_envs"
    capsys.readouterr()
    import sys

    monkeypatch.delitem(sys.modules, "my_test_envs")  # as in a fresh attacker's process
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "4"]) == 2
    assert "--env-module my_test_envs" in capsys.readouterr().err
    # 3 thetas x 7 shadows x 2 candidates >= 40: the non-private classifier can split (4 gave
    # 24 shadows: a flat posterior, now refused)
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "7",
                 "--env-module", "my_test_envs", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["n"] == 12
    # audit reads the config too: it takes --env-module (it named the option and had none,
    # so a user env's run could not be audited); this run's epsilon is inf: nothing to audit
    monkeypatch.delitem(sys.modules, "my_test_envs")
    assert main(["audit", "--run-dir", str(run)]) == 2
    # the audit's refusal shows the audit's command (its one example was `attack dynamics`)
    assert "`ldp-audit audit --run-dir RUN --env-module my_test_envs`" in capsys.readouterr().err
    assert main(["audit", "--run-dir", str(run), "--env-module", "my_test_envs"]) == 2
    assert "nothing to audit" in capsys.readouterr().err
    # the module edited since training (two stacked frames: another network size): the attack
    # said only "theta must have 176 columns, got shape (..., 112)" (session 58 probe)
    stack = "additional_wrappers=(FrameStackObservation.wrapper_spec(stack_size=2),))"
    edited = USER_ENV.replace("max_episode_steps=100)", f"max_episode_steps=100, {stack}")
    (tmp_path / "my_test_envs.py").write_text(
        "from gymnasium.wrappers import FrameStackObservation\n" + edited
    )
    monkeypatch.delitem(sys.modules, "my_test_envs")
    monkeypatch.delitem(gym.registry, "TestWindyCartPole-v0")
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "7",
                 "--env-module", "my_test_envs", "--overwrite"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "as registered now gives a network of 176 parameters, but this run trained one of " \
           "112" in err, err  # fmt: skip


def test_attack_ceiling_composes_an_agents_reports(tmp_path) -> None:
    """rounds = 2 at epsilon 2 per agent: each report is 1-LDP, the attack combines an agent's
    T = 2 reports, and its ceiling is e^(T eps) / (e^(T eps) + k - 1) at T eps = 2."""
    from ldp_audit.attacks.dynamics_run_dir import attack_private_param_run, score_private_param_run
    from ldp_audit.attacks.scoring import accuracy_ceiling

    run = tmp_path / "run"
    train(_cfg(rounds=2, epsilon=2.0, trials=1, max_submissions=8), seed=0, run_dir=run)
    pred = attack_private_param_run(run, n_shadow=3, seed=0)
    res = score_private_param_run(run, pred)
    assert res.epsilon == 1.0 and res.reports_per_agent == 2 and res.k == 3
    # 8 submissions of 3 workers: agents cut by the horizon sent one report (T is the largest)
    assert pred["reports_per_group"].sum() == 8 and pred["reports_per_group"].max() == 2
    assert res.n == len(pred["reports_per_group"])
    assert res.ceiling == pytest.approx(accuracy_ceiling(1.0, 3, 2))


def test_a_param_env_without_set_param_is_refused_at_definition() -> None:
    from ldp_audit.training.gym_envs import ParamVectorEnv

    with pytest.raises(TypeError, match="must define set_param"):
        type("NoParam", (ParamVectorEnv,), {})


class LateFailCartPole(gym.Wrapper):
    """CartPole whose 5th step of an episode reset with a training seed (the probe's are <
    10**4) raises or returns NaN, a reward of None or a string: past the parameter probe's
    steps, well inside training. (It counted 200 steps of one env instance, episodes together:
    since 2026-12-07 each episode of a used row starts in a fresh env.)"""

    def __init__(self, fail: str = "raise") -> None:
        super().__init__(gym.make("CartPole-v1").unwrapped)
        self.fail, self.n = fail, -(10**9)

    def reset(self, *, seed=None, options=None):
        self.n = 0 if seed is not None and seed >= 10**6 else -(10**9)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.n += 1
        obs, r, term, trunc, info = self.env.step(action)
        if self.n >= 5 and self.fail == "raise":
            raise RuntimeError("the user's env broke")
        if self.n >= 5 and self.fail in ("none", "str"):
            return obs, None if self.fail == "none" else str(r), term, trunc, info
        if self.n >= 5 and self.fail == "strterm":  # "False" is truthy: it ended every episode
            return obs, r, str(term), trunc, info
        return (obs * np.nan if self.n >= 5 else obs), r, term, trunc, info


for _fail in ("raise", "nan", "none", "str", "strterm"):
    if f"TestLateFail-{_fail}-v0" not in gym.registry:
        gym.register(f"TestLateFail-{_fail}-v0", entry_point=f"{__name__}:LateFailCartPole",
                     kwargs={"fail": _fail}, max_episode_steps=100)  # fmt: skip


@pytest.mark.parametrize(
    ("fail", "match"),
    [("raise", r"env 'TestLateFail-raise-v0' raised RuntimeError in step: the user's env broke"),
     ("nan", r"env 'TestLateFail-nan-v0' returned a non-finite observation or reward"),
     ("none", r"env 'TestLateFail-none-v0' returned reward None in step \(NoneType, not a "
      r"number\) \(row \d+, force_mag="),
     ("str", r"env 'TestLateFail-str-v0' returned reward '1.0' in step \(str, not a number\)"),
     ("strterm", r"returned terminated 'False' in step \(str, not a bool\) \(row \d+, force")],
)  # fmt: skip
def test_a_user_env_failing_during_training_is_named_exit_2(tmp_path, capsys, fail, match):
    """A user env raising mid-run was reported as "a bug in ldp-audit" (exit 3, traceback); one
    returning NaN as "theta diverged"; a reward of None as "non-finite" (2026-12-06); a string
    reward '1.0' was trained on as 1.0 (NumPy converted it; 2026-12-07 probe); a terminated of
    'False' ended every episode at once (a non-empty string is true; session 53 probe)."""
    run = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--env", f"TestLateFail-{fail}-v0", "--private-param",
            "force_mag=5,20", "--mechanism", "none", "--max-submissions", "200", "--out",
            str(run), "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and "Traceback" not in err
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"


class StallsBeforeAReport(gym.Env):
    """A drifting point that never ends an episode (truncated at 30) and raises on its 25th
    step: past the parameter probe (20 steps), before any agent's first report."""

    action_space, observation_space = gym.spaces.Discrete(2), gym.spaces.Box(-9, 9, (1,))

    def __init__(self, render_mode=None) -> None:
        self.drift, self.n = 0.1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = self.np_random.uniform(-0.1, 0.1, 1).astype(np.float32)
        return self.x.copy(), {}

    def step(self, action):
        self.n += 1
        if self.n == 25:
            raise RuntimeError("stalled")
        self.x += np.float32(self.drift * (action - 0.5))
        return self.x.copy(), 0.0, False, False, {}


if "TestStalls-v0" not in gym.registry:
    gym.register("TestStalls-v0", entry_point=StallsBeforeAReport, max_episode_steps=30)


def test_attacking_a_run_that_released_no_report_is_refused_exit_2(tmp_path, capsys) -> None:
    """A run interrupted before its first report: the attack raised ValueError ('zero-size
    array to reduction operation minimum'), exit 3 with a traceback (2026-12-07 probe)."""
    run = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--env", "TestStalls-v0", "--private-param", "drift=0.1,0.5",
            "--mechanism", "none", "--max-submissions", "20", "--out", str(run),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    capsys.readouterr()
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "10"]) == 2
    err = capsys.readouterr().err
    assert "holds no report" in err and "interrupted" in err and "Traceback" not in err, err


def _normalized_cartpole(render_mode=None):
    return gym.wrappers.NormalizeObservation(CartPoleEnv(render_mode=render_mode))


if "TestNormalized-v0" not in gym.registry:
    gym.register("TestNormalized-v0", entry_point=_normalized_cartpole, max_episode_steps=50)


def test_no_state_of_a_rows_last_agent_reaches_the_next_agent() -> None:
    """A row's env served each agent that followed in it: a wrapper keeping state across resets
    (NormalizeObservation's running mean) carried one agent's episodes, and so its private
    length, into the next agent's observations and report (up to 0.94 in a normalized
    observation, 2026-12-07 probe), uncharged to it. Each new episode of a used row now starts
    in a fresh env: the next agent's trajectory is the one a fresh env gives."""
    info, _ = check_private_param("TestNormalized-v0", "length", [0.25, 1.0])
    played = []
    for first in (None, 0.25, 1.0):  # no previous agent, or one of either value
        env = make_param_vector_env(info, "length", 1)
        if first is not None:
            env.set_param(np.arange(1), np.array([first]))
            env.reset(seed=[1])
            for k in range(8):
                env.step(np.array([k % 2]))
        env.set_param(np.arange(1), np.array([0.5]))  # the next agent: same value and seed
        obs = [env.reset(seed=[2])[0]] + [env.step(np.array([k % 2]))[0] for k in range(3)]
        env.close()
        played.append(np.concatenate(obs).ravel())
    np.testing.assert_array_equal(played[1], played[0])
    np.testing.assert_array_equal(played[2], played[0])


def test_a_fresh_env_of_a_used_row_skips_gymnasiums_env_checker() -> None:
    """Gymnasium's PassiveEnvChecker only warns, on an env's first reset and step; the rows'
    first envs have it, their fresh copies (one per episode of a used row) do not: it was about
    40 % of the fresh-env cost (session 53: CartPole `length`, 5 trials x 300 submissions, 4.9
    -> 4.35 CPU-s). The trajectories are unchanged (the fresh env test above)."""
    from gymnasium.wrappers.common import PassiveEnvChecker

    def checked(e):
        while isinstance(e, gym.Wrapper) and not isinstance(e, PassiveEnvChecker):
            e = e.env
        return isinstance(e, PassiveEnvChecker)

    info, _ = check_private_param("TestNormalized-v0", "length", [0.25, 1.0])
    env = make_param_vector_env(info, "length", 2)
    env.set_param(np.arange(2), np.array([0.25, 1.0]))
    assert [checked(e) for e in env.inner.envs] == [True, True]
    env.set_param(np.array([1]), np.array([0.25]))  # a used row: a fresh env
    assert [checked(e) for e in env.inner.envs] == [True, False]
    env.close()


class EndlessStepCartPole(CartPoleEnv):
    """CartPole whose step never returns: a pure-Python loop that swallows any Exception."""

    def step(self, action):
        while True:
            try:
                pass
            except Exception:  # noqa: BLE001, S110 - the env's own; the probe's limit is not one
                pass


class BlockingSetCartPole(CartPoleEnv):
    """CartPole whose ``wind`` setter blocks for ever (a wait on an event never set)."""

    wind = property(lambda self: 0.0, lambda self, v: threading.Event().wait())


for _name, _cls in (("TestEndlessStep-v0", EndlessStepCartPole),
                    ("TestBlockingSet-v0", BlockingSetCartPole)):  # fmt: skip
    if _name not in gym.registry:
        gym.register(_name, entry_point=_cls, max_episode_steps=50)


@pytest.mark.parametrize(
    ("env", "param", "call"),
    [("TestEndlessStep-v0", "length=0.25,1", "step"),
     ("TestBlockingSet-v0", "wind=1,2", "setting wind=1.0")],
)  # fmt: skip
def test_user_env_code_that_never_returns_is_refused_at_the_probe_timeout(
    tmp_path, capsys, env, param, call
) -> None:
    """An endless step or a blocking setter hung the probe (and the command) for ever: each call
    of the env's code in the probe now has --probe-timeout seconds, then exit 2 naming the env
    and the call, nothing written. (faulthandler ends the worker should the limit fail.)"""
    run = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--env", env, "--private-param", param, "--mechanism", "none",
            "--max-submissions", "10", "--out", str(run), "--probe-timeout", "0.5",
            "--no-progress"]  # fmt: skip
    hang = (tmp_path / "hang.txt").open("w")  # pytest's captured stderr has no file number
    faulthandler.dump_traceback_later(120, exit=True, file=hang)
    try:
        t0 = time.monotonic()
        assert main(argv) == 2
        assert time.monotonic() - t0 < 60
    finally:
        faulthandler.cancel_dump_traceback_later()
        hang.close()
    err = capsys.readouterr().err
    assert f"env {env!r} did not return from {call} within 0.5 s" in err
    assert "--probe-timeout" in err and "Traceback" not in err and not run.exists()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # no timer left armed
    assert signal.getsignal(signal.SIGALRM) == signal.SIG_DFL  # the handler given back


def _bad_shape_simulator(theta, values, rng, alpha):
    return np.zeros((theta.shape[0], 3)), np.zeros(theta.shape[0])


@pytest.mark.parametrize(
    ("ref", "match"),
    [("os:getcwd", r"simulator 'getcwd' raised TypeError"),
     (f"{__name__}:_bad_shape_simulator", r"returned gradients of shape \(\d+, 3\), expected "
      r"\(\d+, 96\)")],
)  # fmt: skip
def test_a_failing_user_simulator_is_named_exit_2(tmp_path, capsys, ref, match) -> None:
    """--simulator raising, or returning gradients of the wrong shape, was "a bug in
    ldp-audit" (exit 3, traceback)."""
    run = tmp_path / "run"
    train(
        _cfg(trials=1, max_submissions=4, mechanism="none", epsilon=math.inf), seed=0, run_dir=run
    )
    argv = ["attack", "dynamics", "--run-dir", str(run), "--shadow", "2", "--simulator", ref]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and "Traceback" not in err
