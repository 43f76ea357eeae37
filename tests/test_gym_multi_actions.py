"""PGC-A3C on Gymnasium envs with MultiDiscrete or MultiBinary actions (one categorical head per
component in the one vectorised loss; a MultiBinary component is a two-way categorical, a
Bernoulli), and the refusal of Tuple and Dict actions before any work
(training/pgc_a3c_gym/model.py, training/gym_envs.py, training/sizes.py; docs/gymnasium.md)."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest

from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.gym_envs import check_private_param, make_param_vector_env
from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig
from ldp_audit.training.pgc_a3c_gym.model import Network, loss_gradients
from ldp_audit.training.sizes import gym_pgc_estimates
from tests.test_gym_continuous import _ledger_and_noise
from tests.test_gym_pgc import reference_returns, torch_forward


def _torch_multi_gradient(net, theta, obs, acts, rew, steps, boot, *, gamma, lam, beta):
    """The printed loss of one episode with one softmax per component (log pi(a) = the sum of
    the components' log-probabilities, H = the sum of their entropies), by torch autograd."""
    import torch

    th, z, v, T = torch_forward(net, theta, obs, steps)
    vhat, adv = reference_returns(v, rew, T, boot, gamma=gamma)
    logp, ent, start = 0.0, 0.0, 0
    for j, n in enumerate(net.nvec):
        lp_j = torch.log_softmax(z[:T, start : start + n], dim=1)
        logp = logp + lp_j[torch.arange(T), torch.tensor(np.asarray(acts[:T, j]))]
        ent = ent - (lp_j.exp() * lp_j).sum(1)
        start += n
    lp = -(logp * adv).sum() - beta * ent.sum()
    lv = ((vhat - v[:T]) ** 2).sum()
    (lp + lam * lv).backward()
    return th.grad.numpy()


def test_multidiscrete_gradient_matches_torch_autograd() -> None:
    pytest.importorskip("torch")
    net = Network(obs_dim=5, n_actions=9, hidden=4, nvec=(3, 2, 4))
    assert net.dim == 4 * (5 + 9 + 1) and net.draws == 4
    rng = np.random.default_rng(3)
    m, L = 4, 6
    theta = rng.normal(size=(m, net.dim))
    obs = rng.normal(size=(m, L + 1, 5))
    acts = rng.integers(0, [3, 2, 4], size=(m, L, 3))
    rew = rng.normal(size=(m, L))
    lengths = np.array([6, 2, 1, 4])
    boot = np.array([True, False, True, False])
    g = loss_gradients(net, theta, obs, acts, rew, lengths, boot, gamma=0.9, lam=0.5, beta=0.02)
    for i in range(m):
        ref = _torch_multi_gradient(net, theta[i], obs[i], acts[i], rew[i], lengths[i], boot[i],
                                    gamma=0.9, lam=0.5, beta=0.02)  # fmt: skip
        np.testing.assert_allclose(g[i], ref, rtol=1e-9, atol=1e-12)


def test_multidiscrete_acting_explores_each_component_and_takes_each_argmax() -> None:
    net = Network(obs_dim=2, n_actions=5, hidden=3, nvec=(3, 2))
    theta = np.zeros((3, net.dim))
    theta[:, :6] = 1.0  # h = (1, 1, 1) for obs (0.5, 0.5)
    wp = theta[:, 6:21].reshape(3, 5, 3)
    wp[:, 2] = 1.0  # component 0: index 2 is the argmax
    wp[:, 3] = 1.0  # component 1: index 0
    u = np.array([[0.1, 0.0, 0.99], [0.1, 0.5, 0.2], [0.9, 0.0, 0.99]])  # rows 0, 1 explore
    a = net.act(theta, np.full((3, 2), 0.5), u, np.full(3, 0.5), sample=False)
    np.testing.assert_array_equal(a, [[0, 1], [1, 0], [2, 0]])
    s = net.act(theta, np.full((3, 2), 0.5), u, np.zeros(3), sample=True)  # inverse CDFs
    assert s.shape == (3, 2) and s.dtype == np.int64 and s[0, 0] == 0 and s[0, 1] == 1


class MultiPush(gym.Env):
    """A point pushed by a MultiDiscrete([3, 2], start=[-1, 0]) action (force a0 - a1 / 2), or
    a MultiBinary(2) one; the private ``mass`` divides the force. It asserts that every action
    it is sent lies in its space, and records them."""

    def __init__(self, space: str = "multidiscrete", render_mode=None) -> None:
        self.action_space = {
            "multidiscrete": gym.spaces.MultiDiscrete([3, 2], start=[-1, 0]),
            "multibinary": gym.spaces.MultiBinary(2),
        }[space]
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.mass, self.sent = 1.0, set()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.s = self.np_random.uniform(-0.1, 0.1, 2)
        return self.s.copy(), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        a = np.asarray(action, np.float64).ravel()
        self.sent.add(tuple(a.tolist()))
        self.s[1] += (a[0] - a[1] / 2) / self.mass * 0.1
        self.s[0] += self.s[1] * 0.1
        return self.s.copy(), -abs(float(self.s[0])), bool(abs(self.s[0]) > 1), False, {}


for _sp in ("multidiscrete", "multibinary"):
    if f"Test{_sp}-v0" not in gym.registry:
        gym.register(f"Test{_sp}-v0", entry_point=f"{__name__}:MultiPush",
                     kwargs={"space": _sp}, max_episode_steps=30)  # fmt: skip


@pytest.mark.parametrize(
    ("space", "nvec", "sent"),
    [("multidiscrete", (3, 2), {-1.0, 0.0, 1.0}), ("multibinary", (2, 2), {0.0, 1.0})],
)
def test_multi_actions_are_sent_in_the_space_with_their_start(space, nvec, sent) -> None:
    """They were refused ('MultiDiscrete is not yet'). The network's indices are sent as start +
    index in the space's dtype (the env asserts it)."""
    info, _ = check_private_param(f"Test{space}-v0", "mass", [0.5, 2.0])
    assert info.nvec == nvec and info.n_actions == sum(nvec) and info.box is None
    cfg = GymPgcConfig(env_id=f"Test{space}-v0", private_param="mass", values=(0.5, 2.0),
                       mechanism="none", n_agents=3, max_submissions=9)  # fmt: skip
    assert cfg.network.dim == 16 * (2 + sum(nvec) + 1)
    env = make_param_vector_env(info, "mass", 2)
    env.set_param(np.arange(2), np.ones(2))
    env.reset(seed=[0, 1])
    for a in ([[0, 0], [nvec[0] - 1, 1]], [[1, 1], [0, 0]]):
        env.step(np.array(a))
    got = set().union(*(e.unwrapped.sent for e in env.inner.envs))
    env.close()
    assert {x for t in got for x in t[:1]} == sent


@pytest.mark.parametrize("space", ["multidiscrete", "multibinary"])
def test_multi_action_runs_are_charged_and_noised_as_discrete_ones(tmp_path, space) -> None:
    """The same release call as a Discrete run (MountainCar's force): every report charged once
    with the same event, noise of the same Laplace scale (mean |noise| / b within 6 / sqrt(n):
    false failure < 1e-8, normal approximation; fixed seed)."""
    cfg, n, events, noise, b = _ledger_and_noise(tmp_path, f"Test{space}-v0", "mass", (0.5, 2.0))
    _, n0, ev0, _, b0 = _ledger_and_noise(tmp_path, "MountainCar-v0", "force", (0.0005, 0.002))
    assert cfg.network.nvec and n == n0 == noise.shape[0] == 12 and events == ev0 and b == b0
    assert abs(np.abs(noise).mean() / b - 1.0) < 6.0 / math.sqrt(noise.size)


def test_a_multidiscrete_run_trains_and_is_attacked_from_the_cli(tmp_path, capsys) -> None:
    run = tmp_path / "md"
    argv = ["train", "pgc-a3c", "--env", "Testmultidiscrete-v0", "--private-param",
            "mass=0.5,2", "--mechanism", "none", "--agents", "4", "--max-submissions", "16",
            "--out", str(run), "--no-progress", "--json"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "10", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n"] == 16 and res["k"] == 2


if "TestEmptyMulti-v0" not in gym.registry:
    _empty = gym.spaces.MultiDiscrete(np.zeros((2, 0), int))
    gym.register("TestEmptyMulti-v0", entry_point="tests.test_gym_continuous:SpacesCartPole",
                 kwargs={"action_space": _empty})  # fmt: skip
_NESTED = {  # Tuple and Dict actions mixing discrete and Box leaves: tests/test_gym_continuous.py
    "TestTupleNested-v0": gym.spaces.Tuple((gym.spaces.Discrete(3, start=-1), gym.spaces.Tuple(
        (gym.spaces.MultiBinary(2), gym.spaces.MultiDiscrete([2, 4], start=[5, 0]))))),
    "TestDictBox-v0": gym.spaces.Dict({"z": gym.spaces.Box(-1, 1, (2,)), "a": gym.spaces.Box(
        0, 3, (1, 1), np.int64)}),
}  # fmt: skip


class NestedPush(MultiPush):
    """MultiPush with a Tuple or Dict action: pushed by the sum of its numbers."""

    def __init__(self, env_id: str, render_mode=None) -> None:
        super().__init__()
        self.action_space, self.sent = _NESTED[env_id], []

    def step(self, action):
        assert self.action_space.contains(action), action
        self.sent.append(action)
        self.s[1] += float(np.sum(gym.spaces.flatten(self.action_space, action))) / self.mass / 99
        self.s[0] += self.s[1] * 0.1
        return self.s.copy(), -abs(float(self.s[0])), bool(abs(self.s[0]) > 1), False, {}


for _id in _NESTED:
    if _id not in gym.registry:
        gym.register(_id, entry_point=f"{__name__}:NestedPush", kwargs={"env_id": _id},
                     max_episode_steps=30)  # fmt: skip


def test_actions_with_no_component_are_refused():  # an empty Tuple: Gymnasium's make refuses it
    with pytest.raises(InvalidParameterError, match=r"MultiDiscrete\(\[\]\): .*no component"):
        check_private_param("TestEmptyMulti-v0", "mass", [0.5, 1.0])


@pytest.mark.parametrize(
    ("env_id", "nvec", "box"),
    [("TestTupleNested-v0", (3, 2, 2, 2, 4), None),
     ("TestDictBox-v0", None, ((0.0, -1.0, -1.0), (3.0, 1.0, 1.0)))],  # Dict: keys sorted
)  # fmt: skip
def test_tuple_and_dict_actions_are_their_leaves_sent_in_their_structure(env_id, nvec, box):
    """They were refused ('a Tuple action space is not supported'). All-discrete leaves are one
    categorical head per component (as a MultiDiscrete), all-Box leaves one Gaussian head over
    their bounds; the env is sent a tuple or dict of its leaves (start + index, a Box clipped
    and an integer Box rounded), which it asserts with action_space.contains."""
    info, _ = check_private_param(env_id, "mass", [0.5, 2.0])
    assert info.nvec == nvec and info.box == box
    cfg = GymPgcConfig(env_id=env_id, private_param="mass", values=(0.5, 2.0), mechanism="none",
                       n_agents=2, max_submissions=4)  # fmt: skip
    assert cfg.network.dim == 16 * (2 + (sum(nvec) if nvec else 3) + 1) + (0 if nvec else 3)
    env = make_param_vector_env(info, "mass", 2)
    env.set_param(np.arange(2), np.ones(2))
    env.reset(seed=[0, 1])
    hi = np.array([[2, 1, 1, 1, 3], [0, 0, 0, 0, 0]]) if nvec else np.array([[2.6, 5, -0.2]] * 2)
    env.step(hi)
    sent = env.inner.envs[0].unwrapped.sent[-1]
    env.close()
    if nvec:  # start + index, leaf by leaf
        assert sent[0] == 1 and sent[1][0].tolist() == [1, 1] and sent[1][1].tolist() == [6, 3]
    else:  # rounded (2.6 -> 3), clipped (5 -> 1)
        assert sent["a"].tolist() == [[3]] and sent["z"].dtype == np.float32
        assert sent["z"].tolist() == [1.0, np.float32(-0.2)]


@pytest.mark.slow  # 9 s; the default suite's test is the one above
def test_a_tuple_action_run_trains_and_is_attacked_from_the_cli(tmp_path, capsys) -> None:
    run = tmp_path / "tup"
    argv = ["train", "pgc-a3c", "--env", "TestTupleNested-v0", "--private-param",
            "mass=0.5,2", "--mechanism", "laplace", "--epsilon", "1", "--agents", "4",
            "--max-submissions", "8", "--out", str(run), "--no-progress", "--json"]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "10", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n"] == 8 and res["k"] == 2


def test_sizes_count_every_number_of_an_action() -> None:
    """training/sizes.py counted one number per action per step: a MultiBinary(400) env's
    episodes hold 400 per step (each agent's (steps, 400) int64 buffer: 30 x 400 x 8 B)."""

    class Wide(MultiPush):
        def __init__(self, render_mode=None) -> None:
            super().__init__("multibinary")
            self.action_space = gym.spaces.MultiBinary(400)

    if "TestWideBinary-v0" not in gym.registry:
        gym.register("TestWideBinary-v0", entry_point=Wide, max_episode_steps=30)
    kw = {"private_param": "mass", "values": (0.5, 2.0), "hidden": 1, "n_agents": 2}
    wide = GymPgcConfig(env_id="TestWideBinary-v0", **kw)
    narrow = GymPgcConfig(env_id="Testmultibinary-v0", **kw)

    def episodes(cfg):
        return next(e.nbytes for e in gym_pgc_estimates(cfg) if "episodes" in e.what)

    d_part = 2 * 4 * 8 * (wide.network.dim - narrow.network.dim)  # theta copies
    assert episodes(wide) - episodes(narrow) - d_part >= 2 * 31 * (400 - 2) * 8
