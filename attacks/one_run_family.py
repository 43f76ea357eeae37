"""One-run lower bounds under a stated family (the tight bound beside the safe one).

The (eps, delta) bound of Steinke, Nasr & Jagielski (2023) assumes nothing about the mechanism
and is capped by its ceiling (about a quarter of the true epsilon at 10^4 canaries). When the
auditor is willing to *state* the family the mechanism belongs to, the audit becomes the
estimation of one parameter of that family from the run (Xiang, Wang & Wang 2025, "Privacy
audit as bits transmission", arXiv 2501.17750: a one-run audit is a channel whose parameter is
estimated; Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-differential privacy in one run":
the hypothesised trade-off family G_mu). Each bound here is a ``1 - beta`` lower confidence bound
on the true epsilon **if the stated assumption holds**; the assumption is returned with the
number (``assumption``) and must be reported beside it. Reimplemented from the papers' ideas;
the estimators are this module's own:

* :func:`gdp_family_bound` (any scores, e.g. black-box or input canaries). Assumption: the
  scores of the canaries are independent, the included ones i.i.d., the excluded ones i.i.d.,
  and the pair (excluded, included) is ``mu``-GDP for one unknown ``mu`` (its trade-off is
  ``G_mu``). Every threshold test "in if score >= t" then has
  ``FNR(t) >= Phi(Phi^-1(1 - FPR(t)) - mu)``, i.e. ``mu >= Phi^-1(1 - FPR(t)) - Phi^-1(FNR(t))``.
  Both error rates are bounded above, for every threshold at once, by the one-sided
  Dvoretzky-Kiefer-Wolfowitz inequality with Massart's constant (``P[sup (F_n - F) > e] <=
  exp(-2 n e^2)``, one band per class at ``beta / 2``), so the largest right-hand side over all
  thresholds is a lower bound on ``mu``; ``eps = eps_GDP(mu_lb, delta)``.
* :func:`sgm_family_bound` (white-box DP-SGD: every released update projected on the canary
  directions, and the audit's own secret joins). Assumption: along each canary direction the
  released update is ``c`` when the canary joined and 0 otherwise, plus i.i.d. Gaussian noise of
  one standard deviation ``s`` (the data's projections count as noise), so each canary's
  privacy is the ``T``-fold Poisson-subsampled Gaussian at the audit's joining rate ``q`` with
  noise multiplier ``s / c``. A lower confidence bound on ``c / s`` (a t interval for ``c`` and
  a chi-square interval for ``s``, Bonferroni ``beta / 2`` each) gives an upper bound on the
  noise multiplier and ``eps = eps_SGM(q, s_ub / c_lb, T, delta)`` (dp_accounting's PLD,
  optimistic rounding: a lower estimate of that epsilon). It sees the noise actually released
  relative to a canary's actual contribution (noise scaled down, clipping looser than C), not the
  data loader's sampling (the joins are drawn by the audit at the claimed rate).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp_audit.attacks.one_run_steinke import check_scores
from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_int, check_probability, check_real, check_real_in

__all__ = [
    "GDP_ASSUMPTION",
    "SGM_ASSUMPTION",
    "gdp_epsilon",
    "gdp_family_bound",
    "sgm_epsilon",
    "sgm_family_bound",
]

GDP_ASSUMPTION = (
    "mu-GDP family: the canaries' scores are independent, i.i.d. within included / excluded, "
    "and (excluded, included) has the Gaussian trade-off G_mu for one unknown mu "
    "(after Xiang et al. 2025; Mahloujifar et al. 2024)"
)
SGM_ASSUMPTION = (
    "subsampled-Gaussian family: along each canary direction every released update is the "
    "canary's contribution c when it joined plus i.i.d. Gaussian noise of one std s (data "
    "counted as noise), so each canary is the T-fold Poisson(q)-subsampled Gaussian with noise "
    "multiplier s / c (after Xiang et al. 2025)"
)


def gdp_epsilon(mu: float, delta: float) -> float:
    """Epsilon of ``G_mu`` at ``delta`` (0 for ``mu = 0``): ``G_mu`` is the Gaussian mechanism
    of sensitivity ``mu`` and noise std 1 (Dong, Roth & Su 2022, Corollary 2.13), so this is
    :func:`ldp_audit.mechanisms.analytic_gaussian_epsilon` (Balle & Wang 2018)."""
    from ldp_audit.mechanisms import analytic_gaussian_epsilon

    mu = check_real_in(mu, "mu", lo=0.0, lo_open=False)
    delta = check_probability(delta, "delta")
    return 0.0 if mu == 0.0 else analytic_gaussian_epsilon(1.0, mu, delta)


def _split_scores(scores: Any, included: Any) -> tuple[np.ndarray, np.ndarray]:
    if np.asarray(included).dtype != bool:
        raise InvalidParameterError(
            f"included must be a boolean array, got dtype {np.asarray(included).dtype}"
        )
    s, inc = check_scores(scores, included)
    if not inc.any() or inc.all():
        raise InvalidParameterError("included must hold both included and excluded canaries")
    return s[inc], s[~inc]


def gdp_family_bound(
    scores: Any, included: Any, *, delta: float, confidence: float = 0.95
) -> dict[str, Any]:
    """Lower confidence bound on ``mu`` and epsilon under the mu-GDP family (module docstring).

    Returns:
        ``{"family": "mu-GDP", "assumption", "mu_lower_bound", "epsilon_lower_bound",
        "delta", "confidence", "threshold", "fpr_upper", "fnr_upper", "band"}``.
    """
    from scipy.special import ndtri

    s_in, s_out = _split_scores(scores, included)
    delta = check_probability(delta, "delta")
    beta = 1.0 - check_probability(confidence, "confidence")
    n_in, n_out = s_in.size, s_out.size
    e_in, e_out = (math.sqrt(math.log(2.0 / beta) / (2.0 * n)) for n in (n_in, n_out))  # DKW
    # every distinct threshold (guess "in" when score >= t), plus +inf (no "in" guess)
    t = np.concatenate([np.union1d(s_in, s_out), [np.inf]])
    fnr = np.searchsorted(np.sort(s_in), t, side="left") / n_in  # P_in[S < t]
    fpr = 1.0 - np.searchsorted(np.sort(s_out), t, side="left") / n_out  # P_out[S >= t]
    fpr_ub = np.minimum(fpr + e_out, 1.0)
    fnr_ub = np.minimum(fnr + e_in, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lb = ndtri(1.0 - fpr_ub) - ndtri(fnr_ub)
    lb = np.where(np.isfinite(lb), lb, -np.inf)
    i = int(np.argmax(lb))
    mu_lb = max(float(lb[i]), 0.0)
    return {
        "family": "mu-GDP",
        "assumption": GDP_ASSUMPTION,
        "mu_lower_bound": mu_lb,
        "epsilon_lower_bound": gdp_epsilon(mu_lb, delta) if mu_lb > 0 else 0.0,
        "delta": delta,
        "confidence": 1.0 - beta,
        "threshold": float(t[i]) if mu_lb > 0 else None,
        "fpr_upper": float(fpr_ub[i]),
        "fnr_upper": float(fnr_ub[i]),
        "band": {"included": e_in, "excluded": e_out},
        "canaries": int(n_in + n_out),
    }


def sgm_epsilon(noise_multiplier: float, sample_rate: float, updates: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``updates`` Poisson(``sample_rate``)-subsampled Gaussian steps with
    ``noise_multiplier``, by dp_accounting's PLD with optimistic rounding (a lower estimate of
    the true epsilon, the direction a lower bound needs).

    Raises:
        OverflowError: the loss is too large for dp_accounting to compose (a noise multiplier
            far below 1 / sqrt(2 ln(1 / delta)) over many steps); a larger noise multiplier gives
            a smaller, still valid lower bound (:func:`sgm_family_bound` retries so).
    """
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    if not check_real(noise_multiplier, "noise_multiplier") > 0:  # inf: epsilon 0
        raise InvalidParameterError(f"noise_multiplier must be > 0, got {noise_multiplier!r}")
    check_real_in(sample_rate, "sample_rate", lo=0.0, lo_open=True, hi=1.0)
    check_int(updates, "updates", minimum=1)
    delta = check_probability(delta, "delta")
    if not math.isfinite(noise_multiplier):
        return 0.0
    from ldp_audit.accountant.pld import plan
    from ldp_audit.opacus.writer import declared_event

    ev = declared_event({"noise_multiplier": float(noise_multiplier), "sample_rate": sample_rate})
    vdi, _ = plan({ev: int(updates)}, value_discretization_interval=1e-3)
    pld = pld_lib.from_gaussian_mechanism(
        float(noise_multiplier),
        sensitivity=1.0,
        sampling_prob=float(sample_rate),
        value_discretization_interval=vdi,
        pessimistic_estimate=False,
        use_connect_dots=False,
    )
    if int(updates) > 1:
        pld = pld.self_compose(int(updates))
    return max(float(pld.get_epsilon_for_delta(delta)), 0.0)


