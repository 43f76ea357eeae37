"""Accountant: charging, budgets (checked before the write), spent, bulk spent, summary."""

from __future__ import annotations

import math
import sys
import types

import pytest

from ldp_audit.accountant import (
    Accountant,
    Budget,
    ComposedEvent,
    GaussianEvent,
    LaplaceEvent,
    Ledger,
    NonPrivateEvent,
    PoissonSampledEvent,
    PureDpEvent,
    SelfComposedEvent,
    TallyLedger,
    compose,
    event_for,
)
from ldp_audit.accountant import composition as C
from ldp_audit.accountant.events import event_from_dict
from ldp_audit.accountant.methods import supports
from ldp_audit.errors import BudgetExceeded, InvalidParameterError


def test_charge_and_basic_spent_sum():
    acc = Accountant()
    acc.charge("t/1", PureDpEvent(0.25))
    acc.charge("t/1", LaplaceEvent(0.5))
    acc.charge("t/2", PureDpEvent(1.0))
    assert acc.spent("t/1", method="basic") == pytest.approx(0.75, abs=1e-15)
    assert acc.spent("t/2", method="basic") == 1.0
    assert acc.spent("never", method="basic") == 0.0
    assert acc.agents() == ["t/1", "t/2"]


def test_budget_refuses_without_recording():
    acc = Accountant(budget=Budget(epsilon=1.0))
    acc.charge("a", PureDpEvent(0.6))
    with pytest.raises(BudgetExceeded, match="'a'.*1.1.*budget 1"):
        acc.charge("a", PureDpEvent(0.5))
    assert len(acc.ledger) == 1
    assert acc.spent("a", method="basic") == pytest.approx(0.6)
    assert acc.remaining("a") == pytest.approx(0.4)
    acc.charge("a", PureDpEvent(0.4))  # exactly the budget fits
    assert acc.remaining("a") == pytest.approx(0.0, abs=1e-12)


def test_budget_float_is_basic_pure():
    acc = Accountant(budget=2.0)
    assert acc.budget == Budget(epsilon=2.0, delta=0.0, method="basic")


def test_even_split_fits_exactly():
    """T charges of eps/T fit into eps despite rounding (paper 3.2.1)."""
    acc = Accountant(budget=1.0)
    acc.charge_many([("a", PureDpEvent(1.0 / 7))] * 7)
    with pytest.raises(BudgetExceeded):
        acc.charge("a", PureDpEvent(1e-6))


def test_charge_many_all_or_nothing():
    acc = Accountant(budget=1.0)
    batch = [("x", PureDpEvent(0.5)), ("y", PureDpEvent(0.5)), ("y", PureDpEvent(0.6))]
    with pytest.raises(BudgetExceeded, match="'y'"):
        acc.charge_many(batch)
    assert len(acc.ledger) == 0
    assert acc.charge_many(batch[:2]) == 2
    assert acc.charge_many([]) == 0


