"""f-DP one-run bound and the full-batch (q = 1) contribution test (attacks/one_run.py), synthetic.

Every statistical assertion runs on fixed seeds; where a test is a level-``beta`` test its false
failure probability is stated beside it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from ldp_audit.attacks.one_run_fdp import (
    fdp_audit_scores,
    fdp_tail_bound,
    gdp_delta,
    gdp_mu_lower_bound,
    profile_lines,
)
from ldp_audit.attacks.one_run_tests import contribution_test
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


def _full(y, inc, n, **kw):  # noqa: ANN001, ANN003, ANN202
    """contribution_test at q = 1: every included canary joins every update."""
    joins = np.broadcast_to(inc, y.shape)
    return contribution_test(y, joins, inc, np.full(y.shape[0], n), sigma=3.0, sample_rate=1.0,
                             **kw)  # fmt: skip


def test_full_batch_contribution_sound_with_worst_case_data() -> None:
    """q = 1, correct mechanism, data gradients of norm 4 per update aimed at the statistic
    (both signs, at the Bessel bound). 20 seeded repeats at level 0.05 each: P[>= 4 false
    rejections] <= 0.016."""
    rej = 0
    for seed in range(10):
        for sign in (1.0, -1.0):
            y, inc = _updates(20, 400, sigma=3.0, kappa=1.0, rate=1.0, data=4.0 * sign, seed=seed)
            r = _full(y, inc, 4)
            rej += r["rejected"]
            assert r["contribution"] == pytest.approx(1.0, abs=6 * r["contribution_sd"] + 0.2)
    assert rej <= 3


@pytest.mark.parametrize("kappa, side", [(1.7, "p_excess"), (0.3, "p_deficit")],
                         ids=["per-layer clipping", "aggregate clipping"])  # fmt: skip
def test_full_batch_contribution_flags_clipping_bugs(kappa: float, side: str) -> None:
    y, inc = _updates(40, 800, sigma=3.0, kappa=kappa, rate=1.0, data=1.0, seed=0)
    r = _full(y, inc, 1)
    assert r["rejected"] and r[side] < 1e-4


def test_full_batch_contribution_sees_a_clipping_changed_on_some_updates_only() -> None:
    """Session 54: the windows at q = 1 too (train dprl's REINFORCE). A canary counted 1.8 C on
    updates 10-19 of 40 (300 canaries, seed 1): the whole run's tail 0.044 is above the
    level's share (read consistent before), the window 10-20's p 4.2e-12."""
    ya, inc = _updates(40, 300, sigma=3.0, kappa=1.0, rate=1.0, data=1.0, seed=1)
    yb, _ = _updates(40, 300, sigma=3.0, kappa=1.8, rate=1.0, data=1.0, seed=1)
    ya[10:20] = yb[10:20]
    r = _full(ya, inc, 1, confidence=1 - 0.05 / 6)
    assert min(r["p_excess"], r["p_deficit"]) > 0.05 / 6, r
    assert r["rejected"] and r["p_windows"] < 1e-8 and r["window"] == (10, 20), r


def test_full_batch_contribution_needs_both_classes_and_refuses_bad_input() -> None:
    y, inc = _updates(5, 20, sigma=1.0, kappa=1.0, rate=1.0, data=0.0, seed=0)
    r = _full(y, np.ones(20, dtype=bool), 1)  # no canary left out: nothing to compare
    assert r["p_value"] is None and not r["rejected"]
    with pytest.raises(InvalidParameterError, match="projections and joins"):
        contribution_test(y[:, :5], np.broadcast_to(inc, y.shape), inc, np.ones(5), sigma=1.0,
                          sample_rate=1.0)  # fmt: skip
    with pytest.raises(InvalidParameterError, match="excluded"):
        contribution_test(y, np.ones(y.shape, dtype=bool), inc, np.ones(5), sigma=1.0,
                          sample_rate=1.0)  # fmt: skip
