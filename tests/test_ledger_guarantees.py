"""The ledger's contracts: durable budget, typed inputs, read-only files, chain head, bounded
composition on long histories, no negative epsilon, no leaked warnings."""

from __future__ import annotations

import os
import warnings

import pytest

from ldp_audit.accountant import (
    Accountant,
    Budget,
    GaussianEvent,
    LaplaceEvent,
    Ledger,
    PoissonSampledEvent,
    PureDpEvent,
    compose,
    ledger_sqlite,
    pld,
    prv,
)
from ldp_audit.accountant import ledger_format as LF
from ldp_audit.errors import BudgetExceeded, InvalidParameterError, LedgerError

# ---- the durable budget is the ledger's ----------------------------------------------------


def test_reopening_with_another_budget_is_refused(tmp_path):
    path = tmp_path / "l.sqlite"
    with Accountant(path, budget=1.0) as acc:
        acc.charge("a", PureDpEvent(1.0))
    with pytest.raises(LedgerError, match="enforces budget.*'epsilon': 1.0.*would replace it"):
        Accountant(path, budget=100.0)
    with pytest.raises(LedgerError, match="would replace"):
        Accountant(path, budget=Budget(1.0, delta=1e-5, method="rdp"))
    with Accountant(path, budget=Budget(epsilon=1.0)) as acc:  # the same budget restated: fine
        with pytest.raises(BudgetExceeded):
            acc.charge("a", PureDpEvent(0.1))
    with Accountant(path) as acc:  # no budget given: the ledger's is enforced
        assert acc.budget == Budget(epsilon=1.0)
        with pytest.raises(BudgetExceeded):
            acc.charge("a", PureDpEvent(0.1))
    assert Ledger(path).meta()["budget"].count("1.0") == 1  # never rewritten


def test_central_budget_is_durable_too(tmp_path):
    path = tmp_path / "l.sqlite"
    Accountant(path, central_budget=2.0).close()
    with pytest.raises(LedgerError, match="central_budget"):
        Accountant(path, central_budget=3.0)
    assert Accountant(path).central_budget == Budget(epsilon=2.0)


