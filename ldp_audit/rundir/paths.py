"""Output-path checks, called by every command on its output path before any work starts.

A run directory is evidence: :func:`check_new_dir` accepts a path that does not exist or is an
empty folder (an earlier run only with ``overwrite=True``), :func:`check_report_dir` a
reproduction's report folder, :func:`check_new_file` a single output file. The names of a run's
files (:data:`RUN_FILES`) and of the artefacts a reader may add (:data:`ARTIFACT_PATTERN`) are
here too.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ldp_audit.errors import InvalidParameterError, RunDirectoryError

__all__ = [
    "ANALYSES_INDEX",
    "ARTIFACT_PATTERN",
    "RUN_FILES",
    "check_new_dir",
    "check_parent_writable",
    "check_new_file",
    "check_report_dir",
    "is_run_dir",
    "json_files",
    "report_written",
    "timestamped_dir",
]

#: Files a trainer writes (in this order; the ledger is written during training).
RUN_FILES = (
    "config.json",
    "ledger.sqlite",
    "transcript.npz",
    "secrets.npz",
    "metrics.json",
    "model.npz",
    "manifest.json",
)
#: Named artefacts a reader may add to a finished run (with write_artifact).
ARTIFACT_PATTERN = re.compile(r"^(audit|attack_[a-z0-9_\-]+)\.json$")
LEDGER_SIDE = ("ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.sqlite-journal")
#: the run's append-only index of sealed analysis files (ldp_audit.rundir.seal)
ANALYSES_INDEX = "analyses.json"
#: the temporary file of an interrupted atomic write (``files._atomic_write``, a ledger's
#: creation): unsealed by design, never opened by a reader
TEMP_FILE = re.compile(r"^\.[^/]+\.(tmp-\d+|ldp-creating\.\d+\.\d+\.tmp)$")


def is_run_dir(path: str | Path) -> bool:
    """True if ``path`` is a directory holding a run's ``config.json``."""
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file()


def check_path_arg(path: Any, name: str) -> Path:
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise InvalidParameterError(f"{name} must be a path (str), got {path!r}")
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():  # a bytes path too
        raise InvalidParameterError(f"{name} must be a non-empty path, got {path!r}")
    if "\x00" in text:
        raise InvalidParameterError(f"{name} must not contain NUL bytes, got {path!r}")
    return Path(text)


def check_parent_writable(p: Path, name: str) -> None:
    """The nearest existing ancestor of ``p`` must accept a new entry: probed by creating (and
    removing) a temporary folder there, since a permission check alone passes ``/proc`` as root."""
    import tempfile

    for q in (p, *p.parents):  # a dangling link on the way: mkdir / open would fail or follow it
        if q.exists():
            break
        if q.is_symlink():
            raise RunDirectoryError(
                f"{name}: {str(q)!r} is a symbolic link to {os.readlink(q)!r}, which does not "
                f"exist (for {str(p)!r}); remove the link or choose another path"
            )
    anc = p.parent if str(p.parent) else Path(".")
    while not anc.exists() and anc.parent != anc:
        anc = anc.parent
    if not anc.is_dir():
        raise RunDirectoryError(f"{name}: {str(anc)!r} is not a directory (for {str(p)!r})")
    try:
        probe = tempfile.mkdtemp(prefix=".ldp-audit-probe-", dir=anc)
    except OSError as exc:
        raise RunDirectoryError(
            f"{name}: cannot create {str(p)!r} under {str(anc)!r} ({exc.strerror or exc})"
        ) from None
    os.rmdir(probe)


def check_new_dir(
    path: Any,
    *,
    name: str = "--out",
    overwrite: bool = False,
    can_resume: bool = True,
    can_overwrite: bool = True,
) -> Path:
    """Check that ``path`` can receive a NEW run or report, before any work starts.

    The path must not exist, or be an empty directory; with ``overwrite=True`` it may also be an
    earlier run directory (it is replaced when the writer starts, never merged). Anything else
    (a file, a non-empty folder that is not a run) is refused. The parent must be writable.
    ``can_resume=False`` / ``can_overwrite=False`` for commands that have no ``--resume`` (a
    report, the demo, the Python API) / no ``--overwrite`` (``train opacus``): the refusal then
    does not suggest it. A ``name`` that is not an option (``run_dir``) is a Python argument: the
    refusal suggests ``overwrite=True``.

    Returns:
        The path as a ``Path``.
    """
    p = check_path_arg(path, name)
    over = "--overwrite" if name.startswith("--") else "overwrite=True"  # an option or a keyword
    if p.exists():
        if not p.is_dir():
            raise RunDirectoryError(f"{name} {str(p)!r} exists and is not a directory")
        if any(p.iterdir()):
            if not overwrite:
                raise RunDirectoryError(
                    f"{name} {str(p)!r} already exists and is not empty; a run directory is "
                    "evidence and is never overwritten or appended to. Choose a new path"
                    + (f", or pass {over} to replace an earlier one" if can_overwrite else "")
                    + (" (or --resume to continue it)" if can_resume else "")
                )
            if p.is_symlink():  # rmtree never deletes through a link (exit 3 before)
                raise RunDirectoryError(
                    f"{name} {str(p)!r} is a symbolic link (to {os.readlink(p)!r}); {over} "
                    f"replaces an earlier run or report folder, never one through a link: give "
                    f"the folder itself"
                )
            if not _earlier_output(p):
                raise RunDirectoryError(
                    f"{name} {str(p)!r} is not empty and is not a run or report folder (a "
                    f"run's config.json, or nothing but a report's pages and figures); "
                    f"refusing to delete it even with {over}"
                )
        if not os.access(p, os.W_OK | os.X_OK):
            raise RunDirectoryError(f"{name}: cannot write to {str(p)!r}")
        return p
    check_parent_writable(p, name)
    return p


