"""How a run directory's files are written, hashed and read: the JSON convention, atomic
writes, and the plain readers (:func:`read_config`, :func:`read_json`, :func:`read_npz`, pickles
refused, and :func:`read_manifest`: one file each, named on failure).

JSON: infinities are the strings ``"inf"`` / ``"-inf"``, NaN is null (never for "never")
(:func:`json_number`, :func:`to_jsonable`). Every file is written atomically (a temporary file,
fsync, rename, fsync of the folder) and, unless told otherwise, only once. A manifest's MAC
covers its canonical JSON (:func:`manifest_bytes`).

Every reader of a run's file reads it once (:func:`read_checked`) and parses those bytes: when a
check in this process hashed the file (``verify_run`` hashes every file of a run it checks, the
toolkit what it seals, ``report`` the EXTRA files whose seal it checks), the bytes read must
have the SHA-256 the check saw, and a file that appeared in a verified run since is refused, so
that a file swapped between the check and the read is never parsed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import io
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.limits import check_regular_file
from ldp_audit.rundir.paths import check_path_arg

__all__ = ["canonical_json", "json_number", "sha256_file", "to_jsonable", "write_json_file"]


def json_number(v: float) -> float | str | None:
    """One float as JSON: finite as is, +-inf as "inf"/"-inf", NaN as null."""
    v = float(v)
    if math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def check_hex64(value: Any, name: str, what: str) -> str | None:
    """``value``, 64 hex digits naming a ``what`` (a chain head, a run root), in lower case
    (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise InvalidParameterError(f"{name} must be a 64-digit hex {what}, got {value!r}")
    return value.lower()


def json_real(v: Any) -> float | None:
    """One number read back from a run's JSON (the inverse of :func:`json_number`): a float for
    numbers, numpy scalars and "inf", None for anything else (a run's JSON is read, never
    trusted)."""
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity", "+inf"):
        return math.inf
    return None


def fmt_number(v: Any, nd: int = 3, *, none: str = "-", nan: str = "-", fmt: str = "g") -> str:
    """``v`` with ``nd`` digits (``fmt``: ``g`` or ``f``): ``inf`` for an infinity (or the
    string "inf"), ``none`` for null, ``nan`` for NaN; another string as it is."""
    if v is None:
        return none
    if isinstance(v, str):
        return v
    f = float(v)
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return nan if math.isnan(f) else f"{f:.{nd}{fmt}}"


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


def sha256_file(f: Path) -> str:
    """SHA-256 (hex) of a run file (a FIFO or device is refused, never opened)."""
    check_regular_file(f, "run file")  # a FIFO would block the hash
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


#: the SHA-256 of the bytes a check in this process saw, by file (:func:`_key`), and the runs
#: ``verify_run`` checked as a whole (a file that appears in one since was not checked)
_CHECKED: dict[str, str] = {}
_VERIFIED_RUNS: set[str] = set()


def _key(f: Path | str) -> str:
    """``f`` with its folder resolved (a swapped link to the file is read as what it is)."""
    return os.path.join(os.path.realpath(os.path.dirname(f)), os.path.basename(f))


def pin_checked(run: Path | None, digests: Mapping[Path, str]) -> None:
    """Record what a check saw: the SHA-256 of each of ``digests``' files; with ``run``, the
    whole run was checked and its earlier records are dropped (``verify_run``)."""
    if run is not None:
        unpin_run(run)
        _VERIFIED_RUNS.add(os.path.realpath(run))
    _CHECKED.update({_key(f): d for f, d in digests.items()})


def unpin_run(run: Path) -> None:
    """Forget what checks saw of ``run`` (a writer starts or finishes it)."""
    root = os.path.realpath(run)
    _VERIFIED_RUNS.discard(root)
    for k in [k for k in list(_CHECKED) if k.startswith(root + os.sep)]:  # (other threads)
        del _CHECKED[k]


def checked_sha256(f: Path) -> str:
    """The SHA-256 of ``f`` as a check in this process saw it (what :func:`read_checked` will
    let a reader parse), else of its bytes now."""
    return _CHECKED.get(_key(f)) or sha256_file(f)


def read_checked(f: Path, name: str) -> bytes:
    """The bytes of the run file ``f`` (named ``name`` in errors), read once: a reader parses
    these bytes and no others. When a check in this process hashed ``f``, they must be the bytes
    it saw; a file in a verified run that the check did not see is refused.

    Raises:
        RunDirectoryError: ``f`` is a FIFO or device, changed since it was checked, or appeared
            in a verified run since.
        OSError: ``f`` cannot be read (the caller names it).
    """
    check_regular_file(f, name)
    data = f.read_bytes()
    k = _key(f)
    want = _CHECKED.get(k)
    if want is None:
        if any(k.startswith(r + os.sep) for r in _VERIFIED_RUNS):
            raise RunDirectoryError(
                f"{f} was not in the run when it was verified (added since): refusing to read a "
                f"file no check saw; verify the run again"
            )
        return data
    if hashlib.sha256(data).hexdigest() != want:
        raise RunDirectoryError(
            f"{f} changed after it was verified (its bytes no longer have the SHA-256 "
            f"{want[:16]}... the check saw): refusing to read bytes that were not verified; "
            f"verify the run again"
        )
    return data


@contextlib.contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` (which must exist) for the ``with`` block: the
    writers that append to a run's index, or move a ledger's high-water mark, never lose each
    other's update."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def one_analysis_writer(run: Path) -> contextlib.AbstractContextManager[None]:
    """The ``with`` block of one writer of ``run``'s analysis files at a time (an exclusive
    ``flock`` on its ``config.json``, waited for; the index's own lock is the folder's): a
    check for an earlier file, the write, its seal and its undo are one step (session 58: two
    ``audit --run-dir RUN --overwrite`` at once, one exit 0 and one refused, whose undo put
    the earlier ``audit.json`` back over the sealed one: the run no longer verified)."""
    check_regular_file(run / "config.json", "config.json")  # never a FIFO's open
    return locked_folder(run / "config.json")


def hold_file(path: Path, who: str) -> int | None:
    """An exclusive ``flock`` on the existing file ``path``, taken without waiting and held
    until the returned descriptor is closed (or the process ends): a second holder is refused
    naming ``who``; None on a file system without ``flock`` (best effort there). ``RunWriter``
    holds its run's ledger this way (SQLite's own locks are POSIX record locks, independent of
    ``flock``)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunDirectoryError(
            f"{who} is being written by another process (its {path.name} is held; or by an "
            f"unfinished writer of this process: finish or close it first): wait for it to end, "
            f"or stop it, before writing this run"
        ) from None
    except OSError:  # no flock here (some network or FUSE file systems)
        os.close(fd)
        return None
    except BaseException:  # a signal's KeyboardInterrupt right after the lock: not left held
        os.close(fd)  # by a descriptor no one can close (the run refused until the process ends)
        raise
    return fd


def _fsync_dir(p: Path) -> None:
    with contextlib.suppress(OSError):  # a platform without directory fsync: best effort
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def create_once(path: Path, tmp: Path, data: bytes, mode: int, *, rename: bool = False) -> None:
    """Create ``path`` holding ``data`` without ever exposing a partial file: written to the new
    file ``tmp`` (``mode``), synced and hard-linked into place; a ``path`` another process
    created meanwhile is kept (theirs wins). ``rename``: where hard links fail, rename ``tmp``
    into place if ``path`` is still missing. ``tmp`` is removed; the folder synced."""
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:
            if not rename:
                raise
            if not path.exists():
                os.rename(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    _fsync_dir(path.parent)


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
        if replace:
            os.replace(tmp, target)
        else:  # linked, never renamed over a file another writer created meanwhile
            try:
                os.link(tmp, target)
            except FileExistsError:
                raise
            except OSError:  # no hard links here: the name claimed with O_EXCL, then filled
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
                os.replace(tmp, target)
    except FileExistsError:
        raise RunDirectoryError(
            f"{target} was created by another writer meanwhile; a run directory's files are "
            f"written once"
        ) from None
    except OSError as exc:  # a full or read-only file system: named, not a bug
        raise RunDirectoryError(f"cannot write {target}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(target.parent)


def write_json_file(target: Path, obj: Any, *, replace: bool = False) -> str:
    """Write ``obj`` as JSON to ``target`` atomically (once, unless ``replace``); returns the
    SHA-256 of the bytes written."""
    text = json.dumps(to_jsonable(obj), indent=1, allow_nan=False)  # ASCII: its bytes as is
    _atomic_write(target, lambda t: t.write_text(text), replace=replace)
    return hashlib.sha256(text.encode()).hexdigest()


def write_bytes_file(target: Path, data: bytes, *, replace: bool = False) -> None:
    """Write ``data`` to ``target`` atomically (once, unless ``replace``)."""
    _atomic_write(target, lambda t: t.write_bytes(data), replace=replace)


def write_npz_file(target: Path, arrays: Mapping[str, Any], *, replace: bool = False) -> str:
    """Write ``arrays`` as a compressed npz to ``target`` atomically (once, unless
    ``replace``); returns the SHA-256 of the bytes written."""
    arrs = {k: np.asarray(v) for k, v in arrays.items()}
    digest = ""

    def w(t: Path) -> None:
        nonlocal digest
        with open(t, "wb") as fh:
            np.savez_compressed(fh, **arrs)
        digest = sha256_file(t)

    _atomic_write(target, w, replace=replace)
    return digest


def canonical_json(obj: Any) -> str:
    """Canonical JSON (sorted keys, the project convention) of what a MAC or hash covers."""
    return json.dumps(to_jsonable(obj), sort_keys=True)


def manifest_bytes(man: Mapping[str, Any]) -> bytes:
    """What a manifest's MAC covers: every key but ``"mac"``, canonical JSON."""
    body = {k: v for k, v in man.items() if k != "mac"}
    return b"ldp-audit manifest v1|" + canonical_json(body).encode()


def manifest_mac_ok(man: Mapping[str, Any], key: Any) -> bool:
    """Whether ``man`` carries ``key``'s MAC over :func:`manifest_bytes` (its key id and HMAC)."""
    mac = man.get("mac")
    return (
        isinstance(mac, dict)
        and mac.get("key_id") == key.id
        and hmac.compare_digest(key.mac(manifest_bytes(man)).hex(), str(mac.get("hmac", "")))
    )


def existing_run_dir(path: Any) -> Path:
    """``path`` checked as a path argument and an existing folder (RunDirectoryError else)."""
    p = check_path_arg(path, "run_dir")
    if not p.is_dir():
        raise RunDirectoryError(f"run_dir must be an existing directory, got {str(p)!r}")
    return p


def read_json(path: Any, name: str) -> Any:
    """``RUN_DIR/name`` parsed as JSON (RunDirectoryError names the file and the problem;
    NaN/Infinity are accepted: metrics legitimately hold an infinite FST)."""
    f = existing_run_dir(path) / name  # a FIFO: refused by read_checked
    try:
        text = read_checked(f, name).decode("utf-8")
    except OSError as exc:
        raise RunDirectoryError(f"{f}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise RunDirectoryError(f"{f}: is not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunDirectoryError(
            f"{f}: is not valid JSON ({exc.msg} at line {exc.lineno})"
        ) from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, a 100,000-deep array
        raise RunDirectoryError(f"{f}: cannot be read as JSON ({type(exc).__name__})") from None


def read_config(path: Any) -> dict[str, Any]:
    """config.json as a dict (keys: algorithm, config, mechanism, seed, ...), each checked."""
    d, f = read_json(path, "config.json"), Path(path) / "config.json"

    def bad(what: str) -> RunDirectoryError:
        return RunDirectoryError(f"{f}: {what}")

    if not isinstance(d, dict):
        raise bad(f"must hold a JSON object, got {type(d).__name__}")
    missing = [k for k in ("algorithm", "config", "mechanism", "seed") if k not in d]
    if missing:
        raise bad(f"missing key(s) {', '.join(missing)}")
    if not isinstance(d["algorithm"], str):
        raise bad(f"'algorithm' must be a string, got {d['algorithm']!r}")
    if not isinstance(d["config"], dict):
        raise bad(f"'config' must be an object, got {type(d['config']).__name__}")
    mech = d["mechanism"]  # null: a system of several mechanisms
    if mech is not None and (not isinstance(mech, dict) or not isinstance(mech.get("name"), str)):
        raise bad(f"'mechanism' must be an object with a string 'name', got {mech!r}")
    if isinstance(d["seed"], bool) or not isinstance(d["seed"], int):
        raise bad(f"'seed' must be an integer, got {d['seed']!r}")
    if not isinstance(d.get("versions", {}), dict):
        raise bad(f"'versions' must be an object, got {type(d['versions']).__name__}")
    return d


def read_npz(path: Any, name: str, required: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """``RUN_DIR/name`` (npz, pickles refused) as a dict of arrays; ``required`` keys checked."""
    f = existing_run_dir(path) / name  # a FIFO: refused by read_checked
    try:
        data = read_checked(f, name)
    except OSError as exc:
        raise RunDirectoryError(f"cannot read {f}: {exc}") from None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
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
    p = existing_run_dir(path)
    return read_json(p, "manifest.json") if (p / "manifest.json").exists() else None
