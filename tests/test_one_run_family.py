"""The stated-family bounds (attacks/one_run_family.py, issue 36 item 4).

Golden numbers: Xiang, Wang & Wang (2025, arXiv 2501.17750) audit a Gaussian mechanism with
mu = 2 (true epsilon 9.997 at delta 1e-5) and report 9.688 from 10^5 observations; their mean
over mechanisms at 10^4 is 89.3 % of the true epsilon. Steinke et al.'s assumption-free bound is
capped by its ceiling. Every statistical assertion runs on fixed seeds; the false-failure
probability of each coverage test is stated beside it.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from ldp_audit.attacks.one_run_family import (
    GDP_ASSUMPTION,
    SGM_ASSUMPTION,
    _contribution_and_noise,
    _rdp_epsilon,
    gdp_epsilon,
    gdp_family_bound,
    sgm_epsilon,
    sgm_family_bound,
)
from ldp_audit.attacks.one_run_steinke import audit_scores, steinke_ceiling
from ldp_audit.errors import InvalidParameterError

TRUE_EPS_MU2 = 9.997  # G_2 at delta 1e-5 (Xiang et al.'s "true epsilon")


def _gaussian_game(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    inc = rng.random(m) < 0.5
    return rng.standard_normal(m) + mu * inc, inc


def test_gdp_epsilon_is_the_published_true_epsilon() -> None:
    assert gdp_epsilon(2.0, 1e-5) == pytest.approx(TRUE_EPS_MU2, abs=5e-4)
    assert gdp_epsilon(1.0, 1e-5) == pytest.approx(4.3772, abs=1e-3)
    assert gdp_epsilon(0.0, 1e-5) == 0.0
    assert gdp_epsilon(1e-9, 0.5) == 0.0  # delta(0) of G_mu below delta: epsilon 0


def test_gaussian_mu2_at_1e5_canaries_matches_xiang_et_al() -> None:
    """Xiang et al.: 9.688 of 9.997 at 10^5. Ours on three seeded games: each within 0.12 of
    9.688 and below the truth (a lower bound at 95 %: the three seeds measured 9.632, 9.729,
    9.666)."""
    got = []
    for seed in range(3):
        s, inc = _gaussian_game(2.0, 100_000, seed)
        r = gdp_family_bound(s, inc, delta=1e-5, confidence=0.95)
        assert r["assumption"] == GDP_ASSUMPTION and r["family"] == "mu-GDP"
        # a 95 % lower confidence bound on the true mu = 2 (a seed fails it with probability
        # at most 5 %), and within the documented 5 % of it
        assert 0.95 * 2.0 <= r["mu_lower_bound"] <= 2.0
        got.append(r["epsilon_lower_bound"])
    assert all(abs(g - 9.688) < 0.12 and g < TRUE_EPS_MU2 for g in got), got
    assert abs(np.mean(got) - 9.688) < 0.05


def test_gaussian_mu2_at_1e4_family_bound_against_steinke() -> None:
    """At 10^4 canaries the family bound reaches >= 90 % of the true epsilon (Xiang et al.:
    89.3 % on average); Steinke et al.'s assumption-free bound on the same scores (measured
    37-41 % of the truth; the issue's anchor says about 25 %) stays below its perfect-attacker
    ceiling, 64 % of the truth (6.39)."""
    ceiling = steinke_ceiling(10_000, delta=1e-5, beta=0.05 / 6)
    assert 0.6 * TRUE_EPS_MU2 < ceiling < 0.65 * TRUE_EPS_MU2
    for seed in range(3):
        s, inc = _gaussian_game(2.0, 10_000, seed)
        fam = gdp_family_bound(s, inc, delta=1e-5)["epsilon_lower_bound"]
        st = audit_scores(s, inc, delta=1e-5)["epsilon_lower_bound"]
        assert 0.90 * TRUE_EPS_MU2 < fam < TRUE_EPS_MU2
        assert 0.35 * TRUE_EPS_MU2 < st < 0.42 * TRUE_EPS_MU2 and st <= ceiling < fam


def test_gdp_family_bound_covers_mu() -> None:
    """200 seeded G_1 games of 400 canaries: the 95 % bound exceeds mu = 1 in at most 20.
    False-failure probability <= P[Bin(200, 0.05) >= 21] = 0.0016."""
    assert binom.sf(20, 200, 0.05) < 0.002
    over = sum(
        gdp_family_bound(*_gaussian_game(1.0, 400, 1000 + k), delta=1e-5)["mu_lower_bound"] > 1
        for k in range(200)
    )
    assert over <= 20


def _white_box(m: int, *, T: int, q: float, sigma: float, c: float, seed: int, data: float = 0):  # noqa: ANN202
    rng = np.random.default_rng(seed)
    inc = rng.random(m) < 0.5
    joins = (rng.random((T, m)) < q) & inc
    y = c * joins + sigma * rng.standard_normal((T, m))
    if data:  # a data gradient of norm `data` per update, projected on the directions
        y += data * rng.standard_normal((T, 1)) * rng.standard_normal((1, m)) / np.sqrt(m)
    return y, joins, inc


def test_noise_multiplier_bound_covers_the_truth() -> None:
    """200 seeded white-box models (sigma 1): the 95 % upper bound on the noise multiplier
    s / c is below the true 1 in at most 20. False failure <= 0.0016 (as above)."""
    under = 0
    for k in range(200):
        y, j, _ = _white_box(200, T=20, q=0.1, sigma=1.0, c=1.0, seed=k)
        _, _, c_lb, s_ub = _contribution_and_noise(y[j], y[~j], 0.05)
        under += c_lb > 0 and s_ub / c_lb < 1.0
    assert under <= 20


def test_sgm_bound_near_the_claim_at_1e4_and_refutes_half_sigma() -> None:
    """White-box model of the documented configuration (T 80, q 1/16, sigma 1): at 10^4
    canaries the bound is >= 0.95 x the true epsilon; noise at sigma / 2 against the claim sigma
    is refuted at 500 canaries."""
    true = sgm_epsilon(1.0, 1 / 16, 80, 1e-5)
    assert 3.85 < true < 4.0  # dp_accounting, optimistic rounding (PRV upper: 3.96)
    y, j, inc = _white_box(10_000, T=80, q=1 / 16, sigma=1.0, c=1.0, seed=0, data=0.5)
    r = sgm_family_bound(y, j, inc, sample_rate=1 / 16, delta=1e-5)
    assert r["assumption"] == SGM_ASSUMPTION and r["family"] == "subsampled Gaussian"
    assert 0.95 * true < r["epsilon_lower_bound"] <= true
    # an upper confidence bound on the true noise multiplier 1 (fails with probability <= 5 %);
    # its tightness is what the epsilon bound's >= 0.95 x true above already asserts
    assert r["noise_multiplier_upper_bound"] >= 1.0
    y, j, inc = _white_box(500, T=80, q=1 / 16, sigma=0.5, c=1.0, seed=0)
    half = sgm_family_bound(y, j, inc, sample_rate=1 / 16, delta=1e-5)
    assert half["epsilon_lower_bound"] > 2 * true
    # noise at sigma / 16 (divided by the batch): the PLD cannot compose it; a larger sigma can
    y, j, inc = _white_box(200, T=80, q=1 / 16, sigma=1 / 16, c=1.0, seed=0)
    tiny = sgm_family_bound(y, j, inc, sample_rate=1 / 16, delta=1e-5)
    assert tiny["epsilon_lower_bound"] > 10 * true
    assert tiny["epsilon_computed_at"] >= tiny["noise_multiplier_upper_bound"]
    assert tiny["epsilon_lower_bound"] <= _rdp_epsilon(tiny["epsilon_computed_at"], 1 / 16, 80,
                                                       1e-5)  # fmt: skip


def test_sgm_bound_without_joins_or_signal_is_zero() -> None:
    y, j, inc = _white_box(100, T=5, q=0.1, sigma=1.0, c=0.0, seed=3)
    r = sgm_family_bound(y, j, inc, sample_rate=0.1, delta=1e-5)
    assert r["epsilon_lower_bound"] < 0.5  # c = 0: no leakage to bound away from 0
    r = sgm_family_bound(y, np.zeros_like(j), inc, sample_rate=0.1, delta=1e-5)
    assert r["epsilon_lower_bound"] == 0.0 and r["joins"] == 0


def test_bad_input_is_refused() -> None:
    s, inc = _gaussian_game(1.0, 50, 0)
    with pytest.raises(InvalidParameterError, match="included"):
        gdp_family_bound(s, inc.astype(int), delta=1e-5)
    with pytest.raises(InvalidParameterError, match="both"):
        gdp_family_bound(s, np.ones(50, dtype=bool), delta=1e-5)
    with pytest.raises(InvalidParameterError, match="delta"):
        gdp_family_bound(s, inc, delta=True)
    with pytest.raises(InvalidParameterError, match="delta"):
        gdp_family_bound(s, inc, delta=1.5)
    with pytest.raises(InvalidParameterError, match="scores"):
        gdp_family_bound(np.r_[s[:-1], np.nan], inc, delta=1e-5)
    with pytest.raises(InvalidParameterError, match="mu"):
        gdp_epsilon(-1.0, 1e-5)
    y, j, inc = _white_box(20, T=4, q=0.5, sigma=1.0, c=1.0, seed=0)
    with pytest.raises(InvalidParameterError, match="joins"):
        sgm_family_bound(y, j.astype(int), inc, sample_rate=0.5, delta=1e-5)
    with pytest.raises(InvalidParameterError, match="excluded canary joined"):
        sgm_family_bound(y, j | ~inc, inc, sample_rate=0.5, delta=1e-5)
    with pytest.raises(InvalidParameterError, match="sample_rate"):
        sgm_family_bound(y, j, inc, sample_rate=0.0, delta=1e-5)
    with pytest.raises(InvalidParameterError, match="sample_rate"):
        sgm_family_bound(y, j, inc, sample_rate="0.5", delta=1e-5)
    with pytest.raises(InvalidParameterError, match="updates"):
        sgm_epsilon(1.0, 0.5, True, 1e-5)
    with pytest.raises(InvalidParameterError, match="noise_multiplier"):
        sgm_epsilon(0.0, 0.5, 3, 1e-5)
