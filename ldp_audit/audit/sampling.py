"""Sampling: the mechanism's outputs, drawn in bounded chunks and read by statistics or events.

Every call of the user's ``privatize`` goes through :func:`privatize_rows` (one call on n
copies of an input, outputs coerced to float64 (n, k), user errors wrapped with context);
:func:`stream_values` and :func:`stream_counts` stream n outputs chunk by chunk (at most
``_CHUNK_ELEMENTS`` values held at once) into statistic values or event counts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_audit.audit.results import short_values
from ldp_audit.audit.selection import Candidate
from ldp_audit.audit.statistics import ScoreStatistic
from ldp_audit.errors import InvalidParameterError, LdpAuditError, UserCodeError
from ldp_audit.stats import clopper_pearson_upper

#: float64 elements held per privatize call (outputs are streamed in chunks of this size).
_CHUNK_ELEMENTS = 1 << 22
#: float64 values of the fit half A kept per input (A is capped for very wide outputs).
FIT_ELEMENTS = 1 << 24


def privatize_rows(
    mechanism: Any,
    x: np.ndarray,
    n: int,
    rng: np.random.Generator,
    raw: bool = False,
    first: tuple[int, np.dtype] | None = None,
) -> Any:
    """One privatize call on n copies of x; output coerced to float64 (n, k). ``raw``: return
    ``(coerced, as returned)`` (the latter for user statistics). ``first``: the k and dtype of
    the pair's first call, which every later call must return (int64 and uint64 alike: a 64-bit
    seed is uint64 only when one is >= 2^63).

    Errors raised by the user's code come back as :class:`UserCodeError` naming the object, the
    input and the reason (the original exception is the ``__cause__``); errors of ldp-audit's own
    validation (an :class:`LdpAuditError`) pass through unchanged.
    """
    who = privatize_of(mechanism)
    try:
        y = mechanism.privatize(np.repeat(x[None, :], n, axis=0), rng)
    except LdpAuditError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code: wrapped with context, cause kept
        raise UserCodeError(
            f"{who} raised {type(exc).__name__} on input x = {short_values(x.tolist())} "
            f"({n} rows): {exc}"
        ) from exc
    hint = ""
    if isinstance(y, tuple) and len(y) != n:  # (y, seed) as two arrays: 2 rows of n values
        hint = f": a tuple of {len(y)} arrays reads as {len(y)} rows (np.column_stack them)"
    try:
        y = np.asarray(y)
    except Exception as exc:  # noqa: BLE001 - e.g. ragged lists
        raise UserCodeError(f"{who} returned something that is not an array: {exc}") from exc
    if y.dtype == object or y.dtype.kind not in "biuf":
        raise UserCodeError(
            f"{who} must return real numbers, got dtype {y.dtype} for input "
            f"x = {short_values(x.tolist())} (first value {y.ravel()[:1].tolist()!r})"
        )
    returned = y
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != n or y.shape[1] == 0:
        raise InvalidParameterError(
            f"mechanism.privatize must return an array of shape (n, k) with n = {n} rows and "
            f"at least one value per row for an (n, d) input, got shape {y.shape}{hint}"
        )
    if first is not None and (y.shape[1], _kind(y.dtype)) != (first[0], _kind(first[1])):
        raise UserCodeError(
            f"{who} returned {y.shape[1]} values per row of dtype {y.dtype} on input x = "
            f"{short_values(x.tolist())} where its first call on the pair returned {first[0]} "
            f"of dtype {first[1]}; outputs must have one shape and dtype on every call (a "
            "width or type that varies tells the input, and the audit reads values only)"
        )
    y = y.astype(np.float64, copy=False)
    return (y, returned) if raw else y


def privatize_of(mechanism: Any) -> str:
    """How an error names the user's ``privatize``: ``mechanism.privatize of CLASS``; for a
    :func:`~ldp_audit.audit.from_scalar` mechanism the library function it wraps (its
    ``name``), never the adapter's class, which the user did not write."""
    if type(mechanism).__module__ == "ldp_audit._scalar":  # (duck-typed: no private import)
        return f"{mechanism.name} (through from_scalar)"
    return f"mechanism.privatize of {type(mechanism).__name__}"


def _kind(dtype: np.dtype) -> tuple[str, int]:
    return ("i" if dtype.kind in "iu" else dtype.kind, dtype.itemsize)


def seeded_by(mechanism: Any, x: np.ndarray, rng: np.random.Generator) -> bool:
    """Whether two privatize calls of 8 rows from copies of one Generator state agree: False
    when the mechanism draws other randomness (the global ``numpy.random`` or ``random``
    module, its own generator) or its outputs change with state kept across calls. ``rng``
    itself is not advanced; the outputs are copied (a mechanism may reuse one buffer)."""
    a, b = (privatize_rows(mechanism, x, 8, copy.deepcopy(rng)).copy() for _ in range(2))
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


#: rows of each of the two calls of :func:`repeats_refused`, and its two error probabilities.
REPEAT_ROWS, REPEAT_ALPHA = 1000, 1e-9


