"""Run independent tasks here or on a Ray cluster, with the same results either way.

A *task* is one cell of a grid (a setting and a seed): ``fn(item)`` must depend only on ``item``
(its randomness comes from a generator or seed inside ``item``, never from global state) and must
own its outputs (its own run directory and ledger, written by that one process). Then::

    from ldp_audit.backends import run_tasks

    results = run_tasks(fn, items)                               # in this process
    results = run_tasks(fn, items, backend="local", workers=2)   # a local process pool
    results = run_tasks(fn, items, backend="ray")                # ray.init() on this machine
    results = run_tasks(fn, items, backend="ray", address="ray://head:10001")  # a cluster

returns ``[fn(item) for item in items]`` in item order, bit for bit the same on every backend
(the items are pickled to the workers, so a ``numpy.random.Generator`` in an item arrives with the
same state).

Failures: a task that raises becomes :class:`TaskError` (or :class:`TaskInputError`, also an
:class:`~ldp_audit.errors.LdpAuditError`, when the task's own error was one), whose message names
the item (``describe(item)``, e.g. ``"theta='crafted', seed=0"``) and keeps the original error as
``__cause__``. A worker that is *killed* (node lost, out of memory) is retried by Ray up to
``max_retries`` times; a task raising an exception is not retried (it would raise again). A retry
is safe because a task owns its run directory and ledger: a killed attempt's directory is moved
aside by :func:`fresh_run_dir` (kept as evidence, never merged into), so no charge is counted
twice and nothing is overwritten.

Ray is an optional dependency (``pip install 'ldp-audit[ray]'``); ``backend="ray"`` without it is
an :class:`~ldp_audit.errors.InvalidParameterError` naming the extra.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import multiprocessing as mp
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ldp_audit.errors import InvalidParameterError, LdpAuditError, RunDirectoryError
from ldp_audit.validation import check_int

__all__ = [
    "BACKENDS",
    "TaskError",
    "TaskInputError",
    "run_tasks",
    "fresh_run_dir",
    "check_backend",
    "train_runs",
    "grid_runs",
    "backend_options",
    "describe_spec",
    "init_ray",
    "ProgressSink",
    "WorkProgress",
]

T = TypeVar("T")
R = TypeVar("R")

#: The backends :func:`run_tasks` accepts.
BACKENDS: tuple[str, ...] = ("local", "ray")
#: How often the driver looks at its tasks' progress messages while waiting (seconds).
_POLL_SECONDS = 0.25


class TaskError(RuntimeError):
    """A task raised; the message names its item. ``index`` and ``item`` say which one."""

    def __init__(self, message: str, *, index: int, item: Any) -> None:
        super().__init__(message)
        self.index = index
        self.item = item


class TaskInputError(TaskError, LdpAuditError):
    """A task raised an :class:`~ldp_audit.errors.LdpAuditError` (bad input, budget, run
    directory): the CLI maps it to exit code 2 like the error itself."""


def check_backend(
    backend: Any, address: Any = None, workers: Any = None, *, cli: bool = False
) -> tuple[str, Any, Any]:
    """Validate ``backend``, ``address`` and ``workers`` (before any work); returns them. The
    messages name the arguments, or with ``cli`` the command-line options (``--address``)."""
    arg = (lambda n: "--" + n) if cli else (lambda n: n)
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise InvalidParameterError(f"{arg('backend')} must be one of {BACKENDS}, got {backend!r}")
    if address is not None:
        if backend != "ray":
            ray, given = ("--backend ray", f"--backend {backend}") if cli else (
                "backend='ray'", f"backend={backend!r}")  # fmt: skip
            raise InvalidParameterError(f"{arg('address')} applies to {ray} only, got {given}")
        # what ray.init reads; a malformed one is a ValueError inside Ray after --out is made
        if not isinstance(address, str) or not re.fullmatch(
            r"auto|local|\w+://\S+|\S+:\d+", address
        ):
            raise InvalidParameterError(
                f"{arg('address')} must be 'auto', 'local', HOST:PORT or a URL (ray://HOST:PORT), "
                f"got {address!r}"
            )
    checked = None if workers is None else check_int(workers, arg("workers"), minimum=1)
    return backend, address, checked


def _describe(describe: Callable[[Any], str] | None, item: Any) -> str:
    if describe is not None:
        with contextlib.suppress(Exception):  # a describe bug must not hide the task's own error
            return str(describe(item))
    text = repr(item)
    return text if len(text) <= 200 else text[:197] + "..."


def _fail(exc: BaseException, index: int, items: Sequence[Any], describe: Any) -> TaskError:
    cls = TaskInputError if isinstance(exc, LdpAuditError) else TaskError
    err = cls(
        f"task {index + 1} of {len(items)} ({_describe(describe, items[index])}) failed: "
        f"{type(exc).__name__}: {exc}",
        index=index,
        item=items[index],
    )
    err.__cause__ = exc
    return err


def run_tasks(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
    progress: bool | str | None = None,
    describe: Callable[[T], str] | None = None,
    max_retries: int = 3,
    _poll: Callable[[], None] | None = None,
) -> list[R]:
    """``[fn(item) for item in items]`` on the chosen backend, in item order.

    Args:
        fn: a picklable (module-level) function of one item; deterministic given the item.
        items: the tasks' inputs (each picklable).
        backend: ``"local"`` (this process, or a process pool when ``workers`` > 1) or
            ``"ray"`` (Ray tasks; ``ray.init(address=address)`` unless Ray is already
            initialised in this process).
        address: an existing Ray cluster (``"auto"``, ``"ray://host:10001"``); ray only.
        workers: local: pool size (None or 1 = run in this process); ray: ``num_cpus`` of the
            Ray instance this call starts (ignored when connecting to a cluster).
        progress: a tqdm bar on stderr (a string is its description).
        describe: ``describe(item) -> str`` names an item in error messages (setting, seed).
        max_retries: how many times Ray re-runs a task whose worker died (not one that raised).

    Returns:
        The results, ``results[i] = fn(items[i])``.

    Raises:
        InvalidParameterError: bad backend/address/workers, or Ray missing (before any work).
        TaskError: a task raised (:class:`TaskInputError` if it raised an ``LdpAuditError``);
            the message names the item.
    """
    backend, address, workers = check_backend(backend, address, workers)
    if not callable(fn):
        raise InvalidParameterError(f"fn must be callable, got {type(fn).__name__}")
    max_retries = check_int(max_retries, "max_retries", minimum=0)
    from tqdm.auto import tqdm

    items = list(items)
    desc = progress if isinstance(progress, str) else "tasks"  # a bar of finished tasks
    with tqdm(total=len(items), desc=desc, unit="task", disable=not progress) as bar:
        if backend == "ray" or (workers is not None and workers > 1 and len(items) > 1):
            args = (backend, address, workers, bar, describe, max_retries, _poll)
            return _run_spread(fn, items, *args)
        out: list[R] = []
        for i, item in enumerate(items):
            try:
                out.append(fn(item))
            except (KeyboardInterrupt, TaskError):
                raise
            except Exception as exc:
                raise _fail(exc, i, items, describe) from exc
            bar.update(1)
        return out


def _run_spread(
    fn: Callable[[T], R],
    items: Sequence[T],
    backend: str,
    address: str | None,
    workers: int | None,
    bar: Any,
    describe: Any,
    max_retries: int,
    poll: Callable[[], None] | None = None,
) -> list[R]:
    """The tasks on Ray or on a local pool of ``workers`` processes, collected in item order as
    they finish (``poll`` called every :data:`_POLL_SECONDS`); a failure or Ctrl-C stops the
    others (Ray cancels them; the pool's processes are ended, not waited for)."""
    if backend == "ray":
        ray = init_ray(address, workers)
        remote = ray.remote(max_retries=max_retries, retry_exceptions=False)(_call)
        fn_ref = ray.put(fn)  # any picklable callable (a partial too), shipped once
        submit = functools.partial(remote.remote, fn_ref)
        wait = functools.partial(ray.wait, num_returns=1, timeout=_POLL_SECONDS)
        get, errors = ray.get, ray.exceptions.RayError  # it raised, or died > max_retries

        def stop(pending: Any) -> None:
            for ref in pending:
                ray.cancel(ref)

    else:
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
        from concurrent.futures import wait as wait_futures

        ctx = mp.get_context("spawn")  # no fork of a process holding threads or open ledgers
        n = min(workers or 1, len(items))
        ex = ProcessPoolExecutor(n, ctx, initializer=die_with_parent, initargs=(os.getpid(),))
        submit = functools.partial(ex.submit, fn)
        wait = functools.partial(wait_futures, timeout=_POLL_SECONDS, return_when=FIRST_COMPLETED)
        get, errors = (lambda fut: fut.result()), Exception

        def stop(pending: Any) -> None:
            _stop_pool(ex)

    results: list[Any] = [None] * len(items)
    pending: Any = []
    try:
        pending = [submit(item) for item in items]
        index = {h: i for i, h in enumerate(pending)}
        while pending:
            done, pending = wait(pending)
            if poll is not None:
                poll()
            for h in done:
                i = index[h]
                try:
                    results[i] = get(h)
                except errors as exc:
                    cause = exc
                    if backend == "ray" and isinstance(exc, ray.exceptions.RayTaskError):
                        cause = getattr(exc, "cause", None) or exc.as_instanceof_cause()
                    raise _fail(cause, i, items, describe) from exc
                bar.update(1)
    except BaseException:  # a failure or Ctrl-C: the grid's other tasks are stopped too
        stop(pending)
        raise
    if backend != "ray":
        ex.shutdown(wait=True)
    return results


def _stop_pool(ex: Any) -> None:
    """Cancel a process pool's pending tasks and end its worker processes (a failed or
    interrupted grid must not wait for the running tasks: they may take minutes)."""
    procs = list(getattr(ex, "_processes", {}).values())  # the executor has no public kill
    ex.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)


