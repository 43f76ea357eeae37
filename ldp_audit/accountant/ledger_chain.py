"""The ledger's chain and MACs: sealing a batch of charges, and checking what a store returns.

Pure functions over records (no I/O), used by :class:`~ldp_audit.accountant.ledger.Ledger`
whatever its store: :func:`seal_rows` turns a batch of charges into the chained rows, agent
records and event-count records to append (one pass: hash, checksum and MAC per row);
:func:`states_from_records` rebuilds verified per-agent
state from stored records (checksums, totals, the chained row each agent record summarises,
and its MAC); :func:`check_head_mac` checks the head's MAC.
Every failure is a :class:`~ldp_audit.accountant.ledger_format.LedgerIntegrityError` naming
the ledger (``path``).
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from ldp_audit.accountant.keys import LedgerKey
from ldp_audit.accountant.ledger_format import (
    APPLICATION,
    SCHEMA_VERSION,
    AgentState,
    agent_message,
    genesis_hash,
    head_message,
    integrity_error,
    metadata_digest,
    row_bytes,
    row_hash,
)
from ldp_audit.accountant.ledger_store import HeadRecord

__all__ = [
    "check_head_mac",
    "seal_rows",
    "states_from_records",
    "walk_chain",
    "genesis_records",
]


def genesis_records(key: LedgerKey) -> tuple[dict[str, str], HeadRecord]:
    """Metadata and sealed genesis head of a new ledger written under ``key``."""
    ledger_id = uuid.uuid4().hex
    meta = {
        "application": APPLICATION,
        "schema_version": str(SCHEMA_VERSION),
        "created": str(time.time()),
        "ledger_id": ledger_id,
        "key_id": key.id,
    }
    genesis, digest = genesis_hash(ledger_id), metadata_digest(meta)
    return meta, HeadRecord(
        0, genesis, digest, key.mac(head_message(ledger_id, 0, genesis, digest))
    )


def check_head_mac(key: LedgerKey | None, ledger_id: str, path: str, head: HeadRecord) -> None:
    """The head (row count, last hash, metadata digest) must carry its MAC (no key: no check)."""
    if key is None:
        return
    want = key.mac(head_message(ledger_id, head.rows, head.hash, bytes(head.meta_digest)))
    if not isinstance(head.mac, bytes) or not hmac.compare_digest(want, head.mac):
        raise integrity_error(
            path,
            f"the chain head ({head.rows} rows) or the metadata (budget, ids) does not carry "
            f"the MAC of key id {key.id} (rewritten, truncated or edited)",
        )


def states_from_records(
    agent_rows: list[tuple],
    state_rows: list[tuple],
    rows: int | None,
    key: LedgerKey | None,
    ledger_id: str,
    path: str,
) -> dict[str, AgentState]:
    """Verified state of the agents of ``RowStore.state_records``' two lists.

    Three independent records must agree for every agent: its event counts (each with a
    checksum), its agent record (total and last row id, with a checksum) and its last chained
    row (agent and running count); with a key, the agent's MAC too. Event counts without an
    agent record are refused. ``rows``: the chain's row count when the lists hold every agent
    (the totals must add up to it), None for some agents.
    """
    crc = zlib.crc32
    out: dict[str, AgentState] = {}
    total = 0
    for agent, n, last_id, chk, _, row_agent, row_n, _ in agent_rows:
        if chk != crc(f"{len(agent)}:{agent}|{n}|{last_id}".encode()):  # the agent checksum
            raise integrity_error(path, f"the running state of agent {agent!r} fails its checksum")
        if row_agent != agent or row_n != n:
            raise integrity_error(
                path,
                f"agent {agent!r}: its running state ({n} charges, last row {last_id}) "
                f"disagrees with the chained row {last_id}",
            )
        out[agent] = AgentState(n, last_id)
        total += n
    if rows is not None and total != rows:
        raise integrity_error(
            path, f"the agents' running totals count {total} charges, the chain {rows}"
        )
    seen = 0
    get = out.get
    for agent, scope, event, n, chk in state_rows:
        # the event-count checksum (ledger_format)
        if chk != crc(f"{len(agent)}:{agent}|{scope}|{len(event)}:{event}|{n}".encode()):
            raise integrity_error(path, f"a state row of agent {agent!r} fails its checksum")
        st = get(agent)
        if st is None:
            raise integrity_error(path, f"agent {agent!r} has event counts but no running total")
        if n <= 0:
            raise integrity_error(path, f"a state row of agent {agent!r} has count {n}")
        st.events[(scope, event)] = n
        seen += n
    if rows is not None and seen != rows:
        raise integrity_error(
            path, f"the event counts sum to {seen} charges, the chain holds {rows}"
        )
    for agent, st in out.items():
        ev = st.events
        if not ev or (next(iter(ev.values())) if len(ev) == 1 else sum(ev.values())) != st.n:
            raise integrity_error(
                path, f"agent {agent!r}: its event counts disagree with its total"
            )
    if key is not None:  # each agent's MAC: of its state and its last chained row's hash
        for agent, _, _, _, mac, _, _, last_hash in agent_rows:
            st = out[agent]
            if not isinstance(last_hash, bytes):
                raise integrity_error(
                    path, f"agent {agent!r}: its last chained row {st.last_id} is missing"
                )
            want = key.mac(agent_message(ledger_id, agent, st.n, st.last_id, last_hash, st.events))
            if not isinstance(mac, bytes) or not hmac.compare_digest(want, mac):
                raise integrity_error(
                    path,
                    f"the running state of agent {agent!r} ({st.n} charges, last row "
                    f"{st.last_id}) does not carry the MAC of key id {key.id}: the per-agent "
                    f"state was edited apart from its chain",
                )
    return out


def seal_rows(
    rows: Sequence[tuple[str, str, str]],
    states: dict[str, AgentState],
    key: LedgerKey,
    ledger_id: str,
    n_rows: int,
    prev: bytes,
    *,
    run_id: str | None,
    t: float,
) -> tuple[list[tuple], list[tuple], list[tuple], int, bytes]:
    """Chain ``(agent, event, scope)`` rows after row ``n_rows`` (hash ``prev``).

    ``states`` holds the verified state of every agent of ``rows`` (absent: never charged); it
    is not changed; every row has time ``t``.

    Returns:
        ``(charge rows, agent records, event-count records, last row id, last hash)``: what to
        append; the agent and event-count records, sorted, are the charged agents' state once
        they are stored.
    """
    mac_of = key.mac
    lid = ledger_id
    r = "N" if run_id is None else f"{len(run_id)}:{run_id}"
    sha256 = hashlib.sha256
    crc = zlib.crc32
    get_state = states.get
    new_rows: list[tuple] = []
    append = new_rows.append
    i = n_rows
    agent_rows: list[tuple]
    state_rows: list[tuple]
    if len({a for a, _, _ in rows}) == len(rows):
        # Every agent once (a lock-step, a fresh round): one pass makes all three kinds of
        # record. The row bytes are f"{id}|{len(agent)}:{agent}" + tail + f"{agent_n}" (exactly
        # ``row_bytes``), the state checksum f"{len(agent)}:{agent}" + mid + f"{count}"
        # (ledger_format); tail and mid are shared by every row of an (event, scope).
        parts: dict[tuple[str, str], tuple[str, str]] = {}
        agent_rows = []
        state_rows = []
        add_agent, add_state = agent_rows.append, state_rows.append
        for agent, event, scope in rows:
            i += 1
            k2 = (scope, event)
            p = parts.get(k2)
            if p is None:
                p = parts[k2] = (
                    f"|{len(event)}:{event}|{scope}|{t!r}|{r}|",
                    f"|{scope}|{len(event)}:{event}|",
                )
            st = get_state(agent)
            if st is None:  # a new agent
                n = cnt = 1
                events = {k2: 1}
            else:
                n = st.n + 1
                cnt = st.events.get(k2, 0) + 1
                events = dict(st.events)
                events[k2] = cnt
            la = f"{len(agent)}:{agent}"
            prev = sha256(prev + f"{i}|{la}{p[0]}{n}".encode()).digest()
            append((i, agent, event, scope, t, run_id, n, prev))
            mac = mac_of(agent_message(lid, agent, n, i, prev, events))
            add_agent((agent, n, i, crc(f"{la}|{n}|{i}".encode()), mac))
            add_state((agent, scope, event, cnt, crc(f"{la}{p[1]}{cnt}".encode())))
    else:
        tails: dict[tuple[str, str], str] = {}
        # each touched agent: [running total, last row, its hash, its event counts]
        touched: dict[str, list[Any]] = {}
        counts: dict[tuple[str, str, str], int] = {}  # (agent, scope, event) -> new count
        get_touched = touched.get
        for agent, event, scope in rows:
            i += 1
            k2 = (scope, event)
            a = get_touched(agent)
            if a is None:  # the agent's first row in this batch
                st = get_state(agent)
                a = touched[agent] = (
                    [0, 0, b"", {}] if st is None else [st.n, 0, b"", dict(st.events)]
                )
            n = a[0] = a[0] + 1
            ev = a[3]
            counts[(agent, scope, event)] = ev[k2] = ev.get(k2, 0) + 1
            tail = tails.get(k2)
            if tail is None:
                tail = tails[k2] = f"|{len(event)}:{event}|{scope}|{t!r}|{r}|"
            prev = sha256(prev + f"{i}|{len(agent)}:{agent}{tail}{n}".encode()).digest()
            append((i, agent, event, scope, t, run_id, n, prev))
            a[1], a[2] = i, prev
        state_rows = [
            (a, s, e, n, crc(f"{len(a)}:{a}|{s}|{len(e)}:{e}|{n}".encode()))  # event-count chk
            for (a, s, e), n in counts.items()
        ]
        agent_rows = []
        for a, (n, j, h, ev) in touched.items():
            mac = mac_of(agent_message(lid, a, n, j, h, ev))
            agent_rows.append((a, n, j, crc(f"{len(a)}:{a}|{n}|{j}".encode()), mac))  # agent chk
    agent_rows.sort()
    state_rows.sort()
    return new_rows, agent_rows, state_rows, i, prev


def walk_chain(
    rows: Iterable[tuple], prev: bytes, path: str, want: bytes | None, first: int = 1
) -> tuple[int, bytes, dict[tuple[str, str, str], int], dict[str, list[int]], bool]:
    """Re-hash charge rows ``first, first + 1, ...`` (``rows`` in id order) from ``prev``, the
    hash before row ``first`` (the genesis hash for row 1).

    Returns:
        ``(last row id, last hash, {(agent, scope, event): count}, {agent: [count, last
        row id]}, whether some hash (or ``prev``) equals ``want``)``; the counts are of the
        walked rows.

    Raises:
        LedgerIntegrityError: a row is missing, does not match its hash, or (from row 1)
            carries a wrong running count of its agent.
    """
    found = want is not None and want == prev
    counts: dict[tuple[str, str, str], int] = {}
    per_agent: dict[str, list[int]] = {}
    expect = first
    for i, agent, event, scope, t, run_id, agent_n, h in rows:
        if i != expect:
            raise integrity_error(path, f"row {expect} is missing (next row is {i})")
        prev = row_hash(prev, row_bytes(i, agent, event, scope, t, run_id, agent_n))
        if prev != h:
            raise integrity_error(
                path, f"row {i} does not match its hash (edited, reordered or corrupt)"
            )
        pa = per_agent.setdefault(agent, [0, 0])
        pa[0] += 1
        pa[1] = i
        if first == 1 and agent_n != pa[0]:
            raise integrity_error(path, f"row {i}: agent {agent!r}'s running count is wrong")
        k3 = (agent, scope, event)
        counts[k3] = counts.get(k3, 0) + 1
        if want is not None and prev == want:
            found = True
        expect += 1
    return expect - 1, prev, counts, per_agent, found
