"""Every public boundary refuses bad input with a message naming parameter and value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import (
    check_batch,
    check_bool,
    check_epsilon,
    check_int,
    check_positive,
    check_probability,
    check_rng,
)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, -math.inf, "abc", None])
def test_check_epsilon_rejects(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="epsilon"):
        check_epsilon(bad)


def test_check_epsilon_inf_only_when_allowed() -> None:
    assert check_epsilon(math.inf, allow_inf=True) == math.inf
    assert check_epsilon(np.float32(0.5)) == 0.5
    assert check_epsilon(np.array(2.0)) == 2.0
    with pytest.raises(InvalidParameterError, match="-inf"):
        check_epsilon(-math.inf, allow_inf=True)


@pytest.mark.parametrize("bad", [0.0, -2.0, math.nan, math.inf])
def test_check_positive_names_parameter_and_value(bad: float) -> None:
    with pytest.raises(InvalidParameterError, match=r"clip must be finite, > 0, got"):
        check_positive(bad, "clip")


def test_check_probability() -> None:
    assert check_probability(0.95, "confidence") == 0.95
    for bad in (0.0, 1.0, 1.5, math.nan):
        with pytest.raises(InvalidParameterError, match="confidence"):
            check_probability(bad, "confidence")
    assert check_probability(0.0, "q", open_interval=False) == 0.0


def test_check_batch_shapes_dtypes_and_non_finite() -> None:
    out = check_batch(np.arange(6, dtype=np.int32).reshape(2, 3))
    assert out.dtype == np.float64 and out.shape == (2, 3)
    with pytest.raises(InvalidParameterError, match=r"shape \(n, d\)"):
        check_batch(np.zeros(3))
    with pytest.raises(InvalidParameterError, match="3 columns"):
        check_batch(np.zeros((2, 2)), dim=3)
    with pytest.raises(InvalidParameterError, match="dtype"):
        check_batch(np.array([["a", "b"]]))
    with pytest.raises(InvalidParameterError, match="non-empty"):
        check_batch(np.zeros((0, 3)))
    x = np.zeros((2, 3))
    x[1, 2] = np.nan
    with pytest.raises(InvalidParameterError, match=r"nan at index \(1, 2\)"):
        check_batch(x, "gradient")


def test_check_rng_requires_generator() -> None:
    assert isinstance(check_rng(np.random.default_rng(0)), np.random.Generator)
    with pytest.raises(InvalidParameterError, match="numpy.random.Generator"):
        check_rng(np.random.RandomState(0))


@pytest.mark.parametrize("bad", ["1", "0.5", True, False, np.bool_(True), b"1", [1.0], None, 1j])
@pytest.mark.parametrize("checker", [check_epsilon, check_positive, check_probability])
def test_numbers_are_type_checked_not_coerced(checker, bad: object) -> None:
    """'1' and True are not epsilons: every numeric helper refuses them by name and value."""
    with pytest.raises(InvalidParameterError, match=r"param must be a real number, got"):
        checker(bad, "param")


def test_check_bool_refuses_truthy_strings() -> None:
    assert check_bool(True, "float_bits") is True
    assert check_bool(np.bool_(False), "float_bits") is False
    for bad in ("no", "False", 0, 1, None):
        with pytest.raises(InvalidParameterError, match=r"float_bits must be True or False"):
            check_bool(bad, "float_bits")


def test_check_int() -> None:
    assert check_int(np.int64(5), "samples", minimum=1) == 5
    for bad in (True, 5.0, "5", 0):
        with pytest.raises(InvalidParameterError, match=r"samples must be an integer >= 1"):
            check_int(bad, "samples", minimum=1)


class _Tensor0d:
    """What check_int sees of a 0-d torch tensor (torch not imported: 3 s here)."""

    ndim = 0

    def __init__(self, v) -> None:
        self.v = v

    def detach(self):
        return self

    def item(self):
        return self.v

    def __repr__(self) -> str:
        return f"tensor({self.v})"


def test_check_int_reads_0d_integer_tensors_as_check_real_does() -> None:
    """Session 58: check_real took a 0-d real tensor, check_int refused it:
    ``run.release(agent=torch.tensor(3))`` was 'agent must be an integer >= 0, got tensor(3)'.
    A 0-d integer tensor or array is its integer; a bool or float one stays refused."""
    assert check_int(_Tensor0d(3), "agent", minimum=0) == 3
    assert type(check_int(np.array(4, dtype=np.int32), "agent", minimum=0)) is int
    for bad in (_Tensor0d(True), _Tensor0d(3.0), np.array(True), np.array(3.0), np.arange(2)):
        with pytest.raises(InvalidParameterError, match=r"agent must be an integer >= 0, got"):
            check_int(bad, "agent", minimum=0)
    with pytest.raises(InvalidParameterError, match=r"agent must be an integer >= 0, got"):
        check_int(_Tensor0d(-1), "agent", minimum=0)
