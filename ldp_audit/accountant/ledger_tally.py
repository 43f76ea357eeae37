"""The tally store: per-agent running counts in this process's memory, NOT a ledger of record.

:class:`TallyStore` is the :class:`~ldp_audit.accountant.ledger_store.CountStore` behind
``TallyLedger``: for runs whose ledger nobody will read (a reproduction's grid of trials, whose
per-report charges are discarded when the process ends). It keeps, per agent, exactly the state
a ledger of record keeps (count of every distinct event, total, last row number), so the
ledger's budget check over it sees every earlier charge; no rows, no chain, no MACs, nothing on
disk. Thread-safe (one lock); a write is all or nothing because nothing is changed before the
ledger's budget check has passed and :meth:`TallyStore.add` cannot fail halfway.

Compact: an engine names its agents ``prefix + number`` (``"3:0/17"``: config 3, trial 0,
agent 17) and charges most of them with one kind of event. Agents charged once each, in
consecutive rows and numbers (the fused engine's blocks of new agents), are one *run* of their
prefix (four numbers for the whole block); any other numbered agent is a *slot* of its prefix's
three typed arrays (count, last row, event kind: :data:`SLOT_BYTES` bytes), not a Python object
(about 490 bytes: the name, a dict entry, an ``AgentState`` and its events dict). So the
reproduction's 24 million agents take about 13 MB instead of 12 GB (docs/accountant.md, "Memory
of a tally"). Every other agent (a name without a number, a number far past its prefix's slots,
a second kind of event) keeps an ``AgentState`` in a dict. An agent is in one place: the dict
is read first, then the slots, then the runs; the answers are a ledger's (tested).
"""

from __future__ import annotations

import threading
import time
import uuid
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import Any

from ldp_audit.accountant.ledger_format import APPLICATION, AgentState
from ldp_audit.accountant.ledger_store import CountStore
from ldp_audit.errors import LedgerError

__all__ = ["TallyStore", "SLOT_BYTES"]

#: Bytes of one numbered agent's slot (count and last row: int64; event kind: int32).
SLOT_BYTES = 20
#: A number this far past its prefix's slots is kept in the dict (no run of empty slots).
_GAP = 1024
_DIGITS = "0123456789"


def _split(agent: str) -> tuple[str, int] | None:
    """``(prefix, number)`` of a name ending in a number written canonically, else None."""
    prefix = agent.rstrip(_DIGITS)
    num = agent[len(prefix) :]
    if not num or len(num) > 15 or (num[0] == "0" and len(num) > 1):
        return None
    return prefix, int(num)


class _Numbered:
    """The agents ``prefix + str(j)`` of one prefix: slots (count ``n[j]``, 0: none; last row
    ``last[j]``; event kind ``kind[j]``) and runs (agents ``r0[p] <= j < r1[p]``, charged once
    each with kind ``rkind[p]``, agent ``j`` in row ``rrow[p] + j - r0[p]``)."""

    __slots__ = ("n", "last", "kind", "r0", "r1", "rrow", "rkind", "top")

    def __init__(self) -> None:
        self.top = 0  # every agent from here on is new (or in the store's dict)
        self.n, self.last, self.kind = array("q"), array("q"), array("i")
        self.r0, self.r1, self.rrow, self.rkind = array("q"), array("q"), array("q"), array("i")

    def grow(self, j: int) -> bool:
        """Make slot ``j`` exist (False: too far past the slots, the agent goes to the dict)."""
        size = len(self.n)
        if j < size:
            return True
        if j > 2 * size + _GAP:
            return False
        for a in (self.n, self.last, self.kind):
            a.frombytes(bytes(a.itemsize * (j + 1 - size)))
        return True

    def run_of(self, j: int) -> int:
        """The run holding ``j`` (-1: none)."""
        p = bisect_right(self.r0, j) - 1
        return p if p >= 0 and j < self.r1[p] else -1


