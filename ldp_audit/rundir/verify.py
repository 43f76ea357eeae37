"""Checking a run against its manifest before anything reads it (never writes).

:func:`verify_manifest` checks every listed file's SHA-256; :func:`verify_run` also the
manifest's MAC, the ledger (its chain, and that it is the ledger the manifest anchors) and an
``expect_head`` published elsewhere; :func:`require_verified` is what every reader calls first,
refusing unverified evidence unless told otherwise (:func:`unverified_banner` then says so).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ldp_audit.errors import InvalidParameterError, LedgerError, RunDirectoryError
from ldp_audit.limits import check_regular_file, check_run_files, is_run_like
from ldp_audit.rundir.files import (
    check_hex64,
    checked_sha256,
    existing_run_dir,
    manifest_mac_ok,
    pin_checked,
    read_manifest,
    sha256_file,
    to_jsonable,
)
from ldp_audit.rundir.paths import (
    ANALYSES_INDEX,
    LEDGER_SIDE,
    TEMP_FILE,
    check_path_arg,
    is_run_dir,
)

__all__ = [
    "VerifyResult",
    "require_verified",
    "unverified_banner",
    "verify_manifest",
    "verify_run",
]


def verify_manifest(path: Any) -> dict[str, Any]:
    """Check every file listed in manifest.json against its SHA-256.

    Returns:
        ``{"status": ..., "ok": bool, "changed": [...], "missing": [...], "unlisted": [...]}``
        (``unlisted``: files added later, e.g. named artefacts). ``status`` is "no manifest"
        for runs written before manifests.
    """
    p = existing_run_dir(path)
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
                same = f.is_file() and checked_sha256(f) == digest
            except OSError:
                same = False
            if not same:
                changed.append(name)
    listed = set(files) | {"manifest.json", "ledger.sqlite", ANALYSES_INDEX, *LEDGER_SIDE}
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
    root: str | None = None
    expect_root: str | None = None
    analyses: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the report and every reader's ``--json`` carry it)."""
        return to_jsonable(dataclasses.asdict(self))

    def summary(self) -> str:
        """One line: "verified ..." or the first problem."""
        if not self.ok:
            more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
            return f"UNVERIFIED: {self.problems[0]}{more}"
        auth = "authenticated" if self.authenticated else "UNAUTHENTICATED"
        led = self.ledger or {}
        n = len(self.analyses)
        sealed = f", {n} sealed analysis file{'s' if n != 1 else ''}" if n else ""
        unfinished = (  # an interrupted run verifies, but is never read as a finished one
            f"; run status {self.status}: the run did not complete"
            if self.status != "complete"
            else ""
        )
        ledger = (
            f"ledger.sqlite {led.get('rows')} charges, chain head {led.get('chain_head')}"
            if led
            else "no ledger.sqlite (the run stopped before creating it)"
        )
        return (
            f"verified ({auth}): every file matches manifest.json; {ledger}{sealed}; "
            f"run root {self.root}{unfinished}"
        )

    @property
    def evidence(self) -> str:
        """``"authenticated"`` (verified, every MAC checked with this process's key),
        ``"unauthenticated"`` (verified, but no key to check the MACs with) or
        ``"unverified"`` (a problem: read only with --allow-unverified)."""
        if not self.ok:
            return "unverified"
        return "authenticated" if self.authenticated else "unauthenticated"


