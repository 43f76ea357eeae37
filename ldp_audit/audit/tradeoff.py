"""The audited f-DP trade-off curve of the witness pair (Dong, Roth & Su 2022).

Threshold events on the statistic of the distribution verdict's best event, at type I levels
read from selection quantiles (:func:`tradeoff_events`), counted on the estimation samples and
turned into simultaneous upper confidence points (type I, type II error) by
:func:`ldp_audit.stats.tradeoff_points_from_counts`, against the claimed curve
(:func:`_claimed_tradeoff`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import ndtri

from ldp_audit.audit.mechanism import call_user, user_attr
from ldp_audit.audit.results import TradeoffCurve
from ldp_audit.audit.selection import Candidate
from ldp_audit.errors import UserCodeError
from ldp_audit.mechanisms.gaussian import analytic_gaussian_delta, analytic_gaussian_epsilon
from ldp_audit.stats import eps_delta_tradeoff, gaussian_tradeoff, tradeoff_points_from_counts

if TYPE_CHECKING:
    from ldp_audit.audit.estimation import Counts
    from ldp_audit.audit.plan import Options

#: what the Gaussian-family bound assumes (stated with it; the verdicts assume nothing)
FAMILY_ASSUMPTION = (
    "Gaussian family: the witness pair's outputs have the trade-off curve G_mu for one unknown "
    "mu, as any Gaussian mechanism's (f(x) + N(0, sigma^2 I), mu = ||f(x) - f(x2)|| / sigma)"
)

#: type I error levels of the f-DP curve's threshold tests (those a selection sample cannot
#: locate, fewer than 5 expected outputs beyond the threshold, are dropped).
TRADEOFF_LEVELS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)


def tradeoff_events(best: Candidate, quantiles: tuple[np.ndarray, np.ndarray]) -> list[Candidate]:
    """Threshold events on ``best``'s statistic, oriented like it (its numerator is H1), at
    thresholds read from the selection quantiles of the null input (H0 = the denominator),
    then the Gaussian-family event: the midpoint of the two inputs' selection medians (the
    quantiles' first entries), where a shift of ``G_mu`` is estimated most precisely."""
    ts = [*np.unique(quantiles[1] if best.x_is_numerator else quantiles[0]).tolist()]
    ts.append(float(quantiles[0][0] + quantiles[1][0]) / 2.0)
    b = best
    return [Candidate(b.pair, b.stat, b.op, float(t), b.x_is_numerator, 0.0, (0, 0)) for t in ts]


def gaussian_family_bound(
    k_null: float, n_null: int, k_alt: float, n_alt: int, alpha: float, delta: float, eps: float
) -> tuple[float, float, float]:
    """``(mu_lower, epsilon_lower, delta_lower)`` under :data:`FAMILY_ASSUMPTION` from one
    threshold test, fixed before its counts: ``k_null`` of ``n_null`` H0 outputs and ``k_alt``
    of ``n_alt`` H1 outputs in its rejection region. Under ``G_mu`` every test has
    ``beta >= G_mu(alpha)``, i.e. ``mu >= Phi^-1(1 - alpha) - Phi^-1(beta)``, non-increasing in
    both errors, so their upper Clopper-Pearson bounds at ``alpha / 2`` each give
    ``mu_lower <= mu`` with probability >= ``1 - alpha``; ``epsilon_lower`` is the epsilon of
    ``G_{mu_lower}`` at ``delta`` (the analytic Gaussian's, increasing in mu), ``delta_lower``
    its delta at ``eps`` (increasing in mu too): both below the true ones when mu_lower is."""
    a_u, b_u = tradeoff_points_from_counts([k_null], n_null, [k_alt], n_alt, alpha)
    mu = max(0.0, float(ndtri(1.0 - a_u[0]) - ndtri(b_u[0])))
    if mu == 0.0:
        return 0.0, 0.0, 0.0
    return mu, analytic_gaussian_epsilon(1.0, mu, delta), analytic_gaussian_delta(eps, 1.0, mu)


