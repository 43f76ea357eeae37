"""audit(): the lower bound on delta at the claimed epsilon, and the stated resolution.

A Gaussian that claims sigma 2 (epsilon 3.14 at delta 1e-3 for the pair +-1, L2 distance 2)
but adds sigma 1 has true delta 0.167 at the claimed epsilon (mu = 2); its delta bound must
refute the claim (a false claim: no false-failure probability) and stay below 0.167 (a
Clopper-Pearson/Bonferroni statement at confidence 0.95 for this fixed seed). The correct
Gaussian is audited at confidence 1 - 1e-6: its delta bound exceeds its true delta (exactly the
claimed 1e-3 on the worst pair) with probability <= 1e-6.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from ldp_audit.audit import audit, estimation_samples, max_refutable_epsilon
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import Gaussian, RandomizedResponse
from ldp_audit.stats import clopper_pearson_lower, clopper_pearson_upper
from tests.test_audit_cli import run_cli

STRICT = 1 - 1e-6
GPAIR = [(np.array([1.0]), np.array([-1.0]))]


class HalfSigmaGaussian:
    """Claims Gaussian(clip 1, sigma 2) at delta 1e-3 but adds sigma 1."""

    def __init__(self) -> None:
        self.claim = Gaussian(clip=1.0, noise_multiplier=2.0, delta=1e-3)
        self.real = Gaussian(clip=1.0, noise_multiplier=1.0, delta=1e-3)
        self.epsilon, self.delta = self.claim.epsilon, self.claim.delta

    def privatize(self, x, rng):
        return self.real.privatize(x, rng)


def true_delta(eps: float, mu: float) -> float:
    """The Gaussian's exact delta at eps for mu = distance / sigma (Balle & Wang 2018)."""
    return float(
        sps.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * sps.norm.cdf(-eps / mu - mu / 2)
    )


def test_delta_bound_refutes_too_small_sigma():
    m = HalfSigmaGaussian()
    r = audit(m, GPAIR, samples=20_000, rng=0, float_bits=False, tradeoff=False)
    assert r.delta_in_verdict and r.delta_confidence == r.confidence
    assert r.delta_lower_bound > m.delta and r.delta_violation and r.violation
    assert r.delta_lower_bound <= true_delta(m.epsilon, 2.0)  # = 0.167
    # the witness event's own delta bound, from its counts and the verdicts' intervals
    w = r.witness
    a, mm = 1 - r.confidence, r.events_estimated
    lo = clopper_pearson_lower(w.k1, w.n1, a * w.numerator_share / mm)
    hi = clopper_pearson_upper(w.k2, w.n2, a * (1 - w.numerator_share) / mm)
    assert lo - math.exp(m.epsilon) * hi <= r.delta_lower_bound + 1e-15
    d = json.loads(json.dumps(r.to_dict()))
    assert d["delta_lower_bound"] == r.delta_lower_bound and d["delta_violation"] is True
    assert "delta lower bound at the claimed epsilon" in r.summary()


def test_delta_bound_sound_on_correct_gaussian():
    g = Gaussian(clip=1.0, noise_multiplier=2.0, delta=1e-3)
    r = audit(g, GPAIR, samples=20_000, rng=1, confidence=STRICT, float_bits=False)
    assert 0.0 <= r.delta_lower_bound <= 1e-3 and not r.delta_violation and not r.violation


def test_delta_event_tightens_the_delta_bound():
    """At 10^5 samples the verdicts' events sit in the far tail (largest ratio, little mass):
    their delta bound is 0.087 of the true 0.167; the delta-targeted event gives 0.153."""
    m = HalfSigmaGaussian()
    kw = dict(samples=100_000, rng=0, float_bits=False, profile=False, tradeoff=False)
    r0 = audit(m, GPAIR, **kw)
    r1 = audit(m, GPAIR, delta_event=True, **kw)
    assert r1.events_estimated == r0.events_estimated + 1
    assert r0.delta_lower_bound < 0.12 < r1.delta_lower_bound <= true_delta(m.epsilon, 2.0)
    assert r1.violation and r1.delta_in_verdict


