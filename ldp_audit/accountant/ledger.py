"""The privacy ledger: one durable, hash-chained, keyed row per charge (schema 3).

A ledger is a store and the rules above it. The store keeps records
(:mod:`~ldp_audit.accountant.ledger_store`, the interface;
:mod:`~ldp_audit.accountant.ledger_sqlite`, one SQLite file;
:mod:`~ldp_audit.accountant.ledger_tally`, counts in memory). :class:`Ledger`, written once
for every store, holds every rule: the budget check inside the write transaction
before anything is written; every row hash-chained (``hash = SHA-256(previous hash | row)``,
row 1 from a per-ledger random id); the head, the metadata and every agent's state MACed under a
key kept outside the run directory (:mod:`~ldp_audit.accountant.keys`), so that the state is
bound to the chain position it summarises; every read of spend checked (checksums, totals, the
agent's last chained row, its MAC); on open, the chain's tail re-hashed; ``verify()`` walks the
whole chain (:mod:`~ldp_audit.accountant.ledger_queries`); ``begin_replay()`` makes a resumed
run's charges match the rows already here instead of charging twice
(:mod:`~ldp_audit.accountant.ledger_write`). An edited, deleted or reordered row, a state
edited apart from its chain, or a lost journal is a :class:`LedgerIntegrityError`, never a
silently lower spend. Without the key, reads work and say so (``authenticated``, ``auth_note``),
and nothing is charged. A ledger replaced by an older *complete* copy, or a copy charged on its
own, is caught on open by the high-water mark kept beside the key
(:mod:`~ldp_audit.accountant.ledger_marks`, moved after every commit), and anywhere against an
anchor kept elsewhere (the run's manifest, ``verify(expect_head=...)``). docs/accountant.md has
the guarantees, the tamper table and the measurements.

A writer keeps the state of the agents it charged as its own commits left it, and uses it only
while the store's change token (SQLite: ``data_version``, read with the head in one query) says
nothing else changed the store; otherwise it reads and verifies again.

``Ledger(path)`` is an SQLite file (``":memory:"``: private, an ephemeral key);
``Ledger.over(store)`` the same ledger over any store; ``TallyLedger()`` a ledger over a
``TallyStore`` (same budget code; no rows, no chain; never evidence). Schema-1 ledgers are
refused naming the version;
:func:`~ldp_audit.accountant.ledger_migrate.migrate_v1` converts a schema-1 or -2 one into a new
file.

What lives where: this module opens a store (``Ledger``'s setup, the metadata seal) and writes
(transactions, ``charge_rows``, replay, metadata); the checked reads (``len``, ``chain_head``,
``anchor``, ``states``, ``records``, ``verify``) are
:class:`~ldp_audit.accountant.ledger_queries.LedgerQueries`', which ``Ledger`` extends; the
write transaction and the writer's cache are :mod:`~ldp_audit.accountant.ledger_write`'s; the
record format, chain and MAC maths :mod:`~ldp_audit.accountant.ledger_format` and
:mod:`~ldp_audit.accountant.ledger_chain`.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ldp_audit.accountant.keys import LedgerKey, load_key
from ldp_audit.accountant.ledger_chain import genesis_records
from ldp_audit.accountant.ledger_format import (
    RESERVED_META,
    SCHEMA_VERSION,
    AgentState,
    LedgerIntegrityError,
    LedgerReadOnlyError,
    check_scope,
    check_text,
    genesis_hash,
    head_message,
    metadata_digest,
)
from ldp_audit.accountant.ledger_marks import (
    advance_mark,
    check_mark,
    check_writable,
    reading_unverified,
)
from ldp_audit.accountant.ledger_queries import LedgerQueries, identify, resolve_key, verify_open
from ldp_audit.accountant.ledger_sqlite import (
    META_TABLE,
    SqliteStore,
)
from ldp_audit.accountant.ledger_store import (
    CountStore,
    LedgerStore,
    RowStore,
)
from ldp_audit.accountant.ledger_tally import TallyStore
from ldp_audit.accountant.ledger_write import ChainWriter, Replay, before
from ldp_audit.errors import InvalidParameterError, LedgerError
from ldp_audit.validation import check_bool

__all__ = ["Ledger", "TallyLedger"]


#: Most agents whose state a writer keeps between its own commits (``ChainWriter.cache``).
WRITE_CACHE_AGENTS = 262_144


def _check_verify(verify: Any) -> None:
    if not (isinstance(verify, bool) or (type(verify) is str and verify == "full")):
        raise InvalidParameterError(f"verify must be True, False or 'full', got {verify!r}")


class Ledger(LedgerQueries):
    """An append-only, hash-chained, keyed ledger of privacy charges.

    Args:
        path: SQLite database file (created when missing) or ``":memory:"``.
        timeout: seconds to wait for another process's write lock.
        verify: on open, run SQLite's ``quick_check`` (linear in the file size) and verify the
            chain's tail and the per-agent state totals. ``verify="full"`` also walks the whole
            chain (``verify()``). Opening never proceeds on a file that fails.
        create: create a new ledger when ``path`` does not exist (else raise ``LedgerError``).
        readonly: open without ever writing (no journal mode change, no schema); a file or
            folder without write permission is opened read-only automatically, and a charge
            then raises ``LedgerReadOnlyError``.
        accept_restored: a copy restored on purpose: after a full ``verify()``, this
            ledger's high-water mark (:mod:`~ldp_audit.accountant.ledger_marks`) is rewritten
            to this file's head; ``restored`` then holds the ``(rows, head)`` it forgot (None:
            no mark, or one this file extends). Without it, a file the mark shows was rolled
            back or forked is refused.

    ``Ledger.over(store)`` opens a ledger over any :class:`RowStore` (docs/accountant.md, "The
    store interface").

    Raises:
        LedgerError: the file is not an SQLite database, belongs to another application, has
            another schema version (``LedgerSchemaError``), is corrupt, truncated or tampered
            with (``LedgerIntegrityError``), or cannot be opened.
        InvalidParameterError: ``path`` is not a non-empty str/PathLike, or ``timeout`` is bad.
    """

    #: Whether reads are checked with the ledger key (set on open).
    authenticated = False
    #: Why not, when not authenticated.
    auth_note = ""
    #: The id of the key the ledger was written under (schema 3), else None.
    key_id: str | None = None
    #: The replay of the last ``begin_replay`` (None: never called).
    _replay: Replay | None = None
    #: ``accept_restored``, and then the mark it replaced (``(rows, head)`` or None).
    _accept = False
    restored: tuple[int, bytes] | None = None
    #: Why the high-water mark refuses this file, when read anyway (read-only, inside
    #: ``ledger_marks.unverified_reads``); None: the mark passed or there is none.
    mark_refusal: str | None = None
    #: Metadata entries written through this object (an accountant over a ledger no other
    #: process can write looks for a budget recorded after it opened only when this moved).
    meta_writes: int = 0

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 60.0,
        verify: bool | str = True,
        create: bool = True,
        readonly: bool = False,
        accept_restored: bool = False,
    ):
        _check_verify(verify)
        if not isinstance(accept_restored, bool):
            raise InvalidParameterError(f"accept_restored must be a bool, got {accept_restored!r}")
        self._accept = accept_restored
        store = SqliteStore(
            path,
            timeout=timeout,
            create=check_bool(create, "create"),
            readonly=check_bool(readonly, "readonly"),
            initial=lambda: genesis_records(load_key(create=True)),
        )
        # ":memory:": a private ledger under an ephemeral key of this process
        memory = store.path == ":memory:"
        key = LedgerKey(secrets.token_bytes(32), ":memory: (ephemeral)") if memory else None
        self._attach(store, verify, key)

    @classmethod
    def over(cls, store: LedgerStore, *, verify: bool | str = True) -> Ledger:
        """A ledger over ``store`` (a :class:`RowStore` or :class:`CountStore`).

        An empty row store is initialised as a new ledger under this process's key (created
        when missing, like a new file); an existing one is checked exactly as a file is.
        """
        _check_verify(verify)
        self = cls.__new__(cls)
        self._attach(store, verify, None)
        return self

    def _attach(self, store: LedgerStore, verify: bool | str, key: LedgerKey | None) -> None:
        if not isinstance(store, (RowStore, CountStore)):
            raise InvalidParameterError(
                f"store must be a LedgerStore (a RowStore or a CountStore), got {store!r}"
            )
        self._store = store
        self.path = store.path
        self.readonly = store.readonly
        self._in_tx = False
        self._lock = threading.RLock()
        self._ledger_id = ""
        self._schema = SCHEMA_VERSION
        #: The key this ledger's MACs are checked and written with (None: unauthenticated).
        self._key: LedgerKey | None = None
        self._write_refusal: str | None = None
        # The last full verified state, keyed by the chain head it was read at (read-only).
        self._all_states: tuple[tuple[int, bytes], dict[str, AgentState]] | None = None
        # The write path and the writer's cache (row stores only).
        self._rows = store if isinstance(store, RowStore) else None  # None: a count store
        self._writer = ChainWriter(store, store.path) if self._rows is not None else None
        if isinstance(store, CountStore):
            self._ledger_id = store.meta()["ledger_id"]
            self.auth_note = (
                f"a {type(self).__name__} keeps counts in memory only: nothing to authenticate"
            )
            return
        try:
            with store.errors("open"):
                self._setup(store, verify, key)
        except BaseException:
            store.close()
            raise
        self._writer.key, self._writer.ledger_id = self._key, self._ledger_id  # type: ignore[union-attr]

    @property
    def durable(self) -> bool:
        """Whether charges survive the process (a file ledger; ``":memory:"`` does not)."""
        return self._store.durable

    @property
    def evidence(self) -> bool:
        """Whether this is a ledger of record: its store keeps the chained, keyed rows
        (``TallyLedger``: False)."""
        return self._store.keeps_rows

    @property
    def store(self) -> LedgerStore:
        """The store this ledger keeps its records in."""
        return self._store

    # ---- setup -------------------------------------------------------------------------------

    def _setup(self, store: RowStore, verify: bool | str, key: LedgerKey | None) -> None:
        if store.empty():
            store.initialise(*genesis_records(key or load_key(create=True)))
        if key is not None:  # a private ledger under its own ephemeral key
            self._ledger_id = store.meta()["ledger_id"]
            self._key, self.key_id, self.authenticated = key, key.id, True
            return
        # Identify the store before anything that could write to it.
        meta = store.meta()
        self._schema = identify(meta, self.path, META_TABLE)
        store.check_structure()
        self._ledger_id = meta.get("ledger_id", "")
        self._key, self.key_id, self.auth_note, self._write_refusal = resolve_key(
            self._schema, meta, self.path
        )
        self.authenticated = self._key is not None
        self._check_sealed()  # the metadata's digest, then the head's MAC (cheap)
        if self._write_refusal is not None:
            self.readonly = True
        if not self.readonly:
            if self._key is not None and store.durable:
                check_writable(self.path)  # its marks (ledger_marks) can be written
            store.open_for_writing()
        if verify:
            store.check_storage(full=False)
            with store.read():
                verify_open(store, self._ledger_id, self.path)
        if self._key is not None and store.durable:  # the high-water mark (ledger_marks)
            if self._accept:
                self.verify()
                mark = self._head()
                old = advance_mark(self._key, self._ledger_id, self.path, mark, None)
                with store.read():
                    if old and (old[0] > mark[0] or self._hash_at(old[0]) != old[1]):
                        self.restored = old
            with store.read():
                rows = self._head()[0]
                try:
                    check_mark(self._key, self._ledger_id, self.path, rows, self._hash_at)
                except LedgerIntegrityError as exc:  # read with --allow-unverified: said first
                    if not (self.readonly and reading_unverified()):
                        raise
                    self.mark_refusal = str(exc)
        if verify == "full":
            self.verify()

    def _hash_at(self, i: int) -> bytes | None:
        """The hash of row ``i`` (0: the genesis hash)."""
        return genesis_hash(self._ledger_id) if i == 0 else self._store.row_hash(i)  # type: ignore[attr-defined]

    def _seal_meta(self) -> None:
        """Inside a write: record the metadata's digest in the head and the head's MAC."""
        store = self._rows_store("metadata seal")
        digest = metadata_digest(store.meta())
        rows, head = self._head()
        key: LedgerKey = self._key  # type: ignore[assignment] - _transaction refuses None
        store.put_seal(digest, key.mac(head_message(self._ledger_id, rows, head, digest)))

    # ---- transactions ------------------------------------------------------------------------

    def transaction(self) -> AbstractContextManager[Any]:
        """An exclusive write transaction (SQLite: ``BEGIN IMMEDIATE`` ... ``COMMIT``).

        Reads inside see every committed charge and no other process can commit until this
        transaction ends, so a budget check inside it cannot be raced. Any exception rolls back.
        The commit returns once the store holds the transaction durably (SQLite: the main file,
        synced). Yields the store's handle (an ``sqlite3.Connection`` for SQLite).
        """
        self._rows_store("SQL transactions (charge_rows is atomic by itself)")
        return self._transaction()

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """The ledger's lock, then the store's write transaction; refuses a nested one and a
        read-only ledger (and so one without the key: ``_write_refusal`` says why)."""
        with self._lock:
            if self._in_tx:
                raise LedgerError(f"ledger {self.path!r}: nested transactions are not supported")
            if self.readonly:
                raise LedgerReadOnlyError(
                    self._write_refusal
                    or f"ledger {self.path!r} is read-only (opened read-only, or the file or its "
                    f"folder is not writable): nothing can be charged"
                )
            w = self._writer
            try:
                with self._store.write() as handle:
                    self._in_tx = True
                    try:
                        yield handle
                    finally:
                        self._in_tx = False
                mark = w.pending if w is not None else None
            finally:
                if w is not None:
                    w.pending = None
            if mark is not None and self._key is not None and self._store.durable:
                # committed: the high-water mark follows (lags, never leads)
                with self._store.errors("read"):
                    advance_mark(self._key, self._ledger_id, self.path, mark, self._hash_at)

    # ---- charging ----------------------------------------------------------------------------

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
        budget check. Runs inside an open ``transaction()`` too. ``when``: the rows' time (now
        when None; ``migrate_v1`` keeps each old row's own).
        """
        if not rows:
            return 0
        if self._writer is None:  # a count store: no rows, no chain; its lock is enough
            store = self._store
            with store.write():
                if check is not None:
                    check(store.live_states(dict.fromkeys([r[0] for r in rows])))
                store.add(rows)
            return len(rows)
        w = self._writer
        # The lock is taken before ``_in_tx`` is read: another thread's open transaction must
        # make this thread wait, never let it write into that transaction.
        with self._lock:
            # a resumed run: its leading rows that repeat earlier rows are not written again,
            # and the budget check sees the state before the batch (the replayed rows taken out)
            rep = self._replay
            k = 0 if rep is None else rep.match(rows)
            if k < len(rows):
                agents = list(dict.fromkeys([r[0] for r in rows]))
                in_tx = self._in_tx
                if in_tx:  # a caller's transaction may still roll back: no cache, read everything
                    w.cache = None
                with self._store.errors("write") if in_tx else self.transaction():
                    wh = w.check_head()
                    states, cache, complete = w.states(agents, wh, self._load_states)
                    if check is not None:
                        check(before(states, rows[:k]) if k else states)
                    new = w.append(
                        rows[k:] if k else rows, states, wh.head, run_id=run_id, when=when
                    )
                if not in_tx:  # committed
                    w.rows = wh.head.rows + len(rows) - k
                    w.fold(cache, states, new, complete, wh.token, WRITE_CACHE_AGENTS)
            if k:  # all of it succeeded: past the replayed rows (or every earlier row)
                rep.replayed += k  # type: ignore[union-attr]
                rep.next = rep.next + k if k == len(rows) else rep.rows + 1  # type: ignore[union-attr]
        return len(rows)

    # ---- resume: replaying the charges already in the ledger ---------------------------------

    def begin_replay(self) -> int:
        """Resume a run: the next charges are matched, in order, against the rows already here
        and written only past them (:mod:`ldp_audit.accountant.ledger_write`): a resumed run
        never charges a release twice.

        Returns:
            The number of earlier rows to replay.

        Raises:
            LedgerError: a later charge differs from the row it replays (the resumed run is
                not the run that charged this ledger); nothing of that batch is written. At
                once when the store keeps no rows and holds charges (nothing to replay).
        """
        with self._lock:
            n = len(self)
            if n and not self._store.keeps_rows:
                raise self._not_evidence("rows to replay")
            self._replay = Replay(n, self._replay_read, self.path)
        return n

    def replay_status(self) -> dict[str, int] | None:
        """``{"rows", "replayed", "pending"}`` since :meth:`begin_replay` (None: never called).

        ``pending`` > 0 after a resumed run finished: earlier charges the rerun never made
        (kept: charged and never released, the safe direction)."""
        return None if self._replay is None else self._replay.status()

    def _replay_read(self, first: int, stop: int) -> list[tuple[str, str, str]]:
        store = self._rows_store("rows to replay")
        with store.errors("read"), self._lock:
            return [(r[1], r[2], r[3]) for r in store.rows(first, stop - 1)]

    def append(
        self,
        rows: Iterable[tuple[str, str]] | Iterable[tuple[str, str, str]],
        *,
        run_id: str | None = None,
    ) -> int:
        """Append raw ``(agent, event_json[, scope])`` rows in one durable transaction.

        No budget check: ``Accountant.charge`` is the way to spend budget. Returns the row count.
        Each row is refused with a message naming the field unless well typed (``check_text``);
        scope "local" when left out.
        """
        norm = []
        for row in rows:
            agent = check_text(row[0], "agent id in rows", agent=True)
            event = check_text(row[1], "event_json in rows")
            norm.append((agent, event, check_scope(row[2] if len(row) > 2 else "local")))
        if run_id is not None:
            check_text(run_id, "run_id")
        return self.charge_rows(norm, run_id=run_id)

    # ---- metadata ----------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        """The ledger's metadata (application, schema_version, created, budget, ...)."""
        with self._store.errors("read"), self._lock:
            return self._store.meta()

    def set_meta(self, key: str, value: str) -> None:
        """Durably set one metadata entry (e.g. the budget an accountant enforces)."""
        self._put_meta(key, str(value), once=False)

    def set_meta_once(self, key: str, value: str) -> str:
        """Set ``key`` unless it is already set; returns the value stored (atomically)."""
        return self._put_meta(key, value, once=True)

    def _put_meta(self, key: str, value: str, *, once: bool) -> str:
        if not isinstance(key, str) or key in RESERVED_META:
            raise InvalidParameterError(f"key must not be a reserved metadata key, got {key!r}")
        check_text(key, "metadata key")
        check_text(value, "metadata value")
        store, sealed = self._store, self._rows is not None  # a row store's metadata is sealed
        with self._lock, self.transaction() if sealed else store.write():
            if sealed:
                self._check_sealed()
            got = store.meta().get(key) if once else None
            if got is None:
                store.put_meta(key, value)
                self.meta_writes += 1
                if sealed:
                    self._seal_meta()
            return value if got is None else str(got)

    # ---- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the store (idempotent; a ``TallyLedger`` drops its counts)."""
        self._store.close()

    def settle(self) -> None:
        """Drop the empty journal a writer keeps between charges (``ledger.sqlite-journal``);
        the ledger stays open for reads and charges (:meth:`RunWriter.finish` calls it)."""
        self._store.settle()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"


