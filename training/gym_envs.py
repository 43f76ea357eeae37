"""Gymnasium environments whose rows differ by one private parameter, batched.

The generic PGC-A3C path (:mod:`ldp_audit.training.pgc_a3c_gym.trainer`) runs many agents at
once, each in its own copy of one Gymnasium environment that differs from the others by one
attribute of
``env.unwrapped`` (Acrobot's ``LINK_MASS_1``, MountainCar's ``force``, a user env's ``friction``).
This module validates such a parameter (:func:`check_private_param`) and builds the batch
(:func:`make_param_vector_env`), a :class:`gymnasium.vector.VectorEnv` with no hidden
auto-reset (Gymnasium's ``AutoresetMode.DISABLED``: the caller resets the rows it chooses, with
the seeds it chooses) plus ``set_param(rows, values)`` (each subclass defines it) to give each
row its value:

- Acrobot-v1 and MountainCar-v0 (Gymnasium's own classes, made without keyword arguments):
  their equations of motion written once over all rows in NumPy (:class:`AcrobotParamVectorEnv`,
  :class:`MountainCarParamVectorEnv`), with every physical constant a per-row array. Tested
  against Gymnasium's single environment from the same states, seeds and actions (same
  observations, rewards and terminations up to floating-point rounding: NumPy's array ``x**2``
  and a scalar ``pow`` may differ in the last bit).
- Any other environment (CartPole's ``length``, a user env registered through
  ``--env-module``; a ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or bounded ``Box``
  action space, an observation Gymnasium can flatten): Gymnasium's own
  :class:`gymnasium.vector.SyncVectorEnv`, one environment per row, the attribute set on each
  row's ``env.unwrapped``. CartPole derives ``total_mass`` and ``polemass_length`` from
  ``masspole``, ``masscart`` and ``length`` in its constructor; they are recomputed after a set.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import itertools
import math
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numba as nb
import numpy as np
from gymnasium.envs.classic_control.acrobot import AcrobotEnv
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.mountain_car import MountainCarEnv
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

from ldp_audit.errors import InvalidParameterError, LdpAuditError, UserCodeError
from ldp_audit.validation import check_real_in

__all__ = [
    "EnvInfo",
    "ParamVectorEnv",
    "AcrobotParamVectorEnv",
    "MountainCarParamVectorEnv",
    "SyncParamVectorEnv",
    "check_candidates",
    "check_private_param",
    "import_env_module",
    "make_param_vector_env",
]

#: Attributes the native Acrobot batch takes per row (all of AcrobotEnv's physical constants).
ACROBOT_PARAMS = (
    "LINK_LENGTH_1",
    "LINK_LENGTH_2",
    "LINK_MASS_1",
    "LINK_MASS_2",
    "LINK_COM_POS_1",
    "LINK_COM_POS_2",
    "LINK_MOI",
    "MAX_VEL_1",
    "MAX_VEL_2",
    "dt",
)
#: Attributes the native MountainCar batch takes per row.
MOUNTAINCAR_PARAMS = (
    "force",
    "gravity",
    "max_speed",
    "min_position",
    "max_position",
    "goal_position",
    "goal_velocity",
)
#: Gymnasium classes -> their physical constants a private parameter may be: each candidate
#: must be > 0 and a normal double (a negative pole length or a subnormal gravity means nothing;
#: the env would still step). A user env's attributes: any sign.
POSITIVE_PARAMS = {
    "CartPoleEnv": ("gravity", "masscart", "masspole", "length", "force_mag", "tau"),
    "AcrobotEnv": ACROBOT_PARAMS,
    "MountainCarEnv": ("force", "gravity", "max_speed"),
    "PendulumEnv": ("g", "m", "l", "dt", "max_speed", "max_torque"),
    "Continuous_MountainCarEnv": ("power", "max_speed"),
}
_MISSING = object()  # getattr's default: the attribute is not there
#: CartPole's quantities derived in its constructor from the ones a user sets.
_CARTPOLE_DERIVED = {
    "total_mass": lambda e: e.masspole + e.masscart,
    "polemass_length": lambda e: e.masspole * e.length,
}
#: Probe steps run on a throw-away environment per candidate value before any training.
PROBE_STEPS = 20
#: Episode length of the longer probe run when every candidate gave the same first PROBE_STEPS:
#: two episodes per observation coordinate (at most 24) and two more; the same trace again over
#: all of them refuses the parameter (it has no effect an attack could see).
NO_EFFECT_EPISODE = 200
#: The largest magnitude of a ``Box`` action bound: exploring actions, drawn within the bounds,
#: enter the Gaussian head's squared distance over a std down to e^-20 (Box(-1e200, 1e200)
#: trained until its gradient overflowed; at 1e308 the bounds' width overflowed and the probe
#: sent NaN actions). Float32's largest number, a common "unbounded" bound, is within it.
BOX_BOUND_MAX = 1e100
#: Seconds each call of the env's code may take in the probe (its ``probe_timeout``; None: no
#: limit, as in training).
_CALL_LIMIT: ContextVar[float | None] = ContextVar("gym_probe_call_limit", default=None)


class _Hung(BaseException):
    """Raised by SIGALRM in a call of the env's code that outlived the probe's limit; not an
    ``Exception``, so the env's own ``except Exception`` (or the probe's) does not swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Hung


