"""Black-box epsilon auditor: a statistically sound lower bound on a mechanism's epsilon.

Given anything with ``epsilon`` (the claim) and ``privatize(x, rng)`` ((n, d) in, (n, k) out, rows
independent), :func:`audit` returns an :class:`AuditResult` whose ``epsilon_lower_bound``
satisfies

    P(epsilon_lower_bound > true epsilon) <= 1 - confidence

for every mechanism, by construction. The recipe (after DP-Sniper, Bichsel et al. 2021, and
Lu et al. 2022, with the Mironov 2012 floating-point attack added):

1. **Selection** (a fresh fraction of the samples, split in a *fit* half A and a *tune* half B).
   For every input pair (x, x2), fit a handful of one-dimensional statistics on A:
   the output itself / its most separating coordinate, the projection onto x - x2, the
   median-anchored L1 log-ratio (exact for additive Laplace noise), the L1 and L2 norms, a
   logistic-regression score trained to separate M(x) from M(x2) (multi-dimensional outputs),
   a log-ratio score of discrete output cells (few distinct outputs), and a log-ratio score of
   floating-point *bit cells* (sign, exponent, trailing zeros of the mantissa: Mironov
   2012 — additive noise in IEEE doubles leaves input-dependent gaps in the low bits). On B,
   choose for each statistic the threshold event ``{s > t}`` or ``{s <= t}`` and the direction
   (which input is the numerator) that maximise the bound the estimation step is expected to
   give. Keep the ``max_events`` best (pair, statistic) events overall.
2. **Estimation** (fresh samples, never used before). Count each kept event under M(x) and
   M(x2) and bound, for each event S with numerator input x,

       epsilon >= ln(CP_lower(P[M(x) in S]) - delta) - ln(CP_upper(P[M(x2) in S]))

   with one-sided Clopper-Pearson bounds at ``(1 - confidence) / (2 m)`` each (Bonferroni over
   the m estimated events; both directions were considered in selection and each estimated
   event carries its own direction). If the mechanism is (epsilon, delta)-DP then
   ``P[M(x) in S] <= e^epsilon P[M(x2) in S] + delta`` for every S, so the union bound gives the
   guarantee above, whatever the selection step did. The reported bound is the maximum over the
   m events, floored at 0.

Finding no violation proves nothing beyond this test's power: the mechanism may still violate
its claim on inputs or events that were not tried.

:func:`exact_epsilon` gives the white-box value for our own mechanisms from their
``privacy_loss`` so users can put claim, exact and empirical side by side.
"""

from __future__ import annotations

import abc
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import special

from ldp_audit._validation import check_probability
from ldp_audit.errors import InvalidParameterError
from ldp_audit.stats import epsilon_lower_bound_from_counts

__all__ = ["AuditResult", "Witness", "audit", "exact_epsilon", "default_pairs"]

#: float64 elements held per privatize call (outputs are streamed in chunks of this size).
_CHUNK_ELEMENTS = 1 << 22
#: rows of the fit half A used to train the classifier (fewer for very wide outputs).
_CLASSIFIER_ROWS = 20_000
#: float64 values of the fit half A kept per input (A is capped for very wide outputs).
_FIT_ELEMENTS = 1 << 24
#: at most this many distinct output rows for the discrete-cell statistic.
_MAX_CELLS = 4096
#: candidate thresholds per statistic.
_MAX_THRESHOLDS = 128
#: one-sided level of the shrunken selection rates (penalises noisy tail events).
_SHRINK = 0.05


# ----------------------------------------------------------------------------------------------
# results
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Witness:
    """The input pair and the event behind a lower bound.

    Attributes:
        x: the input whose output distribution is the numerator.
        x2: the other input.
        event: readable description of the event S.
        family: the statistic family that produced S (``"coordinate"``, ``"projection"``,
            ``"l1-ratio"``, ``"l1-norm"``, ``"l2-norm"``, ``"classifier"``, ``"cells"``,
            ``"float-bits"``).
        k1: estimation count of S among n1 outputs of M(x).
        n1: estimation samples of M(x).
        k2: estimation count of S among n2 outputs of M(x2).
        n2: estimation samples of M(x2).
    """

    x: tuple[float, ...]
    x2: tuple[float, ...]
    event: str
    family: str
    k1: int
    n1: int
    k2: int
    n2: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        d = asdict(self)
        d["x"] = list(self.x)
        d["x2"] = list(self.x2)
        return d