def verify_run(
    path: Any,
    expect_head: str | None = None,
    *,
    full: bool = True,
    expect_root: str | None = None,
) -> VerifyResult:
    """Check a run directory against its manifest before anything reads it (never writes).

    Checks: ``manifest.json`` exists and its MAC (under the ledger key) holds; every file it
    lists has its SHA-256; ``ledger.sqlite`` exists, verifies (``full``: the whole chain and
    every agent's state, else the checks on open) and is the ledger the manifest anchors (same
    ledger id, row count and chain head); every analysis file is sealed in ``analyses.json``
    and unchanged (:mod:`ldp_audit.rundir.seal`); ``expect_head`` (an anchor published
    elsewhere) is a head the ledger's chain passes through; ``expect_root`` is the run's root
    (:func:`ldp_audit.rundir.seal.run_root`) as it is now. When this process holds a ledger
    key, evidence not authenticated by it (another key id, no MAC) is a problem; without a
    key, the result is ``ok`` but not ``authenticated``.

    Args:
        path: the run directory.
        expect_head: 64 hex digits, or None.
        expect_root: 64 hex digits, or None.
        full: walk the whole chain (linear in the rows; default) or only open the ledger.

    Returns:
        A :class:`VerifyResult`; nothing is raised for evidence that does not verify (it is in
        ``problems``).

    Raises:
        RunDirectoryError: ``path`` is not a directory, or holds none of a run's config.json,
            manifest.json and ledger.sqlite (never walked nor hashed).
        InvalidParameterError: ``expect_head`` or ``expect_root`` is not 64 hex digits.
        KeyFileError: the ledger key exists but is unusable (e.g. readable by others), or its
            file lies inside the run.
        RunDirectoryError: the run holds a FIFO, socket or device (never opened).
    """
    from ldp_audit.accountant.keys import check_key_outside, load_key
    from ldp_audit.accountant.ledger import Ledger
    from ldp_audit.rundir.seal import check_analyses, other_key, run_root

    p = existing_run_dir(path)
    if not is_run_like(p):  # never walked nor hashed: `budget /work --verify` took 12 minutes
        why = "it holds no config.json, manifest.json or ledger.sqlite"
        raise RunDirectoryError(f"run directory {str(p)!r} is not a run ({why})")
    check_run_files(p, "run directory")  # before any file is opened (a FIFO would block)
    expect_head = check_hex64(expect_head, "expect_head", "chain head")
    expect_root = check_hex64(expect_root, "expect_root", "run root")
    check_key_outside(p)  # a run that carries its own key authenticates nothing
    key = load_key(create=False)
    problems: list[str] = []
    notes: list[str] = []
    # every check below and every later reader: these bytes; a file added by hand: never hashed
    seen, added = _hash_run(p, problems, notes)
    auth_manifest = False
    try:
        man_check = verify_manifest(p)
    except RunDirectoryError as exc:
        man_check = {"status": "unreadable", "ok": False, "changed": [], "missing": []}
        problems.append(f"manifest.json cannot be read: {exc}")
    man = None
    if man_check["status"] == "no manifest":
        problems.append(
            f"{p / 'manifest.json'} is missing: the run did not finish (it was killed before "
            f"sealing its files) or predates manifests, so its files cannot be checked against "
            f"what it wrote; to finish it, rerun its `ldp-audit train` command with --resume "
            f"(where its system offers it), or start it over (--overwrite, or a new --out)"
        )
    elif man_check["status"] != "unreadable":
        man = read_manifest(p)
    anchor = None
    if man is not None:
        mac = man.get("mac")
        if not isinstance(mac, dict):
            why = "it carries no MAC (written before manifests were keyed)"
            _unauthenticated(p / "manifest.json", why, key, notes, problems)
        elif key is None:
            notes.append(
                f"manifest.json was sealed under key id {mac.get('key_id')}; this process has "
                f"no ledger key: its MAC cannot be checked"
            )
        elif key.id != mac.get("key_id"):
            problems.append(other_key(str(p / "manifest.json"), mac.get("key_id"), key))
        else:
            if not manifest_mac_ok(man, key):
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
    # after the manifest's own MAC: an edited manifest is named first, not the file it lists
    for name in man_check.get("changed", []):
        problems.append(f"{p / name} does not match the SHA-256 in manifest.json (changed)")
    for name in man_check.get("missing", []):
        problems.append(f"{p / name} is listed in manifest.json but missing")
    led_res: dict[str, Any] | None = None
    lp = p / "ledger.sqlite"
    auth_ledger = False
    stopped = man is not None and man.get("status") in ("interrupted", "failed")
    no_ledger = man is not None and man.get("ledger", 0) is None and expect_head is None
    if not lp.is_file() and auth_manifest and stopped and no_ledger:
        notes.append(  # its sealed manifest says so: a signal before the ledger was created
            f"the run stopped ({man['status']}) before its ledger was created: nothing was "
            "charged or released"
        )
        auth_ledger = True  # the manifest's MAC (checked) says it has none
    elif not lp.is_file():
        problems.append(f"{lp} is missing: the run's charges cannot be checked")
    else:
        try:
            with Ledger(str(lp), create=False, readonly=True, verify=True) as led:
                if full:
                    led_res = led.verify(expect_head=expect_head)
                else:
                    led_res = {"authenticated": led.authenticated, "auth_note": led.auth_note}
                led_res.update(led.anchor())
                if led.mark_refusal:  # read anyway (--allow-unverified): still a problem
                    problems.append(f"{lp}: {led.mark_refusal}")
                hot = getattr(led.store, "hot_journal_note", None)
                if hot:  # a writer killed inside a commit: the committed state was read
                    notes.append(hot)
                auth_ledger = bool(led.authenticated)
                if not led.authenticated:
                    _unauthenticated(lp, led.auth_note, key, notes, problems)
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
        except (LedgerError, InvalidParameterError) as exc:
            if type(exc).__name__ == "KeyFileError":
                raise
            problems.append(f"{lp}: {exc}")
    files = man.get("files") if isinstance(man, dict) else None
    other_id = (
        isinstance(anchor, dict) and led_res and anchor.get("ledger_id") != led_res.get("ledger_id")
    )
    if files and other_id and len(man_check.get("changed", [])) == len(files):
        problems.insert(  # named first: the files it lists are not what was edited
            0,
            f"{p / 'manifest.json'} is another run's manifest (swapped): none of the "
            f"{len(files)} files it lists matches, and it anchors another ledger",
        )
    if man is not None and "ledger" in man and man.get("ledger") is None and lp.is_file():
        problems.append(f"{lp} exists but manifest.json records that the run had no ledger")
    listed = set(man.get("files", {})) if isinstance(man, dict) else set()
    sealed, auth_analyses = check_analyses(p, key, listed, problems, notes)
    for name in added:
        problems.append(
            f"{p / name} is not sealed (neither manifest.json nor {ANALYSES_INDEX} "
            f"records it) and is no file the toolkit writes: added to the run by hand; "
            f"no reader opens it, but a person would take it for the run's (remove it)"
        )
    man_sha = seen.get("manifest.json")
    head = (led_res or {}).get("chain_head")
    root = run_root(man_sha, head if isinstance(head, str) else None, sealed)
    if expect_root is not None and root != expect_root:
        problems.append(
            f"{p}: the run's root {root} is not the expected root {expect_root}: manifest.json, "
            f"the ledger or a sealed analysis file differs from the run whose root was "
            f"published (or an analysis was added since)"
        )
    return VerifyResult(
        path=str(p),
        ok=not problems,
        problems=problems,
        notes=notes,
        authenticated=auth_ledger and auth_manifest and auth_analyses and not problems,
        status=man_check.get("status") if man is not None else None,
        manifest=man_check,
        anchor=anchor,
        ledger=led_res,
        expect_head=expect_head,
        root=root,
        expect_root=expect_root,
        analyses=sealed,
    )


