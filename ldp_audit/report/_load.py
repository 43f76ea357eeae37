"""Load and validate a run directory (layout in docs/interfaces.md, "Run directory").

Every file is checked before anything is rendered: a missing required file or a malformed one
raises :class:`~ldp_audit.errors.RunDirectoryError` naming the file and what is wrong, so a
report is never silently incomplete. Optional parts (``audit.json``, ``attack_*.json``,
``secrets.npz``) are recorded as absent and the report says "not run" for them.

Any system's run loads: ``config.json``, ``ledger.sqlite`` and ``metrics.json`` are required
of every run (the run-directory contract). A system's own files (PGC-A3C's ``transcript.npz`` and
``model.npz``, ...) are read and checked by its report sections (:mod:`ldp_audit.report.plugin`),
which refuse a malformed one the same way. Audits and attacks written elsewhere (an audit's
``--json`` output, an attack's ``--out``) are read from the ``extra`` folders or files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ldp_audit.audit.results import VERDICT_KINDS
from ldp_audit.errors import RunDirectoryError
from ldp_audit.rundir.files import read_json
from ldp_audit.rundir.paths import json_files
from ldp_audit.rundir.reader import RunDir

#: Files every run of any system has (the run-directory contract) and the core report cannot be
#: built without (a system's sections may need more).
REQUIRED_FILES = ("config.json", "ledger.sqlite", "metrics.json")
#: Files a report uses when present and reports as "not run" / "absent" otherwise.
OPTIONAL_FILES = ("secrets.npz", "audit.json", "attack_*.json")


@dataclass(frozen=True)
class RunData:
    """Everything a run directory holds, validated.

    Attributes:
        path: the run directory.
        config: the parsed ``config.json`` (keys ``algorithm``, ``config``, ``mechanism``,
            ``seed``, ``versions``, ``created``).
        ledger_path: path of ``ledger.sqlite``.
        metrics: the parsed ``metrics.json``.
        has_secrets: whether ``secrets.npz`` is present (the core never reads it).
        audits: the entries of ``audit.json``, or None when the audit was not run.
        attacks: ``{name: dict}`` from ``attack_<name>.json`` (empty when none was run).
    """

    path: Path
    config: dict[str, Any]
    ledger_path: Path
    metrics: dict[str, Any]
    has_secrets: bool = False
    audits: list[dict[str, Any]] | None = None
    attacks: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: tuple[Path, ...] = ()
    """Folders or files of analysis outputs written outside the run (read for audits/attacks)."""
    sources: dict[str, str] = field(default_factory=dict)
    """Where each audit/attack came from: ``{"audit.json": path, "attack_<name>": path}``."""

    @property
    def algorithm(self) -> str:
        """config.json's ``algorithm``."""
        return str(self.config["algorithm"])


def missing_files(path: Path, config: dict[str, Any], required: tuple[str, ...]) -> list[str]:
    """The files of ``required`` that the run in ``path`` lacks: a run that did not complete
    (status interrupted, failed or running: Ctrl-C, a crash) may lack those written at the end
    and still reports (ledger, status), saying what is missing; any other run lacking one, or
    its ledger, is refused (RunDirectoryError naming the files)."""
    missing = [f for f in required if not (path / f).is_file()]
    partial = config.get("status") in ("interrupted", "failed", "running")
    if missing and (not partial or "ledger.sqlite" in missing):
        raise RunDirectoryError(
            f"{path}: incomplete run directory, missing {', '.join(missing)} "
            f"(a {config['algorithm']} run has {', '.join(required)})"
        )
    return missing


def _err(path: Path, what: str) -> RunDirectoryError:
    return RunDirectoryError(f"{path}: {what}")


def _check_audits(path: Path, a: Any) -> list[dict[str, Any]]:
    if not isinstance(a, list) or not all(isinstance(e, dict) for e in a):
        raise _err(path, "must hold a JSON list of AuditResult.to_dict() objects")
    for i, e in enumerate(a):
        vs = e.get("verdicts")
        if not (isinstance(vs, dict) and vs and set(vs) <= set(VERDICT_KINDS)) or not all(
            isinstance(v, dict) for v in vs.values()
        ):
            vs = None  # refused below, after the entry's own numbers
        for where, d in [("", e), *((f"verdict {k}: ", v) for k, v in (vs or {}).items())]:
            for k in ("epsilon_lower_bound", "claimed_epsilon"):
                v = d.get(k)
                if v == "inf":  # AuditResult.to_dict() writes infinities as strings
                    continue
                if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
                    raise _err(
                        path, f"entry {i}: {where}'{k}' must be a number or \"inf\", got {v!r}"
                    )
        if vs is None:
            raise _err(path, f"entry {i}: 'verdicts' must map {VERDICT_KINDS} to verdict objects")
    return a


def _check_attack(path: Path, a: Any) -> dict[str, Any]:
    if not isinstance(a, dict):
        raise _err(
            path, f"must hold a JSON object (AttackResult.to_dict()), got {type(a).__name__}"
        )
    v = a.get("accuracy")
    if "accuracy" not in a or (
        v is not None
        and (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 1)
    ):
        raise _err(path, f"'accuracy' must be a number in [0, 1] or null, got {v!r}")
    return a


