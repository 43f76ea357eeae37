"""Exact tests of the PGC-A3C metrics (eqs. 25-27, Table 3) on constructed score sequences."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c import metrics


def test_moving_average_is_forward_window_eq25():
    zeta = np.arange(1.0, 16.0)  # zeta_n = n, n = 1..15
    mu = metrics.moving_average(zeta, window=10)
    assert mu.shape == (15,)
    # mu_n = mean(n..n+9) = n + 4.5, defined for n = 1..6
    np.testing.assert_array_equal(mu[:6], np.arange(1, 7) + 4.5)
    assert np.isnan(mu[6:]).all()


def test_moving_average_nan_window_is_undefined():
    zeta = np.full(20, 200.0)
    zeta[15:] = np.nan  # submissions 16.. never made
    mu = metrics.moving_average(zeta)
    np.testing.assert_array_equal(mu[:6], 200.0)  # windows 1..6 end at 15
    assert np.isnan(mu[6:]).all()


def test_fst_first_reaches_threshold_at_known_n():
    # Scores 0 for n <= 100 and 200 afterwards: mu_n = 20 * (n + 9 - 100) for n in 92..101,
    # so mu_n >= 195 first when n + 9 - 100 >= 9.75, i.e. n = 101.
    zeta = np.r_[np.zeros(100), np.full(50, 200.0)]
    assert metrics.first_success_time(zeta) == 101.0
    # Exactly 195 counts (>=): ten scores of 195 starting at submission 37.
    zeta = np.r_[np.full(36, 194.0), np.full(10, 195.0), np.zeros(5)]
    assert metrics.first_success_time(zeta) == 37.0
    # Nine 200s and one 150: mean 195 exactly, at n = 1.
    zeta = np.r_[np.full(9, 200.0), 150.0, np.zeros(3)]
    assert metrics.first_success_time(zeta) == 1.0


def test_fst_never_is_inf_and_batched():
    zeta = np.stack(
        [
            np.full(30, 194.9),  # never
            np.r_[np.zeros(5), np.full(25, 195.0)],  # n = 6
            np.r_[np.full(25, 100.0), np.full(5, 200.0)],  # window too short at the end
        ]
    )
    fst = metrics.first_success_time(zeta)
    assert fst.shape == (3,)
    assert math.isinf(fst[0]) and fst[1] == 6.0 and math.isinf(fst[2])


def test_fst_ignores_windows_after_stop():
    # stop_at_target: scores after the stop are NaN; the window must be complete.
    zeta = np.r_[np.full(12, 200.0), np.full(8, np.nan)]
    assert metrics.first_success_time(zeta) == 1.0
    zeta = np.r_[np.zeros(5), np.full(9, 200.0), np.full(6, np.nan)]
    assert math.isinf(metrics.first_success_time(zeta))


def test_success_ratio_eq27():
    fst = np.array([10.0, 20.0, 20.0, np.inf])
    np.testing.assert_array_equal(
        metrics.success_ratio(fst, [0, 9, 10, 19, 20, 1e9]), [0, 0, 0.25, 0.25, 0.75, 0.75]
    )
    assert metrics.success_ratio(fst, 15) == 0.25


def test_auc_and_relative_auc_on_hand_made_sets():
    horizon = 100.0
    ref = np.array([10.0, 30.0])  # areas 90 and 70 -> 80
    assert metrics.success_auc(ref, horizon) == 80.0
    own = np.array([50.0, np.inf, 100.0, 150.0])  # 50, 0, 0, 0 -> 12.5
    assert metrics.success_auc(own, horizon) == 12.5
    assert metrics.relative_auc(own, ref, horizon) == 12.5 / 80.0
    assert metrics.relative_auc(ref, ref, horizon) == 1.0
    assert math.isnan(metrics.relative_auc(ref, np.array([np.inf]), horizon))


def test_auc_equals_integral_of_step_curve():
    rng = np.random.default_rng(3)
    fst = np.r_[rng.integers(1, 1000, 17).astype(float), np.inf, np.inf, 2000.0]
    grid = np.arange(0, 1000)  # curve value on [n, n+1) is success_ratio(n)
    riemann = metrics.success_ratio(fst, grid).sum()
    assert metrics.success_auc(fst, 1000) == pytest.approx(riemann, abs=1e-9)


def test_wilson_interval_golden():
    # Wilson 95% interval for 16/20 (Table 2, Laplace eps=1): p=0.8, z=1.959964
    lo, hi = metrics.ratio_ci(16, 20)
    z = 1.959963984540054
    p, n = 0.8, 20
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert lo == pytest.approx(centre - half, rel=1e-9)
    assert hi == pytest.approx(centre + half, rel=1e-9)
    lo, hi = metrics.ratio_ci(20, 20)
    assert hi == pytest.approx(1.0) and 0.8 < lo < 0.9


def test_median_ci_brackets_and_handles_inf():
    rng = np.random.default_rng(0)
    x = np.r_[np.arange(1.0, 16.0), np.full(5, np.inf)]
    lo, hi = metrics.median_ci(x, rng=rng, n_resamples=2000)
    # median of the sample is 10.5; a percentile interval of resampled medians contains only
    # values attainable as medians, and with 5/20 inf the upper end may be inf but never NaN.
    assert lo <= 10.5 <= hi
    assert not math.isnan(lo) and not math.isnan(hi)
    # all-equal sample: degenerate interval
    assert metrics.median_ci(np.full(7, 3.0), rng=rng, n_resamples=200) == (3.0, 3.0)


def test_relative_auc_ci_degenerate_and_bracketing():
    rng = np.random.default_rng(1)
    ref = np.full(5, 10.0)
    assert metrics.relative_auc_ci(ref, ref, 100.0, rng=rng, n_resamples=200) == (1.0, 1.0)
    own = np.array([20.0, 40.0, 60.0, np.inf])
    lo, hi = metrics.relative_auc_ci(own, ref, 100.0, rng=rng, n_resamples=2000)
    point = metrics.relative_auc(own, ref, 100.0)
    assert lo <= point <= hi and 0.0 <= lo and hi <= 80.0 / 90.0 + 1e-12


def test_summarize_is_json_and_consistent():
    zeta = np.zeros((4, 60))
    zeta[0, 20:] = 200.0  # FST 21
    zeta[1, 5:] = 200.0  # FST 6
    zeta[2, 40:] = 200.0  # FST 41
    # trial 3 never
    out = metrics.summarize(
        zeta, reference_fst=np.array([6.0, 6.0]), rng=np.random.default_rng(0), n_resamples=500
    )
    json.dumps(out, allow_nan=False)
    assert out["fst"] == [21.0, 6.0, 41.0, "inf"]  # never reached: "inf", the JSON convention
    assert out["median_fst"] == 31.0
    assert out["successes"] == 3 and out["success_ratio"] == 0.75
    assert out["auc"] == pytest.approx((39 + 54 + 19) / 4)
    assert out["relative_auc"] == pytest.approx(((39 + 54 + 19) / 4) / 54)
    assert out["horizon"] == 60.0


@pytest.mark.parametrize(
    "call",
    [
        lambda: metrics.moving_average(np.zeros(5), window=0),
        lambda: metrics.moving_average(np.zeros((2, 2, 2))),
        lambda: metrics.moving_average(np.array([1.0, np.inf])),
        lambda: metrics.success_ratio(np.array([0.0]), 5),
        lambda: metrics.success_ratio(np.array([np.nan]), 5),
        lambda: metrics.success_auc(np.array([1.0]), -1),
        lambda: metrics.ratio_ci(5, 3),
        lambda: metrics.median_ci([1.0], rng=np.random.default_rng(0), n_resamples=10),
        lambda: metrics.median_ci([1.0], rng=0),
    ],
)
def test_invalid_inputs_raise(call):
    with pytest.raises(InvalidParameterError):
        call()
