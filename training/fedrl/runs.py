"""Runs: every method x every run (:func:`run_fedrl`), the privacy table per agent and channel,
and the run directory (:func:`train_fedrl`).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.interrupts import closing
from ldp_audit.training.fedrl.config import METHODS, FedRLConfig
from ldp_audit.training.fedrl.exchange import Log
from ldp_audit.training.fedrl.gridworld import MapSet, generate_maps
from ldp_audit.training.fedrl.metrics import table_metrics
from ldp_audit.training.fedrl.trainer import train_runs
from ldp_audit.validation import check_int


def run_fedrl(
    cfg: FedRLConfig,
    *,
    seed: int,
    accountant: Any = None,
    maps: MapSet | None = None,
    record: bool = True,
    progress: bool = False,
    threads: int | None = 1,
    _state: dict[str, Any] | None = None,
    force: bool = False,
    extras: dict[str, Any] | None = None,
    only: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """Train ``cfg.methods`` ``cfg.runs`` times each and evaluate on the test maps.

    Args:
        cfg: the configuration.
        seed: master seed (maps use ``cfg.map_seed``).
        accountant: the ledger's accountant (None: a private in-memory one).
        maps: pre-generated maps (must match ``cfg``); None generates them.
        record: keep the transcript of every release (for the run directory and attacks).
        progress: tqdm bar on stderr.
        threads: torch intra-op threads while training (restored afterwards); None leaves
            torch's setting alone. One thread is fastest on a small, shared machine: the
            networks are small and every run is batched into one matmul already.
        force: run even when the estimated memory or time exceeds this machine's limits
            (:mod:`ldp_audit.limits`; otherwise InvalidParameterError before any work).
        extras: further evaluations of the trained networks (learning curves, epsilon-greedy
            evaluation; see ``train_runs``); they draw from their own generators, so the
            training and Table 1's numbers are the same with or without them.
        only: ``(method, run)``: train that one run alone (not batched with the others), from
            the same seed sequence it has in the batched order. A run's environment and
            exploration streams are shared by the runs batched with it, so a run trained alone
            gives other numbers than in the batch; ``only`` lets a reproduction make each
            (method, run) an independent task whose result does not depend on where it ran.

    Returns:
        ``{"results": [per method-run dict], "log": Log, "maps": MapSet, "accountant": acc}``.
    """
    _check_run(cfg, seed, threads, force)
    from ldp_audit.accountant import Accountant
    from ldp_audit.release import Transcript

    want = (cfg.size, cfg.n_maps, cfg.map_seed, cfg.density)
    if maps is None:
        maps = generate_maps(
            cfg.size, cfg.n_maps, density=cfg.density, seed=cfg.map_seed, t_max=cfg.t_max
        )
    elif (maps.size, len(maps), maps.seed, maps.density) != want:
        raise InvalidParameterError("maps do not match the config (size, n_maps, seed, density)")
    acc = Accountant(None) if accountant is None else accountant
    log = Log(q=Transcript("report"), y=Transcript("report"), record=bool(record))
    if _state is not None:  # the caller writes what was released if training is interrupted
        _state["log"] = log
    seqs = np.random.SeedSequence(int(seed)).spawn(cfg.runs * len(METHODS))
    groups = [(m, list(range(cfg.runs))) for m in cfg.methods]
    if only is not None:
        if not isinstance(only, tuple) or len(only) != 2 or only[0] not in cfg.methods:
            raise InvalidParameterError(f"only must be (method in {cfg.methods}, run), got {only}")
        run = check_int(only[1], "only[1] (the run)", minimum=0, maximum=cfg.runs - 1)
        groups = [(only[0], [run])]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        total = sum(len(g) for _, g in groups) * cfg.train_steps
        bar = tqdm(total=total, desc="fedrl", unit="it")
    results = []
    import torch

    old_threads = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(int(threads))
        for method, group in groups:  # all runs of a method at once (batched over runs)
            ss = [seqs[run * len(METHODS) + METHODS.index(method)] for run in group]
            results.extend(train_runs(method, cfg, maps, ss, group, acc, log, bar, extras))
    finally:
        torch.set_num_threads(old_threads)
        if bar is not None:
            bar.close()
    return {"results": results, "log": log, "maps": maps, "accountant": acc}


def _check_run(cfg: FedRLConfig, seed: Any, threads: Any, force: bool) -> str:
    """The run's arguments and sizes checked before any work or file; returns the resolved
    device ("cuda" without CUDA is refused)."""
    from ldp_audit.limits import check_resources
    from ldp_audit.training.device import load_libraries, resolve_device
    from ldp_audit.training.sizes import fedrl_estimates

    check_int(seed, "seed", minimum=0)
    if threads is not None:  # torch.set_num_threads(2**63 - 1): a raw ValueError (session 56)
        check_int(threads, "threads", minimum=1, maximum=4 * (os.cpu_count() or 1))
    device = resolve_device(cfg.device)
    check_resources(fedrl_estimates(cfg), force=force)  # absurd sizes: refused before any work
    load_libraries()  # before the run folder: a signal held in an import leaves none

    return device


def _write_log(w: Any, log: Log) -> None:
    """What was released (transcript.npz) and its secrets (secrets.npz), if anything was."""
    tr, sec = log_arrays(log)
    if tr:
        w.write_npz("transcript.npz", tr)
        w.write_npz("secrets.npz", sec)


def log_arrays(log: Log) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    tr: dict[str, np.ndarray] = {}
    sec: dict[str, np.ndarray] = {}
    if len(log.q):
        for k, v in log.q.arrays().items():
            tr[f"q_{k}"] = v.astype(np.float32) if k == "report" else v
        sec["q_obs"] = np.concatenate(log.q_obs)
    if len(log.y):
        for k, v in log.y.arrays().items():
            tr[f"y_{k}"] = v.astype(np.float64)[:, 0] if k == "report" else v
        sec["y_reward"] = np.concatenate(log.y_reward)
        sec["y_bump"] = np.concatenate(log.y_bump)
    return tr, sec


def privacy_table(cfg: FedRLConfig, accountant: Any, runs: Sequence[int]) -> list[dict[str, Any]]:
    """Per agent and channel: charges and the accountant's (epsilon, delta), in words if inf."""
    mech, ymech = cfg.output_mechanism(), cfg.target_mechanism()
    channels = (
        ("alpha", "", "alpha's Q outputs (training)", mech),
        ("alpha", ":Y", "alpha's targets Y (training)", ymech),
        ("beta", "", "beta's Q outputs (training)", mech),
        ("alpha", "@fedrl1", "alpha's Q outputs (test, FedRL-1, noisy)", mech),
        ("beta", "@fedrl1", "beta's Q outputs (test, FedRL-1, noisy)", mech),
        ("alpha", "@fedrl2", "alpha's Q outputs (test, FedRL-2, no noise)", None),
        ("beta", "@fedrl2", "beta's Q outputs (test, FedRL-2, no noise)", None),
    )
    spent = accountant.spent_all_detail(delta=cfg.delta, method="best")
    rows = []
    for run in runs:
        for agent, suffix, what, m in channels:
            aid = f"{run}/{agent}{suffix}"
            if aid not in spent:
                continue
            eps, method = spent[aid]
            detail = accountant.spent_detail(aid, delta=cfg.delta, method="best")
            if math.isinf(eps):  # the FedRL-2 channel (no mechanism) is released without noise
                why = None if m is None else m.why_infinite()
                words = why or "infinite, because the outputs are released without noise"
            else:
                words = f"({eps:.4g}, {cfg.delta:g})-DP over the whole run ({method})"
            rows.append(
                {
                    "run": run,
                    "ledger_agent": aid,
                    "channel": what,
                    "charges": detail.charges,
                    "epsilon": eps,
                    "delta": cfg.delta,
                    "method": method,
                    "per_row_epsilon": (m.epsilon if m is not None else math.inf),
                    "sensitivity": (m.sensitivity if m is not None else math.inf),
                    "in_words": words,
                }
            )
            if suffix == ":Y" and f"{run}/alpha" in spent:  # alpha's guarantee: both channels
                rows.append(_alpha_training(cfg, accountant, run, rows[-2:]))
    return rows