def _claimed_tradeoff(
    mechanism: Any, claimed: float, delta: float
) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """The claimed trade-off curve: ``mechanism.tradeoff``, else ``G_mu`` of a Gaussian with
    ``sigma`` and ``sensitivity`` (and a delta > 0 claim), else ``f_{epsilon, delta}``."""
    fn = user_attr(mechanism, "tradeoff")
    if callable(fn):

        def user(a: np.ndarray) -> np.ndarray:
            raw = call_user(mechanism, "mechanism.tradeoff", fn, a)
            try:
                v = np.asarray(raw, dtype=np.float64)
            except (TypeError, ValueError):  # strings, ragged lists: refused below
                v = np.empty(0)
            if v.shape != np.shape(a) or not np.all((v >= 0.0) & (v <= 1.0)):
                raise UserCodeError(
                    f"mechanism.tradeoff of {type(mechanism).__name__} must return values in "
                    f"[0, 1] of the shape of its input {np.shape(a)}, got {raw!r:.80}"
                )
            return v

        return user, "tradeoff"
    sigma = user_attr(mechanism, "sigma")
    sens = user_attr(mechanism, "sensitivity")
    real = [isinstance(v, (int, float)) and not isinstance(v, bool) for v in (sigma, sens)]
    if delta > 0 and all(real) and 0 < sigma < np.inf and 0 < sens < np.inf:
        mu = float(sens) / float(sigma)
        return (lambda a: np.asarray(gaussian_tradeoff(a, mu))), f"gaussian mu={mu:.6g}"
    return (lambda a: np.asarray(eps_delta_tradeoff(a, claimed, delta))), "epsilon-delta"


def claimed_gaussian_curve(
    mechanism: Any, claimed: float, delta: float
) -> Callable[[np.ndarray], np.ndarray] | None:
    """The claimed ``G_mu`` trade-off curve when the mechanism is a Gaussian (``sigma`` and
    ``sensitivity``, a delta > 0 claim, no ``tradeoff`` of its own), else None."""
    fn, source = _claimed_tradeoff(mechanism, claimed, delta)
    return fn if source.startswith("gaussian") else None


def tradeoff_curve(
    mechanism: Any,
    o: Options,
    events: list[Candidate],
    counts: Counts,
    pair_list: list[tuple[np.ndarray, np.ndarray]],
    alpha: float,
) -> TradeoffCurve:
    """The f-DP curve of ``events`` (the threshold tests, then the Gaussian-family one) from
    their estimation ``counts``, against the claimed curve."""
    best = events[0]
    n_alt, n_null = best.oriented(*counts.sizes[best.pair])
    k_alt, k_null = np.array([ev.oriented(*counts.results[id(ev)]) for ev in events], float).T
    # the last event is the Gaussian-family one: its own statement, at its own alpha
    f, source = _claimed_tradeoff(mechanism, o.claimed, o.delta)
    fam: tuple[float | None, ...] = (None, None, None)
    if source.startswith("gaussian"):
        fam = gaussian_family_bound(k_null[-1], n_null, k_alt[-1], n_alt, alpha, o.delta, o.claimed)
    k_alt, k_null = k_alt[:-1], k_null[:-1]
    a_u, b_u = tradeoff_points_from_counts(k_null, n_null, k_alt, n_alt, alpha)
    a_u, b_u = np.atleast_1d(a_u), np.atleast_1d(b_u)
    order = np.argsort(a_u, kind="stable")
    grid = np.unique(np.concatenate([np.linspace(0.0, 1.0, 101), np.geomspace(1e-6, 0.01, 41)]))
    xn, xd = best.oriented(*pair_list[best.pair])
    return TradeoffCurve(
        type1_upper=tuple(float(v) for v in a_u[order]),
        type2_upper=tuple(float(v) for v in b_u[order]),
        type1_estimate=tuple(float(v) for v in (k_null / n_null)[order]),
        type2_estimate=tuple(float(v) for v in (1.0 - k_alt / n_alt)[order]),
        claimed_at_type1=tuple(float(v) for v in f(a_u[order])),
        claimed_alpha=tuple(float(v) for v in grid),
        claimed_beta=tuple(float(v) for v in f(grid)),
        claimed_from=source,
        confidence=o.confidence,
        events_estimated=len(events) - 1,
        x=tuple(float(v) for v in xn),
        x2=tuple(float(v) for v in xd),
        statistic=f"{best.stat.label()} {'> t' if best.op == 'gt' else '<= t'}",
        family_mu_lower=fam[0],
        family_epsilon_lower=fam[1],
        family_delta_lower=fam[2],
    )
