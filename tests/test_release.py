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