@contextlib.contextmanager
def _bounded() -> Iterator[None]:
    """The body within the probe's limit per call (:data:`_CALL_LIMIT`): a SIGALRM timer in the
    main thread raises :class:`_Hung` at the Python line running then (an endless loop in pure
    Python, a blocking wait); no limit elsewhere: another thread, a timer already running."""
    limit = _CALL_LIMIT.get()
    if (
        limit is None
        or threading.current_thread() is not threading.main_thread()
        or signal.getitimer(signal.ITIMER_REAL)[0]
    ):
        yield
        return
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(limit, 1e-6))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True)
class EnvInfo:
    """What the trainer needs to know about a validated environment.

    Attributes:
        env_id: the Gymnasium id.
        obs_dim: size of the flattened observation.
        n_actions: number of discrete actions (a ``Box``: its number of dimensions; a
            ``MultiDiscrete``: the sum of its components' sizes).
        max_episode_steps: the spec's time limit (None if it has none).
        native: True where a batched NumPy implementation is used (Acrobot, MountainCar).
        box: a ``Box`` action space's (low, high), flattened (None: ``Discrete``).
        nvec: a ``MultiDiscrete`` (``MultiBinary``: 2 each) space's component sizes, flattened.
    """

    env_id: str
    obs_dim: int
    n_actions: int
    max_episode_steps: int | None
    native: bool
    box: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    nvec: tuple[int, ...] | None = None


