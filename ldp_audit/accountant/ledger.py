"""The privacy ledger: one durable row per charge, in SQLite.

``Ledger(path)`` opens (or creates) an SQLite database in WAL mode with ``synchronous=FULL``: a
charge whose transaction has committed survives a crash or SIGKILL of the writing process. Rows
are only ever appended (never updated or deleted), so a row id is a version number and the row
count is a cache key. ``Ledger(":memory:")`` is a private in-memory ledger for tests.

A file that is not an SQLite database, a database that belongs to something else, one written by
a newer schema, or a truncated/corrupt one raises ``LedgerError`` naming the path; it is never
silently treated as an empty ledger.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ldp_audit.errors import InvalidParameterError, LedgerError

__all__ = ["Ledger", "SCHEMA_VERSION", "APPLICATION"]

APPLICATION = "ldp-audit privacy ledger"
SCHEMA_VERSION = 1
_SQLITE_MAGIC = b"SQLite format 3\x00"
_META = "ldp_audit_meta"
_CHARGES = "ldp_audit_charges"

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {_META} (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {_CHARGES} (
    id INTEGER PRIMARY KEY,
    agent TEXT NOT NULL,
    event TEXT NOT NULL,
    scope TEXT NOT NULL,
    time REAL NOT NULL,
    run_id TEXT
);
CREATE INDEX IF NOT EXISTS {_CHARGES}_agent ON {_CHARGES} (agent);
"""

#: Where a charge's privacy claim belongs: per-agent local DP, or a central (DP-SGD) model claim.
SCOPES = ("local", "central")


def _init_schema(c: sqlite3.Connection) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            c.execute(statement)
    c.executemany(
        f"INSERT OR IGNORE INTO {_META} (key, value) VALUES (?, ?)",
        [
            ("application", APPLICATION),
            ("schema_version", str(SCHEMA_VERSION)),
            ("created", str(time.time())),
        ],
    )


