"""The ledger's store interface: a third store, written here, is enough to run a ``Ledger``.

``DictStore`` keeps the records in Python dicts and lists and knows nothing of budgets, chains
or MACs. Over it, ``Ledger.over(store)`` makes the same budget decisions as the SQLite ledger,
keeps the same per-agent state, verifies its whole chain, refuses a state edited apart from its
chain, replays a resumed run without charging twice, and rolls a refused batch back. So every
rule lives above the interface, and ``TallyLedger`` is a ledger over a count store that
overrides none of ``Ledger``'s API.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager, nullcontext

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
from ldp_audit.accountant import ledger_format as LF
from ldp_audit.accountant.events import event_to_json
from ldp_audit.accountant.ledger_sqlite import SqliteStore
from ldp_audit.accountant.ledger_store import (
    CountStore,
    HeadRecord,
    LedgerStore,
    RowStore,
    WriteHead,
)
from ldp_audit.accountant.ledger_tally import TallyStore
from ldp_audit.errors import BudgetExceeded, InvalidParameterError, LedgerError
from tests.ledger_checksums import agent_chk, state_chk


class DictStore(RowStore):
    """Records in dicts; a write copies them first and puts the copy back on an exception."""

    path = "dict-store"

    def __init__(self) -> None:
        self.readonly = False
        self._lock = threading.RLock()
        self._data: dict = {"meta": {}, "head": None, "rows": {}, "agents": {}, "counts": {}}
        self.version = 0  # bumped by every change: the change token
        self.writes = 0

    @property
    def durable(self) -> bool:
        return False

    def errors(self, what: str):  # noqa: ANN201
        return nullcontext()

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._lock:
            yield None

    @contextmanager
    def write(self) -> Iterator[DictStore]:
        with self._lock:
            saved = copy.deepcopy(self._data), self.version
            try:
                yield self
            except BaseException:
                self._data, self.version = saved
                raise
            self.writes += 1

    def _changed(self) -> None:
        self.version += 1

    def meta(self) -> dict[str, str]:
        return dict(self._data["meta"])

    def put_meta(self, key: str, value: str) -> None:
        self._data["meta"][key] = value
        self._changed()

    def empty(self) -> bool:
        return not self._data["meta"]

    def initialise(self, meta: dict[str, str], head: HeadRecord) -> None:
        with self.write():
            self._data["meta"] = dict(meta)
            self._data["head"] = head
            self._changed()

    def check_structure(self) -> None:
        pass

    def open_for_writing(self) -> None:
        pass

    def check_storage(self, *, full: bool) -> None:
        pass

    def head(self) -> HeadRecord | None:
        return self._data["head"]

    def write_head(self) -> WriteHead | None:
        rows = self._data["rows"]
        top = max(rows, default=0)
        return WriteHead(self.version, self._data["head"], top, rows[top][7] if top else None)

    def committed_token(self, token: Hashable | None) -> Hashable | None:
        return self.version

    def put_head(self, rows: int, hash: bytes, mac: bytes) -> None:  # noqa: A002
        self._data["head"] = self._data["head"]._replace(rows=rows, hash=hash, mac=mac)
        self._changed()

    def put_seal(self, meta_digest: bytes, mac: bytes) -> None:
        self._data["head"] = self._data["head"]._replace(meta_digest=meta_digest, mac=mac)
        self._changed()

    def last_row_id(self) -> int:
        return max(self._data["rows"], default=0)

    def row_hash(self, i: int) -> bytes | None:
        row = self._data["rows"].get(i)
        return None if row is None else row[7]

    def rows(self, first: int = 1, last: int | None = None, agent: str | None = None):  # noqa: ANN201
        rows = self._data["rows"]
        return [
            rows[i]
            for i in sorted(rows)
            if i >= first and (last is None or i <= last) and (agent is None or rows[i][1] == agent)
        ]

    def put_charges(
        self, charges: Sequence[tuple], agents: Sequence[tuple], states: Sequence[tuple]
    ) -> None:
        for row in charges:
            assert row[0] not in self._data["rows"]
            self._data["rows"][row[0]] = tuple(row)
        for rec in agents:
            self._data["agents"][rec[0]] = tuple(rec)
        for rec in states:
            self._data["counts"][rec[:3]] = tuple(rec)
        self._changed()

    def state_records(self, agents: Sequence[str] | None) -> tuple[list[tuple], list[tuple]]:
        rows, recs = self._data["rows"], self._data["agents"]
        wanted = set(recs) if agents is None else set(agents)
        out = []
        for a in wanted & set(recs):
            row = rows.get(recs[a][2])
            out.append((*recs[a], *((None,) * 3 if row is None else (row[1], row[6], row[7]))))
        return out, [c for k, c in self._data["counts"].items() if k[0] in wanted]

    def record_totals(self) -> list[tuple[str, int, int]]:
        return [
            (name, len(recs), sum(r[1 if name == "agents" else 3] for r in recs.values()))
            for name, recs in (("agents", self._data["agents"]), ("counts", self._data["counts"]))
        ]

    def close(self) -> None:
        pass

    # -- for the tests: an edit made outside the ledger (it changes the token, as any other
    #    writer's commit changes SQLite's data_version)
    def tamper(self, table: str, key, value) -> None:  # noqa: ANN001
        self._data[table][key] = value
        self._changed()


EVENTS = [PureDpEvent(0.25), LaplaceEvent(0.5), PureDpEvent(0.125), GaussianEvent(2.0)]


@pytest.mark.parametrize(
    "budget",
    [Budget(epsilon=2.0), Budget(epsilon=3.0, delta=1e-5, method="rdp")],
    ids=["basic", "rdp"],
)
def test_a_third_store_runs_the_same_ledger(budget):
    rng = np.random.default_rng(7)
    events = EVENTS if budget.method != "basic" else EVENTS[:3]
    accs = {
        "dict": Accountant(Ledger.over(DictStore()), budget=budget),
        "sqlite": Accountant(Ledger(":memory:"), budget=budget),
        "tally": Accountant(TallyLedger(), budget=budget),
    }
    outcomes: dict[str, list[bool]] = {name: [] for name in accs}
    for step in range(40):
        k = int(rng.integers(1, 10))
        batch = [
            (f"a{int(rng.integers(0, 12))}", events[int(rng.integers(0, len(events)))])
            for _ in range(k)
        ]
        scope = "central" if step % 7 == 0 else "local"
        for name, acc in accs.items():
            try:
                acc.charge_many(batch, scope=scope)
                outcomes[name].append(True)
            except BudgetExceeded:
                outcomes[name].append(False)
    assert outcomes["dict"] == outcomes["sqlite"] == outcomes["tally"]
    assert 0 < sum(outcomes["dict"]) < len(outcomes["dict"])  # granted and refused both happened
    led = accs["dict"].ledger
    assert led.states() == accs["sqlite"].ledger.states() == accs["tally"].ledger.states()
    assert len(led) == len(accs["sqlite"].ledger) == sum(st.n for st in led.states().values())
    assert led.evidence and led.authenticated and not led.durable
    got = led.verify()
    assert got["ok"] and got["rows"] == len(led) and got["chain_head"] == led.chain_head()
    assert led.anchor()["rows"] == len(led)
    assert [r["agent"] for r in led.records()] == [
        r["agent"] for r in accs["sqlite"].ledger.records()
    ]
    assert led.store.writes >= sum(outcomes["dict"])  # every charge went through write()
    for acc in accs.values():
        acc.close()


def test_the_write_cache_works_over_any_store_and_is_dropped_on_a_foreign_change():
    store = DictStore()
    acc = Accountant(Ledger.over(store), budget=Budget(epsilon=1.0))
    acc.charge_many([("a", PureDpEvent(0.25)), ("b", PureDpEvent(0.25))])
    assert acc.ledger._writer.cache is not None and set(acc.ledger._writer.cache) == {"a", "b"}
    acc.charge("a", PureDpEvent(0.25))
    # someone lowers a's event count, checksum recomputed (no key needed for a CRC)
    ev = event_to_json(PureDpEvent(0.25))
    store.tamper(
        "counts", ("a", "local", ev), ("a", "local", ev, 1, state_chk("a", "local", ev, 1))
    )
    with pytest.raises(LF.LedgerIntegrityError, match="'a'"):
        acc.charge("a", PureDpEvent(0.25))  # the cache is not trusted: read, and refused
    with pytest.raises(LF.LedgerIntegrityError):
        acc.ledger.verify()


def test_a_state_edit_apart_from_its_chain_is_refused_by_the_mac():
    store = DictStore()
    acc = Accountant(Ledger.over(store), budget=Budget(epsilon=1.0))
    acc.charge_many([("a", PureDpEvent(0.5)), ("a", PureDpEvent(0.5))])
    with pytest.raises(BudgetExceeded):
        acc.charge("a", PureDpEvent(0.5))
    # a consistent-looking rewrite of a's state (counts, total, checksums) without the key
    ev = event_to_json(PureDpEvent(0.5))
    n, last, _, mac = 1, 1, None, store._data["agents"]["a"][4]
    store.tamper(
        "counts", ("a", "local", ev), ("a", "local", ev, 1, state_chk("a", "local", ev, 1))
    )
    store.tamper("agents", "a", ("a", n, last, agent_chk("a", n, last), mac))
    fresh = Ledger.over(store, verify=False)  # no cache: the first read checks the MAC
    with pytest.raises(LF.LedgerIntegrityError, match="MAC"):
        fresh.states(["a"])
    with pytest.raises(LF.LedgerIntegrityError, match="MAC"):
        Accountant(fresh).charge("a", PureDpEvent(0.1))


def test_a_refused_batch_leaves_the_store_unchanged():
    store = DictStore()
    acc = Accountant(Ledger.over(store), budget=1.0)
    acc.charge("a", PureDpEvent(0.75))
    before = copy.deepcopy(store._data)
    with pytest.raises(BudgetExceeded, match="'a'"):
        acc.charge_many([("b", PureDpEvent(0.5)), ("a", PureDpEvent(0.5))])
    assert store._data == before


def test_resume_replays_over_any_store():
    store = DictStore()
    batches = [[("a", PureDpEvent(0.25)), ("b", PureDpEvent(0.25))], [("a", PureDpEvent(0.25))]]
    acc = Accountant(Ledger.over(store), budget=1.0)
    acc.charge_many(batches[0])
    acc.charge_many(batches[1])
    rows = len(acc.ledger)
    again = Ledger.over(store)  # the store reopened (checked as a file is on open)
    assert again.begin_replay() == rows
    acc2 = Accountant(again)
    for b in batches:
        acc2.charge_many(b)  # replayed: nothing written
    assert len(again) == rows and again.replay_status() == {"rows": 3, "replayed": 3, "pending": 0}
    acc2.charge("b", PureDpEvent(0.25))  # past the earlier rows: written
    assert len(again) == rows + 1 and again.verify()["rows"] == rows + 1
    with pytest.raises(LedgerError, match="does not repeat"):
        again2 = Ledger.over(store)
        again2.begin_replay()
        Accountant(again2).charge("zz", PureDpEvent(0.25))


def test_the_interface_is_abstract_and_checked():
    class Partial(RowStore):  # forgets most of the interface
        path = "partial"

        def meta(self) -> dict[str, str]:
            return {}

    with pytest.raises(TypeError, match="abstract"):
        Partial()  # type: ignore[abstract]
    with pytest.raises(InvalidParameterError, match="LedgerStore"):
        Ledger.over("ledger.sqlite")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="verify"):
        Ledger.over(DictStore(), verify="yes")
    assert issubclass(SqliteStore, RowStore) and issubclass(TallyStore, CountStore)
    assert RowStore.keeps_rows and not CountStore.keeps_rows
    assert issubclass(RowStore, LedgerStore) and issubclass(CountStore, LedgerStore)


def test_tally_ledger_is_a_ledger_over_a_tally_store_overriding_nothing():
    """The old TallyLedger subclassed Ledger and overrode its API to refuse it; now it only
    picks its store (and its name): every method is Ledger's own."""
    own = {k for k, v in vars(TallyLedger).items() if callable(v)}
    assert own == {"__init__", "__repr__"}
    led = TallyLedger()
    assert isinstance(led.store, TallyStore) and isinstance(led, Ledger)
    assert Ledger.over(TallyStore()).evidence is False
    assert led.begin_replay() == 0  # nothing to replay is fine ...
    acc = Accountant(led, budget=1.0)
    acc.charge("a", PureDpEvent(0.5))
    with pytest.raises(LedgerError, match="no rows to replay"):
        led.begin_replay()  # ... but charges it cannot match are refused at once
    for call in (led.anchor, led.records, led.verify, led.chain_head):
        with pytest.raises(LedgerError, match="keeps running counts only"):
            call()


def test_sqlite_ledger_exposes_its_store():
    with Ledger(":memory:") as led:
        assert isinstance(led.store, SqliteStore) and led.store.keeps_rows
        assert led.store.connection.execute("SELECT 1").fetchone() == (1,)
