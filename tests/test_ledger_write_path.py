"""The fast write path of ``Ledger.charge_rows`` / ``Accountant.charge_many``.

A writer keeps the verified state of the agents it charged between its own commits (the
writer's cache) and writes each batch with one query for the head, one pass of hashing and
multi-row inserts. These tests check that nothing it skips could change a number: a batch equals
the same charges made one by one (state, chain, ``verify()``), a refused batch writes nothing,
and every change made by anyone else (another connection, another process, an edit through the
same connection, a rolled-back transaction) makes the writer read and verify the file again.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from ldp_audit.accountant import Accountant, Budget, LaplaceEvent, Ledger, PureDpEvent
from ldp_audit.accountant import ledger as L
from ldp_audit.accountant import ledger_format as LF
from ldp_audit.accountant import ledger_sqlite as LS
from ldp_audit.accountant.events import event_to_json
from ldp_audit.errors import BudgetExceeded
from tests.ledger_checksums import agent_chk, state_chk

EVENTS = [PureDpEvent(0.25), LaplaceEvent(0.5), PureDpEvent(0.125)]


def _reference_chain(led: Ledger) -> str:
    """The chain head recomputed from the rows with the reference ``row_bytes``."""
    prev = LF.genesis_hash(led.meta()["ledger_id"])
    for row in led.store.connection.execute(
        f"SELECT id, agent, event, scope, time, run_id, agent_n FROM {LS.CHARGES_TABLE} ORDER BY id"
    ):
        prev = LF.row_hash(prev, LF.row_bytes(*row))
    return prev.hex()


def _model_states(charges: list[tuple[str, str, str]]) -> dict[str, LF.AgentState]:
    out: dict[str, LF.AgentState] = {}
    for i, (agent, event, scope) in enumerate(charges, start=1):
        st = out.setdefault(agent, LF.AgentState())
        st.n += 1
        st.last_id = i
        st.events[(scope, event)] = st.events.get((scope, event), 0) + 1
    return out


def _disk_states(path) -> dict[str, LF.AgentState]:
    with Ledger(path, readonly=True) as fresh:  # another connection: nothing cached
        return fresh.states()


def test_charge_many_equals_the_same_charges_one_by_one(tmp_path):
    rng = np.random.default_rng(11)
    batches = []
    for _ in range(30):
        k = int(rng.integers(1, 40))
        batches.append(
            [(f"a{int(rng.integers(0, 25))}", EVENTS[int(rng.integers(0, 3))]) for _ in range(k)]
        )
    many = Accountant(tmp_path / "many.sqlite", budget=Budget(epsilon=1e6))
    single = Accountant(tmp_path / "single.sqlite", budget=Budget(epsilon=1e6))
    for batch in batches:
        many.charge_many(batch)
        for agent, ev in batch:
            single.charge(agent, ev)
    flat = [(a, event_to_json(e), "local") for batch in batches for a, e in batch]
    want = _model_states(flat)
    for acc in (many, single):
        assert acc.ledger.states() == want
        assert _disk_states(acc.ledger.path) == want
        assert acc.ledger.chain_head() == _reference_chain(acc.ledger)
        assert acc.ledger.verify()["rows"] == len(flat)
        for agent in want:
            assert acc.spent(agent, method="basic") == pytest.approx(
                sum(e.epsilon for b in batches for a, e in b if a == agent)
            )
    strip = [(r["agent"], r["event"], r["scope"]) for r in many.ledger.records()]
    assert strip == [(r["agent"], r["event"], r["scope"]) for r in single.ledger.records()]
    many.close()
    single.close()


def test_random_batches_keep_disk_cache_and_model_equal(tmp_path):
    """Fast path (each agent once), general path (repeats, several events, both scopes)."""
    rng = np.random.default_rng(5)
    path = tmp_path / "l.sqlite"
    led = Ledger(path)
    flat: list[tuple[str, str, str]] = []
    for step in range(60):
        k = int(rng.integers(1, 30))
        if step % 3 == 0:  # every agent once: the one-pass path
            agents = rng.choice(40, size=min(k, 40), replace=False)
            rows = [(f"x{int(a)}", event_to_json(EVENTS[step % 3]), "local") for a in agents]
        else:
            rows = [
                (
                    f"x{int(rng.integers(0, 40))}",
                    event_to_json(EVENTS[int(rng.integers(0, 3))]),
                    ("local", "central")[int(rng.integers(0, 2))],
                )
                for _ in range(k)
            ]
        led.charge_rows(rows)
        flat.extend(rows)
        if step % 10 == 9:
            assert _disk_states(path) == _model_states(flat)
    want = _model_states(flat)
    assert _disk_states(path) == want
    assert led._writer.cache == want  # the writer's cache is exactly the committed state
    assert led.verify()["rows"] == len(flat)
    assert led.chain_head() == _reference_chain(led)
    led.close()


def test_refused_batch_writes_nothing_and_the_budget_holds_exactly(tmp_path):
    acc = Accountant(tmp_path / "l.sqlite", budget=Budget(epsilon=1.0))
    ev = PureDpEvent(0.25)
    acc.charge_many([(f"a{i}", ev) for i in range(10)])  # warm writer cache
    acc.charge_many([(f"a{i}", ev) for i in range(10)])
    led = acc.ledger
    before = (len(led), led.chain_head(), _disk_states(led.path))
    bad = [(f"a{i}", ev) for i in range(10)] + [("a3", PureDpEvent(0.6))]
    with pytest.raises(BudgetExceeded, match="a3"):
        acc.charge_many(bad)
    assert (len(led), led.chain_head(), _disk_states(led.path)) == before
    granted = 0
    for _ in range(5):
        try:
            acc.charge_many([(f"a{i}", ev) for i in range(10)])
            granted += 1
        except BudgetExceeded:
            pass
    assert granted == 2  # 4 x 0.25 = the budget, never more
    assert all(acc.spent(f"a{i}", method="basic") == pytest.approx(1.0) for i in range(10))
    assert led.verify()["rows"] == 40
    acc.close()


def test_two_connections_in_one_process_never_overspend(tmp_path):
    """Each writer's cache is dropped when the other commits (SQLite's data_version)."""
    path = tmp_path / "l.sqlite"
    a = Accountant(path, budget=Budget(epsilon=1.0))
    b = Accountant(Ledger(path))
    granted = 0
    for k in range(12):
        acc = (a, b)[k % 2]
        try:
            acc.charge_many([("shared", PureDpEvent(0.125)), (f"own{k}", PureDpEvent(0.5))])
            granted += 1
        except BudgetExceeded:
            pass
    assert granted == 8  # 8 x 0.125 = 1.0
    for acc in (a, b):
        assert acc.spent("shared", method="basic") == pytest.approx(1.0)
        with pytest.raises(BudgetExceeded):
            acc.charge("shared", PureDpEvent(0.125))
    assert a.ledger.verify()["rows"] == 16
    a.close()
    b.close()


def _lower_a0(con: sqlite3.Connection, led: Ledger) -> None:
    """A consistent edit: a0's state and total lowered to 1, checksums valid."""
    last = con.execute("SELECT last_id FROM ldp_audit_agents WHERE agent='a0'").fetchone()[0]
    ev = con.execute("SELECT event FROM ldp_audit_state WHERE agent='a0'").fetchone()[0]
    con.execute(
        "UPDATE ldp_audit_state SET n = 1, chk = ? WHERE agent = 'a0'",
        (state_chk("a0", "local", ev, 1),),
    )
    con.execute(
        "UPDATE ldp_audit_agents SET n = 1, chk = ? WHERE agent = 'a0'",
        (agent_chk("a0", 1, last),),
    )


