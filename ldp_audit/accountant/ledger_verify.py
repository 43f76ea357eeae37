"""Checking a ledger's store when it is opened: its application, schema and key, and its tail.

Functions over a :class:`~ldp_audit.accountant.ledger_store.RowStore`, used by
:class:`~ldp_audit.accountant.ledger.Ledger` (so every store is checked by the same code):

* :func:`identify`: the metadata names this application and a schema version this code reads;
* :func:`resolve_key`: which key authenticates the ledger, or why none does (then it is read
  unauthenticated and never charged);
* :func:`verify_open`: on open, the chain's tail re-hashed against the head, and the per-agent
  records' totals against the row count (cheap).

The full walk (``Ledger.verify()``, ``ldp-audit budget --verify``) is
:meth:`~ldp_audit.accountant.ledger_queries.LedgerQueries.verify`'s.
"""

from __future__ import annotations

from ldp_audit.accountant.keys import LedgerKey, load_key
from ldp_audit.accountant.ledger_chain import walk_chain
from ldp_audit.accountant.ledger_format import (
    APPLICATION,
    READABLE_VERSIONS,
    LedgerSchemaError,
    genesis_hash,
    integrity_error,
)
from ldp_audit.accountant.ledger_store import RowStore
from ldp_audit.errors import LedgerError

__all__ = [
    "identify",
    "resolve_key",
    "verify_open",
]

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
    rows, head = store.checked_head()[:2]
    top = store.last_row_id()
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
