"""The core release path (ldp_audit.release): charge durably, then randomise, then seal."""

from __future__ import annotations

import numpy as np
import pytest

from ldp_audit.accountant import Accountant, Ledger
from ldp_audit.errors import BudgetExceeded, InvalidParameterError
from ldp_audit.mechanisms import Laplace
from ldp_audit.release import (
    ReleaseRequest,
    SealedRelease,
    Transcript,
    release,
    release_many,
    release_with,
    require_sealed,
    reserve,
)


def _acc(budget=None, path=":memory:"):
    return Accountant(ledger=Ledger(path), budget=budget)


def test_release_charges_before_noise_and_seals() -> None:
    acc = _acc()
    x = np.zeros((3, 4))
    rel = release(
        x,
        mechanism=Laplace(epsilon=1.0, clip=1.0),
        accountant=acc,
        agent_ids=["a", "b", "c"],
        rng=np.random.default_rng(0),
        meta={"agent": np.arange(3)},
    )
    assert isinstance(rel, SealedRelease) and len(rel) == 3
    assert not rel.values.flags.writeable and not rel.agent.flags.writeable
    with pytest.raises(ValueError):
        rel.values[0, 0] = 1.0
    assert np.all(rel.values != 0.0)  # randomised
    assert sorted(acc.agents()) == ["a", "b", "c"]
    assert acc.spent("a") == pytest.approx(1.0)
    assert require_sealed(rel) is rel


def test_budget_exceeded_releases_nothing_and_draws_no_noise() -> None:
    acc = _acc(budget=1.0)
    mech = Laplace(epsilon=1.0, clip=1.0)
    rng = np.random.default_rng(0)
    release(np.zeros((1, 2)), mechanism=mech, accountant=acc, agent_ids=["a"], rng=rng)
    state = rng.bit_generator.state
    with pytest.raises(BudgetExceeded):
        release(np.zeros((1, 2)), mechanism=mech, accountant=acc, agent_ids=["a"], rng=rng)
    assert rng.bit_generator.state == state  # no randomness consumed
    assert acc.spent("a") == pytest.approx(1.0)


def test_release_many_is_one_all_or_nothing_transaction() -> None:
    acc = _acc(budget=1.0)
    mech = Laplace(epsilon=1.0, clip=1.0)
    rng = np.random.default_rng(1)
    release(np.zeros((1, 2)), mechanism=mech, accountant=acc, agent_ids=["b"], rng=rng)
    reqs = [
        ReleaseRequest(values=np.zeros((1, 2)), mechanism=mech, agent_ids=["a"], rng=rng),
        ReleaseRequest(values=np.zeros((1, 2)), mechanism=mech, agent_ids=["b"], rng=rng),
    ]
    with pytest.raises(BudgetExceeded):
        release_many(reqs, accountant=acc)
    assert "a" not in acc.agents()  # nothing of the first group was charged either


def test_raw_values_and_forged_releases_are_refused() -> None:
    with pytest.raises(TypeError, match="SealedRelease"):
        require_sealed(np.ones((1, 2)), "the aggregator")
    with pytest.raises(TypeError, match="ldp_audit.release"):
        SealedRelease(
            np.ones(1), meta={}, epsilon=1, delta=0, event=None, agent_ids=("a",), seal=object()
        )
    with pytest.raises(TypeError, match="SealedRelease"):
        Transcript().append(np.ones((1, 2)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"agent_ids": "a"}, "sequence of str"),
        ({"agent_ids": ["a", "b"]}, "one id per row"),
        ({"agent_ids": [""]}, "non-empty str"),
        ({"rng": 0}, "numpy.random.Generator"),
        ({"accountant": None}, "accountant is required"),
        ({"meta": {"agent": np.arange(2)}}, r"meta\['agent'\] must have one entry per"),
        ({"meta": {"agent": np.array(["x"])}}, "must be a real numeric array"),
        ({"meta": {1: np.zeros(1)}}, "meta keys must be non-empty str"),
        ({"scope": "global"}, "scope must be one of"),
    ],
)
def test_bad_inputs_are_refused_before_anything_is_charged(kw, match) -> None:
    acc = _acc()
    args = dict(
        mechanism=Laplace(epsilon=1.0, clip=1.0),
        accountant=acc,
        agent_ids=["a"],
        rng=np.random.default_rng(0),
    )
    args.update(kw)
    with pytest.raises(InvalidParameterError, match=match):
        release(np.zeros((1, 2)), **args)
    assert acc.agents() == []


