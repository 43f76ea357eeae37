"""``ldp-audit reproduce frd``: Figures 3 and 4 of Cha et al. (2019) and the leak experiment.

* Figure 3: episodes to mission vs number of agents for settings 1-7 of Table 1 (FRD), boxplots
  over independent groups;
* Figure 4: FRD vs federated learning (FedAvg, same schedule) at one setting, plus the LDP
  variant's mission time at the largest group size;
* leak: small FRD / FedAvg / FRD-LDP runs written as run directories and attacked with
  :mod:`ldp_audit.attacks.frd` (dynamics inference on the uploads), accuracy beside chance and
  the LDP ceiling.

The sweep runs as one batched :func:`ldp_audit.training.frd.train_batch` per network
architecture, each with its own child generator of the seed (exactly what
:func:`~ldp_audit.training.frd.train_many` does in one call), and every leak run is seeded on its
own: these are independent tasks of :func:`ldp_audit.backends.run_tasks` (``backend``,
``address``, ``workers``: this process, a local process pool or Ray), so every backend gives the
same numbers. The sweep's wall time is dominated by its slowest architecture.
"""

from __future__ import annotations

import io
import json
import math
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.frd import FrdConfig, arch_batches, setting_config, train, train_batch
from ldp_audit.training.frd.trends import (
    holm,
    median_ci,
    rank_sum_test,
    trend_tests,
)

__all__ = [
    "ReproduceSettings",
    "reproduce",
    "rerender",
    "trend_tests",
    "rank_sum_test",
    "holm",
    "median_ci",
]

#: What the paper says (text of sections 5-6; the figures carry no numbers in the text).
PAPER_CLAIMS = {
    "setting4_vs_2": "Setting 4 (50^4 cells) is better than setting 2 (100^4) with few agents; "
    "the relation reverses as the number of agents grows",
    "setting5": "Setting 5 (E=10, I=0) gets worse as the number of agents grows",
    "setting6": "Setting 6 (E=50, I=0): moderate exchange brings stable improvement",
    "setting2_vs_3": "Setting 2 (I=50) is better than setting 3 (I=100, 100^3 cells)",
    "setting1_vs_2": "Setting 1 (24 units) is better than setting 2 (100 units)",
    "setting6_7": "Settings 6 and 7: the gain with more agents is limited",
    "fig4": "FRD and federated learning have about the same mean episodes to mission; FRD has "
    "the smaller variation",
}