def die_with_parent(parent: int) -> None:
    """A pool worker's initializer: the worker ends (exit 1) within half a second of the
    process that started it, ``parent``, being gone. A SIGKILLed ``reproduce`` runs no handler:
    its spawned workers were left blocked forever (180-300 MiB each; the resource tracker with
    them), holding the command's stdout and stderr open, so a caller reading them (a pipe to
    ``tee``, ``subprocess.communicate``) waited forever too."""
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)  # its files: as after a kill (atomic writes, a SQLite ledger)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _call(fn: Callable[[T], R], item: T) -> R:
    """A Ray task: ``fn(item)`` (module-level, so Ray accepts it whatever ``fn`` is)."""
    return fn(item)


def init_ray(address: str | None, workers: int | None) -> Any:
    """``ray.init`` once: on ``address`` (a cluster) or here with ``workers`` CPUs; returns the
    ``ray`` module (:class:`~ldp_audit.errors.InvalidParameterError` if Ray is not installed)."""
    try:
        import ray
    except ImportError:
        raise InvalidParameterError(
            "backend='ray' needs Ray: pip install 'ldp-audit[ray]' (or pip install ray)"
        ) from None
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address is not None:
            kwargs["address"] = address
        elif workers is not None:
            kwargs["num_cpus"] = workers
        try:
            ray.init(**kwargs)
        except (ConnectionError, TimeoutError) as e:  # no cluster there: a usage error
            raise InvalidParameterError(
                f"address {address!r}: no Ray cluster could be reached ({e}); start one with "
                "`ray start --head` or leave --address out to run Ray on this machine"
            ) from None
    return ray


