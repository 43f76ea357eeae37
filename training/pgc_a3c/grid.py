"""The public entry points of PGC-A3C: :func:`train` (one config) and :func:`train_grid`
(several configs in one lock-step batch, optionally over a pool of worker processes), with the
run directories they write and the SIGINT/SIGTERM handlers that stop a run at a step boundary.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Sequence
from dataclasses import replace as dataclasses_replace
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig, TrainResult
from ldp_audit.training.pgc_a3c.engine import Engine
from ldp_audit.training.pgc_a3c.fused import FusedEngine
from ldp_audit.training.pgc_a3c.privacy import (
    PrivacyClaimWarning,
    coordinate_warning,
    make_accountant,
)
from ldp_audit.validation import check_choice, check_int

__all__ = ["ENGINES", "train", "train_grid"]

#: ``engine`` values of :func:`train_grid`: the per-step Python loop, or the fused block kernel.
ENGINES = ("lockstep", "fused")


def train_grid(
    configs: Sequence[PgcA3cConfig],
    *,
    seed: int | Sequence[int] = 0,
    run_dirs: Sequence[str | Path | None] | None = None,
    ledgers: Sequence[Any] | None = None,
    progress: bool | None = None,
    transcript: bool | None = None,
    workers: int = 1,
    run_mode: str = "new",
    engine: str = "lockstep",
    _sink: Any = None,
    force: bool = False,
) -> list[TrainResult]:
    """Run several configs (e.g. the 10 settings of Tables 1-3) in ONE lock-step batch.

    This is what ``reproduce pgc-a3c`` should call: all trials of all settings step together, so
    the per-step Python overhead is paid once for the whole grid. Config i's result is exactly
    ``train(configs[i], seed=seeds[i])`` (its randomness never depends on the other configs);
    configs must share ``episode_steps``.

    Args:
        configs: the settings.
        seed: one seed for all configs (common random numbers: trial k of every setting starts
            from the same theta) or one per config.
        run_dirs: optional run directory per config (None entries write nothing).
        ledgers: optional ``ldp_audit.accountant.Ledger`` per config; default: the run
            directory's ledger.sqlite, else an in-memory ledger.
        progress: show a tqdm bar on stderr (submissions); None = off.
        transcript: record the transcript (default: only for configs with a run directory).
            At paper scale a transcript holds 90,000 x trials reports; record it for attack runs.
        workers: processes to spread the configs over (one lock-step batch each; configs are
            dealt round-robin; the spawned processes of ``ldp_audit.backends.run_tasks``, so a
            script calling this needs the ``if __name__ == "__main__":`` guard). The results
            are exactly those of ``workers=1``: a config's run never depends on the configs
            beside it. ``env_steps`` of every result is then the total over all workers. Not
            with ``ledgers`` (ledger objects stay in this process).
        run_mode: for ``run_dirs``: "new" (default; each path must not exist or be empty: a run
            directory is evidence and is never overwritten or appended to), "overwrite"
            (replace an earlier run), "resume" (same config and seed as the run there: rerun it
            from its seed, charging the same ledger, whose earlier charges keep counting).
        engine: "lockstep" (default: one Python iteration per lock-step) or "fused" (each
            block of up to 256 lock-steps in one compiled call, several times faster): the
            same results bit for bit (zeta, theta, transcript); the fused engine charges each
            agent's reports when the agent starts (a block of agents ahead, reserved with
            ``ldp_audit.release.reserve``), so its ledger also holds agents started or
            reserved but not submitted when a trial stopped (charged, never released: the safe
            direction).

        force: run even when the estimated memory or time of the batch exceeds this machine's
            limits (:mod:`ldp_audit.limits`; otherwise InvalidParameterError before any work).

    Returns:
        One :class:`TrainResult` per config, in order.
    """
    configs = list(configs)
    if not configs or not all(isinstance(c, PgcA3cConfig) for c in configs):
        raise InvalidParameterError("configs must be a non-empty sequence of PgcA3cConfig")
    from ldp_audit.limits import check_resources
    from ldp_audit.training.sizes import pgc_estimates

    n = len(configs)
    dirs = list(run_dirs) if run_dirs is not None else [None] * n
    record = [(d is not None) if transcript is None else bool(transcript) for d in dirs]
    if len(record) == n:  # (a length mismatch is named below)
        check_resources(pgc_estimates(configs, record), force=force)  # before any allocation
    seeds = [seed] * n if isinstance(seed, (int, np.integer)) else list(seed)
    if len(seeds) != n:
        raise InvalidParameterError(f"seed must be an int or one per config ({n}), got {seed!r}")
    for s in seeds:
        check_int(s, "seed", minimum=0)
    if len(dirs) != n:
        raise InvalidParameterError(f"run_dirs must have one entry per config ({n})")
    workers = check_int(workers, "workers", minimum=1)
    check_choice(engine, "engine", ENGINES)
    check_choice(run_mode, "run_mode", ("new", "overwrite", "resume"))
    for c in configs:
        if c.clip_kind == "coordinate" and c.mechanism == "laplace":
            warnings.warn(coordinate_warning(c), PrivacyClaimWarning, stacklevel=3)
    from ldp_audit.interrupts import closing
    from ldp_audit.rundir import check_new_dir
    from ldp_audit.training.pgc_a3c.run_dir import cartpole_metrics, open_writer, write_run

    given = [d for d in dirs if d is not None]
    if len({str(Path(d).resolve()) for d in given}) != len(given):
        raise InvalidParameterError("run_dirs must be distinct paths")
    if run_mode != "resume":
        for d in given:  # every output path is checked before any work
            check_new_dir(d, name="run_dir", overwrite=(run_mode == "overwrite"))
    if workers > 1 and n > 1:
        if ledgers is not None:
            raise InvalidParameterError("workers > 1 cannot take ledger objects; use run_dirs")
        same = {"transcript": transcript, "run_mode": run_mode, "engine": engine}
        return _train_grid_parallel(configs, seeds, dirs, progress, workers, same)
    writers = [
        None if d is None else open_writer(d, c, s, mode=run_mode)
        for d, c, s in zip(dirs, configs, seeds, strict=True)
    ]
    accountants = []
    durable = any(x is not None for x in [*dirs, *(ledgers or ())])  # a ledger someone reads
    if not durable and n > 1 and all(c.budget is None for c in configs):
        # nobody will read these ledgers: one in-memory ledger, one transaction per step
        accountants = [make_accountant(None, None)] * n
    for i, c in enumerate(configs if not accountants else ()):
        led = ledgers[i] if ledgers is not None else None
        if led is None and writers[i] is not None:
            led = writers[i].open_ledger()
        accountants.append(make_accountant(led, c.budget))
    t0 = time.perf_counter()
    engine_cls = FusedEngine if engine == "fused" else Engine
    engine = engine_cls(configs, seeds, accountants, record)
    bar = _meter(configs, "here") if progress else None
    # Ctrl-C / SIGTERM stop the engine at the next lock-step boundary (a second signal acts at
    # once), so an interrupted run still writes the transcript of every report it released: the
    # ledger and the transcript agree (charged-but-not-released rows of the step in flight are
    # the only difference, the safe direction).
    caught: list[tuple[int, Any]] = []
    restore: Any = None
    try:
        # the first calls of the engine's compiled kernels load them (numba's registries and
        # cache: Python code, seconds under load), past the CLI watchdog's grace if a signal
        # came then, the run left "running": load them here, before the handlers and before any
        # charge, on a throwaway in-memory copy (one trial, one submission); a signal now raises
        # and the run is marked interrupted below
        small = [dataclasses_replace(c, trials=1, max_submissions=1, budget=None) for c in configs]
        engine_cls(small, [0] * n, [make_accountant(None, None) for _ in small], record).run()
        restore = _install_stop_handlers(engine, caught)
        engine.run(bar.sink if _sink is None and bar is not None else _sink)
    except BaseException:
        # Ctrl-C or a failure (BudgetExceeded included): the ledger already holds every charge
        # made (charged-but-not-released rows are the safe direction); mark each run folder so
        # no reader takes it for a finished run.
        with closing():
            for w in writers:
                if w is not None:
                    w.finish(status="interrupted")
        raise
    finally:
        if restore is not None:
            restore()
        if bar is not None:
            bar.close()
    status = "interrupted" if caught else "complete"
    # a signal's run is written under closing(): the watchdog's forced exit waits for it (its
    # fsyncs took seconds at load 13), so it ends "interrupted", never "running"
    with closing() if caught else contextlib.nullcontext():
        results = engine.results(time.perf_counter() - t0)
        for w, res in zip(writers, results, strict=True):
            if w is not None:
                write_run(w, res, cartpole_metrics(res), status=status)
    if caught:
        signum, handler = caught[0]
        if callable(handler):
            handler(signum, None)  # the handler in force before (raises, e.g. KeyboardInterrupt)
        raise KeyboardInterrupt
    return results


def _meter(configs: list[PgcA3cConfig], where: str) -> Any:
    """A tqdm bar on stderr over the configs' submissions, fed ``where`` the engines run
    (:class:`ldp_audit.backends.WorkProgress`)."""
    from ldp_audit.backends import WorkProgress

    total = int(sum(c.trials * c.max_submissions for c in configs))
    return WorkProgress(total, "pgc-a3c submissions", where)


def _install_stop_handlers(engine: Any, caught: list[tuple[int, Any]]) -> Any:
    """SIGINT/SIGTERM -> ``engine.stop_requested`` (main thread only); returns the restorer."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    # a signal the process ignores (SIGINT of a background job of a non-interactive shell,
    # nohup) stays ignored, as the CLI keeps it (docs/cli.md)
    sigs = [s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) != signal.SIG_IGN]
    old = {sig: signal.getsignal(sig) for sig in sigs}

    def on_signal(signum: int, frame: Any) -> None:
        if engine.stop_requested:  # a second signal: act at once
            h = old[signum]
            if callable(h):
                h(signum, frame)
            raise KeyboardInterrupt
        engine.stop_requested = True
        caught.append((signum, old[signum]))

    from ldp_audit.interrupts import on_signal as watchdog_hook

    unhooks: list[Any] = []

    def restore() -> None:
        for unhook in unhooks:
            unhook()
        for sig in sigs:
            signal.signal(sig, old[sig])

    try:
        for sig in sigs:
            signal.signal(sig, on_signal)
        # the fused engine's compiled block runs past Python's handler: the CLI's watchdog
        # (which sees the signal at once, from its thread) ends it at the next lock-step
        unhooks.append(watchdog_hook(getattr(engine, "halt_soon", lambda: None)))
    except BaseException:  # a signal while they were installed: none is left behind
        restore()
        raise
    return restore


