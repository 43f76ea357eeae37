"""Resource bounds for size-like options: refuse a run whose estimated memory or time is absurd.

Every trainer (and the commands that run one) estimates, from its configuration alone, the bytes
its largest allocations take (parameters x bytes x copies, buffers, transcripts) and, where it
matters, a lower bound on its compute time. :func:`check_resources` compares the sums with this
machine's limits and raises :class:`~ldp_audit.errors.InvalidParameterError` (exit 2 on the
command line) *before any allocation or randomness*, naming the option that drives the estimate;
``force=True`` (``--force``) runs anyway.

The limits:

* memory: half of this machine's physical memory (``os.sysconf``: on Linux ``MemTotal`` in
  ``/proc/meminfo``), at most :data:`MEMORY_CAP` (64 GiB); ``LDP_AUDIT_MEMORY_LIMIT`` (bytes, or
  with a ``K``/``M``/``G``/``T`` suffix: powers of 1024) sets another. The physical memory, not
  the momentarily available one, so a configuration is accepted or refused the same way however
  busy the machine is.
* time: :data:`TIME_LIMIT_S` (24 hours) of *optimistic* compute (the estimates assume 10^11
  floating-point operations per second on a CPU, 10^14 on a GPU: a real run is slower);
  ``LDP_AUDIT_TIME_LIMIT`` (seconds) sets another.

The check only reads configuration values: within the limits nothing about a run changes.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.parse import parse_real

GiB = 2**30
#: the absolute memory cap (bytes), whatever the machine
MEMORY_CAP = 64 * GiB
#: the compute-time limit (seconds of optimistic compute)
TIME_LIMIT_S = 24 * 3600.0
#: optimistic throughputs (floating-point operations per second) behind the time estimates
CPU_FLOPS = 1e11
GPU_FLOPS = 1e14
MEMORY_ENV = "LDP_AUDIT_MEMORY_LIMIT"
TIME_ENV = "LDP_AUDIT_TIME_LIMIT"
#: ``1``: every check passes, as with ``force=True`` (set by :func:`forcing`, so the trainers a
#: reproduction or an attack runs, in this process or its workers, honour ``--force``)
FORCE_ENV = "LDP_AUDIT_FORCE"

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class Estimate:
    """What one option costs.

    Attributes:
        option: the option and its value as the user wrote it (``--hidden 100000000`` on the
            command line, ``hidden=100000000`` in Python).
        what: what the bytes hold (``the networks``, ``the transcript``).
        nbytes: estimated peak bytes of that part.
        seconds: estimated lower bound on compute seconds of that part (0: not estimated).
    """

    option: str
    what: str
    nbytes: float = 0.0
    seconds: float = 0.0


def label(cli: bool, param: str, flag: str, value: Any) -> str:
    """``--flag value`` (command line) or ``param=value`` (Python) for an :class:`Estimate`."""
    return f"{flag} {value}" if cli else f"{param}={value!r}"


def fmt_bytes(n: float) -> str:
    """``2.3 GiB``-style text for ``n`` bytes."""
    n = float(n)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            v = n / size
            return f"{v:,.1f} {unit}" if v < 1e6 else f"{v:.2e} {unit}"
    return f"{n:.0f} bytes"


def fmt_seconds(s: float) -> str:
    """``3.2 hours``-style text for ``s`` seconds."""
    units = (("years", 86400 * 365), ("days", 86400), ("hours", 3600), ("s", 1))
    unit, size = next((u, n) for u, n in units if float(s) >= n or n == 1)
    return f"{float(s) / size:.3g} {unit}"


def _parse_bytes(text: str) -> int:
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise InvalidParameterError(
            f"{MEMORY_ENV} must be a number of bytes (e.g. 4000000000 or 4G), got {text!r}"
        )
    v = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not math.isfinite(v) or v < 1:  # 0.1 would be a limit of 0 bytes
        raise InvalidParameterError(f"{MEMORY_ENV} must be at least 1 byte, got {text!r}")
    return int(v)


def physical_memory() -> int | None:
    """This machine's physical memory in bytes (on Linux ``MemTotal`` of ``/proc/meminfo``, to
    the byte), or None when unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def memory_limit() -> tuple[int, str]:
    """The memory limit in bytes and how it was set (for the message)."""
    env = os.environ.get(MEMORY_ENV)
    if env is not None and env.strip():
        return _parse_bytes(env), f"set by {MEMORY_ENV}"
    total = physical_memory()
    if total is None:
        return 8 * GiB, f"this machine's memory is unknown; {MEMORY_ENV} sets another"
    if total // 2 >= MEMORY_CAP:
        return MEMORY_CAP, f"the absolute cap; {MEMORY_ENV} sets another"
    return total // 2, f"half of this machine's {fmt_bytes(total)}; {MEMORY_ENV} sets another"


