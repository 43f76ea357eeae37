"""ldp_audit.stats: the joint Poisson ratio bound and the f-DP helpers (exact values first)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from ldp_audit import stats
from ldp_audit.errors import InvalidParameterError


def test_gaussian_tradeoff_closed_forms():
    # G_0 is 1 - alpha (no information); G_1(0.05) = Phi(z_0.95 - 1)
    a = np.array([0.0, 0.05, 0.3, 1.0])
    assert np.allclose(stats.gaussian_tradeoff(a, 0.0), 1.0 - a)
    assert stats.gaussian_tradeoff(0.05, 1.0) == pytest.approx(sps.norm.cdf(1.6448536269514722 - 1))
    assert stats.gaussian_tradeoff(0.0, 3.0) == 1.0 and stats.gaussian_tradeoff(1.0, 3.0) == 0.0
    # symmetric: G_mu is its own inverse, G_mu(G_mu(a)) = a
    g = stats.gaussian_tradeoff(np.linspace(0.01, 0.99, 9), 1.5)
    assert np.allclose(stats.gaussian_tradeoff(g, 1.5), np.linspace(0.01, 0.99, 9))
    # the exact trade-off of N(0,1) vs N(mu,1): the Neyman-Pearson test rejects above z_{1-a}
    mu, al = 0.7, 0.2
    z = sps.norm.isf(al)
    assert stats.gaussian_tradeoff(al, mu) == pytest.approx(sps.norm.cdf(z - mu))


def test_eps_delta_tradeoff_closed_forms():
    e, d = 1.0, 0.01
    assert stats.eps_delta_tradeoff(0.0, e, d) == pytest.approx(1 - d)
    assert stats.eps_delta_tradeoff(0.1, e, d) == pytest.approx(1 - d - math.e * 0.1)
    assert stats.eps_delta_tradeoff(0.5, e, d) == pytest.approx(math.exp(-1) * (1 - d - 0.5))
    assert stats.eps_delta_tradeoff(1.0, e, d) == 0.0
    # an epsilon past exp's overflow (709.8) is the curve max(0, e^-eps (1 - d - alpha)) = 0
    assert np.array_equal(stats.eps_delta_tradeoff([0.0, 0.5], 1e300, d), [1 - d, 0.0])
    # epsilon = 0, delta = 0: no information, 1 - alpha
    a = np.linspace(0, 1, 11)
    assert np.allclose(stats.eps_delta_tradeoff(a, 0.0, 0.0), 1 - a)
    # the curve lies above G_mu's where (eps, delta) is the analytic-Gaussian pair of mu = 1
    from ldp_audit.mechanisms import analytic_gaussian_epsilon

    eps = analytic_gaussian_epsilon(1.0, 1.0, 1e-3)
    a = np.linspace(0.001, 0.999, 200)
    assert np.all(stats.eps_delta_tradeoff(a, eps, 1e-3) <= stats.gaussian_tradeoff(a, 1.0) + 1e-9)


def test_fdp_helpers_validate():
    with pytest.raises(InvalidParameterError, match="alpha"):
        stats.gaussian_tradeoff(1.5, 1.0)
    with pytest.raises(InvalidParameterError, match="mu"):
        stats.gaussian_tradeoff(0.5, -1.0)
    with pytest.raises(InvalidParameterError, match="mu"):
        stats.gaussian_tradeoff(0.5, "1")
    with pytest.raises(InvalidParameterError, match="epsilon"):
        stats.eps_delta_tradeoff(0.5, -0.1)
    with pytest.raises(InvalidParameterError, match="delta"):
        stats.eps_delta_tradeoff(0.5, 1.0, 1.0)
    with pytest.raises(InvalidParameterError, match="k_null"):
        stats.tradeoff_points_from_counts([11], 10, [1], 10, 0.05)
    with pytest.raises(InvalidParameterError, match="k1"):
        stats.poisson_ratio_lower(-1, 3, 0.05)
    with pytest.raises(InvalidParameterError, match="mean1"):
        stats.epsilon_lower_bound_from_poisson_counts(3, 3, 0.05, mean1=0)


def test_tradeoff_points_are_bonferroni_clopper_pearson():
    k0, k1 = np.array([10, 100, 400]), np.array([300, 700, 950])
    a_u, b_u = stats.tradeoff_points_from_counts(k0, 1000, k1, 1000, 0.06)
    per = 0.06 / 6
    assert np.allclose(a_u, stats.clopper_pearson_upper(k0, 1000, per))
    assert np.allclose(b_u, 1 - stats.clopper_pearson_lower(k1, 1000, per))


def test_tradeoff_points_coverage_exact():
    # one test, P0(S) = 0.2, P1(S) = 0.6, n = 40 each: the points fail (T(a_U) > b_U is implied
    # only if a_U < a or b_U < b) with probability <= alpha, computed exactly from the binomials
    n, a0, a1, alpha = 40, 0.2, 0.6, 0.1
    k = np.arange(n + 1)
    # one event (K = 1) per call: its two bounds are at alpha / 2 each
    pts = [stats.tradeoff_points_from_counts([j], n, [j], n, alpha) for j in k]
    a_u = np.array([float(p[0][0]) for p in pts])
    b_u = np.array([float(p[1][0]) for p in pts])
    fail0 = sps.binom.pmf(k, n, a0)[a_u < a0].sum()
    fail1 = sps.binom.pmf(k, n, a1)[b_u < 1 - a1].sum()
    assert fail0 <= alpha / 2 and fail1 <= alpha / 2
    assert fail0 >= 0.2 * alpha / 2  # exact Clopper-Pearson: not vacuous


def test_poisson_ratio_lower_matches_conditional_binomial():
    # theta_L = Clopper-Pearson lower bound of k1 of k1 + k2 (scipy's exact binomial interval)
    for k1, k2 in [(5, 3), (40, 12), (450_000, 407_000), (7, 0)]:
        ci = sps.binomtest(k1, k1 + k2).proportion_ci(confidence_level=0.9, method="exact")
        want = ci.low / (1 - ci.low)
        assert stats.poisson_ratio_lower(k1, k2, 0.05) == pytest.approx(want, rel=1e-9)
    assert stats.poisson_ratio_lower(0, 5, 0.05) == 0.0
    assert stats.poisson_ratio_lower(0, 0, 0.05) == 0.0
    # k2 = 0: theta_L = alpha^(1/k1)
    th = 0.05 ** (1 / 7)
    assert stats.poisson_ratio_lower(7, 0, 0.05) == pytest.approx(th / (1 - th))
    e = stats.epsilon_lower_bound_from_poisson_counts(7, 0, 0.05, mean1=100, mean2=200)
    assert e == pytest.approx(math.log(th / (1 - th)) + math.log(2))
    assert stats.epsilon_lower_bound_from_poisson_counts(0, 4, 0.05) == -math.inf


@pytest.mark.parametrize("alpha", [0.05, 0.2])
def test_poisson_ratio_bound_coverage_exact(alpha):
    # P(bound > true ratio) summed exactly over the Poisson pmfs (k up to 200: the omitted mass
    # is < 1e-15 for these means) on a grid of rates with l1 = c l2 (the boundary of the null)
    k = np.arange(201)
    k1, k2 = np.meshgrid(k, k, indexing="ij")
    bound = stats.poisson_ratio_lower(k1, k2, alpha)
    worst = 0.0
    for lam2 in (0.05, 0.5, 2.0, 10.0, 30.0):
        for c in (1.0, math.e, 20.0):
            lam1 = c * lam2
            if lam1 > 120:
                continue
            p = np.outer(sps.poisson.pmf(k, lam1), sps.poisson.pmf(k, lam2))
            fail = float(p[bound > c].sum())
            assert fail <= alpha + 1e-12, (lam1, lam2, fail)
            worst = max(worst, fail)
    assert worst >= 0.3 * alpha  # and not vacuous: close to the level somewhere


def test_augmented_bound_is_the_inf_of_the_non_rejected_set():
    # L = inf {c >= 1 : the conditional test of (k1, k2 + A_c) does not reject c}: every c below
    # L is rejected (what soundness needs) and L itself is not rejected (tightness)
    rng = np.random.default_rng(5)
    positive = 0
    for _ in range(30):
        d = float(rng.choice([0.5, 5.0, 50.0]))
        arr = rng.uniform(size=rng.poisson(d))
        k1, k2 = int(rng.integers(0, 400)), int(rng.integers(0, 40))
        e = stats.epsilon_lower_bound_from_poisson_counts_delta(
            k1, k2, 0.05, delta_count=d, arrivals=arr
        )
        big_l = math.exp(e)

        def rejects(c, k1=k1, k2=k2, arr=arr):
            a_c = int(np.sum(arr <= 1.0 / c))
            return stats.poisson_ratio_lower(k1, k2 + a_c, 0.05) > c

        if e > 0:  # every c in [1, L) is rejected
            for c in np.exp(np.linspace(0.0, e, 60))[:-1]:
                assert rejects(c), (k1, k2, d, c, big_l)
            positive += 1
        assert not rejects(big_l * (1 + 1e-9))
    assert positive >= 10


def test_augmented_bound_coverage_simulated():
    # on the boundary l1 = c l2 + D of (eps, delta)-DP, P(bound > ln c) <= alpha: 10,000 draws
    # per setting, failures ~ Binomial(10000, <= 0.1); P(more than 1,120) < 4e-5 (4.0 sd)
    rng = np.random.default_rng(11)
    alpha = 0.1
    for lam2, c, d in ((3.0, math.e, 5.0), (30.0, 20.0, 100.0), (0.2, 50.0, 2.0)):
        lam1 = c * lam2 + d
        fails = 0
        for _ in range(10_000):
            k1, k2 = int(rng.poisson(lam1)), int(rng.poisson(lam2))
            arr = rng.uniform(size=rng.poisson(d))
            b = stats.epsilon_lower_bound_from_poisson_counts_delta(
                k1, k2, alpha, delta_count=d, arrivals=arr
            )
            fails += b > math.log(c)
        assert fails <= 1_120, (lam2, c, d, fails)
    with pytest.raises(InvalidParameterError, match="arrivals"):
        stats.epsilon_lower_bound_from_poisson_counts_delta(3, 1, 0.1, delta_count=1, arrivals=[2])
    with pytest.raises(InvalidParameterError, match="k1"):
        stats.epsilon_lower_bound_from_poisson_counts_delta(3.5, 1, 0.1, delta_count=1, arrivals=[])