def _classify(obj: Any) -> str | None:
    """ "audit" (an AuditResult dict or a list of them), "attack" (an AttackResult dict) or None."""
    if isinstance(obj, dict) and "epsilon_lower_bound" in obj and "claimed_epsilon" in obj:
        return "audit"
    if isinstance(obj, list) and obj and all(_classify(e) == "audit" for e in obj):
        return "audit"
    if isinstance(obj, dict) and "accuracy" in obj:
        return "attack"
    return None


def _read_extra(
    paths: tuple[Path, ...], seen: set[Path]
) -> tuple[list[tuple[Path, list[dict[str, Any]]]], list[tuple[Path, dict[str, Any]]]]:
    """Audits and attacks from extra folders (their audit.json, attack_*.json and any other
    JSON file holding an audit or attack result) and extra files; a file in ``seen`` (resolved:
    the run's own, or one named twice) is read once, never counted again."""
    audits: list[tuple[Path, list[dict[str, Any]]]] = []
    attacks: list[tuple[Path, dict[str, Any]]] = []
    for base in paths:
        if base.is_dir():
            strict = {"audit.json"} | {f.name for f in base.glob("attack_*.json")}
        elif base.is_file():
            strict = {base.name}
        else:
            raise RunDirectoryError(
                f"extra must be existing folders or JSON files, got {str(base)!r} (not found)"
            )
        for f in json_files(base):
            if f.resolve() in seen:  # `report RUN RUN` counted the run's audit twice (s53)
                continue
            seen.add(f.resolve())
            obj = read_json(f.parent, f.name)
            kind = _classify(obj)
            if kind is None:
                if f.name in strict:
                    raise _err(f, "holds neither an audit result nor an attack result")
                continue  # e.g. a report.json or config.json in the same folder
            if kind == "audit":
                audits.append((f, _check_audits(f, obj if isinstance(obj, list) else [obj])))
            else:
                attacks.append((f, _check_attack(f, obj)))
    return audits, attacks


def load_run(run_dir: str | Path, extra: list[str | Path] | tuple[str | Path, ...] = ()) -> RunData:
    """Load and validate a run directory of any system (the files every run has).

    Args:
        run_dir: the directory a trainer wrote (see docs/interfaces.md).
        extra: folders or JSON files of analyses written outside the run (an audit's
            ``--json`` output, an attack's ``--out``); their audits and attacks are reported
            beside the run's own.

    Returns:
        The validated :class:`RunData`.

    Raises:
        RunDirectoryError: the directory or a required file is missing, or a file is malformed;
            the message names the file and the problem.
    """
    rd = RunDir(run_dir)
    path, config = rd.path, rd.config
    missing = missing_files(path, config, REQUIRED_FILES)
    metrics = rd.metrics() if (path / "metrics.json").is_file() else {}
    with open(path / "ledger.sqlite", "rb") as fh:
        head = fh.read(16)
    if head != b"SQLite format 3\x00":
        raise _err(path / "ledger.sqlite", "is not an SQLite database")
    sources: dict[str, str] = {}
    audits = None
    if (path / "audit.json").is_file():
        audits = _check_audits(path / "audit.json", rd.json("audit.json"))
        sources["audit.json"] = str(path / "audit.json")
    attacks: dict[str, dict[str, Any]] = {}
    for f in sorted(path.glob("attack_*.json")):
        name = f.stem[len("attack_") :]
        attacks[name] = _check_attack(f, rd.json(f.name))
        sources[f"attack_{name}"] = str(f)
    extra_paths = tuple(Path(e) for e in extra)
    sources["missing"] = ", ".join(missing)
    ex_audits, ex_attacks = _read_extra(extra_paths, {f.resolve() for f in path.glob("*.json")})
    for f, entries in ex_audits:
        audits = (audits or []) + [dict(e, source=str(f)) for e in entries]
        sources[str(f)] = str(f)
    for f, a in ex_attacks:
        base = str(a.get("attack") or f.stem.removeprefix("attack_"))
        name, k = base, 2
        while name in attacks:
            name, k = f"{base} ({f.name})" if k == 2 else f"{base} ({f.name}, {k})", k + 1
        attacks[name] = a
        sources[f"attack_{name}"] = str(f)
    return RunData(
        path=path,
        config=config,
        ledger_path=path / "ledger.sqlite",
        metrics=metrics,
        has_secrets=(path / "secrets.npz").is_file(),
        audits=audits,
        attacks=attacks,
        extra=extra_paths,
        sources=sources,
    )


def one_run_audit_documents(
    run_dir: str | Path, extra: list[str | Path] | tuple[str | Path, ...] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The one-run audit results a report section shows, as ``(path, document)``: the run's own
    ``attack_membership.json`` and every JSON file (or every ``*.json`` in a folder) of
    ``extra`` whose ``attack`` starts with ``one-run``. Files that are missing or not JSON are
    skipped (a report shows what exists)."""
    cands = [Path(run_dir) / "attack_membership.json"]
    for e in extra or []:
        cands.extend(json_files(Path(e)))
    out: list[tuple[str, dict[str, Any]]] = []
    firsts: dict[Path, Path] = {}  # each file once (`report RUN RUN`), by its first name
    for f in [firsts.setdefault(f.resolve(), f) for f in cands if f.resolve() not in firsts]:
        try:
            d = read_json(f.parent, f.name)
        except RunDirectoryError:
            continue
        if isinstance(d, dict) and str(d.get("attack", "")).startswith("one-run"):
            out.append((str(f), d))
    return out