def time_limit() -> tuple[float, str]:
    """The compute-time limit in seconds and how it was set."""
    env = os.environ.get(TIME_ENV)
    if env is not None and env.strip():
        try:  # strictly, as the options: not 1_000 or a full-width digit
            v = parse_real(env, TIME_ENV)
        except argparse.ArgumentTypeError:
            v = math.nan
        if not v > 0:
            raise InvalidParameterError(f"{TIME_ENV} must be a number of seconds > 0, got {env!r}")
        return v, f"set by {TIME_ENV}"
    return TIME_LIMIT_S, f"the default; {TIME_ENV} sets another"


def flops_seconds(flops: float, device: str = "cpu") -> float:
    """Optimistic seconds for ``flops`` floating-point operations on ``device``."""
    return float(flops) / (GPU_FLOPS if str(device).startswith("cuda") else CPU_FLOPS)


def check_resources(
    estimates: Iterable[Estimate] | Mapping[str, Estimate],
    *,
    force: bool,
    cli: bool = False,
) -> dict[str, float]:
    """Refuse a run whose estimated peak memory or compute time exceeds the limits.

    Args:
        estimates: the parts of the run (their bytes and seconds are summed).
        force: run anyway (``--force``): nothing is refused.
        cli: the hint names ``--force`` instead of ``force=True``.

    Returns:
        ``{"bytes": total, "seconds": total, "memory_limit": ..., "time_limit": ...}``.

    Raises:
        InvalidParameterError: the total exceeds a limit and ``force`` is false; the message
            names the option whose part is largest, its estimate, the total and the limit.
    """
    if not isinstance(force, bool):
        raise InvalidParameterError(f"force must be True or False, got {force!r}")
    parts = list(estimates.values() if isinstance(estimates, Mapping) else estimates)
    total_b = float(sum(max(0.0, e.nbytes) for e in parts))
    total_s = float(sum(max(0.0, e.seconds) for e in parts))
    mem, mem_how = memory_limit()
    tl, tl_how = time_limit()
    out = {"bytes": total_b, "seconds": total_s, "memory_limit": mem, "time_limit": tl}
    if force or forced():
        return out
    hint = "pass --force to run anyway" if cli else "pass force=True to run anyway"
    if total_b > mem:
        top = max(parts, key=lambda e: e.nbytes)
        extra = "" if top.nbytes >= 0.95 * total_b else f", {fmt_bytes(total_b)} in all"
        raise InvalidParameterError(
            f"{top.option} needs about {fmt_bytes(top.nbytes)} for {top.what} (estimate{extra}), "
            f"more than the {fmt_bytes(mem)} memory limit ({mem_how}); {hint}"
        )
    if total_s > tl:
        top = max(parts, key=lambda e: e.seconds)
        extra = "" if top.seconds >= 0.95 * total_s else f", {fmt_seconds(total_s)} in all"
        raise InvalidParameterError(
            f"{top.option} needs at least {fmt_seconds(top.seconds)} of compute for {top.what} "
            f"(optimistic estimate{extra}), more than the {fmt_seconds(tl)} time limit "
            f"({tl_how}); {hint}"
        )
    return out


def forced() -> bool:
    """Whether a :func:`forcing` block (``--force``) is active, here or in a parent process."""
    return os.environ.get(FORCE_ENV, "").strip() == "1"


