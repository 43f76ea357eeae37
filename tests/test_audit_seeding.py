"""A mechanism that ignores the Generator it is given (draws from the global ``numpy.random`` or
``random`` module, or its outputs change with state kept across calls) is caught by two
8-row ``privatize`` calls from copies of one Generator state (``sampling.seeded_by``): the
result warns and says ``reproducible = False``. Before, such an audit gave a different bound on
every run with the same seed and said nothing."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ldp_audit.audit import audit, from_scalar
from ldp_audit.errors import UserCodeError
from ldp_audit.mechanisms import Laplace

_WARNING = "two privatize calls from the same Generator state gave different outputs"


class GlobalNumpyLaplace:
    """Laplace(1) on [0, 1] drawn from the global numpy.random state, not from ``rng``."""

    epsilon = 1.0

    def privatize(self, x, rng):
        x = np.asarray(x, float)
        return x + np.random.laplace(0.0, 1.0, x.shape)

    def candidate_pairs(self, dim):
        return [(np.zeros(1), np.ones(1))]


class CountingLaplace(GlobalNumpyLaplace):
    """Draws from ``rng`` but adds the number of calls so far (state across calls)."""

    def __init__(self) -> None:
        self.calls = 0

    def privatize(self, x, rng):
        self.calls += 1
        x = np.asarray(x, float)
        return x + rng.laplace(0.0, 1.0, x.shape) + self.calls


class BufferedGlobalLaplace(GlobalNumpyLaplace):
    """Draws from the global numpy.random into one output buffer it returns on every call (the
    two calls of the check would compare the buffer with itself without a copy)."""

    def __init__(self) -> None:
        self.buf = np.empty((0, 1))

    def privatize(self, x, rng):
        x = np.asarray(x, float)
        if self.buf.shape != x.shape:
            self.buf = np.empty(x.shape)
        self.buf[:] = x + np.random.laplace(0.0, 1.0, x.shape)
        return self.buf


def _module_random_scalar(rng):
    return lambda v: v + random.gauss(0.0, 1.0)  # claims seeding="generator", ignores it


@pytest.mark.parametrize(
    "mech",
    [
        GlobalNumpyLaplace(),
        CountingLaplace(),
        BufferedGlobalLaplace(),
        from_scalar(_module_random_scalar, epsilon=1.0, domain=(0.0, 1.0), seeding="generator"),
    ],
    ids=["global-numpy", "state", "buffer", "random-module"],
)
@pytest.mark.parametrize("event", [None, ([0.0], [1.0], lambda y, x, x2: y[:, 0] > 0.5)])
def test_a_mechanism_ignoring_the_rng_is_flagged(mech, event):
    kw = {"event": event} if event else {"float_bits": False, "tradeoff": False}
    r = audit(mech, samples=2000, rng=0, **kw)
    assert not r.reproducible
    assert sum(_WARNING in w for w in r.warnings) == 1
    assert r.to_dict()["reproducible"] is False


def test_a_seeded_mechanism_is_not_flagged_and_keeps_its_result():
    r = audit(Laplace(epsilon=1.0, clip=1.0), samples=2000, rng=0, float_bits=False)
    assert r.reproducible and not any(_WARNING in w for w in r.warnings)
    # the check draws from copies of the Generator: the audit's own draws are unchanged
    assert (
        r.epsilon_lower_bound
        == audit(
            Laplace(epsilon=1.0, clip=1.0), samples=2000, rng=0, float_bits=False
        ).epsilon_lower_bound
    )


def test_a_declared_unreproducible_mechanism_gets_one_warning():
    mech = from_scalar(lambda v: v + random.gauss(0.0, 1.0), epsilon=1.0, domain=(0.0, 1.0))
    r = audit(mech, samples=2000, rng=0, float_bits=False, tradeoff=False)
    assert not r.reproducible
    assert not any(_WARNING in w for w in r.warnings)
    assert any("not reproducible from the seed" in w for w in r.warnings)


class SharedDrawLaplace(GlobalNumpyLaplace):
    """x + one Laplace draw per call (``rng.laplace(0, 1)``, no size): every row of a call is
    the same release, so the audit's counts would be one draw counted n times (before: bound
    8.666, "violation", on seed 1 of 0-2 at 20,000 samples, 0 on the others)."""

    def privatize(self, x, rng):
        return np.asarray(x, float) + rng.laplace(0.0, 1.0)


class Deterministic(GlobalNumpyLaplace):
    """Releases x: every row equal, and equal across calls (true epsilon infinite)."""

    def privatize(self, x, rng):
        return np.asarray(x, float).copy()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_sharing_one_draw_per_call_are_refused(seed):
    # iid rows give this pattern (8 equal rows, then 1000 equal rows of another value) with
    # probability < 1e-12, so a correct mechanism is refused with at most that probability
    with pytest.raises(UserCodeError, match=r"SharedDrawLaplace returned one output for every row"):
        audit(SharedDrawLaplace(), samples=20_000, rng=seed, float_bits=False)


def test_a_deterministic_mechanism_is_not_mistaken_for_shared_draws():
    r = audit(Deterministic(), samples=20_000, rng=0, float_bits=False)
    assert r.violation and r.epsilon_lower_bound > 8.0


class InputSeededLaplace(GlobalNumpyLaplace):
    """Draws from a generator seeded by the input, ignoring ``rng``: rows differ within a call,
    but every call repeats them, so each release is a function of x (true epsilon infinite).
    Session 52's probe: 0.231-7.648 at epsilon 0.25-8, no distribution violation, no word."""

    def privatize(self, x, rng):
        x = np.asarray(x, float)
        return x + np.random.default_rng(int(x[0, 0] * 1000)).laplace(0.0, 1.0, x.shape)


