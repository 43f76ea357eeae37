"""Smoke and contract tests of ldp_audit.mechanisms (shapes, config round trip, bad input)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp_audit import mechanisms as m
from ldp_audit.errors import InvalidParameterError

D = 7


def _all_mechanisms() -> list[m.Mechanism]:
    return [
        m.Laplace(epsilon=1.0, clip=0.5),
        m.DiscreteLaplace(epsilon=1.0, clip=0.5),
        m.DiscreteLaplace(epsilon=2.0, clip=0.5, resolution=0.01),
        m.ProjectedRandomSign(epsilon=7.5, clip=1.0),
        m.ProjectedRandomSign(epsilon=1.0, clip=1.0, reduced_dim=3),
        m.BitFlip(epsilon=2.0),
        m.Gaussian(clip=1.0, noise_multiplier=1.1),
        m.NoPrivacy(),
    ]


def _input(mech: m.Mechanism, n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=(n, D))
    return np.clip(x, -1, 1) if isinstance(mech, m.BitFlip) else x


@pytest.mark.parametrize("mech", _all_mechanisms(), ids=repr)
def test_shape_dtype_and_determinism(mech: m.Mechanism) -> None:
    x = _input(mech, 50, np.random.default_rng(0))
    y1 = mech.privatize(x, np.random.default_rng(1))
    y2 = mech.privatize(x, np.random.default_rng(1))
    assert y1.shape == (50, D)
    assert y1.dtype == np.float64
    assert np.isfinite(y1).all()
    np.testing.assert_array_equal(y1, y2)
    if not isinstance(mech, m.NoPrivacy):
        y3 = mech.privatize(x, np.random.default_rng(2))
        assert not np.array_equal(y1, y3)


@pytest.mark.parametrize("mech", _all_mechanisms(), ids=repr)
def test_config_round_trip_is_json(mech: m.Mechanism) -> None:
    cfg = mech.to_config()
    back = m.from_config(json.loads(json.dumps(cfg)))
    assert back == mech
    assert type(back) is type(mech)


@pytest.mark.parametrize("mech", _all_mechanisms(), ids=repr)
def test_candidate_pairs_have_the_dimension(mech: m.Mechanism) -> None:
    pairs = mech.candidate_pairs(D)
    assert len(pairs) >= 1
    for a, b in pairs:
        assert a.shape == (D,) and b.shape == (D,)
        assert not np.array_equal(a, b)


def test_randomized_response_shape_and_values() -> None:
    rr = m.RandomizedResponse(epsilon=1.0, k=4)
    x = np.array([[0], [3], [2.0]] * 100)
    y = rr.privatize(x, np.random.default_rng(0))
    assert y.shape == (300, 1)
    assert set(np.unique(y)) <= {0, 1, 2, 3}
    assert m.from_config(rr.to_config()) == rr
    assert rr.keep_probability == pytest.approx(math.e / (math.e + 3))


def test_prs_with_matrices_matches_privatize() -> None:
    mech = m.ProjectedRandomSign(epsilon=10.0, clip=1.0)
    x = np.random.default_rng(0).normal(size=(20, D))
    out, bits, mats = mech.privatize_with_matrices(x, np.random.default_rng(3))
    np.testing.assert_array_equal(out, mech.privatize(x, np.random.default_rng(3)))
    dh = mech.effective_reduced_dim(D)
    assert dh == 4
    assert bits.shape == (20, dh) and mats.shape == (20, dh, D)
    np.testing.assert_allclose(out, np.einsum("nkd,nk->nd", mats, bits * mech.clip))


def test_split_epsilon() -> None:
    assert m.split_epsilon(2.0, 4) == 0.5
    assert m.split_epsilon(float("inf"), 3) == math.inf
    with pytest.raises(InvalidParameterError, match="rounds"):
        m.split_epsilon(1.0, 0)
    with pytest.raises(InvalidParameterError, match="total"):
        m.split_epsilon(-1.0, 2)


@pytest.mark.parametrize(
    ("factory", "param"),
    [
        (lambda: m.Laplace(epsilon=0.0, clip=1.0), "epsilon"),
        (lambda: m.Laplace(epsilon=-1.0, clip=1.0), "epsilon"),
        (lambda: m.Laplace(epsilon=float("nan"), clip=1.0), "epsilon"),
        (lambda: m.Laplace(epsilon=float("inf"), clip=1.0), "NoPrivacy"),
        (lambda: m.Laplace(epsilon=1.0, clip=0.0), "clip"),
        (lambda: m.Laplace(epsilon=1.0, clip=float("inf")), "clip"),
        (lambda: m.DiscreteLaplace(epsilon=1.0, clip=1.0, resolution=0.0), "resolution"),
        (lambda: m.DiscreteLaplace(epsilon=float("inf"), clip=1.0), "NoPrivacy"),
        (lambda: m.ProjectedRandomSign(epsilon=1.0, clip=-1.0), "clip"),
        (lambda: m.ProjectedRandomSign(epsilon=1.0, clip=1.0, reduced_dim=0), "reduced_dim"),
        (lambda: m.ProjectedRandomSign(epsilon=1.0, clip=1.0, reduced_dim=1.5), "reduced_dim"),
        (lambda: m.BitFlip(epsilon=float("inf")), "NoPrivacy"),
        (lambda: m.RandomizedResponse(epsilon=1.0, k=1), "k"),
        (lambda: m.Gaussian(clip=1.0, noise_multiplier=0.0), "noise_multiplier"),
        (lambda: m.Gaussian(clip=1.0, noise_multiplier=1.0, delta=0.0), "delta"),
        (lambda: m.Gaussian(clip=float("nan"), noise_multiplier=1.0), "clip"),
    ],
)
def test_bad_parameters_raise(factory, param: str) -> None:
    with pytest.raises(InvalidParameterError, match=param):
        factory()


def test_reduced_dim_above_d_raises_at_privatize() -> None:
    mech = m.ProjectedRandomSign(epsilon=1.0, clip=1.0, reduced_dim=D + 1)
    with pytest.raises(InvalidParameterError, match=r"reduced_dim.*8"):
        mech.privatize(np.zeros((2, D)), np.random.default_rng(0))


@pytest.mark.parametrize("mech", _all_mechanisms(), ids=repr)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_raises_before_randomness(mech: m.Mechanism, bad: float) -> None:
    x = np.zeros((4, D))
    x[2, 3] = bad
    rng = np.random.default_rng(0)
    before = rng.bit_generator.state
    with pytest.raises(InvalidParameterError, match="finite"):
        mech.privatize(x, rng)
    assert rng.bit_generator.state == before


@pytest.mark.parametrize("mech", _all_mechanisms(), ids=repr)
def test_wrong_shape_dtype_and_rng_raise(mech: m.Mechanism) -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidParameterError, match="shape"):
        mech.privatize(np.zeros(D), rng)
    with pytest.raises(InvalidParameterError, match="dtype"):
        mech.privatize(np.array([["a"] * D]), rng)
    with pytest.raises(InvalidParameterError, match="rng"):
        mech.privatize(np.zeros((1, D)), 0)


def test_bitflip_rejects_out_of_range() -> None:
    with pytest.raises(InvalidParameterError, match=r"\[-1, 1\]"):
        m.BitFlip(epsilon=1.0).privatize(np.full((1, 3), 1.5), np.random.default_rng(0))


def test_randomized_response_rejects_bad_values() -> None:
    rr = m.RandomizedResponse(epsilon=1.0, k=3)
    for bad in ([[3]], [[-1]], [[0.5]]):
        with pytest.raises(InvalidParameterError, match="integers"):
            rr.privatize(np.array(bad), np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="1 columns"):
        rr.privatize(np.zeros((2, 2)), np.random.default_rng(0))


def test_from_config_rejects_unknown() -> None:
    with pytest.raises(InvalidParameterError, match="name"):
        m.from_config({"name": "nope"})
    with pytest.raises(InvalidParameterError, match="laplace"):
        m.from_config({"name": "laplace", "epsilon": 1.0, "clip": 1.0, "extra": 1})


def test_frozen() -> None:
    mech = m.Laplace(epsilon=1.0, clip=1.0)
    with pytest.raises(AttributeError):
        mech.epsilon = 2.0  # type: ignore[misc]


def test_huge_inputs_are_clipped_without_nan() -> None:
    x = np.full((3, D), 1e300)
    x[1] = -1e300
    rng = np.random.default_rng(0)
    for mech in _all_mechanisms():
        if isinstance(mech, (m.BitFlip, m.NoPrivacy)):
            continue
        y = mech.privatize(x, rng)
        assert np.isfinite(y).all(), mech
    lap = m.Laplace(epsilon=1.0, clip=0.5)
    np.testing.assert_allclose(np.abs(lap.clip_rows(x)).sum(axis=1), 0.25)
    gau = m.Gaussian(clip=2.0, noise_multiplier=1.0)
    np.testing.assert_allclose(np.linalg.norm(gau.clip_rows(x), axis=1), 2.0)


@pytest.mark.parametrize(
    "mech",
    [*_all_mechanisms(), m.RandomizedResponse(epsilon=1.0, k=5), m.ProjectedRandomSign(10.0, 1.0)],
    ids=repr,
)
def test_batch_split_gives_the_same_rows(mech, monkeypatch) -> None:
    """privatize consumes the generator report by report: split batches, same outputs."""
    rng = np.random.default_rng(0)
    if isinstance(mech, m.RandomizedResponse):
        x = rng.integers(0, mech.k, size=(40, 1)).astype(float)
    else:
        x = _input(mech, 40, rng)
    whole = mech.privatize(x, np.random.default_rng(3))
    g = np.random.default_rng(3)
    parts = [mech.privatize(x[a:b], g) for a, b in ((0, 1), (1, 17), (17, 40))]
    np.testing.assert_array_equal(whole, np.vstack(parts))
    if isinstance(mech, m.ProjectedRandomSign):  # the chunk size does not matter either
        monkeypatch.setattr(m.prs, "_PRS_CHUNK_ELEMENTS", 50)
        np.testing.assert_array_equal(whole, mech.privatize(x, np.random.default_rng(3)))


# False-failure probability: KS p-value uniform under the null; threshold 1e-6.
def test_gaussian_privacy_loss_has_the_known_distribution() -> None:
    from scipy import stats

    mech = m.Gaussian(clip=1.0, noise_multiplier=1.5)
    x, x2 = mech.candidate_pairs(5)[0]  # distance 2C: mu = (2C)^2 / (2 sigma^2)
    y = mech.privatize(np.tile(x, (20_000, 1)), np.random.default_rng(8))
    loss = mech.privacy_loss(x, x2, y)
    mu = (2.0 * mech.clip) ** 2 / (2 * mech.sigma**2)
    assert stats.kstest(loss, stats.norm(mu, math.sqrt(2 * mu)).cdf).pvalue >= 1e-6
    manual = (((y - x2) ** 2).sum(1) - ((y - x) ** 2).sum(1)) / (2 * mech.sigma**2)
    np.testing.assert_allclose(loss, manual, rtol=1e-9, atol=1e-12)


def test_no_privacy_is_identity_with_infinite_loss() -> None:
    mech = m.NoPrivacy()
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(mech.privatize(x, np.random.default_rng(0)), x)
    assert mech.epsilon == math.inf and mech.delta == 0.0
    loss = mech.privacy_loss(x[:1], x[1:], np.vstack([x[0], x[1], x[0] + 1]))
    np.testing.assert_array_equal(loss, [math.inf, -math.inf, 0.0])


@pytest.mark.parametrize(
    ("call", "param"),
    [
        (lambda: m.analytic_gaussian_epsilon(0.0, 1.0, 1e-5), "sigma"),
        (lambda: m.analytic_gaussian_epsilon(1.0, -1.0, 1e-5), "sensitivity"),
        (lambda: m.analytic_gaussian_epsilon(1.0, 1.0, 1.0), "delta"),
        (lambda: m.analytic_gaussian_sigma(float("inf"), 1.0, 1e-5), "NoPrivacy"),
        (lambda: m.analytic_gaussian_sigma(1.0, 1.0, 0.0), "delta"),
        (lambda: m.analytic_gaussian_delta(-1.0, 1.0, 1.0), "epsilon"),
    ],
)
def test_analytic_gaussian_bad_arguments(call, param: str) -> None:
    with pytest.raises(InvalidParameterError, match=param):
        call()


def test_analytic_gaussian_edge_values() -> None:
    # delta already above the epsilon = 0 level: epsilon 0; huge noise: tiny epsilon
    assert m.analytic_gaussian_epsilon(1.0, 1e-6, 0.5) == 0.0
    assert 0 < m.analytic_gaussian_epsilon(1e3, 1.0, 1e-5) < 0.01
    assert m.analytic_gaussian_delta(math.inf, 1.0, 1.0) == 0.0


def test_privacy_loss_validates_its_inputs() -> None:
    lap = m.Laplace(epsilon=1.0, clip=1.0)
    with pytest.raises(InvalidParameterError, match="rows"):
        lap.privacy_loss(np.zeros((2, 3)), np.zeros((1, 3)), np.zeros((3, 3)))
    prs = m.ProjectedRandomSign(epsilon=1.0, clip=1.0)
    _, bits, mats = prs.privatize_with_matrices(np.zeros((2, 3)), np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="bits"):
        prs.privacy_loss(np.zeros(3), np.ones(3), bits * 0.5, mats)
    with pytest.raises(InvalidParameterError, match="matrices"):
        prs.privacy_loss(np.zeros(3), np.ones(3), bits, mats * 2)
    with pytest.raises(InvalidParameterError, match=r"\{-1, \+1\}"):
        m.BitFlip(epsilon=1.0).privacy_loss(np.zeros(2), np.ones(2), np.zeros((1, 2)))


# ---- issue 16: types are checked, not coerced; parameters whose outputs overflow are refused ---


@pytest.mark.parametrize("bad", ["1", True, np.bool_(True), None])
def test_epsilon_type_checked(bad):
    from ldp_audit.mechanisms import Laplace as _Laplace
    from ldp_audit.mechanisms import RandomizedResponse as _RR

    with pytest.raises(InvalidParameterError, match=r"epsilon must be a real number, got"):
        _Laplace(epsilon=bad, clip=1.0)
    with pytest.raises(InvalidParameterError, match=r"epsilon must be a real number, got"):
        _RR(epsilon=bad)


def test_gaussian_delta_type_checked():
    from ldp_audit.mechanisms import Gaussian as _Gaussian

    with pytest.raises(InvalidParameterError, match=r"delta must be a real number, got '1e-5'"):
        _Gaussian(clip=1.0, noise_multiplier=1.0, delta="1e-5")


@pytest.mark.parametrize(
    "factory",
    [
        lambda m: m.Laplace(epsilon=1e-10, clip=1e300),
        lambda m: m.DiscreteLaplace(epsilon=1e-10, clip=1e300),
    ],
    ids=["laplace", "discrete-laplace"],
)
def test_parameters_whose_outputs_overflow_are_refused(factory):
    from ldp_audit import mechanisms as m

    with pytest.raises(InvalidParameterError, match=r"overflow to inf"):
        factory(m)


def test_discrete_laplace_grid_beyond_exact_doubles_is_refused() -> None:
    """Session 58 scan: DiscreteLaplace(epsilon=1e-20, clip=1) released its input unnoised (the
    geometric draws saturate at the int64 maximum and cancel); resolution=1e-300 overflowed the
    grid index (every output one wrong value); resolution=1e308 was blamed on 'clip / epsilon'.
    Refused where a grid index can pass 2^53; at d beyond the bound, privatize refuses."""
    x = np.array([[0.3, -0.2]] * 8)
    with pytest.raises(InvalidParameterError, match=r"epsilon=1e-20.*beyond 2\^53"):
        m.DiscreteLaplace(epsilon=1e-20, clip=1.0)
    with pytest.raises(InvalidParameterError, match=r"resolution=1e-300\) at d = 1"):
        m.DiscreteLaplace(epsilon=1.0, clip=1.0, resolution=1e-300)
    with pytest.raises(InvalidParameterError, match=r"resolution / epsilon = inf is too large"):
        m.DiscreteLaplace(epsilon=1.0, clip=1.0, resolution=1e308)
    small = m.DiscreteLaplace(epsilon=1e-11, clip=1.0)
    y = small.privatize(x, np.random.default_rng(0))
    # noised: P(|noise| <= 1) < 1e-9 per coordinate (fixed seed)
    assert np.all(np.abs(y - small.clip_rows(x)) > 1.0)
    with pytest.raises(InvalidParameterError, match=r"at d = 10000: its grid indices"):
        small.privatize(np.zeros((1, 10_000)), np.random.default_rng(0))


def test_gaussian_scales_whose_epsilon_or_privacy_loss_break_are_refused() -> None:
    """Session 58 scan: Gaussian(noise_multiplier=1e-6) was taken with epsilon inf (a private
    mechanism claiming no privacy), clip=1e-300 gave a NaN privacy_loss and clip=1e300 an
    OverflowError from it, noise_multiplier=1e308 a refusal naming only 'sigma'. At the
    bounds (noise_multiplier >= 1e-5; clip and sigma in [1e-100, 1e100]) both stay finite."""
    cases = [
        ({"clip": 1e300}, r"clip must be finite, >= 1e-100 and <= 1e\+100, got 1e\+300"),
        ({"clip": 1e-300}, r"clip must be finite, >= 1e-100 and <= 1e\+100, got 1e-300"),
        ({"noise_multiplier": 1e-6}, r"noise_multiplier must be finite, >= 1e-05, got 1e-06"),
        ({"noise_multiplier": 1e308}, r"sigma = noise_multiplier x clip = 1e\+308 x 1.0"),
        ({"noise_multiplier": 1e-5, "clip": 1e-99}, r"sigma = noise_multiplier x clip = 1e-05"),
    ]
    for kw, match in cases:
        with pytest.raises(InvalidParameterError, match=match):
            m.Gaussian(**{"clip": 1.0, "noise_multiplier": 1.0, **kw})
    rng = np.random.default_rng(0)
    for clip, nm in ((1e100, 1e-5), (1e-95, 1e-5), (1e-100, 1.0), (1.0, 1e100)):
        g = m.Gaussian(clip=clip, noise_multiplier=nm)
        assert math.isfinite(g.epsilon)
        for a, b in g.candidate_pairs(1000):
            y = g.privatize(a[None] * 1e6, rng)
            assert np.isfinite(g.privacy_loss(a[None], b[None], y)).all()


def test_large_but_safe_scale_gives_finite_outputs():
    from ldp_audit.mechanisms import Laplace as _Laplace

    y = _Laplace(epsilon=1e-10, clip=1e290).privatize(np.ones((1000, 2)), np.random.default_rng(0))
    assert np.isfinite(y).all()


def test_import_mechanisms_is_lazy():
    """numba and scipy.stats/optimize load on first use, not on import."""
    import subprocess
    import sys

    code = (
        "import sys, time; t = time.perf_counter(); import ldp_audit.mechanisms; "
        "dt = time.perf_counter() - t; "
        "print(dt, 'numba' in sys.modules, 'scipy.stats' in sys.modules, "
        "'scipy.optimize' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    dt, numba_loaded, stats_loaded, opt_loaded = out.stdout.split()
    # the deterministic part of "lazy": the 2-3 s of numba, scipy.stats and scipy.optimize are
    # not paid on import (they load on first use of PRS / the analytic Gaussian)
    assert (numba_loaded, stats_loaded, opt_loaded) == ("False", "False", "False")
    # measured 0.4 s on the shared 2-core machine at moderate load and 1.0-1.25 s at load
    # average 11 (was 2.5 s with numba and scipy.stats); a wall-clock bound is only a guard
    # against a gross regression here, not a benchmark
    assert float(dt) < 5.0


def test_an_item_mechanism_without_its_loss_cannot_be_built():
    """ItemMechanism's loss hook is abstract: a subclass that forgets it fails at construction,
    not with a bare NotImplementedError in the middle of an audit."""
    from ldp_audit.mechanisms.frequency import ItemMechanism

    class NoLoss(ItemMechanism):
        epsilon, k = 1.0, 4

        def privatize(self, x, rng):
            return np.asarray(x)

    with pytest.raises(TypeError, match="_item_loss"):
        NoLoss()
    assert not any(
        getattr(c, "__abstractmethods__", None)
        for c in (m.DBitFlipPM, m.Loloha, m.MemoisedRappor, m.RandomizedResponse)
    )
