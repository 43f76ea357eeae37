"""The (eps, delta) one-run bound of Steinke, Nasr & Jagielski (2023, Corollary 5.4) and its
ceiling (:mod:`ldp_audit.attacks.one_run` describes the audit).

``m`` canaries, each included with probability 1/2; the auditor guesses "in" for the ``k``
highest scores and "out" for the ``k`` lowest and counts ``v`` correct of ``r = 2k``.
:func:`p_value` bounds the chance of ``>= v`` correct guesses under ``(eps, delta)``-DP,
:func:`epsilon_lower_bound` inverts it, :func:`audit_scores` tries the guess fractions of
:data:`FRACTIONS` (Bonferroni). :func:`steinke_ceiling` is what a perfect attacker (every guess
right) gets from ``m`` canaries and :func:`canaries_to_refute` the least ``m`` whose ceiling
exceeds a claim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_int, check_probability

__all__ = [
    "FRACTIONS",
    "check_scores",
    "guess_counts",
    "p_value",
    "epsilon_lower_bound",
    "largest_rejected",
    "audit_scores",
    "steinke_ceiling",
    "canaries_to_refute",
]

#: Fractions of the canaries guessed on (half "in", half "out"), fixed before the scores are seen.
FRACTIONS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def check_counts(m: Any, r: Any, v: Any) -> tuple[int, int, int]:
    m, r, v = (check_int(x, name, minimum=0) for name, x in (("m", m), ("r", r), ("v", v)))
    if not v <= r <= m:
        raise InvalidParameterError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    return m, r, v


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Probability of ``>= v`` correct guesses out of ``r`` under ``(epsilon, delta)``-DP.

    Steinke, Nasr & Jagielski (2023), Corollary 5.4 (Appendix D's ``p_value_DP_audit``), with the
    inner maximum computed in one vectorised pass.
    """
    from scipy.stats import binom

    m, r, v = check_counts(m, r, v)
    if isinstance(epsilon, bool) or not epsilon >= 0:
        raise InvalidParameterError(f"epsilon must be >= 0, got {epsilon!r}")
    delta = check_probability(delta, "delta", open_interval=False)
    if math.isinf(epsilon):
        return 1.0
    q = 1.0 / (1.0 + math.exp(-float(epsilon)))
    beta = float(binom.sf(v - 1, r, q))
    if delta == 0.0 or v == 0:
        return min(beta, 1.0)
    i = np.arange(1, v + 1)
    cum = np.cumsum(binom.pmf(v - i, r, q))  # P[v - i <= Bin < v]
    alpha = float(np.max(cum / i))
    return min(beta + alpha * delta * 2 * m, 1.0)


def largest_rejected(rejected: Any, *, lo: float, hi: float, cap: float, steps: int) -> float:
    """The largest parameter ``x`` with ``rejected(x)`` (``rejected`` true at ``lo``, false
    from some point on): ``hi`` doubled while rejected (``lo`` returned once it passes
    ``cap``), then ``steps`` bisections; the low end is returned (conservative)."""
    while rejected(hi):
        lo, hi = hi, hi * 2
        if hi > cap:
            return lo
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    return lo


def epsilon_lower_bound(m: int, r: int, v: int, *, delta: float, beta: float) -> float:
    """Largest epsilon rejected at level ``beta``: the true epsilon exceeds it w.p. >= 1 - beta.

    Appendix D's ``get_eps_audit``: an upper bracket, then bisection (40 steps); the low end is
    returned (conservative). 0.0 when even epsilon = 0 is not rejected.
    """
    m, r, v = check_counts(m, r, v)
    beta = check_probability(beta, "beta")
    return _epsilon_bound(lambda e: p_value(m, r, v, e, delta), beta) if r else 0.0


def _epsilon_bound(p: Any, beta: float) -> float:
    """The largest epsilon with ``p(epsilon) < beta`` (bracket and bisection as in
    :func:`epsilon_lower_bound`); 0.0 when ``p(0) >= beta``."""
    if p(0.0) >= beta:
        return 0.0
    return largest_rejected(lambda e: p(e) < beta, lo=0.0, hi=1.0, cap=1e3, steps=40)


def check_scores(scores: Any, included: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, included)`` as flat float64 / bool arrays of one shape, finite, >= 2 canaries."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    inc = np.asarray(included, dtype=bool).reshape(-1)
    if s.shape != inc.shape or s.size < 2 or not np.isfinite(s).all():
        raise InvalidParameterError(
            f"scores must be finite with the shape of included, got {s.shape} vs {inc.shape}"
            f" ({int((~np.isfinite(s)).sum())} not finite: NaN or inf, e.g. a diverged run)"
        )
    return s, inc


