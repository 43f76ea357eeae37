"""The one-run noise statistics of :mod:`ldp_audit.attacks.one_run_noise` on simulated noise:
each holds its level on exact Gaussian noise and flags what it is built to see (issue 36; split
from tests/test_opacus_coverage.py, which runs them on an Opacus loop).

Statistical tests: fixed seeds; the bounds on simulated games are binomial quantiles with a
false-failure probability stated beside each (it would be at most that for an unseeded draw).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from ldp_audit.attacks.one_run_noise import (
    pair_dependence_test,
    scan_p_value,
    shift_dependence_test,
    tensor_noise_test,
)
from ldp_audit.errors import InvalidParameterError
from ldp_audit.opacus import noise_sketch


def _bound(n: int, level: float, false_failure: float = 1e-6) -> int:
    """Rejections allowed in ``n`` games at ``level``: exceeded with probability <=
    ``false_failure`` by a test that holds its level."""
    return int(binom.ppf(1.0 - false_failure, n, level))


# ------------------------------------------------------------------------------------------------
# the tests on simulated noise: level and power
# ------------------------------------------------------------------------------------------------


def test_tensor_noise_test_holds_its_level_on_exact_noise() -> None:
    """400 games of exact N(0, sigma^2) residuals (T = 20, tensors of 40, 3, 1 and 7 entries):
    rejections at level 0.1 stay below the binomial bound (false failure <= 1e-6)."""
    rng = np.random.default_rng(36)
    dims = np.array([40, 3, 1, 7])
    sigma = 1.3
    rej = 0
    for _ in range(400):
        sq = np.stack([(rng.normal(0, sigma, (20, d)) ** 2).sum(1) for d in dims], axis=1)
        rej += tensor_noise_test(sq, dims, sigma=sigma, confidence=0.9)["rejected"]
    assert rej <= _bound(400, 0.1)
    assert rej >= 5  # the test is not vacuous (its level is used; P[< 5] ~ 1e-12 at 0.1 x 400)


def test_tensor_noise_test_flags_a_tensor_an_update_and_a_cell() -> None:
    rng = np.random.default_rng(1)
    dims = np.array([500, 10, 2])
    T = 30
    z = [rng.normal(0, 1, (T, d)) for d in dims]

    def sq(parts: list) -> np.ndarray:
        return np.stack([(p**2).sum(1) for p in parts], axis=1)

    base = tensor_noise_test(sq(z), dims, sigma=1.0)
    assert not base["rejected"] and base["untested"] == []
    # the 2-entry tensor released without noise in every update
    r = tensor_noise_test(sq([z[0], z[1], 0 * z[2]]), dims, sigma=1.0)
    assert r["rejected"] and r["p_tensor"] == 0.0 and r["tensors"][2]["p_value"] == 0.0
    assert r["tensors"][0]["p_value"] > 0.01 and r["tensors"][2]["std_ratio"] == 0.0
    # one update noised at sigma / 3 (all tensors)
    w = [p.copy() for p in z]
    for p in w:
        p[17] /= 3
    r = tensor_noise_test(sq(w), dims, sigma=1.0)
    assert r["rejected"] and r["worst_update"]["update"] == 17 and r["p_update"] < 1e-20
    # one cell (update 4, the 10-entry tensor) without noise
    w = [p.copy() for p in z]
    w[1][4] = 0.0
    r = tensor_noise_test(sq(w), dims, sigma=1.0)
    assert r["rejected"] and r["worst_cell"] == {"update": 4, "tensor": "tensor 1", "p_value": 0.0}
    # a tensor that cannot be tested is named, never skipped in silence
    s = sq(z)
    s[:, 1] = np.nan
    r = tensor_noise_test(s, dims, sigma=1.0, names=["w", "b", "out"])
    assert r["untested"] == ["b"] and not r["tensors"][1]["tested"]
    assert "summed_grad" in r["tensors"][1]["reason"] and r["tensors"][0]["tested"]


def test_detectable_std_ratio_is_what_the_test_detects() -> None:
    """The stated 95 %-power ratio of a tensor is detected at least that often: 200 games with
    the 3-entry tensor's noise at exactly that ratio (expected >= 190 flagged; >= 170 holds
    with probability > 1 - 1e-6 at power 0.95)."""
    rng = np.random.default_rng(2)
    dims = np.array([300, 3])
    T = 40
    ratio = tensor_noise_test(np.ones((T, 2)), dims, sigma=1.0)["tensors"][1][
        "detectable_std_ratio"
    ]
    assert 0.3 < ratio < 0.9
    hits = 0
    for _ in range(200):
        a = (rng.normal(0, 1, (T, 300)) ** 2).sum(1)
        b = (rng.normal(0, ratio, (T, 3)) ** 2).sum(1)
        hits += tensor_noise_test(np.stack([a, b], 1), dims, sigma=1.0)["rejected"]
    assert hits >= 200 - _bound(200, 0.05)


def test_pair_dependence_test_holds_its_level_on_fresh_noise() -> None:
    """300 games of independent noise (T = 15, 64 coordinates in three tensors): rejections at
    level 0.1 below the binomial bound (false failure <= 1e-6)."""
    rng = np.random.default_rng(3)
    groups = np.repeat([0, 1, 2], [40, 20, 4])
    rej = 0
    for _ in range(300):
        rej += pair_dependence_test(rng.normal(size=(15, 64)), groups, confidence=0.9)["rejected"]
    assert rej <= _bound(300, 0.1)


def test_pair_dependence_test_flags_any_lag_and_any_tensor() -> None:
    rng = np.random.default_rng(4)
    T, K = 80, 4096
    groups = np.repeat([0, 1, 2], [4032, 32, 32])
    z = rng.normal(size=(T, K))
    assert not pair_dependence_test(z, groups)["rejected"]
    # one update's noise repeated 61 updates later (a generator reseeded once)
    w = z.copy()
    w[70] = w[9]
    r = pair_dependence_test(w, groups)
    fam = r["families"][0]
    assert r["rejected"] and fam["pair"] == [9, 70] and fam["lag"] == 61
    assert fam["max_abs_rho"] == pytest.approx(1.0)
    # the same noise only in one 32-entry tensor (its generator reseeded), 3 updates apart
    w = z.copy()
    w[40, -32:] = w[37, -32:]
    r = pair_dependence_test(w, groups, names=["w", "b1", "b2"])
    assert r["rejected"]
    assert [f["name"] for f in r["families"] if f["p_value"] < 1e-6] == ["b2"]
    # antithetic noise (negative correlation) is dependence too
    w = z.copy()
    w[50] = -w[10]
    assert pair_dependence_test(w, groups)["rejected"]


def test_detectable_correlation_at_the_recommended_sketch() -> None:
    """The stated smallest correlation (95 % power, T = 80 updates, the 4096-coordinate
    sketch) is detected: 40 games with one pair at that correlation, >= 33 flagged (expected
    >= 38; fewer than 33 has probability < 1e-3 at power 0.95)."""
    rng = np.random.default_rng(5)
    T, K = 80, 4096
    groups = np.zeros(K, dtype=np.int64)
    rho = pair_dependence_test(rng.normal(size=(T, K)), groups)["families"][0][
        "detectable_correlation"
    ]
    assert 0.08 < rho < 0.13  # stated in docs/opacus.md: 0.10
    hits = 0
    for _ in range(40):
        z = rng.normal(size=(T, K))
        z[33] = rho * z[12] + np.sqrt(1 - rho**2) * z[33]
        hits += pair_dependence_test(z, groups)["rejected"]
    assert hits >= 33


def test_parts_of_a_test_combine_by_bonferroni() -> None:
    from ldp_audit.opacus.scoring import _joined

    def p(a: float | None, b: float | None) -> float | None:
        return _joined({"p_value": a}, {"p_value": b}, 0.01)["p_value"]

    assert p(0.0, 0.7) == 0.0  # a part at p = 0 decides (0 is not "missing")
    assert p(0.01, None) == 0.01 and p(None, None) is None
    assert p(0.3, 0.2) == pytest.approx(0.4) and p(0.9, 0.8) == 1.0
    assert _joined({"p_value": 0.004}, {}, 0.01)["rejected"]


def test_scan_p_value_is_the_exact_minimum_law() -> None:
    assert scan_p_value(0.0, 10) == 0.0 and scan_p_value(1.0, 10) == 1.0
    assert scan_p_value(0.01, 1) == pytest.approx(0.01)
    assert scan_p_value(0.01, 100) == pytest.approx(1 - 0.99**100)


def test_noise_sketch_keeps_every_small_tensor_whole() -> None:
    idx, grp = noise_sketch([4096, 64, 640, 10], 4096, 0)
    assert idx.size == 4096 and np.unique(idx).size == 4096
    assert np.bincount(grp).tolist() == [3382, 64, 640, 10]
    offs = np.cumsum([0, 4096, 64, 640])
    for t, o in enumerate(offs):
        assert ((idx[grp == t] >= o) & (idx[grp == t] < o + [4096, 64, 640, 10][t])).all()
    assert np.array_equal(noise_sketch([4096, 64, 640, 10], 4096, 0)[0], idx)  # public, seeded


def _max_shift_rho(x: np.ndarray, lags: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy's own (T, lags) largest |normalised circular cross-correlation| over the shifts
    of each update with the one ``lag`` before, and the tested coordinates of the earlier
    one (NaN coordinates as 0), for the shift test's inputs."""
    from scipy.fft import irfft, rfft

    z = np.nan_to_num(x)
    f, nrm = rfft(z, axis=1), np.linalg.norm(z, axis=1)
    rho = np.full((x.shape[0], lags), np.nan)
    k = np.zeros((x.shape[0], lags), dtype=np.int64)
    for lag in range(1, lags + 1):
        c = irfft(f[:-lag].conj() * f[lag:], n=x.shape[1], axis=1)
        rho[lag:, lag - 1] = np.abs(c).max(axis=1) / (nrm[:-lag] * nrm[lag:])
        k[lag:, lag - 1] = np.isfinite(x[:-lag]).sum(axis=1)
    return rho, k


