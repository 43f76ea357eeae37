"""What the auditor reads of the mechanism: its claim, its input pairs, its label.

A mechanism is anything with ``epsilon`` (optionally ``delta``, ``epsilon_at(delta)``,
``candidate_pairs(dim)``, ``to_config()``) and ``privatize(x, rng)``; every attribute of a
user's object is read through :func:`user_attr`, so an exception in a user's property comes
back as a :class:`~ldp_audit.errors.UserCodeError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, LdpAuditError, UserCodeError
from ldp_audit.stats import check_delta_range, check_nonnegative
from ldp_audit.validation import check_int

__all__ = ["MAX_DIM", "ONE_VALUE_METHODS", "default_pairs"]

#: the largest input dimension audited: candidate pairs and (samples, dim) outputs are held in
#: memory, and 1e9 dimensions ran until killed
MAX_DIM = 1_000_000
#: methods that take one value per call (diffprivlib's randomise, pure-ldp's privatise, PyDP's
#: add_noise): a library object that has one is told the way in (``from_scalar``, ``--scalar``)
ONE_VALUE_METHODS = ("randomise", "privatise", "randomize", "add_noise")


def as_pair(pair: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        x, x2 = pair
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"{where} must be a pair (x, x2) of 1-D input arrays, got {pair!r}"
        ) from None
    out = []
    for v, name in ((x, "x"), (x2, "x2")):
        try:  # strings, objects, ragged lists: named, not a raw ValueError
            a = np.asarray(v, dtype=np.float64) if not isinstance(v, np.ndarray) else v
            a = a.reshape(1) if a.ndim == 0 else a
            shape_ok = a.ndim == 1 and a.size > 0  # (checked before an array is converted)
            a = np.asarray(a, dtype=np.float64) if shape_ok else a
        except (TypeError, ValueError):
            raise InvalidParameterError(
                f"{where} {name} must be a 1-D array of real numbers, got {v!r}"
            ) from None
        if not shape_ok:
            raise InvalidParameterError(
                f"{where} {name} must be a non-empty 1-D array, got shape {np.shape(v)}"
            )
        if not np.all(np.isfinite(a)):
            raise InvalidParameterError(f"{where} {name} must be finite, got {a.tolist()!r}")
        out.append(a)
    if out[0].shape != out[1].shape:
        raise InvalidParameterError(
            f"{where} x and x2 must have the same length, got {out[0].size} and {out[1].size}"
        )
    return out[0], out[1]


def default_pairs(mechanism: Any, dim: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """The mechanism's declared ``candidate_pairs(dim)``, de-duplicated.

    Raises:
        InvalidParameterError: the mechanism declares no domain (no ``candidate_pairs``).
    """
    fn = getattr(mechanism, "candidate_pairs", None)
    if not callable(fn):
        raise InvalidParameterError(
            "pairs must be given for a mechanism that declares no input domain: pass "
            "pairs=[(x, x2), ...] (neighbouring inputs to compare), or give the mechanism a "
            f"candidate_pairs(dim) method; got a {type(mechanism).__name__} without one"
        )
    # the mechanism's own dim is checked like the argument (1e9 ran until killed)
    name, d = ("dim", dim) if dim is not None else ("mechanism.dim", user_attr(mechanism, "dim"))
    d = 1 if d is None else check_int(d, name, minimum=1, maximum=MAX_DIM)
    try:
        raw = list(fn(d))
    except LdpAuditError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code
        raise UserCodeError(
            f"mechanism.candidate_pairs({d!r}) of {type(mechanism).__name__} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    unique: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}  # the first of equal pairs, in order
    for i, p in enumerate(raw):
        x, x2 = as_pair(p, f"pairs[{i}]")
        unique.setdefault(np.concatenate([x + 0.0, x2 + 0.0]).tobytes(), (x, x2))
    out = list(unique.values())
    if not out:
        raise InvalidParameterError("mechanism.candidate_pairs returned no pairs")
    return out


def mechanism_label(mechanism: Any) -> str:
    to_config = getattr(mechanism, "to_config", None)
    if callable(to_config):
        try:
            cfg = to_config()
            return ", ".join(f"{k}={v}" for k, v in cfg.items())
        except Exception:  # noqa: BLE001 - a user's to_config may fail; the label is cosmetic
            pass
    return type(mechanism).__name__


def call_user(mechanism: Any, what: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, user code of ``mechanism``: an exception becomes a UserCodeError naming
    ``what`` (``"mechanism.NAME"``), the mechanism's type and the exception."""
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - user code
        raise UserCodeError(
            f"{what} of {type(mechanism).__name__} raised {type(exc).__name__}: {exc}"
        ) from exc


def user_attr(mechanism: Any, name: str, default: Any = None) -> Any:
    """``getattr`` on a user's object; an exception in a property becomes a UserCodeError."""
    return call_user(mechanism, f"mechanism.{name}", getattr, mechanism, name, default)


def check_mechanism(mechanism: Any) -> tuple[float, float]:
    missing = object()
    raw = user_attr(mechanism, "epsilon", missing)  # a property that raises: UserCodeError
    if not callable(user_attr(mechanism, "privatize")) or raw is missing:
        hint = ""
        # one value per call: a library object's method (ONE_VALUE_METHODS), a bare function
        names = () if isinstance(mechanism, type) else ONE_VALUE_METHODS
        one = [m for m in names if callable(user_attr(mechanism, m))]
        if one or (callable(mechanism) and not isinstance(mechanism, type)):
            what, fn, cli = (
                (f"has {one[0]}(value)", f"obj.{one[0]}", f"OBJ.{one[0]}")
                if one
                else ("is a function", "lambda v: fn(v, ...)", "FN")
            )
            hint = (
                f": it {what}, one value per call; wrap it with from_scalar({fn}, epsilon=..., "
                f"domain=...) (command line: --scalar --mechanism MODULE:{cli} --epsilon E "
                "--domain LOW:HIGH)"
            )
        raise InvalidParameterError(
            "mechanism must have an epsilon attribute and a privatize(x, rng) method, got "
            f"{type(mechanism).__name__}{hint}"
        )
    eps = check_nonnegative(raw, "mechanism.epsilon")
    if math.isinf(eps):
        raise InvalidParameterError(
            f"mechanism.epsilon is {raw!r}: a mechanism that claims no privacy has no claim to "
            "audit (every lower bound is below inf). Give the epsilon the mechanism is meant to "
            "satisfy; for a non-private baseline there is nothing to audit"
        )
    raw_delta = user_attr(mechanism, "delta", 0.0)
    delta = 0.0 if raw_delta is None else check_delta_range(raw_delta, "mechanism.delta")
    return eps, delta


def claimed_profile(
    mechanism: Any, claimed: float, delta: float, deltas: Sequence[float]
) -> tuple[tuple[float, ...], str]:
    fn = user_attr(mechanism, "epsilon_at")
    if callable(fn):
        name = "mechanism.epsilon_at({!r})".format
        out = tuple(
            check_nonnegative(call_user(mechanism, name(d), fn, d), name(d)) for d in deltas
        )
        return out, "epsilon_at"
    return tuple(claimed if d >= delta else math.inf for d in deltas), "single point"