def _alpha_training(cfg: FedRLConfig, accountant: Any, run: int, two: list[dict]) -> dict:
    """Alpha's guarantee as an agent (the privacy unit) over its training releases: its Q
    outputs and its targets Y composed (each line alone understates it)."""
    from ldp_audit.accountant.methods import evaluate_full, signature

    ids = [p["ledger_agent"] for p in two]
    hist = accountant.ledger.histories(ids)
    eps, method = evaluate_full(signature(h for a in ids for h in hist[a]), cfg.delta, "best")[:2]
    words = next((p["in_words"] for p in two if math.isinf(p["epsilon"])), None)
    return {
        **two[0],
        "ledger_agent": " + ".join(ids),
        "channel": "alpha's training releases together (Q outputs and Y): its guarantee",
        "charges": sum(p["charges"] for p in two),
        "epsilon": eps,
        "method": method,
        "per_row_epsilon": None,  # two mechanisms
        "sensitivity": None,
        "in_words": words or f"({eps:.4g}, {cfg.delta:g})-DP over the whole run ({method})",
    }


def train_fedrl(
    cfg: FedRLConfig,
    out: str | Path,
    *,
    seed: int = 0,
    mode: str = "new",
    progress: bool = False,
    threads: int | None = 1,
    force: bool = False,
) -> dict[str, Any]:
    """Train FedRL and its baselines and write the run directory ``out``.

    Files: config.json, ledger.sqlite (agents ``<run>/alpha``, ``<run>/alpha:Y``,
    ``<run>/beta`` and the test-time ``@fedrl1`` / ``@fedrl2`` channels), transcript.npz
    (``q_*``: every released Q-output row with trial, sender 0=alpha 1=beta, kind 0=act
    1=minibatch 2=beta's target outputs 3=FedRL-1 test 4=FedRL-2 test, step, map_index;
    ``y_*``: every released Y), secrets.npz (``q_obs`` (N, 25): the sender's current window,
    alpha's 3x3 in the centre and 255 elsewhere; ``y_reward``, ``y_bump``), metrics.json,
    privacy.json, model.npz, manifest.json.

    Returns:
        The metrics dict (also in metrics.json).
    """
    from ldp_audit.accountant import Accountant
    from ldp_audit.rundir import RunWriter

    if not isinstance(cfg, FedRLConfig):
        raise InvalidParameterError(f"cfg must be a FedRLConfig, got {type(cfg).__name__}")
    if mode == "resume":
        raise InvalidParameterError(
            "mode 'resume' is not supported by fedrl (a run is short): start a new run"
        )
    device = _check_run(cfg, seed, threads, force)  # before any file
    # the maps too: a density that leaves no playable map is refused before any file
    maps = generate_maps(
        cfg.size, cfg.n_maps, density=cfg.density, seed=cfg.map_seed, t_max=cfg.t_max
    )
    w = RunWriter(
        out,
        algorithm="fedrl",
        config=cfg.to_dict(),
        seed=int(seed),
        mechanism=cfg.output_mechanism().to_config(),
        mode=mode,
        extra={"target_mechanism": cfg.target_mechanism().to_config(), "device": device},
    )
    ledger = w.open_ledger()
    acc = Accountant(ledger, run_id=str(Path(out).name))
    state: dict[str, Any] = {}
    try:
        res = run_fedrl(
            cfg,
            seed=seed,
            maps=maps,
            accountant=acc,
            progress=progress,
            record=True,
            threads=threads,
            _state=state,
            force=force,
        )
        state.update(res)
        metrics = table_metrics(cfg, res["results"])
        metrics["device"] = device
        metrics["privacy"] = privacy_table(cfg, acc, range(cfg.runs))
        _write_log(w, res["log"])
        model = {}
        for r in res["results"]:
            for net, sd in r["state"].items():
                for name, arr in sd.items():
                    model[f"{r['method']}/{r['trial']}/{net}/{name}"] = arr
        w.write_npz("model.npz", model)
        w.write_json("metrics.json", metrics)
        w.finish()
        return metrics
    except BaseException:
        with closing(), contextlib.suppress(Exception):  # the original exception matters more
            if state.get("log") is not None:  # (closing: a signal's forced exit waits for it)
                _write_log(w, state["log"])
            w.finish(status="interrupted")
        raise
    finally:
        acc.close()


