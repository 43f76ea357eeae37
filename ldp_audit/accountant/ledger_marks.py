"""A ledger's high-water mark: the most rows and the chain head any writer committed, kept
in this user's state folder, outside every ledger's folder.

The key proves that the toolkit wrote a state, not that it is the latest one: an older copy of
a ledger put back over a longer one (a rollback), or a copy charged on its own (a fork), reads
as a ledger whose spend is the older spend. The mark closes that for this user on this machine:
after every commit a writer moves ``<heads>/<ledger id>`` forward (never back) to its rows and
head, MACed under the ledger key; every open of the ledger (a writer's or a reader's) refuses a
file with fewer rows than the mark, or whose chain does not pass through the mark's head at the
mark's row. The mark is written after the commit, so a writer killed in between leaves it
lagging (the file opens; the next commit moves it), never leading. It is renamed into place
without a sync (measured: the sync cost about 7 ms per commit): a machine crash can leave it
lagging or empty, and an empty mark reads as none (as a deleted one does).

``<heads>``: ``LDP_AUDIT_HEADS`` (an absolute folder) when set; else
``$XDG_STATE_HOME/ldp-audit/heads`` (``~/.local/state/ldp-audit/heads``), wherever the key comes
from (a key file and the same key in ``LDP_AUDIT_KEY`` share the marks; a mark is MACed under
its ledger's key, and ledger ids are random). A missing mark is no
problem (a new ledger, or a copy read on another machine: nothing to compare with).
The same mark guards a run's sealed analyses (``RUN/analyses.json``, whose entries are its rows:
:mod:`ldp_audit.rundir.seal` moves and checks it under an id of its own).
docs/accountant.md, "What no key catches", has what it catches and what it cannot.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ldp_audit.accountant.keys import ENV_HEADS, LedgerKey, check_heads_outside, heads_dir
from ldp_audit.accountant.ledger_format import LedgerIntegrityError
from ldp_audit.errors import LdpAuditError, LedgerError
from ldp_audit.rundir.files import locked_folder

__all__ = [
    "Mark",
    "read_mark",
    "check_mark",
    "advance_mark",
    "check_writable",
    "unverified_reads",
    "reading_unverified",
]

_UNVERIFIED: ContextVar[bool] = ContextVar("ldp_audit_unverified_reads", default=False)
_LABEL = b"ldp-audit ledger high-water mark v1|"
_MAX_BYTES = 4096

#: ``(rows, head)`` of a mark (the head as 32 bytes).
Mark = tuple[int, bytes]


def _file(ledger_id: str) -> Path:
    ok = re.fullmatch(r"[0-9a-f]{32}", ledger_id)  # uuid4().hex; anything else is hashed
    return heads_dir() / (ledger_id if ok else hashlib.sha256(ledger_id.encode()).hexdigest())


def _message(ledger_id: str, rows: int, head: bytes) -> bytes:
    return _LABEL + f"{ledger_id}|{rows}|".encode() + head


def _words(path: str) -> tuple[str, str, str]:
    """What a mark of ``path`` guards, what its rows are, and what ``--accept-restored`` is
    given: a ledger's charges, or a run's sealed analyses (``RUN/analyses.json``,
    :mod:`ldp_audit.rundir.seal`: the same mark, keyed by the run's analysis chain)."""
    if Path(path).name == "analyses.json":
        run = str(Path(path).parent)
        return f"run {run!r}: its analyses.json", "sealed analyses", run
    return f"ledger {path!r}", "charges", path


def _refuse(path: str, why: str, way_out: str) -> LedgerIntegrityError:
    what, rows, accept = _words(path)
    return LedgerIntegrityError(
        f"{what}: {why}. {way_out}; if this copy was restored on purpose, accept it with "
        f"`ldp-audit budget {accept} --accept-restored` (the mark then forgets the later {rows})"
    )


@contextmanager
def unverified_reads(on: bool = True) -> Iterator[None]:
    """Inside (when ``on``; what ``--allow-unverified`` asks for): a read-only open of a ledger
    its mark refuses (an older copy, a fork, a mark that fails its MAC) reads it anyway and
    keeps the refusal in ``Ledger.mark_refusal`` for the reader to say first; a writer's open,
    and so any charge or mark move, is still refused."""
    token = _UNVERIFIED.set(on or _UNVERIFIED.get())
    try:
        yield
    finally:
        _UNVERIFIED.reset(token)


def reading_unverified() -> bool:
    """Whether this context is inside :func:`unverified_reads`."""
    return _UNVERIFIED.get()


def read_mark(key: LedgerKey, ledger_id: str, path: str) -> Mark | None:
    """The ledger's mark (None: none on this machine), its MAC checked.

    Raises:
        LedgerIntegrityError: the mark is malformed or fails its MAC (the marks' folder was
            written by someone without the key).
        LedgerError: it cannot be read.
    """
    f = _file(ledger_id)
    try:
        with open(os.open(f, os.O_RDONLY | os.O_NONBLOCK), "rb") as fh:  # a FIFO: no wait
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise OSError("not a regular file")
            data = fh.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        msg = (
            f"cannot read the high-water mark {str(f)!r} of {_words(path)[0]}: "
            f"{exc.strerror or exc} (the marks live in $XDG_STATE_HOME/ldp-audit/heads, "
            f"or in the folder {ENV_HEADS} names)"
        )
        raise LedgerError(msg) from None
    if not data:  # a machine crash right after an unsynced rename: as good as none (deleting
        return None  # the file does the same, so an empty one gives a person nothing more)
    doc: Any = None
    try:
        doc = json.loads(data)
        rows, head, mac = int(doc["rows"]), bytes.fromhex(doc["head"]), bytes.fromhex(doc["mac"])
        good = doc["ledger_id"] == ledger_id and rows >= 0 and len(head) == 32
    except (ValueError, TypeError, KeyError, RecursionError):
        good = False
    if not good or len(data) > _MAX_BYTES or mac != key.mac(_message(ledger_id, rows, head)):
        other = isinstance(doc, dict) and doc.get("ledger_id") not in (None, ledger_id)
        why = (
            f"is another ledger's (ledger id {str(doc['ledger_id'])[:80]!r}), put in its place "
            f"by someone who can write the marks' folder"
            if other
            else f"is malformed or fails its MAC under the ledger key {key.id}: the marks' "
            f"folder was written by someone without the key"
        )
        raise _refuse(
            path, f"its high-water mark {str(f)!r} {why}", "Check who can write that folder"
        )
    return rows, head


def check_mark(
    key: LedgerKey, ledger_id: str, path: str, rows: int, hash_at: Callable[[int], bytes | None]
) -> Mark | None:
    """Refuse a ledger of ``rows`` rows that the mark shows was rolled back or forked
    (``hash_at(i)``: the hash of row ``i``, the genesis hash at 0); returns the mark."""
    mark = read_mark(key, ledger_id, path)
    if mark is None:
        return None
    m_rows, m_head = mark
    _, noun, _ = _words(path)
    run = noun == "sealed analyses"
    if rows < m_rows:
        why = f"this file holds {rows} {noun}, but its high-water mark records {m_rows}"
    elif hash_at(m_rows) != m_head:
        where = "entry" if run else "row"
        why = f"its chain does not pass through {where} {m_rows} of the high-water mark"
    else:
        return mark
    raise _refuse(
        path,
        f"{why} ({'mark' if run else 'ledger'} id {ledger_id}, head {m_head.hex()}, in "
        f"{str(_file(ledger_id))!r}): it is an older copy put back, or a copy "
        + (
            "sealed on its own (a fork): an analysis it sealed (a verdict) is missing"
            if run
            else "charged on its own (a fork), and its spend is not the spend"
        ),
        "Put the newest copy back (its chain passes through that head)",
    )


def check_writable(path: str) -> None:
    """A writer's open: the heads folder exists (created, mode 0700) and is writable, so a
    commit never succeeds without its mark being written (refused before anything is charged).
    """
    folder = heads_dir()
    check_heads_outside(Path(path).parent, "the ledger's folder", near=True)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
        with tempfile.TemporaryFile(dir=folder):  # root passes os.access on /sys, not a create
            pass
    except OSError as exc:
        raise LedgerError(
            f"ledger {path!r} cannot be charged: the folder of its high-water mark "
            f"{str(folder)!r} cannot be written ({exc.strerror or exc}); set {ENV_HEADS} to a "
            f"writable folder outside every run (nothing was charged)"
        ) from None


def advance_mark(
    key: LedgerKey,
    ledger_id: str,
    path: str,
    mark: Mark,
    hash_at: Callable[[int], bytes | None] | None,
) -> Mark | None:
    """Move the mark forward to ``mark`` (a committed ``(rows, head)``), under a lock: kept
    when another writer moved it as far or further; ``hash_at=None``: replaced whatever it
    was, even one that fails its MAC (``--accept-restored``). Returns the (valid) mark it
    replaced.

    Raises:
        LedgerIntegrityError: ``mark``'s chain does not pass through the mark (a fork).
        LedgerError: it cannot be written.
    """
    rows, head = mark
    f = _file(ledger_id)
    try:
        f.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with locked_folder(f.parent):
            try:
                old = read_mark(key, ledger_id, path)
            except LedgerIntegrityError:
                if hash_at is not None:
                    raise
                old = None  # accepted over a mark that fails its MAC: nothing to compare with
            if hash_at is not None and old is not None:
                if old[0] > rows:  # another writer of this chain is further on
                    return old
                check_mark(key, ledger_id, path, rows, lambda i: head if i == rows else hash_at(i))
                if old[0] == rows:
                    return old
            doc = {"ledger_id": ledger_id, "rows": rows, "head": head.hex()}
            doc["mac"] = key.mac(_message(ledger_id, rows, head)).hex()
            # renamed into place, not synced (the commit it records is): a crash of the machine
            # leaves the old mark (lagging), the new one, or an empty file (read as none)
            tmp = f.with_name(f".{f.name}.tmp-{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, json.dumps(doc).encode())
            finally:
                os.close(fd)
            os.replace(tmp, f)
            return old
    except (OSError, LdpAuditError) as exc:
        if isinstance(exc, LedgerError):
            raise
        what = (
            "nothing was accepted (the mark is unchanged)"
            if hash_at is None
            else f"the {_words(path)[1]} were committed (the mark lags; the file opens), but no "
            f"later rollback of it is caught until it can be written"
        )
        raise LedgerError(
            f"{_words(path)[0]}: cannot write its high-water mark {str(f)!r}: {exc}; {what}: set "
            f"{ENV_HEADS} to a writable folder outside every run"
        ) from None