def test_charge_validates_inputs():
    acc = Accountant()
    with pytest.raises(InvalidParameterError, match="agent"):
        acc.charge("", PureDpEvent(1.0))
    with pytest.raises(InvalidParameterError, match="agent"):
        acc.charge(3, PureDpEvent(1.0))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="event"):
        acc.charge("a", 1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="scope"):
        acc.charge("a", PureDpEvent(1.0), scope="global")
    with pytest.raises(InvalidParameterError, match="pairs"):
        acc.charge_many([("a",)])  # type: ignore[list-item]
    assert len(acc.ledger) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": -1.0}, "epsilon must be > 0"),
        ({"epsilon": 1.0, "delta": 1.5}, "delta must be finite, >= 0 and < 1, got 1.5"),
        ({"epsilon": 1.0, "method": "magic"}, "method must be one of"),
        ({"epsilon": 1.0, "method": "rdp"}, "delta must be > 0"),
        ({"epsilon": 1.0, "delta": 0.5, "method": "filter"}, "1/e"),
    ],
)
def test_budget_validation(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        Budget(**kwargs)


def test_adaptive_mode_refuses_non_filter_methods():
    with pytest.raises(InvalidParameterError, match="adaptive"):
        Accountant(budget=Budget(1.0, delta=1e-5, method="optimal"), adaptive=True)
    Accountant(budget=Budget(1.0, delta=1e-5, method="filter"), adaptive=True)
    Accountant(budget=Budget(1.0), adaptive=True)
    for bad in ("yes", 1, None):
        with pytest.raises(
            InvalidParameterError, match=f"adaptive must be True or False, got {bad!r}"
        ):
            Accountant(adaptive=bad)


def test_filter_budget_stops_adaptive_rounds():
    acc = Accountant(budget=Budget(epsilon=1.0, delta=1e-6, method="filter"), adaptive=True)
    n = 0
    with pytest.raises(BudgetExceeded):
        for _ in range(10_000):
            acc.charge("a", PureDpEvent(0.01))
            n += 1
    # Here the RRUV filter allows more rounds than basic composition (100) and stops long
    # before 10,000; exactly as many as its statistic allows.
    assert 100 < n < 10_000
    assert C.filter_allows([0.01] * n, epsilon_budget=1.0, delta=1e-6)
    assert not C.filter_allows([0.01] * (n + 1), epsilon_budget=1.0, delta=1e-6)
    assert acc.remaining("a") >= 0.0


def test_spent_methods_and_best_reports_winner():
    acc = Accountant()
    acc.charge_many([("a", PureDpEvent(0.1))] * 100)
    d = acc.spent_detail("a", delta=1e-5)
    assert d.charges == 100
    assert d.by_method["basic"] == pytest.approx(10.0)
    assert d.by_method["optimal"] == pytest.approx(4.3068, abs=1e-4)
    assert d.epsilon == min(d.by_method.values())
    assert d.method in d.by_method and d.by_method[d.method] == d.epsilon
    assert "prv" not in d.by_method  # prv is for Gaussians only
    with pytest.raises(InvalidParameterError, match="'prv' does not support"):
        acc.spent("a", delta=1e-5, method="prv")
    with pytest.raises(InvalidParameterError, match="delta"):
        acc.spent("a", delta=-0.1)
    with pytest.raises(InvalidParameterError, match="method"):
        acc.spent("a", method="nope")


def test_delta_zero_best_is_basic():
    acc = Accountant()
    acc.charge_many([("a", LaplaceEvent(0.5))] * 4)
    d = acc.spent_detail("a", delta=0.0)
    assert set(d.by_method) == {"basic", "optimal"}
    assert d.epsilon == pytest.approx(2.0)


def test_non_private_is_infinite():
    acc = Accountant()
    acc.charge("a", NonPrivateEvent())
    assert math.isinf(acc.spent("a", delta=1e-5))
    assert acc.spent_detail("a").method == "non_private"
    b = Accountant(budget=100.0)
    with pytest.raises(BudgetExceeded):
        b.charge("a", NonPrivateEvent())


def test_gaussian_history_not_basic():
    acc = Accountant()
    acc.charge("m", GaussianEvent(1.0), scope="central")
    with pytest.raises(InvalidParameterError, match="'basic' does not support"):
        acc.spent("m", method="basic")
    assert set(acc.spent_detail("m", delta=1e-5).by_method) == {"rdp", "prv", "pld"}
    assert not supports(GaussianEvent(1.0), "basic")
    assert supports(GaussianEvent(1.0), "prv")
    assert not supports(GaussianEvent(1.0), "prv", delta=0.0)


def test_spent_all_bulk_equals_single_and_caches():
    acc = Accountant()
    acc.charge_many([(f"0/{i}", PureDpEvent(0.5 + (i % 3))) for i in range(300)])
    acc.charge_many([("0/1", LaplaceEvent(0.25))])
    bulk = acc.spent_all(method="basic")
    assert len(bulk) == 300
    for a in ("0/0", "0/1", "0/2", "0/299"):
        assert bulk[a] == acc.spent(a, method="basic")
    assert acc.spent_all(method="basic") == bulk  # cached
    acc.charge("0/0", PureDpEvent(1.0))  # a new row invalidates the cache
    assert acc.spent_all(method="basic")["0/0"] == pytest.approx(bulk["0/0"] + 1.0)


def test_local_and_central_reported_apart():
    acc = Accountant()
    acc.charge_many([("0/1", PureDpEvent(1.0)), ("0/2", PureDpEvent(2.0))])
    acc.charge_many(
        [("dpsgd", PoissonSampledEvent(0.01, GaussianEvent(1.0)))] * 10, scope="central"
    )
    s = acc.summary(delta=1e-5)
    assert s["local"]["agents"] == 2 and s["local"]["max_agent"] == "0/2"
    assert s["local"]["max_epsilon"] <= 2.0
    assert s["central"]["agents"] == 1 and s["central"]["max_agent"] == "dpsgd"
    assert 0 < s["central"]["max_epsilon"] < 1.0
    assert acc.agents(scope="central") == ["dpsgd"]
    assert acc.spent_detail("dpsgd").scope == "central"
    assert math.isinf(acc.spent("dpsgd"))  # no pure-DP guarantee at delta = 0


def test_compose_function_and_nested_events():
    inner = ComposedEvent([PureDpEvent(0.1), LaplaceEvent(0.2)])
    ev = SelfComposedEvent(inner, 3)
    assert compose(ev, method="basic")[0] == pytest.approx(0.9)
    assert compose([PureDpEvent(0.1), PureDpEvent(0.2)], method="basic")[0] == pytest.approx(0.3)
    assert compose([(PureDpEvent(0.1), 4)], method="basic")[0] == pytest.approx(0.4)


def test_poisson_sampled_pure_is_amplified():
    ev = PoissonSampledEvent(0.1, PureDpEvent(1.0))
    eps, _ = compose(ev, method="basic")
    assert eps == pytest.approx(math.log1p(0.1 * math.expm1(1.0)))


def test_event_for_is_the_mechanisms_own_event():
    """Each built-in mechanism owns its event (no name matching); a user's mechanism may define
    ``event()``, else a finite pure epsilon is charged ``PureDpEvent`` and inf is non-private."""
    from ldp_audit.mechanisms import (
        BitFlip,
        DiscreteLaplace,
        Gaussian,
        Laplace,
        NoPrivacy,
        ProjectedRandomSign,
        RandomizedResponse,
    )

    assert event_for(Laplace(epsilon=2.0, clip=0.01)) == LaplaceEvent(2.0)
    assert event_for(DiscreteLaplace(epsilon=2.0, clip=1.0)) == PureDpEvent(2.0)
    assert event_for(ProjectedRandomSign(epsilon=1.0, clip=1.0)) == PureDpEvent(1.0)
    assert event_for(BitFlip(epsilon=0.5)) == PureDpEvent(0.5)
    assert event_for(RandomizedResponse(epsilon=3.0, k=2)) == PureDpEvent(3.0)
    g = Gaussian(clip=1.0, noise_multiplier=4.0, delta=1e-5)
    assert event_for(g) == g.event() == GaussianEvent(2.0)  # replace-one: sensitivity 2 * clip
    assert event_for(NoPrivacy()) == NonPrivateEvent()
    # a user's mechanism: its own event(), else its pure epsilon
    own = types.SimpleNamespace(epsilon=1.0, event=lambda: GaussianEvent(3.0))
    assert event_for(own) == GaussianEvent(3.0)
    named = types.SimpleNamespace(epsilon=2.0, to_config=lambda: {"name": "Laplace"})
    assert event_for(named) == PureDpEvent(2.0)  # a name alone does not buy a sharper analysis
    assert event_for(types.SimpleNamespace(epsilon=float("inf"))) == NonPrivateEvent()
    with pytest.raises(InvalidParameterError, match="must define event"):
        event_for(types.SimpleNamespace(epsilon=1.0, delta=0.1))  # (eps, delta): no pure event
    with pytest.raises(InvalidParameterError, match="must define event"):
        event_for(types.SimpleNamespace(epsilon="1"))  # types are checked, not coerced
    with pytest.raises(InvalidParameterError, match="must return a DpEvent"):
        event_for(types.SimpleNamespace(epsilon=1.0, event=lambda: 1.0))


def test_import_is_light():
    """``import ldp_audit.accountant`` must not pull torch/opacus/dp_accounting."""
    import subprocess

    code = (
        "import sys, ldp_audit, ldp_audit.accountant as a; a.Accountant().charge('x', "
        "a.PureDpEvent(1.0)); a.Accountant().spent('x', method='basic'); "
        "print(sorted(m for m in ('torch','opacus','dp_accounting') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_accountant_accepts_path(tmp_path):
    path = tmp_path / "l.sqlite"
    with Accountant(path, run_id="run-1") as acc:
        acc.charge("a", PureDpEvent(1.0))
    with Ledger(path) as led:
        rec = led.records()
    assert rec[0]["run_id"] == "run-1" and rec[0]["agent"] == "a" and rec[0]["scope"] == "local"


def test_bulk_unsupported_is_infinite_not_error():
    acc = Accountant()
    acc.charge("g", GaussianEvent(1.0))
    acc.charge("p", PureDpEvent(1.0))
    out = acc.spent_all(method="basic")
    assert math.isinf(out["g"]) and out["p"] == 1.0
    assert acc.spent_all_detail(method="basic")["g"] == (math.inf, "unsupported")


def test_event_for_real_mechanisms_and_gaussian_sensitivity():
    mech = pytest.importorskip("ldp_audit.mechanisms")
    assert event_for(mech.Laplace(epsilon=1.0, clip=0.01)) == LaplaceEvent(1.0)
    assert event_for(mech.ProjectedRandomSign(epsilon=2.0, clip=1.0)) == PureDpEvent(2.0)
    assert event_for(mech.BitFlip(epsilon=0.5)) == PureDpEvent(0.5)
    assert event_for(mech.RandomizedResponse(epsilon=1.0, k=3)) == PureDpEvent(1.0)
    assert event_for(mech.NoPrivacy()) == NonPrivateEvent()
    g = mech.Gaussian(clip=1.0, noise_multiplier=4.0, delta=1e-5)
    ev = event_for(g)
    assert ev == GaussianEvent(2.0)
    # The mechanism's own analytic epsilon (replace-one, sensitivity 2 * clip) agrees with the
    # accountant's tight PLD/PRV numbers for the mapped event.
    eps = compose(ev, delta=1e-5, method="pld")[0]
    assert eps == pytest.approx(g.epsilon, abs=2e-3)


def test_local_budget_does_not_govern_central_charges():
    step = PoissonSampledEvent(0.01, GaussianEvent(1.0))
    acc = Accountant(budget=1.0)
    acc.charge_many([("m", step)] * 5, scope="central")  # the local budget does not apply
    acc.charge("m", PureDpEvent(1.0))  # local spend of "m" counts only local charges
    assert acc.remaining("m") == pytest.approx(0.0)
    with pytest.raises(InvalidParameterError, match="central budget"):
        acc.remaining("m", scope="central")


def test_central_budget_with_rdp():
    step = PoissonSampledEvent(0.05, GaussianEvent(1.0))
    acc = Accountant(central_budget=Budget(epsilon=2.0, delta=1e-5, method="rdp"))
    n = 0
    with pytest.raises(BudgetExceeded, match="'model'"):
        for _ in range(10_000):
            acc.charge("model", step, scope="central")
            n += 1
    assert 10_000 > n > 1
    used = acc.spent("model", delta=1e-5, method="rdp")
    assert used <= 2.0 < compose([(step, n + 1)], delta=1e-5, method="rdp")[0]
    assert acc.remaining("model", scope="central") == pytest.approx(2.0 - used)
    acc.charge("x", PureDpEvent(50.0))  # no local budget


def test_a_subnormal_delta_composes_pure_histories_as_at_zero_everywhere():
    """Found from outside (session 55): at delta=1e-320, ``spent`` raised "delta must be >=
    2.22507e-308" (from rdp, which 'best' tried), ``spent_all`` gave every pure-DP agent inf
    ("unsupported") and ``ldp-audit budget RUN --delta 1e-320`` printed inf for every agent of
    a Laplace run, exit 0. The methods needing delta > 0 refuse a subnormal one, so for them it
    is delta 0: best composes with basic/optimal, and a Gaussian is inf as at delta 0."""
    acc = Accountant(ledger=TallyLedger())
    acc.charge_many([("a", LaplaceEvent(1.0)), ("a", LaplaceEvent(1.5)), ("g", GaussianEvent(1.0))])
    for d in (1e-320, 5e-324, 2e-308):
        assert acc.spent("a", delta=d) == pytest.approx(2.5)
        assert acc.spent_all(delta=d) == {"a": pytest.approx(2.5), "g": math.inf}
        assert acc.spent("g", delta=d) == math.inf
        with pytest.raises(InvalidParameterError, match="needs delta >= 2.22507e-308"):
            acc.spent("a", delta=d, method="rdp")
    assert acc.summary(delta=1e-320)["local"]["max_epsilon"] == math.inf  # g


def test_an_empty_composed_event_is_refused_not_charged_as_nothing():
    """Found from outside (session 55): ``ComposedEvent([])`` was charged five times under a
    budget of 1 and read epsilon 0 (``release(..., event=ComposedEvent([]))`` released values
    whose charge composed to nothing). Refused by name, as ``SelfComposedEvent(ev, 0)`` is."""
    for events in ([], (), iter([])):
        with pytest.raises(InvalidParameterError, match="events must name at least one event"):
            ComposedEvent(events)
    with pytest.raises(InvalidParameterError, match="at least one event"):
        event_from_dict({"type": "composed", "events": []})
    assert ComposedEvent([LaplaceEvent(1.0)]).events == (LaplaceEvent(1.0),)


@pytest.mark.parametrize("method", ["advanced", "rdp", "prv", "pld", "filter"])
def test_a_budget_a_method_cannot_compute_at_its_delta_is_refused_when_made(method):
    """Found from outside (session 55): ``Budget(1.0, delta=1e-320, method='rdp')`` was
    accepted, and every later charge raised "method 'rdp' does not support this history": a
    budget no charge could be checked against. Refused when made, as delta 0 is."""
    for delta in (0.0, 1e-320, 5e-324):
        with pytest.raises(InvalidParameterError, match="budget delta must be > 0"):
            Budget(1.0, delta=delta, method=method)
    assert Budget(1.0, delta=sys.float_info.min, method=method).delta == sys.float_info.min


def test_a_budget_recorded_after_an_accountant_opened_is_enforced_by_it(tmp_path):
    """Found from outside (session 55): ``A = Accountant(path)`` (no budget recorded yet), then
    ``Accountant(path, budget=1.0)`` recorded one, and A charged 5.0 to an agent: the ledger
    held a spend five times its durable budget. The budget is the ledger's: A enforces it from
    the first charge after it was recorded (a file: read inside the write transaction; one
    ledger object shared in a process: when its metadata was written)."""
    path = str(tmp_path / "l.sqlite")
    late = Accountant(path)
    Accountant(path, budget=1.0)  # another connection (another process, for all it knows)
    with pytest.raises(BudgetExceeded):
        late.charge("x", LaplaceEvent(5.0))
    late.charge("x", LaplaceEvent(1.0))
    assert late.budget == Budget(1.0) and late.spent("x", method="basic") == 1.0
    for ledger in (Ledger(":memory:"), TallyLedger()):
        late = Accountant(ledger)
        Accountant(ledger, central_budget=1.0)
        late.charge("x", LaplaceEvent(5.0))  # local: none recorded
        with pytest.raises(BudgetExceeded):
            late.charge("x", LaplaceEvent(5.0), scope="central")
        assert len(ledger) == 1
