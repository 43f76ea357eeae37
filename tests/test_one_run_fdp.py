"""f-DP one-run bound and the white-box claimed-mechanism test (attacks/one_run.py), synthetic.

Every statistical assertion runs on fixed seeds; where a test is a level-``beta`` test its false
failure probability is stated beside it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from ldp_audit.attacks.one_run import (
    fdp_audit_scores,
    fdp_tail_bound,
    gdp_delta,
    gdp_mu_lower_bound,
    mechanism_test,
    profile_lines,
)
from ldp_audit.errors import InvalidParameterError


@pytest.mark.parametrize("eps, k, v", [(1.0, 20, 15), (1.0, 100, 70), (0.3, 60, 40), (2.0, 40, 38)])
def test_pure_eps_lp_is_steinke_binomial_tail(eps: float, k: int, v: int) -> None:
    """With one pure-DP line the LP optimum is exactly P[Bin(k, e^eps / (1 + e^eps)) >= v]."""
    lines = profile_lines([eps], [0.0])
    expect = binom.sf(v - 1, k, 1 / (1 + math.exp(-eps)))
    assert fdp_tail_bound(1000, k, v, lines) == pytest.approx(expect, abs=1e-7)


def test_gdp_profile_closed_form_and_monotone() -> None:
    for mu in (0.3, 1.0, 2.5):
        assert gdp_delta(mu, 0.0) == pytest.approx(norm.cdf(mu / 2) - norm.cdf(-mu / 2))
    e = np.linspace(0, 8, 50)
    d = gdp_delta(1.0, e)
    assert (np.diff(d) < 0).all() and (d >= 0).all()
    assert (gdp_delta(2.0, e) >= d).all()
    with pytest.raises(InvalidParameterError, match="mu"):
        gdp_delta(0.0, 1.0)
    with pytest.raises(InvalidParameterError, match="delta"):
        profile_lines([1.0], [1.5])


def _gdp(mu: float) -> tuple[np.ndarray, np.ndarray]:
    e = np.linspace(0, mu * mu / 2 + 7 * mu + 1, 24)
    return profile_lines(e, gdp_delta(mu, e))


def test_tail_bound_grows_with_mu_and_edge_cases() -> None:
    p = [fdp_tail_bound(400, 60, 55, _gdp(mu)) for mu in (0.5, 1.0, 2.0)]
    assert p[0] < p[1] < p[2] <= 1.0
    assert fdp_tail_bound(400, 60, 0, _gdp(1.0)) == 1.0
    with pytest.raises(InvalidParameterError, match="v <= r <= m"):
        fdp_tail_bound(10, 20, 5, _gdp(1.0))


def _gaussian_game(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """m independent canaries, score N(mu * bit, 1): exactly G_mu-DP for each canary."""
    rng = np.random.default_rng(seed)
    bits = rng.random(m) < 0.5
    return rng.standard_normal(m) + mu * bits, bits


def test_fdp_test_sound_on_a_true_gdp_mechanism() -> None:
    """A G_1 mechanism audited against G_1: 8 seeded games at level 0.05 each; P[>= 3 false
    rejections] <= P[Bin(8, 0.05) >= 3] = 0.006."""
    rejected = 0
    for seed in range(8):
        s, b = _gaussian_game(1.0, 400, seed)
        res = fdp_audit_scores(s, b, _gdp(1.0), confidence=0.95)
        rejected += res["rejected"]
        assert all(0 <= r["p_value"] <= 1 for r in res["p_values"])
    assert rejected <= 2


def test_fdp_test_rejects_a_much_leakier_mechanism_and_bounds_mu() -> None:
    """G_4 audited against the claim G_1 (seed 0: all top guesses correct)."""
    s, b = _gaussian_game(4.0, 800, 0)
    res = fdp_audit_scores(s, b, _gdp(1.0), confidence=0.95, mu=1.0)
    assert res["rejected"]
    assert res["mu_lower_bound"] > 1.0
    assert gdp_mu_lower_bound(800, 40, 20, beta=0.05) == 0.0  # chance accuracy proves nothing


def _updates(T, m, *, sigma, kappa, rate, data, seed, noise_scale=1.0):  # noqa: ANN001, ANN202
    """(T, m) canary projections in units of C: adversarial data at the Bessel bound."""
    rng = np.random.default_rng(seed)
    inc = rng.random(m) < 0.5
    w = np.where(inc, 1 / inc.sum(), -1 / (~inc).sum())
    join = rng.random((T, m)) < rate
    y = kappa * (inc & join) + noise_scale * sigma * rng.standard_normal((T, m))
    y += data * w / np.linalg.norm(w)  # data gradients of total norm `data` aimed at the test
    return y, inc


def test_mechanism_test_sound_with_worst_case_data() -> None:
    """Correct mechanism, data gradients pushing the statistic up as far as clipping allows.

    10 seeded repeats at level 0.05 each: P[>= 3 false rejections] <= 0.012."""
    rej = 0
    for seed in range(10):
        for rate in (1.0, 0.3):
            y, inc = _updates(20, 400, sigma=3.0, kappa=1.0, rate=rate, data=4.0, seed=seed)
            r = mechanism_test(y, inc, sigma=3.0, sample_rate=rate, data_per_update=4)
            rej += r["rejected"]
            assert r["rate_lower_bound"] <= rate + 1e-9 or r["rejected"]
    assert rej <= 2


@pytest.mark.parametrize(
    "bug, kw",
    [
        ("per-layer sensitivity 1.7 C", dict(kappa=1.7, rate=1.0)),
        ("rate twice the charged one", dict(kappa=1.0, rate=0.6)),
        ("noise sigma / 10", dict(kappa=1.0, rate=1.0, noise_scale=0.1)),
    ],
)
def test_mechanism_test_flags_each_bug(bug: str, kw: dict) -> None:  # noqa: ARG001
    y, inc = _updates(40, 800, sigma=3.0, data=1.0, seed=0, **kw)
    charged = 0.3 if kw["rate"] < 1 else 1.0
    r = mechanism_test(y, inc, sigma=3.0, sample_rate=charged, data_per_update=1)
    assert r["rejected"]
    assert min(r["p_mean"], r["p_noise"]) < 1e-4


def test_mechanism_test_refuses_bad_input() -> None:
    y, inc = _updates(5, 20, sigma=1.0, kappa=1.0, rate=1.0, data=0.0, seed=0)
    with pytest.raises(InvalidParameterError, match="sigma"):
        mechanism_test(y, inc, sigma=0.0, sample_rate=1.0, data_per_update=1)
    with pytest.raises(InvalidParameterError, match="sample_rate"):
        mechanism_test(y, inc, sigma=1.0, sample_rate=0.0, data_per_update=1)
    with pytest.raises(InvalidParameterError, match="projections"):
        mechanism_test(y[:, :5], inc, sigma=1.0, sample_rate=1.0, data_per_update=1)
    with pytest.raises(InvalidParameterError, match="data_per_update"):
        mechanism_test(y, inc, sigma=1.0, sample_rate=1.0, data_per_update=-1)
    with pytest.raises(InvalidParameterError, match="data_per_update"):
        mechanism_test(y, inc, sigma=1.0, sample_rate=1.0, data_per_update=[1, 2])
