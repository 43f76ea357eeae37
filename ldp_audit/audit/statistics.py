"""The one-dimensional statistics an audit thresholds, fitted on the fit half A of selection.

For every input pair :func:`build_statistics` fits a handful of deterministic maps from an
output batch to one real score per row (the output coordinate that separates the pair best, the
projection onto ``x - x2``, the median-anchored L1 log-ratio, the L1 and L2 norms, a
logistic-regression score, a log-ratio score of discrete output cells, or of the repeated rows
of continuous outputs, the outputs equal to either input); :class:`Snapped` reads them on
outputs rounded to a 2^-32-relative grid
(the *distribution* reading), and
:func:`float_cell_statistic` scores the floating-point bit cells of the raw outputs (the
*implementation* reading, Mironov 2012). :class:`UserStatistic` wraps a user's
``stat(outputs, x, x_prime)``. A statistic is fixed before the estimation samples are drawn,
so any choice made here keeps the audit sound.
"""

from __future__ import annotations

import abc
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ldp_audit.audit.results import short_values
from ldp_audit.errors import InvalidParameterError, LdpAuditError, UserCodeError

#: rows of the fit half A used to train the classifier (fewer for very wide outputs).
_CLASSIFIER_ROWS = 20_000
#: at most this many distinct output rows for the discrete-cell statistic.
_MAX_CELLS = 4096
#: more distinct output rows than this on A (and outputs as wide as the input): the input cells.
_FEW_CELLS = 64


def sorted_unique(v: np.ndarray) -> np.ndarray:
    """``np.unique`` by sorting (hash-based unique is several times slower on float64)."""
    srt = np.sort(v)
    if srt.size == 0:
        return srt
    keep = np.empty(srt.size, dtype=bool)
    keep[0] = True
    np.not_equal(srt[1:], srt[:-1], out=keep[1:])
    return srt[keep]


class ScoreStatistic(abc.ABC):
    """A deterministic map from an (n, k) output batch to n real scores (NaN -> +inf)."""

    family = "statistic"
    #: reads the outputs as the mechanism returned them (not coerced to float64 (n, k))
    needs_raw = False
    #: threshold ranges ``[lo, hi)`` whose events are an input's own cell on A (fixed by the
    #: pair, not picked among thresholds: selection reads them at a looser level)
    own: tuple[tuple[float, float], ...] = ()

    def own_events(self, ts: np.ndarray) -> np.ndarray:
        """Which thresholds ``ts`` give an event of an input's own cell (see ``own``)."""
        return (
            np.any([(ts >= lo) & (ts < hi) for lo, hi in self.own], axis=0)
            if self.own
            else np.zeros(ts.shape, bool)
        )

    def values(self, y: np.ndarray) -> np.ndarray:
        s = np.asarray(self._values(y), dtype=np.float64)
        return np.where(np.isnan(s), np.inf, s)

    @abc.abstractmethod
    def _values(self, y: np.ndarray) -> np.ndarray:
        """Raw scores of the outputs ``y`` (NaN allowed; mapped to +inf)."""

    @abc.abstractmethod
    def label(self) -> str:
        """Readable description of the statistic (used in the witness)."""

    def describe(self, op: str, t: float) -> str:
        return f"{self.label()} {'>' if op == 'gt' else '<='} {t:.17g}"


