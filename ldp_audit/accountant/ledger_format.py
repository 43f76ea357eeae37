"""The ledger's record format (schema 3): constants, errors, per-agent state, and the exact bytes
that are hashed, checksummed and MACed.

Everything here is pure (no I/O) and shared by every store (:mod:`ledger_store`): the SQLite
file (:mod:`ledger_sqlite`) keeps these records as table rows, an in-memory store as tuples; the
bytes below are what makes one ledger's chain, checksums and MACs the same in every store.
Changing any of them changes the on-disk format (a new schema version, never an edit).

A charge row is ``(id, agent, event, scope, time, run_id, agent_n, hash)``: ``id`` counts rows
from 1, ``agent_n`` is the agent's running number of charges, and
``hash = SHA-256(previous row's hash | row bytes)``, row 1 chaining from :func:`genesis_hash` of the
ledger's random id. An agent record is ``(agent, n, last_id, chk, mac)`` and an event-count
record ``(agent, scope, event, n, chk)``: ``chk`` a CRC-32 (accidents), ``mac`` an HMAC-SHA256
under the ledger key of the agent's counts and the hash of the row ``last_id`` (a person). The
checksums are ``zlib.crc32`` of ``f"{len(agent)}:{agent}|{n}|{last_id}"`` (agent record) and of
``f"{len(agent)}:{agent}|{scope}|{len(event)}:{event}|{n}"`` (event-count record), UTF-8, as
:mod:`~ldp_audit.accountant.ledger_chain` computes and checks them.
The head ``(rows, hash, meta_digest, mac)`` authenticates the row count, the last hash and the
metadata's digest.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ldp_audit.errors import InvalidParameterError, LedgerError
from ldp_audit.validation import check_choice

__all__ = [
    "APPLICATION",
    "SCHEMA_VERSION",
    "READABLE_VERSIONS",
    "SCOPES",
    "RESERVED_META",
    "AgentState",
    "LedgerIntegrityError",
    "LedgerReadOnlyError",
    "LedgerSchemaError",
    "integrity_error",
    "check_scope",
    "check_text",
]

APPLICATION = "ldp-audit privacy ledger"
#: Schema version of new ledgers: 3 adds the keyed MACs (head and per-agent state).
SCHEMA_VERSION = 3
#: Versions this code reads (2: no key, read as unauthenticated and never written).
READABLE_VERSIONS = (2, 3)
#: Where a charge's privacy claim belongs: per-agent local DP, or a central (DP-SGD) model claim.
SCOPES = ("local", "central")
#: Metadata keys only the ledger itself writes (``set_meta`` refuses them).
RESERVED_META = ("application", "schema_version", "ledger_id")


class LedgerIntegrityError(LedgerError):
    """The ledger's contents do not verify (edited, deleted or reordered rows, corrupt state)."""


class LedgerReadOnlyError(LedgerError):
    """The ledger is read-only (file or folder permissions, or opened with ``readonly=True``)."""


class LedgerSchemaError(LedgerError):
    """The file is a ledger of another schema version (e.g. version 1)."""


def integrity_error(path: str, what: str) -> LedgerIntegrityError:
    """The error of a ledger at ``path`` whose contents fail a check (``what`` says which)."""
    return LedgerIntegrityError(
        f"ledger {path!r} failed verification: {what}; the ledger was edited, "
        f"truncated or corrupted, and its spend cannot be trusted (run `ldp-audit budget "
        f"{path} --verify` for a full check)"
    )


def check_scope(scope: Any) -> str:
    """``scope`` when it is one of :data:`SCOPES`."""
    return check_choice(scope, "scope", SCOPES)


#: What SQLite and the chain's hash cannot hold: surrogates (not UTF-8); in an agent id, NUL too
#: (the per-agent lookup, SQLite's ``json_each``, ends "x\\u0000y" at NUL: docs/accountant.md),
#: and every other control character (a newline or ESC in an id forged lines of ``budget``).
_NOT_UTF8 = re.compile("[\ud800-\udfff]")
_BAD_ID = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_text(value: Any, name: str, *, agent: bool = False) -> str:
    """``value`` if the ledger can store it: a str without surrogates; an agent id (``agent``)
    also non-empty and without NUL."""
    bad = _BAD_ID if agent else _NOT_UTF8
    if not isinstance(value, str) or bad.search(value) or (agent and not value):
        what = (
            "a non-empty string without NUL, control characters or" if agent else "a string without"
        )
        raise InvalidParameterError(f"{name} must be {what} lone surrogates, got {value!r}")
    return value


# ---- hashing, checksums, MAC messages ----------------------------------------------------------


def genesis_hash(ledger_id: str) -> bytes:
    return hashlib.sha256(f"ldp-audit ledger v2|{ledger_id}".encode()).digest()


def row_bytes(
    i: int, agent: str, event: str, scope: str, t: float, run_id: str | None, agent_n: int
) -> bytes:
    r = "N" if run_id is None else f"{len(run_id)}:{run_id}"
    return f"{i}|{len(agent)}:{agent}|{len(event)}:{event}|{scope}|{t!r}|{r}|{agent_n}".encode()


def row_hash(prev: bytes, data: bytes) -> bytes:
    return hashlib.sha256(prev + data).digest()


def _events_bytes(events: dict[tuple[str, str], int]) -> bytes:
    """Canonical bytes of an agent's event counts (sorted by scope, event)."""
    if len(events) == 1:
        (((s, e), n),) = events.items()
        return f"{s}|{len(e)}:{e}|{n};".encode()
    return "".join(f"{s}|{len(e)}:{e}|{n};" for (s, e), n in sorted(events.items())).encode()


def agent_message(
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


def head_message(ledger_id: str, rows: int, head: bytes, meta_digest: bytes) -> bytes:
    """What the head's MAC authenticates: row count, last hash and the metadata's digest."""
    return f"head|{ledger_id}|{rows}|".encode() + head + b"|" + meta_digest


def metadata_digest(meta: dict[str, str]) -> bytes:
    return hashlib.sha256(json.dumps(sorted(meta.items())).encode()).digest()


@dataclass(slots=True)
class AgentState:
    """One agent's verified running state: ``{(scope, event): count}``, total and last row."""

    n: int = 0
    last_id: int = 0
    events: dict[tuple[str, str], int] = field(default_factory=dict)

    def copy(self) -> AgentState:
        """An independent copy (its events dict is not shared)."""
        return AgentState(self.n, self.last_id, dict(self.events))

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