def _hash_run(p: Path, problems: list[str], notes: list[str]) -> tuple[dict[str, str], list[str]]:
    """The SHA-256 of every file of the run (by name relative to it) but the ledger's own
    (checked through the ledger) and an interrupted write's temporary file (a note), each hashed
    once and recorded as what this process verified (``files.read_checked``); a link (to a
    folder: never entered; to a file: its bytes live outside the run) is a problem, since no
    writer makes one. Also returns the files added by hand (neither listed in the manifest
    hashed here nor an analysis file): named before any file is hashed and never hashed, since
    no reader opens them (a 20 GB sparse file took a minute to refuse)."""
    from ldp_audit.rundir.seal import analysis_name

    files: list[str] = []
    for folder, dirs, names in os.walk(p):
        for d in (Path(folder) / d for d in dirs if (Path(folder) / d).is_symlink()):
            problems.append(f"{d} is a link to a folder: its files are neither sealed nor checked")
        for n in names:
            f = Path(folder) / n
            name = f.relative_to(p).as_posix()
            if f.is_symlink():  # the ledger's too: checked content, but no longer the run's
                problems.append(
                    f"{f} is a link (to {os.readlink(f)}), not a file of the run: its bytes live "
                    f"elsewhere and can change after any check; no writer makes one (copy the "
                    f"file in its place)"
                )
            elif TEMP_FILE.match(n):
                notes.append(f"{f}: the temporary file of an interrupted write (remove it)")
            elif name not in ("ledger.sqlite", *LEDGER_SIDE):
                files.append(name)
    seen: dict[str, str] = {}
    listed = _listed(p, seen) if "manifest.json" in files else None
    added = sorted(  # (a run without a readable manifest is refused for that: all hashed)
        n
        for n in files
        if listed is not None
        and n not in listed | {"manifest.json", ANALYSES_INDEX}
        and not analysis_name(n)
    )
    for name in sorted(set(files) - set(seen) - set(added)):
        with contextlib.suppress(OSError, RunDirectoryError):  # named by the checks below
            seen[name] = sha256_file(p / name)
    pin_checked(p, {p / n: d for n, d in seen.items()})
    return seen, added