def test_delta_event_sound_on_correct_gaussian_and_refused_for_pure_claims(capsys):
    """Session 56: ``delta_event=True`` (``--delta-event``) with a pure claim was silently
    ignored; it is refused by name before any sample is drawn."""
    g = Gaussian(clip=1.0, noise_multiplier=2.0, delta=1e-3)
    r = audit(g, GPAIR, samples=50_000, rng=2, confidence=STRICT, float_bits=False,
              delta_event=True)  # fmt: skip
    assert 0.0 <= r.delta_lower_bound <= 1e-3 and not r.violation
    rr = RandomizedResponse(epsilon=1.0)
    with pytest.raises(InvalidParameterError, match=r"delta_event \(--delta-event\) needs a"):
        audit(rr, samples=3_000, rng=0, delta_event=True)
    argv = ["audit", "--mechanism", "laplace", "--epsilon", "1", "--delta-event"]
    assert run_cli(argv) == 2
    assert "--delta-event) needs a claim with delta > 0" in capsys.readouterr().err


def test_poisson_delta_bound_is_its_own_statement():
    m = HalfSigmaGaussian()
    r = audit(m, GPAIR, samples=20_000, rng=0, float_bits=False, ratio_test="poisson")
    assert not r.delta_in_verdict and r.delta_lower_bound > m.delta
    assert r.to_dict()["delta_in_verdict"] is False


def test_pure_claim_has_no_delta_bound_but_a_resolution():
    r = audit(RandomizedResponse(epsilon=1.0), samples=5_000, rng=0, confidence=0.9)
    assert r.delta_lower_bound is None and not r.delta_violation
    n_est = estimation_samples(5_000)
    ceiling = max_refutable_epsilon(n_est, 0.9)
    assert r.max_refutable_epsilon == ceiling
    # a zero count among n_est trials at error share 0.9 (1 - confidence): 1 - a^(1/n_est)
    assert math.isclose(r.resolution_probability, 1 - (0.9 * 0.1) ** (1 / n_est), rel_tol=1e-9)
    assert math.isclose(r.resolution_probability, math.exp(-ceiling), rel_tol=1e-12)
    d = r.to_dict()
    assert d["resolution_probability"] == r.resolution_probability
    assert d["max_refutable_epsilon"] == ceiling and d["delta_lower_bound"] is None
    assert "resolution: events of probability below" in r.summary()


def test_cli_delta_event_json(capsys):
    code = run_cli(
        ["audit", "--mechanism", "gaussian", "--sigma", "2", "--clip", "1", "--delta", "1e-3"]
        + ["--samples", "20000", "--delta-event", "--no-float-bits", "--json"]
        + ["--confidence", "0.999999"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["delta_in_verdict"] is True
    assert 0.0 <= out["delta_lower_bound"] <= 1e-3 and out["delta_violation"] is False
    assert out["resolution_probability"] > 0 and out["max_refutable_epsilon"] > 0


def test_a_claimed_delta_is_printed_as_claimed():
    """Session 58 probe: a claim at delta 0.999999999 printed "claimed epsilon: 1 ((epsilon,
    delta=1))", its profile point "1: 0" and "claimed 1" (six significant digits): delta = 1,
    no guarantee at all, is not the claim audited."""
    g = Gaussian(clip=1.0, noise_multiplier=1.0, delta=1 - 1e-9)
    r = audit(g, [(np.array([1.0]), np.array([-1.0]))], samples=1_000, rng=0, tradeoff=False)
    text = r.summary()
    assert "(epsilon, delta=0.999999999)" in text and "(claimed 0.999999999;" in text
    assert "0.999999999: 0 (claim" in text and "delta=1)" not in text
