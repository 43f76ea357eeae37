"""Where a :class:`~ldp_audit.accountant.ledger.Ledger` keeps its charges: the store interface.

A ledger is two halves. The **store** (this interface) only keeps records and makes writes
atomic and durable; it decides nothing. The **ledger** (:class:`Ledger`, written once above
the interface) holds every rule: the budget check runs inside the store's write transaction,
before anything is written (charge before release); rows are hash-chained; the head, the
metadata and every agent's state carry MACs under the ledger key, and every read of spend is
checked against them; a store changed by anyone else is read and verified again; a resumed run
replays the rows already stored instead of charging them twice. So a store cannot make a
ledger trust something it has not verified, and a new store needs no privacy code.

Two kinds of store:

* :class:`RowStore` keeps every chained charge row and the keyed per-agent records: a ledger
  of record (``keeps_rows`` True). :class:`~ldp_audit.accountant.ledger_sqlite.SqliteStore`
  (a file, or ``":memory:"``) is the one shipped; ``tests/test_ledger_store.py`` runs a
  ``Ledger`` over a third, dict-based one written in the test.
* :class:`CountStore` keeps only each agent's running counts in memory (``keeps_rows``
  False): :class:`~ldp_audit.accountant.ledger_tally.TallyStore`, behind ``TallyLedger``.
  Budgets are enforced by the same ledger code; there are no rows, chain or MACs, so a ledger
  over it is never evidence, and the row-level calls (``records``, ``chain_head``, ``verify``,
  ``anchor``, ``transaction``, replaying a non-empty ledger) raise ``LedgerError`` saying so.

Record layouts (tuples, exactly the columns of the schema-3 SQLite tables;
:mod:`ledger_format` has the bytes that are hashed, checksummed and MACed):

* charge row: ``(id, agent, event, scope, time, run_id, agent_n, hash)``;
* agent record: ``(agent, n, last_id, chk, mac)``; event-count record:
  ``(agent, scope, event, n, chk)``;
* head: :class:`HeadRecord` ``(rows, hash, meta_digest, mac)``.

Contract for every store: every method raises :class:`~ldp_audit.errors.LedgerError` (or a
subclass), never a backend's own error, when used inside :meth:`LedgerStore.errors`,
:meth:`LedgerStore.read` or :meth:`LedgerStore.write`; writes happen only inside
:meth:`LedgerStore.write`, which is exclusive (no other writer of the same data can commit
meanwhile), all or nothing (an exception inside leaves nothing written), and durable when it
returns if ``durable`` is True.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, NamedTuple

from ldp_audit.accountant.ledger_format import AgentState, integrity_error

__all__ = ["HeadRecord", "WriteHead", "LedgerStore", "RowStore", "CountStore"]


class HeadRecord(NamedTuple):
    """The chain head: row count, last row's hash, the metadata's digest, and their MAC."""

    rows: int
    hash: bytes
    meta_digest: bytes
    mac: bytes


class WriteHead(NamedTuple):
    """The head as a writer reads it, inside its write transaction, in one step.

    ``token`` changes whenever anything but this store's own :meth:`RowStore.put_charges`
    changed the store since the last commit (another process, another connection, any other
    write); None means "unknown", and the ledger then keeps no state between writes.
    ``top_id`` and ``top_hash`` are the id and hash of the last stored row (``0`` and None when
    there is none).
    """

    token: Hashable | None
    head: HeadRecord
    top_id: int
    top_hash: bytes | None


class LedgerStore(ABC):
    """What every store gives a ledger: metadata, transactions, durability, a name."""

    #: Whether the store keeps the chained rows and keyed records (a ledger of record).
    keeps_rows: ClassVar[bool] = True
    #: A name for messages (a file's path, ``":memory:"``, ...).
    path: str = ""
    #: Whether writes are refused (the ledger may also set it, e.g. without the key).
    readonly: bool = False

    @property
    @abstractmethod
    def durable(self) -> bool:
        """Whether committed writes outlive the process."""

    @abstractmethod
    def errors(self, what: str) -> AbstractContextManager[None]:
        """Turn the backend's errors inside the block into ``LedgerError`` (``what`` names the
        operation in the message, e.g. ``"read"``)."""

    @abstractmethod
    def read(self) -> AbstractContextManager[Any]:
        """A consistent snapshot for several reads (a no-op inside :meth:`write`)."""

    @abstractmethod
    def write(self) -> AbstractContextManager[Any]:
        """An exclusive, all-or-nothing write transaction, durable when it returns (if
        ``durable``); yields the backend's handle (an ``sqlite3.Connection`` for SQLite)."""

    @abstractmethod
    def meta(self) -> dict[str, str]:
        """The metadata (application, schema_version, ledger_id, key_id, budget, ...)."""

    @abstractmethod
    def put_meta(self, key: str, value: str) -> None:
        """Set one metadata entry (inside :meth:`write`)."""

    @abstractmethod
    def close(self) -> None:
        """Release the store (idempotent)."""

    def settle(self) -> None:  # noqa: B027 - optional: most stores keep nothing between writes
        """Drop what a writer keeps on disk between transactions (the store stays usable)."""


