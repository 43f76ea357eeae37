"""The write path of a ledger over a row store: head check, writer's cache, sealing, appending.

One :class:`ChainWriter` per :class:`~ldp_audit.accountant.ledger.Ledger` over a
:class:`~ldp_audit.accountant.ledger_store.RowStore`; every method runs under the ledger's lock,
inside its write transaction. A charge is (docs/accountant.md, "The write path"):

1. :meth:`ChainWriter.check_head`: one read of the head, the last row and the store's change
   token; the head must match the last row and carry its MAC.
2. :meth:`ChainWriter.states`: the verified state of the batch's agents. The writer keeps the
   state of every agent it charged as its own last commit left it, and uses it only while the
   change token is the one that commit left (SQLite: no other connection committed, nothing
   else was written through this one); otherwise, and for agents it does not hold, they are
   read and verified again. So it is never less than the verified state in the store.
3. the ledger's budget check (the caller's);
4. :meth:`ChainWriter.append`: the batch sealed in one pass
   (:func:`~ldp_audit.accountant.ledger_chain.seal_rows`) and appended, then the head;
5. after the commit, :meth:`ChainWriter.fold`: the cache takes the committed state.

:meth:`Ledger.transaction <ldp_audit.accountant.ledger.Ledger.transaction>` is the ledger's
write transaction around all of it.

Resuming a run without charging twice (:class:`Replay`, :func:`before`): a resumed run reruns
from its seed and makes the same charges in the same order. From ``Ledger.begin_replay()`` on,
each charge is compared with the ledger's next earlier row (row 1 first): equal ``(agent, event,
scope)`` means it was charged before the interruption, and nothing is written; once every earlier
row has been matched, charges are written as usual. A budget check of a batch that straddles the
end sees the state before the batch (the replayed rows taken out), as the first attempt did.
Works over any store that keeps rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ldp_audit.accountant.keys import LedgerKey
from ldp_audit.accountant.ledger_chain import check_head_mac, seal_rows
from ldp_audit.accountant.ledger_format import (
    AgentState,
    genesis_hash,
    head_message,
    integrity_error,
)
from ldp_audit.accountant.ledger_store import HeadRecord, RowStore, WriteHead
from ldp_audit.errors import LedgerError

__all__ = ["ChainWriter", "Replay", "before"]


class ChainWriter:
    """The write path and the writer's cache of one ledger over ``store`` (see the module)."""

    def __init__(self, store: RowStore, path: str) -> None:
        self.store = store
        self.path = path
        self.key: LedgerKey | None = None  # set once the ledger has resolved its key
        self.ledger_id = ""
        #: The cache: the state of every agent charged here, as the last commit left it.
        self.cache: dict[str, AgentState] | None = None
        #: Whether the cache holds every agent of the ledger (it started at an empty ledger).
        self.complete = False
        #: The change token the last commit left (the cache is valid only while it holds).
        self.token: Any = None
        #: The most rows this writer saw or committed: a chain never shrinks under it.
        self.rows = 0
        #: ``(rows, head)`` appended in the open transaction: the high-water mark once it commits.
        self.pending: tuple[int, bytes] | None = None

    def check_head(self) -> WriteHead:
        """The head, matched against the last row and its MAC, with the change token."""
        wh = self.store.write_head()
        if wh is None:
            raise integrity_error(self.path, "the chain head is missing")
        rows, head = wh.head.rows, wh.head.hash
        top, h = wh.top_id, wh.top_hash
        if not top:
            top, h = 0, genesis_hash(self.ledger_id)
        if top != rows or h != head:
            raise integrity_error(
                self.path,
                f"the chain head ({rows} rows) does not match the last row ({top}); rows were "
                f"added or removed outside ldp-audit",
            )
        check_head_mac(self.key, self.ledger_id, self.path, wh.head)
        if rows < self.rows:  # an authentic older copy put in place while this writer ran
            raise integrity_error(
                self.path,
                f"the chain holds {rows} rows, but this writer saw {self.rows}: the ledger was "
                f"rolled back (replaced by an older copy) while it was open",
            )
        self.rows = rows
        return wh

    def states(
        self,
        agents: Sequence[str],
        wh: WriteHead,
        load: Callable[[list[str]], dict[str, AgentState]],
    ) -> tuple[dict[str, AgentState], dict[str, AgentState], bool]:
        """Verified state of ``agents`` (``load`` reads and verifies those not cached).

        Returns:
            ``(states of agents, the cache to fold the commit into, complete)``.
        """
        cache = self.cache
        if cache is not None and wh.token is not None and self.token == wh.token:
            # from the cache; those it lacks through ``load`` (unless it is complete: then an
            # absent agent was never charged)
            states: dict[str, AgentState] = {}
            missing = []
            for a in agents:
                st = cache.get(a)
                if st is not None:
                    states[a] = st
                elif not self.complete:
                    missing.append(a)
            if missing:
                states.update(load(missing))
            return states, cache, self.complete
        self.cache = None
        if wh.head.rows == 0:  # an empty ledger: no agent may hold state, then every agent is new
            (_, n_agents, _), (_, n_state, _) = self.store.record_totals()
            if n_agents or n_state:
                raise integrity_error(
                    self.path,
                    f"the chain holds no rows but {n_agents} agents and {n_state} event counts "
                    f"have running state",
                )
            return {}, {}, True
        return load(list(agents)), {}, False

    def append(
        self,
        rows: Sequence[tuple[str, str, str]],
        states: dict[str, AgentState],
        head: HeadRecord,
        *,
        run_id: str | None,
        when: float | None,
    ) -> tuple[list[tuple], list[tuple]]:
        """Seal ``(agent, event, scope)`` rows after ``head`` (:meth:`check_head`'s) and append
        them.

        ``states`` holds the verified state of every agent of ``rows`` (read in the same
        transaction); every row has time ``when`` (now when None). Only inside the ledger's
        transaction, which refuses a ledger without the key.

        Returns:
            The agent and event-count records written: the charged agents' state once the
            transaction commits.
        """
        key, store = self.key, self.store
        t = time.time() if when is None else float(when)
        charges, agent_rows, state_rows, i, last = seal_rows(
            rows, states, key, self.ledger_id, head.rows, head.hash, run_id=run_id, t=t
        )
        store.put_charges(charges, agent_rows, state_rows)
        store.put_head(
            i, last, key.mac(head_message(self.ledger_id, i, last, bytes(head.meta_digest)))
        )
        self.pending = (i, last)
        return agent_rows, state_rows

    def fold(
        self,
        cache: dict[str, AgentState],
        states: dict[str, AgentState],
        written: tuple[list[tuple], list[tuple]],
        complete: bool,
        token: Any,
        limit: int,
    ) -> None:
        """After a commit: the cache takes the committed state of the charged agents (dropped
        when it would hold more than ``limit`` agents, or the store gives no change token)."""
        if token is None:  # the store cannot tell whether anything else changed it
            self.cache = None
            return
        # the charged agents' state as seal_rows' records (now committed) left it; ``states``
        # (their state before) are updated in place
        agent_rows, state_rows = written
        get = states.get
        for a, n, last, _, _ in agent_rows:
            st = cache[a] = get(a) or AgentState()
            st.n, st.last_id = n, last
        for a, s, e, n, _ in state_rows:
            cache[a].events[(s, e)] = n
        if len(cache) > limit:
            self.cache = None
            return
        self.cache = cache
        self.complete = complete
        self.token = self.store.committed_token(token)


