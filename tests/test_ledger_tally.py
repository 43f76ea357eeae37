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