class TallyLedger(Ledger):
    """A ledger over a :class:`TallyStore`: per-agent running counts in this process's memory,
    NOT a ledger of record.

    For runs whose ledger nobody will read (e.g. a reproduction's grid of trials, whose
    per-report charges are discarded when the process ends). Its budget decisions are a
    ledger's, made by the same code (``Ledger.charge_rows``: the check sees every earlier
    charge, a refused batch leaves nothing behind); the store keeps, per agent, exactly the
    state a ledger of record keeps. It keeps no rows, no hash chain and nothing on disk, so it
    is no evidence of anything: the row-level calls (``records()``, ``chain_head()``,
    ``verify()``, ``anchor()``, ``transaction()``) raise :class:`LedgerError` saying so,
    ``durable`` and ``evidence`` are False, and it cannot be a run directory's ledger (those
    are files). Thread-safe (one lock). This class only chooses the store (``TallyLedger()`` is
    ``Ledger.over(TallyStore())``) and names itself.

    Use ``Ledger(path)`` for anything a report, an audit or a budget question will cite.
    """

    def __init__(self) -> None:  # noqa: D107 - the store is the only choice
        self._attach(TallyStore(), False, None)

    def __repr__(self) -> str:
        agents = len(self._store.live_states())  # type: ignore[attr-defined]
        return f"TallyLedger(agents={agents}, charges={len(self)})"
