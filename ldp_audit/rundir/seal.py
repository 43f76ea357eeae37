"""Sealing the analysis files written into a finished run, and the run's one published root.

Everything a verdict reads is evidence (docs/accountant.md, "Analysis files and the run's
root"). A finished run's ``manifest.json`` covers what the trainer wrote; the analyses a reader
adds afterwards (``audit.json``, ``attack_<name>.json``, the report's own files under
``report/``) are recorded, when the toolkit writes them, in the run's append-only index
``analyses.json``: one entry per write, with the file's SHA-256, chained to the previous entry
(the first to the SHA-256 of ``manifest.json``, the run's anchor) and carrying an HMAC under the
ledger key, the same :class:`~ldp_audit.accountant.keys.LedgerKey` that seals the ledger and the
manifest (no second scheme)::

    body  = canonical JSON {"name", "sha256", "written", "prev", "key_id"}
    hash  = SHA-256("ldp-audit analysis v1|" + body)          (the next entry's "prev")
    hmac  = HMAC-SHA256(key, "ldp-audit analysis v1|" + body)

:func:`check_analyses` (called by :func:`ldp_audit.rundir.verify_run`) refuses an analysis file
with no entry (unsealed), one whose bytes differ from its latest entry (edited), an entry whose
file is gone (deleted), a broken chain, and, when this process holds a key, an entry sealed
under another key id or with a wrong MAC, and, with the key, an index its high-water mark
(:mod:`ldp_audit.accountant.ledger_marks`, outside the run; moved by :func:`seal_analyses`)
shows was rolled back (an analysis deleted with its entries). :func:`run_root` is the one
digest that covers the whole run: ``manifest.json`` (every file the trainer wrote, the
ledger's anchor), the ledger's chain head and every sealed analysis file a verdict reads (the
report's own outputs are sealed but left out of the root, so that writing a report does not
change it).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import hmac
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ldp_audit.errors import RunDirectoryError
from ldp_audit.limits import check_regular_file
from ldp_audit.rundir.files import (
    canonical_json,
    checked_sha256,
    locked_folder,
    manifest_bytes,
    manifest_mac_ok,
    pin_checked,
    read_checked,
    sha256_file,
    write_json_file,
)
from ldp_audit.rundir.paths import ANALYSES_INDEX as INDEX
from ldp_audit.rundir.paths import ARTIFACT_PATTERN

__all__ = [
    "REPORT_FILES",
    "check_analyses",
    "check_document_seal",
    "run_root",
    "seal_analyses",
    "seal_document",
    "seal_manifest",
    "sealed_sha256",
]

#: the report's own files, sealed when ``report`` writes them into ``RUN_DIR/report``, with
#: the figures its pages show (``report/figures/NAME.png``)
REPORT_FILES = ("report/report.json", "report/report.md", "report/index.html")
_FIGURE = re.compile(r"^report/(figures/[A-Za-z0-9_.-]+|screenshot)\.png$")


def analysis_name(name: str) -> bool:
    """``name`` (relative to the run) is one :func:`check_analyses` checks: a named artefact,
    any ``attack_*.json`` the report reads, or a file of the report's own folder."""
    return bool(
        ARTIFACT_PATTERN.match(name)
        or re.fullmatch(r"attack_[^/]*\.json", name)
        or name in REPORT_FILES
        or _FIGURE.match(name)
    )


_FORMAT = "ldp-audit analyses v1"
_LABEL = b"ldp-audit analysis v1|"
_ROOT_LABEL = b"ldp-audit run root v1|"
#: the chain's start when the run has no manifest (such a run is refused by every reader)
NO_ANCHOR = "0" * 64


def _body(e: dict[str, Any]) -> bytes:
    keys = ("name", "sha256", "written", "prev", "key_id")
    return _LABEL + canonical_json({k: e.get(k) for k in keys}).encode()


def _anchor(run: Path, checked: bool = True) -> str:
    """SHA-256 of the run's manifest.json (``checked``: as this process verified it; a writer
    chains to the file as it is)."""
    man = run / "manifest.json"
    if not man.is_file():
        return NO_ANCHOR
    return checked_sha256(man) if checked else sha256_file(man)


