"""The run-directory contract shared by every trainer (docs/interfaces.md, "Run directory").

A run directory is evidence: it is written once, by one run, and never silently appended to or
overwritten.

- :func:`check_new_dir` is what every command calls on an output path BEFORE any work: the path
  must not exist or be an empty directory, and its parent must be writable. ``overwrite=True``
  replaces an earlier *run* (a folder with ``config.json``) and nothing else.
- :class:`RunWriter` writes a run: ``config.json`` first (with ``"status": "running"``), the
  ledger the accountant charges during training, then the transcript, secrets, metrics and model,
  and last ``manifest.json`` (status ``complete`` or ``interrupted``, SHA-256 of every file but
  the ledger, the ledger's anchor: its id, row count, chain head, metadata digest and key id,
  and an HMAC of it all under the ledger key). Every file is written atomically (temp file +
  rename) and a file that exists is never replaced.
- ``resume``: the same algorithm, config and seed (checked against ``config.json``), the same
  ledger (its earlier charges stay and count against the budget; the rerun's charges already in
  it are matched row by row and never charged twice); outputs of the earlier attempt are removed
  first.
- :func:`write_artifact` adds a *named, documented* artefact to an existing run
  (``audit.json``, ``attack_<name>.json``): the only writes into a run a reader may make, and
  it refuses to replace one unless ``overwrite=True``.
- Readers (:func:`read_config`, :func:`read_json`, :func:`read_npz`, :func:`read_manifest`,
  :func:`verify_manifest`, :func:`verify_run`) never write. :func:`verify_run` checks a run
  against its manifest (files, the manifest's MAC, the whole ledger against its anchor, an
  ``expect_head`` published elsewhere); :func:`require_verified` is what every reader of a run
  calls first: unverified evidence is refused unless ``allow_unverified``.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import hmac
import json
import math
import os
import platform
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, RunDirectoryError

__all__ = [
    "RUN_FILES",
    "ARTIFACT_PATTERN",
    "RunWriter",
    "check_new_dir",
    "check_new_file",
    "check_report_dir",
    "is_run_dir",
    "json_number",
    "to_jsonable",
    "write_artifact",
    "read_config",
    "read_json",
    "read_npz",
    "read_manifest",
    "verify_manifest",
    "verify_run",
    "require_verified",
    "unverified_banner",
    "VerifyResult",
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
_LEDGER_SIDE = ("ledger.sqlite-wal", "ledger.sqlite-shm", "ledger.sqlite-journal")


# ----------------------------------------------------------------------------------------------
# JSON convention: infinities are the strings "inf" / "-inf", NaN is null (never for "never")
# ----------------------------------------------------------------------------------------------


def json_number(v: float) -> float | str | None:
    """One float as JSON: finite as is, +-inf as "inf"/"-inf", NaN as null."""
    v = float(v)
    if math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def to_jsonable(obj: Any) -> Any:
    """Recursively turn numpy scalars/arrays, Paths and floats into JSON-able values using the
    project convention (infinite = "inf"/"-inf", NaN = null)."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return json_number(float(obj))
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _dump(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), indent=1, allow_nan=False)


# ----------------------------------------------------------------------------------------------
# Output-path checks (called by every command before any work)
# ----------------------------------------------------------------------------------------------


def is_run_dir(path: str | Path) -> bool:
    """True if ``path`` is a directory holding a run's ``config.json``."""
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file()


def _check_path_arg(path: Any, name: str) -> Path:
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise InvalidParameterError(f"{name} must be a path (str), got {path!r}")
    if isinstance(path, str) and not path.strip():
        raise InvalidParameterError(f"{name} must be a non-empty path, got {path!r}")
    return Path(path)


