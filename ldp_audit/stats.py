"""Statistics shared by the auditor and the attacks.

Everything here is side-effect free and vectorised: counts may be arrays and broadcast together.

* Clopper-Pearson (exact binomial) one-sided and two-sided bounds, from the Beta quantile
  function (``scipy.special.betaincinv``):
  ``lower(k, n, a) = Beta^{-1}(a; k, n - k + 1)`` and
  ``upper(k, n, a) = Beta^{-1}(1 - a; k + 1, n - k)``, so that ``P(p < lower) <= a`` and
  ``P(p > upper) <= a`` for every true rate ``p``.
* The Wilson score interval (approximate, for reporting only).
* The epsilon lower bound from two counts (the auditor's recipe): if a mechanism is
  (epsilon, delta)-DP then for every event S, ``P[M(x) in S] <= e^epsilon P[M(x2) in S] + delta``,
  hence ``epsilon >= ln((p1 - delta) / p2)``; plugging a lower confidence bound for ``p1`` and an
  upper one for ``p2`` gives a bound that exceeds the true epsilon with probability at most
  ``alpha`` (each side gets ``alpha / 2``).
* ``epsilon_from_tpr_fpr`` — the hypothesis-testing view (Kairouz et al. 2015): an
  (epsilon, delta)-DP mechanism forces ``TPR <= e^eps FPR + delta`` and
  ``1 - FPR <= e^eps (1 - TPR) + delta`` for every test.
* ``epsilon_lower_bound_from_poisson_counts`` — a *joint* (conditional, exact) bound on the
  ratio of two Poisson rates, for counts taken on Poissonized samples (sample sizes drawn from
  ``Poisson(n)``): given ``k1 + k2``, ``k1`` is binomial with rate ``l1 / (l1 + l2)``, so one
  Clopper-Pearson bound replaces the two Bonferroni-split ones (about ``z_alpha`` instead of
  ``z_{alpha/2}`` on both counts).
  ``poisson_log_ratio_lower`` is its logarithm (accurate at large ratios), and
  ``binomial_tail_pvalue`` the same conditional test's p-value for a given ratio (the auditor's
  selection screen).
* f-DP (Dong, Roth & Su 2022): the trade-off curves ``gaussian_tradeoff`` (``G_mu``) and
  ``eps_delta_tradeoff`` (``f_{eps,delta}``), ``tradeoff_points_from_counts`` (type I / type II
  error points of threshold tests, simultaneous upper confidence bounds; a claimed curve ``f``
  with ``f(alpha_U) > beta_U`` at some point is refuted).
* Bootstrap confidence interval of a median, and the Bonferroni split.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import (
    check_confidence,
    check_int,
    check_probability,
    check_real,
    check_real_in,
    check_rng,
)

__all__ = [
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "clopper_pearson_interval",
    "wilson_interval",
    "epsilon_lower_bound_from_counts",
    "log_ratio_bound",
    "pooled_rate_lower",
    "pooled_rate_upper",
    "epsilon_lower_bound_from_pooled_counts",
    "epsilon_lower_bound_from_poisson_counts",
    "epsilon_lower_bound_from_poisson_counts_delta",
    "poisson_ratio_lower",
    "poisson_log_ratio_lower",
    "binomial_tail_pvalue",
    "epsilon_from_tpr_fpr",
    "epsilon_lower_bound_from_tpr_fpr_counts",
    "gaussian_tradeoff",
    "eps_delta_tradeoff",
    "tradeoff_points_from_counts",
    "bootstrap_median_ci",
    "bonferroni",
    "check_delta_range",
    "check_nonnegative",
    "percentile_interval",
]


def _counts(k: Any, n: Any, kname: str = "k", nname: str = "n") -> tuple[np.ndarray, np.ndarray]:
    """Validate counts: real arrays with 0 <= k <= n and n > 0 (non-integer allowed)."""
    k_arr = np.asarray(k, dtype=np.float64)
    n_arr = np.asarray(n, dtype=np.float64)
    if not (np.all(np.isfinite(k_arr)) and np.all(np.isfinite(n_arr))):
        raise InvalidParameterError(f"{kname} and {nname} must be finite, got {k!r} and {n!r}")
    if np.any(n_arr <= 0):
        raise InvalidParameterError(f"{nname} must be > 0, got {n!r}")
    if np.any(k_arr < 0) or np.any(k_arr > n_arr):
        raise InvalidParameterError(f"{kname} must satisfy 0 <= {kname} <= {nname}, got {k!r}")
    return k_arr, n_arr


def _alpha(alpha: Any) -> float:
    return check_probability(alpha, "alpha")


def _out(v: np.ndarray) -> Any:
    return float(v) if np.ndim(v) == 0 else v


def clopper_pearson_lower(k: Any, n: Any, alpha: float) -> Any:
    """One-sided Clopper-Pearson lower bound for a binomial rate.

    ``P(true p < bound) <= alpha`` for every true ``p`` (exact, conservative).

    Args:
        k: number of successes (array-like; non-integer values are interpolated).
        n: number of trials (> 0).
        alpha: one-sided error probability in (0, 1).

    Returns:
        ``Beta^{-1}(alpha; k, n - k + 1)``, and 0 where ``k == 0`` (float or array).
    """
    k_arr, n_arr = _counts(k, n)
    a = _alpha(alpha)
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = special.betaincinv(np.maximum(k_arr, 1e-300), n_arr - k_arr + 1.0, a)
    lo = np.where(k_arr <= 0, 0.0, lo)
    return _out(np.asarray(lo, dtype=np.float64))


def clopper_pearson_upper(k: Any, n: Any, alpha: float) -> Any:
    """One-sided Clopper-Pearson upper bound for a binomial rate.

    ``P(true p > bound) <= alpha`` for every true ``p``. Where ``k == 0`` this is
    ``1 - alpha^(1/n)`` (the "rule of three" generalised).

    Args:
        k: number of successes (array-like).
        n: number of trials (> 0).
        alpha: one-sided error probability in (0, 1).
    """
    k_arr, n_arr = _counts(k, n)
    a = _alpha(alpha)
    with np.errstate(invalid="ignore", divide="ignore"):
        hi = special.betaincinv(k_arr + 1.0, np.maximum(n_arr - k_arr, 1e-300), 1.0 - a)
    hi = np.where(k_arr >= n_arr, 1.0, hi)
    return _out(np.asarray(hi, dtype=np.float64))


def clopper_pearson_interval(k: Any, n: Any, alpha: float) -> tuple[Any, Any]:
    """Two-sided Clopper-Pearson interval with coverage >= 1 - alpha (alpha/2 per side)."""
    a = _alpha(alpha)
    return clopper_pearson_lower(k, n, a / 2.0), clopper_pearson_upper(k, n, a / 2.0)


def wilson_interval(k: Any, n: Any, alpha: float) -> tuple[Any, Any]:
    """Two-sided Wilson score interval (approximate coverage 1 - alpha; for reporting).

    ``(p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)`` with ``z = Phi^{-1}(1-alpha/2)``.
    """
    k_arr, n_arr = _counts(k, n)
    a = _alpha(alpha)
    z = float(special.ndtri(1.0 - a / 2.0))
    p = k_arr / n_arr
    z2n = z * z / n_arr
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z * np.sqrt(p * (1.0 - p) / n_arr + z2n / (4.0 * n_arr)) / (1.0 + z2n)
    return _out(np.clip(centre - half, 0.0, 1.0)), _out(np.clip(centre + half, 0.0, 1.0))


def _pair(k1: Any, k2: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate two counts: finite, >= 0 (non-integer allowed)."""
    out = []
    for raw, name in ((k1, "k1"), (k2, "k2")):
        v = np.asarray(raw, dtype=np.float64)
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise InvalidParameterError(f"{name} must be finite and >= 0, got {raw!r}")
        out.append(v)
    return out[0], out[1]