@dataclass(frozen=True)
class ReproduceSettings:
    """Scale of the reproduction (defaults: what fits ~15 minutes on 2 shared cores)."""

    settings: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7)
    agents: tuple[int, ...] = (1, 2, 4)
    groups: int = 4
    max_episodes: int = 300
    threshold: float = 195.0
    fedavg_setting: int = 1
    ldp_epsilons: tuple[float, ...] = (1.0, 10.0)
    leak: bool = True
    leak_groups: int = 24
    leak_shadow: int = 48
    leak_epsilons: tuple[float, ...] = (0.05, 0.2, 1.0)
    seed: int = 0
    #: torch device of the distillation in every run: ``"cpu"``, ``"cuda"`` or ``"auto"``
    #: (:mod:`ldp_audit.training.device`; resolved once by :func:`reproduce`, before any work).
    #: The acting kernels and every random draw stay on the CPU: cpu numbers do not change.
    device: str = "cpu"

    def __post_init__(self) -> None:
        import numbers

        from ldp_audit.training.device import check_device

        check_device(self.device)

        for name in ("settings", "agents", "ldp_epsilons", "leak_epsilons"):
            if not isinstance(getattr(self, name), (tuple, list)):
                raise InvalidParameterError(f"{name} must be a tuple, got {getattr(self, name)!r}")
        for name in ("settings", "agents"):
            for x in getattr(self, name):
                if isinstance(x, bool) or not isinstance(x, numbers.Integral):
                    raise InvalidParameterError(f"{name} must hold integers, got {x!r}")
        for s in self.settings:
            if s not in range(1, 8):
                raise InvalidParameterError(f"settings must be in 1..7, got {s!r}")
        if not self.settings:
            raise InvalidParameterError("settings must name at least one setting, got none")
        if not self.agents or any(int(a) < 1 for a in self.agents):
            raise InvalidParameterError(f"agents must be integers >= 1, got {self.agents!r}")
        for e in tuple(self.ldp_epsilons) + tuple(self.leak_epsilons):
            if not (isinstance(e, (int, float)) and e > 0 and math.isfinite(e)):
                raise InvalidParameterError(f"ldp epsilons must be finite and > 0, got {e!r}")
        for name in ("groups", "max_episodes", "leak_groups", "leak_shadow"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidParameterError(f"{name} must be an integer >= 1, got {v!r}")
        import numbers

        for name in ("settings", "agents", "ldp_epsilons", "leak_epsilons"):
            v = getattr(self, name)
            if not isinstance(v, (tuple, list)):
                raise InvalidParameterError(f"{name} must be a tuple, got {v!r}")
        for name in ("settings", "agents"):
            for x in getattr(self, name):
                if isinstance(x, bool) or not isinstance(x, numbers.Integral):
                    raise InvalidParameterError(f"{name} must hold integers, got {x!r}")
        f = self.fedavg_setting
        if isinstance(f, bool) or not isinstance(f, numbers.Integral) or f not in range(1, 8):
            raise InvalidParameterError(f"fedavg_setting must be a setting in 1..7, got {f!r}")
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 <= t < math.inf:
            raise InvalidParameterError(f"threshold must be a finite number >= 0, got {t!r}")
        if not isinstance(self.leak, bool):
            raise InvalidParameterError(f"leak must be True or False, got {self.leak!r}")
        s = self.seed
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
            raise InvalidParameterError(f"seed must be an integer >= 0, got {s!r}")


def _stats(m: np.ndarray) -> dict[str, Any]:
    fin = m[np.isfinite(m)]
    return {
        "mission": [float(x) if math.isfinite(x) else "inf" for x in m],
        "median": float(np.median(m)) if m.size else math.inf,
        "mean_reached": float(fin.mean()) if fin.size else math.inf,
        "std_reached": float(fin.std(ddof=1)) if fin.size > 1 else math.nan,
        "reached": int(fin.size),
        "groups": int(m.size),
    }


def _boxplot(ax: Any, data: list[np.ndarray], labels: list[str], cap: float) -> None:
    vals = [np.where(np.isfinite(d), d, cap) for d in data]
    ax.boxplot(vals, tick_labels=labels, showmeans=True, meanprops={"marker": "*"})
    ax.axhline(cap, color="grey", ls=":", lw=0.8)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def reproduce(
    settings: ReproduceSettings,
    *,
    out: str | Path | None = None,
    progress: bool = False,
    command: str | None = None,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
) -> dict[str, Any]:
    """Run the reproduction; with ``out``, write results.json, figure3.png, figure4.png,
    README.md (and leak_runs/) there. Returns the results dict.

    The sweep's architecture batches, then the leak runs, are tasks of
    :func:`ldp_audit.backends.run_tasks` on ``backend`` (``address``, ``workers`` as there);
    each depends only on its configs and its generator or seed, so the results are bit for bit
    the same on every backend (timings aside). A failing task names its cells and seed.
    """
    from ldp_audit.backends import backend_options

    where = backend_options(backend=backend, address=address, workers=workers)  # before work
    if not isinstance(settings, ReproduceSettings):
        raise InvalidParameterError(
            f"settings must be a ReproduceSettings, got {type(settings).__name__}"
        )
    from ldp_audit.training.device import resolve_device

    # "cuda" without CUDA: refused before any work; every run (and worker) gets the resolved
    # device, not "auto" (a CPU reproduction's configs are exactly those of before)
    device = resolve_device(settings.device)
    t0, c0 = time.perf_counter(), time.process_time()
    S = settings
    cfgs: list[FrdConfig] = []
    keys: list[tuple[str, Any, int]] = []
    common: dict[str, Any] = dict(
        groups=S.groups, max_episodes=S.max_episodes, threshold=S.threshold, device=device
    )
    fig3 = list(S.settings) + ([S.fedavg_setting] if S.fedavg_setting not in S.settings else [])
    for st in fig3:
        for n in S.agents:
            cfgs.append(setting_config(st, n_agents=int(n), **common))
            keys.append(("frd", st, int(n)))
    for n in S.agents:
        cfgs.append(setting_config(S.fedavg_setting, mode="fedavg", n_agents=int(n), **common))
        keys.append(("fedavg", S.fedavg_setting, int(n)))
    nmax = int(max(S.agents))
    for eps in S.ldp_epsilons:
        cfgs.append(setting_config(S.fedavg_setting, n_agents=nmax, ldp_epsilon=eps, **common))
        keys.append((f"frd-ldp-{eps:g}", S.fedavg_setting, nmax))
    ts, cs = time.perf_counter(), time.process_time()
    results, task_cpu = _sweep(cfgs, keys, S.seed, progress, where)
    sweep_seconds = time.perf_counter() - ts
    sweep_cpu_seconds = time.process_time() - cs
    rows = []
    for (kind, st, n), r in zip(keys, results, strict=True):
        rows.append(
            {
                "kind": kind,
                "setting": st,
                "agents": n,
                **_stats(r.mission),
                "agent_episodes": r.agent_episodes,
                "clipped_states": r.clipped_states,
            }
        )
    leak = _leak(S, out, progress, where, device) if S.leak else []
    doc = {
        # a CPU reproduction's settings are recorded as before the device option existed
        "settings": {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in S.__dict__.items()
            if not (k == "device" and v == "cpu")
        },
        "rows": rows,
        "leak": leak,
        "paper_claims": PAPER_CLAIMS,
        "sweep_seconds": sweep_seconds,
        "sweep_cpu_seconds": sweep_cpu_seconds,
        "sweep_task_cpu_seconds": task_cpu,
        "total_agent_episodes": int(sum(r.agent_episodes for r in results)),
        "wall_seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "load_average_at_end": list(__import__("os").getloadavg()),
        "command": command or "ldp-audit reproduce frd",
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores (shared)",
        "backend": dict(where),
    }
    if S.device != "cpu":  # where the distillation ran (auto resolved); cpu: as before
        doc["device"] = device
        if device == "cuda":
            import torch

            doc["device_name"] = torch.cuda.get_device_name(0)
    doc["trends"] = trend_tests(rows)
    if out is not None:
        _write(Path(out), doc)
    return doc


def rerender(out: str | Path) -> dict[str, Any]:
    """Rewrite ``out``'s README.md, figures and the ``trends`` of results.json from the
    results.json there (no training): what ``reproduce`` writes from the same numbers, for a
    report whose run was made by an earlier version of the rendering code."""
    out = Path(out)
    path = out / "results.json"
    if not path.is_file():
        raise InvalidParameterError(
            f"out must be a reproduce frd report folder, got {str(out)!r}: no results.json"
        )
    doc = json.loads(path.read_text())
    doc.pop("trends", None)
    doc["trends"] = trend_tests(doc["rows"])
    _write(out, doc)
    return doc


def _in_process(where: dict[str, Any]) -> bool:
    return where["backend"] == "local" and (where["workers"] or 1) == 1


def _sweep_task(item: dict[str, Any]) -> tuple[list[Any], float]:
    """One architecture's batch (a :func:`ldp_audit.backends.run_tasks` task): its configs with
    their own generator and in-memory ledgers; returns the results and the task's CPU seconds."""
    from ldp_audit.backends import ProgressSink

    c0 = time.process_time()
    sink = item.get("sink")
    res = train_batch(list(item["configs"]), rng=item["rng"], _sink=sink)
    if isinstance(sink, ProgressSink):
        sink.flush()
    return res, time.process_time() - c0


def _sweep(
    cfgs: list[FrdConfig],
    keys: list[tuple[str, Any, int]],
    seed: int,
    progress: bool,
    where: dict[str, Any],
) -> tuple[list[Any], float]:
    """The Figure 3-4 grid: one task per architecture batch (``arch_batches``), results in
    config order: bit for bit one ``train_many(cfgs, seed=seed)`` call."""
    from ldp_audit.backends import WorkProgress, describe_spec, run_tasks

    batches = arch_batches(cfgs, seed=seed)
    meter: Any = None
    if progress:
        total = sum(c.groups * c.n_agents * c.max_episodes for c in cfgs)
        if _in_process(where):
            from tqdm.auto import tqdm

            meter = tqdm(total=total, desc="agent-episodes", unit="ep")
        else:
            if where["backend"] == "ray":
                from ldp_audit.backends import init_ray

                init_ray(where["address"], where["workers"])  # the progress queue's actor
            meter = WorkProgress(
                total, "agent-episodes", "ray" if where["backend"] == "ray" else "pool", unit="ep"
            )
    items = [
        {
            "task": "sweep",
            "hidden": cfgs[idx[0]].hidden,
            "layers": cfgs[idx[0]].layers,
            "cells": " ".join(f"{k}/s{st}/n{n}" for k, st, n in (keys[i] for i in idx)),
            "seed": seed,
            "stream": f"arch batch {b + 1} of {len(batches)}",
            "configs": tuple(cfgs[i] for i in idx),
            "rng": rng,
        }
        for b, (idx, rng) in enumerate(batches)
    ]
    if meter is not None:  # the bar here, or a queue fed from the pool's / Ray's workers
        for item in items:
            item["sink"] = getattr(meter, "sink", meter)
    try:
        outs = run_tasks(
            _sweep_task,
            items,
            describe=describe_spec,
            _poll=getattr(meter, "poll", None),
            **where,
        )
    finally:
        if meter is not None:
            meter.close()
    results: list[Any] = [None] * len(cfgs)
    for (idx, _), (res, _cpu) in zip(batches, outs, strict=True):
        for i, r in zip(idx, res, strict=True):
            results[i] = r
    return results, float(sum(cpu for _, cpu in outs))


def _leak_task(item: dict[str, Any]) -> dict[str, Any]:
    """One leak run (a :func:`ldp_audit.backends.run_tasks` task): train ``cfg`` with ``seed``
    into its own run directory (a temporary one when ``run_dir`` is None), attack it with
    ``seed + 1``; returns its row."""
    import tempfile

    from ldp_audit.attacks import frd as F
    from ldp_audit.rundir import write_artifact

    cfg: FrdConfig = item["cfg"]
    tmp = None
    if item["run_dir"] is None:
        tmp = tempfile.TemporaryDirectory()
        rd = Path(tmp.name) / item["run"]
    else:
        rd = Path(item["run_dir"])
        _aside_dead_attempt(rd)
    try:
        train(cfg, seed=item["seed"], run_dir=rd, run_mode="overwrite")
        res = F.run(rd, n_shadow=item["shadow"], seed=item["seed"] + 1, progress=item["progress"])
        write_artifact(rd, "attack_dynamics.json", res.to_dict(), overwrite=True)
        d = res.to_dict()
    finally:
        if tmp is not None:
            tmp.cleanup()
    eps = cfg.ldp_epsilon
    return {
        "run": item["run"],
        "gravities": list(cfg.gravities),
        "mode": cfg.mode,
        "epsilon_per_upload": "inf" if eps is None else eps,
        **{
            k: d[k]
            for k in (
                "n",
                "accuracy",
                "accuracy_ci",
                "chance",
                "ceiling",
                "composed_epsilon",
                "reports_per_agent",
                "epsilon_lower_bound",
                "violation",
            )
        },  # fmt: skip
        "guesses": d["extra"].get("guesses"),
        "truth_counts": d["extra"].get("truth_counts"),
    }


def _aside_dead_attempt(rd: Path) -> None:
    """A leak run directory left by a killed attempt (config.json status "running", no
    manifest) is moved aside as evidence (``fresh_run_dir``) before a retry trains again, so
    its ledger is never merged into or overwritten; a finished run of an earlier report is
    replaced as before (the report was opened with ``--overwrite``)."""
    from ldp_audit.backends import fresh_run_dir

    cfg = rd / "config.json"
    if not cfg.is_file() or (rd / "manifest.json").exists():
        return
    try:
        status = json.loads(cfg.read_text()).get("status")
    except (OSError, ValueError):
        return
    if status == "running":
        fresh_run_dir(rd)


def _leak(
    S: ReproduceSettings,
    out: str | Path | None,
    progress: bool,
    where: dict[str, Any] | None = None,
    device: str = "cpu",
) -> list[dict[str, Any]]:
    from ldp_audit.backends import describe_spec, run_tasks

    where = where or {"backend": "local", "address": None, "workers": None}
    here = _in_process(where)
    base = dict(
        n_agents=4,
        groups=S.leak_groups,
        sections=10,
        exchange_period=5,
        initial_episodes=5,
        hidden=24,
        layers=1,
        max_episodes=40,
        stop_at_mission=False,
        device=device,
    )
    variants = [("frd", None), ("fedavg", None)] + [("frd", e) for e in S.leak_epsilons]
    gsets = {"paper": (9.7, 9.8, 9.9), "wide": (4.9, 9.8, 19.6)}
    root = None if out is None else Path(out) / "leak_runs"
    items = []
    for gname, gs in gsets.items():
        for mode, eps in variants:
            name = f"{mode}{'' if eps is None else f'-ldp{eps:g}'}-{gname}"
            items.append(
                {
                    "task": "leak",
                    "run": name,
                    "seed": S.seed,
                    "shadow": S.leak_shadow,
                    "run_dir": None if root is None else str(root / name),
                    "cfg": FrdConfig(mode=mode, ldp_epsilon=eps, gravities=gs, **base),
                    "progress": bool(progress and here),  # the attack's own bars, here only
                }
            )
    return run_tasks(
        _leak_task,
        items,
        describe=describe_spec,
        progress="frd leak runs" if progress and not here else None,
        **where,
    )


def _fmt(x: Any, nd: int = 3) -> str:
    if isinstance(x, str):
        return x
    if x is None:  # NaN as results.json stores it
        return "-"
    f = float(x)
    if math.isinf(f):
        return "inf"
    if math.isnan(f):
        return "-"
    return f"{f:.{nd}g}"


def _mission(r: dict[str, Any]) -> np.ndarray:
    return np.asarray([math.inf if x == "inf" else float(x) for x in r["mission"]], dtype=float)


def _write(out: Path, doc: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ldp_audit.rundir import to_jsonable

    out.mkdir(parents=True, exist_ok=True)
    S = doc["settings"]
    cap = float(S["max_episodes"])
    by = {(r["kind"], r["setting"], r["agents"]): _mission(r) for r in doc["rows"]}
    fig, axes = plt.subplots(1, len(S["settings"]), figsize=(2.6 * len(S["settings"]), 3.2),
                             sharey=True)  # fmt: skip
    axes = np.atleast_1d(axes)
    for ax, st in zip(axes, S["settings"], strict=True):
        _boxplot(ax, [by[("frd", st, n)] for n in S["agents"]],
                 [str(n) for n in S["agents"]], cap)  # fmt: skip
        ax.set_title(f"setting {st}")
        ax.set_xlabel("agents")
    axes[0].set_ylabel(f"episodes to mission (not reached -> {cap:g})")
    fig.tight_layout()
    (out / "figure3.png").write_bytes(_png(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 3.4))
    data, labels = [], []
    for n in S["agents"]:
        data += [by[("frd", S["fedavg_setting"], n)],
                 by[("fedavg", S["fedavg_setting"], n)]]  # fmt: skip
        labels += [f"FRD\n{n}", f"FedAvg\n{n}"]
    nmax = max(S["agents"])
    for eps in S["ldp_epsilons"]:
        data.append(by[(f"frd-ldp-{eps:g}", S["fedavg_setting"], nmax)])
        labels.append(f"LDP {eps:g}\n{nmax}")
    _boxplot(ax, data, labels, cap)
    ax.set_ylabel("episodes to mission")
    ax.set_title(f"FRD vs FedAvg (setting {S['fedavg_setting']}), x: method / agents")
    fig.tight_layout()
    (out / "figure4.png").write_bytes(_png(fig))
    plt.close(fig)
    (out / "results.json").write_text(json.dumps(to_jsonable(doc), indent=1, allow_nan=False))
    (out / "README.md").write_text(_readme(doc))


def _cover(n: int) -> float:
    return median_ci(list(range(n)))[3]


def _box(b: Sequence[Any]) -> str:
    return f"{b[0]} s{b[1]} n{b[2]}"


def _need(n: float | None) -> str:
    if n is None:
        return "-"
    return "inf" if math.isinf(n) else f"{int(n)}"


def _trend_lines(doc: dict[str, Any]) -> list[str]:
    T = doc["trends"]
    by = {(r["kind"], r["setting"], r["agents"]): r for r in doc["rows"]}
    res = T.get("resolvable_theta")
    lines = [
        "## The paper's trends, tested",
        "",
        f"Each comparison of two boxes: {T['method']}; two-sided p, and p adjusted by Holm's "
        f"step-down method over the family of {T['family']} comparisons (family-wise error "
        f"{T['alpha']:g}). theta = P(a < b) + P(a = b)/2 estimated from the groups (Siegel-Tukey "
        "rows: the share of pairs where a is the less extreme; > 0.5 means a reaches the mission "
        "sooner / varies less); a mission not reached (inf) ties above every reached one (both "
        "boxes share the cap). Verdict: agrees / contradicts = Holm-adjusted p < "
        f"{T['alpha']:g} in / against the paper's direction (for 'same': any difference "
        "contradicts); unresolved otherwise, with the groups per box that would resolve the "
        "observed theta at the strictest Holm level (normal approximation, if that theta were "
        "the true one).",
        "",
    ]
    if res is not None:
        reach = "impossible: theta is at most 1" if res > 1 else "normal approximation, no ties"
        lines += [
            f"Power at this scale: with the smallest box here, a comparison is resolved at the "
            f"strictest Holm level only if theta is beyond 0.5 +- {res - 0.5:.3f} ({reach}); "
            "at the loosest level (alpha) a smaller effect suffices.",
            "",
        ]
    lines += [
        "| claim | a | b | paper | a median [interval] | b median [interval] | test | theta "
        "| p | p (Holm) | verdict | groups to resolve theta |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in T["tests"]:
        ma, la, ha, _ = median_ci(by[tuple(t["a"])]["mission"])
        mb, lb, hb, _ = median_ci(by[tuple(t["b"])]["mission"])
        exp = {"a": "a sooner", "b": "b sooner", "same": "same", "a narrower": "a narrower"}
        need = t.get("groups_needed")
        lines.append(
            f"| {t['claim']} | {_box(t['a'])} | {_box(t['b'])} | {exp[t['expect']]} | "
            f"{_fmt(ma)} [{_fmt(la)}, {_fmt(ha)}] | {_fmt(mb)} [{_fmt(lb)}, {_fmt(hb)}] | "
            f"{t['test']} | {t['theta']:.2f} | {t['p']:.2g} | {t['p_holm']:.2g} | "
            f"{t['verdict']} | {_need(need)} |"
        )
    counts = {v: sum(t["verdict"] == v for t in T["tests"]) for v in
              ("agrees", "contradicts", "unresolved")}  # fmt: skip
    lines += [
        "",
        f"{counts['agrees']} agree, {counts['contradicts']} contradict, "
        f"{counts['unresolved']} unresolved of {T['family']}.",
        "",
    ]
    return lines


def _readme(doc: dict[str, Any]) -> str:
    S = doc["settings"]
    lines = [
        "# FRD (Cha et al. 2019): reproduction at this machine's scale",
        "",
        "Generated by `ldp-audit reproduce frd` (see `command` below); numbers are from "
        "`results.json`. Hand-written commentary is in `notes.md`.",
        "",
        f"Scale: settings {S['settings']}, agents per group {S['agents']}, {S['groups']} "
        f"groups per cell, at most {S['max_episodes']} episodes per agent, mission threshold "
        f"{S['threshold']:g} (mean standing time over 10 episodes), seed {S['seed']}. "
        f"Machine: {doc['machine']}, loaded by other engineers' jobs (load average at the end "
        f"{_fmt(doc.get('load_average_at_end', [math.nan])[0])}). Sweep "
        f"{doc['sweep_seconds']:.0f} s wall / {doc.get('sweep_cpu_seconds', math.nan):.0f} s "
        f"CPU, total {doc['wall_seconds']:.0f} s wall / {doc.get('cpu_seconds', math.nan):.0f} "
        f"s CPU, {doc['total_agent_episodes']} agent-episodes"
        # the CPU (and reports from before --device) say nothing: their README is unchanged
        + (
            f"; distillation on {doc['device']}"
            + (f" ({doc['device_name']})" if doc.get("device_name") else "")
            if doc.get("device", "cpu") != "cpu"
            else ""
        )
        + ".",
        "",
        "## Episodes to mission (Figure 3 and 4 cells)",
        "",
        "median over groups (inf = not reached within the cap) with its distribution-free "
        "interval [x_(k), x_(n+1-k)] (order statistics; coverage 1 - 2 P(Bin(n, 1/2) < k), "
        f"{_cover(int(S['groups'])):.3g} here); mean and std over the groups that reached it, "
        "reached / groups.",
        "",
        "| kind | setting | agents | median [interval] | mean (reached) | std | reached |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        med, lo, hi, _ = median_ci(r["mission"])
        lines.append(
            f"| {r['kind']} | {r['setting']} | {r['agents']} | {_fmt(med)} "
            f"[{_fmt(lo)}, {_fmt(hi)}] | "
            f"{_fmt(r['mean_reached'])} | {_fmt(r['std_reached'])} | "
            f"{r['reached']}/{r['groups']} |"
        )
    if doc.get("trends"):
        lines += ["", *_trend_lines(doc)]
    lines += ["", "![Figure 3](figure3.png)", "", "![Figure 4](figure4.png)", ""]
    if doc["leak"]:
        lines += [
            "## What the uploads leak (dynamics inference of each agent's gravity)",
            "",
            "Shadow-training attack (`ldp_audit.attacks.frd`) on small runs (4 agents x "
            f"{S['leak_groups']} groups, S=10, E=5, I=5, 40 episodes, 24x1 networks); T = uploads "
            "per agent (FedAvg: those that start from a broadcast, the server's delta reference; "
            "round 0 starts from a private random initialisation); 95% Clopper-Pearson "
            "interval; ceiling = e^{T eps}/(e^{T eps}+k-1). Guesses per gravity: a classifier "
            "that learnt nothing guesses one gravity, and its accuracy is then that gravity's "
            "share among the victims.",
            "",
            "| run | gravities | eps per upload | T | n | accuracy | 95% CI | chance | ceiling "
            "| guesses per gravity | victims per gravity |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in doc["leak"]:
            lo, hi = r["accuracy_ci"]
            lines.append(
                f"| {r['run']} | {r['gravities']} | {_fmt(r['epsilon_per_upload'])} | "
                f"{r['reports_per_agent']} | {r['n']} | {_fmt(r['accuracy'])} | "
                f"[{_fmt(lo)}, {_fmt(hi)}] | {_fmt(r['chance'])} | {_fmt(r['ceiling'])} | "
                f"{r.get('guesses', '-')} | {r.get('truth_counts', '-')} |"
            )
        lines.append("")
    lines += ["## The paper's claims (text of sections 5-6)", ""]
    lines += [f"- {v}" for v in doc["paper_claims"].values()]
    lines += [
        "",
        "## Command",
        "",
        "```",
        doc.get("command", "ldp-audit reproduce frd --out reports/frd"),
        "```",
        "",
    ]
    return "\n".join(lines)