def _create_atomically(path: Path) -> None:
    """Create a new, initialised ledger at ``path`` without ever exposing a 0-byte file.

    The database is built in a temporary file beside ``path`` and hard-linked into place; if
    another process created ``path`` meanwhile, its ledger is kept and ours discarded. So an
    existing empty file can only be a truncated ledger, which ``Ledger`` refuses.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.time_ns()}.tmp")
    try:
        c = sqlite3.connect(tmp, isolation_level=None)
        try:
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("BEGIN IMMEDIATE")
            _init_schema(c)
            c.execute("COMMIT")
        finally:
            c.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
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
    except sqlite3.Error as exc:
        raise LedgerError(f"cannot create ledger {str(path)!r}: {exc}") from exc
    except OSError as exc:
        raise LedgerError(f"cannot create ledger {str(path)!r}: {exc}") from exc
    finally:
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{tmp}{suffix}")
            except FileNotFoundError:
                pass
    try:  # make the new directory entry durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


class Ledger:
    """An append-only SQLite ledger of privacy charges.

    Args:
        path: database file (created when missing) or ``":memory:"``.
        timeout: seconds to wait for another process's write lock.
        verify: run SQLite's ``quick_check`` on open (linear in the file size; catches truncated
            and corrupt files early). Opening never proceeds on a file that fails it.
        create: create a new ledger when ``path`` does not exist (else raise ``LedgerError``).

    Raises:
        LedgerError: the file is not an SQLite database, belongs to another application, has a
            newer schema, is corrupt or truncated, or cannot be opened.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 60.0,
        verify: bool = True,
        create: bool = True,
    ):
        self.path = str(path)
        self._memory = self.path == ":memory:"
        self._timeout = float(timeout)
        if not self._memory:
            p = Path(self.path)
            if p.is_dir():
                raise LedgerError(f"ledger path {self.path!r} is a directory, not a ledger file")
            if not p.exists():
                if not create:
                    raise LedgerError(f"ledger file {self.path!r} does not exist")
                _create_atomically(p)
            size = p.stat().st_size
            if size == 0:
                raise LedgerError(
                    f"ledger file {self.path!r} exists but is empty (0 bytes): a truncated "
                    f"ledger cannot be told from a new one, so it is refused; delete it to start "
                    f"a new ledger"
                )
            with open(p, "rb") as fh:
                head = fh.read(len(_SQLITE_MAGIC))
            if head != _SQLITE_MAGIC:
                raise LedgerError(
                    f"ledger file {self.path!r} is not an SQLite database (foreign or "
                    f"corrupt file); refusing to treat it as an empty ledger"
                )
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=float(timeout), isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open ledger {self.path!r}: {exc}") from exc
        self._in_tx = False
        # One connection may be shared by threads (check_same_thread=False): serialise its use.
        self._lock = threading.RLock()
        try:
            self._setup(verify)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise LedgerError(
                f"ledger {self.path!r} is corrupt, truncated or unreadable: {exc}"
            ) from exc
        except LedgerError:
            self._conn.close()
            raise

    # ---- setup -------------------------------------------------------------------------------

    def _setup(self, verify: bool) -> None:
        c = self._conn
        if not self._memory:
            mode = c.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise LedgerError(f"ledger {self.path!r} cannot use WAL journaling (got {mode!r})")
        c.execute("PRAGMA synchronous=FULL")
        if verify and not self._memory:
            problems = [r[0] for r in c.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                raise LedgerError(
                    f"ledger {self.path!r} failed SQLite's integrity check: {problems[:3]!r}"
                )
        c.execute("BEGIN IMMEDIATE")
        try:
            tables = {
                r[0]
                for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            }
            if _META not in tables:
                others = sorted(t for t in tables if not t.startswith("sqlite_"))
                if others:
                    raise LedgerError(
                        f"ledger file {self.path!r} is an SQLite database of another application "
                        f"(tables {others!r}, no {_META!r} table); refusing to use it as a ledger"
                    )
                _init_schema(c)
            meta = dict(c.execute(f"SELECT key, value FROM {_META}").fetchall())
            if meta.get("application") != APPLICATION:
                raise LedgerError(
                    f"ledger file {self.path!r} has an {_META!r} table but application "
                    f"{meta.get('application')!r}, expected {APPLICATION!r}"
                )
            version = int(meta.get("schema_version", "-1"))
            if version != SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.path!r} has schema version {version}; this ldp-audit reads "
                    f"version {SCHEMA_VERSION}"
                )
            if _CHARGES not in tables and _META in tables:
                raise LedgerError(f"ledger {self.path!r} lacks its {_CHARGES!r} table (corrupt)")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    # ---- transactions ------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``: holds the write lock from the first statement.

        Reads inside see every committed charge and no other process can commit until this
        transaction ends, so a budget check inside it cannot be raced. Any exception rolls back.
        The commit returns only once the WAL is synced (``synchronous=FULL``).
        """
        with self._lock:
            if self._in_tx:
                raise LedgerError(f"ledger {self.path!r}: nested transactions are not supported")
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise LedgerError(
                    f"ledger {self.path!r}: cannot take the write lock: {exc}"
                ) from exc
            self._in_tx = True
            try:
                yield self._conn
            except BaseException:
                self._in_tx = False
                self._conn.execute("ROLLBACK")
                raise
            self._in_tx = False
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise LedgerError(f"ledger {self.path!r}: commit failed: {exc}") from exc

    def _insert(
        self, rows: Sequence[tuple[str, str, str]], *, run_id: str | None, when: float | None
    ) -> None:
        """Insert ``(agent, event_json, scope)`` rows; must run inside ``transaction()``."""
        if not self._in_tx:
            raise LedgerError("Ledger._insert must run inside Ledger.transaction()")
        t = time.time() if when is None else float(when)
        self._conn.executemany(
            f"INSERT INTO {_CHARGES} (agent, event, scope, time, run_id) VALUES (?, ?, ?, ?, ?)",
            ((a, e, s, t, run_id) for a, e, s in rows),
        )

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
            if not isinstance(agent, str) or not isinstance(event, str):
                raise InvalidParameterError(
                    f"rows must be (agent: str, event_json: str[, scope]), got {row!r}"
                )
            if scope not in SCOPES:
                raise InvalidParameterError(f"scope must be one of {SCOPES}, got {scope!r}")
            norm.append((agent, event, scope))
        with self.transaction():
            self._insert(norm, run_id=run_id, when=None)
        return len(norm)

    # ---- reads -------------------------------------------------------------------------------

    def _read(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        try:
            with self._lock:
                return self._conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"ledger {self.path!r}: read failed: {exc}") from exc

    def __len__(self) -> int:
        """Number of charges (rows). Rows are never deleted, so this only grows."""
        return int(self._read(f"SELECT COALESCE(MAX(id), 0) FROM {_CHARGES}")[0][0])

    def version(self) -> int:
        """The largest row id: changes whenever any process commits a charge."""
        return len(self)

    def agents(self, scope: str | None = None) -> list[str]:
        """Every agent with at least one charge (sorted); only those of ``scope`` if given."""
        if scope is None:
            rows = self._read(f"SELECT DISTINCT agent FROM {_CHARGES} ORDER BY agent")
        else:
            rows = self._read(
                f"SELECT DISTINCT agent FROM {_CHARGES} WHERE scope = ? ORDER BY agent", (scope,)
            )
        return [r[0] for r in rows]

    def history(self, agent: str, scope: str | None = None) -> list[tuple[str, int]]:
        """``[(event_json, count), ...]`` of one agent (all its charges, grouped)."""
        if scope is None:
            sql = f"SELECT event, COUNT(*) FROM {_CHARGES} WHERE agent = ? GROUP BY event"
            return self._read(sql, (agent,))
        sql = f"SELECT event, COUNT(*) FROM {_CHARGES} WHERE agent = ? AND scope = ? GROUP BY event"
        return self._read(sql, (agent, scope))

    def histories(
        self, agents: Iterable[str] | None = None, scope: str | None = None
    ) -> dict[str, list[tuple[str, int]]]:
        """Grouped histories of many agents at once (all agents when ``agents`` is None)."""
        where, params = [], []
        if scope is not None:
            where.append("c.scope = ?")
            params.append(scope)
        out: dict[str, list[tuple[str, int]]] = {}
        if agents is None:
            w = ("WHERE " + " AND ".join(where)) if where else ""
            rows = self._read(
                f"SELECT c.agent, c.event, COUNT(*) FROM {_CHARGES} c {w} "
                "GROUP BY c.agent, c.event",
                params,
            )
        else:
            wanted = list(dict.fromkeys(agents))
            if not wanted:
                return out
            w = ("AND " + " AND ".join(where)) if where else ""
            try:  # one JSON array parameter: no temp table, no parameter-count limit
                with self._lock:
                    rows = self._conn.execute(
                        f"SELECT c.agent, c.event, COUNT(*) FROM {_CHARGES} c "
                        f"WHERE c.agent IN (SELECT value FROM json_each(?)) {w} "
                        "GROUP BY c.agent, c.event",
                        [json.dumps(wanted), *params],
                    ).fetchall()
            except sqlite3.OperationalError as exc:
                if "json_each" not in str(exc):
                    raise LedgerError(f"ledger {self.path!r}: read failed: {exc}") from exc
                rows = []  # SQLite built without JSON1: chunks of 500 bound parameters
                for i in range(0, len(wanted), 500):
                    chunk = wanted[i : i + 500]
                    rows += self._read(
                        f"SELECT c.agent, c.event, COUNT(*) FROM {_CHARGES} c "
                        f"WHERE c.agent IN ({','.join('?' * len(chunk))}) {w} "
                        "GROUP BY c.agent, c.event",
                        [*chunk, *params],
                    )
            except sqlite3.DatabaseError as exc:
                raise LedgerError(f"ledger {self.path!r}: read failed: {exc}") from exc
        for agent, event, count in rows:
            out.setdefault(agent, []).append((event, int(count)))
        return out

    def meta(self) -> dict[str, str]:
        """The ledger's metadata table (application, schema_version, created, budget, ...)."""
        return dict(self._read(f"SELECT key, value FROM {_META}"))

    def set_meta(self, key: str, value: str) -> None:
        """Durably set one metadata entry (e.g. the budget an accountant enforces)."""
        if key in ("application", "schema_version"):
            raise InvalidParameterError(f"key must not be a reserved metadata key, got {key!r}")
        with self.transaction():
            self._conn.execute(
                f"INSERT OR REPLACE INTO {_META} (key, value) VALUES (?, ?)", (key, str(value))
            )

    def agent_scopes(self, agent: str) -> set[str]:
        """The scopes ``agent`` was charged under (empty if never charged)."""
        sql = f"SELECT DISTINCT scope FROM {_CHARGES} WHERE agent = ?"
        return {r[0] for r in self._read(sql, (agent,))}

    def scopes(self) -> dict[str, set[str]]:
        """``{agent: {scopes it was charged under}}``."""
        out: dict[str, set[str]] = {}
        for agent, scope in self._read(f"SELECT DISTINCT agent, scope FROM {_CHARGES}"):
            out.setdefault(agent, set()).add(scope)
        return out

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
