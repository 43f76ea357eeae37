"""Compare a rerun of a paper reproduction with the committed report, cell by cell (issue 39).

A reproduction is bit for bit only on the machine (CPU family, torch, BLAS) that made it; on
another one a trajectory may turn another way after the first rounding difference, and per-run
numbers differ. What should still hold is the statistics: a rerun's cells should agree with the
committed intervals. :func:`check_against` reads both results.json files, takes every cell that
has a point estimate and an interval (PGC-A3C: success ratio, median FST and relative AUC per
setting; DP-SGD RL: greedy evaluation and final training return per row; FRD: median episodes
to mission with its order-statistic interval; FedRL: SuccRate and AvgRwd per size and method)
and says, per cell:

- ``inside``: the rerun's estimate lies in the committed interval;
- ``outside``: it does not, but the two intervals overlap;
- ``differs``: the two intervals are disjoint;
- ``undefined`` / ``missing``: a value is undefined (null) or the cell is absent from one side.

How often chance alone gives each, for two independent runs of the same distribution with
95% intervals of equal width around normal estimates: ``outside`` about 17% per cell
(P(|Z| > 1.96 / sqrt 2)), ``differs`` about 0.6% (P(|Z| > 1.96 sqrt 2)); so a few ``outside``
cells are expected, a ``differs`` cell is evidence, and with C cells about 0.006 C of them
may differ by chance (a Bonferroni reader asks for more than that). Intervals that are not
normal-theory (Wilson, order statistics, bootstrap) make these rates approximate.

Command (exit 0: no cell differs, 1: some cell differs, 2: bad input)::

    ldp-audit reproduce check RERUN_FOLDER reports/fedrl
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ldp_audit.errors import InvalidParameterError
from ldp_audit.rundir.files import fmt_number
from ldp_audit.training.reproduction import read_results
from ldp_audit.training.reproduction import to_float as _f
from ldp_audit.training.reproduction_statement import system_of

__all__ = [
    "SCALE",
    "cells",
    "check_against",
    "check_folders",
    "format_check",
    "scale_differences",
]

Cell = tuple[float | None, float | None, float | None]


def _cell(value: Any, ci: Any) -> Cell:
    lo, hi = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else (None, None)
    return _f(value), _f(lo), _f(hi)


def cells(res: dict[str, Any]) -> dict[str, Cell]:
    """Every (estimate, interval low, interval high) cell of a reproduction's results.json,
    keyed by a name that is the same in a rerun of the same settings."""
    system = system_of(res)
    out: dict[str, Cell] = {}
    if system in ("pgc-a3c", "pgc-a3c-readings"):
        for key, e in (res.get("settings") or {}).items():
            for m in ("success_ratio", "median_fst", "relative_auc"):
                if m in e:
                    out[f"{key} {m}"] = _cell(e.get(m), e.get(f"{m}_ci"))
    elif system == "dprl":
        for r in res.get("table") or []:
            noise = "clip-only" if r.get("clip_only") else f"{r.get('sigma'):g}"
            key = f"{r.get('algo')} {r.get('family')} {noise}"
            for m in ("eval", "final_return"):
                out[f"{key} {m}"] = _cell(r.get(f"{m}_mean"), r.get(f"{m}_ci95"))
    elif system == "frd":
        from ldp_audit.training.frd.trends import median_ci

        for r in res.get("rows") or []:
            med, lo, hi, _ = median_ci(r["mission"])
            out[f"{r['kind']} setting {r['setting']} agents {r['agents']} median"] = (med, lo, hi)
    else:
        for size, m in (res.get("table1") or {}).items():
            for name, t in (m.get("table") or {}).items():
                for v in ("succ_rate", "avg_reward"):
                    out[f"{size}x{size} {name} {v}"] = _cell(t.get(v), t.get(f"{v}_ci"))
    return out


def _side(name: str, c: Cell | None) -> dict[str, Any]:
    """One side's estimate and interval of a checked cell (None where the cell is absent)."""
    return {name: c[0], f"{name}_ci": [c[1], c[2]]} if c else dict.fromkeys((name, f"{name}_ci"))


def _status(new: Cell | None, old: Cell | None) -> str:
    if new is None or old is None:
        return "missing"
    v, nlo, nhi = new
    _, lo, hi = old
    if v is None or lo is None or hi is None:
        return "undefined"
    if lo <= v <= hi:
        return "inside"
    if nlo is not None and nhi is not None and (nhi < lo or nlo > hi):
        return "differs"
    return "outside"


