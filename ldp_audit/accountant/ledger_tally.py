"""The tally store: per-agent running counts in this process's memory, NOT a ledger of record.

:class:`TallyStore` is the :class:`~ldp_audit.accountant.ledger_store.CountStore` behind
``TallyLedger``: for runs whose ledger nobody will read (a reproduction's grid of trials, whose
per-report charges are discarded when the process ends). It keeps, per agent, exactly the state
a ledger of record keeps (count of every distinct event, total, last row number), so the
ledger's budget check over it sees every earlier charge; no rows, no chain, no MACs, nothing on
disk. Thread-safe (one lock); a write is all or nothing because nothing is changed before the
ledger's budget check has passed and :meth:`TallyStore.add` cannot fail halfway.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import Any

from ldp_audit.accountant.ledger_format import APPLICATION, AgentState
from ldp_audit.accountant.ledger_store import CountStore
from ldp_audit.errors import LedgerError

__all__ = ["TallyStore"]


class TallyStore(CountStore):
    """Per-agent running counts in memory (see the module docstring)."""

    path = ":tally:"

    def __init__(self) -> None:
        self.readonly = False
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

    def _open(self) -> None:
        if self._closed:
            raise LedgerError("the TallyLedger is closed (its tally store dropped its counts)")

    def errors(self, what: str) -> Any:
        return nullcontext()

    def read(self) -> Any:
        self._open()
        return self._lock

    def write(self) -> Any:
        """The store's lock (a charge racing with :meth:`close` may count into the dropped
        tally; every later one is refused)."""
        self._open()
        return self._lock

    def meta(self) -> dict[str, str]:
        with self._lock:
            self._open()
            return dict(self._meta)

    def put_meta(self, key: str, value: str) -> None:
        self._meta[key] = value

    def count(self) -> int:
        return self._rows

    def live_states(self, agents: Iterable[str] | None = None) -> dict[str, AgentState]:
        tally = self._tally
        if agents is None:
            return dict(tally)
        get = tally.get
        return {a: st for a in agents if (st := get(a)) is not None}

    def add(self, rows: Sequence[tuple[str, str, str]]) -> None:
        tally = self._tally
        get = tally.get
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

    def close(self) -> None:
        """Drop the counts (idempotent)."""
        with self._lock:
            self._closed = True
            self._tally = {}

    def __repr__(self) -> str:
        return f"TallyStore(agents={len(self._tally)}, charges={self._rows})"