class RowStore(LedgerStore):
    """A store of chained charge rows and keyed per-agent records (see the module docstring);
    ``keeps_rows`` True (``LedgerStore``'s)."""

    # ---- life cycle ------------------------------------------------------------------------

    @abstractmethod
    def empty(self) -> bool:
        """Whether the store holds no ledger yet (then the ledger calls :meth:`initialise`)."""

    @abstractmethod
    def initialise(self, meta: dict[str, str], head: HeadRecord) -> None:
        """Store the first metadata and the genesis head of a new ledger, durably."""

    @abstractmethod
    def check_structure(self) -> None:
        """Raise ``LedgerIntegrityError`` if a part of the store is missing (e.g. a table)."""

    @abstractmethod
    def open_for_writing(self) -> None:
        """Prepare for writes (e.g. journal mode); called only once the ledger has checked
        the store's identity and its key."""

    @abstractmethod
    def check_storage(self, *, full: bool) -> None:
        """The backend's own integrity check (quick, or ``full``); raises
        ``LedgerIntegrityError``. Stores without one do nothing."""

    # ---- head ------------------------------------------------------------------------------

    @abstractmethod
    def head(self) -> HeadRecord | None:
        """The head (None: missing)."""

    def checked_head(self) -> HeadRecord:
        """The head; ``LedgerIntegrityError`` when it is missing."""
        head = self.head()
        if head is None:
            raise integrity_error(self.path, "the chain head is missing")
        return head

    @abstractmethod
    def write_head(self) -> WriteHead | None:
        """The head, the last row and the change token, in one read (inside :meth:`write`, or
        :meth:`read` on open; None: no head)."""

    @abstractmethod
    def committed_token(self, token: Hashable | None) -> Hashable | None:
        """After a commit of this store's own :meth:`put_charges` begun at ``token``: the token
        the next :meth:`write_head` returns if nothing else changes the store."""

    @abstractmethod
    def put_head(self, rows: int, hash: bytes, mac: bytes) -> None:  # noqa: A002
        """Set the head's row count, last hash and MAC (inside :meth:`write`)."""

    @abstractmethod
    def put_seal(self, meta_digest: bytes, mac: bytes) -> None:
        """Set the head's metadata digest and MAC (inside :meth:`write`)."""

    # ---- rows ------------------------------------------------------------------------------

    @abstractmethod
    def rows(
        self, first: int = 1, last: int | None = None, agent: str | None = None
    ) -> Iterable[tuple]:
        """Charge rows with ``first <= id <= last`` (all from ``first`` when ``last`` is None),
        only ``agent``'s when given, in id order."""

    def row_hash(self, i: int) -> bytes | None:
        """The stored hash of row ``i`` (None: no such row)."""
        got = list(self.rows(i, i))
        return bytes(got[0][7]) if got else None

    @abstractmethod
    def put_charges(
        self, charges: Sequence[tuple], agents: Sequence[tuple], states: Sequence[tuple]
    ) -> None:
        """Append charge rows and insert or replace agent and event-count records (inside
        :meth:`write`; agent records keyed by agent, event counts by agent, scope, event)."""

    # ---- per-agent records -----------------------------------------------------------------

    @abstractmethod
    def state_records(self, agents: Sequence[str] | None) -> tuple[list[tuple], list[tuple]]:
        """The agent records of ``agents`` (every agent when None), each as ``(agent, n,
        last_id, chk, mac, row_agent, row_agent_n, row_hash)`` with ``row_*`` from the charge
        row ``last_id`` (None when missing), and every event-count record of those agents."""

    @abstractmethod
    def record_totals(self) -> list[tuple[str, int, int]]:
        """``[(name, number of records, sum of their counts n), ...]`` for the agent records and
        the event-count records (names for messages)."""


class CountStore(LedgerStore):
    """A store of per-agent running counts only: no rows, no chain, no MACs (never evidence)."""

    keeps_rows: ClassVar[bool] = False

    @abstractmethod
    def count(self) -> int:
        """Number of charges counted."""

    @abstractmethod
    def live_states(self, agents: Iterable[str] | None = None) -> dict[str, AgentState]:
        """The store's own state objects of ``agents`` (all when None; absent: never
        charged). Callers must not change them; the ledger hands out copies."""

    @abstractmethod
    def add(self, rows: Sequence[tuple[str, str, str]]) -> None:
        """Count ``(agent, event, scope)`` rows (inside :meth:`write`)."""
