"""One-run privacy auditing of DP-SGD training (Steinke, Nasr & Jagielski 2023).

``m`` canaries are planted at training time, each included independently with probability 1/2
(the secret bits, stored in the run's ``secrets.npz``). After the run, the auditor scores each
canary from what the run published, guesses "in" for the ``k`` highest scores and "out" for the
``k`` lowest (abstaining on the rest), and counts ``v`` correct guesses out of ``r = 2k``.

If the training is ``(eps, delta)``-DP with respect to one canary, Steinke et al. (2023,
Corollary 5.4; the code of their Appendix D) bound the chance of ``>= v`` correct guesses by::

    p(eps, delta) = P[Bin(r, q) >= v] + 2 m delta max_{i=1..v} P[v - i <= Bin(r, q) < v] / i,
    q = e^eps / (1 + e^eps)

so the largest ``eps`` with ``p(eps, delta) < beta`` is a lower bound on the true epsilon holding
with confidence ``1 - beta`` (:func:`epsilon_lower_bound`). Several guess counts ``k`` (fixed in
advance, :data:`FRACTIONS`) are tried with a Bonferroni split of ``beta``.

Two settings, both from the same run:

* **white-box** (the auditor sees every noisy update, as in federated training): canary ``i``'s
  score is ``sum_t <released_t, u_i>``, the released noisy mean gradients projected on the
  canary's public direction (``transcript.npz``: ``update`` rows or the stored
  ``canary_projection``);
* **black-box** (final model only): the score is ``-<theta_T - theta_0, u_i>`` (an included
  gradient canary pushes the parameters against ``u_i``; ``theta_0`` is public, drawn from the
  seed).

The comparison is against the accountant's upper bound for the same ``delta`` (the run's
``metrics.json``): a lower bound above it is a violation. The auditor never opens
``secrets.npz`` to compute scores; only :func:`audit_run` reads the bits to count correct
guesses.

Two stronger tests of the same run (both sound: a correct trainer is flagged with probability at
most ``1 - confidence``):

* **f-DP one-run bound** (after Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-differential
  privacy in one run"): the whole claimed privacy curve, not one ``(eps, delta)`` pair, bounds
  the number of correct guesses. For one canary ``i`` and any fixed other bits, flipping bit ``i``
  turns the event "guess ``i`` correct and ``W - 1`` in ``R``" into "guess ``i`` wrong and ``W``
  in ``R``"; an f-DP mechanism bounds the first probability by ``g = 1 - f`` of the second
  (both directions of neighbouring, convexity of ``f``), and averaging over the ``m`` canaries
  (Jensen, ``g`` concave) gives, for ``p_j = P[W = j]`` with ``k`` guesses and every set ``R``,
  ``sum_{j in R} (j + 1) p_{j+1} <= m g(sum_{j in R} (k - j) p_j / m)``. Writing ``g`` as the
  minimum of the lines ``delta(eps) + e^eps x`` of the claimed privacy profile, the worst-case
  ``P[W >= v]`` over all ``p`` meeting these constraints is a linear programme
  (:func:`fdp_tail_bound`, SciPy's HiGHS). For a pure ``eps`` it is exactly Steinke et al.'s
  binomial tail (tested). The claimed curve is read from the run's ledger: ``G_mu`` with
  ``mu = sqrt(T) / sigma`` for unsampled Gaussian updates, else the PLD privacy profile
  (dp_accounting, pessimistic) of what was charged (:func:`claimed_lines`).
* **White-box claimed-mechanism test** (:func:`mechanism_test`): the auditor sees every noisy
  update and tests the claimed mechanism itself: each per-sample gradient (data or canary)
  clipped to norm ``C``, fresh ``N(0, (sigma C)^2)`` noise per coordinate, canaries joining an
  update with the charged rate ``q``. On the orthonormal canary directions the noise is i.i.d.
  ``N(0, sigma^2)`` (units of ``C``), a canary adds at most 1 when it joins, and the data
  gradients of an update (at most ``n_t`` samples of norm ``<= C``) can move the weighted score
  difference by at most ``n_t ||w||`` (Bessel's inequality; whatever the data, adaptively). So
  (a) ``Delta = sum_t <y_t, w>`` (``w = 1/n_in`` on included canaries, ``-1/n_out`` on the others)
  is at most ``Bin(T n_in, q) / n_in + sum_t n_t ||w|| + N(0, T sigma^2 ||w||^2)`` and (b)
  ``sum y^2 / sigma^2`` is stochastically at least ``chi^2(T m)`` (a shifted Gaussian is never
  more concentrated, Anderson's inequality). A too-large ``Delta`` (per-layer clipping, no
  clipping, an understated sampling rate) or a too-small sum of squares (noise not multiplied
  by ``C``) rejects the claim; the two p-values are split by Bonferroni.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit._validation import check_probability
from ldp_audit.errors import InvalidParameterError, RunDirectoryError

__all__ = [
    "FRACTIONS",
    "FDP_FRACTIONS",
    "gdp_delta",
    "profile_lines",
    "fdp_tail_bound",
    "fdp_audit_scores",
    "gdp_mu_lower_bound",
    "claimed_lines",
    "mechanism_test",
    "p_value",
    "epsilon_lower_bound",
    "audit_scores",
    "canary_scores",
    "audit_run",
    "one_run_result_class",
    "one_run_result",
    "score_run_from_args",
    "independence_test",
    "noise_test",
    "contribution_test",
    "sampling_test",
    "steinke_ceiling",
    "canaries_to_refute",
]

#: Fractions of the canaries guessed on (half "in", half "out"), fixed before the scores are seen.
FRACTIONS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: Guess fractions of the f-DP test (fixed in advance; the LP grows with the guesses, so at most
#: FDP_MAX_GUESSES guesses are made).
FDP_FRACTIONS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3)
FDP_MAX_GUESSES = 600
#: Lines (epsilon grid points) of the claimed privacy profile given to the LP.
FDP_LINES = 24


def _check_counts(m: Any, r: Any, v: Any) -> tuple[int, int, int]:
    for name, x in (("m", m), ("r", r), ("v", v)):
        if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or int(x) < 0:
            raise InvalidParameterError(f"{name} must be an integer >= 0, got {x!r}")
    m, r, v = int(m), int(r), int(v)
    if not v <= r <= m:
        raise InvalidParameterError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    return m, r, v


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Probability of ``>= v`` correct guesses out of ``r`` under ``(epsilon, delta)``-DP.

    Steinke, Nasr & Jagielski (2023), Corollary 5.4 (Appendix D's ``p_value_DP_audit``), with the
    inner maximum computed in one vectorised pass.
    """
    from scipy.stats import binom

    m, r, v = _check_counts(m, r, v)
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