class TallyStore(CountStore):
    """Per-agent running counts in memory (see the module docstring)."""

    path = ":tally:"

    def __init__(self) -> None:
        self.readonly = False
        self._lock = threading.RLock()
        self._closed = False
        self._rows = 0
        self._other: dict[str, AgentState] = {}
        self._numbered: dict[str, _Numbered] = {}
        self._kinds: list[tuple[str, str]] = []
        self._kind_of: dict[tuple[str, str], int] = {}
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
        """The store's lock, for reads and writes alike (a charge racing with :meth:`close` may
        count into the dropped tally; every later one is refused)."""
        self._open()
        return self._lock

    write = read

    def meta(self) -> dict[str, str]:
        with self._lock:
            self._open()
            return dict(self._meta)

    def put_meta(self, key: str, value: str) -> None:
        self._meta[key] = value

    def count(self) -> int:
        return self._rows

    def _state(self, agent: str) -> AgentState | None:
        st = self._other.get(agent)
        if st is not None:
            return st
        split = _split(agent)
        g = None if split is None else self._numbered.get(split[0])
        if g is None:
            return None
        j = split[1]  # type: ignore[index]
        if j < len(g.n) and g.n[j]:
            return AgentState(g.n[j], g.last[j], {self._kinds[g.kind[j]]: g.n[j]})
        p = g.run_of(j)
        if p < 0:
            return None
        return AgentState(1, g.rrow[p] + j - g.r0[p], {self._kinds[g.rkind[p]]: 1})

    def live_states(self, agents: Iterable[str] | None = None) -> dict[str, AgentState]:
        """The agents' states (the dict's own objects; a numbered agent's is built)."""
        if agents is None:
            names: list[str] = []
            for pre, g in self._numbered.items():
                names += [pre + str(j) for p in range(len(g.r0)) for j in range(g.r0[p], g.r1[p])]
                names += [pre + str(j) for j, n in enumerate(g.n) if n]
            agents = dict.fromkeys(names + list(self._other))
        state = self._state
        return {a: st for a in agents if (st := state(a)) is not None}

    def add(self, rows: Sequence[tuple[str, str, str]]) -> None:
        other, numbered = self._other, self._numbered
        i = self._rows
        for agent, event, scope in rows:
            i += 1
            key = (scope, event)
            st = other.get(agent)
            split = None if st is not None else _split(agent)
            if split is not None:
                pre, j = split
                g = numbered.get(pre)
                if g is None:
                    g = numbered[pre] = _Numbered()
                k = self._kind_of.setdefault(key, len(self._kinds))
                if k == len(self._kinds):
                    self._kinds.append(key)
                r1 = g.r1
                if j >= g.top:  # a new agent
                    g.top = j + 1
                    if r1 and j == r1[-1] and g.rkind[-1] == k and i == g.rrow[-1] + j - g.r0[-1]:
                        r1[-1] = j + 1  # the next agent of the run, in the next row
                    else:
                        g.r0.append(j), r1.append(j + 1), g.rrow.append(i), g.rkind.append(k)
                    continue
                n = g.n[j] if j < len(g.n) else 0
                if not n and (p := g.run_of(j)) >= 0:  # charged once, in a run
                    n, last, kk = 1, g.rrow[p] + j - g.r0[p], g.rkind[p]
                    if p == len(r1) - 1 and g.r0[p] == j:  # alone in the last run: drop it
                        g.r0.pop(), r1.pop(), g.rrow.pop(), g.rkind.pop()
                elif n:
                    last, kk = g.last[j], g.kind[j]
                else:
                    last, kk = 0, k
                if kk == k and g.grow(j):
                    g.n[j], g.last[j], g.kind[j] = n + 1, i, k
                    continue
                st = other[agent] = AgentState(n, last, {self._kinds[kk]: n} if n else {})
                if j < len(g.n):
                    g.n[j] = 0
            elif st is None:
                st = other[agent] = AgentState()
            st.n += 1
            st.last_id = i
            ev = st.events
            ev[key] = ev.get(key, 0) + 1
        self._rows = i

    def close(self) -> None:
        """Drop the counts (idempotent)."""
        with self._lock:
            self._closed = True
            self._other, self._numbered = {}, {}

    def __repr__(self) -> str:
        return f"TallyStore(agents={len(self.live_states())}, charges={self._rows})"
