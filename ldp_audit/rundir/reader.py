"""Reading a run (never writes): ``RunDir``, the one typed reader.

The plain readers (:func:`~ldp_audit.rundir.files.read_config`, ``read_json``, ``read_npz``,
``read_manifest``) are in :mod:`ldp_audit.rundir.files`; :class:`RunDir` reads a run
through the contract of the system that wrote it (its config, its transcript checked against
the system's schema, its secrets only for scoring). A reader checks the run against its
manifest first (:func:`ldp_audit.rundir.verify.require_verified`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, LdpAuditError, RunDirectoryError
from ldp_audit.rundir.files import existing_run_dir, read_config, read_json, read_manifest, read_npz

__all__ = ["RunDir"]


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
        p = existing_run_dir(path)
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
    def system(self) -> Any:
        """The registered system that wrote this run.

        Raises:
            RunDirectoryError: no registered system has the run's algorithm (the message names
                it and the registered ones), or its plug-in failed to load.
        """
        if self._system is None:
            from ldp_audit import systems

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
        from ldp_audit.systems import SystemSpec

        out = [f"ldp-audit attack {name} --run-dir {p}" for name in sysobj.attacks]
        if not (isinstance(sysobj, SystemSpec) and sysobj.targets is None):  # opacus: none
            out.append(f"ldp-audit audit --run-dir {p}")
        out.append(f"ldp-audit report {p}")
        return out

    def transcript(self, schema: Any = None) -> dict[str, np.ndarray]:
        """``transcript.npz`` (pickles refused), checked against the system's schema.

        Args:
            schema: check against this :class:`~ldp_audit.systems.TranscriptSchema` instead
                (the arrays a reader of several systems' runs needs); the run's system is then
                not looked up, so a run of an unregistered system reads too.

        A run whose schema has no required array may lack the file (a run that released
        nothing): then ``{}``.

        Raises:
            RunDirectoryError: the file is missing or unreadable, or an array is missing or of
                the wrong kind; the message names the array, the run's system and (the system's
                schema) the commands that fit the run.
        """
        if schema is None and self._transcript is not None:
            return dict(self._transcript)
        own = schema is None
        schema = self.system.transcript_schema(self.train_config) if own else schema
        f = self.path / "transcript.npz"
        if not f.exists():
            if schema.required:
                raise RunDirectoryError(
                    f"{f} is missing (a {self.algorithm} run's transcript holds "
                    f"{', '.join(schema.required)})"
                )
            arrays: dict[str, np.ndarray] = {}
        else:
            arrays = read_npz(self.path, "transcript.npz")
            cmds = "; ".join(self.commands()) if own else ""
            hint = f"the commands for {self.algorithm} runs: {cmds}" if own else ""
            schema.check(arrays, where=f"{f} (a {self.algorithm} run)", hint=hint)
        if own:
            self._transcript = arrays
        return dict(arrays)

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

    def secrets(self, *names: str, for_scoring: bool) -> dict[str, np.ndarray]:
        """``secrets.npz``: the ground truth an attack is *scored* against.

        Args:
            names: arrays the file must hold.
            for_scoring: must be True: an attack or auditor that reads this to decide what to
                guess is not an attack on what crossed the trust boundary.

        Raises:
            InvalidParameterError: ``for_scoring`` is not True.
            RunDirectoryError: the file is missing or unreadable, or lacks one of ``names``.
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
        return read_npz(self.path, "secrets.npz", names)

    def metrics(self) -> dict[str, Any]:
        """``metrics.json`` as a dict."""
        d = read_json(self.path, "metrics.json")
        if not isinstance(d, dict):
            f = self.path / "metrics.json"
            raise RunDirectoryError(f"{f}: must hold a JSON object, got {type(d).__name__}")
        return d

    def json(self, name: str) -> Any:
        """The run's JSON file ``name`` (an analysis such as ``attack_<name>.json``), parsed."""
        return read_json(self.path, name)

    def arrays(self, name: str, *required: str) -> dict[str, np.ndarray]:
        """The run's npz file ``name`` (``model.npz``, ...; pickles refused) holding ``required``.

        Raises:
            InvalidParameterError: ``name`` is ``secrets.npz`` (read it with :meth:`secrets`).
            RunDirectoryError: the file is missing or unreadable, or lacks a required array.
        """
        if name == "secrets.npz":
            raise InvalidParameterError("secrets.npz is read with RunDir.secrets(for_scoring=True)")
        return read_npz(self.path, name, required)

    def manifest(self) -> dict[str, Any] | None:
        """``manifest.json``, or None for a run still running or written before manifests."""
        return read_manifest(self.path)

    def verify(self) -> dict[str, Any]:
        """Every file of the manifest against its SHA-256 (see
        :func:`~ldp_audit.rundir.verify.verify_manifest`)."""
        from ldp_audit.rundir.verify import verify_manifest

        return verify_manifest(self.path)

    def ledger_charges(self) -> dict[str, int]:
        """Ledger agent -> charges, as the run's ``ledger.sqlite`` records them."""
        from collections import Counter

        from ldp_audit.accountant.ledger import Ledger

        f = self.path / "ledger.sqlite"
        if not f.is_file():
            raise RunDirectoryError(f"{f} is missing")
        with Ledger(str(f), create=False, readonly=True) as led:  # a reader never writes
            return dict(Counter(str(r["agent"]) for r in led.records()))
