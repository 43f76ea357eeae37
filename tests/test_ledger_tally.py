"""``TallyLedger``: per-agent counts for runs whose ledger nobody reads; never evidence.

Its budget decisions must be exactly a ledger's (same states, same refusals, all or nothing),
and everything that would make it look like a ledger of record must refuse loudly.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ldp_audit.accountant import (
    Accountant,
    Budget,
    GaussianEvent,
    LaplaceEvent,
    Ledger,
    PureDpEvent,
    TallyLedger,
)
from ldp_audit.accountant.events import event_to_json
from ldp_audit.errors import BudgetExceeded, InvalidParameterError, LedgerError

EVENTS = [PureDpEvent(0.25), LaplaceEvent(0.5), PureDpEvent(0.125), GaussianEvent(2.0)]


@pytest.mark.parametrize(
    "budget",
    [Budget(epsilon=2.0), Budget(epsilon=3.0, delta=1e-5, method="rdp"), None],
    ids=["basic", "rdp", "none"],
)
def test_same_decisions_and_state_as_a_ledger(budget):
    rng = np.random.default_rng(3)
    events = EVENTS if budget is None or budget.method != "basic" else EVENTS[:3]
    tally = Accountant(ledger=TallyLedger(), budget=budget)
    ledger = Accountant(Ledger(":memory:"), budget=budget)  # same code as a file's, no fsyncs
    outcomes = {"tally": [], "ledger": []}
    for step in range(50):
        k = int(rng.integers(1, 12))
        batch = [
            (f"a{int(rng.integers(0, 15))}", events[int(rng.integers(0, len(events)))])
            for _ in range(k)
        ]
        scope = "central" if step % 7 == 0 else "local"
        for name, acc in (("tally", tally), ("ledger", ledger)):
            try:
                acc.charge_many(batch, scope=scope)
                outcomes[name].append(True)
            except BudgetExceeded:
                outcomes[name].append(False)
    assert outcomes["tally"] == outcomes["ledger"]
    if budget is not None:
        assert 0 < sum(outcomes["tally"]) < len(outcomes["tally"])  # both kinds happened
    assert tally.ledger.states() == ledger.ledger.states()
    assert len(tally.ledger) == len(ledger.ledger)
    for kw in ({"method": "basic"}, {"method": "rdp", "delta": 1e-5}):
        assert tally.spent_all(**kw) == ledger.spent_all(**kw)
    for scope in ("local", "central"):  # (max_agent may differ between tied agents)
        a = tally.summary(delta=1e-5, method="rdp")[scope]
        b = ledger.summary(delta=1e-5, method="rdp")[scope]
        assert (a["agents"], a["max_epsilon"], a["methods"]) == (
            b["agents"],
            b["max_epsilon"],
            b["methods"],
        )
    assert tally.agents("central") == ledger.agents("central")
    ledger.close()


def test_refused_batch_leaves_the_tally_unchanged():
    acc = Accountant(ledger=TallyLedger(), budget=1.0)
    acc.charge_many([("a", PureDpEvent(0.5)), ("b", PureDpEvent(1.0))])
    before = (len(acc.ledger), acc.ledger.states())
    with pytest.raises(BudgetExceeded, match="'b'"):
        acc.charge_many([("a", PureDpEvent(0.5)), ("c", PureDpEvent(0.1)), ("b", PureDpEvent(0.1))])
    assert (len(acc.ledger), acc.ledger.states()) == before
    acc.charge("a", PureDpEvent(0.5))
    with pytest.raises(BudgetExceeded):
        acc.charge("a", PureDpEvent(0.01))
    assert acc.spent("a", method="basic") == pytest.approx(1.0)


def test_it_is_never_evidence():
    led = TallyLedger()
    acc = Accountant(ledger=led, budget=1.0)
    acc.charge("a", PureDpEvent(0.5))
    assert not led.durable and not led.evidence and not acc.durable
    for call in (led.chain_head, led.records, led.verify):
        with pytest.raises(LedgerError, match="no rows|no hash chain|nothing on disk"):
            call()
    with pytest.raises(LedgerError, match="TallyLedger"):
        led.transaction()
    assert "tally" in led.meta()["schema_version"]
    with pytest.raises(InvalidParameterError, match="reserved"):
        led.set_meta("schema_version", "2")
    with pytest.raises(LedgerError, match="enforces budget"):
        Accountant(ledger=led, budget=2.0)  # the recorded budget is kept, like a ledger's
    with Ledger(":memory:") as mem:
        assert mem.evidence and not mem.durable
    led.close()
    with pytest.raises(LedgerError, match="closed"):
        acc.charge("a", PureDpEvent(0.1))


def test_file_ledger_is_durable_evidence(tmp_path):
    acc = Accountant(tmp_path / "l.sqlite")
    assert acc.durable and acc.ledger.durable and acc.ledger.evidence
    acc.close()


def test_states_are_copies():
    led = TallyLedger()
    acc = Accountant(ledger=led, budget=1.0)
    acc.charge("a", PureDpEvent(0.5))
    st = led.states(["a"])["a"]
    st.n = 0
    st.events.clear()
    assert acc.spent("a", method="basic") == pytest.approx(0.5)
    assert led.states(["a", "zz"]) == {"a": led.states()["a"]}


def test_threads_never_overspend():
    acc = Accountant(ledger=TallyLedger(), budget=1.0)
    granted = []

    def work() -> None:
        for _ in range(50):
            try:
                acc.charge_many([("shared", PureDpEvent(0.01))])
                granted.append(1)
            except BudgetExceeded:
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 100  # exactly 100 x 0.01 = 1.0 of the 200 attempts
    assert acc.spent("shared", method="basic") == pytest.approx(1.0)


def _fused_rows(rng: np.random.Generator, n_rows: int) -> list[tuple[str, str, str]]:
    """Rows as the engines name agents (``config:trial/number``, numbered from 0, several
    rounds each) mixed with what the compact slots must leave to the dict: names without a
    number, leading zeros, numbers far past the slots, agents charged a second kind of event."""
    events = [event_to_json(e) for e in EVENTS]
    nxt = [0] * 6
    rows: list[tuple[str, str, str]] = []
    while len(rows) < n_rows:
        t = int(rng.integers(0, 6))
        reps = int(rng.integers(1, 4))
        for _ in range(int(rng.integers(1, 20))):  # a block of new agents, all their rounds
            rows += [(f"{t % 3}:{t}/{nxt[t]}", events[t % 2], "local")] * reps
            nxt[t] += 1
        pick = int(rng.integers(0, 6))
        odd = [
            f"{t % 3}:{t}/{int(rng.integers(0, nxt[t]))}",  # an earlier agent, maybe new kind
            f"{t % 3}:{t}/0{int(rng.integers(0, 9))}",  # leading zero: not the number
            f"{t % 3}:{t}/{10**9 + int(rng.integers(0, 3))}",  # far past the slots
            f"agent-{int(rng.integers(0, 5))}",
            f"{int(rng.integers(0, 40))}",  # a bare number
            f"{t % 3}:{t}/{nxt[t] + 5}",  # a gap of empty slots
        ][pick]
        rows.append((odd, events[int(rng.integers(0, 4))], ("local", "central")[pick % 2]))
    return rows


@pytest.mark.parametrize("seed", [0, 1])
def test_compact_slots_keep_a_ledgers_exact_state(seed):
    """The compact store (numbered agents in typed arrays) answers every reader as a ledger of
    record does: states, row count, spend, summaries, agent lists, budget refusals."""
    rows = _fused_rows(np.random.default_rng(seed), 1500)
    tally, ledger = TallyLedger(), Ledger(":memory:")
    for lo in range(0, len(rows), 97):
        assert tally.charge_rows(rows[lo : lo + 97]) == ledger.charge_rows(rows[lo : lo + 97])
    assert tally.states() == ledger.states()
    assert len(tally) == len(ledger) == len(rows)
    names = sorted({r[0] for r in rows}) + ["never", "0:0/999999", "0:0/00"]
    assert tally.states(names) == ledger.states(names)
    a, b = Accountant(ledger=tally), Accountant(ledger)
    for kw in ({"method": "basic"}, {"method": "rdp", "delta": 1e-5}):
        assert a.spent_all(**kw) == b.spent_all(**kw)
    for scope in ("local", "central"):
        assert a.agents(scope) == b.agents(scope)
        sa, sb = (acc.summary(delta=1e-5, method="rdp")[scope] for acc in (a, b))
        assert (sa["agents"], sa["max_epsilon"]) == (sb["agents"], sb["max_epsilon"])
    # the same budget verdicts on one more batch over agents in slots, in the dict, new ones
    top = a.summary(delta=1e-5, method="rdp")["local"]["max_epsilon"]
    said = []
    for led in (tally, ledger):
        acc = Accountant(ledger=led, budget=Budget(epsilon=top + 0.05, delta=1e-5, method="rdp"))
        with pytest.raises(BudgetExceeded) as e:
            acc.charge_many([(n, PureDpEvent(1.0)) for n in names])
        said.append(str(e.value))
        acc.charge_many([(f"0:0/{10**6 + i}", PureDpEvent(0.3)) for i in range(3)])
    assert said[0] == said[1]
    assert tally.states() == ledger.states()
    ledger.close()


@pytest.mark.parametrize(
    ("order", "per_charge"),
    [("fused", 1), ("interleaved", 32), ("rounds", 24)],
)
def test_memory_per_charge_is_bounded(order, per_charge):
    """The tally of an engine's agents grows by at most ``per_charge`` bytes a charge (the dict
    of AgentStates it replaced: about 400): ~0 for the fused engine's blocks of new agents (one
    run per block), at most a run (28 bytes) per agent when the trials' rows interleave, a slot
    (SLOT_BYTES = 20, plus the arrays' over-allocation) per agent charged several rounds."""
    import tracemalloc

    from ldp_audit.accountant.ledger_tally import SLOT_BYTES, TallyStore

    ev = event_to_json(PureDpEvent(0.5))

    def grown(n: int) -> int:
        if order == "fused":  # blocks of 64 new agents per trial, rows in order
            rows = [(f"3:{t}/{a}", ev, "local") for lo in range(0, n // 8, 64) for t in range(8)
                    for a in range(lo, lo + 64)]  # fmt: skip
        elif order == "interleaved":  # one agent of each trial in turn
            rows = [(f"3:{t}/{a}", ev, "local") for a in range(n // 8) for t in range(8)]
        else:  # two rounds each, the second after the whole block
            rows = [(f"3:{t}/{a}", ev, "local") for t in range(8) for _ in range(2)
                    for a in range(n // 16)]  # fmt: skip
        store = TallyStore()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            with store.write():
                for lo in range(0, len(rows), 500):
                    store.add(rows[lo : lo + 500])
            return tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()

    small, large = grown(20_000), grown(80_000)
    assert SLOT_BYTES == 20
    assert (large - small) / 60_000 <= per_charge  # bytes per extra charge
