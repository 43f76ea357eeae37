"""``ldp-audit reproduce dprl``: the slides' Figures 8-9 and 12-13, with the epsilons.

Doulazmi & Odonnat (slides 22-23 and 27-28) plot reward and convergence time against the noise
level, for REINFORCE and DQN, under DP-SGD (Figures 8-9) and under observation noise (Figures
12-13). They give no epsilon. This module runs the same grid (several seeds per setting), and
writes beside each setting the epsilon it actually gets from the accountant:

* DP-SGD: the ledger's (epsilon, delta) of the whole run (RDP and PRV, the smaller reported);
* observation noise on raw states: infinite (said in words); and what a declared state box
  (:data:`ldp_audit.training.dprl.obs_noise.CARTPOLE_BOX`) would give per episode.

It also runs the one-run audit (white-box and black-box gradient canaries) of the correct
DP-SGD REINFORCE trainer and of the four broken fixtures of ``tests/broken_dprl.py`` (rebuilt
here from ``ldp_audit.training.dprl.privacy.TrainerHooks`` so the report does not import tests).

Outputs (``--out``): ``results.json``, ``figure8.png``, ``figure9.png``, ``figure12.png``,
``figure13.png``, ``README.md`` (generated; a hand-written ``notes.md`` is kept).

This module holds the reproduction's config (:class:`ReproduceSettings`, whose fields are the
options of ``ldp-audit reproduce dprl``) and its driver (:func:`reproduce`); the grid, its runs
and the audit cells are in :mod:`ldp_audit.training.dprl.reproduce_runs`, the figures and the
README in :mod:`ldp_audit.training.dprl.reproduce_report`.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.dprl.config import ReproduceSettings
from ldp_audit.training.dprl.reproduce_report import figures, pages
from ldp_audit.training.dprl.reproduce_runs import audit_table, boxed_epsilon, grid, run_one
from ldp_audit.training.frd.trends import median_ci
from ldp_audit.training.reproduction import provenance, write_report

__all__ = ["reproduce"]


def _boot(values: np.ndarray, rng: np.random.Generator, n: int = 2000) -> tuple[float, float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return (math.nan, math.nan)
    if v.size == 1:
        return (float(v[0]), float(v[0]))
    idx = rng.integers(0, v.size, (n, v.size))
    means = v[idx].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def reproduce(
    settings: ReproduceSettings,
    *,
    out: str | Path,
    progress: bool = False,
    command: str = "",
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
    cache: str | Path | None = None,
) -> dict[str, Any]:
    """Run the grid and the audit table; write the report to ``out`` (checked by the caller).

    ``cache``: a folder where every finished run and audit is kept as it finishes (JSON keyed
    by its whole configuration); a rerun with the same ``cache`` reuses them, so an interrupted
    reproduction resumes where it stopped. Nothing in it is committed.

    The grid's runs and the audit table's runs are tasks of :func:`ldp_audit.backends.run_tasks`
    (``backend``, ``address``, ``workers``: this process, a local pool or Ray); each depends only
    on its spec and seed, so the results do not depend on where they ran. A failing run names
    its spec and seed.
    """
    import functools

    from ldp_audit.backends import backend_options, describe_spec, run_tasks

    where = backend_options(backend=backend, address=address, workers=workers)  # before work
    if cache is not None and Path(cache).exists() and not Path(cache).is_dir():
        raise InvalidParameterError(f"cache must be a folder, got the file {str(cache)!r}")
    if cache is not None:  # every task writes there: an unwritable one failed the first, exit 3
        from ldp_audit.rundir.paths import check_parent_writable

        check_parent_writable(
            Path(cache) / "run.json" if Path(cache).is_dir() else Path(cache), "cache"
        )

    t0 = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(settings.seed)
    specs = grid(settings)

    def ident(spec: dict[str, Any]) -> tuple:  # sigma 0: one run per (algo, seed), both families
        return (spec["algo"], spec["seed"]) if spec["privacy"] == "none" else tuple(spec.values())

    todo: dict[tuple, dict[str, Any]] = {}
    for spec in specs:
        todo.setdefault(ident(spec), spec)
    cache = None if cache is None else str(cache)
    # DQN first, the non-private baseline, then DP-SGD seed by seed (every level of seed 0,
    # then seed 1, ...), then observation noise, then REINFORCE: the costly runs keep the pool
    # busy, and an interrupted reproduction (--cache) has whole trade-off curves kept
    order = sorted(
        todo.values(),
        key=lambda t: (t["algo"] != "dqn", {"none": 0, "dpsgd": 1}.get(t["privacy"], 2), t["seed"]),
    )
    done = run_tasks(
        functools.partial(run_one, s=settings, cache=cache),
        order,
        progress="reproduce dprl" if progress else None,
        describe=describe_spec,
        **where,
    )
    made = {ident(spec): r for spec, r in zip(order, done, strict=True)}
    runs = [{**made[ident(spec)], "family": spec["family"]} for spec in specs]
    audits = audit_table(settings, progress, where, cache)
    table = []
    rows_of: dict[tuple, list[dict[str, Any]]] = {}  # the grid's settings, in its order
    for r in runs:
        rows_of.setdefault((r["algo"], r["family"], r["sigma"], r["clip_only"]), []).append(r)
    for (algo, fam, sigma, clip_only), rs in rows_of.items():
        last = np.array([np.mean(r["returns"][-50:]) for r in rs])
        ev = np.array([np.mean(r["eval_returns"]) for r in rs if r.get("eval_returns")])
        conv = np.array([r["convergence_episode"] for r in rs])
        lens = [int(max(r["returns"])) + 1 for r in rs if r["returns"]]
        row = {
            "algo": algo,
            "family": fam,
            "sigma": sigma,
            "clip_only": clip_only,
            "seeds": len(rs),
            "eval_mean": float(ev.mean()) if ev.size else None,
            "eval_ci95": _boot(ev, rng) if ev.size else None,
            "eval_solved": int((ev >= 475.0).sum()),
            "eval_per_seed": [float(x) for x in ev],
            "epsilon_by_method": dict((rs[0].get("privacy") or {}).get("by_method", {})),
            "epsilon_method": (rs[0].get("privacy") or {}).get("method"),
            "cpu_seconds": float(np.sum([r.get("cpu_seconds", 0.0) for r in rs])),
            "final_return_mean": float(last.mean()),
            "final_return_ci95": _boot(last, rng),
            "solved": int(np.isfinite(conv).sum()),
            "convergence_median": float(np.median(conv)),
            # the median's order-statistic interval, unsolved seeds (inf) included
            "convergence_ci95": median_ci(conv)[1:3],
            "epsilon": float(np.max([r["epsilon"] for r in rs])),
            "updates": int(np.max([r["updates"] for r in rs])),
            "seconds": float(np.sum([r["seconds"] for r in rs])),
        }
        if fam == "obs-noise" and sigma:
            row["boxed_epsilon_per_episode"] = boxed_epsilon(sigma, settings.delta, max(lens))
            row["boxed_observations"] = max(lens)
        table.append(row)
    figs = figures(out, runs, settings)
    wall = time.perf_counter() - t0
    results = {
        "settings": asdict(settings),
        "table": table,
        "audits": audits,
        "figures": figs,
        "wall_seconds": wall,
        # every run once (a sigma-0 run is a row of both families)
        "cpu_seconds": float(sum(r.get("cpu_seconds", 0.0) for r in made.values())),
        **provenance(),
        "command": command,
        "runs": [{k: v for k, v in r.items() if k != "privacy"} for r in runs],
    }
    write_report(out, results, pages)
    return {k: v for k, v in results.items() if k != "runs"}