def import_env_module(env_module: str | None) -> None:
    """Import a user module that registers Gymnasium environments (``--env-module``)."""
    if env_module is None:
        return
    if not isinstance(env_module, str) or not env_module.strip():
        raise InvalidParameterError(f"env_module must be a module name, got {env_module!r}")
    try:
        with _bounded():
            importlib.import_module(env_module)
    except _Hung:
        raise _Hung(f"importing {env_module!r}") from None
    except SystemExit as exc:  # at import: never the process's exit status (issue 38 item 7)
        raise InvalidParameterError(
            f"env_module: {env_module!r} called sys.exit({exc.code!r}) at import (a module that "
            "registers environments must not end the process)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure of user code is bad input here
        raise InvalidParameterError(
            f"env_module: cannot import {env_module!r} ({type(exc).__name__}: {exc})"
        ) from None


def _user(env_id: str, what: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, the user's env code (its constructor, reset, step, close, an attribute read
    or set): whatever it raises is an input error naming the env and the call (exit 2), never
    reported as a bug of this toolkit (a raising ``close`` or property was: exit 3)."""
    try:
        with _bounded():
            return fn(*args)
    except _Hung as hung:  # the probe's limit: this call did not return
        raise _Hung(hung.args[0] if hung.args else what) from None
    except LdpAuditError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything the env's code raises
        raise UserCodeError(f"env {env_id!r} raised {type(exc).__name__} in {what}: {exc}") from exc


def _make(env_id: str, max_episode_steps: int | None = None, checker: bool = True) -> Any:
    """``gym.make``; an observation space other than a ``Box`` that Gymnasium can flatten
    (``Discrete``: one-hot, ``MultiDiscrete``, ``Tuple``, ``Dict``...) through Gymnasium's own
    ``FlattenObservation`` (one that cannot is refused by :func:`check_private_param`). Without
    ``checker``, no PassiveEnvChecker (it only warns: a row's fresh copy, its first env had it)."""
    kw = {} if max_episode_steps is None else {"max_episode_steps": int(max_episode_steps)}
    kw |= {} if checker else {"disable_env_checker": True}
    env = gym.make(env_id, **kw)
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box) and space.is_np_flattenable:
        return gym.wrappers.FlattenObservation(env)
    return env


def _is_native(env_id: str, env: Any, name: str) -> bool:
    """Gymnasium's own Acrobot-v1 (``book`` dynamics, no torque noise) or MountainCar-v0, made
    without kwargs, and ``name`` one of the constants its batch takes per row."""
    u, spec = env.unwrapped, getattr(env, "spec", None)
    if spec is not None and spec.kwargs:
        return False
    if type(u) is AcrobotEnv and u.book_or_nips == "book" and float(u.torque_noise_max) == 0.0:
        return env_id == "Acrobot-v1" and name in ACROBOT_PARAMS
    return type(u) is MountainCarEnv and env_id == "MountainCar-v0" and name in MOUNTAINCAR_PARAMS


def _scalar(v: Any) -> Any:
    """A 0-d NumPy array's element (a number held as an array), else ``v``."""
    return v[()] if isinstance(v, np.ndarray) and v.ndim == 0 else v


def _is_number(v: Any) -> bool:
    """A real number, Python's or NumPy's (a 0-d array's too), not a bool."""
    v = _scalar(v)
    real = isinstance(v, (int, float, np.integer, np.floating))
    return real and not isinstance(v, (bool, np.bool_))


def check_candidates(
    name: str, values: Any, *, field: str = "values", positive: bool = False
) -> tuple[float, ...]:
    """A private parameter's candidate values as floats: a sequence of >= 2 distinct finite
    numbers (no bool, no string), none subnormal, and > 0 when ``positive`` (a physical
    constant); each refusal names the parameter, the field and the value."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, np.ndarray)):
        raise InvalidParameterError(
            f"{field} of private parameter {name!r} must be a sequence of numbers, got {values!r}"
        )
    out, where = [], f"private parameter {name!r} ({field})"
    for v in values:
        if not _is_number(v) or not math.isfinite(float(v)):
            raise InvalidParameterError(f"{where}: candidate {v!r} is not a finite number")
        f = float(v)
        if (f <= 0 and positive) or 0 < abs(f) < sys.float_info.min:
            what = "> 0 and " if positive else ""
            raise InvalidParameterError(
                f"{where}: candidate {v!r} must be {what}a normal double (|v| >= "
                f"{sys.float_info.min:g})" + (": a physical constant" if positive else "")
            )
        out.append(f)
    if len(out) < 2:
        raise InvalidParameterError(
            f"private parameter {name!r} needs at least two candidate values ({field}), got "
            f"{values!r}: the secret is one of them"
        )
    dup = sorted({v for v in out if out.count(v) > 1})
    if dup:
        raise InvalidParameterError(f"{where}: candidate values must be distinct, {dup} repeated")
    return tuple(out)


_ACTIONS = (
    "Discrete, MultiDiscrete, MultiBinary and bounded Box action spaces, and Tuple or Dict "
    "spaces whose leaves are all discrete or all Box, are supported"
)


_DISCRETE = (gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)


def _leaves(space: Any) -> list[Any]:
    """A ``Tuple``'s or ``Dict``'s spaces in order, nested ones flattened; any other: itself."""
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        subs = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        return [leaf for s in subs for leaf in _leaves(s)]
    return [space]


def _action_heads(env_id: str, space: Any) -> tuple[int, Any, tuple[int, ...] | None]:
    """(n_actions, box, nvec): a ``Discrete``'s n; a ``MultiDiscrete``'s or ``MultiBinary``'s
    component sizes, flattened (one categorical head each); a ``Box``'s finite (low, high),
    flattened (the alpha-greedy exploration draws within them). A ``Tuple`` or ``Dict`` is its
    leaves in order: all discrete, their components (a ``Discrete`` leaf is one); all ``Box``,
    their bounds concatenated. Any other space (a mix: the loss has one kind of head) is
    refused naming it and what is supported."""
    leaves = _leaves(space)
    if all(isinstance(s, _DISCRETE) for s in leaves):
        n = [s.n if isinstance(s, gym.spaces.Discrete) else getattr(s, "nvec", 2) for s in leaves]
        n = [c * np.ones(s.shape, np.int64) for s, c in zip(leaves, n, strict=True)]  # MultiBinary
        nvec = [int(k) for c in n for k in np.ravel(c).tolist()]
        if not nvec:
            raise InvalidParameterError(
                f"env {env_id!r} has action space {space}: it has no component to act on"
            )
        if isinstance(space, gym.spaces.Discrete):
            return nvec[0], None, None
        return sum(nvec), None, tuple(nvec)
    if not all(isinstance(s, gym.spaces.Box) for s in leaves):
        kinds = sorted({type(s).__name__ for s in leaves})
        kind = type(space).__name__ + (f" of {' and '.join(kinds)}" if leaves != [space] else "")
        raise InvalidParameterError(
            f"env {env_id!r} has action space {space}: a {kind} action space is not supported "
            f"(the network has categorical heads or a Gaussian head, not both); {_ACTIONS} "
            "(wrap the env so that its actions are one of them)"
        )
    lo = np.concatenate([np.asarray(s.low, np.float64).ravel() for s in leaves])
    hi = np.concatenate([np.asarray(s.high, np.float64).ravel() for s in leaves])
    if not lo.size or not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        raise InvalidParameterError(
            f"env {env_id!r} has action space {space}: a Box action space needs finite bounds "
            "and at least one dimension (the exploration draws actions uniformly within them)"
        )
    if max(np.abs(lo).max(), np.abs(hi).max()) > BOX_BOUND_MAX:
        raise InvalidParameterError(
            f"env {env_id!r} has action space {space}: a Box action space's bounds must be at "
            f"most {BOX_BOUND_MAX:g} in magnitude (the exploration draws actions within them and "
            "the Gaussian head's gradient overflows beyond); rescale the actions (RescaleAction)"
        )
    return lo.size, (tuple(lo.tolist()), tuple(hi.tolist())), None


def _batch_action(space: Any, a: np.ndarray, n: int) -> Any:
    """The network's actions for n rows, (n, width) (the leaves' numbers in order; a
    ``Discrete``: (n,)), in the batched structure of ``space``: a ``Box``'s clipped to its bounds
    (as SB3 and CleanRL do; an integer ``Box``'s rounded after the clip: cast, 3.7 would be
    sent as 3), an index as ``start + index`` (``MultiBinary``: 0), a ``Tuple`` or ``Dict`` leaf
    by leaf."""
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        a, parts, k = a.reshape(n, -1), [], 0
        for s in space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces:
            w = sum(int(np.prod(leaf.shape)) for leaf in _leaves(s))
            parts.append(_batch_action(s, a[:, k : k + w], n))
            k += w
        if isinstance(space, gym.spaces.Tuple):
            return tuple(parts)
        return dict(zip(space.spaces, parts, strict=True))
    if isinstance(space, gym.spaces.Box):
        rint = np.rint if np.issubdtype(space.dtype, np.integer) else np.asarray  # not cut
        a = rint(np.clip(a.reshape(n, -1), space.low.ravel(), space.high.ravel()))
        return a.reshape(n, *space.shape).astype(space.dtype)
    start = np.asarray(getattr(space, "start", 0), np.int64)
    return (start + np.asarray(a, np.int64).reshape(n, *space.shape)).astype(space.dtype)


def _check_physical(unwrapped: Any, name: str, vals: tuple[float, ...]) -> None:
    """A physical constant of a Gymnasium class (:data:`POSITIVE_PARAMS`) must be > 0."""
    for cls in type(unwrapped).__mro__:
        if name in POSITIVE_PARAMS.get(cls.__name__, ()) and cls.__module__.startswith("gymnasium"):
            bad = [v for v in vals if v <= 0]
            if bad:
                raise InvalidParameterError(
                    f"private parameter {name!r} of {cls.__name__} is a physical constant: "
                    f"candidate {bad[0]!r} must be > 0"
                )


def _set_param(unwrapped: Any, name: str, value: float) -> None:
    # an int attribute (a count) takes its integral candidate as an int: range(2.0) raises;
    # one held as a 0-d array gets a 0-d array; a NumPy number (a 0-d array's too) keeps its
    # type: an env may read np.float32(0.5).dtype or np.int64(2).item(), which a Python number
    # lacks (refused as "fails whatever the candidates" until session 56)
    cur = getattr(unwrapped, name)
    value = _as_attr_type(name, cur, value)
    setattr(unwrapped, name, np.array(value) if isinstance(cur, np.ndarray) else value)
    if isinstance(unwrapped, CartPoleEnv):
        for key, fn in _CARTPOLE_DERIVED.items():
            setattr(unwrapped, key, fn(unwrapped))


def _as_attr_type(name: str, cur: Any, value: float) -> Any:
    """``value`` as it is set on an attribute holding ``cur``: an int's integral candidate as
    an int, a NumPy number's or an int subclass's (an ``IntEnum``) in its type
    (:func:`_typed`), anything else unchanged."""
    base = _scalar(cur)
    if isinstance(base, (int, np.integer)) and float(value).is_integer():
        value = int(value)
    # an IntEnum set as a plain int: an env reading gear.value or gear.name failed, and was
    # refused as failing "with its own gear=<Gear.LOW: 1> as well" (session 58 probe)
    typed_int = isinstance(base, np.integer) or type(base) is not int and isinstance(base, int)
    if isinstance(base, np.floating) or (typed_int and isinstance(value, int)):
        value = _typed(name, type(base), value)
    return value


def _typed(name: str, kind: type, value: float) -> Any:
    """``value`` as the number type ``kind`` of the attribute it replaces, refused where it
    does not fit (np.float32(1e39) is inf; np.int32(3e9) overflows; 3 is no member of an
    ``IntEnum`` of 1 and 2)."""
    with np.errstate(over="ignore"):
        try:
            out = kind(value)
        except (OverflowError, ValueError):
            out = None
    if out is None or not np.isfinite(out):
        raise InvalidParameterError(
            f"private parameter {name!r}: candidate {value!r} does not fit the attribute's "
            f"type {kind.__name__}"
        )
    return out


def check_private_param(
    env_id: Any,
    name: Any,
    values: Any,
    *,
    env_module: str | None = None,
    max_episode_steps: int | None = None,
    probe_timeout: float = 60.0,
) -> tuple[EnvInfo, tuple[float, ...]]:
    """Validate an environment and a private parameter before any training.

    Refused, each with an error naming the parameter and the value: an unknown env id, a
    ``Tuple`` or ``Dict`` action space or an unbounded ``Box`` (naming what is supported), an
    observation space Gymnasium cannot flatten, a name that is not an attribute of
    ``env.unwrapped``, a non-numeric attribute (a bool or a string), fewer than two candidates,
    duplicates, non-finite candidates, and a value the environment rejects: each candidate is
    set on a throw-away environment that is then reset and stepped :data:`PROBE_STEPS` times; an
    exception or a non-finite observation or reward refuses it. A physical constant of
    Gymnasium's CartPole, Acrobot or MountainCar (:data:`POSITIVE_PARAMS`) must be > 0, and no
    candidate may be subnormal. A parameter with no effect is refused: every candidate gives the
    same trace (observations, rewards, terminations; same seeds and actions) over the probe and
    again over longer episodes (:func:`_probe_steps`), as for an env that computes a constant
    from it in ``__init__``; so are two candidates with the same trace there (no attack can tell
    them apart: MountainCar's ``max_speed`` 0.07 and 0.14, no speed reached is above 0.07), and
    an env whose trace differs between two probes of the first candidate (unseeded noise). Each
    call of the env's code here (the module's import, the constructor, reset, step, a set of the
    parameter, close) must return within ``probe_timeout`` seconds (in the main thread: a
    SIGALRM timer), else the env is refused naming the call (an endless loop would hang the
    probe).

    Returns:
        ``(EnvInfo, values as floats)``.
    """
    limit = check_real_in(probe_timeout, "probe_timeout", lo=0.0, lo_open=True, hi=1e6)
    token = _CALL_LIMIT.set(limit)
    try:
        return _check_private_param(env_id, name, values, env_module, max_episode_steps)
    except _Hung as hung:
        raise InvalidParameterError(
            f"env {env_id!r} did not return from {hung.args[0]} within {limit:g} s (probe_timeout, "
            "--probe-timeout SECONDS: the limit per call of the env's code in the probe); an "
            "endless loop or a blocking wait in it? Nothing was trained or written"
        ) from None
    finally:
        _CALL_LIMIT.reset(token)


def _check_private_param(
    env_id: Any, name: Any, values: Any, env_module: str | None, max_episode_steps: int | None
) -> tuple[EnvInfo, tuple[float, ...]]:
    import_env_module(env_module)
    if not isinstance(env_id, str) or not env_id:
        raise InvalidParameterError(f"env must be a Gymnasium environment id, got {env_id!r}")
    if not isinstance(name, str) or not name:
        raise InvalidParameterError(f"private parameter name must be a string, got {name!r}")
    mod, colon, short = env_id.partition(":")
    if colon:  # gym.make would import mod: a run directory records a module, never imports it
        raise InvalidParameterError(
            f"env {env_id!r} names a module (gym.make's 'module:Id' form): give it as "
            f"--env-module {mod} --env {short} (env_module=, env_id= in Python)"
        )
    try:
        spec = gym.spec(env_id)
    except gym.error.Error as exc:
        hint = "" if env_module else " (a user env: register it and pass --env-module)"
        raise InvalidParameterError(
            f"env: unknown Gymnasium environment id {env_id!r}: {exc}{hint}"
        ) from None
    vals = check_candidates(name, values)
    env = _user(env_id, "make", _make, env_id, max_episode_steps)
    try:
        a_space, o_space = _user(
            env_id, "its spaces", lambda: (env.action_space, env.observation_space)
        )
        n_actions, box, nvec = _action_heads(env_id, a_space)
        if not isinstance(o_space, gym.spaces.Box) or not np.prod(o_space.shape):
            raise InvalidParameterError(
                f"env {env_id!r} has observation space {o_space}: only observations Gymnasium "
                "can flatten (Box, Discrete, MultiDiscrete, MultiBinary, Tuple and Dict of them) "
                "to at least one number are supported (the network reads nothing else)"
            )
        u = env.unwrapped
        if (cur := _user(env_id, f"reading {name!r}", getattr, u, name, _MISSING)) is _MISSING:
            num = [k for k in dir(u) if _is_number(inspect.getattr_static(u, k, None))]
            public = sorted(k for k in num if k[0] != "_")  # getattr_static: no property is run
            w = env  # a wrapper of the registered env holding it is never set per agent
            while (
                isinstance(w, gym.Wrapper) and inspect.getattr_static(w, name, _MISSING) is _MISSING
            ):
                w = w.env
            where = (
                f"; it is an attribute of the wrapper {type(w).__name__}, which the trainer does "
                "not set: move it to the env (the wrapper reading env.unwrapped's)"
                if isinstance(w, gym.Wrapper)
                else ""
            )
            raise InvalidParameterError(
                f"private parameter {name!r} is not an attribute of {type(u).__name__} "
                f"(env {env_id!r}); numeric attributes there: {public}{where}"
            )
        if isinstance(u, CartPoleEnv) and name in _CARTPOLE_DERIVED:
            raise InvalidParameterError(
                f"private parameter {name!r} of CartPole is derived from masspole, masscart and "
                "length (recomputed after every set): make one of those the private parameter"
            )
        if not _is_number(cur):
            raise InvalidParameterError(
                f"private parameter {name!r} of {type(u).__name__} is not numeric "
                f"(it is {cur!r}, {type(cur).__name__})"
            )
        prop = inspect.getattr_static(type(u), name, None)
        if isinstance(prop, property) and prop.fset is None:  # was "the env fails whatever"
            raise InvalidParameterError(
                f"private parameter {name!r} of {type(u).__name__} is a read-only property (no "
                "setter): the trainer sets each agent's value on its env; give it a setter"
            )
        _check_physical(u, name, vals)
        # two candidates the attribute's type cannot tell apart (np.float32 0.1 and
        # 0.1000000001) were refused as "no effect", blaming the env, after the long probe
        typed = [_as_attr_type(name, cur, v) for v in vals]  # "does not fit": before any probe
        for i, j in itertools.combinations(range(len(vals)), 2):
            if typed[i] == typed[j]:
                raise InvalidParameterError(
                    f"private parameter {name!r} of {type(u).__name__} is a "
                    f"{type(typed[i]).__name__} (it is {cur!r}): candidates {vals[i]!r} and "
                    f"{vals[j]!r} are the same value {typed[i]!r} in that type, so they would "
                    "act alike; give candidates it tells apart, or make the env's default a float"
                )
        # an int default (MountainCar's goal_velocity=0) takes a float where the env does
        bad = (
            [v for v in vals if v != int(v)] if isinstance(_scalar(cur), (int, np.integer)) else []
        )
        info = EnvInfo(
            env_id=env_id,
            obs_dim=int(np.prod(o_space.shape)),
            n_actions=n_actions,
            max_episode_steps=spec.max_episode_steps,
            native=_is_native(env_id, env, name),
            box=box,
            nvec=nvec,
        )
    finally:
        _user(env_id, "close", env.close)
    long = NO_EFFECT_EPISODE * (2 * min(info.obs_dim, 24) + 2)
    for steps in (PROBE_STEPS, long):  # the longer probe only when needed
        # the first candidate twice: a difference there is the env's own unseeded noise
        try:
            traces = [
                _probe_steps(info, name, v, max_episode_steps, steps) for v in (*vals[:1], *vals)
            ]
        except InvalidParameterError as exc:
            try:  # the env's own value: failing there too, the env fails (an old Gym API)
                _probe_steps(info, name, float(cur), max_episode_steps, PROBE_STEPS)
            except InvalidParameterError as own:
                raise InvalidParameterError(
                    f"env {env_id!r} fails whatever the candidates (with its own {name}={cur!r} "
                    f"as well): {own}"
                ) from None
            if bad:  # a count: range(2.5) raises
                raise InvalidParameterError(
                    f"private parameter {name!r} of {type(u).__name__} is an integer (it is "
                    f"{cur!r}) and a non-integral candidate ({bad[0]!r}) fails: give integers, "
                    f"or make the env's default a float ({exc})"
                ) from None
            raise
        if traces[0] != traces[1]:
            raise InvalidParameterError(
                f"env {env_id!r} is not reproducible: reset(seed=0) and the same actions with "
                f"{name}={vals[0]!r} gave two different traces, so no probe or attack can tell "
                f"{name!r}'s effect from noise; draw the env's randomness from self.np_random "
                "and pass reset's seed on (super().reset(seed=seed): Gymnasium's seeding)"
            )
        pairs = itertools.combinations(range(len(vals)), 2)  # traces[i + 1]: vals[i]'s
        same = [(vals[i], vals[j]) for i, j in pairs if traces[i + 1] == traces[j + 1]]
        if not same:
            return info, vals
    if len(same) < len(vals) * (len(vals) - 1) // 2:  # some candidates differ: not all alike
        raise InvalidParameterError(
            f"private parameter {name!r} of env {env_id!r}: candidates {same[0][0]!r} and "
            f"{same[0][1]!r} give the same observations, rewards and terminations over {long} "
            "probe steps (same seeds, same actions), so no attack can tell them apart (a "
            "parameter that acts only in states these steps never reach: a speed cap above the "
            "speeds reached); give candidates that act differently in the states reached"
            + (f" (actions are clipped to {a_space}, as the env was made)" if info.box else "")
        )
    raise InvalidParameterError(
        f"private parameter {name!r} has no effect on env {env_id!r}: every candidate "
        f"{list(vals)} gives the same observations, rewards and terminations over "
        f"{long} probe steps (same seeds, same actions), so an attack could only "
        "report chance. An env that reads the attribute only in __init__ (a constant computed "
        "from it there) ignores a later change: read it in step()/reset(); a parameter that acts "
        "only in states these steps never reach (a speed cap above the speeds reached) needs "
        "candidates that act in them"
    )


def _feed(h: Any, *parts: np.ndarray) -> None:
    h.update((np.concatenate(parts, dtype=np.float64) + 0.0).tobytes())  # -0.0 as 0.0, as ==


def _probe_steps(
    info: EnvInfo, name: str, value: float, max_episode_steps: int | None, steps: int
) -> bytes:
    """The env with ``value`` set, reset (seed 0) and stepped; returns the trace's digest
    (observations, rewards, terminations, truncations; SHA-256: the trace itself, up to 10,000
    steps, took 1 GB for a 32x32x3 image observation). The first :data:`PROBE_STEPS` actions
    cycle; then each odd episode (at most :data:`NO_EFFECT_EPISODE` steps, or
    ``max_episode_steps`` where fewer: the episodes that train; a native batch has no time limit
    of its own) pushes by the sign of one observation coordinate in turn (the first action when
    it is <= 0, the last when > 0: on MountainCar's velocity this is the policy that reaches the
    goal), each even one draws from a fixed generator: the same actions for every candidate."""
    env_id, row = info.env_id, np.zeros(1, np.int64)
    # one row of the batch that trains (Gymnasium's Python Acrobot never returned from ``wrap``
    # on a diverged state, dt=50; the compiled batch refuses it)
    env = make_param_vector_env(info, name, 1, max_episode_steps=max_episode_steps)
    rng, cap = np.random.default_rng(0), min(NO_EFFECT_EPISODE, max_episode_steps or math.inf)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # a rejected value's overflow warnings: we say it below
        try:
            env.set_param(row, np.array([value]))
            space = env.single_action_space  # a Box: its low, middle and high actions
            nvec = np.asarray(info.nvec or [1])  # a MultiDiscrete: each component's too
            n = 3 if info.box or info.nvec else int(space.n)
            to_env = (lambda i: np.linspace(*info.box, 3)[i][None]) if info.box else row.__add__
            if info.nvec:
                to_env = lambda i: (i if np.ndim(i) else i * (nvec - 1) // 2)[None]  # noqa: E731
            o = np.asarray(env.reset(seed=[0])[0], np.float64).ravel()
            trace, episode, start = hashlib.sha256(), 0, 0
            _feed(trace, o)
            for k in range(steps):
                coord = episode // 2 if episode % 2 else None  # even episodes: random actions
                if k < PROBE_STEPS:
                    action = k % n
                elif coord is not None and coord < o.size:
                    action = (n - 1) * int(o[coord] > 0)
                else:  # a MultiDiscrete: each component drawn
                    action = rng.integers(nvec) if info.nvec else int(rng.integers(n))
                obs, r, term, trunc, _ = env.step(to_env(action))
                o = np.asarray(obs, np.float64).ravel()
                _feed(trace, o, r, term, trunc)
                if term or trunc or k + 1 - start >= cap:
                    o = np.asarray(env.reset(seed=[k + 1])[0], np.float64).ravel()
                    _feed(trace, o)
                    episode, start = episode + 1, k + 1
            out = trace.digest()
        except Exception as exc:  # noqa: BLE001 - the env rejects the value
            c = exc.__cause__ or exc  # the env's own error (the batch's UserCodeError wraps it)
            what = (
                f"fails with value {value!r}: {exc}"
                if type(exc) is InvalidParameterError  # the batch's: non-finite, Acrobot diverged
                else f"rejects value {value!r} ({type(c).__name__}: {c})"
            )
            raise InvalidParameterError(
                f"private parameter {name!r}: env {env_id!r} {what}"
            ) from None
        finally:
            env.close()
    return out


# ==============================================================================================
# The batches
# ==============================================================================================


class ParamVectorEnv(VectorEnv):  # type: ignore[misc]
    """A Gymnasium vector env whose rows differ by one private parameter (no auto-reset).

    ``reset(seed=[...], options={"reset_mask": mask})`` resets the masked rows, each with its
    seed (Gymnasium's ``env.reset(seed=s)``); ``step(actions)`` steps every row;
    :meth:`set_param` gives rows their values (takes effect at once; set it before the reset of
    a new agent's episode).
    """

    param: str

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "set_param"):  # every concrete env says how its rows take values
            raise TypeError(f"{cls.__name__} must define set_param(rows, values)")


#: the spaces a vector env has (Gymnasium's VectorEnv attributes)
_SPACES = ("single_observation_space", "single_action_space", "observation_space", "action_space")


def _mask_rows(options: Any, n: int) -> np.ndarray:
    if options is not None and "reset_mask" in options:
        m = np.asarray(options["reset_mask"], dtype=bool)
        if m.shape != (n,):
            raise InvalidParameterError(f"reset_mask must have shape ({n},), got {m.shape}")
        return np.flatnonzero(m)
    return np.arange(n)


def _seeds(seed: Any, rows: np.ndarray) -> list[int | None]:
    if seed is None:
        return [None] * rows.size
    s = list(seed) if isinstance(seed, (list, tuple, np.ndarray)) else [seed] * rows.size
    if len(s) != rows.size:
        raise InvalidParameterError(f"seed must have one entry per reset row ({rows.size})")
    return s


class _NativeParamVectorEnv(ParamVectorEnv):
    """Gymnasium's own ``single`` env over N rows in NumPy, its constants ``names`` per-row
    arrays; a subclass gives ``_initial(rng)`` (a row's reset state) and ``_obs()``."""

    def __init__(self, single: Any, n: int, param: str, names: Sequence[str], dim: int) -> None:
        self.num_envs = n
        for k in ("observation_space", "action_space"):
            setattr(self, f"single_{k}", getattr(single, k))
            setattr(self, k, batch_space(getattr(single, k), n))
        self.metadata = {"autoreset_mode": AutoresetMode.DISABLED}
        self.param = param
        self.consts = {k: np.full(n, float(getattr(single, k))) for k in names}
        self.state = np.zeros((n, dim))

    def set_param(self, rows: np.ndarray, values: np.ndarray) -> None:
        self.consts[self.param][rows] = values

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        rows = _mask_rows(options, self.num_envs)
        for r, s in zip(rows, _seeds(seed, rows), strict=True):
            self.state[r] = self._initial(np.random.default_rng(s))
        return self._obs(), {}


class AcrobotParamVectorEnv(_NativeParamVectorEnv):
    """Gymnasium's Acrobot-v1 (``book`` dynamics, RK4 over ``dt``) over N rows, every physical
    constant a per-row array. Same reset law as Gymnasium (state uniform in [-0.1, 0.1]^4 rounded
    to float32, from ``default_rng(seed)``), reward -1 per step and 0 on the terminating step."""

    def __init__(self, n: int, param: str) -> None:
        single = AcrobotEnv()
        super().__init__(single, n, param, ACROBOT_PARAMS, 4)
        self.torque = np.asarray(single.AVAIL_TORQUE, dtype=np.float64)

    def _initial(self, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(low=-0.1, high=0.1, size=(4,)).astype(np.float32)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        a = self.torque[np.asarray(actions, dtype=np.int64)]
        c = self.consts
        term = np.empty(self.num_envs, dtype=np.bool_)
        _acrobot_step(
            self.state,
            np.ascontiguousarray(a, dtype=np.float64),
            *(c[k] for k in ACROBOT_PARAMS),
            term,
        )
        rew = np.where(term, 0.0, -1.0)
        if not np.isfinite(self.state).all():
            r = int(np.flatnonzero(~np.isfinite(self.state).all(axis=1))[0])
            raise InvalidParameterError(
                f"env 'Acrobot-v1' diverged (an angle beyond 1e6 rad or not finite after one RK4 "
                f"step; row {r}, {self.param}={float(self.consts[self.param][r])!r}): lower it"
            )
        return self._obs(), rew, term, np.zeros(self.num_envs, dtype=bool), {}

    def _obs(self) -> np.ndarray:
        s = self.state
        return np.stack(
            [np.cos(s[:, 0]), np.sin(s[:, 0]), np.cos(s[:, 1]), np.sin(s[:, 1]), s[:, 2], s[:, 3]],
            axis=1,
        ).astype(np.float32)


# Gymnasium's AcrobotEnv.step (``book`` dynamics: ``_dsdt``, ``rk4`` over [0, dt], ``wrap``,
# ``bound``, ``_terminal``) as one compiled loop over the rows, operation for operation.


@nb.njit(cache=True, nogil=True)
def _acrobot_dsdt(t1, t2, dt1, dt2, a, m1, m2, l1, lc1, lc2, moi):  # noqa: PLR0913
    g = 9.8
    pi = math.pi
    i1 = moi
    i2 = moi
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * math.cos(t2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * math.cos(t2)) + i2
    phi2 = m2 * lc2 * g * math.cos(t1 + t2 - pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dt2**2 * math.sin(t2)
        - 2 * m2 * l1 * lc2 * dt2 * dt1 * math.sin(t2)
        + (m1 * lc1 + m2 * l1) * g * math.cos(t1 - pi / 2)
        + phi2
    )
    ddt2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dt1**2 * math.sin(t2) - phi2) / (
        m2 * lc2**2 + i2 - d2**2 / d1
    )
    ddt1 = -(d2 * ddt2 + phi1) / d1
    return dt1, dt2, ddt1, ddt2


@nb.njit(cache=True, nogil=True)
def _acrobot_stage(y, h, k, p):
    """``_dsdt`` at ``y + h * k`` (one RK4 stage), ``p`` the row's constants."""
    return _acrobot_dsdt(y[0] + h * k[0], y[1] + h * k[1], y[2] + h * k[2], y[3] + h * k[3], *p)


@nb.njit(cache=True, nogil=True)
def _wrap(x):
    if not abs(x) < 1e6:  # diverged (Gymnasium's loop would not end): NaN, refused by the caller
        return math.nan
    pi = math.pi
    diff = pi - -pi
    while x > pi:
        x = x - diff
    while x < -pi:
        x = x + diff
    return x


@nb.njit(cache=True, nogil=True)
def _acrobot_step(state, torque, l1s, l2s, m1s, m2s, lc1s, lc2s, mois, mv1s, mv2s, dts, term):  # noqa: PLR0913
    for i in range(state.shape[0]):
        p = (torque[i], m1s[i], m2s[i], l1s[i], lc1s[i], lc2s[i], mois[i])
        dt = dts[i]
        dt2 = dt / 2.0
        y = (state[i, 0], state[i, 1], state[i, 2], state[i, 3])
        k1 = _acrobot_dsdt(y[0], y[1], y[2], y[3], *p)
        k2 = _acrobot_stage(y, dt2, k1, p)
        k3 = _acrobot_stage(y, dt2, k2, p)
        k4 = _acrobot_stage(y, dt, k3, p)
        w = dt / 6.0
        n0 = _wrap(y[0] + w * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0]))
        n1 = _wrap(y[1] + w * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1]))
        n2 = y[2] + w * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2])
        n3 = y[3] + w * (k1[3] + 2 * k2[3] + 2 * k3[3] + k4[3])
        n2 = min(max(n2, -mv1s[i]), mv1s[i])
        n3 = min(max(n3, -mv2s[i]), mv2s[i])
        state[i, 0], state[i, 1], state[i, 2], state[i, 3] = n0, n1, n2, n3
        term[i] = -math.cos(n0) - math.cos(n1 + n0) > 1.0