def fresh_run_dir(path: str | Path) -> Path:
    """Make ``path`` ready for a task's (re)try: if an earlier attempt died there (config.json
    present, no manifest.json), move it aside to ``<path>.attempt-<k>`` (kept as evidence with
    its ledger; nothing is merged or overwritten) and return ``path``. A completed run there
    (manifest present) is a :class:`~ldp_audit.errors.RunDirectoryError`, as is any other
    non-empty folder; a missing or empty folder is returned as is.
    """

    p = Path(path)
    if not p.exists() or (p.is_dir() and not any(p.iterdir())):
        return p
    if not p.is_dir():
        raise RunDirectoryError(f"run directory {str(p)!r} exists and is not a directory")
    if (p / "manifest.json").exists():
        raise RunDirectoryError(
            f"run directory {str(p)!r} already holds a finished run (manifest.json); "
            "a retried task never replaces it"
        )
    status = None  # unreadable, or not a JSON object: not an attempt of ours
    with contextlib.suppress(OSError, ValueError, AttributeError):
        status = json.loads((p / "config.json").read_text()).get("status")
    if status != "running":
        raise RunDirectoryError(
            f"run directory {str(p)!r} is not empty and is not an interrupted attempt "
            f"(config.json status {status!r})"
        )
    k = next(k for k in itertools.count(1) if not p.with_name(f"{p.name}.attempt-{k}").exists())
    p.rename(p.with_name(f"{p.name}.attempt-{k}"))
    return p