@pytest.mark.parametrize("via", ["another connection", "the ledger's own connection"])
def test_edit_under_a_warm_writer_is_caught(tmp_path, via):
    path = tmp_path / "l.sqlite"
    acc = Accountant(path, budget=Budget(epsilon=1.0))
    for _ in range(3):
        acc.charge_many([("a0", PureDpEvent(0.25)), ("a1", PureDpEvent(0.25))])
    assert acc.ledger._writer.cache is not None and "a0" in acc.ledger._writer.cache  # warm
    if via == "another connection":
        con = sqlite3.connect(path)
        _lower_a0(con, acc.ledger)
        con.commit()
        con.close()
    else:
        with acc.ledger.transaction() as con:
            _lower_a0(con, acc.ledger)
    with pytest.raises(LF.LedgerIntegrityError, match="a0"):
        acc.charge("a0", PureDpEvent(0.25))  # never "3 charges less": it re-reads and verifies
    with pytest.raises(LF.LedgerIntegrityError, match="a0"):
        acc.charge_many([("a1", PureDpEvent(0.25)), ("a0", PureDpEvent(0.25))])
    acc.close()


def test_rows_removed_by_another_connection_are_caught(tmp_path):
    path = tmp_path / "l.sqlite"
    acc = Accountant(path)
    acc.charge_many([("a0", PureDpEvent(0.25))] * 3)
    con = sqlite3.connect(path)
    con.execute("DELETE FROM ldp_audit_charges WHERE id = 3")
    con.commit()
    con.close()
    with pytest.raises(LF.LedgerIntegrityError, match="chain head"):
        acc.charge("a0", PureDpEvent(0.25))
    acc.close()