def _read_index(run: Path, checked: bool = True) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The index's entries (None: no index) and a problem with the file itself; ``checked``:
    read through :func:`~ldp_audit.rundir.files.read_checked` (a writer appending under the
    lock reads what is there)."""
    f = run / INDEX
    if not f.exists():
        return None, None
    try:  # a folder or a link at its name: a problem of the run, as for any sealed file
        check_regular_file(f, INDEX)
        doc = json.loads(read_checked(f, INDEX) if checked else f.read_bytes())
    except (OSError, ValueError, RecursionError, RunDirectoryError) as exc:
        return [], f"{f} cannot be read: {exc}"
    if (
        not isinstance(doc, dict)
        or doc.get("format") != _FORMAT
        or not isinstance(doc.get("entries"), list)
        or not all(isinstance(e, dict) for e in doc["entries"])
    ):
        return [], f"{f} is not an index of analysis files ({_FORMAT!r} with a list of entries)"
    return list(doc["entries"]), None


def _writer_key(run: Path) -> Any:
    """The ledger key a writer seals ``run``'s evidence with (created on first use, like a
    ledger's); ``KeyFileError`` when it is unusable or lies inside the run."""
    from ldp_audit.accountant.keys import check_key_outside, load_key

    check_key_outside(run)
    key = load_key(create=True)
    assert key is not None  # load_key(create=True) returns a key or raises
    return key


def _run_key(run: Path) -> Any:
    """The key that sealed ``run``'s ``manifest.json``, when this process holds it (else None):
    an analysis is sealed under the run's own key or not at all (session 57: `report RUN` on a
    machine without the run's key created a key file there, which a reader never does, and
    sealed the report under it; the run's owner then refused the run, exit 2)."""
    from ldp_audit.accountant.keys import check_key_outside, load_key

    check_key_outside(run)
    key = load_key(create=False)
    if key is None:
        return None
    with contextlib.suppress(OSError, ValueError, RecursionError, RunDirectoryError):
        check_regular_file(run / "manifest.json", "manifest.json")
        man = json.loads((run / "manifest.json").read_bytes())
        return key if isinstance(man, dict) and manifest_mac_ok(man, key) else None
    return None


def seal_manifest(man: dict[str, Any], run: Path) -> dict[str, Any]:
    """``man`` with its HMAC under the ledger key (``"mac"``: key id and HMAC)."""
    key = _writer_key(run)
    return {**man, "mac": {"key_id": key.id, "hmac": key.mac(manifest_bytes(man)).hex()}}


def other_key(what: str, key_id: Any, key: Any) -> str:
    """The problem of evidence ``what`` sealed under ``key_id``, not this process's ``key``."""
    return (
        f"{what} was sealed under key id {key_id}, not this process's key {key.id} "
        f"({key.source}): evidence not authenticated by the key this reader holds (a "
        f"rewritten run can carry any key id); read it with the key that wrote it, or pass "
        f"--allow-unverified"
    )


def _mark(run: Path, key: Any, entries: list[dict[str, Any]], anchor: str) -> tuple[Any, ...]:
    """The run's analysis chain as the ledgers' high-water mark sees it
    (:mod:`ldp_audit.accountant.ledger_marks`, outside the run): ``(mark id, label, (entries,
    head), hash_at)``; the id digests this key's id, the chain's anchor (manifest.json's
    SHA-256) and the run's real path, so another key, another run, or a copy of the run at
    another path (analysed on its own) has a mark of its own."""

    def head(i: int) -> bytes | None:
        try:
            return bytes.fromhex(anchor if i == 0 else str(entries[i - 1].get("hash")))
        except (ValueError, IndexError):
            return None

    mark = (len(entries), head(len(entries)) or b"")
    ident = hashlib.sha256(f"{key.id}|{anchor}|{run.resolve()}".encode()).hexdigest()
    return f"analyses|{ident}", str(run / INDEX), mark, head


def _any_path_mark(key: Any, anchor: str) -> str:
    """The id of the mark of the run's analysis chain wherever the run lies (key id and anchor
    only): the furthest any copy of it was sealed, read where its own path has no mark yet
    (session 57: `mv RUN RUN2` with an analysis rolled back verified, `report` exit 0)."""
    return "analyses|" + hashlib.sha256(f"{key.id}|{anchor}".encode()).hexdigest()


