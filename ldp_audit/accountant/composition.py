"""Composition theorems for pure-DP releases: side-effect-free maths, no I/O, no state.

* ``basic_epsilon``: sequential composition (PGC paper, Theorem 1): epsilons add up.
* ``advanced_epsilon``: Dwork-Rothblum-Vadhan (2010) advanced composition, heterogeneous form
  (Kairouz-Oh-Viswanath 2015, Theorem 3.5 / Dwork-Roth Theorem 3.20):
  ``eps' = sqrt(2 ln(1/delta) sum eps_i^2) + sum eps_i (e^eps_i - 1)``.
* ``optimal_epsilon``: the exact k-fold composition of epsilon-DP mechanisms (Kairouz-Oh-Viswanath
  2015, Theorem 3.3): randomized response dominates every epsilon-DP mechanism, so the tight
  privacy profile is that of k-fold randomized response, whose privacy loss is ``(k - 2i) eps``
  with probability ``C(k, i) e^{(k-i) eps} / (1 + e^eps)^k``. We solve delta(eps') = delta exactly
  (between two loss values delta(.) is ``A - e^{eps'} B``). Heterogeneous epsilons: the same
  profile of the product of randomized responses, by exact convolution when its support is small.
* ``amplified_epsilon``: privacy amplification by Poisson sampling for an epsilon-DP event,
  ``log(1 + q (e^eps - 1))`` (Balle-Barthe-Gaboardi 2018, add/remove neighbours).
* ``filter_epsilon`` / ``filter_allows``: the Rogers-Roth-Ullman-Vadhan (2016, Theorem 5.1)
  privacy filter, valid when each epsilon is chosen adaptively from the previous outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.special import gammaln

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_real_in

__all__ = [
    "basic_epsilon",
    "advanced_epsilon",
    "optimal_epsilon",
    "optimal_epsilon_heterogeneous",
    "epsilon_from_loss_distribution",
    "amplified_epsilon",
    "filter_epsilon",
    "filter_allows",
    "check_delta",
]

# The largest support of a heterogeneous privacy-loss distribution we convolve exactly.
MAX_SUPPORT = 2_000_000


def _pairs(
    epsilons: Sequence[float], counts: Sequence[int] | None
) -> tuple[np.ndarray, np.ndarray]:
    e = np.asarray(epsilons, dtype=np.float64).reshape(-1)
    c = np.ones_like(e) if counts is None else np.asarray(counts, dtype=np.float64).reshape(-1)
    if e.shape != c.shape:
        raise InvalidParameterError(
            f"epsilons and counts must have the same length, got {e.size} and {c.size}"
        )
    if (e <= 0).any() or not np.isfinite(e).all():
        raise InvalidParameterError(f"epsilons must be finite and > 0, got {e.tolist()!r}")
    if (c < 1).any() or (c != np.round(c)).any():
        raise InvalidParameterError(f"counts must be integers >= 1, got {c.tolist()!r}")
    return e, c


def check_delta(delta: Any, *, positive: bool = False) -> float:
    """A delta in [0, 1) (in (0, 1) when ``positive``): an int or float; bool and str are
    refused, never coerced."""
    return check_real_in(delta, "delta", lo=0.0, lo_open=positive, hi=1.0, hi_open=True)


def basic_epsilon(epsilons: Sequence[float], counts: Sequence[int] | None = None) -> float:
    """Sequential composition (PGC paper, Theorem 1): ``sum_i count_i * eps_i``.

    Valid for adaptively chosen epsilons too (it is its own privacy filter).
    """
    e, c = _pairs(epsilons, counts)
    return float(np.dot(e, c))


def advanced_epsilon(
    epsilons: Sequence[float], counts: Sequence[int] | None = None, *, delta: float
) -> float:
    """Advanced composition (Dwork-Rothblum-Vadhan 2010; Dwork-Roth 2014, Theorem 3.20).

    ``eps' = sqrt(2 ln(1/delta) * sum_i eps_i^2) + sum_i eps_i (e^{eps_i} - 1)`` so that the
    composition of pure eps_i-DP mechanisms is (eps', delta)-DP. The epsilons must be fixed in
    advance (use ``filter_epsilon`` when they are chosen adaptively).
    """
    e, c = _pairs(epsilons, counts)
    d = check_delta(delta, positive=True)
    return float(
        math.sqrt(2.0 * math.log(1.0 / d) * float(np.dot(c, e * e)))
        + float(np.dot(c, e * np.expm1(e)))
    )


def epsilon_from_loss_distribution(losses: np.ndarray, log_p: np.ndarray, delta: float) -> float:
    """Smallest eps with ``E_P[(1 - e^{eps - L})_+] <= delta`` for a discrete privacy loss L.

    ``losses`` are the values of L = log(P/Q) and ``log_p`` their log-probabilities under P (the
    mass under Q is ``p e^{-L}``). This is the tight hockey-stick privacy profile
    (Kairouz-Oh-Viswanath 2015, eq. (6)); delta(eps) is ``A - e^{eps} B`` between two adjacent loss
    values, so we solve it exactly. Mass with L = +inf is not allowed (pure DP has none).
    """
    d = check_delta(delta, positive=False)
    order = np.argsort(-losses, kind="stable")
    L = np.asarray(losses, dtype=np.float64)[order]
    lp = np.asarray(log_p, dtype=np.float64)[order]
    lq = lp - L
    # Cumulative sums from the largest loss down: A_m = sum_{j<m} p_j, B_m = sum_{j<m} q_j.
    log_a = np.logaddexp.accumulate(lp)
    log_b = np.logaddexp.accumulate(lq)
    # With the top m losses (m = 1..n) above eps: delta(eps) = A_m - e^eps B_m on [L_m, L_{m-1}).
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.exp(log_a)
        cand = np.log(np.maximum(a - d, 0.0)) - log_b
    lower = np.append(L[1:], -np.inf)  # loss value just below the m-th
    upper = L
    ok = (cand >= lower - 1e-12) & (cand <= upper + 1e-12) & (a > d)
    if not ok.any():
        # delta at least the whole P-mass above any eps: epsilon 0 suffices (or below).
        return 0.0
    eps = float(cand[np.argmax(ok)])
    # Round up by a few ulps' worth so that float cancellation in A - delta never under-reports.
    return max(eps + 1e-12 * max(1.0, abs(eps)), 0.0)


def _rr_loss(eps: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Privacy loss of k-fold randomized response: values (k-2i) eps and log P-probabilities."""
    i = np.arange(k + 1, dtype=np.float64)
    losses = (k - 2.0 * i) * eps
    log_binom = gammaln(k + 1.0) - gammaln(i + 1.0) - gammaln(k - i + 1.0)
    log_p = log_binom + (k - i) * eps - k * np.logaddexp(0.0, eps)
    return losses, log_p


def optimal_epsilon(epsilon: float, k: int, *, delta: float) -> float:
    """Exact k-fold composition of epsilon-DP (Kairouz-Oh-Viswanath 2015, Theorem 3.3).

    The smallest eps' such that every k-fold adaptive composition of epsilon-DP mechanisms is
    (eps', delta)-DP. At delta = 0 it is k * epsilon. Epsilons fixed in advance.
    """
    return optimal_epsilon_heterogeneous([epsilon], [k], delta=delta)


def optimal_epsilon_heterogeneous(
    epsilons: Sequence[float], counts: Sequence[int] | None = None, *, delta: float
) -> float:
    """Exact composition of heterogeneous pure-DP mechanisms (fixed in advance).

    The product of randomized responses dominates (Kairouz-Oh-Viswanath 2015; Murtagh-Vadhan 2016
    show computing it is #P-hard in general): we convolve the k_j-fold randomized-response loss
    distributions exactly while the support stays below ``MAX_SUPPORT`` points.

    Raises:
        InvalidParameterError: the support would exceed ``MAX_SUPPORT``.
    """
    e, c = _pairs(epsilons, counts)
    d = check_delta(delta, positive=False)
    if d == 0.0:
        return float(np.dot(e, c))
    size = float(np.prod(c + 1))
    if e.size > 1 and size > MAX_SUPPORT:  # one epsilon: the k-fold loss alone, any k
        raise InvalidParameterError(
            f"optimal composition of {e.size} distinct epsilons needs a support of {size:.3g} "
            f"points; the exact convolution is limited to {MAX_SUPPORT}"
        )
    losses = np.zeros(1)
    log_p = np.zeros(1)
    for eps, k in zip(e, c, strict=True):
        l2, p2 = _rr_loss(float(eps), int(k))
        losses = (losses[:, None] + l2[None, :]).reshape(-1)
        log_p = (log_p[:, None] + p2[None, :]).reshape(-1)
    return min(epsilon_from_loss_distribution(losses, log_p, d), float(np.dot(e, c)))


def amplified_epsilon(epsilon: float, sample_rate: float) -> float:
    """Amplification by Poisson sampling: ``log(1 + q (e^eps - 1))`` (add/remove neighbours)."""
    return float(math.log1p(sample_rate * math.expm1(epsilon)))


_RRUV = 28.04


def filter_epsilon(epsilons: Sequence[float], *, epsilon_budget: float, delta: float) -> float:
    """The Rogers-Roth-Ullman-Vadhan (2016, Theorem 5.1) filter statistic for pure-DP rounds.

    ``sum eps_i (e^eps_i - 1)/2 + sqrt(2 (sum eps_i^2 + eps_g^2 / (28.04 ln(1/delta_g)))
    (1 + ln(28.04 ln(1/delta_g) sum eps_i^2 / eps_g^2 + 1) / 2) ln(2/delta_g))``; the filter lets
    the analyst continue while this is <= eps_g, and the whole interaction is then
    (eps_g, delta_g)-DP even when every eps_i is chosen adaptively.
    """
    e = np.asarray(epsilons, dtype=np.float64).reshape(-1)
    d = check_delta(delta, positive=True)
    if d >= 1.0 / math.e:
        raise InvalidParameterError(f"delta must be in (0, 1/e) for the filter, got {delta!r}")
    g = check_real_in(epsilon_budget, "epsilon_budget", lo=0.0, lo_open=True)
    s2 = float(np.dot(e, e))
    lin = float(np.dot(e, np.expm1(e))) / 2.0
    c = _RRUV * math.log(1.0 / d)
    root = math.sqrt(
        2.0 * (s2 + g * g / c) * (1.0 + 0.5 * math.log(c * s2 / (g * g) + 1.0)) * math.log(2.0 / d)
    )
    return lin + root


def filter_allows(epsilons: Sequence[float], *, epsilon_budget: float, delta: float) -> bool:
    """True when the RRUV filter (``filter_epsilon``) still allows the rounds ``epsilons``.

    Valid under fully adaptive composition (each eps_i may depend on earlier outputs) for any
    eps_g > 0 and delta_g in (0, 1/e).
    """
    return filter_epsilon(epsilons, epsilon_budget=epsilon_budget, delta=delta) <= epsilon_budget