def test_shift_dependence_test_holds_its_level_on_exact_noise() -> None:
    """400 games of fresh Gaussian noise (T = 12 updates of 301 coordinates, lags 1 and 2),
    half with 40 coordinates untested (NaN, as a tensor without a clipped sum): rejections at
    level 0.1 below the binomial bound (false failure <= 1e-6)."""
    rng = np.random.default_rng(46)
    rej = 0
    for g in range(400):
        x = rng.normal(size=(12, 301))
        if g % 2:
            x[:, 100:140] = np.nan
        rho, k = _max_shift_rho(x, 2)
        rej += shift_dependence_test(rho, k, shifts=301, confidence=0.9)["rejected"]
    assert rej <= _bound(400, 0.1)


@pytest.mark.parametrize("stride", [1, 150, 200])
def test_shift_dependence_test_flags_overlapping_windows_of_a_pool(stride: int) -> None:
    """Windows of one pool moved by ``stride`` of 301 coordinates: overlap (301 - stride) / 301,
    flagged in each of 50 games (at the default 5 % level; the stated detectable correlation
    is met: 0.34 >= it), the lag and shift located."""
    rng = np.random.default_rng(stride)
    for _ in range(50):
        pool = rng.normal(size=301 + 12 * stride)
        x = np.stack([pool[t * stride : t * stride + 301] for t in range(12)])
        rho, k = _max_shift_rho(x, 2)
        r = shift_dependence_test(rho, k, shifts=301)
        assert r["rejected"] and r["detectable_correlation"] < 0.34, r
    with pytest.raises(InvalidParameterError, match="shifts"):
        shift_dependence_test(rho, k, shifts=0)
    with pytest.raises(InvalidParameterError, match="one shape"):
        shift_dependence_test(rho, k[:1], shifts=301)