def _ledger_mark(key: Any, ledger_id: Any) -> str | None:
    """The id of the mark of a complete run's analysis chain by its ledger (key id and ledger
    id; None: no ledger id), read where no copy of its manifest was sealed: a manifest made
    again by ``--resume`` after the finished run's manifest, ``analyses.json`` and analyses
    were deleted (session 58: its audit's VIOLATION read as PARTIALLY VERIFIED, exit 0)."""
    if not isinstance(ledger_id, str):
        return None
    return "analyses|ledger|" + hashlib.sha256(f"{key.id}|{ledger_id}".encode()).hexdigest()


def _complete_ledger_id(run: Path, checked: bool = True) -> Any:
    """The ledger id that ``run``'s manifest anchors when it records a complete run (only a
    complete run can never be resumed), else None."""
    f = run / "manifest.json"
    with contextlib.suppress(OSError, ValueError, RecursionError, RunDirectoryError):
        man = json.loads(read_checked(f, "manifest.json") if checked else f.read_bytes())
        if isinstance(man, dict) and man.get("status") == "complete":
            led = man.get("ledger")
            return led.get("ledger_id") if isinstance(led, dict) else None
    return None


def _checked_mark(run: Path, key: Any, mid: str, anchor: str, checked: bool = True) -> str:
    """The mark a reader checks the index against: the run's at its path; where its path has
    none (moved or copied here), any copy's; where no copy of this manifest was sealed, its
    ledger's (a complete run made again by ``--resume``)."""
    from ldp_audit.accountant.ledger_marks import read_mark

    label = str(run / INDEX)
    ledger = _ledger_mark(key, _complete_ledger_id(run, checked))
    for ident in (mid, _any_path_mark(key, anchor), ledger):
        if ident is not None and read_mark(key, ident, label) is not None:
            return ident
    return mid


def sealed_by_ledger(run_dir: Any, ledger_id: str) -> int:
    """How many analyses this process's key sealed for a complete run of ledger ``ledger_id``
    (0: none recorded on this machine, or no key): a run without a manifest that has some
    finished once and lost its manifest, and ``--resume`` would seal it again without them."""
    from ldp_audit.accountant.keys import load_key
    from ldp_audit.accountant.ledger_marks import read_mark

    key = load_key(create=False)
    ident = None if key is None else _ledger_mark(key, ledger_id)
    mark = None if ident is None else read_mark(key, ident, str(Path(run_dir) / INDEX))
    return mark[0] if mark else 0


def accept_restored(run_dir: Any, move: bool = True) -> tuple[int, str, Any] | None:
    """``budget RUN --accept-restored``: the run's analysis mark moved (``move``; else only
    checked) to its ``analyses.json`` as it is, after the index's chain and MACs are checked.
    Returns ``(entries, head, the (entries, head) the mark recorded before or None)``; None for
    a run with no manifest (nothing sealed).

    Raises:
        RunDirectoryError: the index is not one the key wrote (nothing is accepted).
    """
    from ldp_audit.accountant.keys import check_key_outside, load_key
    from ldp_audit.accountant.ledger_format import LedgerIntegrityError
    from ldp_audit.accountant.ledger_marks import advance_mark, read_mark

    run = Path(run_dir)
    if not (run / "manifest.json").is_file():
        return None
    check_key_outside(run)
    key = load_key(create=False)  # the run's key moves its marks; none is created for it
    if key is None:
        raise RunDirectoryError(
            "--accept-restored: this process holds no ledger key (set LDP_AUDIT_KEY_FILE or "
            "LDP_AUDIT_KEY to the key that wrote the run): nothing was accepted"
        )
    entries, _ = _read_index(run, checked=False)
    problems: list[str] = []
    check_analyses(run, key, set(), problems, [], mark=False)
    bad = [p for p in problems if p.startswith(str(run / INDEX))]  # its chain, MACs, form
    if bad:
        raise RunDirectoryError(f"--accept-restored: {bad[0]} (nothing was accepted)")
    anchor = _anchor(run, checked=False)
    mid, label, mark, head = _mark(run, key, entries or [], anchor)
    old = None  # what the mark a reader checked recorded: a moved copy's is any copy's
    if move:  # (session 58: an older copy accepted at another path said "nothing forgotten")
        with contextlib.suppress(LedgerIntegrityError):  # one failing its MAC: none to compare
            old = read_mark(key, _checked_mark(run, key, mid, anchor, checked=False), label)
        advance_mark(key, mid, label, mark, None)
    forgot = old if old and (old[0] > mark[0] or head(old[0]) != old[1]) else None
    return mark[0], mark[1].hex(), forgot


