"""Sample sizes and what they can resolve: the estimation share of ``samples`` and the ceiling.

:func:`estimation_samples` is how many of an audit's outputs per input estimate (the rest
select); :func:`max_refutable_epsilon` the largest bound any audit of that size can give: a
zero count among N trials still has the Clopper-Pearson upper bound ``1 - a^(1/N)``
(:func:`ldp_audit.stats.clopper_pearson_upper` at ``k = 0``, in closed form here);
:func:`one_count_epsilon` the same for an event seen once (above it a "no violation" is
inconclusive); :func:`tightness_ceiling` the bound a mechanism exactly at its claim could get.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ldp_audit.audit.selection import SHARES
from ldp_audit.errors import InvalidParameterError
from ldp_audit.stats import (
    POOLED_MAX_ALPHA,
    check_delta_range,
    clopper_pearson_lower,
    clopper_pearson_upper,
    log_ratio_bound,
    poisson_log_ratio_lower,
)
from ldp_audit.validation import (
    check_bool,
    check_choice,
    check_confidence,
    check_int,
    check_probability,
    check_real_in,
)

__all__ = [
    "estimation_samples",
    "max_refutable_epsilon",
    "one_count_epsilon",
    "tightness_ceiling",
]

#: per input, at most this many outputs are used for selection (their statistic values are
#: held in memory); the rest of ``samples`` estimates, streamed in chunks (memory bounded).
_MAX_SELECTION = 2_000_000


def _count_ceiling(
    k: int, n_est: int, confidence: float, pool: bool, test: str | None, delta: float
) -> float:
    """The bound at counts (N, k) (every numerator output in the event, ``k`` denominator ones)
    at the largest error level an audit spends on one event's denominator: the search's share
    0.9 of ``1 - confidence`` (its split is chosen among ``SHARES``), a pre-registered event's
    even split (``search.fixed_event``), or all of it in the event's joint Poisson test; at a
    claimed ``delta`` the numerator is at most ``1 - delta`` (floored at 0: no bound is < 0)."""
    n_est = check_int(n_est, "n_est", minimum=1)
    confidence = check_confidence(confidence)
    pool = check_bool(pool, "pool")
    if test is not None:
        check_choice(test, "event_test", ("clopper-pearson", "poisson"))  # plan.RATIO_TESTS
    a = {None: 1.0 - min(SHARES), "poisson": 1.0}.get(test, 0.5) * (1.0 - confidence)
    trials = max(int(n_est), k + 1) * (2 if pool and a < POOLED_MAX_ALPHA else 1)
    if test == "poisson":
        bound = float(poisson_log_ratio_lower(trials, k, a))
    elif k == 0:  # p1_lower <= 1; the Clopper-Pearson upper bound of 0 hits in closed form
        bound = -math.log(-math.expm1(math.log(a) / trials))
    else:
        bound = -math.log(float(clopper_pearson_upper(np.array([float(k)]), float(trials), a)[0]))
    return max(0.0, bound + math.log1p(-check_delta_range(delta)))


def max_refutable_epsilon(
    n_est: int,
    confidence: float = 0.95,
    pool: bool = False,
    event_test: str | None = None,
    delta: float = 0.0,
) -> float:
    """The largest bound :func:`audit` can give with ``n_est`` estimation samples per input.

    A bound is ``ln(p1_lower - delta) - ln(p2_upper)`` with ``p1_lower <= 1`` and, at best (a
    zero count among N trials, one event, the largest share ``a = 0.9 (1 - confidence)`` of the
    error on the denominator), ``p2_upper = 1 - a^(1 / N)``; so no bound exceeds
    ``-ln(1 - a^(1 / N))`` (about ``ln(N / ln(1 / a))``): a larger claim cannot be refuted at
    this sample size. ``N = 2 n_est`` when ``pool`` (as in :func:`audit`) and pooling applies
    (``a < 1/4``), else ``n_est``. ``event_test``: the ``ratio_test`` of a pre-registered event
    (``audit(event=)``, ``n_est = samples``; None: the search): ``"clopper-pearson"`` spends
    ``a = (1 - confidence) / 2`` on the denominator, ``"poisson"`` the whole ``1 - confidence``
    in the joint test (the ceiling is its bound at counts (N, 0)). ``delta``: the claimed
    delta; the ceiling is then ``ln((1 - delta) / p2_upper)`` (floored at 0), so a delta near 1
    leaves nothing to refute (at delta 0.9999999 and 10^5 samples, every epsilon). With the
    Poisson test and delta > 0 (``n delta / e^eps`` artificial denominator counts, at their
    mean) the same ``ln(1 - delta)`` is taken off.
    """
    return _count_ceiling(0, n_est, confidence, pool, event_test, delta)


def estimation_samples(samples: int, selection_fraction: float = 0.1) -> int:
    """Per input, the outputs :func:`audit` spends on estimation for ``samples``."""
    samples = check_int(samples, "samples", minimum=1000)
    selection_fraction = check_probability(selection_fraction, "selection_fraction")
    n_sel = min(_MAX_SELECTION, max(200, int(round(samples * selection_fraction))))
    return samples - n_sel


def one_count_epsilon(
    n_est: int,
    confidence: float = 0.95,
    pool: bool = False,
    event_test: str | None = None,
    delta: float = 0.0,
) -> float:
    """The largest bound :func:`audit` can give from an event seen once under the second input.

    Like :func:`max_refutable_epsilon` with one denominator count instead of none:
    ``-ln p2_upper`` with ``p2_upper`` the Clopper-Pearson upper bound of 1 hit among N trials
    at the largest error share ``a = 0.9 (1 - confidence)``. A claim at or above it can be
    refuted at this sample size only by an event *never* seen under M(x2): the audit can then
    tell "never" from "rarely" and no more, so a result that finds no violation there is
    inconclusive (:attr:`AuditResult.inconclusive`). ``event_test``, ``delta``: as there.
    """
    return _count_ceiling(1, n_est, confidence, pool, event_test, delta)


def tightness_ceiling(
    claimed: float,
    delta: float,
    n_est: int,
    alpha_event: float,
    *,
    pool: bool = False,
    poisson: bool = False,
    curve: Callable[[np.ndarray], np.ndarray] | None = None,
    event: bool = False,
) -> float:
    """The largest bound an audit with ``n_est`` estimation samples per input and one event's
    error level ``alpha_event`` could report, at expected counts, for a mechanism that sits
    exactly at its claim ``(claimed, delta)``.

    Computed on the boundary of the claim's privacy region: every event S of an
    (epsilon, delta)-DP mechanism has ``p1 = P[M(x) in S] <= min(e^eps p2 + delta,
    1 - e^-eps (1 - p2 - delta))`` with ``p2 = P[M(x2) in S]``, and randomised response at the
    claim attains the boundary. For ``p2`` on a grid the audit's bound is evaluated at the
    expected counts ``n p1``, ``n p2`` (``ln(CP_lower(p1) - delta) - ln CP_upper(p2)``, the
    error split over the audit's shares, or the joint Poisson test for ``poisson`` with
    delta = 0; ``2 n`` trials when ``pool``); the ceiling is the best over the grid, floored
    at 0. It is the median-like bound of the most favourable event, no guarantee: a lucky run
    can land above it (never above the claim with more than the stated probability). The ratio
    ``ceiling / claimed`` says how close this audit can come to the truth at this size.

    ``curve``: the claimed f-DP trade-off function ``beta = f(alpha)`` when the claim is a
    curve (a Gaussian's ``G_mu``): then ``p1 = 1 - f(p2)``, the boundary of that mechanism
    exactly at its claim, instead of the (epsilon, delta) region's. ``event``: a pre-registered
    event's even split only (``audit(event=)``), not the search's choice among ``SHARES``.
    """
    claimed = check_real_in(claimed, "claimed", lo=0.0, lo_open=False)
    delta = check_delta_range(delta)
    n_est = check_int(n_est, "n_est", minimum=1)
    alpha_event = check_probability(alpha_event, "alpha_event")
    pool = check_bool(pool, "pool")
    poisson = check_bool(poisson, "poisson")
    event = check_bool(event, "event")
    if curve is not None and not callable(curve):
        raise InvalidParameterError(f"curve must be a callable f(alpha) or None, got {curve!r}")
    trials = float(max(int(n_est), 1) * (2 if pool else 1))
    c = math.exp(min(float(claimed), 700.0))
    p2 = np.geomspace(1e-3 / trials, 1.0 - delta, 600)
    if curve is None:
        p1 = np.minimum(c * p2 + delta, 1.0 - (1.0 - p2 - delta) / c)
    else:
        p1 = 1.0 - np.asarray(curve(p2), dtype=np.float64)
    p1 = np.clip(p1, 0.0, 1.0)
    if poisson and delta == 0.0:
        with np.errstate(all="ignore"):
            pred = poisson_log_ratio_lower(p1 * trials, p2 * trials, alpha_event)
        return max(0.0, float(np.max(np.where(np.isfinite(pred), pred, 0.0))))
    best = 0.0
    for share in (0.5,) if event else SHARES:
        lo = clopper_pearson_lower(p1 * trials, trials, alpha_event * share) - delta
        hi = clopper_pearson_upper(p2 * trials, trials, alpha_event * (1.0 - share))
        best = max(best, float(np.max(log_ratio_bound(lo, hi))))
    return best
