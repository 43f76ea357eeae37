"""The paper's Figure 3-4 trends, tested: exact permutation tests of rank sums between two boxes
of episodes to mission (Wilcoxon-Mann-Whitney for location, Siegel-Tukey for dispersion),
Holm's correction over the family, distribution-free intervals for the medians.

Used by :mod:`ldp_audit.training.frd.reproduce` (the report's "trends" section); every function
here is pure (no randomness: the permutation distributions are counted, not sampled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_choice

__all__ = ["ALPHA", "TRENDS", "holm", "median_ci", "rank_sum_test", "trend_tests"]

# ------------------------------------------------------------------------------------------------
# The paper's trends, tested: exact permutation tests of rank sums (Figure 3 / 4 boxes)
# ------------------------------------------------------------------------------------------------

#: Family-wise error rate of the trend tests (Holm's step-down correction over the family).
ALPHA = 0.05

#: The comparisons the paper's text states (PAPER_CLAIMS), one row per pair of boxes. A box is
#: (kind, setting, agents); "expect" is what the paper says: "a" (box a reaches the mission in
#: fewer episodes), "b", "same" (no difference), or "a narrower" (the smaller variation).
TRENDS: tuple[dict[str, Any], ...] = (
    {"claim": "setting4_vs_2", "a": ("frd", 4, 1), "b": ("frd", 2, 1), "expect": "a"},
    {"claim": "setting4_vs_2", "a": ("frd", 4, 4), "b": ("frd", 2, 4), "expect": "b"},
    {"claim": "setting5", "a": ("frd", 5, 1), "b": ("frd", 5, 2), "expect": "a"},
    {"claim": "setting5", "a": ("frd", 5, 2), "b": ("frd", 5, 4), "expect": "a"},
    {"claim": "setting6", "a": ("frd", 6, 2), "b": ("frd", 6, 1), "expect": "a"},
    {"claim": "setting6", "a": ("frd", 6, 4), "b": ("frd", 6, 2), "expect": "a"},
    {"claim": "setting2_vs_3", "a": ("frd", 2, 1), "b": ("frd", 3, 1), "expect": "a"},
    {"claim": "setting2_vs_3", "a": ("frd", 2, 2), "b": ("frd", 3, 2), "expect": "a"},
    {"claim": "setting2_vs_3", "a": ("frd", 2, 4), "b": ("frd", 3, 4), "expect": "a"},
    {"claim": "setting1_vs_2", "a": ("frd", 1, 1), "b": ("frd", 2, 1), "expect": "a"},
    {"claim": "setting1_vs_2", "a": ("frd", 1, 2), "b": ("frd", 2, 2), "expect": "a"},
    {"claim": "setting1_vs_2", "a": ("frd", 1, 4), "b": ("frd", 2, 4), "expect": "a"},
    {"claim": "setting6_7", "a": ("frd", 7, 4), "b": ("frd", 7, 2), "expect": "same"},
    {"claim": "fig4", "a": ("frd", 1, 1), "b": ("fedavg", 1, 1), "expect": "same"},
    {"claim": "fig4", "a": ("frd", 1, 2), "b": ("fedavg", 1, 2), "expect": "same"},
    {"claim": "fig4", "a": ("frd", 1, 4), "b": ("fedavg", 1, 4), "expect": "same"},
    {"claim": "fig4", "a": ("frd", 1, 1), "b": ("fedavg", 1, 1), "expect": "a narrower"},
    {"claim": "fig4", "a": ("frd", 1, 2), "b": ("fedavg", 1, 2), "expect": "a narrower"},
    {"claim": "fig4", "a": ("frd", 1, 4), "b": ("fedavg", 1, 4), "expect": "a narrower"},
)


def _subset_sum_counts(scores: np.ndarray, m: int) -> np.ndarray:
    """Number of ways to pick ``m`` of the non-negative integer ``scores`` with each total:
    ``counts[t]`` for t = 0..sum (float64; exact below 2^53, relative error < 1e-15 above)."""
    top = int(scores.sum())
    f = np.zeros((m + 1, top + 1))
    f[0, 0] = 1.0
    for i, s in enumerate(int(x) for x in scores):
        for j in range(min(i + 1, m), 0, -1):
            if s == 0:
                f[j] += f[j - 1]
            else:
                f[j, s:] += f[j - 1, : top + 1 - s]
    return f[m]


def _siegel_tukey(n: int) -> np.ndarray:
    """Siegel-Tukey scores of sorted positions 0..n-1: 1 to the lowest, 2 and 3 to the two
    highest, 4 and 5 to the next two lowest, ... (the extremes get the small scores)."""
    out = np.zeros(n, dtype=np.int64)
    lo, hi, k, low_side, take = 0, n - 1, 1, True, 1
    while lo <= hi:
        for _ in range(take):
            if lo > hi:
                break
            if low_side:
                out[lo], lo = k, lo + 1
            else:
                out[hi], hi = k, hi - 1
            k += 1
        low_side, take = not low_side, 2
    return out


def rank_sum_test(a: Any, b: Any, *, scores: str = "wilcoxon") -> dict[str, Any]:
    """Exact two-sample permutation test of a rank-sum statistic (conditional on the pooled
    values, ties included), by counting every split of the pooled sample.

    ``scores="wilcoxon"``: the Wilcoxon-Mann-Whitney test (mid-ranks for ties; without ties
    its p-value is that of ``scipy.stats.mannwhitneyu(method="exact")``); returns
    ``theta`` = P(A < B) + P(A = B) / 2 estimated from the samples (> 1/2: a tends lower).
    ``scores="siegel-tukey"``: the Siegel-Tukey dispersion test (tied values get their
    block's mean score, rounded to half units: still an exact test of that statistic);
    ``theta`` = the share of the a-b pairs where a is the less extreme of the two, estimated as
    the normalised score sum (> 1/2: a less dispersed).

    ``inf`` (mission not reached within the cap) ties above every finite value: the tests
    compare the censored samples as they are, which is valid because both boxes share the cap.
    Returns ``p`` (two-sided: twice the smaller tail, at most 1), ``p_a`` (one-sided, for a
    lower / less dispersed than b), ``p_b`` and ``theta``."""
    from scipy.stats import rankdata

    x = np.asarray([math.inf if v == "inf" else float(v) for v in a], dtype=float)
    y = np.asarray([math.inf if v == "inf" else float(v) for v in b], dtype=float)
    if x.size < 1 or y.size < 1 or np.isnan(x).any() or np.isnan(y).any():
        raise InvalidParameterError(f"rank_sum_test needs two non-empty samples, got {a!r}, {b!r}")
    check_choice(scores, "scores", ("wilcoxon", "siegel-tukey"))
    z = np.concatenate([x, y])
    n, m = z.size, x.size
    if scores == "wilcoxon":
        s = np.rint(2 * rankdata(z)).astype(np.int64)  # doubled mid-ranks: integers
    else:
        order = np.argsort(z, kind="stable")
        st = np.empty(n, dtype=float)
        st[order] = _siegel_tukey(n)
        for v in np.unique(z):  # a tie block gets its mean score
            st[z == v] = st[z == v].mean()
        s = np.rint(2 * st).astype(np.int64)
    counts = _subset_sum_counts(s, m)
    total = counts.sum()
    w = int(s[:m].sum())
    p_low = float(counts[: w + 1].sum() / total)  # P(W <= w): a has the smaller scores
    p_high = float(counts[w:].sum() / total)
    p = min(1.0, 2 * min(p_low, p_high))
    # theta from the score sum: W = sum of a's scores (doubled), mean under H0 = m * mean(s)
    mean_s = s.mean()
    theta = 0.5 + (mean_s * m - w) / (2.0 * m * (n - m)) if n > m else 0.5
    if scores == "wilcoxon":  # small ranks = short missions = "a better"
        return {"p": p, "p_a": p_low, "p_b": p_high, "theta": float(theta)}
    # Siegel-Tukey: small scores = extreme; a less dispersed <=> large scores
    return {"p": p, "p_a": p_high, "p_b": p_low, "theta": float(1.0 - theta)}


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error control, any dependence)."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    adj = np.empty_like(p)
    adj[order] = np.maximum.accumulate(np.minimum(1.0, (p.size - np.arange(p.size)) * p[order]))
    return [float(v) for v in adj]


def median_ci(values: Sequence[Any], level: float = 0.95) -> tuple[float, float, float, float]:
    """Median with its distribution-free interval [x_(k), x_(n+1-k)] (order statistics, the
    largest k whose coverage 1 - 2 P(Bin(n, 1/2) < k) is >= ``level``; for n < 6 no k reaches
    0.95 and k = 1, [min, max]). Returns (median, low, high, coverage); inf = not reached."""
    from scipy.stats import binom

    v = np.sort([math.inf if x == "inf" else float(x) for x in values])
    n = v.size
    k = 1
    while k + 1 <= n // 2 and 1 - 2 * binom.cdf(k, n, 0.5) >= level:
        k += 1
    cover = 1 - 2 * binom.cdf(k - 1, n, 0.5)
    return float(np.median(v)), float(v[k - 1]), float(v[n - k]), float(cover)


def _groups_needed(theta: float, alpha: float) -> float:
    """Groups per box (equal sizes) at which a rank-sum test at two-sided level ``alpha``
    resolves an effect ``theta`` (normal approximation, no ties): the smallest n with
    |theta - 1/2| >= z sqrt((2n + 1) / (12 n^2)). inf for theta = 1/2."""
    from scipy.stats import norm

    d = abs(theta - 0.5)
    if d == 0:
        return math.inf
    z = norm.ppf(1 - alpha / 2)
    # 12 d^2 n^2 - 2 z^2 n - z^2 >= 0
    a, bq, c = 12 * d * d, -2 * z * z, -z * z
    return float(math.ceil((-bq + math.sqrt(bq * bq - 4 * a * c)) / (2 * a)))


def trend_tests(rows: Sequence[dict[str, Any]], alpha: float = ALPHA) -> dict[str, Any]:
    """Test every comparison of ``TRENDS`` whose two boxes are in ``rows`` (results.json rows):
    exact permutation tests (rank_sum_test), Holm-adjusted over the family, with a verdict per
    comparison: "agrees" / "contradicts" (adjusted p < alpha, in / against the paper's
    direction; for "same": a difference, i.e. "contradicts"), "unresolved" otherwise, and for
    an unresolved one the groups per box that would resolve its observed effect at the
    family's strictest Holm level alpha / k (if that effect were the true one)."""
    by = {(r["kind"], r["setting"], r["agents"]): r for r in rows}
    tests = []
    for t in TRENDS:
        if t["a"] not in by or t["b"] not in by:
            continue
        ra, rb = by[t["a"]], by[t["b"]]
        kind = "siegel-tukey" if t["expect"] == "a narrower" else "wilcoxon"
        r = rank_sum_test(ra["mission"], rb["mission"], scores=kind)
        tests.append(
            {
                "claim": t["claim"],
                "a": list(t["a"]),
                "b": list(t["b"]),
                "expect": t["expect"],
                "test": kind,
                "n_a": len(ra["mission"]),
                "n_b": len(rb["mission"]),
                **r,
            }
        )
    k = len(tests)
    for t, padj in zip(tests, holm([t["p"] for t in tests]), strict=True):
        t["p_holm"] = padj
        lower = t["theta"] > 0.5  # a lower (or less dispersed) than b
        if padj >= alpha:
            t["verdict"] = "unresolved"
        elif t["expect"] == "same":
            t["verdict"] = "contradicts"
        else:
            t["verdict"] = "agrees" if lower else "contradicts"
        t["groups_needed"] = (
            _groups_needed(t["theta"], alpha / k) if t["verdict"] == "unresolved" else None
        )
    n = min((min(t["n_a"], t["n_b"]) for t in tests), default=0)
    return {
        "alpha": alpha,
        "correction": "holm",
        "family": k,
        "method": "exact permutation test of the rank sum (all splits of the pooled sample "
        "counted, ties kept): Wilcoxon-Mann-Whitney for location, Siegel-Tukey for dispersion",
        "resolvable_theta": 0.5 + _min_effect(n, alpha / k) if n else None,
        "tests": tests,
    }


def _min_effect(n: int, alpha: float) -> float:
    """|theta - 1/2| that n groups per box resolve at two-sided level alpha (normal approx.)."""
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2) * math.sqrt((2 * n + 1) / (12 * n * n)))
