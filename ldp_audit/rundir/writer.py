"""Writing a run: ``RunWriter`` writes it once; ``write_artifact`` adds a reader's named artefact.

:class:`RunWriter` writes ``config.json`` first, the ledger during training, the outputs, and the
sealed manifest last; :func:`write_artifact` adds a named artefact to a finished run.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.rundir.files import (
    canonical_json,
    hold_file,
    one_analysis_writer,
    pin_checked,
    read_config,
    sha256_file,
    to_jsonable,
    unpin_run,
    write_bytes_file,
    write_json_file,
    write_npz_file,
)
from ldp_audit.rundir.paths import (
    ANALYSES_INDEX,
    ARTIFACT_PATTERN,
    LEDGER_SIDE,
    RUN_FILES,
    check_new_dir,
    check_path_arg,
    is_run_dir,
)
from ldp_audit.rundir.seal import seal_analyses, seal_manifest, sealed_sha256
from ldp_audit.validation import check_choice, check_int

__all__ = ["RunWriter", "command_line", "machine", "versions", "write_artifact"]


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


#: the command line of this process when it is the ``ldp-audit`` CLI (set by
#: :func:`command_line`), recorded in a new run's config.json
_COMMAND: list[str] | None = None


@contextlib.contextmanager
def command_line(argv: list[str]) -> Iterator[None]:
    """Within the block, a new run records ``argv`` (the CLI's words, ``ldp-audit`` first) as
    its config.json's ``command``: what was run, for the report's reader."""
    global _COMMAND
    before, _COMMAND = _COMMAND, [str(a) for a in argv]
    try:
        yield
    finally:
        _COMMAND = before


def machine() -> str:
    """The machine a run is made on, in words: architecture, CPUs, operating system (no host
    name)."""
    return f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"


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
        check_choice(mode, "mode", ("new", "overwrite", "resume"))
        if not isinstance(algorithm, str) or not algorithm:
            raise InvalidParameterError(f"algorithm must be a non-empty str, got {algorithm!r}")
        check_int(seed, "seed", minimum=0)
        self.path = check_path_arg(path, "run_dir")
        from ldp_audit.accountant.keys import check_key_outside, load_key

        check_key_outside(self.path)  # the run must never carry its own key
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
        try:  # before the folder is made: a value JSON cannot hold leaves nothing behind
            json.dumps(cfg_doc, allow_nan=False)
        except (TypeError, ValueError) as exc:
            rest = {k: v for k, v in cfg_doc.items() if k not in ("config", "mechanism")}
            where = (  # the first value JSON cannot hold, by its keys
                _unjsonable(cfg_doc["config"], "config")
                or _unjsonable(cfg_doc["mechanism"], "mechanism")
                or _unjsonable(rest, "extra")
                or "a value"
            )
            raise InvalidParameterError(
                f"config, mechanism and extra must hold JSON values (numbers, strings, lists, "
                f"dicts), got {where}: {exc}"
            ) from None
        unpin_run(self.path)  # what a check saw of an earlier run here is not this run
        if mode != "resume":
            check_new_dir(
                self.path, name="run_dir", overwrite=(mode == "overwrite"), can_resume=False
            )
        load_key(create=True)  # a bad ledger key refused before the run folder is touched
        from ldp_audit.accountant.ledger_marks import check_writable

        check_writable(str(self.path / "ledger.sqlite"))  # and marks that cannot be written
        self._held: Any = None  # the ledger's flock while this writer writes the run
        self._wrote: dict[str, str] = {}  # name -> SHA-256 of what write_json / write_npz wrote
        if mode == "resume":
            self._prepare_resume(cfg_doc)
            self.config_doc, self._finished = cfg_doc, False
            _UNFINISHED.add(self)
        else:
            if mode == "overwrite" and self.path.exists():
                if self.ledger_path.is_file():  # not from under a writer of the run
                    held = hold_file(self.ledger_path, f"run {str(self.path)!r}")
                    if held is not None:
                        os.close(held)
                _remove_run(self.path)
            self.path.mkdir(parents=True, exist_ok=True)
            cfg_doc["versions"] = versions()
            cfg_doc["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat()
            cfg_doc["machine"] = machine()
            if _COMMAND is not None:
                cfg_doc["command"] = shlex.join(_COMMAND)
            cfg_doc["status"] = "running"
            self.config_doc, self._finished = cfg_doc, False
            _UNFINISHED.add(self)  # before config.json: a signal inside its write is caught too
            write_json_file(self.path / "config.json", cfg_doc)

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
            if canonical_json(a) != canonical_json(b):
                if isinstance(a, dict) and isinstance(b, dict):
                    diff = sorted(
                        k
                        for k in set(a) | set(b)
                        if canonical_json(a.get(k)) != canonical_json(b.get(k))
                    )
                    what = ", ".join(
                        f"{k}: {canonical_json(a.get(k))[:60]} (run) vs "
                        f"{canonical_json(b.get(k))[:60]} (now)"
                        for k in diff[:8]
                    )
                else:
                    what = f"{canonical_json(a)[:100]} (run) vs {canonical_json(b)[:100]} (now)"
                raise RunDirectoryError(
                    f"--resume: the run in {str(p)!r} has a different {key} ({what}); resume "
                    f"needs the same algorithm, config and seed"
                )
        self._hold()  # two --resume of one run at once: the second refused before any change
        self._check_unfinished()
        # outputs of the interrupted attempt are superseded (the ledger is kept), and so are
        # the analyses of them sealed against its manifest; the manifest first, so that a
        # resume stopped here (Ctrl-C, a kill) leaves an unfinished run, never a sealed
        # manifest over missing files that no later resume accepts
        for name in ("manifest.json", ANALYSES_INDEX, *RUN_FILES):
            if name not in ("config.json", "ledger.sqlite"):
                (p / name).unlink(missing_ok=True)
        for f in p.iterdir():
            if f.is_file() and ARTIFACT_PATTERN.match(f.name):
                f.unlink()
        kept = ("versions", "created", "machine", "command")  # the run's, not this attempt's
        cfg_doc.update({k: old[k] for k in kept if k in old})
        cfg_doc["resumed"] = list(old.get("resumed", [])) + [
            _dt.datetime.now(_dt.timezone.utc).isoformat()
        ]
        cfg_doc["status"] = "running"
        write_json_file(p / "config.json", cfg_doc, replace=True)

    def _check_unfinished(self) -> None:
        """A resume deletes the earlier attempt's outputs and sealed analyses: only a run whose
        own evidence says it stopped may be resumed (session 57: "complete" edited to
        "interrupted" in manifest.json, or the manifest deleted, and a resume deleted the
        sealed audit.json of a finished run and re-sealed it, verified, without the violation).
        A manifest must verify (its MAC under this process's key, every file) and record
        ``interrupted`` or ``failed``; without one, the run must hold no sealed analysis (only
        a finished run's manifest anchors ``analyses.json``)."""
        from ldp_audit.rundir.verify import verify_run

        p = self.path
        if (p / "manifest.json").exists():
            res = verify_run(p)
            unpin_run(p)  # this writer rewrites what the check saw
            if not res.ok:
                raise RunDirectoryError(
                    f"--resume: the run in {str(p)!r} does not verify ({res.problems[0]}); a "
                    f"resume would delete its evidence: check it with `ldp-audit budget {p} "
                    f"--verify`, or start it over (--overwrite, or a new --out)"
                )
            if res.status == "complete":
                raise RunDirectoryError(
                    f"--resume: the run in {str(p)!r} is complete; nothing to resume"
                )
        elif (p / ANALYSES_INDEX).exists():
            raise RunDirectoryError(
                f"--resume: {str(p)!r} holds {ANALYSES_INDEX} but no manifest.json: the run "
                f"finished (only a finished run's analyses are sealed) and its manifest was "
                f"removed; a resume would delete its sealed analyses: start it over "
                f"(--overwrite, or a new --out)"
            )
        elif self.ledger_path.is_file():  # both deleted: its ledger's mark recalls its analyses
            from ldp_audit.accountant.ledger import Ledger
            from ldp_audit.rundir.seal import sealed_by_ledger

            with Ledger(str(self.ledger_path), create=False, readonly=True) as led:
                n = sealed_by_ledger(p, led.anchor()["ledger_id"])
            if n:
                raise RunDirectoryError(
                    f"--resume: the run in {str(p)!r} finished and {n} analyses of it were "
                    f"sealed (its ledger's high-water mark records them), but its manifest.json "
                    f"and {ANALYSES_INDEX} were removed; a resume would seal it again without "
                    f"them: put the run's files back, or start it over (--overwrite, or a new "
                    f"--out)"
                )

    @property
    def ledger_path(self) -> Path:
        return self.path / "ledger.sqlite"

    def _hold(self) -> None:
        """Hold the run's ledger (``flock``) until :meth:`finish`: another process writing this
        run (a second ``--resume`` of it, or ``--overwrite``) is refused (session 55: two
        ``--resume`` at once both replayed and charged, 5,667 charges for 3,000 releases)."""
        if self._held is None and self.ledger_path.is_file():
            fd = hold_file(self.ledger_path, f"run {str(self.path)!r}")
            if fd is not None:  # also released when the writer is dropped unfinished
                self._held = weakref.finalize(self, os.close, fd)

    def open_ledger(self, **kwargs: Any) -> Any:
        """The run's ``ledger.sqlite`` as a ``Ledger`` (created on a new run)."""
        from ldp_audit.accountant.ledger import Ledger

        led = self._ledger = Ledger(str(self.ledger_path), **kwargs)  # closed by finish()
        self._hold()
        if self.mode == "resume":
            # the rerun's charges already in the ledger are matched, never charged twice
            led.begin_replay()
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
        self._wrote[name] = write_json_file(t, obj)
        return t

    def write_npz(self, name: str, arrays: Mapping[str, Any]) -> Path:
        """Write ``name`` (compressed npz, no pickles) once, atomically."""
        t = self._target(name)
        self._wrote[name] = write_npz_file(t, arrays)
        return t

    def finish(self, status: str = "complete", **info: Any) -> Path:
        """Write ``manifest.json`` (status, SHA-256 of every file except the ledger: of a file
        :meth:`write_json` / :meth:`write_npz` wrote, as written; no analysis file this writer
        did not write; the ledger's anchor, a MAC under the ledger key; after a resume, what
        was replayed) and mark ``config.json`` with the status. After this the run is
        read-only for the writer; the ledger :meth:`open_ledger` gave stays open for reads, its
        empty ``ledger.sqlite-journal`` removed (:meth:`Ledger.settle`). A signal's forced exit
        (the CLI's watchdog) waits for it, bounded (:func:`ldp_audit.interrupts.closing`)."""
        check_choice(status, "status", ("complete", "interrupted", "failed"))
        if self._finished:
            raise RunDirectoryError(f"run {str(self.path)!r} is already finished")
        from ldp_audit.interrupts import closing

        with closing():  # its fsyncs take seconds on a loaded disk (train dprl, session 58)
            return self._seal(status, info)

    def _seal(self, status: str, info: dict[str, Any]) -> Path:
        from ldp_audit.accountant.ledger import Ledger

        unpin_run(self.path)  # a check of the running run saw files finish() rewrites
        files = {}
        for f in sorted(self.path.iterdir()):
            if f.is_file() and f.name not in ("manifest.json", "config.json", "ledger.sqlite"):
                if f.name in LEDGER_SIDE or f.name.startswith("."):
                    continue
                # what this writer wrote, as it wrote it (a file swapped since reads as changed);
                # an analysis it did not write (one put into the running run) is left unlisted,
                # so every reader flags it as unsealed (session 56: it was sealed as the run's)
                if f.name in self._wrote or not ARTIFACT_PATTERN.match(f.name):
                    files[f.name] = self._wrote.get(f.name) or sha256_file(f)
        doc = dict(self.config_doc)
        doc["status"] = status
        write_json_file(self.path / "config.json", doc, replace=True)
        files["config.json"] = sha256_file(self.path / "config.json")
        man = {
            "status": status,
            "algorithm": self.algorithm,
            "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "files": files,
            **to_jsonable(info),
        }
        led = getattr(self, "_ledger", None)
        replay = None if led is None else led.replay_status()
        if led is not None:  # the run is finished: no empty journal stays beside its ledger
            led.settle()
        man["ledger"] = None  # the ledger's id, row count, chain head, key id and schema
        if self.ledger_path.exists():
            with Ledger(str(self.ledger_path), create=False, readonly=True) as fresh:
                man["ledger"] = fresh.anchor()
        if replay is not None:  # --resume: earlier charges matched, not charged again
            man["resume"] = replay

        target = self.path / "manifest.json"
        existed = target.exists()
        try:
            write_json_file(target, seal_manifest(man, self.path))
        finally:
            # sealed once it is in place, also when a signal's KeyboardInterrupt came after its
            # rename (during the folder's fsync): a second finish("interrupted") would rewrite
            # config.json under the sealed manifest and the run would fail to verify
            if not existed and target.exists():
                self._finished = True
                _UNFINISHED.discard(self)
                if self._held is not None:
                    self._held()  # closes the descriptor, once
                    self._held = None
        return target


#: the runs this process started and has not finished (weakly held)
_UNFINISHED: weakref.WeakSet[RunWriter] = weakref.WeakSet()


def finish_unfinished(status: str = "interrupted", path: Path | None = None) -> list[Path]:
    """Finish every run this process started and did not finish with ``status`` (best effort);
    the CLI calls it on Ctrl-C / SIGTERM. A trainer marks its run interrupted in its own handler,
    but a signal before that handler is entered (while the ledger opens, or an engine compiles,
    right after ``config.json``) left the folder with no manifest. ``path``: only the run there
    (a plug-in trainer that raised). Returns the runs it finished."""
    done = []
    for w in [w for w in _UNFINISHED if path is None or w.path.resolve() == path.resolve()]:
        _UNFINISHED.discard(w)
        if (w.path / "config.json").is_file():  # not removed by its own failure path
            with contextlib.suppress(Exception):
                w.finish(status=status)
                done.append(w.path)
    return done


def write_artifact(
    run_dir: Any, name: str, obj: Any, *, overwrite: bool = False, seal: bool = True
) -> Path:
    """Add a named artefact (``audit.json``, ``attack_<name>.json``) to an existing run.

    These are the only files a reader may add to a run (docs/interfaces.md); anything else, or
    replacing an existing artefact without ``overwrite=True``, is refused. A finished run's
    artefact is sealed when written (``analyses.json``, :mod:`ldp_audit.rundir.seal`): under
    the ledger key and chained to ``manifest.json``, so that an edit is refused by every reader.
    ``seal=False``: an analysis of evidence that did not verify (read with
    ``--allow-unverified``) is written unsealed, so that every reader flags it.
    """
    p = check_path_arg(run_dir, "run_dir")
    if not is_run_dir(p):
        raise RunDirectoryError(f"run_dir {str(p)!r} is not a run directory (no config.json)")
    from ldp_audit.accountant.keys import check_key_outside

    check_key_outside(p)  # before anything is written
    if not isinstance(name, str) or not ARTIFACT_PATTERN.match(name):
        raise InvalidParameterError(
            f"artefact name must be audit.json or attack_<name>.json, got {name!r}"
        )
    with one_analysis_writer(p):
        return _write_sealed(p, name, obj, overwrite, seal)


def _write_sealed(p: Path, name: str, obj: Any, overwrite: bool, seal: bool) -> Path:
    target = p / name
    if target.exists() and not overwrite:
        raise RunDirectoryError(
            f"{target} already exists; write the result elsewhere with --out, or pass "
            f"--overwrite to replace it"
        )
    earlier = target.read_bytes() if overwrite and target.is_file() else None
    try:
        try:
            digest = write_json_file(target, obj, replace=overwrite)
        except RunDirectoryError:  # refused, or failed before its rename: nothing put in place
            seal = False
            raise
        pin_checked(None, {target: digest})  # this process's readers read what it wrote
        for w in [w for w in _UNFINISHED if w.path.resolve() == p.resolve()]:
            w._wrote[name] = digest  # a run this process still writes: its manifest lists it
        if seal:
            seal_analyses(p, [name])  # under the ledger key, chained to the run's manifest
    except BaseException:
        # Ctrl-C, SIGTERM (also one right after the rename), a full disk: the artefact is left
        # as the index seals it (the earlier one put back, a new one removed; kept once
        # sealed), never one every reader refuses
        with contextlib.suppress(Exception):
            if seal and sealed_sha256(p, name) != sha256_file(target):
                if earlier is None:
                    target.unlink()
                else:
                    write_bytes_file(target, earlier, replace=True)
        raise
    return target


def _remove_run(p: Path) -> None:
    """Delete the earlier run ``p``: its manifest first and its config.json last, so that one
    interrupted meanwhile (Ctrl-C, a kill) reads as an unfinished run that ``--overwrite``
    replaces (session 58: a single ``rmtree`` stopped after config.json left a folder every
    later ``--overwrite`` refused as no run)."""
    last = p / "config.json"
    for f in sorted(p.iterdir(), key=lambda f: (f.name != "manifest.json", f == last)):
        if f.is_dir() and not f.is_symlink():
            shutil.rmtree(f)
        else:
            f.unlink()
    p.rmdir()


def _unjsonable(v: Any, at: str) -> str | None:
    """``at`` and the keys down to the first value in ``v`` JSON cannot hold (None: none)."""
    if isinstance(v, dict | list):
        items = v.items() if isinstance(v, dict) else enumerate(v)
        return next((p for k, x in items if (p := _unjsonable(x, f"{at}[{k!r}]"))), None)
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError):
        return at
    return None
