"""audit(sequential=True): the anytime-valid sequential mode and ``ldp-audit audit --sequential``.

Stage k is a fresh fixed-sample audit at level alpha 6 / (pi^2 k^2), so the whole sequence of
verdicts is wrong with probability <= alpha. The correct mechanisms are audited at confidence
0.999: a false refutation in one run has probability <= 1e-3 (and these runs are seeded). The
broken mechanism (no clipping; true epsilon unbounded on the pair +-10) is refuted by its first
stage with certainty up to Clopper-Pearson's 1e-7 slack at these counts.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp_audit.audit import audit, sequential_schedule
from ldp_audit.audit.sequential import sequential_alpha
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import Laplace, RandomizedResponse
from tests.broken_mechanisms import NoClipLaplace
from tests.test_audit_cli import run_cli


def test_schedule_doubles_and_spends_the_budget():
    s = sequential_schedule(1_000_000)
    assert s[0] == 1_000_000 // 127 and sum(s) == 1_000_000
    assert all(b == 2 * a for a, b in zip(s[:-2], s[1:-1], strict=True)) and s[-1] >= 2 * s[-2]
    assert sequential_schedule(3_000) == [3_000]
    assert sequential_schedule(20_000) == [2_000, 4_000, 14_000]
    # the levels sum to at most alpha over any number of stages (pi^2 / 6)
    assert sum(sequential_alpha(0.05, k) for k in range(1, 10_000)) < 0.05
    assert sequential_alpha(0.05, 1) == pytest.approx(0.05 * 6 / math.pi**2)


def test_stops_at_first_stage_on_grossly_broken():
    m = NoClipLaplace(epsilon=1.0, clip=1.0)
    r = audit(m, [m.worst_pair(1)], samples=1_000_000, rng=0, sequential=True, float_bits=False)
    s = r.sequential
    assert r.violation and s.stopped == "refuted" and len(s.stages) == 1
    assert r.samples == s.samples_used == 1_000_000 // 127 and r.confidence == 0.95
    assert s.stages[0]["confidence"] == pytest.approx(1 - 0.05 * 6 / math.pi**2)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["sequential"]["stopped"] == "refuted" and d["sequential"]["budget"] == 1_000_000
    assert "sequential: stopped after stage 1 (refuted)" in r.summary()


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "mech", [RandomizedResponse(epsilon=1.0), Laplace(epsilon=1.0, clip=1.0)], ids=["rr", "lap"]
)
def test_never_refutes_correct(mech, seed):
    r = audit(mech, samples=20_000, rng=seed, confidence=0.999, sequential=True, float_bits=False)
    assert not r.violation and r.epsilon_lower_bound <= 1.0
    assert r.sequential.stopped == "budget spent" and r.samples == 20_000
    assert all(not st["violation"] for st in r.sequential.stages)
    assert r.epsilon_lower_bound == max(st["epsilon_lower_bound"] for st in r.sequential.stages)


def test_stops_when_no_stage_could_refute():
    r = audit(RandomizedResponse(epsilon=12.0), samples=20_000, rng=0, sequential=True)
    assert r.sequential.stopped == "cannot refute" and len(r.sequential.stages) == 1


def test_sequential_type_checked():
    with pytest.raises(InvalidParameterError, match="sequential"):
        audit(RandomizedResponse(epsilon=1.0), samples=2_000, sequential="yes")


def test_cli_sequential(capsys):
    code = run_cli(
        ["audit", "--mechanism", "rr", "--epsilon", "1", "--samples", "8000", "--sequential"]
        + ["--json", "--confidence", "0.999"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["sequential"]["samples_used"] == 8000
    assert [st["samples"] for st in out["sequential"]["stages"]] == [2_000, 6_000]


def test_sequential_same_seed_same_result():
    a = audit(RandomizedResponse(epsilon=1.0), samples=6_000, rng=np.random.default_rng(3),
              sequential=True).to_dict()  # fmt: skip
    b = audit(RandomizedResponse(epsilon=1.0), samples=6_000, rng=3, sequential=True).to_dict()
    for d in (a, b):
        d.pop("seconds")
        d["sequential"]["stages"] = [{**st, "seconds": 0} for st in d["sequential"]["stages"]]
    assert a == b


# -- issue 40: never a silent vacuous "no violation" ---------------------------------------------


class _RRClaiming:
    """k-ary randomized response at true epsilon ``true`` that claims ``claim``."""

    def __init__(self, true: float, claim: float, k: int = 2) -> None:
        self.inner, self.epsilon = RandomizedResponse(epsilon=true, k=k), claim

    def privatize(self, x, rng):
        return self.inner.privatize(x, rng)

    def candidate_pairs(self, dim):
        return self.inner.candidate_pairs(dim)


def _plain_no_violation(r) -> bool:
    return not r.violation and not r.inconclusive


def test_plan_stages_can_all_refute_the_claim():
    """Every stage of a multi-stage plan has a ceiling above the claim; the levels sum to alpha;
    a claim only the whole budget can refute gets the fixed-sample audit (one stage, alpha)."""
    from ldp_audit.audit import estimation_samples, max_refutable_epsilon, sequential_plan

    for budget, claims in ((100_000, (1.0, 7.0, 9.2, 10.0, 10.27)), (10**6, (1.0, 11.1, 12.5))):
        for c in claims:
            plan = sequential_plan(budget, c, 0.95)
            assert sum(n for n, _ in plan) == budget
            assert sum(a for _, a in plan) == pytest.approx(0.05, rel=1e-12)
            ceilings = [max_refutable_epsilon(estimation_samples(n), 1 - a) for n, a in plan]
            assert all(c < t for t in ceilings), (budget, c, plan, ceilings)
    # the issue's gaps: the doubling stages' ceilings stop at 9.13 (1e5) and 11.01 (1e6)
    assert sequential_plan(100_000, 9.5, 0.95) == [(100_000, pytest.approx(0.05))]
    assert sequential_plan(10**6, 12.3, 0.95) == [(10**6, pytest.approx(0.05))]
    # claim 1: the doubling schedule itself, stage 1 at alpha 6 / pi^2
    plan = sequential_plan(10**6, 1.0, 0.95)
    assert [n for n, _ in plan] == sequential_schedule(10**6)
    assert plan[0][1] == pytest.approx(sequential_alpha(0.05, 1))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_krr_true_11_claiming_10_budget_1e5_refuted_like_fixed_or_inconclusive(seed):
    """The issue's case: k-RR (k = 8) at true epsilon 11 claiming 10, budget 10^5. The claim
    lies in [9.13, 10.28), where the doubling stages cannot refute it; the plan is then the
    fixed-sample audit itself (same generator), so the sequential verdict *is* the fixed one:
    refuted when it is (seed 0: 10.074), else marked inconclusive (10 >= the one-count ceiling
    9.82: only an event never seen under x2 could refute it), never a plain "no violation"."""
    m = _RRClaiming(11.0, 10.0, k=8)
    kw = dict(samples=100_000, rng=seed, float_bits=False, tradeoff=False)
    fixed = audit(m, **kw)
    seq = audit(m, sequential=True, **kw)
    assert seq.epsilon_lower_bound == fixed.epsilon_lower_bound
    assert seq.violation == fixed.violation and seq.samples == 100_000
    assert not _plain_no_violation(seq) and not _plain_no_violation(fixed)
    if not seq.violation:
        assert seq.inconclusive and seq.to_dict()["inconclusive"] is True
        assert seq.distribution.consequence.startswith("INCONCLUSIVE")
        assert any(w.startswith("inconclusive: ") for w in seq.warnings)
        assert "INCONCLUSIVE" in seq.summary()


@pytest.mark.parametrize(
    ("budget", "claim"),
    [(100_000, c) for c in (9.2, 9.6, 10.0, 10.2)] + [(10**6, c) for c in (11.1, 11.8, 12.5)],
)
def test_claims_in_the_issue_ranges_are_refuted_when_broken(budget, claim):
    """Claims in [9.13, 10.28) at 10^5 and [11.01, 12.58) at 10^6 (the ranges where the old
    stages stopped with a silent "cannot refute"): randomized response at true epsilon 40 (the
    other input's output has probability 4e-18: P(seen in 10^6 draws) < 1e-11) is refuted
    every time, as by the fixed audit (whose bound is its ceiling, 10.28 / 12.58)."""
    m = _RRClaiming(40.0, claim)
    r = audit(m, samples=budget, rng=0, float_bits=False, tradeoff=False, sequential=True)
    assert r.violation and r.sequential.stopped == "refuted", r.summary()
    assert r.epsilon_lower_bound > claim


@pytest.mark.parametrize(("budget", "claim"), [(100_000, 9.9), (100_000, 10.2), (10**6, 12.3)])
def test_correct_mechanism_at_a_high_claim_is_inconclusive_not_plain(budget, claim):
    """A correct mechanism claiming epsilon above the one-count ceiling (9.82 at 10^5, 12.13 at
    10^6): no violation (false refutation <= 0.05 by the guarantee; seeded), and the result
    says it is inconclusive in its verdicts, warnings, summary and JSON."""
    m = RandomizedResponse(epsilon=claim)
    r = audit(m, samples=budget, rng=0, float_bits=False, tradeoff=False, sequential=True)
    assert not r.violation and r.inconclusive
    assert r.distribution.consequence.startswith("INCONCLUSIVE")
    assert json.loads(json.dumps(r.to_dict()))["inconclusive"] is True


def test_vacuous_claim_stops_after_one_stage_and_says_so():
    r = audit(RandomizedResponse(epsilon=12.0), samples=20_000, rng=0, sequential=True)
    assert r.sequential.stopped == "cannot refute" and r.inconclusive
    assert any("vacuous" in w for w in r.warnings)
    assert any("cannot be refuted by any stage" in w for w in r.warnings)
    assert r.distribution.consequence.startswith("INCONCLUSIVE")
    assert r.implementation.consequence.startswith("INCONCLUSIVE")


def test_cli_sequential_refusal_checks_the_stage_ceilings(capsys):
    """--sequential: a claim inside the fixed-sample ceiling (9.5 < 10.28 at 10^5) is run (a
    correct RR: no violation, exit 0), one at or above it is refused (exit 2)."""
    base = ["audit", "--mechanism", "rr", "--samples", "100000", "--sequential", "--json"]
    assert run_cli(base + ["--epsilon", "9.5", "--no-float-bits"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sequential"]["stages"][0]["samples"] == 100_000
    assert run_cli(base + ["--epsilon", "10.3"]) == 2
    err = capsys.readouterr().err
    assert "--sequential budget 100000" in err and "cannot be refuted" in err


@pytest.mark.parametrize("pool", [False, True])
def test_some_stage_can_refute_exactly_when_the_whole_budget_can(pool):
    """The CLI refuses a --sequential claim at the fixed-sample ceiling of the whole budget:
    that is the same as "no stage of sequential_plan can refute it" (merging)."""
    from ldp_audit.audit import estimation_samples, max_refutable_epsilon, sequential_plan

    for samples in (2_000, 20_000, 100_000, 1_000_000):
        top = max_refutable_epsilon(estimation_samples(samples), 0.95, pool)
        for claim in np.linspace(0.5, top + 1.0, 40):
            stages = sequential_plan(samples, float(claim), 0.95, pool=pool)
            best = max(max_refutable_epsilon(estimation_samples(n), 1 - a, pool) for n, a in stages)
            assert (claim < best) == (claim < top)
