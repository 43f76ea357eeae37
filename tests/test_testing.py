"""Tests of ldp_audit.testing.check_mechanism: correct mechanisms pass, broken ones fail."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldp_audit import mechanisms as m
from ldp_audit.errors import InvalidParameterError, LdpAuditError
from ldp_audit.testing import MechanismCheckError, MechanismCheckReport, check_mechanism
from tests.broken_mechanisms import known_broken

CHECKS = {
    "interface",
    "output",
    "determinism",
    "randomness",
    "rejects_nan",
    "rejects_inf",
    "rejects_1d",
    "rejects_non_generator",
    "exact_loss",
    "empirical_ratio",
}


# False-failure probability: check_mechanism's ratio check fails a correct mechanism with
# probability <= alpha = 1e-6 (its default); every other check is deterministic.
@pytest.mark.parametrize(
    "mech",
    [
        m.Laplace(epsilon=1.0, clip=1.0),
        m.DiscreteLaplace(epsilon=1.0, clip=1.0),
        m.ProjectedRandomSign(epsilon=1.0, clip=1.0),
        m.ProjectedRandomSign(epsilon=10.0, clip=0.5),
        m.BitFlip(epsilon=2.0),
        m.RandomizedResponse(epsilon=1.0, k=4),
        m.Gaussian(clip=1.0, noise_multiplier=2.0),
        m.NoPrivacy(),
    ],
    ids=repr,
)
def test_correct_mechanisms_pass(mech) -> None:
    report = check_mechanism(mech, n_samples=10_000)
    assert isinstance(report, MechanismCheckReport)
    assert report.passed and not report.failures
    assert {r.name for r in report.results} == CHECKS
    json.dumps(report.to_dict())
    assert "PASS" in str(report)


# The fixtures' true loss is >= 1.4 epsilon on their worst candidate pair; with the fixed seed
# the bound clears epsilon by a wide margin (see the details in the report).
@pytest.mark.parametrize("mech", known_broken(epsilon=1.0, clip=1.0), ids=repr)
def test_broken_mechanisms_fail(mech) -> None:
    with pytest.raises(MechanismCheckError) as info:
        check_mechanism(mech)
    failed = {r.name for r in info.value.report.failures}
    assert {"exact_loss", "empirical_ratio"} <= failed
    assert isinstance(info.value, AssertionError) and isinstance(info.value, LdpAuditError)


class _UserLaplace:
    """A user's mechanism with only epsilon and privatize (no privacy_loss, no pairs)."""

    def __init__(self, epsilon: float, noise_scale: float) -> None:
        self.epsilon = epsilon
        self.noise_scale = noise_scale

    def privatize(self, x, rng):
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a Generator")
        x = np.asarray(x, dtype=float)
        if x.ndim != 2 or not np.isfinite(x).all():
            raise ValueError("x must be finite (n, d)")
        x = np.clip(x, -0.5, 0.5)  # sensitivity 1 per coordinate on the default pairs' e_0
        return x + rng.laplace(0.0, self.noise_scale, size=x.shape)


def test_black_box_user_mechanism() -> None:
    pairs = [(np.eye(1, 4)[0], -np.eye(1, 4)[0])]  # differs in one coordinate by 1 after clip
    ok = check_mechanism(_UserLaplace(1.0, 1.0), dim=4, pairs=pairs)
    assert ok.passed
    assert next(r for r in ok.results if r.name == "exact_loss").passed is None
    # half the noise: true epsilon 2 on this pair; detected from samples alone
    bad = check_mechanism(_UserLaplace(1.0, 0.5), dim=4, pairs=pairs, raise_on_failure=False)
    assert [r.name for r in bad.failures] == ["empirical_ratio"]
    assert "FAIL" in str(bad)


class _NoNanCheck(_UserLaplace):
    def privatize(self, x, rng):
        noise = rng.laplace(0.0, self.noise_scale, size=np.shape(x))  # draws first
        x = np.asarray(x, dtype=float)
        if x.ndim != 2:
            raise ValueError("x must be 2-D")
        if not np.isfinite(x).all():
            raise ValueError("x must be finite")  # ... and only then validates
        return x + noise


class _PassesNan(_UserLaplace):
    def privatize(self, x, rng):
        x = np.asarray(x, dtype=float)
        if x.ndim != 2:
            raise ValueError("x must be 2-D")
        return x + rng.laplace(0.0, self.noise_scale, size=x.shape)


class _GlobalRandom(_UserLaplace):
    def privatize(self, x, rng):
        x = np.asarray(x, dtype=float)
        if x.ndim != 2 or not np.isfinite(x).all():
            raise ValueError("bad x")
        if not isinstance(rng, np.random.Generator):
            raise TypeError("bad rng")
        return x + np.random.laplace(0.0, self.noise_scale, size=x.shape)  # ignores rng


def test_validation_after_randomness_is_caught() -> None:
    rep = check_mechanism(_NoNanCheck(1.0, 1.0), dim=3, raise_on_failure=False)
    nan = next(r for r in rep.results if r.name == "rejects_nan")
    assert nan.passed is False and "after drawing randomness" in nan.detail


def test_nan_reaching_the_output_is_caught() -> None:
    rep = check_mechanism(_PassesNan(1.0, 1.0), dim=3, raise_on_failure=False)
    failed = {r.name for r in rep.failures}
    assert {"rejects_nan", "rejects_inf", "rejects_non_generator"} <= failed


def test_global_randomness_is_caught() -> None:
    rep = check_mechanism(_GlobalRandom(1.0, 1.0), dim=3, raise_on_failure=False)
    assert "determinism" in {r.name for r in rep.failures}


def test_interface_problems_are_reported() -> None:
    class NoEpsilon:
        def privatize(self, x, rng):
            return x

    rep = check_mechanism(NoEpsilon(), raise_on_failure=False)
    assert [r.name for r in rep.failures] == ["interface"]
    with pytest.raises(MechanismCheckError, match="epsilon"):
        check_mechanism(NoEpsilon())


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"n_samples": 10}, "n_samples"),
        ({"seed": -1}, "seed"),
        ({"dim": 0}, "dim"),
        ({"pairs": [(np.zeros(2), np.zeros(3))]}, "pairs"),
    ],
)
def test_bad_checker_arguments(kwargs, param) -> None:
    with pytest.raises(InvalidParameterError, match=param):
        check_mechanism(m.Laplace(epsilon=1.0, clip=1.0), **kwargs)


def test_raise_on_failure_must_be_a_bool():
    """'no' is truthy: a string flag would silently raise on failure; it is refused by name."""
    from ldp_audit.errors import InvalidParameterError
    from ldp_audit.mechanisms import RandomizedResponse
    from ldp_audit.testing import check_mechanism

    with pytest.raises(InvalidParameterError, match="raise_on_failure must be True or False"):
        check_mechanism(RandomizedResponse(epsilon=1.0), raise_on_failure="no")