def _check_grid(seeds: Sequence[Any], dirs: Sequence[Any], what: str) -> None:
    """Integer seeds (``what[i]``), and no run directory named twice."""
    for i, seed in enumerate(seeds):
        check_int(seed, what.format(i=i))
    named = [str(Path(d).resolve()) for d in dirs if d is not None]
    if len(set(named)) != len(named):
        raise InvalidParameterError("tasks must not share a run_dir (each task owns its own)")


def _describe_run(task: tuple[Any, Any, Any]) -> str:
    cfg, seed, run_dir = task
    names = ("mechanism", "epsilon", "rounds", "trials")
    fields = [f"{n}={getattr(cfg, n)!r}" for n in names if hasattr(cfg, n)]
    where = f", run_dir={str(run_dir)!r}" if run_dir is not None else ""
    return f"{type(cfg).__name__}({', '.join(fields)}), seed={seed!r}{where}"


def _train_one(train: Callable[..., R], task: tuple[Any, Any, Any]) -> R:
    cfg, seed, run_dir = task
    if run_dir is None:
        return train(cfg, seed=seed)
    return train(cfg, seed=seed, run_dir=fresh_run_dir(run_dir))


def train_runs(
    train: Callable[..., R],
    tasks: Sequence[tuple[Any, int, str | Path | None]],
    *,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
    progress: bool | str | None = None,
    max_retries: int = 3,
) -> list[R]:
    """The grid hook of a trainer: ``[train(config, seed=seed, run_dir=run_dir) ...]``.

    Each task ``(config, seed, run_dir)`` is one Ray task (or one local call) that owns its run
    directory (``None``: no run directory) and the ledger in it; a retried attempt starts from
    :func:`fresh_run_dir`. ``train`` must be a module-level function, e.g.
    ``ldp_audit.training.pgc_a3c.train`` (returning a ``TrainResult``). Results come back in
    task order, the same on every backend for the same seeds. A failure names the config and
    the seed (:class:`TaskError`).
    """
    tasks = list(tasks)
    for i, task in enumerate(tasks):
        if not isinstance(task, tuple) or len(task) != 3:
            raise InvalidParameterError(
                f"tasks[{i}] must be a (config, seed, run_dir) tuple, got {task!r}"
            )
    _check_grid([t[1] for t in tasks], [t[2] for t in tasks], "tasks[{i}] seed")
    return run_tasks(
        functools.partial(_train_one, train),
        tasks,
        backend=backend,
        address=address,
        workers=workers,
        progress=progress,
        describe=_describe_run,
        max_retries=max_retries,
    )