class MountainCarParamVectorEnv(_NativeParamVectorEnv):
    """Gymnasium's MountainCar-v0 over N rows, its constants per-row arrays (reset: position
    uniform in [-0.6, -0.4] from ``default_rng(seed)``, velocity 0; reward -1 per step)."""

    def __init__(self, n: int, param: str) -> None:
        super().__init__(MountainCarEnv(), n, param, MOUNTAINCAR_PARAMS, 2)

    def _initial(self, rng: np.random.Generator) -> tuple[float, float]:
        return (rng.uniform(low=-0.6, high=-0.4), 0.0)

    def _obs(self) -> np.ndarray:
        return self.state.astype(np.float32)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        c = self.consts
        action = np.asarray(actions, dtype=np.int64)
        position, velocity = self.state[:, 0], self.state[:, 1]
        # Gymnasium's MountainCarEnv.step, operation for operation
        velocity = velocity + ((action - 1) * c["force"] + np.cos(3 * position) * (-c["gravity"]))
        velocity = np.clip(velocity, -c["max_speed"], c["max_speed"])
        position = position + velocity
        position = np.clip(position, c["min_position"], c["max_position"])
        velocity = np.where((position == c["min_position"]) & (velocity < 0), 0.0, velocity)
        term = (position >= c["goal_position"]) & (velocity >= c["goal_velocity"])
        self.state = np.stack([position, velocity], axis=1)
        rew = np.full(self.num_envs, -1.0)
        return self._obs(), rew, term, np.zeros(self.num_envs, dtype=bool), {}