def _listed(p: Path, seen: dict[str, str]) -> set[str] | None:
    """The files manifest.json lists, read from the bytes whose SHA-256 goes into ``seen``
    (None: it cannot be read as a manifest)."""
    f = p / "manifest.json"
    try:
        check_regular_file(f, "run file")
        data = f.read_bytes()
    except (OSError, RunDirectoryError):
        return None
    seen["manifest.json"] = hashlib.sha256(data).hexdigest()
    try:
        man = json.loads(data)
    except (ValueError, RecursionError):
        return None
    files = man.get("files", {}) if isinstance(man, dict) else None
    return {str(n) for n in files} if isinstance(files, dict) else None


def require_verified(
    path: Any,
    *,
    expect_head: str | None = None,
    allow_unverified: bool = False,
    name: str = "RUN_DIR",
    expect_root: str | None = None,
) -> VerifyResult:
    """:func:`verify_run`, refusing unverified evidence unless ``allow_unverified``.

    What every reader of a run (``report``, every ``attack --run-dir``) calls before it reads
    anything. With ``allow_unverified`` the result is returned as is: the caller must then say
    so first (:func:`unverified_banner`) and in its JSON (``VerifyResult.to_dict()``).

    Raises:
        RunDirectoryError: the run does not verify (the message names the file and says how
            to read it anyway).
    """
    p = check_path_arg(path, name)

    check_run_files(p, name)  # a FIFO anywhere in it (config.json too): named, never opened
    if not is_run_dir(p):
        raise RunDirectoryError(
            f"{name} {str(p)!r} is not a run directory ("
            + ("no config.json" if p.is_dir() else "not an existing directory")
            + ")"
        )
    res = verify_run(p, expect_head, expect_root=expect_root)
    if not res.ok and not allow_unverified:
        more = f" (and {len(res.problems) - 1} more problems)" if len(res.problems) > 1 else ""
        raise RunDirectoryError(
            f"{name} {str(path)!r} is unverified evidence: {res.problems[0]}{more}. Refusing "
            f"to read it; pass --allow-unverified to read it anyway (the output then says so "
            f"first), or check it with `ldp-audit budget {path} --verify`"
        )
    return res


def unverified_banner(res: VerifyResult) -> str | None:
    """The first line a reader prints when it reads unverified or unauthenticated evidence
    (None: verified and authenticated)."""
    if not res.ok:
        return f"UNVERIFIED EVIDENCE (read with --allow-unverified): {res.problems[0]}"
    if not res.authenticated:
        why = "; ".join(res.notes) or "no ledger key in this process"
        return f"UNAUTHENTICATED EVIDENCE (no ledger key checked it): {why}"
    return None


def _unauthenticated(what: Path, why: str, key: Any, notes: list[str], problems: list[str]) -> None:
    """Evidence ``what`` that no ledger key authenticates (``why``): a note when this process
    holds no key, a problem when it holds one."""
    if key is None:
        notes.append(f"{what} is unauthenticated: {why}")
    else:
        problems.append(
            f"{what} is not authenticated by this process's key {key.id}: {why}; pass "
            f"--allow-unverified to read it anyway"
        )


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
    head = anchor.get("chain_head")
    try:  # a str head (not None: verify() would then check no head)
        extends = isinstance(head, str) and led.verify(expect_head=head)["extends"] is True
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