def test_release_with_charges_before_calling_the_randomiser() -> None:
    acc = _acc()
    from ldp_audit.accountant import GaussianEvent, PoissonSampledEvent

    seen = []

    def randomise():
        seen.append(list(acc.agents()))
        return np.ones((2, 3))

    ev = PoissonSampledEvent(0.01, GaussianEvent(1.0))
    rel = release_with(
        randomise, accountant=acc, charges=[("central", ev)], epsilon=np.inf, scope="central"
    )
    assert seen == [["central"]] and rel.values.shape == (2, 3)


def test_transcript_concatenates_in_arrival_order() -> None:
    acc = _acc()
    mech = Laplace(epsilon=1.0, clip=1.0)
    t = Transcript()
    rng = np.random.default_rng(2)
    for k in range(3):
        rel = release(
            np.zeros((2, 2)),
            mechanism=mech,
            accountant=acc,
            agent_ids=[f"{k}/0", f"{k}/1"],
            rng=rng,
            meta={"agent": np.array([0, 1])},
        )
        t.append(rel, round=k)
    t.set_static("thetas", np.zeros((1, 2)))
    a = t.arrays()
    assert a["report"].shape == (6, 2) and a["round"].tolist() == [0, 0, 1, 1, 2, 2]
    assert a["agent"].tolist() == [0, 1] * 3 and a["thetas"].shape == (1, 2)
    with pytest.raises(InvalidParameterError, match="must not change"):
        t.append(rel)


# ------------------------------------------------- release_with validates like release (issue 25)
def _ev():
    from ldp_audit.accountant import GaussianEvent

    return GaussianEvent(1.0)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"accountant": None}, "accountant is required"),
        ({"randomise": np.zeros(2)}, "randomise must be callable"),
        ({"charges": "a"}, "sequence of"),
        ({"charges": []}, "at least one"),
        ({"charges": [("a",)]}, r"\(agent, event\) pairs"),
        ({"charges": [("", "EV")]}, "non-empty str"),
        ({"charges": [(1, "EV")]}, "non-empty str"),
        ({"charges": [("a", "not an event")]}, "event"),
        ({"epsilon": "1"}, "epsilon must be a real number"),
        ({"epsilon": True}, "epsilon must be a real number"),
        ({"epsilon": float("nan")}, "epsilon must be >= 0"),
        ({"epsilon": -1.0}, "epsilon must be >= 0"),
        ({"delta": 2.0}, r"delta must be in \[0, 1\]"),
        ({"delta": "0"}, "delta must be a real number"),
        ({"meta": {"agent": np.array(["x", "y"])}}, "must be a real numeric array"),
        ({"meta": {"a": np.zeros(2), "b": np.zeros(3)}}, "one entry per released row"),
        ({"meta": 5}, "meta must be a mapping"),
        ({"scope": "global"}, "scope must be one of"),
    ],
)
def test_release_with_bad_inputs_are_refused_before_the_charge(kw, match) -> None:
    """Each check of release() has its counterpart: nothing charged, nothing drawn."""
    acc = _acc()
    called = []

    def randomise():
        called.append(1)
        return np.zeros((2, 3))

    ev = _ev()
    args = dict(randomise=randomise, accountant=acc, charges=[("a", ev)], epsilon=1.0)
    if "charges" in kw and not isinstance(kw["charges"], str):  # "EV" stands for a real event
        kw = {"charges": [tuple(ev if x == "EV" else x for x in c) for c in kw["charges"]]}
    args.update(kw)
    with pytest.raises(InvalidParameterError, match=match):
        release_with(**args)
    assert acc.agents() == [] and called == []


@pytest.mark.parametrize(
    "value, match",
    [
        (np.array([[1.0, np.nan]]), "must be finite"),
        (np.array([[np.inf, 0.0]]), "must be finite"),
        (np.array([["a", "b"]]), "real numeric array"),
        (np.array([{}], dtype=object), "real numeric array"),
        (np.zeros((0, 2)), "must be non-empty"),
        (np.zeros((3, 2)), "one entry per released row"),
    ],
)
def test_release_with_refuses_a_bad_randomised_value_and_keeps_the_charge(value, match) -> None:
    """The value is known only after the charge: refused, charged, never released."""
    acc = _acc()
    with pytest.raises(InvalidParameterError, match=match) as info:
        release_with(
            lambda: value,
            accountant=acc,
            charges=[("a", _ev())],
            epsilon=1.0,
            meta={"agent": np.arange(2)} if value.shape[:1] == (3,) else None,
        )
    assert "charged, never released" in str(info.value)
    assert acc.agents() == ["a"]