@pytest.mark.parametrize("bad", ["1", True, b"1", [1.0], float("nan"), -1.0, 0])
def test_budget_types_are_checked_not_coerced(bad):
    with pytest.raises(InvalidParameterError, match="budget"):
        Accountant(budget=bad)
    with pytest.raises(InvalidParameterError, match="budget"):
        Accountant(central_budget=bad)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": "1"}, "budget epsilon must be a real number, got '1'"),
        ({"epsilon": True}, "budget epsilon must be a real number, got True"),
        ({"epsilon": 1.0, "delta": "0.1"}, "delta must be a real number"),
        ({"epsilon": 1.0, "delta": True, "method": "rdp"}, "delta must be a real number"),
    ],
)
def test_budget_fields_are_typed(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        Budget(**kwargs)


@pytest.mark.parametrize("bad", ["", "   ", 123, None, True, 1.5, b"ledger.sqlite", "l\x00.sqlite"])
def test_ledger_path_is_typed(bad):
    with pytest.raises(InvalidParameterError, match="path"):
        Ledger(bad)


def test_spent_delta_is_typed():
    acc = Accountant()
    acc.charge("a", PureDpEvent(1.0))
    for bad in ("0.1", True):
        with pytest.raises(InvalidParameterError, match="delta must be a real number"):
            acc.spent("a", delta=bad)


# ---- read-only ledgers -----------------------------------------------------------------------


def test_readonly_ledger_reads_and_refuses_writes_by_name(tmp_path):
    path = tmp_path / "l.sqlite"
    with Accountant(path, budget=2.0) as acc:
        acc.charge("a", PureDpEvent(0.5))
    before = path.read_bytes()
    with Ledger(path, readonly=True) as led:
        acc = Accountant(led)
        assert acc.spent("a", method="basic") == 0.5
        with pytest.raises(LF.LedgerReadOnlyError, match="read-only"):
            acc.charge("a", PureDpEvent(0.5))
        with pytest.raises(LF.LedgerReadOnlyError, match="read-only"):
            led.set_meta("note", "x")
    assert path.read_bytes() == before


def test_unwritable_file_opens_read_only(tmp_path, monkeypatch):
    """A file (or folder) without write permission reads fine and says "read-only" on a charge.

    (The test runs as any user, root included, by reporting the file as not writable.)
    """
    path = tmp_path / "l.sqlite"
    Accountant(path).charge("a", PureDpEvent(0.5))
    real = os.access
    monkeypatch.setattr(  # where the permission check is made
        ledger_sqlite.os,
        "access",
        lambda p, mode, **k: False if mode & os.W_OK else real(p, mode, **k),
    )
    with Ledger(path) as led:
        assert led.readonly
        assert Accountant(led).spent("a", method="basic") == 0.5
        with pytest.raises(LF.LedgerReadOnlyError, match="read-only") as info:
            Accountant(led).charge("a", PureDpEvent(0.1))
        assert "corrupt" not in str(info.value)


def test_missing_file_readonly_is_an_error(tmp_path):
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger(tmp_path / "none.sqlite", readonly=True)
    assert not (tmp_path / "none.sqlite").exists()


# ---- chain head ----------------------------------------------------------------------------


def test_chain_head_moves_with_every_charge_and_later_copies_extend_it(tmp_path):
    led = Ledger(tmp_path / "l.sqlite")
    h0 = led.chain_head()
    acc = Accountant(led)
    acc.charge_many([("a", PureDpEvent(0.1)), ("b", LaplaceEvent(0.2))])
    h1 = led.chain_head()
    acc.charge("a", PureDpEvent(0.1))
    h2 = led.chain_head()
    assert len({h0, h1, h2}) == 3 and len(h2) == 64
    for h in (h0, h1, h2):
        assert led.verify(expect_head=h)["extends"] is True
    other = Ledger(":memory:")
    other.append([("a", '{"epsilon":0.1,"type":"pure"}')])
    with pytest.raises(LF.LedgerIntegrityError, match="does not extend"):
        other.verify(expect_head=h1)  # same content, another ledger: another chain
    with pytest.raises(InvalidParameterError, match="expect_head"):
        led.verify(expect_head="xyz")


def test_memory_ledger_keeps_the_same_state(tmp_path):
    acc = Accountant(budget=1.0)
    acc.charge_many([("a", PureDpEvent(0.25))] * 4)
    assert acc.ledger.verify()["rows"] == 4
    assert acc.ledger.history("a") == [('{"epsilon":0.25,"type":"pure"}', 4)]
    with pytest.raises(BudgetExceeded):
        acc.charge("a", PureDpEvent(0.01))


# ---- composition on long histories -----------------------------------------------------------


def test_negative_epsilons_clamp_at_zero():
    # one Laplace(0.01) at delta = 0.05: the RDP conversion alone would give -0.0503
    for method in ("rdp", "pld", "best"):
        eps, _ = compose(LaplaceEvent(0.01), delta=0.05, method=method)
        assert eps >= 0.0
    acc = Accountant(budget=Budget(epsilon=1.0, delta=0.05, method="rdp"))
    acc.charge("a", LaplaceEvent(0.01))
    assert acc.remaining("a") <= 1.0


def test_optimal_says_why_it_cannot_compose():
    history = [(PureDpEvent(0.1 * i), 3) for i in range(1, 30)]
    with pytest.raises(InvalidParameterError, match="too large.*support of .* points"):
        compose(history, delta=1e-5, method="optimal")


def test_long_dpsgd_histories_have_bounded_plans():
    """10^6 DP-SGD steps (q = 0.01): PRV's mesh and PLD's support stay within their bounds."""
    atoms = {PoissonSampledEvent(0.01, GaussianEvent(1.0)): 10**6}
    err, pts = prv.plan(atoms, delta=1e-5)
    assert pts <= prv.MAX_POINTS and 0.01 < err <= prv.MAX_EPS_ERROR
    vdi, support = pld.plan(atoms)
    assert support <= pld.MAX_POINTS
    laplace = {LaplaceEvent(0.01): 10**6}
    vdi, support = pld.plan(laplace)
    assert support <= pld.MAX_POINTS and vdi > pld.DEFAULT_DISCRETIZATION


def test_best_skips_an_absurdly_expensive_method_and_says_so(monkeypatch):
    monkeypatch.setattr(prv, "MAX_POINTS", 1000)  # make PRV "absurd" for a modest history
    from ldp_audit.accountant import methods as A

    A.evaluate_full.cache_clear()
    acc = Accountant()
    acc.charge_many([("m", PoissonSampledEvent(0.01, GaussianEvent(1.0)))] * 2000)
    d = acc.spent_detail("m", delta=1e-5)
    assert "prv" in d.skipped and "eps_error" in d.skipped["prv"]
    assert "prv" not in d.by_method and d.method in ("rdp", "pld")
    assert d.to_dict()["skipped"] == d.skipped
    with pytest.raises(InvalidParameterError, match="'prv' cannot compose.*eps_error"):
        acc.spent("m", delta=1e-5, method="prv")
    A.evaluate_full.cache_clear()


def test_no_library_warning_leaks():
    events = [
        GaussianEvent(1.0),
        GaussianEvent(0.1),
        GaussianEvent(100.0),
        PoissonSampledEvent(0.01, GaussianEvent(1.0)),
        LaplaceEvent(0.5),
        PoissonSampledEvent(0.1, LaplaceEvent(1.0)),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for ev in events:
            for method in ("rdp", "prv"):
                if method == "rdp" or isinstance(ev, GaussianEvent | PoissonSampledEvent):
                    if not (method == "prv" and isinstance(ev.__dict__.get("event"), LaplaceEvent)):
                        compose([(ev, 10)], delta=1e-5, method=method)
        for ev in (events[0], events[3], events[4]):
            compose([(ev, 10)], delta=1e-5, method="best")
    assert [str(w.message) for w in caught] == []


def test_verify_full_on_open(tmp_path):
    import sqlite3

    path = tmp_path / "l.sqlite"
    with Accountant(path) as acc:
        acc.charge_many([("a", PureDpEvent(0.1))] * 200)
    Ledger(path, verify="full").close()
    con = sqlite3.connect(path)
    con.execute("UPDATE ldp_audit_charges SET time = 0 WHERE id = 5")  # far from the tail
    con.commit()
    con.close()
    Ledger(path).close()  # the tail check does not see row 5 ...
    with pytest.raises(LF.LedgerIntegrityError, match="row 5"):
        Ledger(path, verify="full")  # ... the full check does
    with pytest.raises(InvalidParameterError, match="verify"):
        Ledger(path, verify="yes")


def test_a_ledger_rolled_back_or_replaced_under_a_live_writer_is_refused(tmp_path):
    """Found from outside (session 46): an authentic older copy put in place while an
    accountant ran (`cp old ledger.sqlite`) was charged on top of, the budget counted from the
    older spend (1.0 of 2.0 after 2.0 had been spent); a copy renamed over the file
    (`mv`) left the writer charging the unlinked old file, which no reader sees."""
    import shutil

    p = tmp_path / "ledger.sqlite"
    acc = Accountant(str(p), budget=Budget(epsilon=2.0))
    acc.charge("a", LaplaceEvent(0.5))
    shutil.copyfile(p, tmp_path / "old.sqlite")
    for _ in range(3):
        acc.charge("a", LaplaceEvent(0.5))
    shutil.copyfile(tmp_path / "old.sqlite", p)  # in place: the same file, an older chain
    with pytest.raises(LF.LedgerIntegrityError, match="rolled back .* while it was open"):
        acc.charge("b", LaplaceEvent(0.5))
    acc.close()
    with pytest.raises(LF.LedgerIntegrityError, match="holds 1 charges.*high-water mark records 4"):
        Accountant(str(p))  # a new writer: the mark kept beside the key (before it: charged)
    Ledger(str(p), accept_restored=True).close()  # restored on purpose (budget --accept-restored)
    acc = Accountant(str(p))
    shutil.copyfile(p, tmp_path / "copy.sqlite")
    os.replace(tmp_path / "copy.sqlite", p)  # renamed over: another file at the path
    with pytest.raises(LF.LedgerIntegrityError, match="replaced by another file while open"):
        acc.charge("b", LaplaceEvent(0.5))
    assert len(Ledger(str(p), readonly=True)) == 1  # nothing charged anywhere


class _SignalAfter:
    """The store's connection, with a signal's ``KeyboardInterrupt`` raised once at ``sql``:
    after it ran (``after=True``) or before it."""

    def __init__(self, conn, sql: str, *, after: bool) -> None:
        self._conn, self._sql, self._after, self.fired = conn, sql, after, False

    def execute(self, sql, *args):
        fire = sql == self._sql and not self.fired
        if fire and not self._after:
            self.fired = True
            raise KeyboardInterrupt
        out = self._conn.execute(sql, *args)
        if fire:
            self.fired = True
            raise KeyboardInterrupt
        return out

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.parametrize("sql, after", [("BEGIN IMMEDIATE", True), ("COMMIT", False)])
def test_a_signal_between_begin_and_commit_leaves_no_transaction_open(tmp_path, sql, after):
    """CI, stop 57: SIGINT's KeyboardInterrupt came between a charge's BEGIN and the ``try``
    that ends it, and the run's close failed: "cannot start a transaction within a transaction".
    The interrupted charge is not committed and the next read and charge work."""
    with Accountant(tmp_path / "l.sqlite", budget=5.0) as acc:
        acc.charge("a", PureDpEvent(1.0))
        store = acc.ledger.store
        proxy = _SignalAfter(store._conn, sql, after=after)
        store._conn = proxy
        with pytest.raises(KeyboardInterrupt):
            acc.charge("a", PureDpEvent(2.0))
        assert proxy.fired and store._conn.in_transaction  # the state the signal left
        assert acc.spent("a") == 1.0  # read: the interrupted charge was rolled back, not seen
        acc.charge("a", PureDpEvent(0.5))
        assert not store._conn.in_transaction
    with Accountant(tmp_path / "l.sqlite") as acc:
        assert acc.spent("a") == 1.5