class ProgressSink:
    """Progress of a task in another process: ``update(k)`` counts are batched and put on
    ``queue`` (a multiprocessing-manager or Ray queue) at most every 0.25 s; ``flush()`` at the
    end. Best effort: a lost message never fails the task."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.pending = 0
        self.last = 0.0

    def update(self, k: int = 1) -> None:
        self.pending += int(k)
        now = time.monotonic()
        if now - self.last >= _POLL_SECONDS:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        if self.pending:
            with contextlib.suppress(Exception):  # progress is cosmetic; the task goes on
                self.queue.put(self.pending)
                self.pending = 0
        self.last = time.monotonic() if now is None else now


class WorkProgress:
    """A tqdm bar on stderr in units of work (e.g. submissions) fed by tasks anywhere: in this
    process the tasks call the bar itself; in a local pool or on Ray they call a
    :class:`ProgressSink` whose messages :meth:`poll` (called by :func:`run_tasks` while it
    waits) moves to the bar. A trainer that spreads its own tasks uses the pair the way
    :func:`grid_runs` does: ``meter = WorkProgress(total, "desc", where)``, pass
    ``meter.sink`` to each task, call ``meter.close()`` at the end."""

    def __init__(self, total: int, desc: str, where: str, unit: str = "sub") -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=desc, unit=unit)
        self.queue: Any = None
        self._manager: Any = None
        if where == "here":
            self.sink: Any = self.bar
            return
        if where == "ray":
            from ray.util.queue import Queue

            self.queue = Queue()
        else:
            self._manager = mp.get_context("spawn").Manager()
            self.queue = self._manager.Queue()
        self.sink = ProgressSink(self.queue)

    def poll(self) -> None:
        if self.queue is None:
            return
        while True:
            try:
                k = self.queue.get_nowait()
            except Exception:  # queue.Empty / ray.util.queue.Empty: nothing (more) for now
                return
            self.bar.update(k)

    def close(self) -> None:
        try:
            self.poll()
        finally:
            self.bar.close()
            if self._manager is not None:
                self._manager.shutdown()
            if self.queue is not None and hasattr(self.queue, "shutdown"):
                with contextlib.suppress(Exception):  # cleanup only
                    self.queue.shutdown()  # the Ray queue's actor


def _grid_chunk(train_grid: Callable[..., list[R]], fresh: bool, chunk: tuple[Any, ...]) -> list[R]:
    cfgs, seeds, dirs, sink = chunk
    kwargs: dict[str, Any] = {"seed": list(seeds), "progress": False}
    if sink is not None:
        kwargs["_sink"] = sink
    if any(d is not None for d in dirs):
        kwargs["run_dirs"] = [d if d is None or not fresh else fresh_run_dir(d) for d in dirs]
    out = train_grid(list(cfgs), **kwargs)
    if isinstance(sink, ProgressSink):
        sink.flush()
    return out


def _describe_chunk(chunk: tuple[Any, ...]) -> str:
    cfgs, seeds = chunk[0], chunk[1]
    return "; ".join(_describe_run((c, s, None)) for c, s in zip(cfgs, seeds, strict=True))


def grid_runs(
    train_grid: Callable[..., list[R]],
    configs: Sequence[Any],
    seeds: Sequence[int],
    run_dirs: Sequence[str | Path | None] | None = None,
    *,
    chunks: int | None = None,
    backend: str = "local",
    address: str | None = None,
    workers: int | None = None,
    progress: bool | str | None = None,
    max_retries: int = 3,
    work: Callable[[Any], int] | None = None,
    fresh: bool = True,
) -> list[R]:
    """A grid as a few batched tasks: ``train_grid`` over ``chunks`` groups of configs.

    For a lock-step engine whose ``train_grid(configs, seed=[...], run_dirs=[...])`` gives each
    config exactly what it gives alone (``ldp_audit.training.pgc_a3c.train_grid`` does), the
    configs are dealt round-robin into ``chunks`` tasks (default: ``workers``, else 1), each
    running ONE batch; results come back in config order, bit for bit those of one
    ``train_grid`` call. Fewer, larger tasks keep the batching that makes the engine fast (one
    task per config was 1.4-2.7x slower on one process, see docs/scale-out.md).

    Progress: with ``progress`` and ``work`` (``work(config)`` -> units of work, e.g.
    ``trials * max_submissions``), one tqdm bar on stderr in those units, fed from every task
    wherever it runs (``train_grid(..., _sink=...)`` receives ``update(k)`` calls); without
    ``work``, a bar of finished tasks.

    Run directories: each task first moves an earlier attempt's folder aside
    (:func:`fresh_run_dir`, for a retried task); ``fresh=False`` passes the paths as given, for
    a ``train_grid`` that checks them itself (``pgc_a3c.train_grid(workers=...)``, whose
    ``run_mode`` "overwrite" and "resume" take an earlier run there).
    """
    configs, seeds = list(configs), list(seeds)
    dirs = [None] * len(configs) if run_dirs is None else list(run_dirs)
    if len(seeds) != len(configs) or len(dirs) != len(configs):
        raise InvalidParameterError(
            f"configs, seeds and run_dirs must have the same length, got {len(configs)}, "
            f"{len(seeds)}, {len(dirs)}"
        )
    if chunks is None:
        chunks = workers or 1
    chunks = min(check_int(chunks, "chunks", minimum=1), max(len(configs), 1))
    _check_grid(seeds, dirs, "seeds[{i}]")
    backend, address, workers = check_backend(backend, address, workers)
    meter = None
    if progress and work is not None:
        pooled = backend == "local" and workers is not None and workers > 1 and chunks > 1
        where = "ray" if backend == "ray" else ("pool" if pooled else "here")
        if where == "ray":
            init_ray(address, workers)  # the progress queue is a Ray actor
        total = int(sum(int(work(c)) for c in configs))
        meter = WorkProgress(total, progress if isinstance(progress, str) else "grid", where)
    sink = None if meter is None else meter.sink  # configs k, k + chunks, ... in task k:
    tasks = [
        (tuple(configs[k::chunks]), tuple(map(int, seeds[k::chunks])), tuple(dirs[k::chunks]), sink)
        for k in range(chunks)
    ]
    try:
        parts = run_tasks(
            functools.partial(_grid_chunk, train_grid, fresh),
            tasks,
            backend=backend,
            address=address,
            workers=workers,
            progress=progress if meter is None else None,
            describe=_describe_chunk,
            max_retries=max_retries,
            _poll=None if meter is None else meter.poll,
        )
    finally:
        if meter is not None:
            meter.close()
    out: list[Any] = [None] * len(configs)
    for k, res in enumerate(parts):
        out[k::chunks] = res  # its configs' results, in config order
    return out


def backend_options(args: Any = None, **given: Any) -> dict[str, Any]:
    """The validated ``backend``/``address``/``workers`` keywords of :func:`run_tasks`, from
    parsed CLI arguments (``add_backend_arguments``: absent attributes are the defaults) or from
    keywords; raises :class:`~ldp_audit.errors.InvalidParameterError` before any work.

    >>> backend_options(backend="ray", address="auto")
    {'backend': 'ray', 'address': 'auto', 'workers': None}
    """
    names = ("backend", "address", "workers")
    src = {**{n: getattr(args, n, None) for n in names}, **given}
    checked = check_backend(  # parsed options: the messages name the options
        src["backend"] or "local", src["address"], src["workers"], cli=args is not None
    )
    return dict(zip(names, checked, strict=True))


def describe_spec(spec: Any) -> str:
    """``"algo='dqn', sigma=0.5, seed=3"``: the scalar entries of a dict spec (a grid cell), for
    :func:`run_tasks` error messages."""
    if not isinstance(spec, dict):
        return _describe(None, spec)
    parts = [
        f"{k}={v!r}" for k, v in spec.items() if isinstance(v, (str, int, float, bool, type(None)))
    ]
    return ", ".join(parts)