def test_release_and_release_with_refuse_the_same_values() -> None:
    """A value release() refuses as input, release_with refuses as output (same message)."""
    for bad in (np.array([[np.nan]]), np.array([["x"]]), np.zeros((0, 1))):
        acc = _acc()
        with pytest.raises(InvalidParameterError) as a:
            release(bad, mechanism=Laplace(epsilon=1.0, clip=1.0), accountant=acc,
                    agent_ids=["a"] * max(1, len(bad)), rng=np.random.default_rng(0))  # fmt: skip
        with pytest.raises(InvalidParameterError) as b:
            release_with(lambda bad=bad: bad, accountant=acc, charges=[("a", _ev())], epsilon=1.0)
        first = str(a.value).split(":")[0].split(" must ")[1]
        assert first in str(b.value)


class _PlugIn:
    """A user's mechanism written from the protocol (epsilon, privatize), with a bad output."""

    def __init__(self, out, epsilon=1.0):
        self.out, self.epsilon = out, epsilon

    def privatize(self, x, rng):
        return self.out(np.asarray(x, dtype=float) + rng.laplace(size=np.shape(x)))


@pytest.mark.parametrize(
    "out, match",
    [
        (lambda y: np.concatenate([y, y]), "one row per charged row"),  # 6 rows for 3 charges
        (lambda y: y[:1], "one row per charged row"),
        (lambda y: np.float64(y.sum()), "one row per charged row"),
        (lambda y: y * np.nan, "must be finite"),
        (lambda y: y[:0], "must be non-empty"),
        (lambda y: None, "real numeric array"),
    ],
)
def test_release_refuses_a_privatize_output_that_is_not_one_row_per_charge(out, match) -> None:
    """Found from outside (session 55): a plug-in privatize returning 6 rows for 3 charged rows
    was sealed (6 released, 3 charged), and a NaN output was sealed too; release_with refused
    both. Now refused after the charge, which stands (charged, never released)."""
    acc = _acc()
    with pytest.raises(InvalidParameterError, match=match) as info:
        release(np.zeros(3), mechanism=_PlugIn(out), accountant=acc, agent_ids=["a", "b", "c"],
                rng=np.random.default_rng(0))  # fmt: skip
    assert "charged, never released" in str(info.value)
    assert len(acc.ledger) == 3


@pytest.mark.parametrize("eps", ["1", True, float("nan"), -1.0])
def test_release_refuses_a_mechanism_epsilon_that_is_not_a_number_before_the_charge(eps) -> None:
    """A plug-in's epsilon '1' or True was coerced onto the seal (1.0) when an event was given;
    now refused like release_with's epsilon, before anything is charged."""
    acc = _acc()
    with pytest.raises(InvalidParameterError, match="mechanism.epsilon"):
        release(np.zeros(2), mechanism=_PlugIn(lambda y: y, eps), accountant=acc,
                agent_ids=["a", "b"], rng=np.random.default_rng(0), event=_ev())  # fmt: skip
    assert len(acc.ledger) == 0


# ----------------------------------------------------------- reservation of a block (issue 25)
def _rows(acc):
    return [(r["agent"], r["event"], r["scope"]) for r in acc.ledger.records()]


def test_reserve_charges_the_block_durably_first_with_the_rows_of_direct_charges(tmp_path):
    """Same ledger rows (agents, events, scope, order) as charging each release directly."""
    ev, ev2 = _ev(), Laplace(epsilon=1.0, clip=1.0)
    from ldp_audit.accountant import event_for

    e2 = event_for(ev2)
    charges = [("0/a", ev), ("0/b", e2), ("0/a", ev), ("1/a", ev)]
    direct = _acc(path=str(tmp_path / "d.sqlite"))
    direct.charge_many(charges)
    acc = _acc(path=str(tmp_path / "r.sqlite"))
    seen = []
    with reserve(acc, charges[:2]) as block:
        seen.append(len(_rows(acc)))  # charged before any release
        block.add(charges[2:])
        rel = release_with(lambda: np.zeros((1, 2)), accountant=block, charges=[("0/a", ev)],
                           epsilon=1.0)  # fmt: skip
        rel2 = release(np.zeros((1, 2)), mechanism=ev2, accountant=block, agent_ids=["0/b"],
                       rng=np.random.default_rng(0), event=e2)  # fmt: skip
        assert block.unused() == 2 and block.drawn == 2 and block.charged == 4
    assert seen == [2] and isinstance(rel, SealedRelease) and isinstance(rel2, SealedRelease)
    assert _rows(acc) == _rows(direct)  # the draws wrote nothing more
    assert block.closed and block.close() == 2  # charged, never released: still on the ledger
    with pytest.raises(InvalidParameterError, match="closed"):
        block.add(charges[:1])


