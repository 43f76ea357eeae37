"""The Gaussian-family bound of an audit (``TradeoffCurve.family_mu_lower`` /
``family_epsilon_lower``): its arithmetic, its soundness and tightness on a correct Gaussian, a
broken Gaussian refuted, and no family statement where the claim is not a Gaussian's.

Statistical assertions: each seeded audit's family bound is a lower confidence bound at 0.95
(or at ``STRICT``), so "bound <= truth" fails with probability <= 5 % (<= 1e-6) per seed; the
tightness assertions sit 4 standard errors of the mu estimate below the truth (failure
probability < 1e-4 each, normal approximation of the two binomial counts).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ndtri

from ldp_audit.audit import audit
from ldp_audit.audit.tradeoff import FAMILY_ASSUMPTION, gaussian_family_bound
from ldp_audit.mechanisms import (
    Gaussian,
    Laplace,
    analytic_gaussian_delta,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
)
from ldp_audit.stats import clopper_pearson_lower, clopper_pearson_upper
from tests.test_audit_fdp import GPAIR, STRICT, HalfSigmaGaussian


def test_family_bound_arithmetic():
    mu, eps, dl = gaussian_family_bound(3000, 10_000, 7000, 10_000, 0.05, 1e-3, 1.0)
    a_u = clopper_pearson_upper(3000, 10_000, 0.025)
    b_u = 1.0 - clopper_pearson_lower(7000, 10_000, 0.025)
    assert mu == pytest.approx(ndtri(1 - a_u) - ndtri(b_u), rel=1e-12)
    assert eps == pytest.approx(analytic_gaussian_epsilon(1.0, mu, 1e-3), rel=1e-9)
    assert dl == pytest.approx(analytic_gaussian_delta(1.0, 1.0, mu), rel=1e-12)
    # no separation: mu clipped at 0, epsilon 0
    assert gaussian_family_bound(5000, 10_000, 5000, 10_000, 0.05, 1e-3, 1.0) == (0, 0, 0)
    assert "G_mu" in FAMILY_ASSUMPTION


def test_correct_gaussian_family_bound_sound_and_tight():
    s = analytic_gaussian_sigma(1.0, 2.0, 1e-3)
    g = Gaussian(clip=1.0, noise_multiplier=s, delta=1e-3)
    for seed in range(3):
        r = audit(g, GPAIR, samples=100_000, rng=seed, float_bits=False, profile=False)
        t = r.tradeoff
        assert t.family_mu_lower <= 2.0 / s and t.family_epsilon_lower <= 1.0
        assert 0.0 < t.family_delta_lower <= 1e-3  # the assumption-free one is 0 at 10^5
        # the mu estimate's standard error at 90,000 per input is sqrt(pi / n) = 0.0059; the
        # two Clopper-Pearson margins (1.96 standard errors each) take 0.0165 more
        assert t.family_mu_lower >= 2.0 / s - 4 * math.sqrt(math.pi / 90_000) - 0.017
        assert t.family_epsilon_lower > r.epsilon_lower_bound  # tighter than the verdict
        assert "Gaussian-family bound (ASSUMES" in r.summary()
        d = r.to_dict()["tradeoff"]
        assert d["family_epsilon_lower"] == t.family_epsilon_lower


def test_half_sigma_gaussian_refuted_by_the_family_bound():
    r = audit(HalfSigmaGaussian(), GPAIR, samples=20_000, rng=0, confidence=STRICT,
              float_bits=False, profile=False)  # fmt: skip
    t = r.tradeoff
    # the truth is mu = 2 (epsilon 7.58 at 1e-3); claimed mu = 1, epsilon 3.14
    assert t.family_mu_lower <= 2.0 and t.family_epsilon_lower <= analytic_gaussian_epsilon(
        1.0, 2.0, 1e-3
    )
    assert t.family_epsilon_lower > r.claimed_epsilon and "ABOVE the claim" in r.summary()


def test_no_family_statement_without_a_gaussian_claim():
    r = audit(Laplace(epsilon=1.0, clip=1.0), GPAIR, samples=20_000, rng=0, float_bits=False,
              profile=False)  # fmt: skip
    assert r.tradeoff.family_mu_lower is None and r.tradeoff.family_epsilon_lower is None
    assert "Gaussian-family" not in r.summary()
    assert np.isfinite(r.tradeoff.type1_upper).all()
