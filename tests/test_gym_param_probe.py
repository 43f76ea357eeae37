"""PGC-A3C on a user's Gymnasium environment: the private parameter's probe and the envs that
test it (action spaces with a start, int parameters, diverging steps, user code failing in close,
a property or a set, nested attributes, image observations, the old Gym API). Split from
tests/test_gym_pgc.py (1,027 lines) in session 52: one concern a file."""

from __future__ import annotations

import enum
import json
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.gym_envs import check_private_param, make_param_vector_env
from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig
from ldp_audit.training.pgc_a3c_gym.trainer import train


class CenteredActionsCartPole(gym.Wrapper):
    """CartPole with actions -1 (left) and 1 (right) as Discrete(2, start=-1); a 0 or a 2 is
    refused."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1").unwrapped)
        self.action_space = gym.spaces.Discrete(2, start=-1)

    def step(self, action):
        assert action in (-1, 0), f"action {action!r} outside {self.action_space}"
        return self.env.step(int(action) + 1)


if "TestCenteredActions-v0" not in gym.registry:
    gym.register("TestCenteredActions-v0", entry_point=f"{__name__}:CenteredActionsCartPole",
                 max_episode_steps=50)  # fmt: skip


def test_a_discrete_space_with_a_start_gets_its_own_actions() -> None:
    """Discrete(n, start=s): the env is sent s..s+n-1 (it was sent 0..n-1: an env that does not
    check its actions trained on the wrong ones in silence)."""
    cfg = GymPgcConfig(env_id="TestCenteredActions-v0", private_param="length",
                       values=(0.25, 1.0), mechanism="none", max_submissions=20)  # fmt: skip
    res = train(cfg, seed=0)
    assert res.submissions.tolist() == [20] and cfg.network.n_actions == 2


class SubstepsCartPole(CartPoleEnv):
    """CartPole stepped ``substeps`` times per action: an int attribute used as a count."""

    def __init__(self, render_mode=None) -> None:
        super().__init__(render_mode=render_mode)
        self.substeps = 1

    def step(self, action):
        for _ in range(self.substeps):  # range(2.0) raises
            out = super().step(action)
        return out


if "TestSubsteps-v0" not in gym.registry:
    gym.register("TestSubsteps-v0", entry_point=f"{__name__}:SubstepsCartPole",
                 max_episode_steps=50)  # fmt: skip


def test_an_int_parameter_takes_int_candidates() -> None:
    """An int attribute was set as a float (2.0) and the env refused every candidate ("rejects
    value 1.0 (TypeError ...)"): integral candidates are set as ints, others refused by name."""
    info, vals = check_private_param("TestSubsteps-v0", "substeps", [1, 3])
    env = make_param_vector_env(info, "substeps", 2)
    env.set_param(np.arange(2), np.asarray(vals))
    assert [type(u.substeps) for u in env._unwrapped] == [int, int]
    env.reset(seed=[0, 0])
    obs = env.step(np.zeros(2, dtype=np.int64))[0]
    assert not np.array_equal(obs[0], obs[1])  # 1 vs 3 substeps from the same state
    with pytest.raises(InvalidParameterError, match=r"'substeps' .* is an integer .* 2\.5"):
        check_private_param("TestSubsteps-v0", "substeps", [1, 2.5])


def test_an_int_default_takes_a_float_candidate_the_env_accepts() -> None:
    """MountainCar's goal_velocity defaults to the int 0: 0.06 was refused ('is an integer ...
    make the env's default a float', which a user of Gymnasium's own env cannot do; 2026-12-07
    probe). A non-integral candidate of an int attribute is now refused only where the env fails
    with it (a count, above); here both values act and the run trains."""
    info, vals = check_private_param("MountainCar-v0", "goal_velocity", [0, 0.06])
    assert vals == (0.0, 0.06) and info.native
    cfg = GymPgcConfig(env_id="MountainCar-v0", private_param="goal_velocity", values=(0, 0.06),
                       mechanism="laplace", epsilon=1.0, trials=2, n_agents=3,
                       max_submissions=4, episode_steps=200)  # fmt: skip
    assert train(cfg, seed=0).submissions.tolist() == [4, 4]


@pytest.mark.parametrize("dt", [2.0, 50.0, 1e10])
def test_a_diverging_acrobot_step_is_refused_not_a_hang(dt: float) -> None:
    """Acrobot's ``dt=0.2,50`` never returned: the RK4 step diverged and ``wrap``'s loop ran
    without end (Gymnasium's single env in the probe, the compiled batch in training)."""
    with pytest.raises(InvalidParameterError, match=rf"'dt'.*diverged.*dt={dt!r}"):
        check_private_param("Acrobot-v1", "dt", [0.2, dt])
    info, _ = check_private_param("Acrobot-v1", "dt", [0.2, 0.4])
    env = make_param_vector_env(info, "dt", 2)
    env.set_param(np.arange(2), np.array([0.2, 0.2]))
    env.reset(seed=[0, 1])
    env.set_param(np.array([1]), np.array([dt]))  # a row diverging in training: named
    with pytest.raises(InvalidParameterError, match=rf"row 1, dt={dt!r}"):
        for _ in range(30):
            env.step(np.array([0, 2]))


class FragileCartPole(CartPoleEnv):
    """CartPole whose own code raises: in ``close``, in a property, or in a ``__setattr__``
    that refuses a large ``force_mag`` once any copy has been reset with a training seed (the
    probe's are < 10**4: the probe passes, training fails; each episode of a used row starts
    in a fresh copy since 2026-12-07, so one copy's own reset no longer precedes a set)."""

    trained = False  # a test of the setattr case clears it first

    def __init__(self, fail: str = "close") -> None:
        self.fail = fail
        super().__init__()

    def reset(self, *, seed=None, options=None):
        if seed is not None and seed >= 10**6:
            FragileCartPole.trained = True
        return super().reset(seed=seed, options=options)

    def close(self) -> None:
        if self.fail == "close":
            raise RuntimeError("the user's close broke")

    @property
    def broken(self) -> float:
        raise RuntimeError("the user's property broke")

    def __setattr__(self, key, value) -> None:
        if key == "force_mag" and self.fail == "setattr" and self.trained and value > 10:
            raise ValueError("force_mag must stay <= 10 once reset")
        super().__setattr__(key, value)


for _fail in ("close", "property", "setattr"):
    if f"TestFragile-{_fail}-v0" not in gym.registry:
        gym.register(f"TestFragile-{_fail}-v0", entry_point=f"{__name__}:FragileCartPole",
                     kwargs={"fail": _fail}, max_episode_steps=50)  # fmt: skip


@pytest.mark.parametrize(
    ("fail", "param", "match"),
    [("close", "force_mag=5,20", r"'TestFragile-close-v0' raised RuntimeError in close: the "
      "user's close broke"),
     ("property", "broken=1,2", r"raised RuntimeError in reading 'broken': the user's property"),
     ("property", "nosuch=1,2", r"'nosuch' is not an attribute of FragileCartPole .*'force_mag'"),
     ("setattr", "force_mag=5,20", r"raised ValueError in setting force_mag=20\.0: force_mag "
      "must stay")],
)  # fmt: skip
def test_a_user_env_raising_in_close_a_property_or_a_set_is_named_exit_2(
    tmp_path, capsys, fail, param, match
) -> None:
    """Each was "a bug in ldp-audit" (exit 3, traceback): a ``close`` that raises (after the
    check), a property that raises (read as the parameter, or by the listing of numeric
    attributes for a name that is not there), a set that raises in training."""
    FragileCartPole.trained = False
    run = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--env", f"TestFragile-{fail}-v0", "--private-param", param,
            "--mechanism", "none", "--max-submissions", "40", "--out", str(run),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and "Traceback" not in err, err
    if fail == "setattr":  # failed in training: the run directory says so
        assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"


def test_the_probe_runs_the_episodes_that_train() -> None:
    """MountainCar's goal_position acts only where the car reaches the goal: over 20-step
    episodes (--episode-steps 20) it never does, but the native batch's probe ran 200-step
    episodes, accepted it, and the attack reported chance (0.550 [0.385, 0.707], 40 agents)."""
    check_private_param("MountainCar-v0", "goal_position", [0.45, 0.5])  # 200 steps: acts
    with pytest.raises(InvalidParameterError, match=r"'goal_position' has no effect"):
        check_private_param("MountainCar-v0", "goal_position", [0.45, 0.5], max_episode_steps=20)


def test_two_candidates_the_probe_cannot_tell_apart_are_refused() -> None:
    """MountainCar's max_speed 0.07 and 0.14 (no speed reached is above 0.07) gave the same
    trace; with 0.035 beside them the parameter had an effect and was accepted, so the leakage
    benchmark read a 2-way distinction against a 3-way chance (0.483 vs 1/3, at most 2/3)."""
    with pytest.raises(InvalidParameterError, match=r"candidates 0\.07 and 0\.14 give the same"):
        check_private_param("MountainCar-v0", "max_speed", [0.035, 0.07, 0.14])
    assert check_private_param("MountainCar-v0", "max_speed", [0.035, 0.07])[1] == (0.035, 0.07)


class _Pole:
    def __init__(self) -> None:
        self.length = 0.5


class NestedCartPole(CartPoleEnv):
    """CartPole whose pole length lives in a sub-object (``self.pole.length``), given as the
    attribute ``pole_length`` by a property with a setter (the way docs/gymnasium.md gives);
    ``reset`` may ignore its seed (``ignore_seed``: Gymnasium's unseeded generator)."""

    def __init__(self, ignore_seed: bool = False) -> None:
        super().__init__()
        self.pole, self.ignore_seed = _Pole(), ignore_seed

    @property
    def pole_length(self) -> float:
        return self.pole.length

    @pole_length.setter
    def pole_length(self, value: float) -> None:
        self.pole.length = value

    def reset(self, *, seed=None, options=None):
        return super().reset(seed=None if self.ignore_seed else seed, options=options)

    def step(self, action):
        self.length, self.polemass_length = self.pole.length, self.masspole * self.pole.length
        return super().step(action)


for _ignore in (False, True):
    if f"TestNested-{_ignore}-v0" not in gym.registry:
        gym.register(f"TestNested-{_ignore}-v0", entry_point=f"{__name__}:NestedCartPole",
                     kwargs={"ignore_seed": _ignore}, max_episode_steps=50)  # fmt: skip


def test_a_nested_parameter_through_a_property_and_an_env_ignoring_its_seed() -> None:
    """A value in a sub-object, given as a property with a setter (the way the refusal of
    ``--private-param a.b=...`` names), is set row by row; an env that drops reset's seed is
    told to pass it on (the message named only self.np_random, which such an env already used)."""
    info, vals = check_private_param("TestNested-False-v0", "pole_length", [0.5, 1.0])
    env = make_param_vector_env(info, "pole_length", 2)
    env.set_param(np.arange(2), np.asarray(vals))
    assert [u.pole.length for u in env._unwrapped] == [0.5, 1.0]
    with pytest.raises(InvalidParameterError, match=r"not reproducible.*super\(\)\.reset\(seed="):
        check_private_param("TestNested-True-v0", "pole_length", [0.5, 1.0])


class ImageCartPole(CartPoleEnv):
    """CartPole seen as an (8, 8, 3) image (its state tiled) with an attribute it never reads."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (8, 8, 3), np.float32)
        self.unread = 1.0

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return np.resize(obs, (8, 8, 3)), info

    def step(self, action):
        obs, *rest = super().step(action)
        return np.resize(obs, (8, 8, 3)), *rest


if "TestImage-v0" not in gym.registry:
    gym.register("TestImage-v0", entry_point=f"{__name__}:ImageCartPole", max_episode_steps=200)


def test_the_probe_of_an_image_env_holds_digests_not_traces(monkeypatch) -> None:
    """The long probe (10,000 steps for this env) kept each candidate's whole trace: 1 GB for a
    32x32x3 image, 7 GB at 84x84x3; for this 8x8x3 one a 65 MB peak under tracemalloc (3 traces
    of 10,000 x 196 floats, then joined). It keeps a SHA-256 per trace. Here the probe's episodes
    are cut to 50 steps (2,500 in all: three kept traces would be 11.8 MB before they are joined,
    over the bound; the digests' peak measured 55 kB), which took this test from 11 s to 2.8 s
    under tracemalloc."""
    import tracemalloc

    from ldp_audit.training import gym_envs

    monkeypatch.setattr(gym_envs, "NO_EFFECT_EPISODE", 50)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidParameterError, match=r"'unread' has no effect"):
            check_private_param("TestImage-v0", "unread", [1.0, 2.0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8e6, peak


class OldApiCartPole(CartPoleEnv):
    """CartPole written to the old Gym API: ``step`` returns 4 values (no truncation)."""

    def step(self, action):
        obs, r, term, _, info = super().step(action)
        return obs, r, term, info


if "TestOldApi-v0" not in gym.registry:
    gym.register("TestOldApi-v0", entry_point=f"{__name__}:OldApiCartPole", max_episode_steps=50)


def test_an_env_failing_with_its_own_value_is_not_blamed_on_a_candidate() -> None:
    """An env that fails whatever the value (the old Gym API's 4-tuple step) was refused as
    "rejects value 0.25", sending the user to change candidates; a failure of one candidate
    only is still named as that candidate's."""
    with pytest.raises(InvalidParameterError, match=r"fails whatever the candidates \(with its "
                       r"own length=0\.5 as well\).*expected 5, got 4"):  # fmt: skip
        check_private_param("TestOldApi-v0", "length", [0.25, 1.0])
    with pytest.raises(InvalidParameterError, match=r"^private parameter 'length': env "
                       r"'CartPole-v1' fails with value 1e-300: .*non-finite obs"):  # fmt: skip
        check_private_param("CartPole-v1", "length", [0.5, 1e-300])


class ReadOnlyCartPole(CartPoleEnv):
    """CartPole with ``drag``, a property without a setter (read in ``step``)."""

    @property
    def drag(self) -> float:
        return 0.5

    def step(self, action):
        obs, r, term, trunc, info = super().step(action)
        return obs, r * self.drag, term, trunc, info


if "TestReadOnly-v0" not in gym.registry:
    gym.register("TestReadOnly-v0", entry_point=f"{__name__}:ReadOnlyCartPole",
                 max_episode_steps=20)  # fmt: skip


def test_a_read_only_property_is_named_not_blamed_on_the_env() -> None:
    """A property without a setter was refused as "env fails whatever the candidates (with its
    own drag=0.5 as well)" (session 56 probe, `train pgc-a3c --env-module`): the env works;
    the parameter cannot be set. Refused before any probe, naming it."""
    with pytest.raises(InvalidParameterError, match=r"^private parameter 'drag' of "
                       r"ReadOnlyCartPole is a read-only property \(no setter\)"):  # fmt: skip
        check_private_param("TestReadOnly-v0", "drag", [0.25, 1.0])


class NumpyScalarCartPole(CartPoleEnv):
    """CartPole whose push scale is a float32 and substep count an int64, read as NumPy
    numbers (``.dtype``, ``.item()``), which a Python number lacks."""

    def __init__(self, render_mode=None) -> None:
        super().__init__(render_mode=render_mode)
        self.push = np.float32(1.0)
        self.nsub = np.int64(1)

    def step(self, action):
        self.force_mag = 10.0 * float(np.ones(1, dtype=self.push.dtype)[0] * self.push)
        for _ in range(self.nsub.item()):
            out = super().step(action)
        return out


if "TestNumpyScalar-v0" not in gym.registry:
    gym.register("TestNumpyScalar-v0", entry_point=f"{__name__}:NumpyScalarCartPole",
                 max_episode_steps=20)  # fmt: skip


def test_a_numpy_number_parameter_keeps_its_type() -> None:
    """A float32 or int64 attribute was set as a Python number, so an env reading its dtype
    failed and was refused as "fails whatever the candidates (with its own
    push=np.float32(1.0) as well)" (session 56 probe); a candidate its type cannot hold is
    refused naming it (np.float32(1e39) is inf)."""
    assert check_private_param("TestNumpyScalar-v0", "push", [0.5, 2.0])[1] == (0.5, 2.0)
    assert check_private_param("TestNumpyScalar-v0", "nsub", [1, 3])[1] == (1.0, 3.0)
    env = make_param_vector_env(check_private_param("TestNumpyScalar-v0", "push", [0.5, 2])[0],
                                "push", 2)  # fmt: skip
    env.set_param(np.arange(2), np.array([0.5, 2.0]))
    assert [type(e.unwrapped.push) for e in env.inner.envs] == [np.float32, np.float32]
    env.close()
    for name, big, kind in (("push", 1e39, "float32"), ("nsub", 1e19, "int64")):
        with pytest.raises(InvalidParameterError, match=f"candidate .* does not fit the "
                           f"attribute's type {kind}"):  # fmt: skip
            check_private_param("TestNumpyScalar-v0", name, [1, big])


def test_candidates_a_numpy_number_attribute_cannot_tell_apart_are_named() -> None:
    """A float32 attribute with candidates 0.5 and 0.5000000001 (one float32 value) was refused
    as "has no effect ... An env that reads the attribute only in __init__", after the long
    probe (session 57 probe, `train pgc-a3c --env-module`): the env reads it in step; the type
    holds one value. Refused before any probe, naming both and the type."""
    with pytest.raises(InvalidParameterError, match=r"^private parameter 'push' of "
                       r"NumpyScalarCartPole is a float32 .*candidates 0\.5 and 0\.5000000001 "
                       r"are the same value"):  # fmt: skip
        check_private_param("TestNumpyScalar-v0", "push", [0.5, 2.0, 0.5000000001])


class Gear(enum.IntEnum):
    LOW = 1
    HIGH = 2


class GearCartPole(CartPoleEnv):
    """CartPole whose push is scaled by ``gear``, an ``IntEnum`` read as ``gear.value``."""

    def __init__(self, render_mode=None) -> None:
        super().__init__(render_mode=render_mode)
        self.gear = Gear.LOW

    def step(self, action):
        self.force_mag = 10.0 * self.gear.value
        return super().step(action)


if "TestGear-v0" not in gym.registry:
    gym.register("TestGear-v0", entry_point=f"{__name__}:GearCartPole", max_episode_steps=20)


def test_an_int_enum_parameter_keeps_its_type() -> None:
    """An ``IntEnum`` attribute was set as a plain int, so an env reading ``gear.value`` was
    refused as "fails whatever the candidates (with its own gear=<Gear.LOW: 1> as well)"
    (session 58 probe, `train pgc-a3c --env-module`): the env works with its own value. Each
    candidate is now set as a member; a candidate that is no member is refused naming it."""
    info, vals = check_private_param("TestGear-v0", "gear", [1, 2])
    assert vals == (1.0, 2.0)
    env = make_param_vector_env(info, "gear", 2)
    env.set_param(np.arange(2), np.array([2.0, 1.0]))
    assert [e.unwrapped.gear for e in env.inner.envs] == [Gear.HIGH, Gear.LOW]
    assert all(type(e.unwrapped.gear) is Gear for e in env.inner.envs)
    env.close()
    with pytest.raises(InvalidParameterError, match="candidate 3 does not fit the attribute's "
                       "type Gear"):  # fmt: skip
        check_private_param("TestGear-v0", "gear", [1, 3])


class GainWrapper(gym.Wrapper):
    """A user's wrapper holding a numeric attribute of its own: rewards scaled by ``gain``."""

    gain = 1.0

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        return obs, r * self.gain, term, trunc, info


if "TestGainWrapped-v0" not in gym.registry:
    gym.register("TestGainWrapped-v0", max_episode_steps=20,
                 entry_point=lambda: GainWrapper(CartPoleEnv()))  # fmt: skip


def test_a_parameter_on_a_wrapper_is_named_as_such() -> None:
    """The private attribute is set on ``env.unwrapped``; one that lives on a wrapper of the
    registered env was refused as "not an attribute of CartPoleEnv", naming no wrapper
    (2026-12-07 probe, session 53): the message now says where it is and what to do."""
    with pytest.raises(InvalidParameterError) as exc:
        check_private_param("TestGainWrapped-v0", "gain", [0.5, 2.0])
    msg = str(exc.value)
    assert "'gain' is not an attribute of CartPoleEnv" in msg and "'force_mag'" in msg
    assert "it is an attribute of the wrapper GainWrapper" in msg, msg


def _zero_d_cartpole(render_mode=None):
    env = CartPoleEnv(render_mode=render_mode)
    env.force_mag = np.array(10.0)  # a NumPy 0-d array: a number held as an array
    return env


if "TestZeroD-v0" not in gym.registry:
    gym.register("TestZeroD-v0", entry_point=_zero_d_cartpole, max_episode_steps=50)


def test_a_parameter_held_as_a_0d_array_is_a_number() -> None:
    """A private attribute held as a 0-d NumPy array was refused as "not numeric (it is
    array(10.), ndarray)" (session 53 probe); it is a number: accepted, and each candidate is set
    as a 0-d array as the env holds it."""
    info, vals = check_private_param("TestZeroD-v0", "force_mag", [5, 20])
    assert vals == (5.0, 20.0)
    env = make_param_vector_env(info, "force_mag", 1)
    env.set_param(np.arange(1), np.array([20.0]))
    got = env.inner.envs[0].unwrapped.force_mag
    assert isinstance(got, np.ndarray) and got.shape == () and float(got) == 20.0
    env.close()