def repeats_refused(mechanism: Any, x: np.ndarray, rng: np.random.Generator, width: int) -> None:
    """Refuse a mechanism whose outputs are a function of x (a generator seeded from the input
    or a fixed seed, not the ``rng`` argument): two calls of n rows, from a copy of ``rng`` and
    from a child of another copy (independent states; ``rng`` is not advanced), returning the
    same outputs. Drawing from the rng, with rows independent, they agree with probability
    q^n, q = sum_y p_y^2; the rows' n/2 disjoint pairs match ~ Binomial(n/2, q), so u, their
    Clopper-Pearson upper bound at 1e-9, exceeds q but with probability 1e-9. Refused when
    u^n < 1e-9: a false refusal has probability at most 2e-9. Outputs concentrated on one value
    (binary randomised response at epsilon 8: u ~ 1) are never refused."""
    n = max(8, min(REPEAT_ROWS, _CHUNK_ELEMENTS // max(1, width))) // 2 * 2
    a = privatize_rows(mechanism, x, n, copy.deepcopy(rng)).copy()
    b = privatize_rows(mechanism, x, n, copy.deepcopy(rng).spawn(1)[0])
    if a.shape != b.shape or not np.array_equal(a, b, equal_nan=True):
        return
    same = (a[0::2] == a[1::2]) | (np.isnan(a[0::2]) & np.isnan(a[1::2]))
    u = float(clopper_pearson_upper(int(same.all(axis=1).sum()), n // 2, REPEAT_ALPHA))
    if n * np.log(max(u, 1e-300)) < np.log(REPEAT_ALPHA):
        raise UserCodeError(
            f"{privatize_of(mechanism)} does not draw from the Generator "
            f"it is given: two calls on x = {short_values(x.tolist())} from independent "
            f"Generator states returned the same {n} outputs (one drawing from it does so with "
            f"probability < {u:.2g}^{n}, bounded from the outputs' own repeats; a generator "
            "seeded from the input or a fixed seed?), so every release is a function of x and "
            "the audit's samples would repeat; draw from the rng argument"
        )


def same_dtype(
    mechanism: Any, x: np.ndarray, x2: np.ndarray, raw: np.ndarray, rng: np.random.Generator
) -> None:
    """Refuse outputs whose dtype differs between the inputs of a pair (``raw``: 8 outputs of
    M(x) as returned; M(x2)'s are drawn from a copy of ``rng``): the audit reads values as
    float64, so a release telling x by its dtype (int64 against float64) would be unseen."""
    raw2 = privatize_rows(mechanism, x2, 8, copy.deepcopy(rng), raw=True)[1]
    if raw2.dtype != raw.dtype:
        raise UserCodeError(
            f"{privatize_of(mechanism)} returned dtype {raw.dtype} for "
            f"x = {short_values(x.tolist())} and {raw2.dtype} for x2 = "
            f"{short_values(x2.tolist())}: a release's dtype must not depend on the input (it "
            "tells the input apart, and the audit reads values only); return one dtype"
        )


def _chunks(n: int, d: int) -> list[int]:
    size = max(1, _CHUNK_ELEMENTS // max(1, d))  # wide outputs: fewer rows, not more values
    out = [size] * (n // size)
    if n % size:
        out.append(n % size)
    return out


def sample(
    mechanism: Any,
    x: np.ndarray,
    n: int,
    rng: np.random.Generator,
    width: int,
    first: tuple[int, np.dtype],
) -> np.ndarray:
    parts = [privatize_rows(mechanism, x, m, rng, first=first) for m in _chunks(n, width)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def stream_values(
    mechanism: Any,
    x: np.ndarray,
    n: int,
    rng: np.random.Generator,
    stats: Sequence[ScoreStatistic],
    tick: Callable[[int], None],
    width: int,
    first: tuple[int, np.dtype],
) -> list[np.ndarray]:
    """Statistic values of n fresh outputs of M(x), computed chunk by chunk."""
    acc: list[list[np.ndarray]] = [[] for _ in stats]
    for m in _chunks(n, width):
        y, raw = privatize_rows(mechanism, x, m, rng, raw=True, first=first)
        for a, st in zip(acc, stats, strict=True):
            a.append(st.values(raw if st.needs_raw else y))
        tick(m)
    return [np.concatenate(a) for a in acc]


@dataclass
class Joint:
    """The intersection of two events (counted to make a pooled pair's events disjoint)."""

    a: Candidate
    b: Candidate


def stream_counts(
    mechanism: Any,
    x: np.ndarray,
    n: int,
    rng: np.random.Generator,
    events: Sequence[Candidate | Joint],
    tick: Callable[[int], None],
    width: int,
    first: tuple[int, np.dtype],
) -> list[int]:
    counts = [0] * len(events)
    for m in _chunks(n, width):
        y, raw = privatize_rows(mechanism, x, m, rng, raw=True, first=first)
        vals: dict[int, np.ndarray] = {}  # per statistic, computed once per chunk
        for i, ev in enumerate(events):
            hit = np.ones(m, dtype=bool)
            for c in (ev.a, ev.b) if isinstance(ev, Joint) else (ev,):
                if id(c.stat) not in vals:
                    vals[id(c.stat)] = c.stat.values(raw if c.stat.needs_raw else y)
                hit &= c.indicator(vals[id(c.stat)])
            counts[i] += int(np.count_nonzero(hit))
        tick(m)
    return counts