def seal_analyses(run_dir: Any, names: Sequence[str]) -> list[dict[str, Any]]:
    """Append an entry for each of ``names`` (paths relative to the run, already written) to the
    run's ``analyses.json``, under the ledger key (created on first use, like a manifest's).

    A run without ``manifest.json`` (still running, or killed) is not sealed here: its
    ``RunWriter.finish`` hashes every file into the manifest. Nor is a run whose manifest this
    process's key did not seal (no key here, or another key's run): no key is created, and the
    files stay unsealed, which every reader flags.

    Returns:
        The entries appended (empty when the run has no manifest).

    Raises:
        RunDirectoryError: the index exists but is malformed, or a file is not what this
            process wrote (:func:`~ldp_audit.rundir.files.pin_checked`: swapped while the
            writer waited for the index's lock; nothing is appended to it), or the manifest is
            not the one this process verified (the run was replaced since).
        KeyFileError: the ledger key is unusable, or lies inside the run.
    """
    from ldp_audit.accountant.ledger_format import LedgerIntegrityError
    from ldp_audit.accountant.ledger_marks import advance_mark

    run = Path(run_dir)
    if not (run / "manifest.json").is_file():
        return []
    key = _run_key(run)
    if key is None:
        return []
    with locked_folder(run):
        entries, problem = _read_index(run, checked=False)
        if problem is not None:
            raise RunDirectoryError(
                f"{problem}; refusing to append to it (check the run with "
                f"`ldp-audit budget {run} --verify`)"
            )
        entries = entries or []
        prev0 = _anchor(run, checked=False)
        if checked_sha256(run / "manifest.json") != prev0:  # (what a check here pinned)
            raise RunDirectoryError(
                f"{run / 'manifest.json'} is not the manifest this process verified: the run "
                f"was replaced (e.g. by `train --overwrite`) while this analysis read it; "
                f"refusing to seal an analysis of another run into it (run it again)"
            )
        prev = str(entries[-1].get("hash")) if entries else prev0
        now = _dt.datetime.now(_dt.timezone.utc).isoformat()
        added = []
        for name in names:
            digest = sha256_file(run / name)
            if checked_sha256(run / name) != digest:  # what this process wrote, if it did
                raise RunDirectoryError(
                    f"{run / name} changed between its write and its seal (its bytes are not "
                    f"what this process wrote): refusing to seal them"
                )
            e = {
                "name": name,
                "sha256": digest,
                "written": now,
                "prev": prev,
                "key_id": key.id,
            }
            body = _body(e)
            e["hash"] = hashlib.sha256(body).hexdigest()
            e["hmac"] = key.mac(body).hex()
            prev = e["hash"]
            added.append(e)
        doc = {"format": _FORMAT, "entries": entries + added}
        index = write_json_file(run / INDEX, doc, replace=True)
        # then the run's analysis mark (outside the run) follows, as a ledger's does: never
        # back, and never onto an index that does not extend it (a rollback read with
        # --allow-unverified stays refused)
        mid, label, mark, head = _mark(run, key, doc["entries"], prev0)
        ledger = _ledger_mark(key, _complete_ledger_id(run, checked=False))
        for ident in (mid, _any_path_mark(key, prev0), ledger):  # (a fork: kept as it is)
            with contextlib.suppress(LedgerIntegrityError):
                if ident is not None:
                    advance_mark(key, ident, label, mark, head)
    # what this process wrote is what its readers may read
    pin_checked(None, {run / INDEX: index, **{run / e["name"]: e["sha256"] for e in added}})
    return added


def sealed_sha256(run_dir: Any, name: str) -> str | None:
    """The SHA-256 the run's index seals for ``name`` (its latest entry), or None."""
    entries, _ = _read_index(Path(run_dir), checked=False)
    found = [e.get("sha256") for e in entries or [] if e.get("name") == name]
    return str(found[-1]) if found else None