def train_run(
    cfg: FedRLConfig,
    *,
    seed: int,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool | None = None,
    run_mode: str = "new",
    threads: int | None = 1,
) -> Any:
    """:func:`train_fedrl` with a run directory, else :func:`run_fedrl`, under the System
    contract (:meth:`ldp_audit.systems.System.train`); ``native``: the metrics dict
    (:func:`train_fedrl`) or the run's result (:func:`run_fedrl`)."""
    import time

    from ldp_audit.systems import TrainResult

    t0 = time.perf_counter()
    if run_dir is not None:
        native = metrics = train_fedrl(cfg, run_dir, seed=seed, mode=run_mode,
                                       progress=bool(progress), threads=threads)  # fmt: skip
    else:
        from ldp_audit.accountant import Accountant

        acc = Accountant(ledger) if ledger is not None else None
        native = run_fedrl(cfg, seed=seed, accountant=acc, progress=bool(progress), threads=threads)
        metrics = table_metrics(cfg, native["results"])
        metrics["privacy"] = privacy_table(cfg, native["accountant"], range(cfg.runs))
    return TrainResult(system="fedrl", config=cfg, seed=int(seed),
                       seconds=time.perf_counter() - t0, privacy={"channels": metrics["privacy"]},
                       metrics=metrics, run_dir=None if run_dir is None else Path(run_dir),
                       native=native)  # fmt: skip


def summary_lines(res: Any) -> list[str]:
    """``train fedrl``'s text: SuccRate and AvgRwd per method, each channel's privacy."""
    lines = [
        f"  {name:9s} SuccRate {100 * t['succ_rate']:5.1f} %  AvgRwd {t['avg_reward']:8.2f}"
        f"  ({t['runs']} run(s) x {res.config.eval_maps} test maps)"
        for name, t in res.metrics["table"].items()
    ]
    if not res.metrics["privacy"]:
        return [*lines, "  privacy: nothing was exchanged (baselines only: no release, no "
                "ledger charge)"]  # fmt: skip
    lines.append("  privacy (per agent and channel, composed over the run):")
    return lines + [f"    {p['ledger_agent']:16s} {p['charges']:6d} charges: {p['in_words']}"
                    for p in res.metrics["privacy"]]  # fmt: skip
