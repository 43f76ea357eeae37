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

from ldp_audit.audit import audit, sequential_alpha, sequential_schedule
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