# ---- resume: a resumed run's charges replayed against the rows already in the ledger ------


class Replay:
    """The replay of ``rows`` earlier rows (state of one ``begin_replay``).

    Args:
        rows: the number of rows in the ledger when the replay began.
        read: ``(first, stop) -> [(agent, event, scope), ...]`` of rows ``first <= id < stop``.
        path: the ledger's name, for messages (a row that is not there is a
            ``LedgerIntegrityError`` naming it).
    """

    def __init__(
        self,
        rows: int,
        read: Callable[[int, int], list[tuple[str, str, str]]],
        path: str,
    ) -> None:
        self.rows = rows
        self.next = 1
        self.replayed = 0
        self._read = read
        self._path = path

    def status(self) -> dict[str, int]:
        """``{"rows", "replayed", "pending"}``."""
        return {"rows": self.rows, "replayed": self.replayed, "pending": self.rows - self.replayed}

    def match(self, rows: Sequence[tuple[str, str, str]]) -> int:
        """How many leading rows of the batch repeat the next earlier rows (changes nothing);
        those earlier rows are read in one go.

        Raises:
            LedgerError: a charge differs from the earlier row it replays.
        """
        k = min(len(rows), self.rows - self.next + 1)
        earlier = self._read(self.next, self.next + k) if k > 0 else []
        if len(earlier) < k:
            raise integrity_error(self._path, f"row {self.next + len(earlier)} is missing (resume)")
        for j, want in enumerate(earlier):
            got = (rows[j][0], rows[j][1], rows[j][2])
            if got != want:
                raise LedgerError(
                    f"ledger {self._path!r}: the resumed run does not repeat the charges of the "
                    f"run it resumes: row {self.next + j} charged {want!r}, the resumed run "
                    f"charges {got!r} (a different config, seed or code); nothing of this batch "
                    f"was charged. Start a new run instead of --resume"
                )
        return max(k, 0)


def before(
    states: dict[str, AgentState], replayed: Sequence[tuple[str, str, str]]
) -> dict[str, AgentState]:
    """``states`` with the ``replayed`` rows taken out (copies): what the first attempt's budget
    check saw."""
    out = {a: st.copy() for a, st in states.items()}
    for a, e, sc in replayed:
        st = out[a]
        st.n -= 1
        st.events[(sc, e)] -= 1
        if not st.events[(sc, e)]:
            del st.events[(sc, e)]
        if not st.n:
            del out[a]
    return out