@dataclass(frozen=True)
class AuditResult:
    """Outcome of :func:`audit`.

    Attributes:
        epsilon_lower_bound: ``P(epsilon_lower_bound > true epsilon) <= 1 - confidence``;
            in the (epsilon, delta) form at ``delta`` when the mechanism claims delta > 0.
        claimed_epsilon: the mechanism's ``epsilon``.
        confidence: the confidence level of the bound.
        samples: outputs drawn per input of each pair (selection + estimation).
        witness: the pair and event attaining the bound (None only if nothing was estimated).
        seconds: wall-clock time of the audit.
        delta: the delta of the claim the bound refers to (0.0 for pure epsilon-DP).
        mechanism: a short description of the audited mechanism.
        pairs_tested: input pairs searched in the selection step.
        events_estimated: m, the events estimated on fresh samples (the Bonferroni factor).
        selection_samples: per input, the outputs used for selection (the rest estimate).
        float_bits: whether floating-point bit cells were among the searched events.
        bounds: per estimated event, its own bound (for diagnostics).
    """

    epsilon_lower_bound: float
    claimed_epsilon: float
    confidence: float
    samples: int
    witness: Witness | None
    seconds: float
    delta: float = 0.0
    mechanism: str = ""
    pairs_tested: int = 0
    events_estimated: int = 0
    selection_samples: int = 0
    float_bits: bool = True
    bounds: tuple[float, ...] = field(default_factory=tuple)

    @property
    def violation(self) -> bool:
        """True when the lower bound exceeds the claimed epsilon (the claim is refuted at the
        stated confidence)."""
        return self.epsilon_lower_bound > self.claimed_epsilon

    def summary(self) -> str:
        """Plain-text verdict with the witness and the caveat that a pass proves nothing."""
        form = f"(epsilon, delta={self.delta:g})" if self.delta > 0 else "pure epsilon"
        lines = [
            f"mechanism: {self.mechanism}",
            f"claimed epsilon: {self.claimed_epsilon:.6g} ({form})",
            f"epsilon lower bound: {self.epsilon_lower_bound:.6g} "
            f"at confidence {self.confidence:g}",
        ]
        if self.violation:
            lines.append(
                "VIOLATION: the mechanism's true epsilon exceeds its claim (this conclusion is "
                f"wrong with probability at most {1 - self.confidence:.3g})."
            )
        else:
            lines.append(
                "no violation found. This proves nothing beyond this test's power: the "
                "mechanism may still violate its claim on inputs, events or sample sizes that "
                "were not tried."
            )
        if self.violation and self.witness is not None and self.witness.family == "float-bits":
            lines.append(
                "  the leak is in the floating-point representation (Mironov 2012): outputs of "
                "M(x) and M(x2) occupy different sets of doubles. The mechanism may be correct "
                "in exact arithmetic (audit it with float_bits=False / --no-float-bits); a "
                "float-safe implementation (snapping, discrete noise on a grid) removes the leak."
            )
        if self.witness is not None:
            w = self.witness
            lines.append(f"witness: x = {_short(w.x)}, x2 = {_short(w.x2)}")
            lines.append(f"  event: {w.event}  [{w.family}]")
            lines.append(
                f"  counts: {w.k1}/{w.n1} under M(x), {w.k2}/{w.n2} under M(x2) "
                "(fresh estimation samples)"
            )
        lines.append(
            f"{self.samples} samples per input ({self.selection_samples} for selection), "
            f"{self.pairs_tested} pair(s) searched, {self.events_estimated} event(s) estimated "
            f"(Bonferroni), {self.seconds:.2f} s"
        )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (``violation`` included); infinities become strings ``"inf"``."""
        d = {
            "epsilon_lower_bound": _json_float(self.epsilon_lower_bound),
            "claimed_epsilon": _json_float(self.claimed_epsilon),
            "violation": self.violation,
            "confidence": self.confidence,
            "delta": self.delta,
            "samples": self.samples,
            "selection_samples": self.selection_samples,
            "witness": None if self.witness is None else self.witness.to_dict(),
            "seconds": self.seconds,
            "mechanism": self.mechanism,
            "pairs_tested": self.pairs_tested,
            "events_estimated": self.events_estimated,
            "float_bits": self.float_bits,
            "bounds": [_json_float(b) for b in self.bounds],
        }
        return d


def _json_float(v: float) -> float | str:
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def _short(v: Sequence[float], k: int = 6) -> str:
    vals = [f"{a:.4g}" for a in v[:k]]
    more = f", ... ({len(v)} values)" if len(v) > k else ""
    return "[" + ", ".join(vals) + more + "]"


# ----------------------------------------------------------------------------------------------
# one-dimensional statistics (fitted on the A half of the selection samples)
# ----------------------------------------------------------------------------------------------


class _Statistic(abc.ABC):
    """A deterministic map from an (n, k) output batch to n real scores (NaN -> +inf)."""

    family = "statistic"

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


class _Coordinate(_Statistic):
    family = "coordinate"

    def __init__(self, j: int, k: int) -> None:
        self.j, self.k = j, k

    def _values(self, y: np.ndarray) -> np.ndarray:
        return y[:, self.j]

    def label(self) -> str:
        return "y" if self.k == 1 else f"y[{self.j}]"


class _Projection(_Statistic):
    family = "projection"

    def __init__(self, w: np.ndarray, name: str) -> None:
        self.w, self.name = w, name

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return y @ self.w

    def label(self) -> str:
        return f"<y, {self.name}>"


class _Norm(_Statistic):
    def __init__(self, order: int) -> None:
        self.order = order
        self.family = f"l{order}-norm"

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            if self.order == 1:
                return np.abs(y).sum(axis=1)
            return np.sqrt(np.einsum("ij,ij->i", y, y))

    def label(self) -> str:
        return f"||y||_{self.order}"


class _MedianL1Ratio(_Statistic):
    """``sum_i |y_i - b_i| - |y_i - a_i|`` with a, b the coordinate medians of M(x), M(x2) on A:
    the exact log-likelihood ratio (up to scale) of additive Laplace noise around a and b."""

    family = "l1-ratio"

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        self.a, self.b = a, b

    def _values(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return (np.abs(y - self.b) - np.abs(y - self.a)).sum(axis=1)

    def label(self) -> str:
        return "sum_i |y_i - median2_i| - |y_i - median1_i|"


def _finite_features(y: np.ndarray) -> np.ndarray:
    return np.clip(np.nan_to_num(y, nan=0.0, posinf=1e150, neginf=-1e150), -1e150, 1e150)


class _Classifier(_Statistic):
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


class _CellScore(_Statistic):
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
        self.keys = keys
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
        keys = self.keys[sel]
        text = f"{self.label()} {'>' if op == 'gt' else '<='} {t:.6g}"
        if 0 < len(keys) <= 4:
            text += " (cells: " + "; ".join(self.describe_key(int(q)) for q in keys) + ")"
        else:
            text += f" ({len(keys)} cells)"
        if (op == "gt" and 0.0 > t) or (op == "le" and 0.0 <= t):
            text += " + cells unseen in selection"
        return text


class _Snap:
    """Rounds outputs to an absolute grid per coordinate (exact-arithmetic mode).

    ``fl(x + noise)`` lands on an input-dependent subset of the doubles (Mironov 2012), and a
    statistic whose threshold sits where only rounding decides (e.g. at the maximum of a sum of
    differences) inherits that leak. With ``float_bits=False`` every statistic therefore sees
    ``round(y / g) g`` with ``g_j = 2^-32 max(|q_0.01|, |q_0.99|)`` of coordinate j (fitted on A):
    each grid cell holds >= 2^15 doubles reachable from either input, so the events measure the
    mechanism's real-valued distribution, discretised. Any deterministic map keeps soundness.
    """

    def __init__(self, grid: np.ndarray) -> None:
        self.grid = grid

    @classmethod
    def fit(cls, ya1: np.ndarray, ya2: np.ndarray) -> _Snap:
        f = _finite_features(np.concatenate([ya1, ya2]))
        q = np.quantile(f, [0.01, 0.99], axis=0)
        mag = np.max(np.abs(q), axis=0)
        grid = np.ldexp(np.where(mag > 0, mag, 1.0), -32)
        return cls(grid)

    def __call__(self, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.round(y / self.grid) * self.grid


class _Snapped(_Statistic):
    """A statistic evaluated on snapped outputs (see :class:`_Snap`)."""

    def __init__(self, inner: _Statistic, snap: _Snap) -> None:
        self.inner, self.snap = inner, snap
        self.family = inner.family

    def _values(self, y: np.ndarray) -> np.ndarray:
        return self.inner.values(self.snap(y))

    def label(self) -> str:
        return self.inner.label()

    def describe(self, op: str, t: float) -> str:
        return self.inner.describe(op, t) + " (outputs on a 2^-32-relative grid)"


def _float_cell_statistic(ya1: np.ndarray, ya2: np.ndarray, j: int, k: int) -> _CellScore:
    def keyfn(y: np.ndarray) -> np.ndarray:
        return _float_keys(y[:, j])

    name = "float bit cells of " + ("y" if k == 1 else f"y[{j}]")
    return _CellScore(keyfn, keyfn(ya1), keyfn(ya2), "float-bits", name, _describe_float_key)


def _build_statistics(
    x: np.ndarray, x2: np.ndarray, ya1: np.ndarray, ya2: np.ndarray, float_bits: bool
) -> list[_Statistic]:
    """The few statistics tried for one pair (kept small so Bonferroni stays cheap)."""
    k = ya1.shape[1]
    stats: list[_Statistic] = []
    r1, r2 = _row_keys(ya1), _row_keys(ya2)
    n_cells = np.unique(np.concatenate([r1, r2])).size
    discrete = n_cells <= min(_MAX_CELLS, (len(r1) + len(r2)) // 4)
    if discrete:
        examples: dict[int, np.ndarray] = {}
        for rows, keys in ((ya1, r1), (ya2, r2)):
            uk, first = np.unique(keys, return_index=True)
            for q, i in zip(uk.tolist(), first.tolist(), strict=True):
                examples.setdefault(q, rows[i])

        def describe_row(q: int) -> str:
            row = examples.get(q)
            return "y = ?" if row is None else f"y = {_short(row.tolist(), 4)}"

        stats.append(_CellScore(_row_keys, r1, r2, "cells", "output cells", describe_row))
    if k == 1:
        stats.append(_Coordinate(0, 1))
        j = 0
    else:
        f1 = _finite_features(ya1)
        f2 = _finite_features(ya2)
        with np.errstate(all="ignore"):
            gap = np.abs(f1.mean(axis=0) - f2.mean(axis=0))
            sd = np.sqrt(0.5 * (f1.var(axis=0) + f2.var(axis=0)))
            z = np.where(sd > 0, gap / np.where(sd > 0, sd, 1.0), np.where(gap > 0, np.inf, 0.0))
        j = int(np.argmax(np.nan_to_num(z, nan=0.0)))
        stats.append(_Coordinate(j, k))
        if x.shape[0] == k and np.any(x != x2):
            w = x - x2
            name = "x - x2"
        else:
            w = f1.mean(axis=0) - f2.mean(axis=0)
            name = "mean difference"
        scale = np.max(np.abs(w))
        if np.isfinite(scale) and scale > 0:
            stats.append(_Projection(w / scale, name))
        med1, med2 = np.median(f1, axis=0), np.median(f2, axis=0)
        if np.any(med1 != med2):
            stats.append(_MedianL1Ratio(med1, med2))
        stats.append(_Norm(1))
        stats.append(_Norm(2))
        stats.append(_Classifier(ya1, ya2))
    if float_bits and not discrete:
        stats.append(_float_cell_statistic(ya1, ya2, j, k))
    return stats


# ----------------------------------------------------------------------------------------------
# threshold selection
# ----------------------------------------------------------------------------------------------


def _cp_lower(k: np.ndarray, n: float, a: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        lo = special.betaincinv(np.maximum(k, 1e-300), n - k + 1.0, a)
    return np.where(k <= 0, 0.0, lo)


def _cp_upper(k: np.ndarray, n: float, a: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        hi = special.betaincinv(k + 1.0, np.maximum(n - k, 1e-300), 1.0 - a)
    return np.where(k >= n, 1.0, hi)


def _predicted_bound(
    c_num: np.ndarray, c_den: np.ndarray, n_sel: int, n_est: int, alpha_event: float, delta: float
) -> np.ndarray:
    """The bound an event is expected to give on ``n_est`` fresh samples, from its selection
    counts shrunk to one-sided ``_SHRINK`` Clopper-Pearson bounds (so that noisy tail events,
    whose selection ratio is inflated by the maximum over thresholds, are not over-trusted)."""
    p_num = _cp_lower(c_num.astype(np.float64), float(n_sel), _SHRINK)
    p_den = _cp_upper(c_den.astype(np.float64), float(n_sel), _SHRINK)
    lo = _cp_lower(p_num * n_est, float(n_est), alpha_event / 2.0) - delta
    hi = _cp_upper(p_den * n_est, float(n_est), alpha_event / 2.0)
    with np.errstate(all="ignore"):
        return np.where(lo > 0, np.log(np.maximum(lo, 1e-300)) - np.log(hi), -np.inf)


@dataclass
class _Candidate:
    pair: int
    stat: _Statistic
    op: str  # "gt": s > t, "le": s <= t
    t: float
    x_is_numerator: bool
    predicted: float
    sel_counts: tuple[int, int]

    def indicator(self, s: np.ndarray) -> np.ndarray:
        return s > self.t if self.op == "gt" else s <= self.t


def _best_event(
    stat: _Statistic,
    s1: np.ndarray,
    s2: np.ndarray,
    pair: int,
    n_est: int,
    alpha_event: float,
    delta: float,
) -> _Candidate | None:
    """Best threshold event ``{s > t}`` / ``{s <= t}`` and direction for one statistic."""
    s1 = np.sort(s1)
    s2 = np.sort(s2)
    n = len(s1)
    pooled = np.concatenate([s1, s2])
    uniq = np.unique(pooled)
    if uniq.size <= 1:
        return None
    if uniq.size <= _MAX_THRESHOLDS:
        ts = uniq[:-1]
    else:
        qs = np.linspace(0.0, 1.0, _MAX_THRESHOLDS + 2)[1:-1]
        ts = np.unique(np.quantile(pooled, qs, method="inverted_cdf"))
        ts = ts[ts < uniq[-1]]
        if ts.size == 0:
            return None
    g1 = n - np.searchsorted(s1, ts, side="right")
    g2 = len(s2) - np.searchsorted(s2, ts, side="right")
    l1, l2 = n - g1, len(s2) - g2
    # combos: (op, x numerator?) -> (numerator counts, denominator counts)
    combos = (
        ("gt", True, g1, g2),
        ("gt", False, g2, g1),
        ("le", True, l1, l2),
        ("le", False, l2, l1),
    )
    best: _Candidate | None = None
    for op, x_num, c_num, c_den in combos:
        pred = _predicted_bound(c_num, c_den, n, n_est, alpha_event, delta)
        i = int(np.argmax(pred))
        if best is None or pred[i] > best.predicted:
            best = _Candidate(
                pair, stat, op, float(ts[i]), x_num, float(pred[i]), (int(c_num[i]), int(c_den[i]))
            )
    return best


# ----------------------------------------------------------------------------------------------
# sampling
# ----------------------------------------------------------------------------------------------


def _privatize_rows(mechanism: Any, x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """One privatize call on n copies of x; output coerced to float64 (n, k)."""
    y = mechanism.privatize(np.repeat(x[None, :], n, axis=0), rng)
    y = np.asarray(y)
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != n:
        raise InvalidParameterError(
            f"mechanism.privatize must return an array of shape (n, k) with n = {n} rows for "
            f"an (n, d) input, got shape {y.shape}"
        )
    if y.dtype != np.float64:
        y = y.astype(np.float64)
    return y


def _chunks(n: int, d: int) -> list[int]:
    size = max(1024, _CHUNK_ELEMENTS // max(1, d))
    out = [size] * (n // size)
    if n % size:
        out.append(n % size)
    return out


def _sample(
    mechanism: Any, x: np.ndarray, n: int, rng: np.random.Generator, width: int
) -> np.ndarray:
    parts = [_privatize_rows(mechanism, x, m, rng) for m in _chunks(n, width)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _stream_values(
    mechanism: Any,
    x: np.ndarray,
    n: int,
    rng: np.random.Generator,
    stats: Sequence[_Statistic],
    tick: Callable[[int], None],
    width: int,
) -> list[np.ndarray]:
    """Statistic values of n fresh outputs of M(x), computed chunk by chunk."""
    acc: list[list[np.ndarray]] = [[] for _ in stats]
    for m in _chunks(n, width):
        y = _privatize_rows(mechanism, x, m, rng)
        for a, st in zip(acc, stats, strict=True):
            a.append(st.values(y))
        tick(m)
    return [np.concatenate(a) for a in acc]


def _stream_counts(
    mechanism: Any,
    x: np.ndarray,
    n: int,
    rng: np.random.Generator,
    events: Sequence[_Candidate],
    tick: Callable[[int], None],
    width: int,
) -> list[int]:
    counts = [0] * len(events)
    for m in _chunks(n, width):
        y = _privatize_rows(mechanism, x, m, rng)
        cache: dict[int, np.ndarray] = {}
        for i, ev in enumerate(events):
            key = id(ev.stat)
            if key not in cache:
                cache[key] = ev.stat.values(y)
            counts[i] += int(np.count_nonzero(ev.indicator(cache[key])))
        tick(m)
    return counts


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------


def _as_pair(pair: Any, i: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        x, x2 = pair
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"pairs[{i}] must be a pair (x, x2) of 1-D input arrays, got {pair!r}"
        ) from None
    out = []
    for v, name in ((x, "x"), (x2, "x2")):
        a = np.asarray(v, dtype=np.float64) if not isinstance(v, np.ndarray) else v
        if a.ndim == 0:
            a = a.reshape(1)
        if a.ndim != 1 or a.size == 0:
            raise InvalidParameterError(
                f"pairs[{i}] {name} must be a non-empty 1-D array, got shape {np.shape(v)}"
            )
        a = np.asarray(a, dtype=np.float64)
        if not np.all(np.isfinite(a)):
            raise InvalidParameterError(f"pairs[{i}] {name} must be finite, got {a.tolist()!r}")
        out.append(a)
    if out[0].shape != out[1].shape:
        raise InvalidParameterError(
            f"pairs[{i}] x and x2 must have the same length, got {out[0].size} and {out[1].size}"
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
    d = dim if dim is not None else getattr(mechanism, "dim", None) or 1
    raw = fn(d)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    seen: set[bytes] = set()
    for i, p in enumerate(raw):
        x, x2 = _as_pair(p, i)
        key = np.concatenate([x + 0.0, x2 + 0.0]).tobytes()
        if key not in seen:
            seen.add(key)
            out.append((x, x2))
    if not out:
        raise InvalidParameterError("mechanism.candidate_pairs returned no pairs")
    return out


def _mechanism_label(mechanism: Any) -> str:
    to_config = getattr(mechanism, "to_config", None)
    if callable(to_config):
        try:
            cfg = to_config()
            return ", ".join(f"{k}={v}" for k, v in cfg.items())
        except Exception:  # noqa: BLE001 - a user's to_config may fail; the label is cosmetic
            pass
    return type(mechanism).__name__


def _check_mechanism(mechanism: Any) -> tuple[float, float]:
    if not callable(getattr(mechanism, "privatize", None)) or not hasattr(mechanism, "epsilon"):
        raise InvalidParameterError(
            "mechanism must have an epsilon attribute and a privatize(x, rng) method, got "
            f"{type(mechanism).__name__}"
        )
    try:
        eps = float(mechanism.epsilon)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"mechanism.epsilon must be a real number, got {mechanism.epsilon!r}"
        ) from None
    if math.isnan(eps) or eps < 0:
        raise InvalidParameterError(f"mechanism.epsilon must be >= 0, got {mechanism.epsilon!r}")
    delta = float(getattr(mechanism, "delta", 0.0) or 0.0)
    if not 0.0 <= delta < 1.0:
        raise InvalidParameterError(f"mechanism.delta must be in [0, 1), got {delta!r}")
    return eps, delta


def audit(
    mechanism: Any,
    pairs: Sequence[tuple[Any, Any]] | None = None,
    *,
    samples: int = 1_000_000,
    confidence: float = 0.95,
    rng: np.random.Generator | int | None = None,
    dim: int | None = None,
    selection_fraction: float = 0.1,
    max_events: int = 2,
    float_bits: bool = True,
    progress: bool = False,
) -> AuditResult:
    """Audit a mechanism's epsilon claim: a sound lower bound, a verdict and a witness.

    Guarantee: ``P(result.epsilon_lower_bound > true epsilon) <= 1 - confidence``, for any
    mechanism whose rows are independent given the input (Clopper-Pearson on fresh estimation
    samples, Bonferroni over the estimated events; see the module docstring). For a mechanism
    with ``delta > 0`` the bound is in the (epsilon, delta) form at that delta.

    Args:
        mechanism: anything with ``epsilon`` (the claim), optionally ``delta``, and
            ``privatize(x, rng)`` mapping (n, d) inputs to (n, k) outputs, rows independent.
        pairs: list of (x, x2) 1-D input arrays to compare. None: the mechanism's declared
            ``candidate_pairs(dim)`` (a mechanism without one needs explicit pairs).
        samples: outputs per input of each pair, >= 1000: ``selection_fraction`` of them select
            events for every pair; the rest estimate, drawn only for pairs a kept event uses.
        confidence: in (0, 1).
        rng: a ``numpy.random.Generator``, an int seed, or None (fresh entropy).
        dim: input dimension for ``candidate_pairs`` (default: ``mechanism.dim`` or 1).
        selection_fraction: share of ``samples`` used to choose events, in (0, 1).
        max_events: how many events are estimated on fresh samples (the Bonferroni factor).
        float_bits: also search floating-point bit cells (Mironov 2012). Additive noise computed
            in IEEE doubles (``x + rng.laplace(...)``) leaks through the low bits, so with this
            on, such implementations are (rightly) flagged; set False to audit the mechanism as
            if it computed in exact arithmetic.
        progress: show a tqdm progress bar on stderr.

    Returns:
        The :class:`AuditResult`.

    Raises:
        InvalidParameterError: invalid arguments, a mechanism without ``privatize``/``epsilon``,
            no pairs for a mechanism that declares no domain, or malformed outputs.
    """
    start = time.perf_counter()
    claimed, delta = _check_mechanism(mechanism)
    conf = check_probability(confidence, "confidence")
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1000:
        raise InvalidParameterError(f"samples must be an integer >= 1000, got {samples!r}")
    frac = check_probability(selection_fraction, "selection_fraction")
    if isinstance(max_events, bool) or not isinstance(max_events, (int, np.integer)):
        raise InvalidParameterError(f"max_events must be an integer >= 1, got {max_events!r}")
    if max_events < 1:
        raise InvalidParameterError(f"max_events must be an integer >= 1, got {max_events!r}")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, (int, np.integer))):
        raise InvalidParameterError(f"dim must be an integer >= 1, got {dim!r}")
    if dim is not None and dim < 1:
        raise InvalidParameterError(f"dim must be an integer >= 1, got {dim!r}")
    if rng is None or isinstance(rng, (int, np.integer)):
        rng = np.random.default_rng(rng)
    elif not isinstance(rng, np.random.Generator):
        raise InvalidParameterError(
            f"rng must be a numpy.random.Generator, an int seed or None, got {type(rng).__name__}"
        )
    if pairs is None:
        pair_list = default_pairs(mechanism, dim)
    else:
        if len(pairs) == 0:
            raise InvalidParameterError("pairs must contain at least one (x, x2) pair, got []")
        pair_list = [_as_pair(p, i) for i, p in enumerate(pairs)]

    samples = int(samples)
    n_sel = max(200, int(round(samples * frac)))
    n_est = samples - n_sel
    if n_est < 200:
        raise InvalidParameterError(
            f"selection_fraction leaves {n_est} estimation samples; need >= 200 "
            f"(samples={samples}, selection_fraction={frac})"
        )
    n_a = n_sel // 2
    n_b = n_sel - n_a
    alpha = 1.0 - conf
    alpha_sel = alpha / int(max_events)

    from tqdm.auto import tqdm

    total = 2 * n_sel * len(pair_list) + 2 * n_est * min(len(pair_list), int(max_events))
    bar = tqdm(total=total, disable=not progress, unit="sample", desc="audit", leave=False)
    try:
        # ---- selection -------------------------------------------------------------------
        streams = rng.spawn(len(pair_list))
        candidates: list[_Candidate] = []
        est_rngs: list[tuple[np.random.Generator, np.random.Generator]] = []
        widths: list[int] = []
        for p, (x, x2) in enumerate(pair_list):
            ra1, ra2, rb1, rb2, re1, re2 = streams[p].spawn(6)
            est_rngs.append((re1, re2))
            # width of one output row, from a small probe, so chunks stay ~2^22 values even
            # when outputs are much wider than inputs (one-hot encodings)
            width = max(x.shape[0], _privatize_rows(mechanism, x, 8, ra1).shape[1])
            widths.append(width)
            n_a_p = min(n_a, max(1000, _FIT_ELEMENTS // width))
            ya1 = _sample(mechanism, x, n_a_p, ra1, width)
            ya2 = _sample(mechanism, x2, n_a_p, ra2, width)
            if ya1.shape[1] != ya2.shape[1]:
                raise InvalidParameterError(
                    f"mechanism.privatize returned {ya1.shape[1]} and {ya2.shape[1]} columns for "
                    f"the two inputs of pairs[{p}]; outputs must have one shape"
                )
            bar.update(2 * n_a)  # (counted as drawn even when capped for wide outputs)
            if float_bits:
                stats = _build_statistics(x, x2, ya1, ya2, True)
            else:
                snap = _Snap.fit(ya1, ya2)
                inner = _build_statistics(x, x2, snap(ya1), snap(ya2), False)
                stats = [_Snapped(st, snap) for st in inner]
            del ya1, ya2
            sb1 = _stream_values(mechanism, x, n_b, rb1, stats, bar.update, width)
            sb2 = _stream_values(mechanism, x2, n_b, rb2, stats, bar.update, width)
            for st, v1, v2 in zip(stats, sb1, sb2, strict=True):
                c = _best_event(st, v1, v2, p, n_est, alpha_sel, delta)
                if c is not None:
                    candidates.append(c)
        candidates.sort(key=lambda c: c.predicted, reverse=True)
        chosen: list[_Candidate] = []
        seen: set[tuple[int, str, tuple[int, int]]] = set()
        for c in candidates:
            sig = (c.pair, c.stat.family, c.sel_counts)
            dup = (c.pair, "", c.sel_counts)
            if sig in seen or dup in seen:
                continue
            seen.add(sig)
            seen.add(dup)
            chosen.append(c)
            if len(chosen) == max_events:
                break
        # ---- estimation on fresh samples -------------------------------------------------
        m = len(chosen)
        bounds: list[float] = []
        witness: Witness | None = None
        best = -math.inf
        by_pair: dict[int, list[_Candidate]] = {}
        for c in chosen:
            by_pair.setdefault(c.pair, []).append(c)
        bar.total = 2 * n_sel * len(pair_list) + 2 * n_est * len(by_pair)
        bar.refresh()
        results: dict[int, tuple[int, int]] = {}
        for p, evs in by_pair.items():
            x, x2 = pair_list[p]
            re1, re2 = est_rngs[p]
            k_x = _stream_counts(mechanism, x, n_est, re1, evs, bar.update, widths[p])
            k_x2 = _stream_counts(mechanism, x2, n_est, re2, evs, bar.update, widths[p])
            for ev, a, b in zip(evs, k_x, k_x2, strict=True):
                results[id(ev)] = (a, b)
        for ev in chosen:
            a, b = results[id(ev)]
            k_num, k_den = (a, b) if ev.x_is_numerator else (b, a)
            bnd = float(
                epsilon_lower_bound_from_counts(k_num, n_est, k_den, n_est, alpha / m, delta=delta)
            )
            bounds.append(bnd)
            if witness is None or bnd > best:
                best = bnd
                x, x2 = pair_list[ev.pair]
                xn, xd = (x, x2) if ev.x_is_numerator else (x2, x)
                witness = Witness(
                    x=tuple(float(v) for v in xn),
                    x2=tuple(float(v) for v in xd),
                    event=ev.stat.describe(ev.op, ev.t),
                    family=ev.stat.family,
                    k1=k_num,
                    n1=n_est,
                    k2=k_den,
                    n2=n_est,
                )
    finally:
        bar.close()
    return AuditResult(
        epsilon_lower_bound=max(0.0, best) if bounds else 0.0,
        claimed_epsilon=claimed,
        confidence=conf,
        samples=samples,
        witness=witness,
        seconds=time.perf_counter() - start,
        delta=delta,
        mechanism=_mechanism_label(mechanism),
        pairs_tested=len(pair_list),
        events_estimated=m,
        selection_samples=n_sel,
        float_bits=bool(float_bits),
        bounds=tuple(bounds),
    )


# ----------------------------------------------------------------------------------------------
# white-box: exact epsilon of our own mechanisms
# ----------------------------------------------------------------------------------------------


def exact_epsilon(
    mechanism: Any,
    pairs: Sequence[tuple[Any, Any]] | None = None,
    *,
    dim: int | None = None,
    samples: int = 20_000,
    rng: np.random.Generator | int | None = 0,
) -> float:
    """The supremum of the privacy loss over outputs, for the given pairs (white-box).

    Uses the mechanism's exact ``privacy_loss(x, x2, y)`` (``privacy_loss(x, x2, bits,
    matrices)`` for PRS, whose loss is conditional on the random matrix). The supremum over
    outputs is taken over probe outputs (``x``, ``x2``, points beyond them along ``x - x2``,
    sign vectors) and ``samples`` draws from each input; this is exact for our mechanisms
    (Laplace: the loss is constant beyond both clipped inputs; discrete outputs: the maximising
    output is drawn with overwhelming probability at moderate dimension) and a lower estimate
    otherwise. For a mechanism with ``delta > 0`` that exposes ``sigma`` and ``clip_rows``
    (the Gaussian), the exact analytic-Gaussian epsilon at ``delta`` for the pair's clipped L2
    distance is returned instead (Balle & Wang 2018), since its pure loss is unbounded.

    Args:
        mechanism: one of our mechanisms (anything with ``privacy_loss``).
        pairs: input pairs; None: ``candidate_pairs(dim)``.
        dim: input dimension for ``candidate_pairs``.
        samples: draws per input for the sample supremum.
        rng: generator or seed for those draws.

    Returns:
        The largest loss over the pairs (``inf`` if unbounded).

    Raises:
        InvalidParameterError: the mechanism has no ``privacy_loss``.
    """
    if not callable(getattr(mechanism, "privacy_loss", None)):
        raise InvalidParameterError(
            "exact_epsilon needs a mechanism with privacy_loss(x, x2, y) (white-box); got "
            f"{type(mechanism).__name__}. Use audit() for a black-box lower bound."
        )
    pair_list = (
        default_pairs(mechanism, dim)
        if pairs is None
        else [_as_pair(p, i) for i, p in enumerate(pairs)]
    )
    if isinstance(samples, bool) or not isinstance(samples, (int, np.integer)) or samples < 1:
        raise InvalidParameterError(f"samples must be an integer >= 1, got {samples!r}")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    delta = float(getattr(mechanism, "delta", 0.0) or 0.0)
    if (
        delta > 0
        and hasattr(mechanism, "sigma")
        and callable(getattr(mechanism, "clip_rows", None))
    ):
        from ldp_audit.mechanisms import analytic_gaussian_epsilon

        best = 0.0
        for x, x2 in pair_list:
            dist = float(
                np.linalg.norm(mechanism.clip_rows(x[None, :]) - mechanism.clip_rows(x2[None, :]))
            )
            if dist > 0:
                best = max(best, analytic_gaussian_epsilon(mechanism.sigma, dist, delta))
        return best
    best = 0.0
    with_matrices = callable(getattr(mechanism, "privatize_with_matrices", None))
    for x, x2 in pair_list:
        for src in (x, x2):
            batch = np.repeat(src[None, :], int(samples), axis=0)
            if with_matrices:
                _, bits, mats = mechanism.privatize_with_matrices(batch, gen)
                loss = mechanism.privacy_loss(x[None, :], x2[None, :], bits, mats)
            else:
                y = _privatize_rows(mechanism, src, int(samples), gen)
                loss = mechanism.privacy_loss(x[None, :], x2[None, :], y)
            best = max(best, float(np.max(np.abs(loss))))
        if not with_matrices:
            diff = x - x2
            sgn = np.where(diff >= 0, 1.0, -1.0)
            probes = [x, x2, sgn, -sgn]
            for t in (0.5, 1.0, 2.0, 10.0, 1e3):
                probes += [x + t * diff, x2 - t * diff]
            for yv in probes:
                try:
                    loss = mechanism.privacy_loss(x[None, :], x2[None, :], yv[None, :])
                except (InvalidParameterError, ValueError):
                    continue
                best = max(best, float(np.max(np.abs(loss))))
    return best
