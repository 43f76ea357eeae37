"""A ledger's checked reads: its length and chain head, the anchor, verified states, rows, the
full verification, and the checks of a store when it is opened.

:class:`LedgerQueries` is the reading half of :class:`~ldp_audit.accountant.ledger.Ledger`
(which opens the store and writes; everything here is read with the checks of
docs/accountant.md): every agent's state is rebuilt from three independent records that must
agree, and with the key their MACs are checked (:mod:`~ldp_audit.accountant.ledger_chain`); the
head is read with its MAC; ``verify()`` walks the whole chain. A ``TallyLedger`` (a count
store) answers ``len()`` and ``states()``; the row-level reads raise ``LedgerError`` saying it
keeps no rows.
The questions derived from ``states()`` alone (agents, histories, scopes) are answered from it.

The attributes read here are set when :class:`~ldp_audit.accountant.ledger.Ledger` opens its
store (``Ledger._attach``), with the checks on open, functions over a
:class:`~ldp_audit.accountant.ledger_store.RowStore` (so every store is checked by the same
code):

* :func:`identify`: the metadata names this application and a schema version this code reads;
* :func:`resolve_key`: which key authenticates the ledger, or why none does (then it is read
  unauthenticated and never charged);
* :func:`verify_open`: on open, the chain's tail re-hashed against the head, and the per-agent
  records' totals against the row count (cheap).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from ldp_audit.accountant.keys import LedgerKey, load_key
from ldp_audit.accountant.ledger_chain import check_head_mac, states_from_records, walk_chain
from ldp_audit.accountant.ledger_format import (
    APPLICATION,
    READABLE_VERSIONS,
    AgentState,
    LedgerIntegrityError,
    LedgerSchemaError,
    check_text,
    genesis_hash,
    integrity_error,
    metadata_digest,
)
from ldp_audit.accountant.ledger_store import CountStore, LedgerStore, RowStore
from ldp_audit.errors import LedgerError
from ldp_audit.rundir.files import check_hex64

__all__ = ["LedgerQueries", "identify", "resolve_key", "verify_open"]

# ---- the checks on open -----------------------------------------------------------------------

#: Rows of the chain's tail re-hashed on every open.
TAIL_ROWS = 64


def identify(meta: dict[str, str], path: str, table: str) -> int:
    """The schema version of a store whose metadata is ``meta`` (``table``: where it is kept,
    for messages); refuses another application and unreadable versions."""
    if meta.get("application") != APPLICATION:
        raise LedgerError(
            f"ledger file {path!r} has an {table!r} table but application "
            f"{meta.get('application')!r}, expected {APPLICATION!r}"
        )
    try:
        version = int(meta.get("schema_version", "-1"))
    except ValueError:
        version = -1
    if version not in READABLE_VERSIONS:
        hint = (
            "; it was written by an older ldp-audit (WAL journal, no hash chain): convert it "
            "explicitly with ldp_audit.accountant.ledger_migrate.migrate_v1(src, dst) or "
            "`ldp-audit budget LEDGER --migrate-to NEW`"
            if version == 1
            else ""
        )
        raise LedgerSchemaError(
            f"ledger {path!r} has schema version {meta.get('schema_version')}; this "
            f"ldp-audit reads versions {READABLE_VERSIONS}{hint}"
        )
    return version


def resolve_key(
    schema: int, meta: dict[str, str], path: str
) -> tuple[LedgerKey | None, str | None, str, str | None]:
    """``(key, key id, auth note, write refusal)``: the key that authenticates this ledger
    (schema 3), or None and why there is none (the note) and why it cannot be charged."""
    if schema < 3:
        return (
            None,
            None,
            f"schema version {schema}: written before ledgers were keyed, so nothing "
            f"in it is authenticated (migrate it with `ldp-audit budget LEDGER --migrate-to "
            f"NEW`)",
            f"ledger {path!r} has schema version {schema} (no key): it is read "
            f"only; convert it with `ldp-audit budget LEDGER --migrate-to NEW` to charge it",
        )
    key_id = meta.get("key_id")
    key = load_key(create=False)  # a reader never creates a key
    if key is None:
        note = (
            f"no ledger key in this process (set LDP_AUDIT_KEY_FILE or LDP_AUDIT_KEY, or "
            f"create the default key file): the ledger was written under key id "
            f"{key_id}, and its MACs cannot be checked"
        )
    elif key.id != key_id:
        note = (
            f"the ledger was written under key id {key_id}; this process's key "
            f"({key.source}) has id {key.id}, so its MACs cannot be checked"
        )
    else:
        return key, key_id, "", None
    refusal = (
        f"ledger {path!r} cannot be charged: {note}; a charge would leave it without valid MACs"
    )
    return None, key_id, note, refusal


def verify_open(store: RowStore, ledger_id: str, path: str) -> None:
    """The chain's tail (its last ``TAIL_ROWS`` rows) re-hashed against the head; the per-agent
    totals against the row count."""
    wh = store.write_head()  # the head and the last row, in one read
    if wh is None:
        raise integrity_error(path, "the chain head is missing")
    rows, head, top = wh.head.rows, wh.head.hash, wh.top_id
    if top != rows:
        raise integrity_error(
            path, f"the chain head records {rows} rows but the last row id is {top}"
        )
    first = max(1, rows - TAIL_ROWS + 1)
    prev = genesis_hash(ledger_id) if first == 1 else store.row_hash(first - 1)
    if prev is None:
        raise integrity_error(path, f"row {first - 1} is missing")
    last, prev, *_ = walk_chain(store.rows(first, rows), prev, path, None, first)
    if last != rows:
        raise integrity_error(path, f"rows {last + 1}..{rows} are missing")
    if prev != head:
        raise integrity_error(
            path,
            "the chain head of an empty ledger is not its genesis hash"
            if rows == 0
            else "the last row's hash is not the recorded chain head",
        )
    for name, _, total in store.record_totals():
        if total != rows:
            raise integrity_error(
                path, f"the per-agent state ({name}) counts {total} charges, the chain {rows}"
            )


class LedgerQueries:
    """The reads of a ledger, each checked (see the module docstring); ``Ledger`` is the one
    class built on it."""

    # Set by ``Ledger._attach`` when the store is opened.
    path: str
    authenticated: bool
    auth_note: str
    key_id: str | None
    _store: LedgerStore
    #: the store when it keeps rows (None: a count store)
    _rows: RowStore | None
    _lock: threading.RLock
    _key: LedgerKey | None
    _ledger_id: str
    _schema: int
    #: the last full verified state, keyed by the chain head it was read at
    _all_states: tuple[tuple[int, bytes], dict[str, AgentState]] | None

    # ---- errors ------------------------------------------------------------------------------

    def _bad(self, what: str) -> LedgerIntegrityError:
        return integrity_error(self.path, what)

    def _not_evidence(self, what: str) -> LedgerError:
        return LedgerError(
            f"{self!r} keeps running counts only (no rows, no hash chain, nothing on disk): it "
            f"has no {what}; use Ledger(path) for a ledger of record"
        )

    def _rows_store(self, what: str) -> RowStore:
        store = self._rows
        if store is None:
            raise self._not_evidence(what)
        return store

    # ---- checks of what is read --------------------------------------------------------------

    def _check_sealed(self) -> None:
        """The metadata must match its digest and the head its MAC (on open; and so that
        resealing inside a write never launders an edit made outside ldp-audit)."""
        store = self._rows_store("metadata seal")
        head = store.head()
        if head is None or head.meta_digest != metadata_digest(store.meta()):
            raise self._bad("the metadata (budget, ids) does not match its recorded digest")
        check_head_mac(self._key, self._ledger_id, self.path, head)

    def _head(self) -> tuple[int, bytes]:
        return self._rows_store("hash chain").checked_head()[:2]

    # ---- verified state ----------------------------------------------------------------------

    def _load_states(
        self,
        agents: Sequence[str] | None,
        rows: int | None = None,
        fetched: tuple[list[tuple], list[tuple]] | None = None,
    ) -> dict[str, AgentState]:
        """Verified running state of ``agents`` (absent agents: never charged; every agent when
        None, whose totals must then add up to ``rows`` charges), from three independent records
        that must agree (``ledger_chain.states_from_records``). ``fetched``: the records, already
        read; else they are read here, which must run inside a transaction or a read."""
        if fetched is None:
            fetched = self._rows_store("rows").state_records(agents)
        return states_from_records(*fetched, rows, self._key, self._ledger_id, self.path)

    # ---- reads -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of charges (rows), as recorded by the chain head. Rows are never deleted."""
        store = self._store
        if isinstance(store, CountStore):
            return store.count()
        with store.errors("read"), self._lock:
            return self._head()[0]

    def chain_head(self) -> str:
        """The chain head as hex: the hash of the last row (the genesis hash when empty).

        A later copy of this ledger *extends* this one iff ``verify(expect_head=...)`` finds
        this value among its rows' hashes.
        """
        store = self._rows_store("hash chain")
        with store.errors("read"), self._lock:
            return self._head()[1].hex()

    @property
    def ledger_id(self) -> str:
        """The ledger's random id (its chain starts from a hash of it)."""
        return self._ledger_id

    def anchor(self) -> dict[str, Any]:
        """What a run's manifest records to pin this ledger: ``{"ledger_id", "rows",
        "chain_head", "meta_digest", "key_id", "schema_version"}`` (one consistent read; the
        head's MAC is checked when the ledger is authenticated)."""
        store = self._rows_store("hash chain to anchor")
        with self._store.read():
            head = store.checked_head()
            check_head_mac(self._key, self._ledger_id, self.path, head)
        return {
            "ledger_id": self._ledger_id,
            "rows": head.rows,
            "chain_head": head.hash.hex(),
            "meta_digest": bytes(head.meta_digest).hex(),
            "key_id": self.key_id,
            "schema_version": self._schema,
        }

    def states(self, agents: Iterable[str] | None = None) -> dict[str, AgentState]:
        """Verified running state of ``agents`` (every agent when None); the caller's copies."""
        if agents is not None:  # a NUL id would read as the id before its NUL (json_each)
            agents = [check_text(a, "agent id", agent=True) for a in agents]
        store = self._store
        if isinstance(store, CountStore):
            with store.read():
                live = store.live_states(None if agents is None else dict.fromkeys(agents))
                return {a: st.copy() for a, st in live.items()}
        if agents is not None:
            with self._store.read():
                return self._load_states(list(dict.fromkeys(agents)))
        # Every agent: read one snapshot, then verify it after the read transaction has ended,
        # so a long verification never holds a lock that a committing writer waits for.
        with self._store.read():
            rows, head = self._head()
            hit = self._all_states
            if hit is not None and hit[0] == (rows, head):
                return hit[1]
            fetched = store.state_records(None)
        out = self._load_states(None, rows, fetched)
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
        return {a: h for a, st in self.states(agents).items() if (h := st.history(scope))}

    def scopes(self) -> dict[str, set[str]]:
        """``{agent: {scopes it was charged under}}``."""
        return {a: {s for s, _ in st.events} for a, st in self.states().items()}

    def records(self, agent: str | None = None) -> list[dict[str, object]]:
        """Every charge as a dict (id, agent, event JSON, scope, time, run_id), in order."""
        store = self._rows_store("rows")
        with self._store.read():
            rows = [r[:6] for r in store.rows(1, None, agent)]
        keys = ("id", "agent", "event", "scope", "time", "run_id")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    # ---- full verification -------------------------------------------------------------------

    def verify(self, *, expect_head: str | None = None) -> dict[str, Any]:
        """Walk the whole chain and rebuild every agent's state from the rows.

        Args:
            expect_head: a chain head recorded earlier (hex, e.g. from a report): the ledger
                must contain a row with that hash (it *extends* the earlier copy).

        Returns:
            ``{"ok": True, "rows", "agents", "chain_head", "extends": bool | None}``.

        Raises:
            LedgerIntegrityError: the first problem found (the store's integrity check, a row
                that does not match its hash, a missing row, a state that disagrees with the
                rows, an ``expect_head`` the chain never passes through).
        """
        store = self._rows_store("rows or chain to verify")
        head_hex = check_hex64(expect_head, "expect_head", "chain head")
        want = None if head_hex is None else bytes.fromhex(head_hex)
        with store.errors("verify"), self._store.read():
            store.check_storage(full=True)
            rows, head = self._head()
            self._check_sealed()  # the metadata's digest and the head's MAC
            n, prev, counts, per_agent, found = walk_chain(
                store.rows(1, None), genesis_hash(self._ledger_id), self.path, want
            )
            if n != rows or prev != head:
                raise self._bad(
                    f"the chain has {n} rows ending in {prev.hex()[:16]}..., the head "
                    f"records {rows} rows ending in {head.hex()[:16]}..."
                )
            # every agent's state, rebuilt from the rows, against its stored records
            states = self._load_states(None, rows)
            rebuilt = {(a, s, e): k for a, st in states.items() for (s, e), k in st.events.items()}
            if rebuilt != counts:
                diff = sorted(set(rebuilt.items()) ^ set(counts.items()))[:3]
                raise self._bad(f"the per-agent state disagrees with the rows (e.g. {diff!r})")
            for agent, (n_agent, last) in per_agent.items():
                if (states[agent].n, states[agent].last_id) != (n_agent, last):
                    raise self._bad(f"agent {agent!r}: running total or last row disagrees")
            if want is not None and not found:
                raise LedgerIntegrityError(
                    f"ledger {self.path!r} does not extend the chain head {want.hex()}: no row "
                    f"of this copy has that hash (an older, rewritten or different ledger)"
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
