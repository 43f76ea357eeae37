"""The f-DP one-run test (after Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-differential
privacy in one run"): the whole claimed privacy curve bounds the number of correct guesses, a
linear programme (:mod:`ldp_audit.attacks.one_run` describes the audit); the claimed curve is
read from a run's ledger (:func:`claimed_lines`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.attacks.one_run_steinke import (
    check_counts,
    check_scores,
    guess_counts,
    largest_rejected,
)
from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.validation import check_probability, check_real_in

__all__ = [
    "FDP_FRACTIONS",
    "gdp_delta",
    "profile_lines",
    "fdp_tail_bound",
    "fdp_audit_scores",
    "gdp_mu_lower_bound",
    "claimed_lines",
    "model_history",
]

#: Guess fractions of the f-DP test (fixed in advance; the LP grows with the guesses, so at most
#: FDP_MAX_GUESSES guesses are made).
FDP_FRACTIONS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3)
FDP_MAX_GUESSES = 600
#: Lines (epsilon grid points) of the claimed privacy profile given to the LP.
FDP_LINES = 24


def gdp_delta(mu: float, epsilon: Any) -> np.ndarray:
    """Privacy profile of ``G_mu`` (Dong, Roth & Su 2022, Corollary 2.13).

    ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``.
    """
    from scipy.special import log_ndtr

    mu = check_real_in(mu, "mu", lo=0.0, lo_open=True)
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
    m, k, v = check_counts(m, k, v)
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


def gdp_mu_lower_bound(m: int, k: int, v: int, *, beta: float, steps: int = 14) -> float:
    """Largest ``mu`` whose ``G_mu`` curve the f-DP test rejects at level ``beta`` (0 if none).

    The tail bound grows with ``mu``, so bisection; the low end is returned (conservative).
    """
    beta = check_probability(beta, "beta")

    def p(mu: float) -> float:
        return fdp_tail_bound(m, k, v, _gdp_lines(mu))

    if v <= k / 2 or p(0.05) > beta:
        return 0.0
    return largest_rejected(lambda mu: p(mu) <= beta, lo=0.05, hi=1.0, cap=64, steps=steps)


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
    s, inc = check_scores(scores, included)
    level = (1.0 - check_probability(confidence, "confidence")) / len(fractions)
    rows = []
    for f, k, v in guess_counts(s, inc, fractions, FDP_MAX_GUESSES):
        pv = fdp_tail_bound(s.size, k, v, lines)
        rows.append({"fraction": float(f), "guesses": k, "correct": v, "p_value": pv})
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


def model_history(run_dir: Path) -> list[tuple[str, int]]:
    """``(event JSON, count)`` of what the run's ledger charged to agent ``model`` (read only)."""
    from ldp_audit.accountant import Ledger

    p = Path(run_dir) / "ledger.sqlite"
    if not p.is_file():
        raise RunDirectoryError(f"{p} is missing: the claimed guarantee is read from the ledger")
    led = Ledger(p, readonly=True, create=False)
    try:
        return led.history("model")
    finally:
        led.close()


def claimed_lines(run_dir: str | Path) -> dict[str, Any]:
    """The claimed privacy curve of a DP-SGD run, from what its ledger charged.

    Unsampled Gaussian updates (REINFORCE): ``G_mu`` with ``mu = sqrt(T) / sigma`` (exact, Dong,
    Roth & Su 2022). Poisson-sampled ones (DQN): dp_accounting's PLD (pessimistic, add-or-remove)
    of the T-fold composition, its ``delta(eps)`` on a grid.
    """
    run_dir = Path(run_dir)
    p = run_dir / "ledger.sqlite"
    hist = model_history(run_dir)  # (sigma, q, T) of the updates charged to agent "model"
    if len(hist) != 1:
        raise RunDirectoryError(
            f"{p}: the one-run tests need one kind of charged update, got {len(hist)} kinds"
        )
    from ldp_audit.accountant import GaussianEvent
    from ldp_audit.accountant.events import event_from_json, unsampled

    ev, _ = unsampled(event_from_json(hist[0][0]))
    if not isinstance(ev, GaussianEvent):
        raise RunDirectoryError(f"{p}: charged updates are {ev!r}, not (sampled) Gaussian")
    lines = _claimed_profile(hist[0][0], int(hist[0][1]))
    return {**lines, "lines": tuple(a.copy() for a in lines["lines"])}


@lru_cache(maxsize=64)
def _claimed_profile(event_json: str, T: int) -> dict[str, Any]:
    """:func:`claimed_lines` of ``T`` charged updates of one (sampled) Gaussian event: a pure
    function of the two, kept (every audit of a run reads it twice, white-box and black-box)."""
    from ldp_audit.accountant.events import event_from_json, unsampled

    charged = event_from_json(event_json)
    ev, q = unsampled(charged)
    sigma, q = float(ev.noise_multiplier), float(q)
    if q >= 1.0:
        mu = math.sqrt(T) / sigma
        return {"kind": "G_mu", "mu": mu, "sigma": sigma, "q": q, "updates": T,
                "lines": _gdp_lines(mu)}  # fmt: skip
    from ldp_audit.accountant.pld import event_pld, plan

    vdi, _ = plan({charged: T}, value_discretization_interval=1e-3)  # bounded support, long runs
    pld = event_pld(charged, value_discretization_interval=vdi)
    pld = pld.self_compose(T)
    top = float(pld.get_epsilon_for_delta(1e-12))
    e = np.linspace(0.0, max(top, 1e-3), FDP_LINES)
    d = np.minimum(np.asarray(pld.get_delta_for_epsilon(e), dtype=np.float64), 1.0)
    return {"kind": "PLD profile", "mu": None, "sigma": sigma, "q": q, "updates": T,
            "lines": profile_lines(e, d)}  # fmt: skip