def epsilon_lower_bound(m: int, r: int, v: int, *, delta: float, beta: float) -> float:
    """Largest epsilon rejected at level ``beta``: the true epsilon exceeds it w.p. >= 1 - beta.

    Appendix D's ``get_eps_audit``: an upper bracket, then bisection (40 steps); the low end is
    returned (conservative). 0.0 when even epsilon = 0 is not rejected.
    """
    m, r, v = _check_counts(m, r, v)
    beta = check_probability(beta, "beta")
    if r == 0 or p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, hi * 2
        if hi > 1e3:
            return lo
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if p_value(m, r, v, mid, delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


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
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    inc = np.asarray(included, dtype=bool).reshape(-1)
    if s.shape != inc.shape or s.size < 2 or not np.isfinite(s).all():
        raise InvalidParameterError(
            f"scores must be finite with the shape of included, got {s.shape} vs {inc.shape}"
        )
    beta = (1.0 - check_probability(confidence, "confidence")) / len(fractions)
    m = s.size
    order = np.argsort(-s, kind="stable")
    best: dict[str, Any] = {"epsilon_lower_bound": 0.0, "guesses": 0, "correct": 0,
                            "fraction": None}  # fmt: skip
    per = []
    for f in fractions:
        k = int(math.floor(check_probability(f, "fraction", open_interval=False) * m / 2))
        if k < 1:
            continue
        v = int(inc[order[:k]].sum() + (~inc[order[m - k :]]).sum())
        eps = epsilon_lower_bound(m, 2 * k, v, delta=delta, beta=beta)
        per.append({"fraction": f, "guesses": 2 * k, "correct": v, "epsilon_lower_bound": eps})
        if eps >= best["epsilon_lower_bound"]:
            best = {"epsilon_lower_bound": eps, "guesses": 2 * k, "correct": v, "fraction": f}
    best["per_fraction"] = per
    return best


# ------------------------------------------------------------------------------------------------
# f-DP one-run bound (after Mahloujifar, Melis & Chaudhuri 2024): a linear programme
# ------------------------------------------------------------------------------------------------


def gdp_delta(mu: float, epsilon: Any) -> np.ndarray:
    """Privacy profile of ``G_mu`` (Dong, Roth & Su 2022, Corollary 2.13).

    ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``.
    """
    from scipy.special import log_ndtr

    if isinstance(mu, bool) or not isinstance(mu, (int, float, np.floating)) or not mu > 0:
        raise InvalidParameterError(f"mu must be a number > 0, got {mu!r}")
    e = np.asarray(epsilon, dtype=np.float64)
    a = log_ndtr(-e / mu + mu / 2)
    b = e + log_ndtr(-e / mu - mu / 2)
    with np.errstate(under="ignore"):
        return np.maximum(np.exp(a) * -np.expm1(np.minimum(b - a, 0.0)), 0.0)


def profile_lines(epsilon: Any, delta: Any) -> tuple[np.ndarray, np.ndarray]:
    """Lines ``(a, b)`` with ``1 - f(x) <= a + b x`` from privacy-profile points ``(eps, delta)``.

    Each valid ``(eps, delta(eps))`` gives ``1 - f(x) <= delta + e^eps x``; any subset of valid
    lines describes a valid (looser) curve, so a finite grid is sound. (The other branch,
    ``1 - e^-eps (1 - delta - x)``, only matters for guess accuracies below 1/2 and is left out:
    measured, it changed no p-value and made the LP 10-30x slower.)
    """
    e = np.asarray(epsilon, dtype=np.float64).reshape(-1)
    d = np.asarray(delta, dtype=np.float64).reshape(-1)
    if e.shape != d.shape or e.size == 0 or (e < 0).any() or not np.isfinite(e).all():
        raise InvalidParameterError(
            f"epsilon must be finite values >= 0 with the shape of delta, got {e!r}"
        )
    if not ((d >= 0) & (d <= 1)).all():
        raise InvalidParameterError(f"delta values must be in [0, 1], got {d!r}")
    return d.copy(), np.exp(e)


def fdp_tail_bound(m: int, k: int, v: int, lines: tuple[Any, Any]) -> float:
    """Largest ``P[>= v correct out of k guesses]`` over every f-DP guessing game (an LP).

    Variables ``p_0..p_k`` (the law of the number of correct guesses ``W``) and one slack per
    line and ``j``; for every line ``(a, b)`` of ``1 - f``:
    ``sum_j max(0, (j + 1) p_{j+1} - b (k - j) p_j) <= m a`` (the constraint of the module
    docstring for the worst set ``R``). Maximise ``sum_{j >= v} p_j``. Solved by HiGHS; the
    optimum is rounded up by 1e-9 (solver tolerance) and capped at 1.

    Args:
        m: canaries (each included with probability 1/2).
        k: guesses made (always exactly ``k``).
        v: correct guesses observed.
        lines: ``(a, b)`` arrays from :func:`profile_lines`.
    """
    m, k, v = _check_counts(m, k, v)
    a = np.asarray(lines[0], dtype=np.float64).reshape(-1)
    b = np.asarray(lines[1], dtype=np.float64).reshape(-1)
    if a.shape != b.shape or a.size == 0 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise InvalidParameterError("lines must be two finite arrays of the same length")
    if v == 0:
        return 1.0
    if k == 0:
        return 0.0
    for step in (1, 2, 4):  # on numerical trouble, fewer lines: looser, still valid
        p = _tail_lp(m, k, v, a[::step], b[::step])
        if p is not None:
            return p
    return 1.0  # not proven optimal: claim nothing (a p-value of 1 is always valid)


def _tail_lp(m: int, k: int, v: int, a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, csr_matrix

    n, L = k + 1, a.size
    j = np.arange(k)
    rows = np.concatenate([np.tile(j, L)[None, :] + (np.arange(L) * k).repeat(k)[None, :]] * 3)
    slack = n + np.arange(L * k)
    cols = np.stack([slack, np.tile(j + 1, L), np.tile(j, L)])
    up = np.tile((j + 1).astype(np.float64), L)
    vals = np.stack([-np.ones(L * k), up, -np.repeat(b, k) * np.tile(k - j, L)])
    sum_rows = L * k + np.repeat(np.arange(L), k)
    A = coo_matrix(
        (
            np.concatenate([vals.reshape(-1), np.ones(L * k)]),
            (
                np.concatenate([rows.reshape(-1), sum_rows]),
                np.concatenate([cols.reshape(-1), slack]),
            ),
        ),
        shape=(L * k + L, n + L * k),
    ).tocsr()
    ub = np.concatenate([np.zeros(L * k), m * a])
    eq = csr_matrix((np.ones(n), (np.zeros(n, dtype=int), np.arange(n))), shape=(1, n + L * k))
    c = np.zeros(n + L * k)
    c[v:n] = -1.0
    res = linprog(c, A_ub=A, b_ub=ub, A_eq=eq, b_eq=[1.0], bounds=(0, None), method="highs")
    if res.status != 0:
        return None
    return float(min(1.0, -res.fun + 1e-9))


def _guess_counts(scores: np.ndarray, included: np.ndarray, fractions: Sequence[float],
                  cap: int) -> list[tuple[float, int, int]]:  # fmt: skip
    m = scores.size
    order = np.argsort(-scores, kind="stable")
    out = []
    for f in fractions:
        k = min(int(math.floor(check_probability(f, "fraction", open_interval=False) * m / 2)),
                cap // 2)  # fmt: skip
        if k < 1:
            continue
        v = int(included[order[:k]].sum() + (~included[order[m - k :]]).sum())
        out.append((float(f), 2 * k, v))
    return out


def gdp_mu_lower_bound(m: int, k: int, v: int, *, beta: float, steps: int = 14) -> float:
    """Largest ``mu`` whose ``G_mu`` curve the f-DP test rejects at level ``beta`` (0 if none).

    The tail bound grows with ``mu``, so bisection; the low end is returned (conservative).
    """
    beta = check_probability(beta, "beta")

    def p(mu: float) -> float:
        return fdp_tail_bound(m, k, v, _gdp_lines(mu))

    if v <= k / 2 or p(0.05) > beta:
        return 0.0
    lo, hi = 0.05, 1.0
    while p(hi) <= beta:
        lo, hi = hi, hi * 2
        if hi > 64:
            return lo
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if p(mid) <= beta:
            lo = mid
        else:
            hi = mid
    return lo


def _gdp_lines(mu: float, n: int = FDP_LINES) -> tuple[np.ndarray, np.ndarray]:
    top = mu * mu / 2 + 7.0 * mu + 1.0  # delta(top) < 1e-12
    e = np.linspace(0.0, top, n)
    return profile_lines(e, gdp_delta(mu, e))


def fdp_audit_scores(
    scores: Any,
    included: Any,
    lines: tuple[Any, Any],
    *,
    confidence: float = 0.95,
    fractions: Sequence[float] = FDP_FRACTIONS,
    mu: float | None = None,
) -> dict[str, Any]:
    """The f-DP one-run test of a claimed privacy curve, from scores and the secret bits.

    For each fraction (fixed in advance, at most ``FDP_MAX_GUESSES`` guesses) the p-value is
    :func:`fdp_tail_bound` under the claimed curve ``lines``; the claim is rejected when one is at
    most ``(1 - confidence) / len(fractions)`` (Bonferroni). With ``mu`` (the claim is ``G_mu``)
    also the largest ``mu`` rejected (:func:`gdp_mu_lower_bound`, same split, at the fraction
    with the smallest p-value: each fraction's bound holds simultaneously, so any one may be
    reported).

    Returns:
        ``{"rejected", "p_values": [{fraction, guesses, correct, p_value}], "level",
        "mu_claimed", "mu_lower_bound"}``.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    inc = np.asarray(included, dtype=bool).reshape(-1)
    if s.shape != inc.shape or s.size < 2 or not np.isfinite(s).all():
        raise InvalidParameterError(
            f"scores must be finite with the shape of included, got {s.shape} vs {inc.shape}"
        )
    level = (1.0 - check_probability(confidence, "confidence")) / len(fractions)
    rows = []
    for f, k, v in _guess_counts(s, inc, fractions, FDP_MAX_GUESSES):
        pv = fdp_tail_bound(s.size, k, v, lines)
        rows.append({"fraction": f, "guesses": k, "correct": v, "p_value": pv})
    mu_lb = 0.0
    if mu is not None and rows:  # every fraction's bound holds at once (Bonferroni): use one
        best = min(rows, key=lambda r: r["p_value"])
        mu_lb = gdp_mu_lower_bound(s.size, best["guesses"], best["correct"], beta=level)
    return {
        "rejected": bool(any(r["p_value"] <= level for r in rows)),
        "p_values": rows,
        "level": level,
        "confidence": confidence,
        "mu_claimed": mu,
        "mu_lower_bound": mu_lb if mu is not None else None,
    }


def _charged(run_dir: Path) -> tuple[float, float, int]:
    """(sigma, q, T) of the DP-SGD updates charged to the run's ledger (agent ``model``)."""
    from ldp_audit.accountant import GaussianEvent, Ledger, PoissonSampledEvent, event_from_json

    p = run_dir / "ledger.sqlite"
    if not p.is_file():
        raise RunDirectoryError(f"{p} is missing: the claimed guarantee is read from the ledger")
    led = Ledger(p, readonly=True, create=False)
    try:
        hist = led.history("model")
    finally:
        led.close()
    if len(hist) != 1:
        raise RunDirectoryError(
            f"{p}: the one-run tests need one kind of charged update, got {len(hist)} kinds"
        )
    ev, T = event_from_json(hist[0][0]), int(hist[0][1])
    q = 1.0
    if isinstance(ev, PoissonSampledEvent):
        q, ev = float(ev.sample_rate), ev.event
    if not isinstance(ev, GaussianEvent):
        raise RunDirectoryError(f"{p}: charged updates are {ev!r}, not (sampled) Gaussian")
    return float(ev.noise_multiplier), q, T


def claimed_lines(run_dir: str | Path) -> dict[str, Any]:
    """The claimed privacy curve of a DP-SGD run, from what its ledger charged.

    Unsampled Gaussian updates (REINFORCE): ``G_mu`` with ``mu = sqrt(T) / sigma`` (exact, Dong,
    Roth & Su 2022). Poisson-sampled ones (DQN): dp_accounting's PLD (pessimistic, add-or-remove)
    of the T-fold composition, its ``delta(eps)`` on a grid.
    """
    run_dir = Path(run_dir)
    sigma, q, T = _charged(run_dir)
    if q >= 1.0:
        mu = math.sqrt(T) / sigma
        return {"kind": "G_mu", "mu": mu, "sigma": sigma, "q": q, "updates": T,
                "lines": _gdp_lines(mu)}  # fmt: skip
    from ldp_audit.accountant import GaussianEvent, PoissonSampledEvent
    from ldp_audit.accountant.pld import event_pld, plan

    ev = PoissonSampledEvent(q, GaussianEvent(sigma))
    vdi, _ = plan({ev: T}, value_discretization_interval=1e-3)  # bounded support, long runs
    pld = event_pld(ev, value_discretization_interval=vdi)
    pld = pld.self_compose(T)
    top = float(pld.get_epsilon_for_delta(1e-12))
    e = np.linspace(0.0, max(top, 1e-3), FDP_LINES)
    d = np.minimum(np.asarray(pld.get_delta_for_epsilon(e), dtype=np.float64), 1.0)
    return {"kind": "PLD profile", "mu": None, "sigma": sigma, "q": q, "updates": T,
            "lines": profile_lines(e, d)}  # fmt: skip


# ------------------------------------------------------------------------------------------------
# White-box test of the claimed mechanism (clip C, noise sigma C, rate q) on the canary directions
# ------------------------------------------------------------------------------------------------


def mechanism_test(
    projections: Any,
    included: Any,
    *,
    sigma: float,
    sample_rate: float,
    data_per_update: Any,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Test "clip ``C``, noise ``sigma C``, canaries joining at rate ``q``" on the released updates.

    Args:
        projections: (T, m) released noisy sums projected on the orthonormal canary directions,
            in units of ``C`` (``update @ U * expected_batch / C``).
        included: (m,) secret inclusion bits.
        sigma: the charged noise multiplier.
        sample_rate: the charged rate ``q`` at which an included canary joins an update.
        data_per_update: (T,) or scalar upper bound on the data samples in each update.
        confidence: the test's level is ``1 - confidence`` (split over its two parts).

    Returns:
        ``{"rejected", "p_mean", "p_noise", "delta_stat", "mean_bound", "rate_lower_bound",
        "noise_upper_bound", ...}``: ``rate_lower_bound`` is a lower confidence bound on the
        mean contribution of an included canary per update (``q`` times its norm, units of
        ``C``; at most ``q`` under the claim), ``noise_upper_bound`` an upper confidence bound on
        the noise multiplier (at least ``sigma`` under the claim).
    """
    from scipy.stats import binom, chi2, norm

    y = np.asarray(projections, dtype=np.float64)
    inc = np.asarray(included, dtype=bool).reshape(-1)
    if y.ndim != 2 or y.shape[1] != inc.size or y.shape[0] < 1 or not np.isfinite(y).all():
        raise InvalidParameterError(
            f"projections must be a finite (T, m) array with m = {inc.size}, got {y.shape}"
        )
    sigma = float(sigma)
    if not sigma > 0:
        raise InvalidParameterError(f"sigma must be > 0, got {sigma!r}")
    q = check_probability(sample_rate, "sample_rate", open_interval=False)
    if q == 0.0:
        raise InvalidParameterError(f"sample_rate must be > 0, got {sample_rate!r}")
    level = (1.0 - check_probability(confidence, "confidence")) / 2
    T, m = y.shape
    n1, n0 = int(inc.sum()), int((~inc).sum())
    if n1 == 0 or n0 == 0:
        raise InvalidParameterError("mechanism_test needs included and excluded canaries")
    w = np.where(inc, 1.0 / n1, -1.0 / n0)
    wn = math.sqrt(1.0 / n1 + 1.0 / n0)
    try:
        n_t = np.broadcast_to(np.asarray(data_per_update, dtype=np.float64), (T,))
    except ValueError:
        raise InvalidParameterError(
            f"data_per_update must be a number or one per update (T = {T}), got {data_per_update!r}"
        ) from None
    if not (np.isfinite(n_t).all() and (n_t >= 0).all()):
        raise InvalidParameterError(
            f"data_per_update must be finite and >= 0, got {data_per_update!r}"
        )
    slack = float(n_t.sum() * wn)
    stat = float((y @ w).sum())
    sd = sigma * math.sqrt(T) * wn

    def p_mean(rate: float) -> float:
        if rate >= 1.0:
            return float(norm.sf((stat - slack - T) / sd))
        n = T * n1
        half = 12.0 * math.sqrt(n * rate * (1.0 - rate)) + 12.0  # the binomial's bulk
        lo_x = max(0, int(math.floor(n * rate - half)))
        hi_x = min(n, int(math.ceil(n * rate + half)))
        x = np.arange(lo_x, hi_x + 1)
        pmf = binom.pmf(x, n, rate)
        rest = max(0.0, 1.0 - float(pmf.sum()))  # mass left out, counted in full: conservative
        return min(1.0, float(np.sum(pmf * norm.sf((stat - slack - x / n1) / sd))) + rest)

    pm = p_mean(q)
    # lower confidence bound on the per-update contribution (largest rate rejected)
    lo, hi = 0.0, 1.0
    if p_mean(0.0) > level:
        rate_lb = 0.0
    elif p_mean(1.0) <= level:  # beyond q = 1: a canary contributes more than C (clipping)
        rate_lb = (stat - slack - norm.isf(level) * sd) / T
    else:
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if p_mean(mid) <= level else (lo, mid)
        rate_lb = lo
    ss = float((y * y).sum()) / sigma**2
    pn = float(chi2.cdf(ss, T * m))
    noise_ub = sigma * math.sqrt(ss / chi2.ppf(level, T * m))
    return {
        "rejected": bool(pm <= level or pn <= level),
        "level": level,
        "confidence": confidence,
        "p_mean": pm,
        "p_noise": pn,
        "delta_stat": stat,
        "mean_bound": (T * q + slack),
        "data_slack": slack,
        "rate_claimed": q,
        "rate_lower_bound": rate_lb,
        "sigma_claimed": sigma,
        "noise_upper_bound": noise_ub,
        "updates": T,
        "canaries": m,
    }


# ------------------------------------------------------------------------------------------------
# Reading a dprl run (scores never touch secrets.npz)
# ------------------------------------------------------------------------------------------------


def _public(run_dir: Path) -> tuple[Any, dict, dict, dict]:
    from ldp_audit.rundir import read_npz
    from ldp_audit.training.dprl import read_run

    run = read_run(run_dir)
    cfg = run["config"]
    if cfg.canaries < 2:
        raise RunDirectoryError(
            f"run {str(run_dir)!r} has no canaries (trained with canaries={cfg.canaries}); "
            f"train with --canaries M to audit it in one run"
        )
    tr = read_npz(run_dir, "transcript.npz")
    return cfg, run["metrics"], run["model"], tr


def canary_scores(run_dir: str | Path, setting: str = "white-box") -> np.ndarray:
    """(m,) membership scores of the canaries from the public parts of the run."""
    from ldp_audit.training.dprl import canary_directions

    if setting not in ("white-box", "black-box"):
        raise InvalidParameterError(f"setting must be 'white-box' or 'black-box', got {setting!r}")
    run_dir = Path(run_dir)
    cfg, _, model, tr = _public(run_dir)
    u = canary_directions(cfg.n_params, cfg.canaries, cfg.canary_seed)
    if setting == "black-box":
        return -(np.asarray(model["params"]) - np.asarray(model["initial"])) @ u
    if "update" in tr and tr["update"].ndim == 2:
        return (tr["update"].astype(np.float64) @ u).sum(axis=0)
    if "canary_projection" in tr:
        return tr["canary_projection"].sum(axis=0)
    raise RunDirectoryError(f"{run_dir}/transcript.npz holds no released updates to score")


def one_run_result(
    *,
    attack: str,
    mechanism: Any,
    epsilon: float,
    canaries: int,
    one: dict[str, Any],
    membership: dict[str, Any],
    confidence: float,
    seconds: float,
    extra: dict[str, Any],
) -> Any:
    """A one-run audit's result from its Steinke guesses (``one``: guesses, correct, the
    (eps, delta) lower bound) and membership metrics: a two-way guess per canary against the
    ceiling ``1 / (1 + e^-epsilon)`` the claim allows. Shared with :mod:`ldp_audit.opacus`."""
    from ldp_audit.attacks.scoring import accuracy_interval

    r, v = one["guesses"], one["correct"]
    return one_run_result_class()(
        attack=attack,
        mechanism=mechanism,
        epsilon=epsilon,
        reports_per_agent=1,
        k=2,
        n=canaries,
        correct=v,
        accuracy=v / r if r else float("nan"),
        accuracy_ci=accuracy_interval(v, r, confidence) if r else (0.0, 1.0),
        ceiling=1.0 if math.isinf(epsilon) else 1.0 / (1.0 + math.exp(-epsilon)),
        composed_epsilon=epsilon,
        epsilon_lower_bound=float(one["epsilon_lower_bound"]),
        confidence=confidence,
        chance=0.5,
        auc=membership["auc"],
        tpr_at_fpr=membership["tpr_at_fpr"],
        advantage=membership["advantage"],
        seconds=seconds,
        extra=extra,
    )


def one_run_result_class() -> Any:
    """The result type of a one-run audit (built on first use so importing this module does not
    import the scoring classes); shared with :mod:`ldp_audit.opacus`."""
    from ldp_audit.attacks.scoring import AttackResult

    class OneRunResult(AttackResult):
        """An ``AttackResult`` whose verdict is any of the run's tests (``extra["flagged_by"]``).

        ``epsilon_lower_bound`` stays the Steinke et al. (eps, delta) bound; the f-DP test and
        the white-box mechanism test are reported in ``extra`` and also make ``violation``
        true when they reject (each test at ``(1 - confidence) / n_tests``, so the verdict's
        false-alarm probability on a correct trainer is at most ``1 - confidence``).
        """

        @property
        def violation(self) -> bool:
            return bool(super().violation or self.extra.get("flagged_by"))

        def summary(self) -> str:
            line = super().summary()
            by = self.extra.get("flagged_by")
            return line + (f" (flagged by: {', '.join(by)})" if by else "")

    return OneRunResult


def audit_run(
    run_dir: str | Path,
    *,
    setting: str = "white-box",
    confidence: float = 0.95,
    fdp: bool = True,
    mu_bound: bool = True,
) -> Any:
    """Score the canaries of a dprl run and test the claim; an ``AttackResult``.

    ``epsilon_lower_bound`` is the one-run (eps, delta) bound (Steinke et al.) at the run's
    delta; ``composed_epsilon`` (and ``epsilon``) is the accountant's upper bound at that delta.
    ``extra["f_dp"]``: the f-DP one-run test of the ledger's claimed curve
    (:func:`fdp_audit_scores`); ``extra["mechanism_test"]`` (white-box):
    :func:`mechanism_test`. ``mu_bound=False`` skips the (slow, reporting-only) GDP ``mu``
    lower bound of the f-DP test; the verdict does not use it.
    ``violation`` is true when any test flags (``extra["flagged_by"]``);
    the tests split ``1 - confidence`` (Bonferroni), so a correct trainer is flagged with
    probability at most ``1 - confidence``.
    """
    from ldp_audit.attacks.membership import membership_metrics
    from ldp_audit.rundir import read_npz
    from ldp_audit.training.dprl import canary_directions

    t0 = time.perf_counter()
    confidence = check_probability(confidence, "confidence")
    run_dir = Path(run_dir)
    cfg, met, _, tr = _public(run_dir)
    scores = canary_scores(run_dir, setting)
    white = setting == "white-box"
    n_tests = 1 + int(fdp) + int(white)
    conf_each = 1.0 - (1.0 - confidence) / n_tests
    # a run that made no update released nothing to test beyond the (eps, delta) bound
    claim = claimed_lines(run_dir) if (fdp or white) and met.get("updates") else None
    proj = None
    if white:
        if "canary_projection" in tr:
            proj = np.asarray(tr["canary_projection"], dtype=np.float64)
        else:
            u = canary_directions(cfg.n_params, cfg.canaries, cfg.canary_seed)
            proj = tr["update"].astype(np.float64) @ u
    # --- scoring only: the secret bits ---
    included = read_npz(run_dir, "secrets.npz", ("canary_included",))["canary_included"]
    one = audit_scores(scores, included, delta=cfg.delta, confidence=conf_each)
    both = bool(included.any() and (~included).any())
    mm = membership_metrics(scores, included) if both else {"auc": None, "advantage": 0.0,
                                                           "tpr_at_fpr": {}}  # fmt: skip
    priv = met.get("privacy", {})
    eps_ub = priv.get("epsilon", math.inf)
    eps_ub = math.inf if eps_ub in ("inf", None) else float(eps_ub)
    r = one["guesses"]
    flagged = []
    if one["epsilon_lower_bound"] > eps_ub * (1.0 + 1e-12):
        flagged.append("steinke")
    f_dp = None
    if fdp and both and claim is not None:
        f_dp = fdp_audit_scores(scores, included, claim["lines"], confidence=conf_each,
                                mu=claim["mu"] if mu_bound else None)  # fmt: skip
        f_dp["mu_claimed"] = claim["mu"]
        f_dp.update({k: claim[k] for k in ("kind", "sigma", "q", "updates")})
        if f_dp["rejected"]:
            flagged.append("f-dp")
    mech = None
    if white and both and claim is not None and proj is not None and len(proj):
        expected = cfg.envs if cfg.algo == "reinforce" else cfg.batch_size
        per_update = cfg.envs if cfg.algo == "reinforce" else cfg.buffer_size
        mech = mechanism_test(
            proj * (expected / cfg.clip),
            included,
            sigma=claim["sigma"],
            sample_rate=claim["q"],
            data_per_update=per_update,
            confidence=conf_each,
        )
        if mech["rejected"]:
            flagged.append("mechanism")
    return one_run_result(
        attack=f"one-run-{setting}",
        mechanism=cfg.mechanism_config(),
        epsilon=eps_ub,
        canaries=int(cfg.canaries),
        one=one,
        membership=mm,
        confidence=confidence,
        seconds=time.perf_counter() - t0,
        extra={
            "setting": setting,
            "method": "Steinke, Nasr & Jagielski 2023, Cor. 5.4 (eps, delta)",
            "delta": cfg.delta,
            "guesses": r,
            "guess_fraction": one["fraction"],
            "per_fraction": one["per_fraction"],
            "members": int(included.sum()),
            "accountant": priv.get("by_method"),
            "updates": met.get("updates"),
            "privacy_unit": priv.get("unit"),
            "canary_scale": cfg.canary_scale,
            "tests": n_tests,
            "confidence_each": conf_each,
            "f_dp": f_dp,
            "mechanism_test": mech,
            "flagged_by": flagged,
        },
    )


def score_run_from_args(args: Any) -> Any:
    """``ldp-audit attack membership --run-dir RUN`` for dprl runs (RUN_SCORERS entry).

    Returns the white-box result; the black-box result of the same run is in
    ``extra["black_box"]``.
    """
    conf = float(getattr(args, "confidence", 0.95))
    white = audit_run(args.run_dir, setting="white-box", confidence=conf)
    black = audit_run(args.run_dir, setting="black-box", confidence=conf)
    white.extra["black_box"] = black.to_dict()
    return white


# ------------------------------------------------------------------------------------------------
# Tests of a DP-SGD run's released updates (the Opacus integration, ldp_audit.opacus; issue 26)
# ------------------------------------------------------------------------------------------------


def independence_test(projections: Any, *, sigma: float, confidence: float = 0.95) -> dict:
    """Lower-tail chi-square test of fresh noise in every update (noise reused across updates).

    ``projections`` (T, m): the released noisy sums on the orthonormal canary directions in units
    of ``C``. Under the claim ``y_{t+1} = s_{t+1} + z_{t+1}`` where the signal ``s_{t+1}`` (data,
    canaries, chosen by any adaptive process) is fixed before the fresh noise
    ``z_{t+1} ~ N(0, sigma^2 I_m)`` is drawn, so given everything up to update ``t`` the
    difference ``d_t = y_{t+1} - y_t`` is a shifted ``N(0, sigma^2 I_m)``, never more
    concentrated (Anderson's inequality): each ``|d_t|^2 / sigma^2`` is conditionally
    stochastically at least ``chi^2(m)``, whatever the data. Two statistics, Bonferroni inside:
    the sum over the ``T - 1`` differences (at least ``chi^2((T - 1) m)``) and the smallest one
    (``P[min <= x] <= 1 - (1 - F_m(x))^(T-1)``). Noise reused in consecutive updates makes the
    differences hold only the (small) change of the signal.

    Returns:
        ``{"rejected", "p_value", "p_sum", "p_min", "ratio", "level", "pairs"}`` (``ratio`` is the
        mean ``|d_t|^2 / (m sigma^2)``: about 2 under the claim, near 0 with reused noise); None
        for the p-values when ``T < 2``.
    """
    from scipy.stats import chi2

    y = np.asarray(projections, dtype=np.float64)
    if y.ndim != 2 or not np.isfinite(y).all():
        raise InvalidParameterError(f"projections must be a finite (T, m) array, got {y.shape}")
    sigma = float(sigma)
    if not sigma > 0:
        raise InvalidParameterError(f"sigma must be > 0, got {sigma!r}")
    level = 1.0 - check_probability(confidence, "confidence")
    T, m = y.shape
    if T < 2 or m < 1:
        return {"rejected": False, "p_value": None, "p_sum": None, "p_min": None,
                "ratio": None, "level": level, "pairs": max(T - 1, 0)}  # fmt: skip
    s = (np.diff(y, axis=0) ** 2).sum(axis=1) / sigma**2
    p_sum = float(chi2.cdf(s.sum(), (T - 1) * m))
    f_min = float(chi2.cdf(s.min(), m))
    p_min = 1.0 if f_min >= 1.0 else float(-np.expm1((T - 1) * np.log1p(-f_min)))
    p = min(1.0, 2.0 * min(p_sum, p_min))
    return {"rejected": bool(p <= level), "p_value": p, "p_sum": p_sum, "p_min": p_min,
            "ratio": float(s.mean() / m), "level": level, "pairs": T - 1}  # fmt: skip


def noise_test(projections: Any, *, sigma: float, confidence: float = 0.95) -> dict:
    """Lower-tail chi-square test of the noise magnitude (``sum y^2 / sigma^2 >= chi^2(T m)``).

    Sound whatever the data (Anderson's inequality, as in :func:`mechanism_test`); flags noise
    smaller than ``sigma C`` (noise scaled down by the batch size, the clip norm forgotten).
    """
    from scipy.stats import chi2

    y = np.asarray(projections, dtype=np.float64)
    sigma = float(sigma)
    if y.ndim != 2 or y.size == 0 or not np.isfinite(y).all() or not sigma > 0:
        raise InvalidParameterError(f"need a finite (T, m) array and sigma > 0, got {y.shape}")
    level = 1.0 - check_probability(confidence, "confidence")
    ss = float((y * y).sum()) / sigma**2
    p = float(chi2.cdf(ss, y.size))
    return {"rejected": bool(p <= level), "p_value": p, "level": level,
            "noise_upper_bound": sigma * math.sqrt(ss / chi2.ppf(level, y.size))}  # fmt: skip


def _bernoulli_proxy(q: float) -> float:
    """Optimal sub-Gaussian variance proxy of a centred Bernoulli(q) (Kearns & Saul 1998;
    Berend & Kontorovich 2013): ``(1 - 2q) / (2 ln((1 - q) / q))``, 1/4 at q = 1/2."""
    q = min(q, 1.0 - q)
    if abs(q - 0.5) < 1e-9:
        return 0.25
    return (1.0 - 2.0 * q) / (2.0 * math.log((1.0 - q) / q))


def contribution_test(
    projections: Any,
    joins: Any,
    included: Any,
    batch_sizes: Any,
    *,
    sigma: float,
    sample_rate: float,
    canary_norm: float = 10.0,
    confidence: float = 0.95,
) -> dict:
    """Two-sided test of a joining canary's contribution along its own direction (= C).

    Under the claim (each per-sample gradient clipped to ``C`` on its own, Opacus's factor
    ``min(1, C / (norm + 1e-6))``), a canary of norm ``canary_norm * C`` that joins an update
    adds ``c`` in ``[c_lo, 1]`` (units of ``C``, ``c_lo = canary_norm C / (canary_norm C + 1e-6)``)
    along its direction. With ``j_t`` the secret joins of update ``t`` and ``inc`` the inclusion
    bits, ``S = sum_t <y_t, j_t - q inc> = c (1 - q) K + A + B`` (``K`` joins in all) where

    * ``A = sum_t <D_t, j_t - q inc>`` (``D_t``: the data's clipped gradients on the canary
      directions, ``|D_t| <= n_t`` by Bessel) is a martingale: the included canaries join at
      rate ``q`` independently of the data and the noise, so given everything before the joins
      of update ``t`` are drawn, its increment is a sum of centred Bernoulli(q) variables
      weighted by ``D_t``: sub-Gaussian with proxy ``kappa(q) n_t^2`` (``kappa``: the optimal
      Bernoulli constant), and ``P[A >= a] <= exp(-a^2 / (2 kappa sum n_t^2))`` whatever the data
      (Azuma-Hoeffding; the batch sizes ``n_t`` are independent of joins and noise);
    * ``B = sum_t <z_t, j_t - q inc>`` is, given the joins, ``N(0, sigma^2 W)`` with
      ``W = K (1 - 2q) + T n_in q^2``, ``K ~ Bin(T n_in, q)``: its tail is an exact binomial sum.

    ``P[A + B >= x] <= P[A >= a] + P[B >= x - a]`` for any split ``a`` (a fixed grid). Too large
    a contribution: no or per-layer clipping; too small: the canaries are not clipped one by one
    (the aggregate clipped instead of each sample: the canaries and data of an update share
    ``C``). Both tails split the level.

    Returns:
        ``{"rejected", "p_value", "p_excess", "p_deficit", "contribution", "joins", "level"}``
        (``contribution`` = ``S / ((1 - q) K)``, about 1 under the claim); p-values None when
        no canary joined or ``q = 1`` (the centred statistic is then 0).
    """
    from scipy.stats import binom, norm

    y = np.asarray(projections, dtype=np.float64)
    j = np.asarray(joins, dtype=bool)
    inc = np.asarray(included, dtype=bool).reshape(-1)
    n_t = np.asarray(batch_sizes, dtype=np.float64).reshape(-1)
    if y.ndim != 2 or j.shape != y.shape or inc.size != y.shape[1] or n_t.size != y.shape[0]:
        raise InvalidParameterError(
            f"projections and joins must be (T, m) with m = {inc.size} and T batch sizes, got "
            f"{y.shape}, {j.shape}, {n_t.shape}"
        )
    if (j & ~inc[None, :]).any():
        raise InvalidParameterError("joins must be False for every excluded canary")
    q = check_probability(sample_rate, "sample_rate", open_interval=False)
    level = 1.0 - check_probability(confidence, "confidence")
    T = y.shape[0]
    K = int(j.sum())
    n_in = int(inc.sum())
    if K == 0 or q >= 1.0 or q <= 0.0:
        return {"rejected": False, "p_value": None, "p_excess": None, "p_deficit": None,
                "contribution": None, "joins": K, "level": level}  # fmt: skip
    w = j.astype(np.float64) - q * inc[None, :]
    S = float((y * w).sum())
    c_lo = canary_norm / (canary_norm + 1e-6)
    va = _bernoulli_proxy(q) * float((n_t**2).sum())
    n = T * n_in
    half = 12.0 * math.sqrt(n * q * (1.0 - q)) + 12.0
    ks = np.arange(max(0, int(n * q - half)), min(n, int(math.ceil(n * q + half))) + 1)
    pk = binom.pmf(ks, n, q)
    rest = max(0.0, 1.0 - float(pk.sum()))
    sd_b = sigma * np.sqrt(ks * (1.0 - 2.0 * q) + n * q * q)
    splits = np.linspace(0.0, 1.0, 41)

    def tail(x: float) -> float:
        if x <= 0:
            return 1.0
        best = 1.0
        for f in splits:
            a = f * x
            pa = math.exp(-a * a / (2.0 * va)) if va > 0 else float(a <= 0)
            pb = float(np.sum(pk * norm.sf((x - a) / sd_b))) + rest
            best = min(best, pa + pb)
        return best

    p_ex = tail(S - (1.0 - q) * K)
    p_de = tail((1.0 - q) * K * c_lo - S)
    p = min(1.0, 2.0 * min(p_ex, p_de))
    sd = math.sqrt(va + sigma**2 * (K * (1 - 2 * q) + n * q * q)) / ((1 - q) * K)
    return {"rejected": bool(p <= level), "p_value": p, "p_excess": p_ex, "p_deficit": p_de,
            "contribution": S / ((1.0 - q) * K), "contribution_sd": sd, "joins": K,
            "level": level}  # fmt: skip


def sampling_test(
    batch_sizes: Any,
    *,
    dataset_size: int,
    sample_rate: float,
    confidence: float = 0.95,
    simulations: int = 5000,
    seed: int = 0,
) -> dict:
    """Are the data batch sizes those of Poisson sampling at the claimed rate?

    Under the claim (each of ``N`` records joins each update independently with rate ``q``) the
    sizes are i.i.d. ``Bin(N, q)``, whatever the data. Two two-sided statistics, Bonferroni
    inside: the total (exactly ``Bin(N T, q)``) and the dispersion ``sum_t (n_t - N q)^2``
    (Monte Carlo p-value ``(1 + #{sim at least as extreme}) / (1 + R)`` from ``R`` simulated
    runs, exact for any ``R``; the generator is seeded, so the audit is reproducible). Fixed-size
    (shuffled) batches have no dispersion; a larger true rate moves the total.
    """
    from scipy.stats import binom

    n = np.asarray(batch_sizes, dtype=np.int64).reshape(-1)
    if isinstance(dataset_size, bool) or not isinstance(dataset_size, (int, np.integer)):
        raise InvalidParameterError(f"dataset_size must be an int, got {dataset_size!r}")
    N = int(dataset_size)
    if N < 1 or n.size < 1 or (n < 0).any():
        raise InvalidParameterError(f"need dataset_size >= 1 and batch sizes, got {N}, {n.size}")
    q = check_probability(sample_rate, "sample_rate", open_interval=False)
    level = 1.0 - check_probability(confidence, "confidence")
    T = n.size
    tot = int(n.sum())
    p_tot = min(1.0, 2.0 * min(float(binom.cdf(tot, N * T, q)), float(binom.sf(tot - 1, N * T, q))))
    disp = float(((n - N * q) ** 2).sum())
    rng = np.random.default_rng(seed)
    sims = np.concatenate(
        [
            ((rng.binomial(N, q, size=(min(1000, simulations - i), T)) - N * q) ** 2).sum(axis=1)
            for i in range(0, simulations, 1000)
        ]
    )
    lo = (1 + int((sims <= disp).sum())) / (1 + simulations)
    hi = (1 + int((sims >= disp).sum())) / (1 + simulations)
    p_disp = min(1.0, 2.0 * min(lo, hi))
    p = min(1.0, 2.0 * min(p_tot, p_disp))
    return {"rejected": bool(p <= level), "p_value": p, "p_total": p_tot, "p_dispersion": p_disp,
            "mean_batch": tot / T, "expected_batch": N * q,
            "dispersion_ratio": disp / (T * N * q * (1 - q)) if 0 < q < 1 else None,
            "level": level}  # fmt: skip


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


def _eps_all_correct(m: int, r: int, delta: float, beta: float) -> float:
    """:func:`epsilon_lower_bound` for ``v = r`` with :func:`_p_all_correct` (same bisection)."""
    if r == 0 or _p_all_correct(m, r, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while _p_all_correct(m, r, hi, delta) < beta:
        lo, hi = hi, hi * 2
        if hi > 1e3:
            return lo
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        if _p_all_correct(m, r, mid, delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


def steinke_ceiling(
    m: int, *, delta: float, beta: float, fractions: Sequence[float] = FRACTIONS
) -> float:
    """The largest (eps, delta) lower bound ``m`` canaries can give: every guess correct.

    This is the perfect attacker's bound at level ``beta`` per fraction (as
    :func:`audit_scores` splits it); a claim above it cannot be refuted by this bound with ``m``
    canaries, whatever the trainer does.
    """
    m, _, _ = _check_counts(m, 0, 0)
    delta = check_probability(delta, "delta", open_interval=False)
    beta = check_probability(beta, "beta")
    best = 0.0
    for f in fractions:
        k = int(math.floor(f * m / 2))
        if k >= 1:
            best = max(best, _eps_all_correct(m, 2 * k, delta, beta))
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