class _Formula(ScoreStatistic):
    """A closed-form score ``fn(y)`` (a coordinate, a projection, a norm, the median-anchored
    L1 log-ratio), with its family and label."""

    def __init__(self, family: str, label: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
        self.family, self.text, self.fn = family, label, fn

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return self.fn(y)

    def label(self) -> str:
        return self.text


def _finite_features(y: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(y, nan=0.0, posinf=1e150, neginf=-1e150), -1e150, 1e150)


class _Classifier(ScoreStatistic):
    """Logistic-regression score separating M(x) (label 1) from M(x2) (label 0)."""

    family = "classifier"

    def __init__(self, ya1: np.ndarray, ya2: np.ndarray) -> None:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        rows = max(500, min(_CLASSIFIER_ROWS, (1 << 22) // ya1.shape[1]))
        a1 = _finite_features(ya1[:rows])
        a2 = _finite_features(ya2[:rows])
        feats = np.concatenate([a1, a2])
        self.mu = feats.mean(axis=0)
        sd = feats.std(axis=0)
        self.sd = np.where(sd > 0, sd, 1.0)
        labels = np.concatenate([np.ones(len(a1)), np.zeros(len(a2))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", RuntimeWarning)
            self.model = LogisticRegression(C=1.0, max_iter=300).fit(
                (feats - self.mu) / self.sd, labels
            )

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return self.model.decision_function((_finite_features(y) - self.mu) / self.sd)

    def label(self) -> str:
        return "logistic-regression score(y)"


_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def _row_keys(y: np.ndarray) -> np.ndarray:
    """64-bit hash of each output row's exact bit pattern (-0.0 folded into 0.0).

    Collisions merely merge cells: the event stays a fixed set, so soundness is unaffected.
    """
    u = np.ascontiguousarray(y + 0.0).view(np.uint64)
    h = np.full(u.shape[0], _FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(u.shape[1]):
            h = (h ^ u[:, j]) * _FNV_PRIME
    return h


_CTZ_BITS = 9
_CTZ_TABLE = np.array(
    [_CTZ_BITS] + [(i & -i).bit_length() - 1 for i in range(1, 1 << _CTZ_BITS)], dtype=np.uint64
)


def _float_keys(v: np.ndarray) -> np.ndarray:
    """Bit cell of each double: (sign, biased exponent, trailing zeros of the mantissa, capped).

    Mironov (2012): ``fl(x + noise)`` lies on the grid of the larger of |x|, |noise|, so the low
    mantissa bits of an output depend on the input.
    """
    bits = np.ascontiguousarray(v + 0.0).view(np.uint64)
    sign = bits >> np.uint64(63)
    expo = (bits >> np.uint64(52)) & np.uint64(0x7FF)
    low = bits & np.uint64((1 << _CTZ_BITS) - 1)
    ctz = _CTZ_TABLE[low]
    return (sign << np.uint64(16)) | (expo << np.uint64(4)) | ctz


def _describe_float_key(key: int) -> str:
    sign = "-" if (key >> 16) & 1 else "+"
    expo = ((key >> 4) & 0x7FF) - 1023
    ctz = key & 0xF
    tz = f">= {ctz}" if ctz == _CTZ_BITS else f"= {ctz}"
    return f"sign {sign}, exponent {expo}, trailing zero bits {tz}"


class _CellScore(ScoreStatistic):
    """Log-ratio score of output cells estimated on A (unseen cells score 0).

    A threshold on the score is the Neyman-Pearson event "cells whose estimated likelihood ratio
    exceeds t"; since the table is fitted on A and the threshold chosen on B, the event is
    fixed before the estimation samples are drawn.
    """

    def __init__(
        self,
        keyfn: Callable[[np.ndarray], np.ndarray],
        k1: np.ndarray,
        k2: np.ndarray,
        family: str,
        name: str,
        describe_key: Callable[[int], str],
    ) -> None:
        self.keyfn, self.family, self.name, self.describe_key = keyfn, family, name, describe_key
        keys, inv = np.unique(np.concatenate([k1, k2]), return_inverse=True)
        c1 = np.bincount(inv[: len(k1)], minlength=len(keys))
        c2 = np.bincount(inv[len(k1) :], minlength=len(keys))
        self.keys, self.counts = keys, c1 + c2
        self.scores = np.log((c1 + 0.5) / (len(k1) + 1.0)) - np.log((c2 + 0.5) / (len(k2) + 1.0))

    def _values(self, y: np.ndarray) -> np.ndarray:
        k = self.keyfn(y)
        idx = np.searchsorted(self.keys, k)
        idx = np.minimum(idx, len(self.keys) - 1)
        hit = self.keys[idx] == k
        return np.where(hit, self.scores[idx], 0.0)

    def label(self) -> str:
        return f"log-ratio score of {self.name}"

    def describe(self, op: str, t: float) -> str:
        sel = self.scores > t if op == "gt" else self.scores <= t
        keys, rest = self.keys[sel], self.keys[~sel]
        text = f"{self.label()} {'>' if op == 'gt' else '<='} {t:.6g}"
        unseen = (op == "gt" and 0.0 > t) or (op == "le" and 0.0 <= t)  # unseen cells score 0
        if unseen and not 0 < len(keys) <= 4 and 0 < len(rest) <= 4:  # e.g. all but NaN
            cells = "; ".join(self.describe_key(int(q)) for q in rest)
            return f"{text} (every output but the cells: {cells})"
        if 0 < len(keys) <= 4:
            text += " (cells: " + "; ".join(self.describe_key(int(q)) for q in keys) + ")"
        else:
            text += f" ({len(keys)} cells)"
        return text + (" + cells unseen in selection" if unseen else "")


def fit_snap(ya1: np.ndarray, ya2: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Rounds outputs to an absolute grid per coordinate (exact-arithmetic mode), fitted on the
    fit half A (``ya1`` under x, ``ya2`` under x2).

    ``fl(x + noise)`` lands on an input-dependent subset of the doubles (Mironov 2012), and a
    statistic whose threshold sits where only rounding decides (e.g. at the maximum of a sum of
    differences) inherits that leak. With ``float_bits=False`` every statistic therefore sees
    ``round(y / g) g`` with ``g_j = 2^-32 max(|q_0.01|, |q_0.99|)`` of coordinate j (fitted on A):
    each grid cell holds >= 2^15 doubles reachable from either input, so the events measure the
    mechanism's real-valued distribution, discretised. Any deterministic map keeps soundness.
    """
    f = _finite_features(np.concatenate([ya1, ya2]))
    mag = np.max(np.abs(np.quantile(f, [0.01, 0.99], axis=0)), axis=0)
    grid = np.ldexp(np.where(mag > 0, mag, 1.0), -32)

    def snap(y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.round(y / grid) * grid

    return snap


class Snapped(ScoreStatistic):
    """A statistic evaluated on snapped outputs (see :func:`fit_snap`), its values rounded to a
    2^-36-relative grid fitted on A, so that plateaus of the statistic (e.g. the maximum of the
    L1 log-ratio, reached by every output beyond both centres) are exact ties that one
    threshold can take whole, instead of being split by rounding noise."""

    def __init__(self, inner: ScoreStatistic, snap: Callable, ya: np.ndarray | None = None) -> None:
        self.inner, self.snap = inner, snap
        self.family = inner.family
        self.quantum = 0.0
        if ya is not None and not isinstance(inner, _CellScore):
            v = self.inner.values(self.snap(ya))
            v = v[np.isfinite(v)]
            if v.size:
                q = np.quantile(v, [0.01, 0.99])
                mag = float(np.max(np.abs(q)))
                self.quantum = math.ldexp(mag, -36) if mag > 0 else 0.0

    def _values(self, y: np.ndarray) -> np.ndarray:
        v = self.inner.values(self.snap(y))
        if self.quantum > 0:
            with np.errstate(all="ignore"):
                v = np.round(v / self.quantum) * self.quantum
        return v

    def label(self) -> str:
        return self.inner.label()

    @property
    def own(self) -> tuple[tuple[float, float], ...]:  # type: ignore[override]
        q = self.quantum  # the inner ranges on this statistic's grid (rounding is monotone)
        return tuple(tuple(np.round(np.array(r) / q) * q) if q > 0 else r for r in self.inner.own)

    def describe(self, op: str, t: float) -> str:
        return self.inner.describe(op, t) + " (outputs on a 2^-32-relative grid)"


def _coordinate(j: int, k: int) -> str:
    return "y" if k == 1 else f"y[{j}]"


def float_cell_statistic(ya1: np.ndarray, ya2: np.ndarray, j: int, k: int) -> _CellScore:
    def keyfn(y: np.ndarray) -> np.ndarray:
        return _float_keys(y[:, j])

    name = "float bit cells of " + _coordinate(j, k)
    return _CellScore(keyfn, keyfn(ya1), keyfn(ya2), "float-bits", name, _describe_float_key)


class UserStatistic(ScoreStatistic):
    """A user's (or the mechanism's ``audit_statistics()``) statistic for one pair:
    ``fn(outputs, x, x_prime)`` on the outputs exactly as ``privatize`` returned them, one
    finite real score per row. Checked on every call (shape, finiteness)."""

    family = "user"
    needs_raw = True

    def __init__(self, fn: Callable[..., Any], name: str, x: np.ndarray, x2: np.ndarray) -> None:
        self.fn, self.name, self.x, self.x2 = fn, name, x, x2
        self.who = f"statistic {name!r}"  # how its faults name it

    def values(self, y: np.ndarray) -> np.ndarray:
        return self._values(y)

    def _values(self, y: np.ndarray) -> np.ndarray:
        n = len(y)
        try:
            raw = self.fn(y, self.x, self.x2)
        except LdpAuditError:
            raise
        except Exception as exc:  # noqa: BLE001 - user code: wrapped with context, cause kept
            raise UserCodeError(
                f"{self.who} raised {type(exc).__name__} on {n} outputs: {exc}"
            ) from exc
        try:
            v = np.asarray(raw)
        except Exception as exc:  # noqa: BLE001 - e.g. ragged lists
            raise InvalidParameterError(
                f"{self.who} must return an array of {n} scores: {exc}"
            ) from exc
        if v.dtype == object or v.dtype.kind not in "biuf":
            raise InvalidParameterError(f"{self.who} must return real scores, got dtype {v.dtype}")
        if v.shape != (n,):
            raise InvalidParameterError(
                f"{self.who} must return one score per output row, shape ({n},), "
                f"got shape {v.shape}"
            )
        v = v.astype(np.float64)
        if not np.all(np.isfinite(v)):
            bad = int(np.count_nonzero(~np.isfinite(v)))
            raise InvalidParameterError(
                f"{self.who} returned {bad} non-finite score(s) (NaN or inf) of "
                f"{n}; scores must be finite real numbers"
            )
        return v

    def label(self) -> str:
        if self.name.isidentifier():
            return f"{self.name}(y, x, x2)"
        return f"statistic {self.name!r}"


class EventIndicator(UserStatistic):
    """A pre-registered event's indicator ``fn(outputs, x, x_prime)`` -> n booleans (or 0/1),
    checked on every call; ``name`` describes it."""

    family = "event"

    def __init__(self, fn: Callable[..., Any], name: str, x: np.ndarray, x2: np.ndarray) -> None:
        super().__init__(fn, name, x, x2)
        self.who = f"event: {name}"

    def _values(self, y: np.ndarray) -> np.ndarray:
        v = super()._values(y)
        if not np.all((v == 0.0) | (v == 1.0)):
            raise InvalidParameterError(
                f"{self.who} must return n booleans (or 0/1), one per output row, got "
                f"values such as {float(v[(v != 0.0) & (v != 1.0)][0])!r}"
            )
        return v

    def describe(self, op: str, t: float) -> str:
        return f"the pre-registered event {self.name}"


def statistic_list(raw: Any, where: str) -> list[tuple[Callable[..., Any], str]]:
    """Validate a list of user statistics (callables) and name them: their ``name`` attribute,
    else their ``__name__`` (a lambda gets its position), else ``where[i]``."""
    if raw is None:
        return []
    try:
        if isinstance(raw, (str, bytes)) or callable(raw):
            raise TypeError
        items = list(raw)
    except TypeError:
        raise InvalidParameterError(
            f"{where} must be a list of callables stat(outputs, x, x_prime), got "
            f"{type(raw).__name__}"
        ) from None
    out: list[tuple[Callable[..., Any], str]] = []
    for i, fn in enumerate(items):
        if not callable(fn):
            raise InvalidParameterError(
                f"{where}[{i}] must be callable as stat(outputs, x, x_prime), got "
                f"{type(fn).__name__} {fn!r:.60}"
            )
        name = getattr(fn, "name", None)
        if name is None:
            name = getattr(fn, "__name__", None)
            if name in (None, "<lambda>"):
                name = f"{where}[{i}]"
        if not isinstance(name, str) or not name:
            raise InvalidParameterError(
                f"{where}[{i}].name must be a non-empty string, got {name!r}"
            )
        out.append((fn, name))
    return out


def build_statistics(
    x: np.ndarray, x2: np.ndarray, ya1: np.ndarray, ya2: np.ndarray, snap: Callable | None = None
) -> tuple[list[ScoreStatistic], int, bool]:
    """The few statistics tried for one pair (kept small so Bonferroni stays cheap), the
    output coordinate that separates the pair best, and whether the outputs are discrete.
    ``snap`` (the outputs' grid, :func:`fit_snap`) puts the inputs on it for the input cells."""
    k = ya1.shape[1]
    stats: list[ScoreStatistic] = []
    r1, r2 = _row_keys(ya1), _row_keys(ya2)
    limit = min(_MAX_CELLS, (len(r1) + len(r2)) // 4)
    # a prefix with more distinct rows than the limit settles it without the full count
    head = np.concatenate([r1[: 8 * _MAX_CELLS], r2[: 8 * _MAX_CELLS]])
    n_rows = sorted_unique(head).size  # distinct rows (of the prefix when it settles it)
    n_rows = n_rows if n_rows > limit else sorted_unique(np.concatenate([r1, r2])).size
    discrete = n_rows <= limit

    def describe_row(q: int) -> str:
        for rows, keys in ((ya1, r1), (ya2, r2)):
            hit = np.flatnonzero(keys == q)
            if hit.size:
                return f"y = {short_values(rows[hit[0]].tolist(), 4)}"
        return "y = ?"

    if discrete:
        stats.append(_CellScore(_row_keys, r1, r2, "cells", "output cells", describe_row))
    else:
        # atoms: output rows seen more than once in A although the outputs are continuous (a
        # release of the input itself with some probability, a clamp); every other row
        # scores 0, so a threshold event is a set of atoms whose ratio the counts favour
        atoms = _CellScore(_row_keys, r1, r2, "atoms", "repeated output rows", describe_row)
        rep = atoms.counts >= 2
        if rep.any():
            atoms.keys, atoms.scores = atoms.keys[rep], atoms.scores[rep]
            stats.append(atoms)
    if k == 1:
        j = 0
    else:
        f1 = _finite_features(ya1)
        f2 = _finite_features(ya2)
        with np.errstate(all="ignore"):
            gap = np.abs(f1.mean(axis=0) - f2.mean(axis=0))
            sd = np.sqrt(0.5 * (f1.var(axis=0) + f2.var(axis=0)))
            z = np.where(sd > 0, gap / np.where(sd > 0, sd, 1.0), np.where(gap > 0, np.inf, 0.0))
        j = int(np.argmax(np.nan_to_num(z, nan=0.0)))
    stats.append(_Formula("coordinate", _coordinate(j, k), lambda y: y[:, j]))
    if k > 1:
        if x.shape[0] == k and np.any(x != x2):
            w = x - x2
            name = "x - x2"
        else:
            w = f1.mean(axis=0) - f2.mean(axis=0)
            name = "mean difference"
        scale = np.max(np.abs(w))
        if np.isfinite(scale) and scale > 0:
            w = w / scale
            stats.append(_Formula("projection", f"<y, {name}>", lambda y: y @ w))
        a, b = np.median(f1, axis=0), np.median(f2, axis=0)
        if np.any(a != b):
            # the exact log-likelihood ratio (up to scale) of additive Laplace noise around the
            # coordinate medians a, b of M(x), M(x2) on A
            text = "sum_i |y_i - median2_i| - |y_i - median1_i|"
            stats.append(
                _Formula("l1-ratio", text, lambda y: (np.abs(y - b) - np.abs(y - a)).sum(axis=1))
            )
        stats.append(_Formula("l1-norm", "||y||_1", lambda y: np.abs(y).sum(axis=1)))
        stats.append(_Formula("l2-norm", "||y||_2", lambda y: np.sqrt(np.einsum("ij,ij->i", y, y))))
        stats.append(_Classifier(ya1, ya2))
    if k == x.shape[0]:
        # the input cells: outputs equal to x or to x2, in an output space that is the input's
        # own (randomised response's, the exponential mechanism's); their events are marked on
        # every statistic (fixed by the pair: selection reads them at a looser level), and a
        # statistic of them is added where there are too many cells for the cells fitted on A
        # to single out the inputs' own (a rare release of the input itself)
        # (own names: the l1-ratio's lambda above reads a, b, the medians, when it is called)
        on_x, on_x2 = (snap(v[None, :])[0] if snap else v for v in (x, x2))
        cells = lambda y: (y == on_x).all(1) * 1.0 - (y == on_x2).all(1)  # noqa: E731
        ya = np.concatenate([ya1, ya2])
        ya = ya[cells(ya) == 0]  # A's outputs in neither input's cell

        def mark(st: ScoreStatistic) -> int:
            # the thresholds where x's (x2's) cell scores above (below) every other output of A
            v, ends = st.values(ya), st.values(np.stack([on_x, on_x2]))
            v = np.append(v, 0.0) if isinstance(st, _CellScore) else v  # unseen cells: 0
            hi, lo = v.max(initial=-np.inf), v.min(initial=np.inf)
            st.own = tuple((hi, e) for e in ends if e > hi) + tuple((e, lo) for e in ends if e < lo)
            return len(st.own)

        # only where A holds such an output (continuous outputs never equal an input: one more
        # statistic there would only cost the others power, Bonferroni), and not where the
        # cells fitted on A single out both inputs' cells already (k-RR over 200 values): a
        # second statistic with the same events would split the error over mirrored ones
        both = [mark(st) for st in stats if isinstance(st, _CellScore)] == [2]
        if n_rows > _FEW_CELLS and (cells(ya1).any() or cells(ya2).any()) and not both:
            stats.append(_Formula("input-cells", "[y = x] - [y = x2]", cells))
        for st in stats:
            mark(st)
    return stats, j, discrete
