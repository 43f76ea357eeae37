"""audit(statistics=...): user statistics for structured outputs, and the bound-0 warning.

The toy mechanism releases ``(y, seed)`` with ``y = H(seed, x)`` with probability p, else
``y`` uniform on G values: each coordinate's marginal is the same under every input, so no
built-in statistic sees the leak (the bound is exactly 0 and the result warns), while the
support indicator ``{y = H(seed, x)}`` has probability ``p + (1 - p)/G`` under x and about
``1/G`` under x2 (true epsilon about ``ln(1 + p G) = 3.96`` at p = 0.05, G = 1024; the claim is
1). The violation test's false-failure probability is 0: the claim is false. The bound-0 test
asks that every event's bound be <= 0, which holds unless the built-in statistics find an event
on two identical distributions, i.e. with probability <= 1 - confidence = 0.05 for this fixed
seed (deterministic given the seed).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldp_audit.audit import audit
from ldp_audit.errors import InvalidParameterError, UserCodeError

G = 1024
PAIR = [(np.array([0.0]), np.array([1.0]))]


def hashed(seed: np.ndarray, x: float) -> np.ndarray:
    """A 64-bit mix of (seed, x) reduced to G values (the report's hash family)."""
    with np.errstate(over="ignore"):
        h = seed.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        h ^= np.uint64(int(x) + 1) * np.uint64(0xC2B2AE3D27D4EB4F)
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return (h % np.uint64(G)).astype(np.int64)


class HashLeak:
    """Claims epsilon 1; releases (y, seed), y = H(seed, x) with probability p (int64 output)."""

    epsilon = 1.0

    def __init__(self, p: float = 0.05) -> None:
        self.p = p
        self.calls = 0

    def privatize(self, x, rng):
        self.calls += 1
        n = x.shape[0]
        seed = rng.integers(0, 2**31, size=n)
        y = rng.integers(0, G, size=n)
        hit = rng.random(n) < self.p
        y = np.where(hit, hashed(seed, x[0, 0]), y)
        return np.stack([y, seed], axis=1)


def support(outputs, x, x_prime):
    """1 where the report's y is the hash of its seed and the first input."""
    return (outputs[:, 0] == hashed(outputs[:, 1], x[0])).astype(np.float64)


class ShipsStatistic(HashLeak):
    """The same leak, with the statistic shipped by the mechanism itself."""

    def audit_statistics(self):
        def stat(outputs, x, x_prime):
            return support(outputs, x, x_prime)

        stat.name = "olh-like support"
        return [stat]


def test_without_statistic_bound_zero_and_warning():
    r = audit(HashLeak(), PAIR, samples=10_000, rng=0)
    assert r.epsilon_lower_bound == 0.0 and not r.violation
    assert any("statistics=" in w and "exactly 0" in w for w in r.warnings)
    assert "statistics=" in r.summary()


def test_user_statistic_catches_hash_leak():
    r = audit(HashLeak(), PAIR, samples=10_000, rng=0, statistics=[support])
    assert r.violation and r.epsilon_lower_bound > 2.0
    assert r.witness.family == "user" and "support(y, x, x2)" in r.witness.event
    assert r.statistics == ("support",)
    assert not any("exactly 0" in w for w in r.warnings)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["statistics"] == ["support"] and d["witness"]["family"] == "user"


def test_mechanism_statistics_used_automatically():
    r = audit(ShipsStatistic(), PAIR, samples=10_000, rng=0)
    assert r.violation and r.statistics == ("olh-like support",)
    assert r.witness.event.startswith("statistic 'olh-like support' > ")


def test_statistic_sees_raw_outputs_and_pair_order():
    seen = []

    def spy(outputs, x, x_prime):
        seen.append((outputs.dtype, outputs.shape[1], float(x[0]), float(x_prime[0])))
        return np.zeros(len(outputs))

    pairs = [(np.array([0.0]), np.array([1.0])), (np.array([3.0]), np.array([2.0]))]
    audit(HashLeak(), pairs, samples=2_000, rng=0, statistics=[spy], tradeoff=False)
    assert {s[0] for s in seen} == {np.dtype(np.int64)}  # as privatize returned them
    assert {s[1] for s in seen} == {2}
    assert {s[2:] for s in seen} == {(0.0, 1.0), (3.0, 2.0)}


def test_same_result_without_statistics_as_before():
    """statistics=None and [] give the same audit (the default mode is unchanged)."""
    a = audit(HashLeak(), PAIR, samples=3_000, rng=1).to_dict()
    b = audit(HashLeak(), PAIR, samples=3_000, rng=1, statistics=[]).to_dict()
    a.pop("seconds"), b.pop("seconds")
    assert a == b


@pytest.mark.parametrize(
    ("stats", "match"),
    [
        ("support", "statistics must be a list"),
        (support, "statistics must be a list"),
        ([support, 3], r"statistics\[1\] must be callable"),
        ([support, support], "two statistics are named 'support'"),
    ],
)
def test_bad_statistics_refused_before_any_work(stats, match):
    m = HashLeak()
    with pytest.raises(InvalidParameterError, match=match):
        audit(m, PAIR, samples=2_000, rng=0, statistics=stats)
    assert m.calls == 0


def _named(fn, name):
    fn.name = name
    return fn


IPE = InvalidParameterError


@pytest.mark.parametrize(
    ("fn", "err", "match"),
    [
        (_named(lambda y, x, x2: np.zeros((len(y), 2)), "wide"), IPE, "'wide'.*shape"),
        (_named(lambda y, x, x2: np.full(len(y), np.nan), "nan"), IPE, "'nan'.*non-finite"),
        (_named(lambda y, x, x2: np.array(["a"] * len(y)), "text"), IPE, "'text'.*real"),
        (_named(lambda y, x, x2: 1 / 0, "boom"), UserCodeError, "'boom' raised ZeroDivisionError"),
    ],
)
def test_bad_statistic_output_named(fn, err, match):
    m = HashLeak()
    with pytest.raises(err, match=match):
        audit(m, PAIR, samples=2_000, rng=0, statistics=[fn])
    assert m.calls == 1  # checked on the first 8-output probe, before the selection samples


def test_lambda_gets_its_position_as_name():
    r = audit(HashLeak(), PAIR, samples=2_000, rng=0, statistics=[lambda y, x, x2: y[:, 0] * 0.0])
    assert r.statistics == ("statistics[0]",)


def test_mechanism_statistics_raising_is_user_code_error():
    class Bad(HashLeak):
        def audit_statistics(self):
            raise RuntimeError("nope")

    with pytest.raises(UserCodeError, match=r"audit_statistics\(\) of Bad raised RuntimeError"):
        audit(Bad(), PAIR, samples=2_000, rng=0)


def test_user_statistic_on_correct_mechanism_no_false_refutation():
    """Randomized response (true epsilon 1) with a statistic that reads its output exactly:
    the statistic's event is the best one there is, and the bound stays below the truth (a false
    refutation has probability <= 1e-6 at this confidence)."""
    from ldp_audit.mechanisms import RandomizedResponse

    def bit(outputs, x, x_prime):
        return np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)[:, 0]

    r = audit(RandomizedResponse(epsilon=1.0), samples=20_000, rng=0, confidence=1 - 1e-6,
              statistics=[bit])  # fmt: skip
    assert 0.5 < r.epsilon_lower_bound <= 1.0 and not r.violation