def _earlier_output(p: Path) -> bool:
    """``p`` holds what ``overwrite`` may replace: an earlier run (``config.json`` a JSON object
    naming its ``algorithm``) or report (nothing but a report's files: its pages,
    ``screenshot.png`` and ``figures/*.png``; also what a report killed while replacing one
    leaves), not any folder that happens to hold a ``config.json`` or an ``index.html``
    (session 56: `train --out PROJECT --overwrite` deleted a project folder with its sources)."""
    import json

    cfg = p / "config.json"
    with contextlib.suppress(OSError, ValueError, RecursionError):
        if cfg.is_file() and not cfg.is_symlink() and cfg.stat().st_size <= 1 << 24:
            doc = json.loads(cfg.read_bytes())
            if isinstance(doc, dict) and isinstance(doc.get("algorithm"), str):
                return True
    pages = {"index.html", "report.md", "report.json", "screenshot.png"}
    for f in p.iterdir():  # stops at the first file that is no report's
        if f.is_symlink() or not (
            (f.name in pages and f.is_file()) or (f.name == "figures" and f.is_dir())
        ):
            return False
    figs = p / "figures"
    return not figs.is_dir() or all(
        f.suffix == ".png" and f.is_file() and not f.is_symlink() for f in figs.iterdir()
    )


def check_report_dir(
    path: Any,
    *,
    overwrite: bool = False,
    generated: tuple[str, ...] = ("results.json", "README.md", "tables.md"),
    name: str = "--out",
) -> Path:
    """A reproduction's report folder, checked before the experiment runs.

    It must be new or empty; a non-empty folder (an earlier report, any of ``generated``, or
    hand-written files such as notes.md) is written into only with ``overwrite=True``, which
    rewrites the generated files and keeps everything else.
    """
    p = check_path_arg(path, name)
    if p.is_dir() and any(p.iterdir()):  # (anything else: check_new_dir below, a file refused)
        if not overwrite:
            found = [g for g in generated if (p / g).exists()]
            what = (
                f"already holds a report ({', '.join(found)}); committed results are evidence"
                if found
                else "already exists and is not empty"
            )
            raise RunDirectoryError(
                f"{name} {str(p)!r} {what}. Choose a new folder, or pass --overwrite to "
                f"(re)generate the report there (hand-written files such as notes.md are kept)"
            )
        if not os.access(p, os.W_OK | os.X_OK):
            raise RunDirectoryError(f"{name}: cannot write to {str(p)!r}")
        return p
    return check_new_dir(p, name=name, can_resume=False)


@contextlib.contextmanager
def report_written(folder: Path) -> Iterator[None]:
    """A report folder written by the block: on an exception (Ctrl-C, SIGTERM, a full disk) the
    files it wrote or rewrote are removed, and the folders it made once empty, so that no half
    report is left (a new folder's rerun needs no --overwrite; hand-written files are kept)."""

    def files() -> dict[Path, int]:
        return {f: f.stat().st_mtime_ns for f in folder.rglob("*") if f.is_file()}

    existed = folder.exists()
    before, dirs = files(), {d for d in folder.rglob("*") if d.is_dir()}
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            for f, t in files().items():
                if before.get(f) != t:
                    f.unlink()
            made = sorted(set(folder.rglob("*")) - dirs, reverse=True)
            for d in made + ([] if existed else [folder]):  # --out too, when the block made it
                if d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
        raise


def check_new_file(path: Any, *, name: str = "--out", overwrite: bool = False) -> Path:
    """Check that a single output file can be written before any work starts (parent writable,
    not an existing directory; an existing file only with ``overwrite=True``)."""
    p = check_path_arg(path, name)
    if p.is_dir():
        raise RunDirectoryError(f"{name} {str(p)!r} is a directory, expected a file path")
    if p.exists() and not overwrite:
        raise RunDirectoryError(
            f"{name} {str(p)!r} already exists; choose a new path or pass --overwrite"
        )
    if p.exists() and not os.access(p, os.W_OK):
        raise RunDirectoryError(f"{name}: cannot write to {str(p)!r}")
    if not p.parent.exists():
        raise RunDirectoryError(
            f"{name}: the folder {str(p.parent)!r} does not exist (for {str(p)!r})"
        )
    check_parent_writable(p, name)
    return p


def timestamped_dir(prefix: str) -> str:
    """A new folder name ``PREFIX-YYYYmmdd-HHMMSS[-k]`` that does not exist yet."""
    import datetime as _dt

    base = f"{prefix}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    p, k = base, 1
    while Path(p).exists():
        k += 1
        p = f"{base}-{k}"
    return p


def json_files(base: Path) -> list[Path]:
    """The ``*.json`` files of the folder ``base`` (sorted), or ``[base]`` itself (a file): what
    ``report RUN EXTRA...`` reads from each EXTRA."""
    return sorted(f for f in base.glob("*.json") if f.is_file()) if base.is_dir() else [base]