class FixedSeedLaplace(GlobalNumpyLaplace):
    def privatize(self, x, rng):
        x = np.asarray(x, float)
        return x + np.random.default_rng(0).laplace(0.0, 1.0, x.shape)


@pytest.mark.parametrize("mech", [InputSeededLaplace(), FixedSeedLaplace()])
@pytest.mark.parametrize("event", [None, ([0.0], [1.0], lambda y, x, x2: y[:, 0] > 0.5)])
def test_a_mechanism_repeating_its_draws_across_calls_is_refused(mech, event):
    # two 1,000-row calls from independent Generator states agree: continuous outputs drawn
    # from rng never do (the false refusal's bound: 2e-9, sampling.repeats_refused)
    with pytest.raises(UserCodeError, match=r"does not draw from the Generator it is given"):
        audit(mech, samples=2000, rng=0, event=event, float_bits=False, tradeoff=False)


class BinaryRR(GlobalNumpyLaplace):
    """Randomised response on {0, 1} (``k = 2``) or k-RR on k values, drawing from ``g``:
    ``"rng"`` the argument, ``"own"`` its own advancing generator, ``"input"`` one seeded by
    x (session 52's probe: binary at epsilon 1 got 0.968, k-RR over 64 values 0.812, no word)."""

    def __init__(self, epsilon: float, k: int = 2, g: str = "rng") -> None:
        self.epsilon, self.k, self.g, self.own = epsilon, k, g, np.random.default_rng()

    def privatize(self, x, rng):
        x = np.asarray(x, float)
        g = {"rng": rng, "own": self.own}.get(self.g) or np.random.default_rng(int(x[0, 0]))
        keep = g.random(x.shape) < np.exp(self.epsilon) / (np.exp(self.epsilon) + self.k - 1)
        return np.where(keep, x, (x + g.integers(1, self.k, x.shape)) % self.k)


@pytest.mark.parametrize("k", [2, 64])
@pytest.mark.parametrize("event", [None, ([0.0], [1.0], lambda y, x, x2: y[:, 0] > 0.5)])
def test_a_discrete_mechanism_seeded_from_its_input_is_refused(k, event):
    # its 8 rows repeat (binary): the 8-distinct-rows check missed it; the 1,000-row check's
    # bound u^1000 is about 0.72^1000 (binary, epsilon 1) and 0.03^1000 (k = 64)
    with pytest.raises(UserCodeError, match=r"same 1000 outputs .* seeded from the input"):
        audit(BinaryRR(1.0, k, "input"), samples=2000, rng=0, event=event, tradeoff=False)


@pytest.mark.parametrize(
    ("epsilon", "k", "g"), [(1.0, 2, "rng"), (1.0, 64, "rng"), (8.0, 2, "rng"), (8.0, 2, "own")]
)
@pytest.mark.parametrize("seed", range(3))
def test_discrete_mechanisms_drawing_fresh_randomness_are_not_refused(epsilon, k, g, seed):
    # a refusal here has probability at most 2e-9 per audit; at epsilon 8, q ~ 0.9993: two
    # independent 1,000-row calls agree with probability ~0.5, and u ~ 1 keeps it (never refused)
    r = audit(BinaryRR(epsilon, k, g), samples=2000, rng=seed, tradeoff=False, float_bits=False)
    assert not r.violation


class DtypeByInput(GlobalNumpyLaplace):
    """Randomised response on {0, 1} with correct values, released as int64 when x = 1 and as
    float64 when x = 0: the dtype tells x (session 52's probe: 0.234-7.751, no violation)."""

    def privatize(self, x, rng):
        x = np.asarray(x, float)
        y = np.where(rng.random(x.shape) < 0.73, x, 1 - x)
        return y.astype(np.int64) if x[0, 0] == 1 else y


def test_outputs_whose_dtype_depends_on_the_input_are_refused():
    with pytest.raises(UserCodeError, match=r"returned dtype float64 for x = \[0\] and int64"):
        audit(DtypeByInput(), samples=2000, rng=0, float_bits=False, tradeoff=False)