#: per system, where its scale is recorded and the keys a rerun must share with the committed
#: report for its cells to estimate the same quantities (the number of trials, seeds, groups or
#: runs may differ: it only changes the intervals' widths)
SCALE = {
    "pgc-a3c": ("config", ("max_submissions", "acting", "stop_at_target", "clip_kind",
                           "aggregator", "aggregator_lr")),
    "pgc-a3c-readings": ("config", ("max_submissions",)),
    "dprl": ("settings", ("episodes", "total_steps", "clip", "delta", "dqn_preset",
                          "eval_episodes")),
    "frd": ("settings", ("max_episodes", "threshold")),
    "fedrl": ("config", ("train_steps", "n_envs", "n_maps", "eval_maps", "hist_len",
                         "meeting_rule")),
}  # fmt: skip


def scale_differences(rerun: dict[str, Any], committed: dict[str, Any]) -> list[str]:
    """The scale keys (:data:`SCALE`) both results record with different values."""
    where, keys = SCALE[system_of(committed)]
    a, b = rerun.get(where) or {}, committed.get(where) or {}
    # a key one side lacks predates its option (the default then): not compared
    return [f"{k}: rerun {a[k]!r}, committed {b[k]!r}" for k in keys
            if k in a and k in b and a[k] != b[k]]  # fmt: skip


def check_against(
    rerun: dict[str, Any], committed: dict[str, Any], *, any_scale: bool = False
) -> dict[str, Any]:
    """Each cell of ``rerun`` (a results.json dict) against ``committed``'s interval, and the
    counts per status; ``consistent`` is False when some cell ``differs``. A rerun at another
    scale (horizon, training steps, ...: :data:`SCALE`) estimates other quantities and is
    refused unless ``any_scale``."""
    a, b = system_of(rerun), system_of(committed)
    if a != b:
        raise InvalidParameterError(
            f"rerun must be a rerun of the committed report's system {b!r}, got one of {a!r}"
        )
    diff = scale_differences(rerun, committed)
    if diff and not any_scale:
        raise InvalidParameterError(
            "rerun must be at the committed report's scale (its cells estimate other "
            f"quantities otherwise), got {'; '.join(diff)} (any_scale / --any-scale to compare "
            "anyway)"
        )
    new, old = cells(rerun), cells(committed)
    rows = [
        {"cell": key, **_side("rerun", n), **_side("committed", o), "status": _status(n, o)}
        for key in list(old) + [k for k in new if k not in old]
        for n, o in [(new.get(key), old.get(key))]
    ]
    counts = {
        s: sum(r["status"] == s for r in rows)
        for s in ("inside", "outside", "differs", "undefined", "missing")
    }
    if counts["inside"] + counts["outside"] + counts["differs"] == 0:
        raise InvalidParameterError(
            "rerun must share cells with the committed report (the same sizes, settings or "
            f"rows), got {len(new)} rerun cells and {len(old)} committed cells with no "
            "comparable cell in common"
        )
    return {
        "system": a,
        "cells": rows,
        "counts": counts,
        "consistent": counts["differs"] == 0,
        "scale_differences": diff,
        "chance": "per cell, same distribution, equal-width 95% normal intervals: outside "
        "~17%, differs ~0.6%",
    }


def check_folders(
    rerun: str | Path, committed: str | Path, *, any_scale: bool = False
) -> dict[str, Any]:
    """:func:`check_against` of two report folders (or results.json paths)."""
    old = read_results(committed, "committed")
    return check_against(read_results(rerun, "rerun"), old, any_scale=any_scale)


def _n(v: float | None) -> str:
    return fmt_number(v, 4, none="n/a")


def format_check(result: dict[str, Any], *, all_cells: bool = False) -> str:
    """The check in words: the cells not inside the committed interval (every cell with
    ``all_cells``) and the counts."""
    c = result["counts"]
    lines = [f"{'cell':<48} {'rerun':>10} {'committed [95% interval]':>30}  status"]
    for r in result["cells"]:
        if all_cells or r["status"] != "inside":
            ci = r["committed_ci"] or [None, None]
            lines.append(
                f"{r['cell']:<48} {_n(r['rerun']):>10} "
                f"{_n(r['committed']):>10} [{_n(ci[0])}, {_n(ci[1])}]".ljust(91)
                + f"  {r['status']}"
            )
    lines.append(
        f"{len(result['cells'])} cells: {c['inside']} inside, {c['outside']} outside (the "
        f"intervals overlap), {c['differs']} differ (disjoint intervals), {c['undefined']} "
        f"undefined, {c['missing']} missing on one side ({result['chance']})."
    )
    if result.get("scale_differences"):
        lines.append(
            "no verdict: the rerun is at another scale ("
            + "; ".join(result["scale_differences"])
            + "), so its cells estimate other quantities; the counts above only describe"
        )
    else:
        lines.append(
            "verdict: the rerun agrees with the committed report statistically"
            if result["consistent"]
            else "verdict: the rerun DIFFERS from the committed report in the cells marked "
            "'differs'"
        )
    return "\n".join(lines)