def test_reservation_refuses_what_it_did_not_reserve() -> None:
    acc = _acc()
    ev = _ev()
    block = reserve(acc, [("a", ev)])
    with pytest.raises(InvalidParameterError, match="'b'.*not charged to the ledger first"):
        release_with(lambda: np.zeros(1), accountant=block, charges=[("b", ev)], epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="not charged"):  # twice: only one reserved
        release_with(lambda: np.zeros(1), accountant=block, charges=[("a", ev), ("a", ev)],
                     epsilon=1.0)  # fmt: skip
    with pytest.raises(InvalidParameterError, match="scope 'central' differs"):
        release_with(lambda: np.zeros(1), accountant=block, charges=[("a", ev)], epsilon=1.0,
                     scope="central")  # fmt: skip
    assert block.unused() == 1
    compiled = reserve(acc, [("c", ev)], itemised=False)
    with pytest.raises(InvalidParameterError, match="not itemised"):
        release_with(lambda: np.zeros(1), accountant=compiled, charges=[("c", ev)], epsilon=1.0)
    assert compiled.unused() is None and compiled.charged == 1
    assert sorted(acc.agents()) == ["a", "c"]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"accountant": None}, "accountant is required"),
        ({"accountant": object()}, "charge_many"),
        ({"charges": [("", "EV")]}, "non-empty str"),
        ({"charges": "ab"}, "sequence of"),
        ({"scope": "both"}, "scope must be one of"),
        ({"itemised": 1}, "itemised must be True or False"),
    ],
)
def test_reserve_bad_inputs_charge_nothing(kw, match) -> None:
    acc = _acc()
    ev = _ev()
    args = {"accountant": acc, "charges": [("a", ev)]}
    if "charges" in kw and not isinstance(kw["charges"], str):
        kw = {"charges": [tuple(ev if x == "EV" else x for x in c) for c in kw["charges"]]}
    args.update(kw)
    with pytest.raises(InvalidParameterError, match=match):
        reserve(**args)
    assert acc.agents() == []


def test_reserve_over_budget_charges_nothing() -> None:
    acc = _acc(budget=1.0)
    from ldp_audit.accountant import event_for

    ev = event_for(Laplace(epsilon=0.6, clip=1.0))
    with pytest.raises(BudgetExceeded):
        reserve(acc, [("a", ev), ("a", ev)])
    assert acc.agents() == []


def test_two_threads_cannot_both_draw_the_last_reserved_charge() -> None:
    """Found from outside (session 55): 6 threads releasing through one reservation of 2
    charges released 3-6 values in 14 of 300 trials (``sys.setswitchinterval(1e-6)``): each
    passed the balance check before another subtracted, a release never charged. Forced here:
    the balance's read waits (0.5 s at most) until both threads read it; with the reservation's
    lock the second waits for the first to draw, then finds nothing left."""
    import threading
    from collections import Counter

    acc = _acc()
    ev = _ev()
    block = reserve(acc, [("a", ev)])
    both_read = threading.Barrier(2, timeout=0.5)

    class SlowBalance(Counter):
        def __getitem__(self, key):
            value = super().__getitem__(key)
            try:
                both_read.wait()
            except threading.BrokenBarrierError:
                pass
            return value

    block._balance = SlowBalance(block._balance)
    released = []

    def draw():
        try:
            release_with(lambda: np.zeros(1), accountant=block, charges=[("a", ev)], epsilon=1.0)
            released.append(1)
        except InvalidParameterError:
            pass

    threads = [threading.Thread(target=draw) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(released) == 1 and block.drawn == 1 and len(acc.ledger) == 1