def _rdp_epsilon(noise_multiplier: float, sample_rate: float, updates: int, delta: float) -> float:
    """The RDP upper bound of the same epsilon (the ledger's ``rdp`` method)."""
    from ldp_audit.accountant import compose
    from ldp_audit.opacus.writer import declared_event

    ev = declared_event({"noise_multiplier": noise_multiplier, "sample_rate": sample_rate})
    return float(compose([(ev, int(updates))], delta=delta, method="rdp")[0])


def _contribution_and_noise(y1: np.ndarray, y0: np.ndarray, beta: float) -> tuple[float, ...]:
    """``(c_hat, s_hat, c_lb, s_ub)`` from the joined entries ``y1`` and the others ``y0``: the
    difference of means with its t lower bound and the pooled std with its chi-square upper
    bound, each at ``beta / 2`` (exact under i.i.d. Gaussian noise)."""
    from scipy.stats import chi2
    from scipy.stats import t as student_t

    n1, n0 = y1.size, y0.size
    m1, m0 = float(y1.mean()), float(y0.mean())
    df = n1 + n0 - 2
    ss = float(((y1 - m1) ** 2).sum() + ((y0 - m0) ** 2).sum())
    s_hat = math.sqrt(ss / df)
    c_hat = m1 - m0
    c_lb = c_hat - float(student_t.isf(beta / 2, df)) * s_hat * math.sqrt(1 / n1 + 1 / n0)
    s_ub = math.sqrt(ss / float(chi2.ppf(beta / 2, df)))
    return c_hat, s_hat, c_lb, s_ub