@contextlib.contextmanager
def forcing(force: bool = True) -> Iterator[None]:
    """While active (and ``force``), every :func:`check_resources` passes, in this process and
    in the worker processes it starts (the environment variable :data:`FORCE_ENV`): how
    ``--force`` reaches the trainers inside a reproduction or an attack."""
    old = os.environ.get(FORCE_ENV)
    if force:
        os.environ[FORCE_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(FORCE_ENV, None)
        else:
            os.environ[FORCE_ENV] = old


def add_force_argument(parser: Any) -> None:
    """``--force``: run even when the estimated memory or time exceeds the limits."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="run even when the estimated memory or compute time of the sizes given exceeds "
        "this machine's limits (see docs/cli.md, 'Size limits')",
    )


# ----------------------------------------------------------------------------------------------
# Input files: only regular files are read (opening a FIFO blocks, a device never ends)
# ----------------------------------------------------------------------------------------------


_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a folder"}


def _kind(mode: int) -> str:
    device = stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
    return "a device" if device else _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_regular_file(path: str | os.PathLike[str], name: str) -> None:
    """Refuse ``path`` unless it is a regular file (or a missing one: the caller's own error),
    before anything opens it.

    Raises:
        RunDirectoryError: ``path`` is a FIFO, socket, device or folder; the message names it.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # missing or unreadable: the reader's own error names it
    if not stat.S_ISREG(mode):
        raise RunDirectoryError(
            f"{name} {os.fspath(path)!r} is {_kind(mode)}, not a regular file; refused before "
            "opening it (a FIFO would block the read)"
        )


RUN_FILES = ("config.json", "manifest.json", "ledger.sqlite")


def is_run_like(folder: str | os.PathLike[str]) -> bool:
    """``folder`` holds an entry (of any kind) named like a file every run writes: one that
    holds none is no run, never walked nor hashed (``budget /work --verify`` hashed every file
    under /work for 12 minutes before saying it had no ledger)."""
    return any(os.path.lexists(os.path.join(folder, n)) for n in RUN_FILES)


def check_run_files(run_dir: str | os.PathLike[str], name: str = "--run-dir") -> None:
    """Refuse a run directory holding a FIFO, socket or device (at any depth), naming it, before
    any of its files is opened. A run's writers only ever create regular files and folders. A
    folder that is no run (:func:`is_run_like`) is not walked: its reader refuses it.

    Raises:
        RunDirectoryError: a non-regular entry was found.
    """
    root = os.fspath(run_dir)
    if not is_run_like(root):  # no run: its reader refuses it by name, opening nothing
        return
    for folder, dirs, files in os.walk(root):  # a symlinked folder is listed, not entered
        for path in (os.path.join(folder, e) for e in dirs + files):
            try:
                mode = os.stat(path).st_mode  # a symlink counts as what it points to
            except OSError:
                continue
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise RunDirectoryError(
                    f"{name} {root!r} holds {path!r}, which is {_kind(mode)}, not a regular "
                    "file; refused before opening any file of the run (a FIFO would block)"
                )


def check_input_paths(args: Any) -> None:
    """The command line's input files and run directories (argparse dests ``run_dir``,
    ``extra``, ``ledger``, and ``out`` under ``--resume``) checked for FIFOs, sockets and
    devices before the command opens anything (:func:`check_regular_file`,
    :func:`check_run_files`); the message names the option and the path.

    Raises:
        RunDirectoryError: a non-regular file was given or found in a run directory.
    """
    runs: list[tuple[str, Any]] = [("run directory", getattr(args, "run_dir", None))]
    extra = getattr(args, "extra", None)
    if isinstance(extra, (list, tuple)):
        runs += [("RUN", e) for e in extra]
    if getattr(args, "resume", False) is True:
        runs.append(("--out (--resume)", getattr(args, "out", None)))
    # a ledger file, or a run directory holding one
    runs.append(("LEDGER", getattr(args, "ledger", None)))
    for name, path in runs:
        if not isinstance(path, str) or not path:
            continue
        if os.path.isdir(path):
            check_run_files(path, name)
        else:
            check_regular_file(path, name)