def test_state_without_rows_is_not_a_new_ledger(tmp_path):
    """An empty chain with running state (written by someone else) is refused, not ignored."""
    path = tmp_path / "l.sqlite"
    acc = Accountant(path)
    con = sqlite3.connect(path)
    ev = event_to_json(PureDpEvent(1.0))
    con.execute(
        "INSERT INTO ldp_audit_state VALUES ('z', 'local', ?, 5, ?)",
        (ev, state_chk("z", "local", ev, 5)),
    )
    con.commit()
    con.close()
    with pytest.raises(LF.LedgerIntegrityError, match="no rows"):
        acc.charge("a", PureDpEvent(0.25))
    acc.close()


def test_rolled_back_caller_transaction_leaves_no_trace_in_the_writer(tmp_path):
    path = tmp_path / "l.sqlite"
    acc = Accountant(path, budget=Budget(epsilon=1.0))
    acc.charge_many([("a", PureDpEvent(0.5))])
    led = acc.ledger
    with pytest.raises(RuntimeError), led.transaction():
        led.charge_rows([("a", event_to_json(PureDpEvent(0.5)), "local")] * 3)
        raise RuntimeError("the caller gives up: everything rolls back")
    assert len(led) == 1
    acc.charge("a", PureDpEvent(0.5))  # exactly the budget
    with pytest.raises(BudgetExceeded):
        acc.charge("a", PureDpEvent(0.01))
    assert _disk_states(path) == {
        "a": LF.AgentState(2, 2, {("local", event_to_json(PureDpEvent(0.5))): 2})
    }
    acc.close()


def test_reopened_ledger_reads_its_agents_once_then_keeps_them(tmp_path):
    path = tmp_path / "l.sqlite"
    with Accountant(path, budget=Budget(epsilon=1.0)) as acc:
        acc.charge_many([(f"a{i}", PureDpEvent(0.5)) for i in range(5)])
    led = Ledger(path)
    acc = Accountant(led)
    assert led._writer.cache is None
    acc.charge_many([(f"a{i}", PureDpEvent(0.25)) for i in range(3)] + [("new", PureDpEvent(1.0))])
    assert not led._writer.complete and set(led._writer.cache) == {"a0", "a1", "a2", "new"}
    with pytest.raises(BudgetExceeded, match="a4"):  # not cached: read from the file
        acc.charge_many([("a0", PureDpEvent(0.25)), ("a4", PureDpEvent(0.75))])
    with pytest.raises(BudgetExceeded, match="a0"):  # cached
        acc.charge_many([("a0", PureDpEvent(0.5))])
    assert led.verify()["rows"] == 9
    acc.close()


def test_cache_is_dropped_above_its_size_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(L, "WRITE_CACHE_AGENTS", 8)
    acc = Accountant(tmp_path / "l.sqlite", budget=Budget(epsilon=0.5))
    acc.charge_many([(f"a{i}", PureDpEvent(0.25)) for i in range(6)])
    assert acc.ledger._writer.cache is not None
    acc.charge_many([(f"b{i}", PureDpEvent(0.25)) for i in range(6)])
    assert acc.ledger._writer.cache is None
    acc.charge_many([(f"a{i}", PureDpEvent(0.25)) for i in range(6)])
    with pytest.raises(BudgetExceeded):
        acc.charge("a5", PureDpEvent(0.25))
    assert acc.ledger.verify()["rows"] == 18
    acc.close()