def log_ratio_bound(lo: Any, hi: Any) -> Any:
    """``ln(lo) - ln(hi)``, ``-inf`` where ``lo <= 0`` (the epsilon bound of two rate bounds)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(lo > 0.0, np.log(np.maximum(lo, 1e-300)) - np.log(hi), -np.inf)
    return _out(np.asarray(out, dtype=np.float64))


def check_nonnegative(value: Any, name: str) -> float:
    """``value`` as a float if it is a real number >= 0 (inf allowed), else an error naming
    ``name``."""
    v = check_real(value, name)
    if math.isnan(v) or v < 0:
        raise InvalidParameterError(f"{name} must be >= 0, got {value!r}")
    return v


def check_delta_range(delta: Any, name: str = "delta") -> float:
    """``delta`` as a float if it is a real number in [0, 1), else an error naming ``name``."""
    return check_real_in(delta, name, lo=0.0, lo_open=False, hi=1.0, hi_open=True)


def epsilon_lower_bound_from_counts(
    k1: Any,
    n1: Any,
    k2: Any,
    n2: Any,
    alpha: float,
    *,
    delta: float = 0.0,
    numerator_share: float = 0.5,
) -> Any:
    """Epsilon lower bound from event counts under M(x) (k1 of n1) and M(x2) (k2 of n2).

    ``ln(max(CP_lower(k1, n1, alpha/2) - delta, 0)) - ln(CP_upper(k2, n2, alpha/2))``.
    If the mechanism is (epsilon, delta)-DP, the bound exceeds epsilon with probability at most
    ``alpha`` (union of the two one-sided Clopper-Pearson failures: ``numerator_share * alpha``
    for the lower bound on ``p1``, the rest for the upper bound on ``p2``; any fixed split chosen
    before the counts are seen keeps the guarantee, and giving most of ``alpha`` to the rarer
    count tightens the bound at high epsilon). With ``delta = 0`` this is
    the pure-DP form. Only one direction is bounded: swap the arguments for the other, and split
    ``alpha`` over every (event, direction) you estimate (:func:`bonferroni`).

    Args:
        k1: event count among the n1 outputs of M(x).
        n1: number of outputs of M(x).
        k2: event count among the n2 outputs of M(x2).
        n2: number of outputs of M(x2).
        alpha: total error probability in (0, 1).
        delta: the delta of the (epsilon, delta) claim, in [0, 1).
        numerator_share: share of ``alpha`` spent on the numerator's lower bound, in (0, 1).

    Returns:
        The bound (float or array); ``-inf`` where the lower rate bound does not exceed delta.
    """
    a = _alpha(alpha)
    d = check_delta_range(delta)
    share = check_probability(numerator_share, "numerator_share")
    lo = np.asarray(clopper_pearson_lower(k1, n1, a * share)) - d
    return log_ratio_bound(lo, np.asarray(clopper_pearson_upper(k2, n2, a * (1.0 - share))))


#: the largest one-sided error level at which the pooled bounds below are proven (see
#: :func:`pooled_rate_upper`): Greenberg & Mohri's 1/4.
POOLED_MAX_ALPHA = 0.25


def pooled_rate_upper(k: Any, n_total: Any, alpha: float) -> Any:
    """Upper confidence bound on the *mean* rate of a sum of independent Bernoulli trials.

    ``k`` counts successes among ``n_total`` independent trials whose rates may differ (e.g. the
    sum of two binomial counts ``Bin(n, a) + Bin(n, b)``, ``n_total = 2n``); the bound is on
    ``pbar = (sum of the rates) / n_total``: ``P(pbar > bound) <= alpha`` for every set of rates,
    when ``alpha < 1/4``.

    The bound is Clopper-Pearson's on ``k`` of ``n_total`` (1 where ``k > n_total - 2``). Proof:
    the bound fails iff ``k <= c`` with ``c = min(k*, n_total - 2)``, ``k*`` the largest count
    whose binomial ``Bin(n_total, pbar)`` CDF is below ``alpha`` (so ``P(B <= k*) <= alpha``).
    If ``pbar < 1 - 1/n_total``, ``P(B <= n_total pbar) > 1/4 > alpha`` (Greenberg & Mohri 2014,
    applied to ``n_total - B``), so ``k* <= n_total pbar - 1``; otherwise
    ``n_total - 2 <= n_total pbar - 1``. Either way ``c <= n_total pbar - 1``, where Hoeffding
    (1956, Theorem 4) gives ``P(S <= c) <= P(B <= c)`` for the sum ``S`` of independent trials
    with mean ``n_total pbar``: the unequal rates only concentrate the count. Hence
    ``P(fail) <= P(B <= k*) <= alpha``. (Checked exactly by convolution in tests/test_stats.py.)

    Args:
        k: successes (array-like, 0 <= k <= n_total).
        n_total: trials (> 0).
        alpha: one-sided error probability in (0, 1/4).
    """
    k_arr, n_arr = _counts(k, n_total, "k", "n_total")
    a = _alpha(alpha)
    if a >= POOLED_MAX_ALPHA:
        raise InvalidParameterError(f"alpha must be < 1/4 for a pooled bound, got {alpha!r}")
    hi = np.asarray(clopper_pearson_upper(k_arr, n_arr, a), dtype=np.float64)
    return _out(np.where(k_arr > n_arr - 2.0, 1.0, hi))


def pooled_rate_lower(k: Any, n_total: Any, alpha: float) -> Any:
    """Lower confidence bound on the mean rate of independent Bernoulli trials (the mirror of
    :func:`pooled_rate_upper` on the failures ``n_total - k``): ``P(pbar < bound) <= alpha``
    for every set of rates when ``alpha < 1/4``; 0 where ``k < 2``."""
    k_arr, n_arr = _counts(k, n_total, "k", "n_total")
    up = np.asarray(pooled_rate_upper(n_arr - k_arr, n_arr, alpha), dtype=np.float64)
    return _out(1.0 - up)


def epsilon_lower_bound_from_pooled_counts(
    k1: Any,
    k2: Any,
    n_total: Any,
    alpha: float,
    *,
    delta: float = 0.0,
    numerator_share: float = 0.5,
) -> Any:
    """Epsilon lower bound from an event pair counted in both directions.

    For inputs x, x2 and events S, S' (fixed before the counts are drawn), an
    (epsilon, delta)-DP mechanism has ``P[M(x) in S] <= e^eps P[M(x2) in S] + delta`` and
    ``P[M(x2) in S'] <= e^eps P[M(x) in S'] + delta``; averaging,
    ``pbar1 <= e^eps pbar2 + delta`` with ``pbar1 = (P[M(x) in S] + P[M(x2) in S']) / 2`` and
    ``pbar2 = (P[M(x2) in S] + P[M(x) in S']) / 2``. With n outputs of each input,
    ``k1 = #{M(x) in S} + #{M(x2) in S'}`` and ``k2 = #{M(x2) in S} + #{M(x) in S'}`` count
    ``n_total = 2n`` independent trials each, with mean rates pbar1 and pbar2, so
    ``ln(pooled_rate_lower(k1) - delta) - ln(pooled_rate_upper(k2))`` exceeds the true epsilon
    with probability at most ``alpha`` (``numerator_share * alpha`` and the rest; union bound).
    Both directions share each output, so the rare count is estimated on twice the outputs.

    Args:
        k1: pooled numerator count (of n_total).
        k2: pooled denominator count (of n_total).
        n_total: 2n, the trials behind each pooled count.
        alpha: total error probability; each side's level must be < 1/4.
        delta: in [0, 1).
        numerator_share: share of ``alpha`` for the numerator's lower bound, in (0, 1).
    """
    a = _alpha(alpha)
    d = check_delta_range(delta)
    share = check_probability(numerator_share, "numerator_share")
    lo = np.asarray(pooled_rate_lower(k1, n_total, a * share)) - d
    return log_ratio_bound(lo, np.asarray(pooled_rate_upper(k2, n_total, a * (1.0 - share))))


def poisson_ratio_lower(k1: Any, k2: Any, alpha: float) -> Any:
    """Exact one-sided lower confidence bound on ``l1 / l2`` from independent Poisson counts.

    If ``k1 ~ Poisson(l1)`` and ``k2 ~ Poisson(l2)`` are independent, then given
    ``s = k1 + k2``, ``k1 ~ Binomial(s, theta)`` with ``theta = l1 / (l1 + l2)`` (the classical
    conditional test for a ratio of Poisson rates). The Clopper-Pearson lower bound
    ``theta_L`` of ``k1`` of ``s`` at level ``alpha`` holds conditionally on every ``s``, hence
    unconditionally, and ``theta / (1 - theta) = l1 / l2`` is increasing in ``theta``:
    ``P(l1 / l2 < theta_L / (1 - theta_L)) <= alpha``. One joint statement about the pair of
    counts instead of two one-sided ones combined by a union bound (Bonferroni), which is
    what makes it tighter (the error of both counts is paid once, at ``z_alpha``).

    Args:
        k1: numerator count(s) (>= 0).
        k2: denominator count(s) (>= 0).
        alpha: one-sided error probability in (0, 1).

    Returns:
        The lower bound (0 where ``k1 == 0``, ``alpha^(-1/k1) - 1``-like where ``k2 == 0``).
    """
    k1_arr, k2_arr, th = _theta_lower(k1, k2, alpha)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(k1_arr <= 0, 0.0, th / (1.0 - th))
    return _out(np.asarray(np.where(k1_arr + k2_arr <= 0, 0.0, out), dtype=np.float64))


def _theta_lower(k1: Any, k2: Any, alpha: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The counts checked and the Clopper-Pearson lower bound ``theta_L`` of ``k1`` of
    ``k1 + k2`` at ``alpha`` (the conditional test of :func:`poisson_ratio_lower`)."""
    a = _alpha(alpha)
    k1_arr, k2_arr = _pair(k1, k2)
    with np.errstate(all="ignore"):
        return k1_arr, k2_arr, special.betaincinv(np.maximum(k1_arr, 1e-300), k2_arr + 1.0, a)


def poisson_log_ratio_lower(k1: Any, k2: Any, alpha: float) -> Any:
    """``ln`` of :func:`poisson_ratio_lower`: a lower confidence bound on ``ln(l1 / l2)``.

    Computed as ``ln(theta_L) - ln(1 - theta_L)`` (``log1p``), which keeps its accuracy where
    ``theta_L`` is close to 1 (a large ratio). Non-integer counts are interpolated (the auditor
    predicts bounds from expected counts).

    Args:
        k1: numerator count(s) (>= 0).
        k2: denominator count(s) (>= 0).
        alpha: one-sided error probability in (0, 1).

    Returns:
        The bound (float or array); ``-inf`` where ``k1 == 0``.
    """
    k1_arr, _, th = _theta_lower(k1, k2, alpha)
    with np.errstate(all="ignore"):
        out = np.log(th) - np.log1p(-th)
    return _out(np.asarray(np.where(k1_arr <= 0, -np.inf, out), dtype=np.float64))


def binomial_tail_pvalue(k1: Any, k2: Any, theta: Any) -> Any:
    """One-sided p-value of ``k1`` successes among ``s = k1 + k2`` trials at rate ``theta``.

    ``P(Binomial(s, theta) >= k1) = I_theta(k1, k2 + 1)`` (the regularized incomplete beta
    function; non-integer counts are interpolated). With counts of one event under two inputs,
    ``theta = c n1 / (c n1 + n2)`` tests "the ratio of the two rates is at most c" (the
    conditional test behind :func:`poisson_ratio_lower`). Fewer than one success is no evidence:
    the p-value is 1 where ``k1 < 1``.

    Args:
        k1: success count(s) (>= 0).
        k2: failure count(s) (>= 0).
        theta: the rate(s) under the null, in [0, 1] (NaN propagates to the p-value).

    Returns:
        The p-value(s) (float or array).
    """
    k1_arr, k2_arr = _pair(k1, k2)
    th = np.asarray(theta, dtype=np.float64)
    if np.any(th < 0) or np.any(th > 1):
        raise InvalidParameterError(f"theta must be in [0, 1], got {theta!r}")
    with np.errstate(all="ignore"):
        p = np.where(k1_arr >= 1.0, special.betainc(np.maximum(k1_arr, 1.0), k2_arr + 1.0, th), 1.0)
    return _out(np.asarray(p, dtype=np.float64))


def epsilon_lower_bound_from_poisson_counts(
    k1: Any, k2: Any, alpha: float, *, mean1: Any = 1.0, mean2: Any = 1.0
) -> Any:
    """Pure-DP epsilon lower bound from event counts on *Poissonized* samples.

    Draw ``N1 ~ Poisson(mean1)`` outputs of M(x) and ``N2 ~ Poisson(mean2)`` of M(x2)
    (independently; the sizes are random), count a fixed event S: ``k1 ~ Poisson(mean1 p1)``
    and ``k2 ~ Poisson(mean2 p2)`` exactly, independent (Poisson thinning). An epsilon-DP
    mechanism has ``p1 <= e^eps p2``, so with :func:`poisson_ratio_lower`

        ``ln(poisson_ratio_lower(k1, k2, alpha)) + ln(mean2 / mean1)``

    exceeds the true epsilon with probability at most ``alpha``. Sums of counts of disjoint
    events on independent Poissonized samples are again independent Poisson counts, so a
    pooled pair (S counted under x plus a disjoint S' under x2) is bounded the same way
    (``mean1 = mean2 = n``). Pure DP only (``delta = 0``): for ``delta > 0`` use
    :func:`epsilon_lower_bound_from_counts` on the realised sizes.

    Args:
        k1: numerator count(s).
        k2: denominator count(s).
        alpha: error probability in (0, 1).
        mean1: the Poisson mean of the numerator's sample size (> 0).
        mean2: the Poisson mean of the denominator's sample size (> 0).

    Returns:
        The bound (``-inf`` where ``k1 == 0``).
    """
    m1, m2 = (np.asarray(m, dtype=np.float64) for m in (mean1, mean2))
    for m, name, raw in ((m1, "mean1", mean1), (m2, "mean2", mean2)):
        if not (np.all(np.isfinite(m)) and np.all(m > 0)):
            raise InvalidParameterError(f"{name} must be finite and > 0, got {raw!r}")
    r = np.asarray(poisson_ratio_lower(k1, k2, alpha), dtype=np.float64)
    with np.errstate(divide="ignore"):
        out = np.where(r > 0, np.log(np.maximum(r, 1e-300)) + np.log(m2) - np.log(m1), -np.inf)
    return _out(np.asarray(out, dtype=np.float64))


def epsilon_lower_bound_from_poisson_counts_delta(
    k1: int, k2: int, alpha: float, *, delta_count: float, arrivals: Any
) -> float:
    """(epsilon, delta) lower bound from Poissonized counts by *augmenting* the denominator.

    Counts ``k1 ~ Poisson(l1)``, ``k2 ~ Poisson(l2)`` (independent) of a fixed event on
    Poissonized samples of mean n; an (epsilon, delta)-DP mechanism has
    ``l1 <= c l2 + D`` with ``c = e^epsilon`` and ``D = n delta`` (``delta_count``). For a
    given c, add ``A_c ~ Poisson(D / c)`` independent artificial counts to the denominator:
    ``k2 + A_c ~ Poisson(l2 + D / c)`` and ``l1 <= c (l2 + D / c)``, a pure ratio null, which
    the exact conditional test (:func:`poisson_ratio_lower`) rejects with probability at most
    ``alpha``. All c share one Poisson process of rate D on [0, 1] (``arrivals``, its arrival
    times, drawn independently of the counts): ``A_c`` = arrivals at or before ``1 / c``, so
    ``A_c ~ Poisson(D / c)`` for every ``c >= 1`` and decreases in c. The bound is
    ``ln L`` with ``L = inf {c >= 1 : the test at c does not reject}``, so
    ``P(ln L > epsilon) <= P(the test at e^epsilon rejects) <= alpha``. ``L`` is exact: the
    test's ratio bound is piecewise constant between the points ``1 / T_i``.

    Args:
        k1: numerator count.
        k2: denominator count.
        alpha: error probability in (0, 1).
        delta_count: ``D = n delta`` (the Poisson mean of the sample size times delta), >= 0.
        arrivals: the arrival times in [0, 1] of a rate-D Poisson process (any order).

    Returns:
        The bound (>= 0).
    """
    a = _alpha(alpha)
    check_real_in(delta_count, "delta_count", lo=0.0, lo_open=False)
    t = np.sort(np.asarray(arrivals, dtype=np.float64))[::-1]  # descending
    if t.size and (not np.all(np.isfinite(t)) or t[-1] < 0 or t[0] > 1):
        raise InvalidParameterError("arrivals must be times in [0, 1]")
    for v, name in ((k1, "k1"), (k2, "k2")):
        check_int(v, f"{name} (a count)", minimum=0)
    big_n = t.size
    # piece j (j = 0 .. N): c in [b_j, b_{j+1}) with A_c = N - j; b_0 = 1, b_j = 1 / T_(j)
    with np.errstate(divide="ignore"):
        edges = np.concatenate([[1.0], 1.0 / np.maximum(t, 1e-300), [np.inf]])
    edges = np.maximum.accumulate(np.maximum(edges, 1.0))
    counts = big_n - np.arange(big_n + 1)
    r = np.asarray(poisson_ratio_lower(np.full(big_n + 1, float(k1)), k2 + counts, a))
    lo, hi = edges[:-1], edges[1:]
    ok = r < hi  # the piece holds a non-rejected c (c >= r)
    if not np.any(ok):  # cannot happen (the last piece is unbounded); kept for safety
        return 0.0
    j = int(np.argmax(ok))
    return float(math.log(max(lo[j], r[j], 1.0)))


def _rates(v: Any, name: str) -> np.ndarray:
    """``v`` as a float64 array of rates in [0, 1], else an error naming ``name``."""
    a = np.asarray(v, dtype=np.float64)
    if np.any(~np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise InvalidParameterError(f"{name} must be in [0, 1], got {v!r}")
    return a


def epsilon_from_tpr_fpr(tpr: Any, fpr: Any, *, delta: float = 0.0) -> Any:
    """Smallest epsilon consistent with a test's TPR/FPR (a point estimate, not a bound).

    For (epsilon, delta)-DP, every membership test satisfies ``TPR <= e^eps FPR + delta`` and
    ``1 - FPR <= e^eps (1 - TPR) + delta`` (Kairouz, Oh & Viswanath 2015, Thm. 2.1), so
    ``eps >= max(ln((TPR - delta) / FPR), ln((1 - FPR - delta) / (1 - TPR)), 0)``.

    Args:
        tpr: true positive rate(s) in [0, 1].
        fpr: false positive rate(s) in [0, 1].
        delta: in [0, 1).

    Returns:
        The implied epsilon (``inf`` where a rate is 0 against a positive numerator).
    """
    t, f = _rates(tpr, "tpr"), _rates(fpr, "fpr")
    d = check_delta_range(delta)
    a, b = log_ratio_bound(t - d, f), log_ratio_bound(1 - f - d, 1 - t)
    return _out(np.maximum(np.maximum(a, b), 0.0))


def epsilon_lower_bound_from_tpr_fpr_counts(
    tp: Any, n_pos: Any, fp: Any, n_neg: Any, alpha: float, *, delta: float = 0.0
) -> Any:
    """Confidence-``1 - alpha`` epsilon lower bound from a test's confusion counts.

    Bounds both inequalities of :func:`epsilon_from_tpr_fpr` (``alpha / 2`` each, Bonferroni),
    each with one-sided Clopper-Pearson bounds, and returns the larger (floored at 0).

    Args:
        tp: positives flagged (out of n_pos members / outputs of M(x)).
        n_pos: number of positives.
        fp: negatives flagged (out of n_neg outputs of M(x2)).
        n_neg: number of negatives.
        alpha: total error probability.
        delta: in [0, 1).
    """
    a = _alpha(alpha)
    tp_arr, npos = _counts(tp, n_pos, "tp", "n_pos")
    fp_arr, nneg = _counts(fp, n_neg, "fp", "n_neg")
    e1 = epsilon_lower_bound_from_counts(tp_arr, npos, fp_arr, nneg, a / 2.0, delta=delta)
    e2 = epsilon_lower_bound_from_counts(
        nneg - fp_arr, nneg, npos - tp_arr, npos, a / 2.0, delta=delta
    )
    return _out(np.maximum(np.maximum(e1, e2), 0.0))


def gaussian_tradeoff(alpha: Any, mu: float) -> Any:
    """The trade-off function ``G_mu(alpha) = Phi(Phi^{-1}(1 - alpha) - mu)`` of mu-GDP.

    ``G_mu`` is the exact trade-off between ``N(0, 1)`` and ``N(mu, 1)`` (Dong, Roth & Su 2022,
    eq. 2.2): a Gaussian mechanism with L2 sensitivity ``Delta`` and noise ``sigma`` is
    ``G_{Delta / sigma}``-DP and no better. The smallest type II error of any test whose type I
    error is at most ``alpha``.

    Args:
        alpha: type I error(s) in [0, 1] (array-like).
        mu: >= 0 (``inf`` allowed: the curve is 0 on (0, 1]).

    Returns:
        ``G_mu(alpha)`` (float or array), 1 at alpha = 0, 0 at alpha = 1.
    """
    a = _rates(alpha, "alpha (type I error)")
    m = check_nonnegative(mu, "mu")
    with np.errstate(all="ignore"):
        out = special.ndtr(special.ndtri(1.0 - a) - m)
    out = np.where(a <= 0, 1.0, np.where(a >= 1, 0.0, out))
    return _out(np.asarray(out, dtype=np.float64))


def eps_delta_tradeoff(alpha: Any, epsilon: float, delta: float = 0.0) -> Any:
    """The trade-off function of (epsilon, delta)-DP:
    ``f_{eps,delta}(alpha) = max(0, 1 - delta - e^eps alpha, e^-eps (1 - delta - alpha))``.

    A mechanism is (epsilon, delta)-DP iff it is ``f_{eps,delta}``-DP (Dong, Roth & Su 2022,
    Prop. 2.5; Wasserman & Zhou 2010, Kairouz et al. 2015): the piecewise-linear curve of the
    claim.

    Args:
        alpha: type I error(s) in [0, 1].
        epsilon: >= 0 (may be ``inf``: the curve is ``max(0, 1 - delta - inf * alpha)``).
        delta: in [0, 1).
    """
    a = _rates(alpha, "alpha (type I error)")
    e = check_nonnegative(epsilon, "epsilon")
    d = check_delta_range(delta)
    with np.errstate(all="ignore"):
        first = np.where(a > 0, 1.0 - d - np.exp(e) * a, 1 - d)  # e > 709: -inf
        second = math.exp(-e) * (1.0 - d - a)
    out = np.maximum(np.maximum(first, second), 0.0)
    return _out(np.asarray(out, dtype=np.float64))


def tradeoff_points_from_counts(
    k_null: Any, n_null: Any, k_alt: Any, n_alt: Any, alpha: float
) -> tuple[Any, Any]:
    """Upper confidence points on a trade-off curve from tests' counts, all simultaneously.

    Test i rejects H0 on an event S_i (fixed before the counts are drawn): ``k_null[i]`` of
    ``n_null`` outputs under H0 fall in S_i (false rejections), ``k_alt[i]`` of ``n_alt`` under
    H1. Its errors are ``alpha_i = P0(S_i)`` and ``beta_i = 1 - P1(S_i)``. Returns
    ``alpha_U = CP_upper(k_null)`` and ``beta_U = 1 - CP_lower(k_alt)``, each at
    ``alpha / (2 K)`` (Bonferroni over the ``2 K`` one-sided bounds), so that with probability
    >= ``1 - alpha``, for every i: ``T(alpha_U[i]) <= beta_U[i]``, where ``T = T(P0, P1)`` is
    the true trade-off function (non-increasing: ``T(alpha_U) <= T(alpha_i) <= beta_i``). A
    claimed curve f with ``f(alpha_U[i]) > beta_U[i]`` for some i is refuted.

    Args:
        k_null: counts under H0 (array of K).
        n_null: trials under H0 (scalar or array).
        k_alt: counts under H1 (array of K).
        n_alt: trials under H1.
        alpha: total error probability in (0, 1).

    Returns:
        ``(alpha_U, beta_U)`` arrays of K.
    """
    a = _alpha(alpha)
    k0, n0 = _counts(k_null, n_null, "k_null", "n_null")
    k1, n1 = _counts(k_alt, n_alt, "k_alt", "n_alt")
    kk = max(1, int(np.broadcast(k0, k1).size))
    per = a / (2.0 * kk)
    a_u = np.asarray(clopper_pearson_upper(k0, n0, per), dtype=np.float64)
    b_u = 1.0 - np.asarray(clopper_pearson_lower(k1, n1, per), dtype=np.float64)
    return _out(a_u), _out(b_u)


def bonferroni(alpha: float, m: int) -> float:
    """Per-test error level ``alpha / m`` so that ``m`` tests fail jointly w.p. <= alpha."""
    a = _alpha(alpha)
    return a / check_int(m, "m (number of tests)", minimum=1)


def bootstrap_median_ci(
    values: Any,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    rng: np.random.Generator,
) -> tuple[float, float, float]:
    """Percentile-bootstrap confidence interval of the median.

    Infinite values are allowed (e.g. first-success times that never happened) and sort last.

    Args:
        values: 1-D sample.
        confidence: two-sided level in (0, 1).
        n_boot: number of bootstrap resamples (>= 100).
        rng: explicit generator.

    Returns:
        ``(median, low, high)``.
    """

    conf = check_confidence(confidence)
    check_rng(rng)
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0 or np.any(np.isnan(x)):
        raise InvalidParameterError(f"values must be a non-empty array without NaN, got {values!r}")
    idx = rng.integers(0, x.size, size=(check_int(n_boot, "n_boot", minimum=100), x.size))
    return (float(np.median(x)), *percentile_interval(np.median(x[idx], axis=1), conf))


def percentile_interval(stat: Any, confidence: float) -> tuple[float, float]:
    """The two-sided ``confidence`` percentile interval of bootstrap statistics ``stat``, taken
    without interpolation (a statistic may be inf)."""
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(stat, [a, 1.0 - a], method="inverted_cdf")
    return float(lo), float(hi)