def _train_grid_parallel(
    configs: list[PgcA3cConfig],
    seeds: list[int],
    dirs: list[Any],
    progress: bool | None,
    workers: int,
    same: dict[str, Any],
) -> list[TrainResult]:
    """:func:`train_grid` as ``workers`` tasks of the local process pool of
    :func:`ldp_audit.backends.grid_runs` (configs dealt round-robin), with the keywords
    ``same`` (transcript, run_mode, engine) for every part; ``force``: this process checked
    the whole grid's size (and honoured force)."""
    from functools import partial

    from ldp_audit.backends import grid_runs

    t0 = time.perf_counter()
    part = partial(quiet_train_grid, **same, force=True)  # the parent warned already
    res = grid_runs(part, configs, seeds, dirs, chunks=workers,
                    workers=workers, progress="pgc-a3c submissions" if progress else None,
                    work=lambda c: c.trials * c.max_submissions, fresh=False)  # fmt: skip
    secs = time.perf_counter() - t0
    # env_steps of a part's results count that part's batch (part k: configs k, k + parts, ...);
    # report the grid's total
    total_steps = sum(int(r.env_steps) for r in res[: min(workers, len(configs))])
    return [dataclasses_replace(r, env_steps=total_steps, seconds=secs) for r in res]


def train(
    cfg: PgcA3cConfig,
    *,
    seed: int = 0,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool | None = None,
    transcript: bool | None = None,
    run_mode: str = "new",
    engine: str = "lockstep",
    force: bool = False,
) -> TrainResult:
    """Train PGC-A3C (Algorithm 1) for ``cfg.trials`` independent trials in lock-step.

    Args:
        cfg: the run's config.
        seed: everything is derived from it (bit-for-bit reproducible).
        run_dir: if given, write config.json, ledger.sqlite, transcript.npz, secrets.npz,
            metrics.json and model.npz there (docs/interfaces.md).
        ledger: an ``ldp_audit.accountant.Ledger`` to charge (default: run_dir/ledger.sqlite,
            else in memory).
        progress: tqdm bar on stderr.
        transcript: record what crossed the trust boundary (default: when run_dir is given).
        run_mode: "new" (run_dir must not exist or be empty), "overwrite" or "resume" (see
            :func:`train_grid`).
        engine: "lockstep" or "fused" (see :func:`train_grid`).
        force: run even when the estimated memory or time exceeds the limits (see
            :func:`train_grid`).

    Returns:
        :class:`TrainResult`.
    """
    if not isinstance(cfg, PgcA3cConfig):
        raise InvalidParameterError(f"cfg must be a PgcA3cConfig, got {type(cfg).__name__}")
    return train_grid(
        [cfg],
        seed=seed,
        run_dirs=[run_dir],
        ledgers=[ledger],
        progress=progress,
        transcript=transcript,
        run_mode=run_mode,
        engine=engine,
        force=force,
    )[0]