def check_analyses(
    run_dir: Any,
    key: Any,
    listed: set[str],
    problems: list[str],
    notes: list[str],
    mark: bool = True,
) -> tuple[dict[str, str], bool]:
    """Check every analysis file of a run against its sealed entry (never writes).

    Args:
        run_dir: the run.
        key: this process's :class:`~ldp_audit.accountant.keys.LedgerKey`, or None.
        listed: files ``manifest.json`` lists (an artefact written before the run finished is
            covered by the manifest instead).
        problems, notes: appended to (each names the file).
        mark: with a key, also check the index against the run's analysis mark (outside the
            run, :func:`seal_analyses` moves it): fewer entries than it records, or a chain
            that does not pass through its head, is a problem (an analysis rolled back).

    Returns:
        ``({name: sha256} of the sealed analysis files a verdict reads, authenticated)``;
        ``authenticated``: every entry's MAC was checked with ``key``.
    """
    run = Path(run_dir)
    entries, problem = _read_index(run)
    if problem is not None:
        problems.append(problem)
    entries = entries or []
    latest: dict[str, dict[str, Any]] = {}
    prev = _anchor(run)
    auth = key is not None
    other_keys: set[str] = set()
    for i, e in enumerate(entries):
        name = e.get("name")
        where = f"{run / INDEX} entry {i + 1} ({name})"
        if e.get("prev") != prev:
            problems.append(
                f"{where} does not chain to "
                + ("manifest.json (the run's anchor)" if i == 0 else "the entry before it")
                + ": the index or manifest.json was edited, reordered or replaced"
            )
        body = _body(e)
        if hashlib.sha256(body).hexdigest() != e.get("hash"):
            problems.append(f"{where} does not match its hash (edited)")
        prev = str(e.get("hash"))
        if key is not None:
            if e.get("key_id") != key.id:
                other_keys.add(str(e.get("key_id")))
                auth = False
            elif not hmac.compare_digest(key.mac(body).hex(), str(e.get("hmac", ""))):
                problems.append(
                    f"{where} does not carry the MAC of key id {key.id}: the index was "
                    f"rewritten by someone without the key"
                )
                auth = False
        if isinstance(name, str) and (
            ARTIFACT_PATTERN.match(name) or name in REPORT_FILES or _FIGURE.match(name)
        ):
            latest[name] = e
        else:
            problems.append(f"{where} names no analysis file a reader may write")
    if other_keys:
        problems.append(other_key(str(run / INDEX), ", ".join(sorted(other_keys)), key))
    elif mark and key is not None and (run / "manifest.json").is_file() and not problem:
        from ldp_audit.accountant.ledger_marks import check_mark
        from ldp_audit.errors import LedgerError

        anchor = _anchor(run)
        mid, label, (n, _), head = _mark(run, key, entries, anchor)
        try:
            check_mark(key, _checked_mark(run, key, mid, anchor), label, n, head)
        except LedgerError as exc:  # (LedgerIntegrityError too) rolled back, or a bad mark
            problems.append(str(exc))
    if key is None and entries:
        notes.append(f"{run / INDEX}: its MACs cannot be checked (this process has no ledger key)")
    # the analysis files present in the run (named artefacts, every attack_*.json the report
    # reads, even under a name the toolkit never writes, and the report's own files); a
    # folder or a link to nothing under an analysis file's name is never a sealed file
    named = {f.name for f in run.iterdir() if ARTIFACT_PATTERN.match(f.name)}
    named |= {f.name for f in run.glob("attack_*.json")}
    named |= {n for n in (*REPORT_FILES, "report/screenshot.png") if (run / n).is_file()}
    named |= {f"report/figures/{f.name}" for f in run.glob("report/figures/*.png") if f.is_file()}
    present = sorted(named)
    sealed: dict[str, str] = {}
    finished = (run / "manifest.json").is_file()
    for name in present:
        if name not in latest:
            # written before the run finished: the manifest covers it; a run without a
            # manifest cannot seal anything (and is refused for that already)
            if name in listed or not finished:
                continue
            if name.startswith("report/"):  # a page a person reads as the run's verdict
                problems.append(
                    f"{run / name} is not sealed (no entry in {INDEX}): a report page the "
                    f"toolkit did not write for this run (entries cut from the index, or a page "
                    f"written by hand); remove {run / 'report'} and run `ldp-audit report` again"
                )
                continue
            problems.append(
                f"{run / name} is not sealed (no entry in {INDEX}): an analysis file the "
                f"toolkit did not write, one written before analysis files were sealed, one "
                f"computed from evidence that did not verify (--allow-unverified), or one "
                f"whose command was killed before it sealed it: remove it and run that command "
                f"again"
            )
            continue
        try:
            digest = checked_sha256(run / name)
        except (OSError, RunDirectoryError):  # a folder in its place: changed
            digest = ""
        if digest != latest[name].get("sha256"):
            again = (  # what a kill inside the command's write leaves, and the way out
                f"remove {run / 'report'} and run `ldp-audit report` again"
                if name.startswith("report/")
                else "run that command again with --overwrite --allow-unverified"
            )
            problems.append(
                f"{run / name} does not match the SHA-256 sealed in {INDEX} (edited after the "
                f"toolkit wrote it, rewritten from evidence that did not verify, or rewritten by "
                f"a command killed before it sealed it: {again})"
            )
        if not name.startswith("report/"):
            sealed[name] = digest
    for name in latest:
        if name not in present:
            if name.startswith("report/"):
                notes.append(f"{run / name} was sealed in {INDEX} but has been removed")
            else:
                problems.append(
                    f"{run / name} is sealed in {INDEX} but missing (deleted after the toolkit "
                    f"wrote it)"
                )
    return sealed, auth and not problem