def guess_counts(
    scores: np.ndarray, included: np.ndarray, fractions: Sequence[float], cap: int | None = None
) -> list[tuple[float, int, int]]:
    """Per fraction ``f`` (fixed in advance): ``(f, r, v)``, ``v`` correct of ``r = 2k`` guesses,
    "in" on the ``k = floor(f m / 2)`` highest scores (at most ``cap / 2``), "out" on as many
    lowest (ties broken by position); fractions with ``k < 1`` are skipped."""
    m = scores.size
    order = np.argsort(-scores, kind="stable")
    out = []
    for f in fractions:
        k = int(math.floor(check_probability(f, "fraction", open_interval=False) * m / 2))
        k = k if cap is None else min(k, cap // 2)
        if k >= 1:
            out.append(
                (f, 2 * k, int(included[order[:k]].sum() + (~included[order[m - k :]]).sum()))
            )
    return out


def audit_scores(
    scores: Any,
    included: Any,
    *,
    delta: float,
    confidence: float = 0.95,
    fractions: Sequence[float] = FRACTIONS,
) -> dict[str, Any]:
    """The one-run (eps, delta) lower bound from canary scores and the secret inclusion bits.

    For each fraction ``f`` (fixed in advance): guess "in" on the ``floor(f m / 2)`` highest and
    "out" on as many lowest scores; bound at level ``(1 - confidence) / len(fractions)``
    (Bonferroni); return the best.

    Returns:
        ``{"epsilon_lower_bound", "guesses", "correct", "fraction", "per_fraction": [...]}``.
    """
    s, inc = check_scores(scores, included)
    beta = (1.0 - check_probability(confidence, "confidence")) / len(fractions)
    best: dict[str, Any] = {"epsilon_lower_bound": 0.0, "guesses": 0, "correct": 0,
                            "fraction": None}  # fmt: skip
    per = []
    for f, r, v in guess_counts(s, inc, fractions):
        eps = epsilon_lower_bound(s.size, r, v, delta=delta, beta=beta)
        per.append({"fraction": f, "guesses": r, "correct": v, "epsilon_lower_bound": eps})
        if eps >= best["epsilon_lower_bound"]:
            best = {"epsilon_lower_bound": eps, "guesses": r, "correct": v, "fraction": f}
    best["per_fraction"] = per
    return best


def _p_all_correct(m: int, r: int, epsilon: float, delta: float) -> float:
    """:func:`p_value` for ``v = r`` (every guess correct), in log space and truncated.

    The ``i``-th average of ``max_i P[r - i <= Bin(r, q) < r] / i`` peaks past the mode of the
    terms ``C(r, j) q^(r-j) (1-q)^j`` (the law of the wrong guesses, mode about ``r (1-q)``), so
    ``j`` up to ``3 (r + 1)(1 - q) + 100`` is enough; equal to :func:`p_value` (tested).
    """
    from scipy.special import gammaln

    lq = -math.log1p(math.exp(-epsilon))
    beta = math.exp(r * lq)
    if delta == 0.0:
        return min(beta, 1.0)
    x = math.exp(-epsilon)
    jmax = min(r, int(3 * (r + 1) * x / (1 + x)) + 100)
    j = np.arange(1, jmax + 1, dtype=np.float64)
    la = gammaln(r + 1.0) - gammaln(j + 1.0) - gammaln(r - j + 1.0) - j * epsilon + r * lq
    alpha = float(np.max(np.cumsum(np.exp(la)) / j))
    return min(beta + alpha * delta * 2 * m, 1.0)


def steinke_ceiling(
    m: int, *, delta: float, beta: float, fractions: Sequence[float] = FRACTIONS
) -> float:
    """The largest (eps, delta) lower bound ``m`` canaries can give: every guess correct.

    This is the perfect attacker's bound at level ``beta`` per fraction (as
    :func:`audit_scores` splits it); a claim above it cannot be refuted by this bound with ``m``
    canaries, whatever the trainer does.
    """
    m, _, _ = check_counts(m, 0, 0)
    delta = check_probability(delta, "delta", open_interval=False)
    beta = check_probability(beta, "beta")
    return _ceiling(m, delta, beta, tuple(float(f) for f in fractions))


@lru_cache(maxsize=4096)
def _ceiling(m: int, delta: float, beta: float, fractions: tuple[float, ...]) -> float:
    """:func:`steinke_ceiling` of checked arguments (pure: kept, as every audit asks it for the
    same canary counts and :func:`canaries_to_refute` bisects over it)."""
    best = 0.0
    for f in fractions:
        k = int(math.floor(f * m / 2))
        if k >= 1:  # epsilon_lower_bound for v = r = 2k, by _p_all_correct (same bisection)
            bound = _epsilon_bound(lambda e, r=2 * k: _p_all_correct(m, r, e, delta), beta)
            best = max(best, bound)
    return best


def canaries_to_refute(
    epsilon: float,
    *,
    delta: float,
    beta: float,
    fractions: Sequence[float] = FRACTIONS,
    limit: int = 2**22,
) -> int | None:
    """Smallest canary count whose perfect-attacker ceiling exceeds ``epsilon`` (to 0.5 %).

    None when even ``limit`` canaries do not suffice, when the ceiling stops growing (the delta
    term ``2 m delta`` grows with ``m``, so past some count more canaries do not help), or when
    ``epsilon`` is infinite.
    """
    if not math.isfinite(epsilon):
        return None
    lo, hi = 2, 4
    prev = 0.0
    while (c := steinke_ceiling(hi, delta=delta, beta=beta, fractions=fractions)) <= epsilon:
        if c < prev or hi * 2 > limit:
            return None
        lo, hi, prev = hi, hi * 2, c
    while hi - lo > max(1, lo // 200):  # the ceiling is a step function of m
        mid = (lo + hi) // 2
        if steinke_ceiling(mid, delta=delta, beta=beta, fractions=fractions) > epsilon:
            hi = mid
        else:
            lo = mid
    return hi