def sgm_family_bound(
    projections: Any,
    joins: Any,
    included: Any,
    *,
    sample_rate: float,
    delta: float,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Lower confidence bound on epsilon under the subsampled-Gaussian family (module docstring).

    Args:
        projections: ``(T, m)`` released updates projected on the canary directions (any unit).
        joins: ``(T, m)`` booleans, the audit's secret joins (only included canaries join).
        included: ``(m,)`` booleans, the secret inclusion bits.
        sample_rate: the rate at which the audit drew the joins (the claimed ``q``).

    Returns:
        ``{"family": "subsampled Gaussian", "assumption", "epsilon_lower_bound",
        "noise_multiplier_upper_bound", "contribution", "noise_std", "contribution_lower_bound",
        "noise_std_upper_bound", "joins", "updates", "sample_rate", "delta", "confidence"}``.
    """
    y = np.asarray(projections, dtype=np.float64)
    j = np.asarray(joins)
    inc = np.asarray(included)
    if y.ndim != 2 or y.shape[0] < 1 or y.shape[1] < 2 or not np.isfinite(y).all():
        raise InvalidParameterError(f"projections must be a finite (T, m) array, got {y.shape}")
    if j.dtype != bool or j.shape != y.shape:
        raise InvalidParameterError(
            f"joins must be a boolean array of shape {y.shape}, got {j.dtype} {j.shape}"
        )
    if inc.dtype != bool or inc.shape != (y.shape[1],):
        raise InvalidParameterError(
            f"included must be a boolean array of shape ({y.shape[1]},), got {inc.dtype} "
            f"{inc.shape}"
        )
    if j[:, ~inc].any():
        raise InvalidParameterError("joins: an excluded canary joined an update")
    q = check_real_in(sample_rate, "sample_rate", lo=0.0, lo_open=True, hi=1.0)
    delta = check_probability(delta, "delta")
    beta = 1.0 - check_probability(confidence, "confidence")
    T = int(y.shape[0])
    y1, y0 = y[j], y[~j]
    n1, n0 = int(y1.size), int(y0.size)
    out = {
        "family": "subsampled Gaussian",
        "assumption": SGM_ASSUMPTION,
        "updates": T,
        "sample_rate": float(q),
        "joins": n1,
        "delta": delta,
        "confidence": 1.0 - beta,
    }
    if n1 < 2 or n0 < 2:
        return {**out, "epsilon_lower_bound": 0.0, "noise_multiplier_upper_bound": math.inf,
                "contribution": None, "noise_std": None, "contribution_lower_bound": None,
                "noise_std_upper_bound": None}  # fmt: skip
    c_hat, s_hat, c_lb, s_ub = _contribution_and_noise(y1, y0, beta)
    sigma_ub = s_ub / c_lb if c_lb > 0 else math.inf
    eps, at = 0.0, sigma_ub
    # eps falls with sigma: any larger sigma gives a valid (smaller) bound
    for _ in range(64 if math.isfinite(sigma_ub) else 0):
        try:
            eps = sgm_epsilon(at, float(q), T, delta)
        except (OverflowError, FloatingPointError, MemoryError):  # loss too large to compose
            eps = 0.0
        if eps > 0.0:  # a finite sigma has epsilon > 0: 0 is the PLD's numerical failure
            break
        at *= 1.25
    if eps > 0.0:  # never above an upper bound of the same epsilon (a guard on the numerics)
        eps = min(eps, _rdp_epsilon(at, float(q), T, delta))
    return {
        **out,
        "epsilon_lower_bound": eps,
        "noise_multiplier_upper_bound": sigma_ub,
        "epsilon_computed_at": at,
        "noise_multiplier_estimate": s_hat / c_hat if c_hat > 0 else math.inf,
        "contribution": c_hat,
        "noise_std": s_hat,
        "contribution_lower_bound": c_lb,
        "noise_std_upper_bound": s_ub,
    }