def run_root(manifest_sha256: str | None, chain_head: str | None, sealed: dict[str, str]) -> str:
    """The run's root: SHA-256 over ``manifest.json``'s SHA-256, the ledger's chain head and
    every sealed analysis file's name and SHA-256 (64 hex digits)."""
    body = canonical_json(
        {
            "manifest": manifest_sha256,
            "chain_head": chain_head,
            "analyses": dict(sorted(sealed.items())),
        }
    )
    return hashlib.sha256(_ROOT_LABEL + body.encode()).hexdigest()


# ---- analyses written outside the run (an attack's --out FILE) -------------------------------

_DOC_LABEL = b"ldp-audit analysis document v1|"


def _doc_bytes(doc: dict[str, Any], manifest_sha256: str, key_id: str) -> bytes:
    body = {k: v for k, v in doc.items() if k != "seal"}
    return (
        _DOC_LABEL
        + canonical_json({"doc": body, "manifest": manifest_sha256, "key_id": key_id}).encode()
    )


def seal_document(doc: dict[str, Any], run_dir: Any) -> dict[str, Any]:
    """``doc`` (a JSON object written outside the run, e.g. an attack's ``--out``) with a
    ``"seal"``: the SHA-256 of the run's ``manifest.json`` it was computed from and an HMAC of
    both under the ledger key, so that ``report RUN FILE`` can tell it is what the toolkit
    wrote about that run. A run without manifest, or whose manifest this process's key did not
    seal, is not sealed against (returned unchanged)."""
    run = Path(run_dir)
    if not (run / "manifest.json").is_file() or not isinstance(doc, dict):
        return doc
    key = _run_key(run)
    if key is None:
        return doc
    man = _anchor(run)  # the manifest this process verified (a run replaced since: not it)
    body = {k: v for k, v in doc.items() if k != "seal"}
    mac = key.mac(_doc_bytes(body, man, key.id)).hex()
    return {**body, "seal": {"manifest": man, "key_id": key.id, "hmac": mac}}


def check_document_seal(doc: Any, run_dir: Any, key: Any) -> tuple[str, str]:
    """Whether an analysis read from outside the run was sealed by the toolkit for this run.

    Returns:
        ``(state, why)``: ``"sealed"`` (its MAC holds under ``key``, for this run's manifest),
        ``"unchecked"`` (sealed for this run, but no key to check the MAC with),
        ``"unsealed"`` (no seal, or a seal for another run) or ``"forged"`` (a seal this
        process's key does not authenticate: another key id, or a MAC that does not hold).
    """
    seal = doc.get("seal") if isinstance(doc, dict) else None
    if not isinstance(seal, dict):
        return "unsealed", "it carries no seal (not written by the toolkit for this run)"
    man = _anchor(Path(run_dir))
    if seal.get("manifest") != man:
        return "unsealed", "its seal is for another run (or an earlier manifest.json)"
    if key is None:
        return "unchecked", "this process has no ledger key to check its seal with"
    if seal.get("key_id") != key.id:
        return "forged", f"its seal is under key id {seal.get('key_id')}, not this key {key.id}"
    want = key.mac(_doc_bytes(doc, man, key.id)).hex()
    if not hmac.compare_digest(want, str(seal.get("hmac", ""))):
        return "forged", "its seal's MAC does not hold (edited after the toolkit wrote it)"
    return "sealed", ""