def train_run(
    cfg: PgcA3cConfig,
    *,
    seed: int,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool | None = None,
    run_mode: str = "new",
) -> Any:
    """:func:`train` (the lock-step engine) under the System contract
    (:meth:`ldp_audit.systems.System.train`): the paper's measures of the run (FST per trial,
    median FST and success ratio with their intervals, eq. 25-27) as its metrics; ``native``:
    the engine's :class:`TrainResult`."""
    from ldp_audit.systems import TrainResult as SystemResult
    from ldp_audit.training.pgc_a3c.metrics import final_mean_mu, summarize

    res = train(cfg, seed=seed, run_dir=run_dir, ledger=ledger, progress=progress,
                  run_mode=run_mode)  # fmt: skip
    zeta = np.asarray(res.zeta, dtype=np.float64)
    metrics = {
        "mechanism": cfg.mechanism,
        "epsilon": None if cfg.mechanism == "none" else cfg.epsilon,
        "rounds": cfg.rounds,
        "clip_kind": cfg.clip_kind,
        "aggregator": cfg.aggregator,
        "aggregator_lr": cfg.effective_aggregator_lr,
        "target": cfg.target,
        "max_submissions": cfg.max_submissions,
        "submissions": [int(n) for n in res.submissions],
        "stopped_at_target": [bool(b) for b in res.stopped_at_target],
        "env_steps": int(res.env_steps),
        "final_mean_mu": final_mean_mu(zeta),
        **summarize(
            zeta, rng=np.random.default_rng(seed), threshold=cfg.target_score, window=cfg.window
        ),  # fmt: skip
    }
    return SystemResult(system="pgc-a3c", config=cfg, seed=int(seed), seconds=float(res.seconds),
                        privacy=res.privacy, metrics=metrics,
                        run_dir=None if run_dir is None else Path(run_dir), native=res)  # fmt: skip


def quiet_train_grid(configs: list[Any], **kwargs: Any) -> list[Any]:
    """``pgc_a3c.train_grid(configs, transcript=False, engine="fused", **kwargs)`` (``kwargs``
    override both) without the coordinate-clipping :class:`PrivacyClaimWarning` (the driver
    warned once, see :func:`~ldp_audit.training.pgc_a3c.reproduce.engine_grid`): the task that
    :func:`ldp_audit.backends.grid_runs` ships to a worker, there and for
    ``train_grid(workers=...)``'s own process pool.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyClaimWarning)
        return train_grid(configs, **{"transcript": False, "engine": "fused", **kwargs})
