"""Checks for values that cross a public boundary (never ``assert``), shared by the core, the
trainers, the attacks and a user's own system.

Each check takes the value and the name the caller knows it by (``"--epsilon"``, ``"cfg.lr"``),
checks the type without coercing it (``'1'`` and ``True`` are not numbers), and raises
:class:`ldp_audit.errors.InvalidParameterError` naming that parameter and the value. A system
plugged in through :mod:`ldp_audit.systems` uses them to refuse bad input before any work or
randomness, the way the shipped systems do::

    from ldp_audit.validation import check_epsilon, check_int

    eps = check_epsilon(cfg.epsilon, "cfg.epsilon")
    steps = check_int(cfg.steps, "cfg.steps", minimum=1)
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.parse import INT_MAX, check_normal


def _scalar(value: Any) -> Any:
    """``value``'s number if it is a 0-d torch tensor (read detached: a Python bool, int, float
    or complex; None for a meta tensor, which has no value) or a 0-d integer or float NumPy
    array (its NumPy scalar); else ``value`` itself. The callers check the type."""
    if hasattr(value, "detach") and getattr(value, "ndim", None) == 0:  # a 0-d torch tensor
        try:
            return value.detach().item()
        except (RuntimeError, TypeError, ValueError):  # a meta tensor has no value
            return None
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        return value[()]
    return value


def check_real(value: Any, name: str) -> float:
    """Return ``value`` as a float if it is a real number (type-checked, not coerced).

    ``numbers.Real`` instances (Python and NumPy ints and floats), 0-d real NumPy arrays and
    0-d real torch tensors (a loss or a return as a training loop holds it; one that requires
    grad is read detached) are accepted; ``bool`` (``True`` is not an epsilon; a bool array or
    tensor neither), ``str`` (``'1'`` is not a number), complex values, tensors of more than
    one dimension and everything else are refused with an error naming the parameter and the
    value. NaN and inf pass through: the range checks of the callers decide about them.

    Raises:
        InvalidParameterError: ``value`` is not a real number.
    """
    v = _scalar(value)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
        raise InvalidParameterError(
            f"{name} must be a real number, got {value!r} ({type(value).__name__})"
        )
    return float(v)


def check_real_in(
    v: Any, name: str, *, lo: float, lo_open: bool, hi: float | None = None, hi_open: bool = False
) -> float:
    """``v`` as a float if it is a finite real number in the interval from ``lo`` to ``hi``
    (each end open or closed; no upper end when ``hi`` is None), else an error naming ``name``,
    the interval and the value."""
    x = check_real(v, name)
    bad = (
        not math.isfinite(x)
        or (x <= lo if lo_open else x < lo)
        or (hi is not None and (x >= hi if hi_open else x > hi))
    )
    if bad:
        lo_s = f"> {lo:g}" if lo_open else f">= {lo:g}"
        hi_s = "" if hi is None else (f" and < {hi:g}" if hi_open else f" and <= {hi:g}")
        raise InvalidParameterError(f"{name} must be finite, {lo_s}{hi_s}, got {v!r}")
    if lo == 0 and lo_open:  # as the CLI's converters (parse.real_in)
        check_normal(x, name, v)
    return x if x else 0.0  # -0.0 is 0 (it printed as "delta = -0")


def check_choice(value: Any, name: str, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``allowed`` (a str, never coerced)."""
    if type(value) is not str or value not in allowed:
        raise InvalidParameterError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` if it is a ``bool`` (or ``numpy.bool_``); ``'no'``, 0 and None are refused
    (a string flag is truthy whatever it says)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise InvalidParameterError(
        f"{name} must be True or False, got {value!r} ({type(value).__name__})"
    )


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int = INT_MAX) -> int:
    """Return ``value`` as an int if it is a ``numbers.Integral`` (not bool) in [``minimum``,
    ``maximum``] (``maximum`` defaults to :data:`ldp_audit.parse.INT_MAX`, a signed 64-bit
    integer: larger values are an OverflowError deep inside NumPy, after work has started).
    As in :func:`check_real`, a 0-d integer torch tensor or NumPy array is its integer (an
    agent id a loop holds as ``torch.tensor(3)``); a bool or float one is refused."""
    x = _scalar(value)
    integral = isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))
    if not integral or (minimum is not None and int(x) < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise InvalidParameterError(f"{name} must be an integer{bound}, got {value!r}")
    v = int(x)
    if v > maximum:
        raise InvalidParameterError(f"{name} must be <= {maximum:,}, got {value!r}")
    return v


def check_epsilon(value: Any, name: str = "epsilon", *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float if it is a valid privacy parameter, else raise.

    Args:
        value: the candidate epsilon.
        name: parameter name used in the error message.
        allow_inf: accept ``float('inf')`` (an explicit non-private baseline).
    """
    v = check_real(value, name)
    if math.isnan(v):
        raise InvalidParameterError(f"{name} must not be NaN, got {value!r}")
    if math.isinf(v):
        if v > 0 and allow_inf:
            return v
        raise InvalidParameterError(
            f"{name} must be finite (pass epsilon=float('inf') only where a non-private "
            f"baseline is allowed), got {value!r}"
        )
    if v <= 0:
        raise InvalidParameterError(f"{name} must be > 0, got {value!r}")
    return v


def check_positive(value: Any, name: str) -> float:
    """Return ``value`` as a float if it is finite and > 0, else raise."""
    return check_real_in(value, name, lo=0.0, lo_open=True)


def check_probability(value: Any, name: str, *, open_interval: bool = True) -> float:
    """Return ``value`` as a float in (0, 1) (or [0, 1] when ``open_interval`` is False)."""
    v = check_real(value, name)
    ok = (0.0 < v < 1.0) if open_interval else (0.0 <= v <= 1.0)
    if not ok:
        interval = "(0, 1)" if open_interval else "[0, 1]"
        raise InvalidParameterError(f"{name} must be in {interval}, got {value!r}")
    return v


def check_confidence(value: Any, name: str = "confidence") -> float:
    """Return ``value`` as a confidence level in (0, 1) whose error probability ``1 - value``
    is in (0, 1) as a double too (``1e-300`` passes ``0 < c < 1`` but ``1 - c == 1.0``)."""
    v = check_probability(value, name)
    if not 0.0 < 1.0 - v < 1.0:
        raise InvalidParameterError(
            f"{name} must be in (0, 1) with 1 - {name} representable, got {value!r}"
        )
    return v


def check_numeric(values: Any, name: str) -> np.ndarray:
    """``values`` (a tensor detached to NumPy) as a real numeric array of any shape, else
    refused (strings, complex, objects: never coerced)."""
    try:
        x = np.asarray(values.detach().cpu().numpy() if hasattr(values, "detach") else values)
    except (TypeError, ValueError) as exc:
        raise InvalidParameterError(f"{name} must be a real numeric array: {exc}") from None
    if x.dtype.kind not in "biuf":
        raise InvalidParameterError(f"{name} must be a real numeric array, got dtype {x.dtype}")
    return x


def check_batch(x: Any, name: str = "x", *, dim: int | None = None) -> np.ndarray:
    """Return ``x`` as a C-contiguous float64 array of shape (n, d), all finite.

    A NaN or inf in an input would leak through any additive mechanism, so it is refused here,
    before any randomisation.
    """
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":  # bool, integers, floats (not object, complex, text)
        raise InvalidParameterError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise InvalidParameterError(
            f"{name} must have shape (n, d) (one row per report), got shape {arr.shape}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InvalidParameterError(f"{name} must be non-empty, got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise InvalidParameterError(f"{name} must have {dim} columns, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    if not np.isfinite(arr).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
        raise InvalidParameterError(
            f"{name} must be finite; found {float(arr[bad])} at index {bad}"
        )
    return arr


def check_rng(rng: Any, name: str = "rng") -> np.random.Generator:
    """Require an explicit ``numpy.random.Generator`` (no hidden global state)."""
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameterError(
            f"{name} must be a numpy.random.Generator (e.g. numpy.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    return rng


def as_rng(rng: Any, name: str = "rng") -> np.random.Generator:
    """``rng`` if it is a ``numpy.random.Generator``, else a new one from an int seed (>= 0) or
    None (fresh entropy); anything else (a negative seed, ``True``, ``'3'``) refused by name."""
    if rng is None or isinstance(rng, np.random.Generator):
        return np.random.default_rng(rng)  # a Generator comes back unaltered
    if isinstance(rng, bool) or not isinstance(rng, (int, np.integer)) or rng < 0:
        raise InvalidParameterError(
            f"{name} must be a numpy.random.Generator, an int seed >= 0 or None, got {rng!r}"
        )
    return np.random.default_rng(rng)
