"""The privacy ledger: one durable, hash-chained, keyed row per charge, in SQLite (schema 3).

What the file guarantees (docs/accountant.md has the details and the measurements):

* **Complete in its main file.** The ledger uses SQLite's rollback journal (``TRUNCATE``) with
  ``synchronous=FULL``: when a charge's ``COMMIT`` returns, the charge is in the main database
  file and synced, so copying that one file is a complete backup. There is no ``-wal`` file
  whose loss could silently drop committed charges.
* **Tamper evident.** Every row carries ``hash = SHA-256(previous row's hash | the row)``, the
  first row chaining from a per-ledger random id, and ``agent_n``, the agent's running number of
  charges. The chain head (last hash and row count) is kept in the same transaction. Opening a
  ledger checks the tail of the chain against the head and the per-agent state against the row
  count; ``verify()`` (``ldp-audit budget --verify``) walks the whole chain and rebuilds every
  agent's state from the rows. An edited, deleted or reordered row, a broken index or a lost
  journal is a :class:`LedgerIntegrityError`, never a silently lower spend.
* **Keyed.** The head (row count, last hash, metadata digest) and every agent's state carry an
  HMAC-SHA256 under a key kept outside the run directory (:mod:`ldp_audit.accountant.keys`); an
  agent's MAC covers its event counts, total, last row id and that row's hash, so the state is
  bound to the chain position it summarises. Every read of spend checks it. Without the key,
  reads work and ``authenticated`` is False (``auth_note`` says why); such a ledger, and a
  schema-2 one (no key), is never charged.
* **O(distinct events) reads.** Per-agent running state (the count of every distinct event, the
  agent's total and its last row) is kept in two small tables updated in the same transaction as
  the charge, each row with a checksum; ``history`` and the budget check read the state, cross-
  checked (state rows, the agent's total, the agent's last chained row, the agent's MAC), never
  an index they have not verified.
* **Resume.** ``begin_replay()`` makes the next charges match the rows already here, in order,
  writing nothing for them: a resumed run never charges a release twice.

What it cannot guarantee: a ledger replaced by an older *complete* copy is internally consistent
and its MACs are authentic; that is detectable against the run's manifest anchor or a chain head
recorded elsewhere (``verify(expect_head=...)``). Without the key, anyone who can write the file
can recompute every hash and checksum (docs/accountant.md has the table of what is then still
detected).

Writing: ``charge_rows`` (``Accountant.charge_many``) reads the head and SQLite's
``data_version`` in one query inside the write transaction, hashes the batch in one pass and
writes each table with multi-row inserts. A writer keeps the state of the agents it charged as
its own commits left it; it uses that state only while ``data_version`` (any other connection's
commit) and the connection's ``total_changes`` (any other write through it) are unchanged, and
otherwise reads and verifies the file again, so it never trusts anything it has not verified.

``Ledger(":memory:")`` is a private in-memory ledger for tests (an ephemeral key of its own).
``TallyLedger()`` keeps only per-agent counts in memory (budgets enforced identically; no rows,
no chain): for runs whose ledger nobody reads, never evidence. Ledgers of schema version 1 (WAL
journaling, no chain) are refused with a message naming the version; ``migrate_v1(src, dst)``
converts one (or a schema-2 one) explicitly into a new file.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
import stat
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any

from ldp_audit.accountant.keys import KeyFileError, LedgerKey, load_key
from ldp_audit.errors import InvalidParameterError, LedgerError

__all__ = [
    "Ledger",
    "SCHEMA_VERSION",
    "APPLICATION",
    "LedgerIntegrityError",
    "LedgerReadOnlyError",
    "LedgerSchemaError",
    "AgentState",
    "migrate_v1",
    "TallyLedger",
    "KeyFileError",
    "READABLE_VERSIONS",
]

APPLICATION = "ldp-audit privacy ledger"
#: Schema version of new ledgers: 3 adds the keyed MACs (head and per-agent state).
SCHEMA_VERSION = 3
#: Versions this code reads (2: no key, read as unauthenticated and never written).
READABLE_VERSIONS = (2, 3)
_SQLITE_MAGIC = b"SQLite format 3\x00"
_META = "ldp_audit_meta"
_CHARGES = "ldp_audit_charges"
_STATE = "ldp_audit_state"
_AGENTS = "ldp_audit_agents"
_HEAD = "ldp_audit_head"
#: Rows of the chain's tail re-hashed on every open.
TAIL_ROWS = 64
#: Most agents whose state a writer keeps between its own commits (``Ledger._wc``).
WRITE_CACHE_AGENTS = 262_144
_JOURNAL = "TRUNCATE"
_TMP_RE = re.compile(r"^\..+\.ldp-creating\.(\d+)\.\d+\.tmp(-journal|-wal|-shm)?$")

_SCHEMA = f"""
CREATE TABLE {_META} (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE {_CHARGES} (
    id INTEGER PRIMARY KEY,
    agent TEXT NOT NULL,
    event TEXT NOT NULL,
    scope TEXT NOT NULL,
    time REAL NOT NULL,
    run_id TEXT,
    agent_n INTEGER NOT NULL,
    hash BLOB NOT NULL
);
CREATE TABLE {_STATE} (
    agent TEXT NOT NULL, scope TEXT NOT NULL, event TEXT NOT NULL,
    n INTEGER NOT NULL, chk INTEGER NOT NULL,
    PRIMARY KEY (agent, scope, event)
) WITHOUT ROWID;
CREATE TABLE {_AGENTS} (
    agent TEXT PRIMARY KEY, n INTEGER NOT NULL, last_id INTEGER NOT NULL, chk INTEGER NOT NULL,
    mac BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE {_HEAD} (
    k INTEGER PRIMARY KEY CHECK (k = 1), rows INTEGER NOT NULL, hash BLOB NOT NULL,
    meta BLOB NOT NULL, mac BLOB NOT NULL
);
"""

_SQL_CHARGES = (
    f"INSERT INTO {_CHARGES} (id, agent, event, scope, time, run_id, agent_n, hash) VALUES "
)
_SQL_STATE = f"INSERT OR REPLACE INTO {_STATE} (agent, scope, event, n, chk) VALUES "
_SQL_AGENTS = f"INSERT OR REPLACE INTO {_AGENTS} (agent, n, last_id, chk, mac) VALUES "
#: Rows per multi-row ``INSERT ... VALUES (...), (...)`` (fixed sizes, so that SQLite's prepared
#: statements are reused): one statement per block of rows instead of one step per row; the
#: remainder (fewer rows than the smallest block) goes through ``executemany``.
_BLOCKS = (256, 32)
_STATEMENTS: dict[tuple[str, int, int], str] = {}


def _insert_many(c: sqlite3.Connection, sql: str, ncols: int, rows: Sequence[tuple]) -> None:
    """``INSERT`` ``rows`` with multi-row ``VALUES`` in blocks of ``_BLOCKS`` rows."""
    k, n = 0, len(rows)
    for size in _BLOCKS:
        if n - k < size:
            continue
        stmt = _STATEMENTS.get((sql, ncols, size))
        if stmt is None:
            one = "(" + ", ".join(["?"] * ncols) + ")"
            stmt = _STATEMENTS[(sql, ncols, size)] = sql + ", ".join([one] * size)
        while n - k >= size:
            c.execute(stmt, list(chain.from_iterable(rows[k : k + size])))
            k += size
    if k < n:
        stmt = _STATEMENTS.get((sql, ncols, 1))
        if stmt is None:
            stmt = _STATEMENTS[(sql, ncols, 1)] = sql + "(" + ", ".join(["?"] * ncols) + ")"
        c.executemany(stmt, rows[k:] if k else rows)


#: Where a charge's privacy claim belongs: per-agent local DP, or a central (DP-SGD) model claim.
SCOPES = ("local", "central")


class LedgerIntegrityError(LedgerError):
    """The ledger's contents do not verify (edited, deleted or reordered rows, corrupt state)."""


class LedgerReadOnlyError(LedgerError):
    """The ledger is read-only (file or folder permissions, or opened with ``readonly=True``)."""


class LedgerSchemaError(LedgerError):
    """The file is a ledger of another schema version (e.g. version 1)."""


# ---- hashing -----------------------------------------------------------------------------------


def _genesis(ledger_id: str) -> bytes:
    return hashlib.sha256(f"ldp-audit ledger v2|{ledger_id}".encode()).digest()


def _row_bytes(
    i: int, agent: str, event: str, scope: str, t: float, run_id: str | None, agent_n: int
) -> bytes:
    r = "N" if run_id is None else f"{len(run_id)}:{run_id}"
    return f"{i}|{len(agent)}:{agent}|{len(event)}:{event}|{scope}|{t!r}|{r}|{agent_n}".encode()


def _row_hash(prev: bytes, row_bytes: bytes) -> bytes:
    return hashlib.sha256(prev + row_bytes).digest()


def _state_chk(agent: str, scope: str, event: str, n: int) -> int:
    return zlib.crc32(f"{len(agent)}:{agent}|{scope}|{len(event)}:{event}|{n}".encode())


def _agent_chk(agent: str, n: int, last_id: int) -> int:
    return zlib.crc32(f"{len(agent)}:{agent}|{n}|{last_id}".encode())


def _events_bytes(events: dict[tuple[str, str], int]) -> bytes:
    """Canonical bytes of an agent's event counts (sorted by scope, event)."""
    if len(events) == 1:
        (((s, e), n),) = events.items()
        return f"{s}|{len(e)}:{e}|{n};".encode()
    return "".join(f"{s}|{len(e)}:{e}|{n};" for (s, e), n in sorted(events.items())).encode()


def _agent_msg(
    ledger_id: str,
    agent: str,
    n: int,
    last_id: int,
    last_hash: bytes,
    events: dict[tuple[str, str], int],
) -> bytes:
    """What an agent's MAC authenticates: its state and the chained row (hash) it summarises."""
    return (
        f"agent|{ledger_id}|{len(agent)}:{agent}|{n}|{last_id}|".encode()
        + last_hash
        + b"|"
        + _events_bytes(events)
    )


def _head_msg(ledger_id: str, rows: int, head: bytes, meta_digest: bytes) -> bytes:
    """What the head's MAC authenticates: row count, last hash and the metadata's digest."""
    return f"head|{ledger_id}|{rows}|".encode() + head + b"|" + meta_digest


class AgentState:
    """One agent's verified running state: ``{(scope, event): count}``, total and last row."""

    __slots__ = ("n", "last_id", "events")

    def __init__(
        self, n: int = 0, last_id: int = 0, events: dict[tuple[str, str], int] | None = None
    ) -> None:
        self.n = n
        self.last_id = last_id
        self.events: dict[tuple[str, str], int] = {} if events is None else events

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AgentState):
            return NotImplemented
        return (self.n, self.last_id, self.events) == (other.n, other.last_id, other.events)

    def __repr__(self) -> str:
        return f"AgentState(n={self.n}, last_id={self.last_id}, events={self.events!r})"

    def history(self, scope: str | None = None) -> list[tuple[str, int]]:
        """``[(event, count), ...]`` sorted by event, over ``scope`` (all scopes when None)."""
        if len(self.events) == 1:
            (((s, e), n),) = self.events.items()
            return [(e, n)] if scope is None or s == scope else []
        out: dict[str, int] = {}
        for (s, e), n in self.events.items():
            if scope is None or s == scope:
                out[e] = out.get(e, 0) + n
        return sorted(out.items())


# ---- creation ----------------------------------------------------------------------------------


def _init_schema(c: sqlite3.Connection, key: LedgerKey) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            c.execute(statement)
    ledger_id = uuid.uuid4().hex
    c.executemany(
        f"INSERT INTO {_META} (key, value) VALUES (?, ?)",
        [
            ("application", APPLICATION),
            ("schema_version", str(SCHEMA_VERSION)),
            ("created", str(time.time())),
            ("ledger_id", ledger_id),
            ("key_id", key.id),
        ],
    )
    c.execute(
        f"INSERT INTO {_HEAD} (k, rows, hash, meta, mac) VALUES (1, 0, ?, x'', x'')",
        (_genesis(ledger_id),),
    )
    _seal_meta(c, key)


def _meta_digest(meta: dict[str, str]) -> bytes:
    return hashlib.sha256(json.dumps(sorted(meta.items())).encode()).digest()


def _seal_meta(c: sqlite3.Connection, key: LedgerKey | None) -> None:
    """Record the metadata's digest in the head, and the head's MAC under ``key`` (schema 3;
    ``key`` None: a schema-2 ledger, no MAC), inside the caller's transaction."""
    meta = dict(c.execute(f"SELECT key, value FROM {_META}").fetchall())
    digest = _meta_digest(meta)
    if key is None:
        c.execute(f"UPDATE {_HEAD} SET meta = ? WHERE k = 1", (digest,))
        return
    rows, head = c.execute(f"SELECT rows, hash FROM {_HEAD} WHERE k = 1").fetchone()
    mac = key.mac(_head_msg(meta.get("ledger_id", ""), int(rows), bytes(head), digest))
    c.execute(f"UPDATE {_HEAD} SET meta = ?, mac = ? WHERE k = 1", (digest, mac))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _sweep_stale_temps(path: Path) -> None:
    """Remove temp files of ledger creations (in ``path``'s folder) killed before they finished.

    Only files named by this module whose creating process is gone are removed.
    """
    pattern = _TMP_RE
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if m and not _pid_alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(path.parent / name)


def _create_atomically(path: Path, key: LedgerKey) -> None:
    """Create a new, initialised ledger at ``path`` without ever exposing a partial file.

    The database is built in memory, written to a temporary file beside ``path`` in one write,
    synced and hard-linked into place; if another process created ``path`` meanwhile, its ledger
    is kept and ours discarded. A creation killed between the write and the link leaves a temp
    file named after its pid, which the next open of any ledger in that folder removes. So an
    existing empty file can only be a truncated ledger, which ``Ledger`` refuses.
    """
    _sweep_stale_temps(path)
    tmp = path.with_name(f".{path.name}.ldp-creating.{os.getpid()}.{time.time_ns()}.tmp")
    try:
        mem = sqlite3.connect(":memory:", isolation_level=None)
        try:
            mem.execute("BEGIN")
            _init_schema(mem, key)
            mem.execute("COMMIT")
            image = mem.serialize()
        finally:
            mem.close()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, image)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # no hard links here: fall back to exclusive creation by rename
            if not path.exists():
                os.rename(tmp, path)
    except (sqlite3.Error, OSError) as exc:
        raise LedgerError(f"cannot create ledger {str(path)!r}: {exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    try:  # make the new directory entry durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


def _check_path(path: Any) -> str:
    if isinstance(path, bool) or not isinstance(path, str | os.PathLike):
        raise InvalidParameterError(
            f"path must be a str or os.PathLike naming a ledger file, got {path!r}"
        )
    text = os.fspath(path)
    if isinstance(text, bytes) or not text or not str(text).strip():
        raise InvalidParameterError(f"path must be a non-empty file name, got {path!r}")
    if "\x00" in text:
        raise InvalidParameterError(f"path must not contain NUL bytes, got {path!r}")
    return str(text)


def _check_timeout(timeout: Any) -> float:
    import math
    import numbers

    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise InvalidParameterError(f"timeout must be a real number >= 0, got {timeout!r}")
    t = float(timeout)
    if not (math.isfinite(t) and t >= 0):
        raise InvalidParameterError(f"timeout must be finite and >= 0, got {timeout!r}")
    return t


class Ledger:
    """An append-only, hash-chained SQLite ledger of privacy charges.

    Args:
        path: database file (created when missing) or ``":memory:"``.
        timeout: seconds to wait for another process's write lock.
        verify: on open, run SQLite's ``quick_check`` (linear in the file size) and verify the
            chain's tail and the per-agent state totals. ``verify="full"`` also walks the whole
            chain (``verify()``). Opening never proceeds on a file that fails.
        create: create a new ledger when ``path`` does not exist (else raise ``LedgerError``).
        readonly: open without ever writing (no journal mode change, no schema); a file or
            folder without write permission is opened read-only automatically, and a charge
            then raises ``LedgerReadOnlyError``.

    Raises:
        LedgerError: the file is not an SQLite database, belongs to another application, has
            another schema version (``LedgerSchemaError``), is corrupt, truncated or tampered
            with (``LedgerIntegrityError``), or cannot be opened.
        InvalidParameterError: ``path`` is not a non-empty str/PathLike, or ``timeout`` is bad.
    """

    #: Whether this object is a ledger of record (``TallyLedger``: False).
    evidence = True
    #: Whether reads are checked with the ledger key (set on open; ``TallyLedger``: False).
    authenticated = False
    #: Why not, when not authenticated.
    auth_note = ""
    #: The id of the key the ledger was written under (schema 3), else None.
    key_id: str | None = None
    _replay: list[int] | None = None

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 60.0,
        verify: bool | str = True,
        create: bool = True,
        readonly: bool = False,
    ):
        self.path = _check_path(path)
        self._timeout = _check_timeout(timeout)
        if verify not in (True, False, "full"):
            raise InvalidParameterError(f"verify must be True, False or 'full', got {verify!r}")
        self._memory = self.path == ":memory:"
        self.readonly = bool(readonly) and not self._memory
        self._in_tx = False
        self._lock = threading.RLock()
        self._ledger_id = ""
        self._schema = SCHEMA_VERSION
        #: The key this ledger's MACs are checked and written with (None: unauthenticated).
        self._key: LedgerKey | None = None
        self.authenticated = False
        self.auth_note = ""
        self.key_id = None
        self._write_refusal: str | None = None
        self._replay = None  # [next row to match, last earlier row] while resuming
        # The last full verified state, keyed by the chain head it was read at (read-only).
        self._all_states: tuple[tuple[int, bytes], dict[str, AgentState]] | None = None
        # The writer's cache: the state of every agent this connection charged, exactly as its
        # own last commit left it, valid only while no other connection has committed
        # (``PRAGMA data_version``) and this one changed nothing else (``total_changes``).
        self._wc: dict[str, AgentState] | None = None
        self._wc_key: tuple[int, int] | None = None
        self._wc_complete = False  # the cache holds every agent of the ledger (absent = new)
        if not self._memory:
            p = Path(self.path)
            if p.is_dir():
                raise LedgerError(f"ledger path {self.path!r} is a directory, not a ledger file")
            if not p.exists():
                if not create or self.readonly:
                    raise LedgerError(f"ledger file {self.path!r} does not exist")
                if not p.parent.is_dir():
                    raise LedgerError(
                        f"cannot create ledger {self.path!r}: folder {str(p.parent)!r} does not "
                        f"exist"
                    )
                _create_atomically(p, load_key(create=True))
            else:
                _sweep_stale_temps(p)
            try:
                st_mode = os.stat(p).st_mode
            except OSError as exc:
                raise LedgerError(f"cannot read ledger file {self.path!r}: {exc}") from exc
            if not stat.S_ISREG(st_mode):  # a FIFO or device would block or never end
                raise LedgerError(
                    f"ledger path {self.path!r} is not a regular file (a FIFO, socket or "
                    f"device); refusing to open it"
                )
            try:
                size = p.stat().st_size
                with open(p, "rb") as fh:
                    head = fh.read(len(_SQLITE_MAGIC))
            except PermissionError as exc:
                raise LedgerReadOnlyError(
                    f"ledger file {self.path!r} cannot be read (permission denied)"
                ) from exc
            except OSError as exc:
                raise LedgerError(f"cannot read ledger file {self.path!r}: {exc}") from exc
            if size == 0:
                raise LedgerError(
                    f"ledger file {self.path!r} exists but is empty (0 bytes): a truncated "
                    f"ledger cannot be told from a new one, so it is refused; delete it to start "
                    f"a new ledger"
                )
            if head != _SQLITE_MAGIC:
                raise LedgerError(
                    f"ledger file {self.path!r} is not an SQLite database (foreign or "
                    f"corrupt file); refusing to treat it as an empty ledger"
                )
            if not self.readonly and not (
                os.access(p, os.W_OK) and os.access(p.parent, os.W_OK | os.X_OK)
            ):
                self.readonly = True  # reads work; a charge raises LedgerReadOnlyError
        try:
            if self.readonly:
                uri = Path(self.path).resolve().as_uri() + "?mode=ro"
                self._conn = sqlite3.connect(
                    uri,
                    uri=True,
                    timeout=self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                self._conn = sqlite3.connect(
                    self.path,
                    timeout=self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open ledger {self.path!r}: {exc}") from exc
        try:
            self._setup(verify)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise self._wrap(exc, "open") from exc
        except BaseException:
            self._conn.close()
            raise

    @property
    def durable(self) -> bool:
        """Whether charges survive the process (a file ledger; ``":memory:"`` does not)."""
        return not self._memory

    # ---- errors ------------------------------------------------------------------------------

    def _wrap(self, exc: sqlite3.Error, what: str) -> LedgerError:
        msg = str(exc)
        low = msg.lower()
        if isinstance(exc, sqlite3.ProgrammingError):  # e.g. a closed ledger: misuse, not damage
            return LedgerError(f"ledger {self.path!r}: cannot {what}: {msg}")
        if "readonly" in low or "read-only" in low:
            return LedgerReadOnlyError(f"ledger {self.path!r} is read-only; cannot {what}: {msg}")
        if "locked" in low or "busy" in low:
            return LedgerError(f"ledger {self.path!r}: cannot {what}, the ledger is busy: {msg}")
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(
            exc, sqlite3.OperationalError | sqlite3.IntegrityError
        ):
            return LedgerIntegrityError(
                f"ledger {self.path!r} is corrupt, truncated or unreadable ({what}): {msg}"
            )
        if "malformed" in low or "corrupt" in low or "not a database" in low:
            return LedgerIntegrityError(
                f"ledger {self.path!r} is corrupt, truncated or unreadable ({what}): {msg}"
            )
        return LedgerError(f"ledger {self.path!r}: cannot {what}: {msg}")

    def _bad(self, what: str) -> LedgerIntegrityError:
        return LedgerIntegrityError(
            f"ledger {self.path!r} failed verification: {what}; the ledger was edited, "
            f"truncated or corrupted, and its spend cannot be trusted (run `ldp-audit budget "
            f"{self.path} --verify` for a full check)"
        )

    # ---- setup -------------------------------------------------------------------------------

    def _setup(self, verify: bool | str) -> None:
        c = self._conn
        if self._memory:  # a private ledger: an ephemeral key of this process
            key = LedgerKey(secrets.token_bytes(32), ":memory: (ephemeral)")
            c.execute("BEGIN")
            _init_schema(c, key)
            c.execute("COMMIT")
            self._ledger_id = self.meta()["ledger_id"]
            self._key, self.key_id, self.authenticated = key, key.id, True
            return
        # Identify the file before anything that could write to it.
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if _META not in tables:
            others = sorted(t for t in tables if not t.startswith("sqlite_"))
            raise LedgerError(
                f"ledger file {self.path!r} is an SQLite database of another application "
                f"(tables {others!r}, no {_META!r} table); refusing to use it as a ledger"
            )
        meta = dict(c.execute(f"SELECT key, value FROM {_META}").fetchall())
        if meta.get("application") != APPLICATION:
            raise LedgerError(
                f"ledger file {self.path!r} has an {_META!r} table but application "
                f"{meta.get('application')!r}, expected {APPLICATION!r}"
            )
        try:
            version = int(meta.get("schema_version", "-1"))
        except ValueError:
            version = -1
        if version not in READABLE_VERSIONS:
            hint = (
                "; it was written by an older ldp-audit (WAL journal, no hash chain): convert it "
                "explicitly with ldp_audit.accountant.ledger.migrate_v1(src, dst) or "
                "`ldp-audit budget LEDGER --migrate-to NEW`"
                if version == 1
                else ""
            )
            raise LedgerSchemaError(
                f"ledger {self.path!r} has schema version {meta.get('schema_version')}; this "
                f"ldp-audit reads versions {READABLE_VERSIONS}{hint}"
            )
        self._schema = version
        missing = {_CHARGES, _STATE, _AGENTS, _HEAD} - tables
        if missing:
            raise self._bad(f"tables {sorted(missing)} are missing")
        self._ledger_id = meta.get("ledger_id", "")
        sealed = c.execute(f"SELECT meta FROM {_HEAD} WHERE k = 1").fetchall()
        if len(sealed) != 1 or sealed[0][0] != _meta_digest(meta):
            raise self._bad("the metadata (budget, ids) does not match its recorded digest")
        self._resolve_key(meta)
        if self._key is not None:
            self._check_head_mac()
        if self._write_refusal is not None:
            self.readonly = True
        if not self.readonly:
            mode = c.execute(f"PRAGMA journal_mode={_JOURNAL}").fetchone()[0]
            if str(mode).upper() != _JOURNAL:
                raise LedgerError(
                    f"ledger {self.path!r} cannot use the {_JOURNAL} rollback journal "
                    f"(got {mode!r})"
                )
            c.execute("PRAGMA synchronous=FULL")
        if verify:
            problems = [r[0] for r in c.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                raise LedgerIntegrityError(
                    f"ledger {self.path!r} failed SQLite's integrity check: {problems[:3]!r}"
                )
            with self._read_tx():
                self._verify_open()
            if verify == "full":
                self.verify()

    def _resolve_key(self, meta: dict[str, str]) -> None:
        """Pick the key that authenticates this ledger (schema 3), or say why there is none."""
        if self._schema < 3:
            self.auth_note = (
                f"schema version {self._schema}: written before ledgers were keyed, so nothing "
                f"in it is authenticated (migrate it with `ldp-audit budget LEDGER --migrate-to "
                f"NEW`)"
            )
            self._write_refusal = (
                f"ledger {self.path!r} has schema version {self._schema} (no key): it is read "
                f"only; convert it with `ldp-audit budget LEDGER --migrate-to NEW` to charge it"
            )
            return
        self.key_id = meta.get("key_id")
        key = load_key(create=False)  # a reader never creates a key
        if key is None:
            self.auth_note = (
                f"no ledger key in this process (set LDP_AUDIT_KEY_FILE or LDP_AUDIT_KEY, or "
                f"create the default key file): the ledger was written under key id "
                f"{self.key_id}, and its MACs cannot be checked"
            )
        elif key.id != self.key_id:
            self.auth_note = (
                f"the ledger was written under key id {self.key_id}; this process's key "
                f"({key.source}) has id {key.id}, so its MACs cannot be checked"
            )
        else:
            self._key, self.authenticated = key, True
            return
        self._write_refusal = (
            f"ledger {self.path!r} cannot be charged: {self.auth_note}; a charge would leave "
            f"it without valid MACs"
        )

    def _check_sealed(self) -> None:
        """Inside a write: the metadata must match its digest and the head its MAC, so that
        resealing never launders an edit made outside ldp-audit."""
        meta = dict(self._conn.execute(f"SELECT key, value FROM {_META}").fetchall())
        (digest,) = self._conn.execute(f"SELECT meta FROM {_HEAD} WHERE k = 1").fetchone()
        if digest != _meta_digest(meta):
            raise self._bad("the metadata (budget, ids) does not match its recorded digest")
        self._check_head_mac()

    def _check_head_mac(self) -> None:
        """The head (row count, last hash, metadata digest) must carry its MAC (cheap)."""
        got = self._conn.execute(
            f"SELECT rows, hash, meta, mac FROM {_HEAD} WHERE k = 1"
        ).fetchall()
        if len(got) != 1 or not isinstance(got[0][1], bytes):
            raise self._bad("the chain head is missing")
        rows, head, digest, mac = got[0]
        self._check_head_mac_of(int(rows), bytes(head), bytes(digest), mac)

    def _check_head_mac_of(self, rows: int, head: bytes, digest: bytes, mac: Any) -> None:
        key = self._key
        if key is None:
            return
        want = key.mac(_head_msg(self._ledger_id, rows, head, digest))
        if not isinstance(mac, bytes) or not hmac.compare_digest(want, mac):
            raise self._bad(
                f"the chain head ({rows} rows) or the metadata (budget, ids) does not carry "
                f"the MAC of key id {key.id} (rewritten, truncated or edited)"
            )

    def _check_agent_mac(self, agent: str, st: AgentState, last_hash: Any, mac: Any) -> None:
        key = self._key
        if key is None:
            return
        if not isinstance(last_hash, bytes):
            raise self._bad(f"agent {agent!r}: its last chained row {st.last_id} is missing")
        want = key.mac(_agent_msg(self._ledger_id, agent, st.n, st.last_id, last_hash, st.events))
        if not isinstance(mac, bytes) or not hmac.compare_digest(want, mac):
            raise self._bad(
                f"the running state of agent {agent!r} ({st.n} charges, last row "
                f"{st.last_id}) does not carry the MAC of key id {key.id}: the per-agent state "
                f"was edited apart from its chain"
            )

    def _verify_open(self) -> None:
        """Tail of the chain against the head; per-agent totals against the row count."""
        c = self._conn
        rows, head = self._head()
        top = c.execute(f"SELECT COALESCE(MAX(id), 0) FROM {_CHARGES}").fetchone()[0]
        if top != rows:
            raise self._bad(f"the chain head records {rows} rows but the last row id is {top}")
        self._verify_rows(max(1, rows - TAIL_ROWS + 1), rows, head)
        for table in (_AGENTS, _STATE):
            total = c.execute(f"SELECT COALESCE(SUM(n), 0) FROM {table}").fetchone()[0]
            if total != rows:
                raise self._bad(
                    f"the per-agent state ({table}) counts {total} charges, the chain {rows}"
                )

    def _head(self) -> tuple[int, bytes]:
        got = self._conn.execute(f"SELECT rows, hash FROM {_HEAD} WHERE k = 1").fetchall()
        if len(got) != 1 or not isinstance(got[0][1], bytes):
            raise self._bad("the chain head is missing")
        return int(got[0][0]), bytes(got[0][1])

    def _verify_rows(self, first: int, last: int, head: bytes | None) -> None:
        """Re-hash rows ``first..last`` from row ``first - 1``'s hash; last must equal ``head``."""
        if last < first:
            if head is not None and last == 0 and head != _genesis(self._ledger_id):
                raise self._bad("the chain head of an empty ledger is not its genesis hash")
            return
        c = self._conn
        if first == 1:
            prev = _genesis(self._ledger_id)
        else:
            got = c.execute(f"SELECT hash FROM {_CHARGES} WHERE id = ?", (first - 1,)).fetchall()
            if not got:
                raise self._bad(f"row {first - 1} is missing")
            prev = bytes(got[0][0])
        expect = first
        for i, agent, event, scope, t, run_id, agent_n, h in c.execute(
            f"SELECT id, agent, event, scope, time, run_id, agent_n, hash FROM {_CHARGES} "
            "WHERE id >= ? AND id <= ? ORDER BY id",
            (first, last),
        ):
            if i != expect:
                raise self._bad(f"row {expect} is missing (next row is {i})")
            prev = _row_hash(prev, _row_bytes(i, agent, event, scope, t, run_id, agent_n))
            if prev != h:
                raise self._bad(f"row {i} does not match its hash (edited, reordered or corrupt)")
            expect += 1
        if expect != last + 1:
            raise self._bad(f"rows {expect}..{last} are missing")
        if head is not None and prev != head:
            raise self._bad("the last row's hash is not the recorded chain head")

    # ---- transactions ------------------------------------------------------------------------

    @contextmanager
    def _read_tx(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for several reads (a no-op inside a write transaction)."""
        with self._lock:
            if self._in_tx:
                yield self._conn
                return
            try:
                self._conn.execute("BEGIN")
                yield self._conn
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise self._wrap(exc, "read") from exc
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``: holds the write lock from the first statement.

        Reads inside see every committed charge and no other process can commit until this
        transaction ends, so a budget check inside it cannot be raced. Any exception rolls back.
        The commit returns once the main file holds the transaction and is synced
        (rollback journal, ``synchronous=FULL``).
        """
        with self._lock:
            if self._in_tx:
                raise LedgerError(f"ledger {self.path!r}: nested transactions are not supported")
            if self.readonly:
                raise LedgerReadOnlyError(
                    self._write_refusal
                    or f"ledger {self.path!r} is read-only (opened read-only, or the file or its "
                    f"folder is not writable): nothing can be charged"
                )
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                if "locked" in str(exc).lower() or "busy" in str(exc).lower():
                    raise LedgerError(
                        f"ledger {self.path!r}: cannot take the write lock: {exc}"
                    ) from exc
                raise self._wrap(exc, "take the write lock") from exc
            self._in_tx = True
            try:
                yield self._conn
            except sqlite3.Error as exc:
                self._in_tx = False
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise self._wrap(exc, "write") from exc
            except BaseException:
                self._in_tx = False
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise
            self._in_tx = False
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("ROLLBACK")
                raise self._wrap(exc, "commit") from exc

    # ---- state -------------------------------------------------------------------------------

    def _load_states(self, agents: Sequence[str]) -> dict[str, AgentState]:
        """Verified running state of ``agents`` (absent agents: never charged).

        Three independent records must agree for every agent: its state rows (each with a
        checksum), its agent row (total and last row id, with a checksum) and its last chained
        row (agent and running count). Must run inside a transaction or ``_read_tx``.
        """
        c = self._conn
        out: dict[str, AgentState] = {}
        if not agents:
            return out
        param = json.dumps(list(agents))
        seen_rows = 0
        macs: dict[str, tuple[Any, Any]] = {}
        mac_col = "a.mac" if self._schema >= 3 else "NULL"
        # One pass: every agent row with its state rows and its last chained row.
        for (
            agent,
            n,
            last_id,
            chk,
            mac,
            row_agent,
            row_n,
            row_hash,
            scope,
            event,
            sn,
            schk,
        ) in c.execute(
            f"SELECT a.agent, a.n, a.last_id, a.chk, {mac_col}, c.agent, c.agent_n, c.hash, "
            f"s.scope, s.event, s.n, s.chk FROM {_AGENTS} a "
            f"LEFT JOIN {_CHARGES} c ON c.id = a.last_id "
            f"LEFT JOIN {_STATE} s ON s.agent = a.agent "
            f"WHERE a.agent IN (SELECT value FROM json_each(?))",
            (param,),
        ):
            st = out.get(agent)
            if st is None:
                if chk != _agent_chk(agent, n, last_id):
                    raise self._bad(f"the running state of agent {agent!r} fails its checksum")
                if row_agent != agent or row_n != n:
                    raise self._bad(
                        f"agent {agent!r}: its running state ({n} charges, last row {last_id}) "
                        f"disagrees with the chained row {last_id}"
                    )
                st = out[agent] = AgentState(n, last_id)
                macs[agent] = (row_hash, mac)
            if sn is None:
                raise self._bad(f"agent {agent!r} has a running total but no event counts")
            if sn <= 0 or schk != _state_chk(agent, scope, event, sn):
                raise self._bad(f"a state row of agent {agent!r} fails its checksum")
            st.events[(scope, event)] = sn
            seen_rows += 1
        for agent, st in out.items():
            if sum(st.events.values()) != st.n:
                raise self._bad(
                    f"agent {agent!r}: its event counts sum to {sum(st.events.values())}, its "
                    f"running total is {st.n}"
                )
            if self._key is not None:
                self._check_agent_mac(agent, st, *macs[agent])
        # State rows of agents that have no running total (e.g. a lost agent row) are caught
        # by counting them independently of the join.
        (n_state,) = c.execute(
            f"SELECT COUNT(*) FROM {_STATE} WHERE agent IN (SELECT value FROM json_each(?))",
            (param,),
        ).fetchone()
        if n_state != seen_rows:
            missing = [
                r[0]
                for r in c.execute(
                    f"SELECT DISTINCT agent FROM {_STATE} "
                    f"WHERE agent IN (SELECT value FROM json_each(?))",
                    (param,),
                )
                if r[0] not in out
            ]
            raise self._bad(
                f"agents {missing[:3]!r} have event counts but no running total"
                if missing
                else "the per-agent state changed while it was read"
            )
        return out

    def _fetch_all_states(self) -> tuple[list[tuple], list[tuple]]:
        """The raw agent and state rows (inside a read transaction: one consistent snapshot)."""
        c = self._conn
        if self._key is None:
            agents = c.execute(
                f"SELECT agent, n, last_id, chk, NULL, NULL FROM {_AGENTS}"
            ).fetchall()
        else:  # with the MAC and the hash of the chained row it summarises
            agents = c.execute(
                f"SELECT a.agent, a.n, a.last_id, a.chk, a.mac, c.hash FROM {_AGENTS} a "
                f"LEFT JOIN {_CHARGES} c ON c.id = a.last_id"
            ).fetchall()
        return (
            agents,
            c.execute(f"SELECT agent, scope, event, n, chk FROM {_STATE}").fetchall(),
        )

    def _load_all_states_uncached(
        self, rows: int, fetched: tuple[list[tuple], list[tuple]] | None = None
    ) -> dict[str, AgentState]:
        """Verify every agent's state rows (checksums, totals) against ``rows`` charges."""
        agent_rows, state_rows = self._fetch_all_states() if fetched is None else fetched
        crc = zlib.crc32
        out: dict[str, AgentState] = {}
        total = 0
        for agent, n, last_id, chk, _, _ in agent_rows:
            if chk != crc(f"{len(agent)}:{agent}|{n}|{last_id}".encode()):  # _agent_chk
                raise self._bad(f"the running state of agent {agent!r} fails its checksum")
            out[agent] = AgentState(n, last_id)
            total += n
        if total != rows:
            raise self._bad(f"the agents' running totals count {total} charges, the chain {rows}")
        seen = 0
        get = out.get
        for agent, scope, event, n, chk in state_rows:
            # _state_chk, inlined
            if chk != crc(f"{len(agent)}:{agent}|{scope}|{len(event)}:{event}|{n}".encode()):
                raise self._bad(f"a state row of agent {agent!r} fails its checksum")
            st = get(agent)
            if st is None:
                raise self._bad(f"agent {agent!r} has event counts but no running total")
            if n <= 0:
                raise self._bad(f"a state row of agent {agent!r} has count {n}")
            st.events[(scope, event)] = n
            seen += n
        if seen != rows:
            raise self._bad(f"the event counts sum to {seen} charges, the chain holds {rows}")
        for agent, st in out.items():
            ev = st.events
            if (next(iter(ev.values())) if len(ev) == 1 else sum(ev.values())) != st.n:
                raise self._bad(f"agent {agent!r}: its event counts disagree with its total")
        if self._key is not None:
            check = self._check_agent_mac
            for agent, _, _, _, mac, last_hash in agent_rows:
                check(agent, out[agent], last_hash, mac)
        return out

    def _append_rows(
        self,
        rows: Sequence[tuple[str, str, str]],
        states: dict[str, AgentState],
        *,
        run_id: str | None,
        when: float | None,
        times: Sequence[float] | None = None,
        head: tuple[int, bytes] | None = None,
    ) -> tuple[list[tuple], list[tuple]]:
        """Append ``(agent, event, scope)`` rows, chain them and update the state tables.

        ``states`` must hold the verified state of every agent of ``rows`` (from
        ``_load_states`` in the same transaction). ``times`` (one per row) overrides ``when``;
        ``head`` is the chain head read in this transaction (read here when None).

        Returns:
            The rows written to the agents table ``(agent, n, last_id, chk)`` and to the state
            table ``(agent, scope, event, n, chk)``: the charged agents' state once the
            transaction commits.
        """
        c = self._conn
        key = self._key
        if key is None or self._schema < 3:  # transaction() refuses these before any write
            raise LedgerReadOnlyError(self._write_refusal or f"ledger {self.path!r}: no key")
        mac_of = key.mac
        lid = self._ledger_id
        n_rows, prev = self._head() if head is None else head
        t = time.time() if when is None else float(when)
        r = "N" if run_id is None else f"{len(run_id)}:{run_id}"
        sha256 = hashlib.sha256
        crc = zlib.crc32
        get_state = states.get
        new_rows: list[tuple] = []
        append = new_rows.append
        i = n_rows
        agent_rows: list[tuple]
        state_rows: list[tuple]
        if times is None and len({a for a, _, _ in rows}) == len(rows):
            # Every agent once (a lock-step, a fresh round): one pass writes all three tables.
            # The row bytes are f"{id}|{len(agent)}:{agent}" + tail + f"{agent_n}" (exactly
            # ``_row_bytes``), the state checksum f"{len(agent)}:{agent}" + mid + f"{count}"
            # (``_state_chk``); tail and mid are shared by every row of an (event, scope).
            parts: dict[tuple[str, str], tuple[str, str]] = {}
            agent_rows = []
            state_rows = []
            add_agent, add_state = agent_rows.append, state_rows.append
            for agent, event, scope in rows:
                i += 1
                key = (scope, event)
                p = parts.get(key)
                if p is None:
                    p = parts[key] = (
                        f"|{len(event)}:{event}|{scope}|{t!r}|{r}|",
                        f"|{scope}|{len(event)}:{event}|",
                    )
                st = get_state(agent)
                if st is None:  # a new agent
                    n = cnt = 1
                    events = {key: 1}
                else:
                    n = st.n + 1
                    cnt = st.events.get(key, 0) + 1
                    events = dict(st.events)
                    events[key] = cnt
                la = f"{len(agent)}:{agent}"
                prev = sha256(prev + f"{i}|{la}{p[0]}{n}".encode()).digest()
                append((i, agent, event, scope, t, run_id, n, prev))
                mac = mac_of(_agent_msg(lid, agent, n, i, prev, events))
                add_agent((agent, n, i, crc(f"{la}|{n}|{i}".encode()), mac))
                add_state((agent, scope, event, cnt, crc(f"{la}{p[1]}{cnt}".encode())))
        else:
            tails: dict[tuple[str, str], str] = {}
            agent_n: dict[str, int] = {}  # running total of each touched agent
            agent_last: dict[str, int] = {}
            agent_hash: dict[str, bytes] = {}
            counts: dict[tuple[str, str, str], int] = {}  # (agent, scope, event) -> new count
            get_n, get_count = agent_n.get, counts.get
            for k, (agent, event, scope) in enumerate(rows):
                i += 1
                n = get_n(agent)
                key3 = (agent, scope, event)
                if n is None:  # the agent's first row in this batch
                    st = get_state(agent)
                    n = 1 if st is None else st.n + 1
                else:
                    n += 1
                cnt = get_count(key3)
                if cnt is None:
                    st = get_state(agent)
                    cnt = 0 if st is None else st.events.get((scope, event), 0)
                counts[key3] = cnt + 1
                agent_n[agent] = n
                agent_last[agent] = i
                if times is None:
                    tail = tails.get((scope, event))
                    if tail is None:
                        tail = tails[(scope, event)] = f"|{len(event)}:{event}|{scope}|{t!r}|{r}|"
                    prev = sha256(prev + f"{i}|{len(agent)}:{agent}{tail}{n}".encode()).digest()
                    append((i, agent, event, scope, t, run_id, n, prev))
                else:
                    tk = float(times[k])
                    prev = _row_hash(prev, _row_bytes(i, agent, event, scope, tk, run_id, n))
                    append((i, agent, event, scope, tk, run_id, n, prev))
                agent_hash[agent] = prev
            state_rows = [
                (a, s, e, n, crc(f"{len(a)}:{a}|{s}|{len(e)}:{e}|{n}".encode()))  # _state_chk
                for (a, s, e), n in counts.items()
            ]
            new_events: dict[str, dict[tuple[str, str], int]] = {}
            for (a, s, e), n in counts.items():
                ev = new_events.get(a)
                if ev is None:
                    st = get_state(a)
                    ev = new_events[a] = {} if st is None else dict(st.events)
                ev[(s, e)] = n
            agent_rows = [
                (
                    a,
                    n,
                    last,
                    crc(f"{len(a)}:{a}|{n}|{last}".encode()),  # _agent_chk
                    mac_of(_agent_msg(lid, a, n, last, agent_hash[a], new_events[a])),
                )
                for a, n in agent_n.items()
                for last in (agent_last[a],)
            ]
        agent_rows.sort()
        state_rows.sort()
        _insert_many(c, _SQL_CHARGES, 8, new_rows)
        _insert_many(c, _SQL_STATE, 5, state_rows)
        _insert_many(c, _SQL_AGENTS, 5, agent_rows)
        (digest,) = c.execute(f"SELECT meta FROM {_HEAD} WHERE k = 1").fetchone()
        mac = mac_of(_head_msg(lid, i, prev, bytes(digest)))
        c.execute(f"UPDATE {_HEAD} SET rows = ?, hash = ?, mac = ? WHERE k = 1", (i, prev, mac))
        return agent_rows, state_rows

    def _check_write_head(self) -> tuple[int, int, bytes]:
        """Inside a write: the head must match the last row (one query, two indexed lookups).

        Returns:
            ``(data_version, rows, head hash)``: SQLite's ``data_version`` of this connection
            (it changes whenever another connection has committed) and the verified head.
        """
        got = self._conn.execute(
            f"SELECT (SELECT data_version FROM pragma_data_version()), h.rows, h.hash, c.id, "
            f"c.hash, h.meta, h.mac FROM {_HEAD} h LEFT JOIN {_CHARGES} c "
            f"ON c.id = (SELECT MAX(id) FROM {_CHARGES}) WHERE h.k = 1"
        ).fetchall()
        if len(got) != 1 or not isinstance(got[0][2], bytes):
            raise self._bad("the chain head is missing")
        dv, rows, head, top, h, digest, mac = got[0]
        if top is None:
            top, h = 0, _genesis(self._ledger_id)
        if top != rows or h != head:
            raise self._bad(
                f"the chain head ({rows} rows) does not match the last row ({top}); rows were "
                f"added or removed outside ldp-audit"
            )
        self._check_head_mac_of(int(rows), bytes(head), bytes(digest), mac)
        return int(dv), int(rows), bytes(head)

    def _writer_states(
        self, agents: Sequence[str], dv: int, rows: int
    ) -> tuple[dict[str, AgentState], dict[str, AgentState], bool]:
        """Verified state of ``agents`` for a write (inside the write transaction).

        The writer's cache is used only while nothing but this connection's own charges has
        changed the file since it was filled: SQLite's ``data_version`` (read in this
        transaction, under the write lock) changes when any other connection commits, and
        ``total_changes`` when this connection writes anything else; either invalidates it.
        What it holds was read through ``_load_states`` (checksums, totals, the chained row)
        or written by this connection's own committed charges, so it is never less than the
        verified state on disk. Agents it does not hold are read through ``_load_states``,
        unless the cache holds every agent of the ledger (it started at an empty ledger).

        Returns:
            ``(states of agents, the cache to fold the commit into, complete)``.
        """
        cache = self._wc
        if cache is not None and self._wc_key == (dv, self._conn.total_changes):
            complete = self._wc_complete
            states: dict[str, AgentState] = {}
            missing = []
            get = cache.get
            for a in agents:
                st = get(a)
                if st is not None:
                    states[a] = st
                elif not complete:
                    missing.append(a)
            if missing:
                states.update(self._load_states(missing))
            return states, cache, complete
        self._wc = None
        if rows == 0:  # an empty ledger: no agent may hold state, then every agent is new
            (n_agents, n_state) = self._conn.execute(
                f"SELECT (SELECT COUNT(*) FROM {_AGENTS}), (SELECT COUNT(*) FROM {_STATE})"
            ).fetchone()
            if n_agents or n_state:
                raise self._bad(
                    f"the chain holds no rows but {n_agents} agents and {n_state} event counts "
                    f"have running state"
                )
            return {}, {}, True
        return self._load_states(agents), {}, False

    def _fold(
        self,
        cache: dict[str, AgentState],
        states: dict[str, AgentState],
        written: tuple[list[tuple], list[tuple]],
        complete: bool,
        dv: int,
    ) -> None:
        """After a commit: the cache takes the committed state of the charged agents."""
        agent_rows, state_rows = written
        get = states.get
        if len(agent_rows) == len(state_rows):  # one state row per agent, both sorted by agent
            for (a, n, last, _, _), (_, s, e, cnt, _) in zip(agent_rows, state_rows, strict=True):
                st = get(a)
                if st is None:
                    cache[a] = AgentState(n, last, {(s, e): cnt})
                else:
                    st.n = n
                    st.last_id = last
                    st.events[(s, e)] = cnt
                    cache[a] = st
        else:
            for a, n, last, _, _ in agent_rows:
                st = get(a)
                if st is None:
                    cache[a] = AgentState(n, last)
                else:
                    st.n = n
                    st.last_id = last
                    cache[a] = st
            for a, s, e, n, _ in state_rows:
                cache[a].events[(s, e)] = n
        if len(cache) > WRITE_CACHE_AGENTS:
            self._wc = None
            return
        self._wc = cache
        self._wc_complete = complete
        self._wc_key = (dv, self._conn.total_changes)

    def charge_rows(
        self,
        rows: Sequence[tuple[str, str, str]],
        *,
        run_id: str | None = None,
        check: Callable[[dict[str, AgentState]], None] | None = None,
        when: float | None = None,
    ) -> int:
        """Append ``(agent, event_json, scope)`` rows in one durable transaction.

        ``check(states)`` runs inside the write transaction with the verified state of every
        agent of ``rows`` (``{agent: AgentState}``, absent = never charged) before anything is
        written; an exception from it rolls everything back. Used by ``Accountant`` for its
        budget check. Runs inside an open ``transaction()`` too.
        """
        if not rows:
            return 0
        # The lock is taken before ``_in_tx`` is read: another thread's open transaction must
        # make this thread wait, never let it write into that transaction.
        with self._lock:
            if self._replay is not None:
                return self._charge_replaying(rows, run_id=run_id, check=check, when=when)
            return self._charge_rows(rows, rows, run_id=run_id, check=check, when=when)

    def _charge_rows(
        self,
        rows: Sequence[tuple[str, str, str]],
        batch: Sequence[tuple[str, str, str]],
        *,
        run_id: str | None,
        check: Callable[[dict[str, AgentState]], None] | None,
        when: float | None,
    ) -> int:
        """Write ``rows`` (the part of ``batch`` not replayed); ``check`` sees ``batch``'s
        agents (under the lock)."""
        agents = list(dict.fromkeys([r[0] for r in batch]))
        with self._lock:
            if self._in_tx:
                # A caller's transaction may still roll back: no cache, read everything.
                self._wc = None
                try:
                    _, n_rows, head = self._check_write_head()
                    states = self._load_states(agents)
                    if check is not None:
                        check(states)
                    self._append_rows(rows, states, run_id=run_id, when=when, head=(n_rows, head))
                except sqlite3.Error as exc:
                    raise self._wrap(exc, "write") from exc
                return len(rows)
            with self.transaction():
                dv, n_rows, head = self._check_write_head()
                states, cache, complete = self._writer_states(agents, dv, n_rows)
                if check is not None:
                    check(states)
                new = self._append_rows(rows, states, run_id=run_id, when=when, head=(n_rows, head))
            self._fold(cache, states, new, complete, dv)  # committed
        return len(rows)

    # ---- resume: replaying the charges already in the ledger ---------------------------------

    def begin_replay(self) -> int:
        """Resume a run: match the next charges, in order, against the rows already here.

        A resumed run reruns from its seed and makes the same charges in the same order. From
        this call on, each charge is compared with the ledger's next earlier row (row 1 first):
        equal (agent, event, scope) means it was charged before the interruption, and nothing
        is written (no double charge); once every earlier row has been matched, charges are
        written as usual. A budget check of a batch that straddles the end sees the state
        before the batch (the replayed rows taken out), as the first attempt did.

        Returns:
            The number of earlier rows to replay.

        Raises:
            LedgerError: a later charge differs from the row it replays (the resumed run is
                not the run that charged this ledger); nothing of that batch is written.
        """
        with self._lock:
            n = len(self)
            self._replay = [1, n] if n else None
            self._replayed = 0
            self._replay_rows = n
            self._replay_buf: list[tuple[str, str, str]] = []
            self._replay_buf_start = 1
        return n

    def replay_status(self) -> dict[str, int] | None:
        """``{"rows", "replayed", "pending"}`` since :meth:`begin_replay` (None: never called).

        ``pending`` > 0 after a resumed run finished: earlier charges the rerun never made
        (kept: charged and never released, the safe direction)."""
        n = getattr(self, "_replay_rows", None)
        if n is None:
            return None
        return {"rows": n, "replayed": self._replayed, "pending": n - self._replayed}

    def _replay_row(self, i: int) -> tuple[str, str, str]:
        buf, start = self._replay_buf, self._replay_buf_start
        if not start <= i < start + len(buf):
            got = self._read(
                f"SELECT agent, event, scope FROM {_CHARGES} WHERE id >= ? AND id < ? ORDER BY id",
                (i, i + 4096),
            )
            self._replay_buf, self._replay_buf_start = [tuple(r) for r in got], i
            buf, start = self._replay_buf, i
            if not buf:
                raise self._bad(f"row {i} is missing (resume)")
        return buf[i - start]

    def _charge_replaying(
        self,
        rows: Sequence[tuple[str, str, str]],
        *,
        run_id: str | None,
        check: Callable[[dict[str, AgentState]], None] | None,
        when: float | None,
    ) -> int:
        replay = self._replay
        if replay is None:  # pragma: no cover - the caller checked, under the lock
            return self._charge_rows(rows, rows, run_id=run_id, check=check, when=when)
        nxt, last = replay
        k = 0
        while k < len(rows) and nxt <= last:
            want = self._replay_row(nxt)
            got = (rows[k][0], rows[k][1], rows[k][2])
            if got != want:
                raise LedgerError(
                    f"ledger {self.path!r}: the resumed run does not repeat the charges of the "
                    f"run it resumes: row {nxt} charged {want!r}, the resumed run charges "
                    f"{got!r} (a different config, seed or code); nothing of this batch was "
                    f"charged. Start a new run instead of --resume"
                )
            k += 1
            nxt += 1
        if k == len(rows):  # every charge of the batch was made before the interruption
            replay[0] = nxt
            self._replayed += k
            if nxt > last:
                self._replay = None
            return len(rows)
        replayed = rows[:k]
        inner = check
        if inner is not None and replayed:

            def check(states: dict[str, AgentState]) -> None:
                before = {
                    a: AgentState(st.n, st.last_id, dict(st.events)) for a, st in states.items()
                }
                for a, e, sc in replayed:
                    st = before[a]
                    st.n -= 1
                    st.events[(sc, e)] -= 1
                    if not st.events[(sc, e)]:
                        del st.events[(sc, e)]
                    if not st.n:
                        del before[a]
                inner(before)

        self._charge_rows(rows[k:], rows, run_id=run_id, check=check, when=when)
        self._replayed += k
        self._replay = None  # past the last earlier row
        return len(rows)

    def _insert(
        self, rows: Sequence[tuple[str, str, str]], *, run_id: str | None, when: float | None
    ) -> None:
        """Insert ``(agent, event_json, scope)`` rows; must run inside ``transaction()``."""
        with self._lock:
            if not self._in_tx:
                raise LedgerError("Ledger._insert must run inside Ledger.transaction()")
            self.charge_rows(rows, run_id=run_id, when=when)

    def append(
        self,
        rows: Iterable[tuple[str, str]] | Iterable[tuple[str, str, str]],
        *,
        run_id: str | None = None,
    ) -> int:
        """Append raw ``(agent, event_json[, scope])`` rows in one durable transaction.

        No budget check: ``Accountant.charge`` is the way to spend budget. Returns the row count.
        """
        norm = []
        for row in rows:
            agent, event = row[0], row[1]
            scope = row[2] if len(row) > 2 else "local"
            if not isinstance(agent, str) or not isinstance(event, str) or not agent:
                raise InvalidParameterError(
                    f"rows must be (agent: str, event_json: str[, scope]), got {row!r}"
                )
            if scope not in SCOPES:
                raise InvalidParameterError(f"scope must be one of {SCOPES}, got {scope!r}")
            norm.append((agent, event, scope))
        if run_id is not None and not isinstance(run_id, str):
            raise InvalidParameterError(f"run_id must be a string or None, got {run_id!r}")
        return self.charge_rows(norm, run_id=run_id)

    # ---- reads -------------------------------------------------------------------------------

    def _read(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        try:
            with self._lock:
                return self._conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._wrap(exc, "read") from exc

    def __len__(self) -> int:
        """Number of charges (rows), as recorded by the chain head. Rows are never deleted."""
        try:
            with self._lock:
                return self._head()[0]
        except sqlite3.Error as exc:
            raise self._wrap(exc, "read") from exc

    def version(self) -> int:
        """The row count: changes whenever any process commits a charge."""
        return len(self)

    def chain_head(self) -> str:
        """The chain head as hex: the hash of the last row (the genesis hash when empty).

        A later copy of this ledger *extends* this one iff ``verify(expect_head=...)`` finds
        this value among its rows' hashes.
        """
        try:
            with self._lock:
                return self._head()[1].hex()
        except sqlite3.Error as exc:
            raise self._wrap(exc, "read") from exc

    @property
    def ledger_id(self) -> str:
        """The ledger's random id (its chain starts from a hash of it)."""
        return self._ledger_id

    def anchor(self) -> dict[str, Any]:
        """What a run's manifest records to pin this ledger: ``{"ledger_id", "rows",
        "chain_head", "meta_digest", "key_id", "schema_version"}`` (one consistent read; the
        head's MAC is checked when the ledger is authenticated)."""
        with self._read_tx():
            if self._key is not None:
                self._check_head_mac()
            rows, head = self._head()
            (digest,) = self._conn.execute(f"SELECT meta FROM {_HEAD} WHERE k = 1").fetchone()
        return {
            "ledger_id": self._ledger_id,
            "rows": rows,
            "chain_head": head.hex(),
            "meta_digest": bytes(digest).hex(),
            "key_id": self.key_id,
            "schema_version": self._schema,
        }

    def states(self, agents: Iterable[str] | None = None) -> dict[str, AgentState]:
        """Verified running state of ``agents`` (every agent when None)."""
        if agents is not None:
            with self._read_tx():
                return self._load_states(list(dict.fromkeys(agents)))
        # Every agent: read one snapshot, then verify it after the read transaction has ended,
        # so a long verification never holds a lock that a committing writer waits for.
        with self._read_tx():
            rows, head = self._head()
            hit = self._all_states
            if hit is not None and hit[0] == (rows, head):
                return hit[1]
            fetched = self._fetch_all_states()
        out = self._load_all_states_uncached(rows, fetched)
        self._all_states = ((rows, head), out)
        return out

    def agents(self, scope: str | None = None) -> list[str]:
        """Every agent with at least one charge (sorted); only those of ``scope`` if given."""
        states = self.states()
        if scope is None:
            return sorted(states)
        return sorted(a for a, st in states.items() if any(s == scope for s, _ in st.events))

    def has_agent(self, agent: str) -> bool:
        """Whether ``agent`` has at least one charge."""
        return agent in self.states([agent])

    def history(self, agent: str, scope: str | None = None) -> list[tuple[str, int]]:
        """``[(event_json, count), ...]`` of one agent (all its charges, grouped)."""
        st = self.states([agent]).get(agent)
        return [] if st is None else st.history(scope)

    def histories(
        self, agents: Iterable[str] | None = None, scope: str | None = None
    ) -> dict[str, list[tuple[str, int]]]:
        """Grouped histories of many agents at once (all agents when ``agents`` is None)."""
        wanted = None if agents is None else list(dict.fromkeys(agents))
        if wanted is not None and not wanted:
            return {}
        out: dict[str, list[tuple[str, int]]] = {}
        for agent, st in self.states(wanted).items():
            h = st.history(scope)
            if h:
                out[agent] = h
        return out

    def meta(self) -> dict[str, str]:
        """The ledger's metadata table (application, schema_version, created, budget, ...)."""
        return dict(self._read(f"SELECT key, value FROM {_META}"))

    def set_meta(self, key: str, value: str) -> None:
        """Durably set one metadata entry (e.g. the budget an accountant enforces)."""
        if not isinstance(key, str) or key in ("application", "schema_version", "ledger_id"):
            raise InvalidParameterError(f"key must not be a reserved metadata key, got {key!r}")
        with self.transaction():
            self._check_sealed()
            self._conn.execute(
                f"INSERT OR REPLACE INTO {_META} (key, value) VALUES (?, ?)", (key, str(value))
            )
            _seal_meta(self._conn, self._key)

    def set_meta_once(self, key: str, value: str) -> str:
        """Set ``key`` unless it is already set; returns the value stored (atomically)."""
        if not isinstance(key, str) or key in ("application", "schema_version", "ledger_id"):
            raise InvalidParameterError(f"key must not be a reserved metadata key, got {key!r}")
        with self.transaction():
            self._check_sealed()
            got = self._conn.execute(f"SELECT value FROM {_META} WHERE key = ?", (key,)).fetchall()
            if got:
                return str(got[0][0])
            self._conn.execute(f"INSERT INTO {_META} (key, value) VALUES (?, ?)", (key, value))
            _seal_meta(self._conn, self._key)
            return value

    def agent_scopes(self, agent: str) -> set[str]:
        """The scopes ``agent`` was charged under (empty if never charged)."""
        st = self.states([agent]).get(agent)
        return set() if st is None else {s for s, _ in st.events}

    def scopes(self) -> dict[str, set[str]]:
        """``{agent: {scopes it was charged under}}``."""
        return {a: {s for s, _ in st.events} for a, st in self.states().items()}

    def records(self, agent: str | None = None) -> list[dict[str, object]]:
        """Every charge as a dict (id, agent, event JSON, scope, time, run_id), in order."""
        cols = "id, agent, event, scope, time, run_id"
        if agent is None:
            rows = self._read(f"SELECT {cols} FROM {_CHARGES} ORDER BY id")
        else:
            rows = self._read(
                f"SELECT {cols} FROM {_CHARGES} WHERE agent = ? ORDER BY id", (agent,)
            )
        keys = ("id", "agent", "event", "scope", "time", "run_id")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    # ---- full verification ---------------------------------------------------------------------

    def verify(self, *, expect_head: str | None = None) -> dict[str, Any]:
        """Walk the whole chain and rebuild every agent's state from the rows.

        Args:
            expect_head: a chain head recorded earlier (hex, e.g. from a report): the ledger
                must contain a row with that hash (it *extends* the earlier copy).

        Returns:
            ``{"ok": True, "rows", "agents", "chain_head", "extends": bool | None}``.

        Raises:
            LedgerIntegrityError: the first problem found (SQLite integrity, a row that does not
                match its hash, a missing row, a state that disagrees with the rows, an
                ``expect_head`` the chain never passes through).
        """
        want: bytes | None = None
        if expect_head is not None:
            try:
                want = bytes.fromhex(expect_head)
                if len(want) != 32:
                    raise ValueError
            except (TypeError, ValueError):
                raise InvalidParameterError(
                    f"expect_head must be a 64-digit hex chain head, got {expect_head!r}"
                ) from None
        try:
            with self._read_tx():
                return self._verify_full(want)
        except sqlite3.Error as exc:
            raise self._wrap(exc, "verify") from exc

    def _verify_full(self, want: bytes | None) -> dict[str, Any]:
        c = self._conn
        if not self._memory:
            problems = [r[0] for r in c.execute("PRAGMA integrity_check").fetchall()]
            if problems != ["ok"]:
                raise LedgerIntegrityError(
                    f"ledger {self.path!r} failed SQLite's integrity check: {problems[:3]!r}"
                )
        rows, head = self._head()
        meta = dict(c.execute(f"SELECT key, value FROM {_META}").fetchall())
        if c.execute(f"SELECT meta FROM {_HEAD} WHERE k = 1").fetchone()[0] != _meta_digest(meta):
            raise self._bad("the metadata (budget, ids) does not match its recorded digest")
        if self._key is not None:
            self._check_head_mac()
        prev = _genesis(self._ledger_id)
        found = want is not None and want == prev
        counts: dict[tuple[str, str, str], int] = {}
        per_agent: dict[str, list[int]] = {}
        expect = 1
        for i, agent, event, scope, t, run_id, agent_n, h in c.execute(
            f"SELECT id, agent, event, scope, time, run_id, agent_n, hash FROM {_CHARGES} "
            "ORDER BY id"
        ):
            if i != expect:
                raise self._bad(f"row {expect} is missing (next row is {i})")
            prev = _row_hash(prev, _row_bytes(i, agent, event, scope, t, run_id, agent_n))
            if prev != h:
                raise self._bad(f"row {i} does not match its hash (edited, reordered or corrupt)")
            pa = per_agent.setdefault(agent, [0, 0])
            pa[0] += 1
            pa[1] = i
            if agent_n != pa[0]:
                raise self._bad(f"row {i}: agent {agent!r}'s running count is wrong")
            key = (agent, scope, event)
            counts[key] = counts.get(key, 0) + 1
            if want is not None and prev == want:
                found = True
            expect += 1
        if expect - 1 != rows or prev != head:
            raise self._bad(
                f"the chain has {expect - 1} rows ending in {prev.hex()[:16]}..., the head "
                f"records {rows} rows ending in {head.hex()[:16]}..."
            )
        states = self._load_all_states_uncached(rows)
        rebuilt = {(a, s, e): n for a, st in states.items() for (s, e), n in st.events.items()}
        if rebuilt != counts:
            diff = sorted(set(rebuilt.items()) ^ set(counts.items()))[:3]
            raise self._bad(f"the per-agent state disagrees with the rows (e.g. {diff!r})")
        for agent, (n, last) in per_agent.items():
            st = states[agent]
            if (st.n, st.last_id) != (n, last):
                raise self._bad(f"agent {agent!r}: running total or last row disagrees")
        if want is not None and not found:
            raise LedgerIntegrityError(
                f"ledger {self.path!r} does not extend the chain head {want.hex()}: no row of "
                f"this copy has that hash (an older, rewritten or different ledger)"
            )
        return {
            "ok": True,
            "rows": rows,
            "agents": len(states),
            "chain_head": head.hex(),
            "extends": None if want is None else True,
            "ledger_id": self._ledger_id,
            "schema_version": self._schema,
            "key_id": self.key_id,
            "authenticated": self.authenticated,
            "auth_note": self.auth_note,
        }

    # ---- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent)."""
        try:
            self._conn.close()
        except sqlite3.Error:  # pragma: no cover
            pass

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"


def migrate_v1(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> Ledger:
    """Convert a schema-version-1 or -2 ledger into a new keyed ledger at ``dst`` (explicitly).

    The source is opened read-only and never changed; ``dst`` must not exist. Rows keep their
    order, agents, events, scopes, times and run ids; the metadata (budgets) is copied. A
    version-2 source must pass a full ``verify()`` first. Neither version carries a key, so the
    new ledger's MACs vouch only for what the old file held when it was converted.

    Returns:
        The new ``Ledger`` (open).
    """
    src_s, dst_s = _check_path(src), _check_path(dst)
    if Path(dst_s).exists():
        raise LedgerError(f"migration target {dst_s!r} exists; choose a new file")
    if not Path(src_s).is_file():
        raise LedgerError(f"ledger file {src_s!r} does not exist")
    try:
        con = sqlite3.connect(Path(src_s).resolve().as_uri() + "?mode=ro", uri=True)
        try:
            meta = dict(con.execute(f"SELECT key, value FROM {_META}").fetchall())
            if meta.get("application") != APPLICATION or meta.get("schema_version") not in (
                "1",
                "2",
            ):
                raise LedgerSchemaError(
                    f"ledger {src_s!r} is not an ldp-audit ledger of schema version 1 or 2 "
                    f"(schema_version {meta.get('schema_version')!r})"
                )
            if meta["schema_version"] == "2":  # it has a chain: it must verify first
                Ledger(src_s, create=False, readonly=True, verify="full").close()
            rows = con.execute(
                f"SELECT agent, event, scope, time, run_id FROM {_CHARGES} ORDER BY id"
            ).fetchall()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot read version-1 ledger {src_s!r}: {exc}") from exc
    led = Ledger(dst_s)
    with led.transaction():
        # consecutive rows of one run id go in together, each with its own time
        k = 0
        while k < len(rows):
            j = k
            while j < len(rows) and rows[j][4] == rows[k][4]:
                j += 1
            part = rows[k:j]
            states = led._load_states(list(dict.fromkeys(a for a, *_ in part)))
            led._append_rows(
                [(a, e, s) for a, e, s, _, _ in part],
                states,
                run_id=part[0][4],
                when=None,
                times=[t for _, _, _, t, _ in part],
            )
            k = j
        for k, v in meta.items():
            if k not in ("application", "schema_version", "created", "ledger_id", "key_id"):
                led._conn.execute(
                    f"INSERT OR REPLACE INTO {_META} (key, value) VALUES (?, ?)", (k, v)
                )
        led._conn.execute(
            f"INSERT OR REPLACE INTO {_META} (key, value) VALUES (?, ?)",
            (
                f"migrated_from_v{meta['schema_version']}",
                json.dumps({"path": src_s, "rows": len(rows)}),
            ),
        )
        _seal_meta(led._conn, led._key)
    return led


class TallyLedger(Ledger):
    """Per-agent running counts in this process's memory: NOT a ledger of record.

    For runs whose ledger nobody will read (e.g. a reproduction's grid of trials, whose
    per-report charges are discarded when the process ends). It keeps, per agent, exactly the
    state a ``Ledger`` keeps (count of every distinct event, total, last row number), so an
    ``Accountant`` over it composes and enforces a budget exactly as over a ledger: the check
    sees every earlier charge and a refused batch leaves nothing behind (all or nothing per
    call). It keeps no rows, no hash chain and nothing on disk, so it is no evidence of
    anything: ``records()``, ``chain_head()``, ``verify()`` and ``transaction()`` raise
    :class:`LedgerError` saying so, ``durable`` and ``evidence`` are False, and it cannot be a
    run directory's ledger (those are files). Thread-safe (one lock).

    Use ``Ledger(path)`` for anything a report, an audit or a budget question will cite.
    """

    evidence = False
    auth_note = "a TallyLedger keeps counts in memory only: nothing to authenticate"

    def __init__(self) -> None:  # noqa: D107 - no SQLite connection: nothing of Ledger's
        self.path = ":tally:"
        self.readonly = False
        self._memory = True
        self._in_tx = False
        self._lock = threading.RLock()
        self._closed = False
        self._rows = 0
        self._tally: dict[str, AgentState] = {}
        self._meta = {
            "application": APPLICATION,
            "schema_version": "tally (not a ledger of record)",
            "created": str(time.time()),
            "ledger_id": uuid.uuid4().hex,
        }

    @property
    def durable(self) -> bool:
        """Always False: nothing is written anywhere."""
        return False

    def _not_evidence(self, what: str) -> LedgerError:
        return LedgerError(
            f"a TallyLedger keeps running counts only (no rows, no hash chain, nothing on "
            f"disk): it has no {what}; use Ledger(path) for a ledger of record"
        )

    def _open(self) -> None:
        if self._closed:
            raise LedgerError("the TallyLedger is closed")

    # ---- writes --------------------------------------------------------------------------------

    def charge_rows(
        self,
        rows: Sequence[tuple[str, str, str]],
        *,
        run_id: str | None = None,
        check: Callable[[dict[str, AgentState]], None] | None = None,
        when: float | None = None,
    ) -> int:
        """Count ``(agent, event_json, scope)`` rows, all or nothing (see ``Ledger``).

        ``check(states)`` sees the state of every agent of ``rows`` before anything is
        counted; an exception from it leaves the tally unchanged.
        """
        if not rows:
            return 0
        with self._lock:
            self._open()
            tally = self._tally
            get = tally.get
            if check is not None:
                check({a: st for a in dict.fromkeys([r[0] for r in rows]) if (st := get(a))})
            i = self._rows
            for agent, event, scope in rows:
                i += 1
                st = get(agent)
                if st is None:
                    tally[agent] = AgentState(1, i, {(scope, event): 1})
                    continue
                st.n += 1
                st.last_id = i
                ev = st.events
                key = (scope, event)
                ev[key] = ev.get(key, 0) + 1
            self._rows = i
        return len(rows)

    def transaction(self) -> Iterator[sqlite3.Connection]:  # type: ignore[override]
        raise self._not_evidence("SQL transactions (charge_rows is atomic by itself)")

    def _insert(self, rows, *, run_id, when) -> None:  # type: ignore[no-untyped-def]
        raise self._not_evidence("SQL transactions")

    def set_meta(self, key: str, value: str) -> None:
        if not isinstance(key, str) or key in ("application", "schema_version", "ledger_id"):
            raise InvalidParameterError(f"key must not be a reserved metadata key, got {key!r}")
        with self._lock:
            self._open()
            self._meta[key] = str(value)

    def set_meta_once(self, key: str, value: str) -> str:
        if not isinstance(key, str) or key in ("application", "schema_version", "ledger_id"):
            raise InvalidParameterError(f"key must not be a reserved metadata key, got {key!r}")
        with self._lock:
            self._open()
            return self._meta.setdefault(key, value)

    # ---- reads ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of charges counted."""
        return self._rows

    def states(self, agents: Iterable[str] | None = None) -> dict[str, AgentState]:
        """Copies of the running state of ``agents`` (every agent when None)."""
        with self._lock:
            self._open()
            tally = self._tally
            keys = tally if agents is None else [a for a in dict.fromkeys(agents) if a in tally]
            return {
                a: AgentState(st.n, st.last_id, dict(st.events)) for a in keys for st in (tally[a],)
            }

    def meta(self) -> dict[str, str]:
        with self._lock:
            self._open()
            return dict(self._meta)

    def chain_head(self) -> str:
        raise self._not_evidence("hash chain")

    def records(self, agent: str | None = None) -> list[dict[str, object]]:
        raise self._not_evidence("rows")

    def verify(self, *, expect_head: str | None = None) -> dict[str, Any]:
        raise self._not_evidence("rows or chain to verify")

    def close(self) -> None:
        """Drop the counts (idempotent)."""
        with self._lock:
            self._closed = True
            self._tally = {}

    def __enter__(self) -> TallyLedger:
        return self

    def __repr__(self) -> str:
        return f"TallyLedger(agents={len(self._tally)}, charges={self._rows})"