class _LastReward(gym.Wrapper):  # type: ignore[misc]
    """A row of :class:`SyncParamVectorEnv`: its last reward, terminated and truncated as the
    env returned them (the batch stores a reward None as NaN, a terminated 'False' as True; the
    message says which it was)."""

    last: Any = (0.0, False, False)

    def step(self, action: Any) -> Any:
        out = self.env.step(action)
        self.last = out[1:4] if isinstance(out, tuple) and len(out) > 3 else (0.0, False, False)
        return out


def _odd(g: Any, real: tuple, kinds: str) -> bool:
    """Not a number of ``real`` types nor a 0-d array of ``kinds`` (a str, None, a list)."""
    return not isinstance(g, real) and (np.ndim(g) > 0 or np.asarray(g).dtype.kind not in kinds)


class SyncParamVectorEnv(ParamVectorEnv):
    """Any environment: Gymnasium's ``SyncVectorEnv`` (one env per row, ``AutoresetMode.
    DISABLED``), the private attribute set on each row's ``env.unwrapped``."""

    def __init__(
        self, env_id: str, n: int, param: str, max_episode_steps: int | None = None
    ) -> None:
        self._fresh = lambda checker=True: _LastReward(_make(env_id, max_episode_steps, checker))
        self.inner = _user(
            env_id,
            "make",
            lambda: SyncVectorEnv([self._fresh] * n, autoreset_mode=AutoresetMode.DISABLED),
        )
        self.num_envs = n
        for k in (*_SPACES, "metadata"):
            setattr(self, k, getattr(self.inner, k))
        self.param, self.env_id = param, env_id
        space = self.single_action_space
        self._to_env = lambda a: _batch_action(space, a, n)
        self._unwrapped = [e.unwrapped for e in self.inner.envs]
        self.values = np.full(n, np.nan)

    def set_param(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Each row's value; a used row first gets a fresh env: state kept across resets (a
        NormalizeObservation's running mean) carried one agent's episodes into the next's."""
        for r, v in zip(np.asarray(rows).tolist(), np.asarray(values).tolist(), strict=True):
            if not np.isnan(self.values[r]):
                _user(self.env_id, "close", self.inner.envs[r].close)
                self.inner.envs[r] = _user(self.env_id, "make", self._fresh, False)
                self._unwrapped[r] = self.inner.envs[r].unwrapped
            set_ = f"setting {self.param}={v!r}"
            _user(self.env_id, set_, _set_param, self._unwrapped[r], self.param, float(v))
            self.values[r] = v

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        """The user's env code: its failure, or a non-finite observation or reward, is an
        input error naming the env (never reported as a bug of this toolkit)."""

        def run() -> tuple:
            out = fn(*args, **kw)
            obs = np.asarray(out[0], dtype=np.float64).reshape(self.num_envs, -1)
            return out, obs, np.asarray(out[1], np.float64) if what == "step" else np.zeros(1)

        out, obs, rew = _user(self.env_id, what, run)
        # a reward that is not a number (None: NaN; '1.0': 1.0 in SyncVectorEnv's float array),
        # a terminated or truncated that is not a bool ('False': True in its bool array)
        got = [e.last if what == "step" else (0.0, False, False) for e in self.inner.envs]
        ints = (int, np.integer)  # a bool is an int
        odd = np.array([[_odd(g[0], (*ints, float, np.floating), "biuf"),
                         *(_odd(f, (*ints, np.bool_), "biu") for f in g[1:])]
                        for g in got])  # fmt: skip
        bad = ~np.isfinite(obs).all(axis=1) | ~np.isfinite(rew) | odd.any(axis=1)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            what = f"a non-finite observation or reward in {what}"
            for j, (key, kind) in enumerate((("reward", "number"), ("terminated", "bool"),
                                             ("truncated", "bool"))):  # fmt: skip
                if odd[r, j]:
                    g = got[r][j]
                    what = f"{key} {g!r} in step ({type(g).__name__}, not a {kind})"
                    break
            raise InvalidParameterError(
                f"env {self.env_id!r} returned {what} (row {r}, "
                f"{self.param}={float(self.values[r])!r})"
            )
        return (obs, *out[1:])

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[np.ndarray, dict]:
        rows = _mask_rows(options, self.num_envs)
        mask = np.isin(np.arange(self.num_envs), rows)
        full: list[int | None] = [None] * self.num_envs
        for r, s in zip(rows, _seeds(seed, rows), strict=True):
            full[r] = None if s is None else int(s)
        return self._call("reset", self.inner.reset, seed=full, options={"reset_mask": mask})

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rew, term, trunc, info = self._call(
            "step", self.inner.step, self._to_env(np.asarray(actions))
        )
        return obs, np.asarray(rew, float), np.asarray(term, bool), np.asarray(trunc, bool), info

    def close(self, **kwargs: Any) -> None:
        _user(self.env_id, "close", self.inner.close)


def make_param_vector_env(
    info: EnvInfo, param: str, n: int, *, max_episode_steps: int | None = None
) -> ParamVectorEnv:
    """N rows of ``info.env_id`` with a per-row ``param`` (native NumPy physics where
    ``info.native``, else Gymnasium's ``SyncVectorEnv``)."""
    if info.native:
        native = {"Acrobot-v1": AcrobotParamVectorEnv, "MountainCar-v0": MountainCarParamVectorEnv}
        return native[info.env_id](n, param)
    return SyncParamVectorEnv(info.env_id, n, param, max_episode_steps)
