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
guesses. Mahloujifar et al. (2024)'s f-DP analysis is not implemented (see docs/dprl.md).
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
    "p_value",
    "epsilon_lower_bound",
    "audit_scores",
    "canary_scores",
    "audit_run",
    "score_run_from_args",
]

#: Fractions of the canaries guessed on (half "in", half "out"), fixed before the scores are seen.
FRACTIONS: tuple[float, ...] = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


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


def audit_run(
    run_dir: str | Path,
    *,
    setting: str = "white-box",
    confidence: float = 0.95,
) -> Any:
    """Score the canaries of a dprl run and bound epsilon; an ``AttackResult``.

    ``epsilon_lower_bound`` is the one-run bound at the run's delta; ``composed_epsilon`` (and
    ``epsilon``) is the accountant's upper bound at that delta; ``violation`` compares them.
    """
    from ldp_audit.attacks.membership import membership_metrics
    from ldp_audit.attacks.scoring import AttackResult, accuracy_interval
    from ldp_audit.rundir import read_npz

    t0 = time.perf_counter()
    confidence = check_probability(confidence, "confidence")
    run_dir = Path(run_dir)
    cfg, met, _, _ = _public(run_dir)
    scores = canary_scores(run_dir, setting)
    # --- scoring only: the secret bits ---
    included = read_npz(run_dir, "secrets.npz", ("canary_included",))["canary_included"]
    one = audit_scores(scores, included, delta=cfg.delta, confidence=confidence)
    both = bool(included.any() and (~included).any())
    mm = membership_metrics(scores, included) if both else {"auc": None, "advantage": 0.0,
                                                           "tpr_at_fpr": {}}  # fmt: skip
    priv = met.get("privacy", {})
    eps_ub = priv.get("epsilon", math.inf)
    eps_ub = math.inf if eps_ub in ("inf", None) else float(eps_ub)
    r, v = one["guesses"], one["correct"]
    return AttackResult(
        attack=f"one-run-{setting}",
        mechanism=cfg.mechanism_config(),
        epsilon=eps_ub,
        reports_per_agent=1,
        k=2,
        n=int(cfg.canaries),
        correct=v,
        accuracy=v / r if r else float("nan"),
        accuracy_ci=accuracy_interval(v, r, confidence) if r else (0.0, 1.0),
        ceiling=1.0 if math.isinf(eps_ub) else 1.0 / (1.0 + math.exp(-eps_ub)),
        composed_epsilon=eps_ub,
        epsilon_lower_bound=float(one["epsilon_lower_bound"]),
        confidence=confidence,
        chance=0.5,
        auc=mm["auc"],
        tpr_at_fpr=mm["tpr_at_fpr"],
        advantage=mm["advantage"],
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
