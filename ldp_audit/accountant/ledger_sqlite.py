"""The SQLite store of a ledger (schema 3): one file, rollback journal, ``synchronous=FULL``.

Storage only (:class:`~ldp_audit.accountant.ledger_store.RowStore`): the tables, atomic
creation, the file checks before anything is opened, transactions and every SQL statement.
What the records mean and every check of them is :class:`~ldp_audit.accountant.ledger.Ledger`'s.

* **Complete in its main file.** The rollback journal (``TRUNCATE``) with ``synchronous=FULL``:
  when a write's ``COMMIT`` returns, it is in the main database file and synced, so copying that
  one file is a complete backup; no ``-wal`` file whose loss could drop committed charges.
* **Creation is atomic.** A new ledger is built in memory, written to a temporary file beside
  the target in one write, synced and hard-linked into place (a creation killed halfway leaves
  a temp file named after its pid, removed by the next open of any ledger in that folder), so
  an existing empty file can only be a truncated ledger, which is refused.
* **Never a foreign file.** A path that is a folder, a FIFO, a device, empty, not SQLite, or an
  SQLite database of another application is refused before anything could write to it.
* **Writes in blocks.** Each table is written with multi-row ``INSERT ... VALUES`` of fixed
  sizes (prepared statements reused); the head check reads SQLite's ``data_version`` in the same
  query (the change token: any other connection's commit changes it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import sqlite3
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any, NoReturn

from ldp_audit.accountant.ledger_format import (
    LedgerIntegrityError,
    LedgerReadOnlyError,
    integrity_error,
)
from ldp_audit.accountant.ledger_store import HeadRecord, RowStore, WriteHead
from ldp_audit.errors import LedgerError
from ldp_audit.rundir.files import create_once
from ldp_audit.rundir.paths import check_path_arg
from ldp_audit.validation import check_real_in

__all__ = ["SqliteStore"]

_SQLITE_MAGIC = b"SQLite format 3\x00"
META_TABLE = "ldp_audit_meta"
CHARGES_TABLE = "ldp_audit_charges"
_STATE = "ldp_audit_state"
_AGENTS = "ldp_audit_agents"
_HEAD = "ldp_audit_head"
_JOURNAL = "TRUNCATE"
#: The largest row id SQLite can hold (the open upper end of a range of rows).
_MAX_ID = 2**63 - 1
_TMP_RE = re.compile(r"^\..+\.ldp-creating\.(\d+)\.\d+\.tmp(-journal|-wal|-shm)?$")

_SCHEMA = f"""
CREATE TABLE {META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE {CHARGES_TABLE} (
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
    f"INSERT INTO {CHARGES_TABLE} (id, agent, event, scope, time, run_id, agent_n, hash) VALUES "
)
_SQL_STATE = f"INSERT OR REPLACE INTO {_STATE} (agent, scope, event, n, chk) VALUES "
_SQL_AGENTS = f"INSERT OR REPLACE INTO {_AGENTS} (agent, n, last_id, chk, mac) VALUES "
#: Rows per multi-row ``INSERT ... VALUES (...), (...)`` (fixed sizes, so that SQLite's prepared
#: statements are reused): one statement per block of rows instead of one step per row; the
#: remainder (fewer rows than the smallest block) goes through ``executemany``.
_BLOCKS = (256, 32)
_SQL_WRITE_HEAD = (
    f"SELECT (SELECT data_version FROM pragma_data_version()), h.rows, h.hash, h.meta, {{mac}}, "
    f"c.id, c.hash FROM {_HEAD} h LEFT JOIN {CHARGES_TABLE} c "
    f"ON c.id = (SELECT MAX(id) FROM {CHARGES_TABLE}) WHERE h.k = 1"
)
#: The agents of a JSON list (one parameter, however many agents).
_IN_AGENTS = "a.agent IN (SELECT value FROM json_each(?))"
_SQL_AGENT_STATE = (
    f"SELECT a.agent, a.n, a.last_id, a.chk, {{mac}}, c.agent, c.agent_n, c.hash FROM {_AGENTS} a "
    f"LEFT JOIN {CHARGES_TABLE} c ON c.id = a.last_id"
)


@functools.cache
def _statement(sql: str, ncols: int, size: int) -> str:
    """``sql`` with ``size`` rows of ``ncols`` parameters (``VALUES (?, ?), (?, ?)``)."""
    return sql + ", ".join(["(" + ", ".join(["?"] * ncols) + ")"] * size)


def _insert_many(c: sqlite3.Connection, sql: str, ncols: int, rows: Sequence[tuple]) -> None:
    """``INSERT`` ``rows`` with multi-row ``VALUES`` in blocks of ``_BLOCKS`` rows."""
    k, n = 0, len(rows)
    for size in _BLOCKS:
        while n - k >= size:
            c.execute(_statement(sql, ncols, size), list(chain.from_iterable(rows[k : k + size])))
            k += size
    if k < n:
        c.executemany(_statement(sql, ncols, 1), rows[k:] if k else rows)


def _init_schema(c: sqlite3.Connection, meta: dict[str, str], head: HeadRecord) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            c.execute(statement)
    c.executemany(f"INSERT INTO {META_TABLE} (key, value) VALUES (?, ?)", list(meta.items()))
    c.execute(
        f"INSERT INTO {_HEAD} (k, rows, hash, meta, mac) VALUES (1, ?, ?, ?, ?)",
        (head.rows, head.hash, head.meta_digest, head.mac),
    )


def _file_id(path: str) -> tuple[int, int] | None:
    """(device, inode) of ``path`` (None: gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


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
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        m = _TMP_RE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(path.parent / name)


def _create_atomically(path: Path, meta: dict[str, str], head: HeadRecord) -> None:
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
            _init_schema(mem, meta, head)
            mem.execute("COMMIT")
            image = mem.serialize()
        finally:
            mem.close()
        create_once(path, tmp, image, 0o644, rename=True)  # no hard links: rename
    except (sqlite3.Error, OSError) as exc:
        raise LedgerError(f"cannot create ledger {str(path)!r}: {exc}") from exc


def check_ledger_path(path: Any) -> str:
    """``path`` (:func:`~ldp_audit.rundir.paths.check_path_arg`) as the str it names."""
    check_path_arg(path, "path")
    return os.fspath(path)


class SqliteStore(RowStore):
    """A ledger's records in one SQLite file (or ``":memory:"``: private, gone with the process).

    Args:
        path: database file (created when missing) or ``":memory:"``.
        timeout: seconds to wait for another process's write lock.
        create: create a new ledger when ``path`` does not exist (else raise ``LedgerError``).
        readonly: open without ever writing (a file or folder without write permission is
            opened read-only automatically).
        initial: ``() -> (metadata, genesis head)`` of a new ledger, called only when one is
            created (so a reader never creates a key).

    Raises:
        LedgerError: the path is a folder, not a regular file, empty, not SQLite, or an SQLite
            database of another application, or cannot be opened or created.
        InvalidParameterError: ``path`` is not a non-empty str/PathLike, or ``timeout`` is bad.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 60.0,
        create: bool = True,
        readonly: bool = False,
        initial: Callable[[], tuple[dict[str, str], HeadRecord]] | None = None,
    ) -> None:
        self.path = check_ledger_path(path)
        self._timeout = check_real_in(timeout, "timeout", lo=0.0, lo_open=False)
        self._memory = self.path == ":memory:"
        self.readonly = bool(readonly) and not self._memory
        self._in_tx = False
        self._lock = threading.RLock()
        if not self._memory:
            p = Path(self.path)
            if p.is_dir():
                raise LedgerError(f"ledger path {self.path!r} is a directory, not a ledger file")
            if not p.exists():
                if not create or self.readonly or initial is None:
                    raise LedgerError(f"ledger file {self.path!r} does not exist")
                if not p.parent.is_dir():
                    raise LedgerError(
                        f"cannot create ledger {self.path!r}: folder {str(p.parent)!r} does not "
                        f"exist"
                    )
                _create_atomically(p, *initial())
            else:
                _sweep_stale_temps(p)
            self._check_file(p)
        #: set when a read-only open found a hot journal (a writer killed inside a commit):
        #: the committed state is read from a private rolled-back copy (say so in notes)
        self.hot_journal_note: str | None = None
        self._copy_dir: str | None = None
        #: the file opened (a path made absolute, and its device and inode)
        self._opened = None if self._memory else (os.path.abspath(self.path), _file_id(self.path))
        self._connect()
        try:
            with self.errors("open"):
                self._identify()
        except LedgerReadOnlyError:
            self._conn.close()
            if not (self.readonly and self._has_journal()):
                raise
            self._open_rolled_back_copy()
        except BaseException:
            self._conn.close()
            raise

    def _connect(self, target: str | None = None) -> None:
        """Connect to ``target`` (default: the ledger, read-only as an ``?mode=ro`` URI)."""
        uri = target is None and self.readonly
        if target is None:
            target = Path(self.path).resolve().as_uri() + "?mode=ro" if uri else self.path
        try:
            self._conn = sqlite3.connect(
                target, uri=uri, timeout=self._timeout, isolation_level=None,
                check_same_thread=False,
            )  # fmt: skip
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open ledger {self.path!r}: {exc}") from exc

    def _has_journal(self) -> bool:
        j = Path(f"{self.path}-journal")
        try:
            return j.is_file() and j.stat().st_size > 0
        except OSError:
            return False

    def _open_rolled_back_copy(self) -> None:
        """A read-only open met a hot journal (a writer killed inside a commit): only a writer
        may roll it back in place, and a reader never writes. The ledger and its journal are
        copied into a private folder, SQLite rolls the copy back to the committed state, and
        that is what is read (every check of the ledger then runs on it)."""
        fix = (
            f"open it once with write access to roll the journal back in place: `ldp-audit "
            f"budget {self.path} --recover`"
        )
        tmp = tempfile.mkdtemp(prefix="ldp-audit-hot-journal-")
        name = Path(self.path).name
        try:
            shutil.copyfile(self.path, Path(tmp) / name)
            shutil.copyfile(f"{self.path}-journal", Path(tmp) / f"{name}-journal")
            self._connect(str(Path(tmp) / name))
            with self.errors("open"):
                self._identify()  # the first read rolls the copy's hot journal back
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self._conn.close()
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, (LedgerError, OSError, sqlite3.Error)):
                raise LedgerReadOnlyError(
                    f"ledger {self.path!r} has a hot journal ({name}-journal: a writer was "
                    f"killed inside a commit) and its committed state could not be read from a "
                    f"copy ({exc}); {fix}"
                ) from exc
            raise
        self._copy_dir = tmp
        self.hot_journal_note = (
            f"{self.path} has a hot journal (a writer was killed inside a commit): the "
            f"committed state was read from a rolled-back copy, the file itself is unchanged; "
            f"{fix}"
        )

    def _check_file(self, p: Path) -> None:
        try:
            st = os.stat(p)
        except OSError as exc:
            raise LedgerError(f"cannot read ledger file {self.path!r}: {exc}") from exc
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            raise LedgerError(
                f"ledger path {self.path!r} is not a regular file (a FIFO, socket or "
                f"device); refusing to open it"
            )
        j = Path(f"{self.path}-journal")
        if j.exists() and not j.is_file():  # SQLite says only "disk I/O error"
            raise LedgerError(
                f"{str(j)!r} is not a file (a folder or device): SQLite cannot use it as the "
                f"ledger's rollback journal and no writer makes one; remove it"
            )
        try:
            with open(p, "rb") as fh:
                head = fh.read(20)  # the magic, then the header's write/read versions
        except PermissionError as exc:
            raise LedgerReadOnlyError(
                f"ledger file {self.path!r} cannot be read (permission denied)"
            ) from exc
        except OSError as exc:
            raise LedgerError(f"cannot read ledger file {self.path!r}: {exc}") from exc
        if st.st_size == 0:
            raise LedgerError(
                f"ledger file {self.path!r} exists but is empty (0 bytes): a truncated "
                f"ledger cannot be told from a new one, so it is refused; delete it to start "
                f"a new ledger"
            )
        if head[:16] != _SQLITE_MAGIC:
            raise LedgerError(
                f"ledger file {self.path!r} is not an SQLite database (foreign or "
                f"corrupt file); refusing to treat it as an empty ledger"
            )
        if self.readonly and 2 in head[18:20]:  # SQLite would make -wal and -shm, then read them
            raise LedgerError(
                f"ledger file {self.path!r} is in WAL journal mode, which no ldp-audit writer "
                f"sets (another program changed it): a read-only reader would create and read "
                f"side files nothing checks, so it is refused; `ldp-audit budget {self.path} "
                f"--recover` puts it back in its rollback journal, then verify it"
            )
        if not self.readonly and not (
            os.access(p, os.W_OK) and os.access(p.parent, os.W_OK | os.X_OK)
        ):
            self.readonly = True  # reads work; a charge raises LedgerReadOnlyError

    def _identify(self) -> None:
        """A file must be an SQLite database with a ledger's metadata table (checked before
        anything could write to it). Schema-2 tables have no MAC columns (read as NULL)."""
        self._set_macs(True)
        if self._memory:
            return
        tables = self._tables()
        if META_TABLE not in tables:
            others = sorted(t for t in tables if not t.startswith("sqlite_"))
            raise LedgerError(
                f"ledger file {self.path!r} is an SQLite database of another application "
                f"(tables {others!r}, no {META_TABLE!r} table); refusing to use it as a ledger"
            )
        cols = {r[1] for r in self._conn.execute(f"PRAGMA table_info({_HEAD})")}
        self._set_macs("mac" in cols)

    def _tables(self) -> set[str]:
        return {
            r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }

    def _set_macs(self, macs: bool) -> None:
        self._sql_head = (
            f"SELECT rows, hash, meta, {'mac' if macs else 'NULL'} FROM {_HEAD} WHERE k = 1"
        )
        self._sql_write_head = _SQL_WRITE_HEAD.format(mac="h.mac" if macs else "NULL")
        self._sql_agents = _SQL_AGENT_STATE.format(mac="a.mac" if macs else "NULL")

    @property
    def durable(self) -> bool:
        """Whether charges survive the process (a file; ``":memory:"`` does not)."""
        return not self._memory

    @property
    def connection(self) -> sqlite3.Connection:
        """The SQLite connection (for tests and tools that read the tables directly)."""
        return self._conn

    # ---- errors ------------------------------------------------------------------------------

    def wrap(self, exc: sqlite3.Error, what: str) -> LedgerError:
        """The ``LedgerError`` that ``exc`` (raised while doing ``what``) means."""
        msg = str(exc)
        low = msg.lower()
        if isinstance(exc, sqlite3.ProgrammingError):  # e.g. a closed ledger: misuse, not damage
            return LedgerError(f"ledger {self.path!r}: cannot {what}: {msg}")
        if "readonly" in low or "read-only" in low:
            return LedgerReadOnlyError(f"ledger {self.path!r} is read-only; cannot {what}: {msg}")
        if "locked" in low or "busy" in low:
            return LedgerError(f"ledger {self.path!r}: cannot {what}, the ledger is busy: {msg}")
        if (
            isinstance(exc, sqlite3.DatabaseError)
            and not isinstance(exc, sqlite3.OperationalError | sqlite3.IntegrityError)
        ) or ("malformed" in low or "corrupt" in low or "not a database" in low):
            return LedgerIntegrityError(
                f"ledger {self.path!r} is corrupt, truncated or unreadable ({what}): {msg}"
            )
        return LedgerError(f"ledger {self.path!r}: cannot {what}: {msg}")

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Turns ``sqlite3.Error`` inside the block into the ``LedgerError`` it means."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self.wrap(exc, what) from exc

    # ---- life cycle --------------------------------------------------------------------------

    def empty(self) -> bool:
        return META_TABLE not in self._tables()

    def initialise(self, meta: dict[str, str], head: HeadRecord) -> None:
        with self.write():
            _init_schema(self._conn, meta, head)

    def check_structure(self) -> None:
        missing = {CHARGES_TABLE, _STATE, _AGENTS, _HEAD} - self._tables()
        if missing:
            raise integrity_error(self.path, f"tables {sorted(missing)} are missing")

    def open_for_writing(self) -> None:
        if self._memory:
            return
        mode = self._conn.execute(f"PRAGMA journal_mode={_JOURNAL}").fetchone()[0]
        if str(mode).upper() != _JOURNAL:
            raise LedgerError(
                f"ledger {self.path!r} cannot use the {_JOURNAL} rollback journal (got {mode!r})"
            )
        self._conn.execute("PRAGMA synchronous=FULL")

    def check_storage(self, *, full: bool) -> None:
        if full and self._memory:
            return
        pragma = "integrity_check" if full else "quick_check"
        problems = [r[0] for r in self._conn.execute(f"PRAGMA {pragma}").fetchall()]
        if problems != ["ok"]:
            raise LedgerIntegrityError(
                f"ledger {self.path!r} failed SQLite's integrity check: {problems[:3]!r}"
            )

    def settle(self) -> None:
        """A writer's TRUNCATE journal becomes DELETE: SQLite removes the empty ``-journal``
        now, under the RESERVED lock (never one in use; a hot one is rolled back first); later
        charges stay durable (DELETE with ``synchronous=FULL``) and reads go on."""
        if not (self.readonly or self._memory):
            with self._lock, contextlib.suppress(sqlite3.Error):
                self._conn.execute("PRAGMA journal_mode=DELETE")

    def close(self) -> None:
        self.settle()
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        if self._copy_dir is not None:
            shutil.rmtree(self._copy_dir, ignore_errors=True)
            self._copy_dir = None

    # ---- transactions ------------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._in_tx:
                yield self._conn
                return
            try:
                self._begin("BEGIN")
                yield self._conn
            except BaseException as exc:
                self._rollback(exc, "read")
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("COMMIT")

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``: holds the write lock from the first statement.

        Reads inside see every committed charge and no other process can commit until this
        transaction ends. Any exception rolls back. The commit returns once the main file holds
        the transaction and is synced (rollback journal, ``synchronous=FULL``). A nested write
        and a write of a read-only ledger are refused by :class:`Ledger` first (its
        ``_transaction``, the one caller besides :meth:`initialise`); here SQLite's own refusal
        is the ``LedgerError`` it means (:meth:`wrap`).
        """
        with self._lock:
            try:
                self._begin("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:  # busy: "cannot take the write lock, the ledger is busy"
                raise self.wrap(exc, "take the write lock") from exc
            if self._opened is not None and _file_id(self._opened[0]) != self._opened[1]:
                self._conn.execute("ROLLBACK")  # renamed over: charges would go to the old file
                raise LedgerIntegrityError(
                    f"ledger {self.path!r} was replaced by another file while open; nothing is "
                    f"charged into the file no one reads (open it again, then --verify it)"
                )
            self._in_tx = True
            try:
                yield self._conn
            except BaseException as exc:
                self._rollback(exc, "write")
            finally:  # also when a signal's exception comes after the body (see _begin)
                self._in_tx = False
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(exc, "commit")

    def _begin(self, sql: str) -> None:
        """``sql`` (a BEGIN) after rolling back a transaction left open outside every
        :meth:`read` / :meth:`write`: a signal's ``KeyboardInterrupt`` raised between a BEGIN
        and the ``try`` that ends it, or between the body and the COMMIT (CI, stop 57: the
        interrupted run's close then failed with "cannot start a transaction within a
        transaction"). Nothing in it was committed, so no charge was durable and nothing was
        released for it."""
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        self._conn.execute(sql)

    def _rollback(self, exc: BaseException, what: str) -> NoReturn:
        """Roll back after ``exc`` and raise it (an SQLite error as the ``LedgerError`` it
        means)."""
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise self.wrap(exc, what) from exc
        raise exc

    # ---- metadata and head -------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        with self._lock:
            return dict(self._conn.execute(f"SELECT key, value FROM {META_TABLE}").fetchall())

    def put_meta(self, key: str, value: str) -> None:
        self._conn.execute(
            f"INSERT OR REPLACE INTO {META_TABLE} (key, value) VALUES (?, ?)", (key, value)
        )

    def head(self) -> HeadRecord | None:
        with self._lock:
            got = self._conn.execute(self._sql_head).fetchall()
        if len(got) != 1 or not isinstance(got[0][1], bytes):
            return None
        rows, h, digest, mac = got[0]
        return HeadRecord(int(rows), bytes(h), digest, mac)

    def write_head(self) -> WriteHead | None:
        got = self._conn.execute(self._sql_write_head).fetchall()
        if len(got) != 1 or not isinstance(got[0][2], bytes):
            return None
        dv, rows, h, digest, mac, top, top_hash = got[0]
        return WriteHead(
            (int(dv), self._conn.total_changes),
            HeadRecord(int(rows), bytes(h), digest, mac),
            0 if top is None else int(top),
            top_hash,
        )

    def committed_token(self, token: Hashable | None) -> Hashable | None:
        # data_version changes only with *another* connection's commit; total_changes with any
        # write through this connection (ours included, so it is read after our commit)
        return None if token is None else (token[0], self._conn.total_changes)  # type: ignore[index]

    def put_head(self, rows: int, hash: bytes, mac: bytes) -> None:  # noqa: A002
        self._conn.execute(
            f"UPDATE {_HEAD} SET rows = ?, hash = ?, mac = ? WHERE k = 1", (rows, hash, mac)
        )

    def put_seal(self, meta_digest: bytes, mac: bytes) -> None:
        self._conn.execute(f"UPDATE {_HEAD} SET meta = ?, mac = ? WHERE k = 1", (meta_digest, mac))

    # ---- rows --------------------------------------------------------------------------------

    def rows(
        self, first: int = 1, last: int | None = None, agent: str | None = None
    ) -> Iterator[tuple]:
        sql = (
            f"SELECT id, agent, event, scope, time, run_id, agent_n, hash FROM {CHARGES_TABLE} "
            f"WHERE id BETWEEN ? AND ?{'' if agent is None else ' AND agent = ?'} ORDER BY id"
        )
        bounds = (first, _MAX_ID if last is None else last)
        with self._lock:
            return self._conn.execute(sql, bounds if agent is None else (*bounds, agent))

    def put_charges(
        self, charges: Sequence[tuple], agents: Sequence[tuple], states: Sequence[tuple]
    ) -> None:
        c = self._conn
        _insert_many(c, _SQL_CHARGES, 8, charges)
        _insert_many(c, _SQL_STATE, 5, states)
        _insert_many(c, _SQL_AGENTS, 5, agents)

    # ---- per-agent records -------------------------------------------------------------------

    def state_records(self, agents: Sequence[str] | None) -> tuple[list[tuple], list[tuple]]:
        where, arg = (
            ("", ()) if agents is None else (f" WHERE {_IN_AGENTS}", (json.dumps(list(agents)),))
        )
        c = self._conn
        return (
            c.execute(self._sql_agents + where, arg).fetchall(),
            c.execute(f"SELECT agent, scope, event, n, chk FROM {_STATE} a{where}", arg).fetchall(),
        )

    def record_totals(self) -> list[tuple[str, int, int]]:
        out = []
        for table in (_AGENTS, _STATE):
            n, total = self._conn.execute(
                f"SELECT COUNT(*), COALESCE(SUM(n), 0) FROM {table}"
            ).fetchone()
            out.append((table, int(n), int(total)))
        return out

    def __repr__(self) -> str:
        return f"SqliteStore({self.path!r})"