def _check_parent_writable(p: Path, name: str) -> None:
    """The nearest existing ancestor of ``p`` must accept a new entry: probed by creating (and
    removing) a temporary folder there, since a permission check alone passes ``/proc`` as root."""
    import tempfile

    parent = p.parent if str(p.parent) else Path(".")
    anc = parent
    while not anc.exists():
        if anc.parent == anc:
            break
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
    path: Any, *, name: str = "--out", overwrite: bool = False, can_resume: bool = True
) -> Path:
    """Check that ``path`` can receive a NEW run or report, before any work starts.

    The path must not exist, or be an empty directory; with ``overwrite=True`` it may also be an
    earlier run directory (it is replaced when the writer starts, never merged). Anything else
    (a file, a non-empty folder that is not a run) is refused. The parent must be writable.
    ``can_resume=False`` for commands that have no ``--resume`` (a report, the demo): the refusal
    then does not suggest it.

    Returns:
        The path as a ``Path``.
    """
    p = _check_path_arg(path, name)
    if p.exists():
        if not p.is_dir():
            raise RunDirectoryError(f"{name} {str(p)!r} exists and is not a directory")
        if any(p.iterdir()):
            if not overwrite:
                raise RunDirectoryError(
                    f"{name} {str(p)!r} already exists and is not empty; a run directory is "
                    f"evidence and is never overwritten or appended to. Choose a new path, or "
                    f"pass --overwrite to replace an earlier one"
                    + (" (or --resume to continue it)" if can_resume else "")
                )
            if not is_run_dir(p) and not (p / "index.html").exists():
                raise RunDirectoryError(
                    f"{name} {str(p)!r} is not empty and is not a run or report folder; "
                    f"refusing to delete it even with --overwrite"
                )
        if not os.access(p, os.W_OK | os.X_OK):
            raise RunDirectoryError(f"{name}: cannot write to {str(p)!r}")
        return p
    _check_parent_writable(p, name)
    return p


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
    p = _check_path_arg(path, name)
    if p.exists() and not p.is_dir():
        raise RunDirectoryError(f"{name} {str(p)!r} exists and is not a directory")
    if p.is_dir() and any(p.iterdir()):
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


def check_new_file(path: Any, *, name: str = "--out", overwrite: bool = False) -> Path:
    """Check that a single output file can be written before any work starts (parent writable,
    not an existing directory; an existing file only with ``overwrite=True``)."""
    p = _check_path_arg(path, name)
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
    _check_parent_writable(p, name)
    return p


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """Versions of the packages a run depends on (recorded in config.json)."""
    import scipy

    import ldp_audit

    out = {
        "ldp_audit": getattr(ldp_audit, "__version__", "unknown"),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "python": platform.python_version(),
    }
    for mod in ("gymnasium", "torch", "opacus"):
        m = __import__("sys").modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "unknown")
    return out


def _sha256(f: Path) -> str:
    from ldp_audit.limits import check_regular_file

    check_regular_file(f, "run file")  # a FIFO would block the hash
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(p: Path) -> None:
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(target: Path, write: Any, *, replace: bool = False) -> None:
    if target.exists() and not replace:
        raise RunDirectoryError(
            f"{target} already exists; a run directory's files are written once"
        )
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def _write_json_file(target: Path, obj: Any, *, replace: bool = False) -> None:
    text = _dump(obj)
    _atomic_write(target, lambda t: t.write_text(text), replace=replace)


def _write_npz_file(target: Path, arrays: Mapping[str, Any], *, replace: bool = False) -> None:
    arrs = {k: np.asarray(v) for k, v in arrays.items()}

    def w(t: Path) -> None:
        with open(t, "wb") as fh:
            np.savez_compressed(fh, **arrs)

    _atomic_write(target, w, replace=replace)


def _canonical(obj: Any) -> str:
    return json.dumps(to_jsonable(obj), sort_keys=True)


def _ledger_anchor(path: Path) -> dict[str, Any] | None:
    """The ledger's id, row count, chain head, key id and schema (None: the run has none)."""
    if not path.exists():
        return None
    from ldp_audit.accountant.ledger import Ledger

    led = Ledger(str(path), create=False, readonly=True)
    try:
        return led.anchor()
    finally:
        led.close()


def _manifest_bytes(man: Mapping[str, Any]) -> bytes:
    """What a manifest's MAC covers: every key but ``"mac"``, canonical JSON."""
    body = {k: v for k, v in man.items() if k != "mac"}
    return b"ldp-audit manifest v1|" + _canonical(body).encode()


def _seal_manifest(man: dict[str, Any]) -> dict[str, Any]:
    """``man`` with its HMAC under the ledger key (created on first use, like a ledger's)."""
    from ldp_audit.accountant.keys import load_key

    key = load_key(create=True)
    if key is None:  # pragma: no cover - load_key(create=True) returns a key or raises
        raise RunDirectoryError("no ledger key to seal manifest.json with")
    out = dict(man)
    out["mac"] = {"key_id": key.id, "hmac": key.mac(_manifest_bytes(man)).hex()}
    return out


