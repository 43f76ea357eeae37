"""Table 1 from the runs' evaluations: means with t-intervals, pooled Clopper-Pearson intervals,
the epsilon-greedy table and the learning curves with a plateaued-or-not verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp_audit.training.fedrl.config import TABLE_ROWS, FedRLConfig


def cp_interval(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    from ldp_audit.stats import clopper_pearson_interval

    lo, hi = clopper_pearson_interval(k, n, 1.0 - conf)
    return float(lo), float(hi)


def _t_interval(x: Sequence[float], conf: float = 0.95) -> tuple[float, float, float]:
    from scipy import stats

    a = np.asarray(x, dtype=float)
    m = float(a.mean())
    if a.size < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + conf / 2, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    return m, m - half, m + half


def table_metrics(cfg: FedRLConfig, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Table 1 rows: mean over runs with a 95 % t-interval, and the pooled CP interval."""
    table = {}
    for row in TABLE_ROWS:
        per = [r[row] for r in results if row in r]
        if not per:
            continue
        pool, ar = _pooled(per), [p["avg_reward"] for p in per]
        am, alo, ahi = _t_interval(ar)
        table[row] = {
            **{k: pool[k] for k in ("runs", "succ_rate", "succ_rate_ci")},
            "succ_rate_pooled_cp": pool["pooled_cp"],
            "avg_reward": am,
            "avg_reward_ci": [alo, ahi],
            "per_run_succ_rate": pool["per_run_succ_rate"],
            "per_run_avg_reward": ar,
            "path_ratio": [p["path_ratio"] for p in per],
        }
    out = {
        "algorithm": "fedrl",
        "size": cfg.size,
        "hist_len": cfg.hist_len,
        "table": table,
        "runs": [{k: v for k, v in r.items() if k != "state"} for r in results],
    }
    if any("explore_eval" in r for r in results):
        out["explore"] = _explore_table(results)
    if any("eval_curve" in r for r in results):
        out["curves"] = _curve_table(results)
    return out


def _pooled(evs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Runs' evaluations pooled: mean over runs with a t-interval, pooled Clopper-Pearson."""
    k = sum(e["successes"] for e in evs)
    n = sum(e["episodes"] for e in evs)
    m, lo, hi = _t_interval([e["succ_rate"] for e in evs])
    return {
        "runs": len(evs),
        "succ_rate": m,
        "succ_rate_ci": [lo, hi],
        "successes": k,
        "episodes": n,
        "pooled": k / n,
        "pooled_cp": list(cp_interval(k, n)),
        "per_run_succ_rate": [e["succ_rate"] for e in evs],
    }


def _explore_table(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Greedy (``"0"``) vs epsilon-greedy evaluation of the same networks, per method."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        for lab, per_eps in r.get("explore_eval", {}).items():
            for eps, ev in per_eps.items():
                out.setdefault(lab, {}).setdefault(eps, []).append(ev)
    return {lab: {eps: _pooled(evs) for eps, evs in d.items()} for lab, d in out.items()}


def _curve_table(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Learning curves pooled over runs, and per method whether each of the last two
    checkpoints' pooled rates lies inside the other's 95 % Clopper-Pearson interval (no change
    detectable at this resolution: "plateau"; not a proof of convergence)."""
    first = next(r["eval_curve"] for r in results if "eval_curve" in r)
    per: dict[str, list[list[dict[str, Any]]]] = {}
    for r in results:
        for lab, pts in r.get("eval_curve", {}).get("methods", {}).items():
            per.setdefault(lab, []).append(pts)
    methods, verdict = {}, {}
    for lab, runs in per.items():
        pts = [_pooled([run[i] for run in runs]) for i in range(len(runs[0]))]
        methods[lab] = pts
        if len(pts) >= 2:
            a, b = pts[-2], pts[-1]
            overlap = (
                a["pooled_cp"][0] <= b["pooled"] <= a["pooled_cp"][1]
                and b["pooled_cp"][0] <= a["pooled"] <= b["pooled_cp"][1]
            )
            verdict[lab] = {
                "plateau": bool(overlap),
                "last_two": [a["pooled"], b["pooled"]],
                "in_words": (
                    f"no change detectable between the last two checkpoints "
                    f"({100 * a['pooled']:.1f} % -> {100 * b['pooled']:.1f} %, each inside the "
                    "other's 95 % interval): plateaued at this resolution"
                    if overlap
                    else f"still changing: {100 * a['pooled']:.1f} % -> {100 * b['pooled']:.1f} % "
                    "between the last two checkpoints (outside each other's 95 % interval): not "
                    "converged"
                ),
            }
    return {
        "iterations": first["iterations"],
        "maps": first["maps"],
        "methods": methods,
        "converged": verdict,
    }