class RunWriter:
    """Write one run directory under the evidence contract (see the module docstring).

    Args:
        path: the run directory (new, or empty; see ``mode``).
        algorithm: e.g. "pgc-a3c", "dprl", "fedrl", "frd".
        config: the run's config as a JSON-able dict.
        seed: the run's seed.
        mechanism: the release mechanism's ``to_config()`` (None if the trainer has several; put
            them in ``extra``).
        mode: "new" (default; the path must not exist or be empty), "overwrite" (replace an
            earlier run), "resume" (continue an earlier run of the same algorithm, config and
            seed: its ledger is kept and charged further).
        extra: more JSON-able keys for config.json.

    Use::

        w = RunWriter(out, algorithm="dprl", config=cfg.to_dict(), seed=seed)
        ledger = w.open_ledger()            # charge this during training
        ... train ...
        w.write_npz("transcript.npz", transcript.arrays())
        w.write_json("metrics.json", metrics)
        w.finish()                          # manifest.json, status "complete"

    On an exception (Ctrl-C included) call ``w.finish(status="interrupted")`` after writing
    whatever was released so far, then re-raise: the ledger then holds every charge for the rows
    in the transcript (and possibly charges for rows never released: the safe direction).
    """

    def __init__(
        self,
        path: Any,
        *,
        algorithm: str,
        config: Mapping[str, Any],
        seed: int,
        mechanism: Mapping[str, Any] | None = None,
        mode: str = "new",
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in ("new", "overwrite", "resume"):
            raise InvalidParameterError(
                f"mode must be 'new', 'overwrite' or 'resume', got {mode!r}"
            )
        if not isinstance(algorithm, str) or not algorithm:
            raise InvalidParameterError(f"algorithm must be a non-empty str, got {algorithm!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise InvalidParameterError(f"seed must be an int >= 0, got {seed!r}")
        self.path = _check_path_arg(path, "run_dir")
        self.algorithm = algorithm
        self.mode = mode
        cfg_doc = {
            "algorithm": algorithm,
            "config": to_jsonable(dict(config)),
            "mechanism": to_jsonable(dict(mechanism)) if mechanism is not None else None,
            "seed": int(seed),
        }
        if extra:
            cfg_doc.update(to_jsonable(dict(extra)))
        if mode == "resume":
            self._prepare_resume(cfg_doc)
        else:
            check_new_dir(self.path, name="run_dir", overwrite=(mode == "overwrite"))
            if mode == "overwrite" and self.path.exists():
                shutil.rmtree(self.path)
            self.path.mkdir(parents=True, exist_ok=True)
            cfg_doc["versions"] = versions()
            cfg_doc["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat()
            cfg_doc["status"] = "running"
            _write_json_file(self.path / "config.json", cfg_doc)
        self.config_doc = cfg_doc
        self._finished = False

    def _prepare_resume(self, cfg_doc: dict[str, Any]) -> None:
        p = self.path
        if not is_run_dir(p):
            raise RunDirectoryError(
                f"--resume: {str(p)!r} is not a run directory (no config.json); start a new run "
                f"without --resume"
            )
        old = read_config(p)
        for key in ("algorithm", "config", "mechanism", "seed"):
            a, b = old.get(key), cfg_doc[key]
            if _canonical(a) != _canonical(b):
                if isinstance(a, dict) and isinstance(b, dict):
                    diff = sorted(
                        k for k in set(a) | set(b) if _canonical(a.get(k)) != _canonical(b.get(k))
                    )
                    what = ", ".join(
                        f"{k}: {_canonical(a.get(k))[:60]} (run) vs "
                        f"{_canonical(b.get(k))[:60]} (now)"
                        for k in diff[:8]
                    )
                else:
                    what = f"{_canonical(a)[:100]} (run) vs {_canonical(b)[:100]} (now)"
                raise RunDirectoryError(
                    f"--resume: the run in {str(p)!r} has a different {key} ({what}); resume "
                    f"needs the same algorithm, config and seed"
                )
        man = p / "manifest.json"
        if man.exists() and read_json(p, "manifest.json").get("status") == "complete":
            raise RunDirectoryError(
                f"--resume: the run in {str(p)!r} is complete; nothing to resume"
            )
        # outputs of the interrupted attempt are superseded (the ledger is kept)
        for name in RUN_FILES:
            if name not in ("config.json", "ledger.sqlite"):
                (p / name).unlink(missing_ok=True)
        cfg_doc.update({k: old[k] for k in ("versions", "created") if k in old})
        cfg_doc["resumed"] = list(old.get("resumed", [])) + [
            _dt.datetime.now(_dt.timezone.utc).isoformat()
        ]
        cfg_doc["status"] = "running"
        _write_json_file(p / "config.json", cfg_doc, replace=True)

    @property
    def ledger_path(self) -> Path:
        return self.path / "ledger.sqlite"

    def open_ledger(self, **kwargs: Any) -> Any:
        """The run's ``ledger.sqlite`` as a ``Ledger`` (created on a new run)."""
        from ldp_audit.accountant.ledger import Ledger

        led = Ledger(str(self.ledger_path), **kwargs)
        if self.mode == "resume":
            # the rerun's charges already in the ledger are matched, never charged twice
            led.begin_replay()
            self._ledger = led
        return led

    def _target(self, name: str) -> Path:
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise InvalidParameterError(f"file name must be a plain name, got {name!r}")
        if name in ("config.json", "manifest.json"):
            raise InvalidParameterError(f"{name} is written by RunWriter itself")
        if self._finished:
            raise RunDirectoryError(f"run {str(self.path)!r} is finished; it cannot be written")
        return self.path / name

    def write_json(self, name: str, obj: Any) -> Path:
        """Write ``name`` (JSON, infinities as "inf") once, atomically."""
        t = self._target(name)
        _write_json_file(t, obj)
        return t

    def write_npz(self, name: str, arrays: Mapping[str, Any]) -> Path:
        """Write ``name`` (compressed npz, no pickles) once, atomically."""
        t = self._target(name)
        _write_npz_file(t, arrays)
        return t

    def finish(self, status: str = "complete", **info: Any) -> Path:
        """Write ``manifest.json`` (status, SHA-256 of every file except the ledger, the
        ledger's anchor, a MAC under the ledger key; after a resume, what was replayed) and mark
        ``config.json`` with the status. After this the run is read-only for the writer."""
        if status not in ("complete", "interrupted", "failed"):
            raise InvalidParameterError(
                f"status must be 'complete', 'interrupted' or 'failed', got {status!r}"
            )
        if self._finished:
            raise RunDirectoryError(f"run {str(self.path)!r} is already finished")
        files = {}
        for f in sorted(self.path.iterdir()):
            if f.is_file() and f.name not in ("manifest.json", "config.json", "ledger.sqlite"):
                if f.name in _LEDGER_SIDE or f.name.startswith("."):
                    continue
                files[f.name] = _sha256(f)
        doc = dict(self.config_doc)
        doc["status"] = status
        _write_json_file(self.path / "config.json", doc, replace=True)
        files["config.json"] = _sha256(self.path / "config.json")
        man = {
            "status": status,
            "algorithm": self.algorithm,
            "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "files": files,
            **to_jsonable(info),
            "ledger": _ledger_anchor(self.ledger_path),
        }
        replay = getattr(getattr(self, "_ledger", None), "replay_status", lambda: None)()
        if replay is not None:  # --resume: earlier charges matched, not charged again
            man["resume"] = replay
        _write_json_file(self.path / "manifest.json", _seal_manifest(man))
        self._finished = True
        return self.path / "manifest.json"


def write_artifact(run_dir: Any, name: str, obj: Any, *, overwrite: bool = False) -> Path:
    """Add a named artefact (``audit.json``, ``attack_<name>.json``) to an existing run.

    These are the only files a reader may add to a run (docs/interfaces.md); anything else, or
    replacing an existing artefact without ``overwrite=True``, is refused.
    """
    p = _check_path_arg(run_dir, "run_dir")
    if not is_run_dir(p):
        raise RunDirectoryError(f"run_dir {str(p)!r} is not a run directory (no config.json)")
    if not isinstance(name, str) or not ARTIFACT_PATTERN.match(name):
        raise InvalidParameterError(
            f"artefact name must be audit.json or attack_<name>.json, got {name!r}"
        )
    target = p / name
    if target.exists() and not overwrite:
        raise RunDirectoryError(
            f"{target} already exists; write the result elsewhere with --out, or pass "
            f"--overwrite to replace it"
        )
    _write_json_file(target, obj, replace=overwrite)
    return target


# ----------------------------------------------------------------------------------------------
# Reading (never writes)
# ----------------------------------------------------------------------------------------------


def _dir(path: Any) -> Path:
    p = _check_path_arg(path, "run_dir")
    if not p.is_dir():
        raise RunDirectoryError(f"run_dir must be an existing directory, got {str(p)!r}")
    return p


def read_json(path: Any, name: str) -> Any:
    """``RUN_DIR/name`` parsed as JSON (RunDirectoryError names the file on failure)."""
    f = _dir(path) / name
    from ldp_audit.limits import check_regular_file

    check_regular_file(f, name)  # a FIFO would block the read
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise RunDirectoryError(f"cannot read {f}: {exc}") from None


def read_config(path: Any) -> dict[str, Any]:
    """config.json as a dict (keys: algorithm, config, mechanism, seed, ...)."""
    d = read_json(path, "config.json")
    if not isinstance(d, dict):
        raise RunDirectoryError(f"{Path(path) / 'config.json'} is not a JSON object")
    for k in ("algorithm", "config", "mechanism", "seed"):
        if k not in d:
            raise RunDirectoryError(f"{Path(path) / 'config.json'} lacks the key {k!r}")
    return d


def read_npz(path: Any, name: str, required: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """``RUN_DIR/name`` (npz, pickles refused) as a dict of arrays; ``required`` keys checked."""
    f = _dir(path) / name
    from ldp_audit.limits import check_regular_file

    check_regular_file(f, name)  # a FIFO would block the read
    try:
        with np.load(f, allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as exc:
        raise RunDirectoryError(f"cannot read {f}: {exc}") from None
    except Exception as exc:  # zipfile.BadZipFile and friends
        raise RunDirectoryError(f"cannot read {f}: {type(exc).__name__}: {exc}") from None
    missing = [k for k in required if k not in out]
    if missing:
        raise RunDirectoryError(f"{f} lacks the arrays {missing}")
    return out


def read_manifest(path: Any) -> dict[str, Any] | None:
    """manifest.json, or None for a run written before manifests (or still running)."""
    p = _dir(path)
    if not (p / "manifest.json").exists():
        return None
    return read_json(p, "manifest.json")


def verify_manifest(path: Any) -> dict[str, Any]:
    """Check every file listed in manifest.json against its SHA-256.

    Returns:
        ``{"status": ..., "ok": bool, "changed": [...], "missing": [...], "unlisted": [...]}``
        (``unlisted``: files added later, e.g. named artefacts). ``status`` is "no manifest"
        for runs written before manifests.
    """
    p = _dir(path)
    man = read_manifest(p)
    if man is None:
        return {"status": "no manifest", "ok": False, "changed": [], "missing": [], "unlisted": []}
    if not isinstance(man, dict) or not isinstance(man.get("files", {}), dict):
        raise RunDirectoryError(
            f"{p / 'manifest.json'} is not a manifest (a JSON object with a 'files' object)"
        )
    files = man.get("files", {})
    changed, missing = [], []
    for name, digest in files.items():
        f = p / str(name)
        if not f.exists():
            missing.append(name)
        else:
            try:  # a folder in a file's place, or an unreadable file: changed
                same = f.is_file() and _sha256(f) == digest
            except OSError:
                same = False
            if not same:
                changed.append(name)
    listed = set(files) | {"manifest.json", "ledger.sqlite", *_LEDGER_SIDE}
    unlisted = sorted(f.name for f in p.iterdir() if f.is_file() and f.name not in listed)
    return {
        "status": man.get("status"),
        "ok": not changed and not missing,
        "changed": changed,
        "missing": missing,
        "unlisted": unlisted,
    }


@dataclasses.dataclass
class VerifyResult:
    """What :func:`verify_run` found. ``ok``: every check passed (``problems`` empty);
    ``authenticated``: the ledger's and the manifest's MACs were checked with this process's
    key (else ``notes`` says why not). ``problems`` and ``notes`` name the file they are about.
    """

    path: str
    ok: bool
    problems: list[str]
    notes: list[str]
    authenticated: bool
    status: str | None
    manifest: dict[str, Any]
    anchor: dict[str, Any] | None
    ledger: dict[str, Any] | None
    expect_head: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the report and every reader's ``--json`` carry it)."""
        return to_jsonable(dataclasses.asdict(self))

    def summary(self) -> str:
        """One line: "verified ..." or the first problem."""
        if not self.ok:
            more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            return f"UNVERIFIED: {self.problems[0]}{more}"
        auth = "authenticated" if self.authenticated else "unauthenticated"
        led = self.ledger or {}
        return (
            f"verified ({auth}): every file matches manifest.json; ledger.sqlite "
            f"{led.get('rows')} charges, chain head {led.get('chain_head')}"
        )


def verify_run(path: Any, expect_head: str | None = None, *, full: bool = True) -> VerifyResult:
    """Check a run directory against its manifest before anything reads it (never writes).

    Checks: ``manifest.json`` exists and its MAC (under the ledger key) holds; every file it
    lists has its SHA-256; ``ledger.sqlite`` exists, verifies (``full``: the whole chain and
    every agent's state, else the checks on open) and is the ledger the manifest anchors (same
    ledger id, row count and chain head); ``expect_head`` (an anchor published elsewhere) is a
    head the ledger's chain passes through.

    Args:
        path: the run directory.
        expect_head: 64 hex digits, or None.
        full: walk the whole chain (linear in the rows; default) or only open the ledger.

    Returns:
        A :class:`VerifyResult`; nothing is raised for evidence that does not verify (it is in
        ``problems``).

    Raises:
        RunDirectoryError: ``path`` is not a directory.
        InvalidParameterError: ``expect_head`` is not 64 hex digits.
        KeyFileError: the ledger key exists but is unusable (e.g. readable by others).
        RunDirectoryError: the run holds a FIFO, socket or device (never opened).
    """
    from ldp_audit.accountant.keys import load_key
    from ldp_audit.accountant.ledger import Ledger
    from ldp_audit.errors import LedgerError
    from ldp_audit.limits import check_run_files

    p = _dir(path)
    check_run_files(p, "run directory")  # before any file is opened (a FIFO would block)
    if expect_head is not None:
        if not isinstance(expect_head, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", expect_head):
            raise InvalidParameterError(
                f"expect_head must be a 64-digit hex chain head, got {expect_head!r}"
            )
        expect_head = expect_head.lower()
    problems: list[str] = []
    notes: list[str] = []
    auth_manifest = False
    try:
        man_check = verify_manifest(p)
    except RunDirectoryError as exc:
        man_check = {"status": "unreadable", "ok": False, "changed": [], "missing": []}
        problems.append(f"manifest.json cannot be read: {exc}")
    man = None
    if man_check["status"] == "no manifest":
        problems.append(
            f"{p / 'manifest.json'} is missing: the run did not finish or predates manifests, "
            f"so its files cannot be checked against what it wrote"
        )
    elif man_check["status"] != "unreadable":
        man = read_manifest(p)
    if man is not None and not isinstance(man, dict):
        problems.append(f"{p / 'manifest.json'} is not a JSON object")
        man = None
    for name in man_check.get("changed", []):
        problems.append(f"{p / name} does not match the SHA-256 in manifest.json (changed)")
    for name in man_check.get("missing", []):
        problems.append(f"{p / name} is listed in manifest.json but missing")
    anchor = None
    if man is not None:
        mac = man.get("mac")
        key = load_key(create=False)
        if not isinstance(mac, dict):
            notes.append("manifest.json carries no MAC (written before manifests were keyed)")
        elif key is None or key.id != mac.get("key_id"):
            notes.append(
                f"manifest.json was sealed under key id {mac.get('key_id')}; "
                + ("this process has no ledger key" if key is None else f"this key is {key.id}")
                + ": its MAC cannot be checked"
            )
        else:
            want = key.mac(_manifest_bytes(man)).hex()
            if not hmac.compare_digest(want, str(mac.get("hmac", ""))):
                problems.append(
                    f"{p / 'manifest.json'} does not carry the MAC of key id {key.id}: it was "
                    f"edited after the run wrote it"
                )
            else:
                auth_manifest = True
        anchor = man.get("ledger") if "ledger" in man else None
        if "ledger" not in man:
            notes.append(
                "manifest.json records no ledger anchor (written before anchors): the ledger "
                "is checked on its own"
            )
        elif anchor is not None and not isinstance(anchor, dict):
            problems.append(f"{p / 'manifest.json'}: its ledger anchor is malformed")
            anchor = None
    led_res: dict[str, Any] | None = None
    lp = p / "ledger.sqlite"
    auth_ledger = False
    if not lp.is_file():
        problems.append(f"{lp} is missing: the run's charges cannot be checked")
    else:
        try:
            led = Ledger(str(lp), create=False, readonly=True, verify=True)
        except LedgerError as exc:
            if type(exc).__name__ == "KeyFileError":
                raise
            problems.append(f"{lp}: {exc}")
        else:
            try:
                if full:
                    led_res = led.verify(expect_head=expect_head)
                else:
                    led_res = {"authenticated": led.authenticated, "auth_note": led.auth_note}
                led_res.update(led.anchor())
                auth_ledger = bool(led.authenticated)
                if not led.authenticated:
                    notes.append(f"{lp} is unauthenticated: {led.auth_note}")
                if man is not None and led_res.get("schema_version", 0) >= 3:
                    # every manifest of a keyed ledger is sealed and anchors it: one without
                    # is a stripped one, never an old one
                    lacks = [k for k in ("mac", "ledger") if k not in man]
                    if lacks:
                        problems.append(
                            f"{p / 'manifest.json'} lacks its {' and '.join(lacks)}, which "
                            f"every manifest of a keyed ledger carries (stripped)"
                        )
                if anchor is not None:
                    _check_anchor(lp, anchor, led_res, led, problems)
            except LedgerError as exc:
                problems.append(f"{lp}: {exc}")
            except InvalidParameterError as exc:
                problems.append(f"{lp}: {exc}")
            finally:
                led.close()
    if man is not None and "ledger" in man and man.get("ledger") is None and lp.is_file():
        problems.append(f"{lp} exists but manifest.json records that the run had no ledger")
    return VerifyResult(
        path=str(p),
        ok=not problems,
        problems=problems,
        notes=notes,
        authenticated=auth_ledger and auth_manifest and not problems,
        status=man_check.get("status") if man is not None else None,
        manifest=man_check,
        anchor=anchor,
        ledger=led_res,
        expect_head=expect_head,
    )


def require_verified(
    path: Any,
    *,
    expect_head: str | None = None,
    allow_unverified: bool = False,
    name: str = "RUN_DIR",
) -> VerifyResult:
    """:func:`verify_run`, refusing unverified evidence unless ``allow_unverified``.

    What every reader of a run (``report``, every ``attack --run-dir``) calls before it reads
    anything. With ``allow_unverified`` the result is returned as is: the caller must then say
    so first (:func:`unverified_banner`) and in its JSON (``VerifyResult.to_dict()``).

    Raises:
        RunDirectoryError: the run does not verify (the message names the file and says how
            to read it anyway).
    """
    p = _check_path_arg(path, name)
    from ldp_audit.limits import check_run_files

    check_run_files(p, name)  # a FIFO anywhere in it (config.json too): named, never opened
    if not is_run_dir(p):
        raise RunDirectoryError(
            f"{name} {str(p)!r} is not a run directory ("
            + ("no config.json" if p.is_dir() else "not an existing directory")
            + ")"
        )
    res = verify_run(p, expect_head)
    if not res.ok and not allow_unverified:
        more = f" (and {len(res.problems) - 1} more problems)" if len(res.problems) > 1 else ""
        raise RunDirectoryError(
            f"{name} {str(path)!r} is unverified evidence: {res.problems[0]}{more}. Refusing "
            f"to read it; pass --allow-unverified to read it anyway (the output then says so "
            f"first), or check it with `ldp-audit budget {path} --verify`"
        )
    return res


def unverified_banner(res: VerifyResult) -> str | None:
    """The first line a reader prints when it reads unverified evidence (None: verified)."""
    if res.ok:
        return None
    return f"UNVERIFIED EVIDENCE (read with --allow-unverified): {res.problems[0]}"


def _check_anchor(
    lp: Path, anchor: dict[str, Any], got: dict[str, Any], led: Any, problems: list[str]
) -> None:
    """The ledger must be the one manifest.json anchors: same id, rows and head."""
    if anchor.get("ledger_id") != got.get("ledger_id"):
        problems.append(
            f"{lp} is not the run's ledger: its ledger id {got.get('ledger_id')} differs from "
            f"the id {anchor.get('ledger_id')} that manifest.json records (swapped)"
        )
        return
    for key, what in (("key_id", "key id"), ("meta_digest", "metadata (budget, ids) digest")):
        if key in anchor and anchor.get(key) != got.get(key):
            problems.append(
                f"{lp}: its {what} {got.get(key)} differs from the {anchor.get(key)} that "
                f"manifest.json records (the ledger's metadata was edited)"
            )
    same = anchor.get("chain_head") == got.get("chain_head")
    if same and anchor.get("rows") == got.get("rows"):
        return
    extends = False
    head = anchor.get("chain_head")
    if isinstance(head, str) and re.fullmatch(r"[0-9a-f]{64}", head):
        try:
            led.verify(expect_head=head)
            extends = True
        except Exception:  # noqa: BLE001 - any failure means: does not pass through the head
            extends = False
    if extends:
        problems.append(
            f"{lp} holds {got.get('rows')} charges, manifest.json records "
            f"{anchor.get('rows')}: charges were added after the run finished"
        )
    else:
        problems.append(
            f"{lp} holds {got.get('rows')} charges ending in chain head "
            f"{str(got.get('chain_head'))[:16]}..., manifest.json records {anchor.get('rows')} "
            f"ending in {str(head)[:16]}...: the ledger was rolled back, truncated or rewritten"
        )


# ----------------------------------------------------------------------------------------------
# RunDir: the one typed reader of a run directory
# ----------------------------------------------------------------------------------------------


class RunDir:
    """A run directory, read through its system's contract (never written).

    ``config`` is ``config.json``; :attr:`system` the registered
    :class:`~ldp_audit.systems.System` that wrote it (``config.json``'s ``"algorithm"``);
    :meth:`transcript` what crossed the trust boundary, checked against the system's
    transcript schema; :meth:`secrets` the ground truth, only for scoring (the flag is
    explicit); :meth:`metrics`, :meth:`manifest`, :meth:`verify`.

    Args:
        path: the run directory.

    Raises:
        RunDirectoryError: ``path`` is not a run directory, or its config.json is malformed.
    """

    def __init__(self, path: Any) -> None:
        p = _dir(path)
        if not (p / "config.json").is_file():
            raise RunDirectoryError(f"{str(p)!r} is not a run directory (no config.json)")
        self.path = p
        self.config: dict[str, Any] = read_config(p)
        self._system: Any = None
        self._transcript: dict[str, np.ndarray] | None = None

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r}, algorithm={self.algorithm!r})"

    @property
    def algorithm(self) -> str:
        """``config.json``'s ``"algorithm"``: the name of the system that wrote the run."""
        return str(self.config.get("algorithm"))

    @property
    def seed(self) -> int:
        return int(self.config["seed"])

    @property
    def system(self) -> Any:
        """The registered system that wrote this run.

        Raises:
            RunDirectoryError: no registered system has the run's algorithm (the message names
                it and the registered ones), or its plug-in failed to load.
        """
        if self._system is None:
            from ldp_audit import systems
            from ldp_audit.errors import LdpAuditError

            try:
                self._system = systems.get(self.algorithm)
            except LdpAuditError as exc:
                raise RunDirectoryError(
                    f"{self.path} is a {self.algorithm!r} run, and {exc}"
                ) from None
        return self._system

    @property
    def train_config(self) -> Any:
        """The run's config as its system's config object (validated again)."""
        return self.system.config_from_dict(self.config["config"])

    def commands(self) -> list[str]:
        """The ``ldp-audit`` commands that fit this run (attacks, audit, report)."""
        sysobj = self.system
        p = str(self.path)
        out = [f"ldp-audit attack {name} --run-dir {p}" for name in sysobj.attacks]
        out.append(f"ldp-audit audit --run-dir {p}")
        out.append(f"ldp-audit report {p}")
        return out

    def transcript(self) -> dict[str, np.ndarray]:
        """``transcript.npz`` (pickles refused), checked against the system's schema.

        A run whose schema has no required array may lack the file (a run that released
        nothing): then ``{}``.

        Raises:
            RunDirectoryError: the file is missing or unreadable, or an array is missing or of
                the wrong kind; the message names the array, the run's system and the commands
                that fit the run.
        """
        if self._transcript is None:
            schema = self.system.transcript_schema(self.train_config)
            f = self.path / "transcript.npz"
            if not f.exists():
                if not schema.required:
                    self._transcript = {}
                    return {}
                raise RunDirectoryError(
                    f"{f} is missing (a {self.algorithm} run's transcript holds "
                    f"{', '.join(schema.required)})"
                )
            arrays = read_npz(self.path, "transcript.npz")
            hint = f"the commands for {self.algorithm} runs: " + "; ".join(self.commands())
            schema.check(arrays, where=f"{f} (a {self.algorithm} run)", hint=hint)
            self._transcript = arrays
        return dict(self._transcript)

    def require(self, *names: str, command: str) -> dict[str, np.ndarray]:
        """The transcript, which ``command`` needs to hold ``names`` (else a message naming the
        run's system and the commands that fit it)."""
        tr = self.transcript()
        missing = [n for n in names if n not in tr]
        if missing:
            raise RunDirectoryError(
                f"`{command}` needs the transcript arrays {missing}, but {self.path} is a "
                f"{self.algorithm!r} run whose transcript holds {sorted(tr)}; the commands "
                f"that fit it: " + "; ".join(self.commands())
            )
        return tr

    def secrets(self, *, for_scoring: bool) -> dict[str, np.ndarray]:
        """``secrets.npz``: the ground truth an attack is *scored* against.

        Args:
            for_scoring: must be True: an attack or auditor that reads this to decide what to
                guess is not an attack on what crossed the trust boundary.

        Raises:
            InvalidParameterError: ``for_scoring`` is not True.
            RunDirectoryError: the file is missing or unreadable.
        """
        if for_scoring is not True:
            raise InvalidParameterError(
                f"secrets(for_scoring=...) must be True: the secrets of a run are read only to "
                f"score an attack, never to make its guesses, got {for_scoring!r}"
            )
        if not (self.path / "secrets.npz").exists():
            raise RunDirectoryError(
                f"{self.path / 'secrets.npz'} is missing (needed to score an attack)"
            )
        return read_npz(self.path, "secrets.npz")

    def metrics(self) -> dict[str, Any]:
        """``metrics.json`` as a dict."""
        d = read_json(self.path, "metrics.json")
        if not isinstance(d, dict):
            raise RunDirectoryError(f"{self.path / 'metrics.json'} is not a JSON object")
        return d

    def manifest(self) -> dict[str, Any] | None:
        """``manifest.json``, or None for a run still running or written before manifests."""
        return read_manifest(self.path)

    def verify(self) -> dict[str, Any]:
        """Every file of the manifest against its SHA-256 (see :func:`verify_manifest`)."""
        return verify_manifest(self.path)

    def ledger_charges(self) -> dict[str, int]:
        """Ledger agent -> charges, as the run's ``ledger.sqlite`` records them."""
        from collections import Counter

        from ldp_audit.accountant.ledger import Ledger

        f = self.path / "ledger.sqlite"
        if not f.is_file():
            raise RunDirectoryError(f"{f} is missing")
        led = Ledger(str(f), create=False, readonly=True)  # a reader never writes
        try:
            return dict(Counter(str(r["agent"]) for r in led.records()))
        finally:
            led.close()
