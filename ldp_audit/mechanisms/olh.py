"""Optimal local hashing (OLH, Wang et al. 2017), with the hash seeded per report as deployed.

Each report draws a fresh seed s (uniform on {0, ..., 2^32 - 1}), hashes the item to
``h = H_s(v)`` in {0, ..., g-1} and applies g-ary randomised response to h: keep it with
probability p = e^eps / (e^eps + g - 1), else report one of the other g - 1 values uniformly.
The report is the pair ``(y, s)``: an (n, 2) int64 array with columns [y, seed].

Privacy: the seed does not depend on the item, and given s the report is g-ary randomised
response on H_s(v), so the exact privacy loss of a report between items v and v' is

    ln P(y | v, s) - ln P(y | v', s) in {-eps, 0, +eps}     (p/q = e^eps, q = 1/(e^eps + g - 1)),

whatever the hash function (+eps exactly when y = H_s(v) != H_s(v')). The worst-case event
``{y = H_s(v)}`` needs the hash: a generic statistic of the raw pair (y, s) cannot see it, which
is why :meth:`OptimalLocalHashing.audit_statistics` ships the support indicator.

The hash: ``H_s(v) = mix(mix(s) xor v) mod g`` with ``mix`` the splitmix64 finaliser (Steele et
al. 2014) on uint64. The estimator's unbiasedness needs P_s(H_s(u) = H_s(v)) = 1/g for u != v
(then a report supports v with probability q* = 1/g when the input is not v); for this hash that
holds up to the quality of splitmix64's mixing and a modulo bias below g / 2^64, and the tests
check the collision rate against 1/g.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import check_epsilon_k, check_optional
from ldp_audit.mechanisms.frequency import (
    MAX_DOMAIN,
    FrequencyOracle,
    check_report_int,
    grr_reply,
    items_rng,
)
from ldp_audit.validation import check_int

__all__ = ["OptimalLocalHashing", "BinaryLocalHashing", "olh_hash"]

#: seeds are uniform on {0, ..., SEED_RANGE - 1}.
SEED_RANGE = 1 << 32
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def olh_hash(seeds: Any, items: Any, g: int) -> np.ndarray:
    """``H_seed(item)`` in {0, ..., g-1} (int64), elementwise with broadcasting."""
    s = np.asarray(seeds, dtype=np.int64).astype(np.uint64)
    v = np.asarray(items, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        return (_mix(_mix(s) ^ v) % np.uint64(g)).astype(np.int64)


def default_g(epsilon: float) -> int:
    """Wang et al.'s optimal range ``g = round(e^eps) + 1`` (at least 2)."""
    return max(2, int(round(math.exp(min(epsilon, 40.0)))) + 1)


@dataclass(frozen=True)
class OptimalLocalHashing(FrequencyOracle):
    """Optimal local hashing with a per-report seed; reports are (n, 2) int64 ``[y, seed]``.

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: the domain size (integer in [2, 2^53]).
        g: the hash range (integer >= 2); None means ``round(e^eps) + 1``.
    """

    epsilon: float
    k: int
    g: int | None = None
    name: ClassVar[str] = "optimal_local_hashing"

    def __post_init__(self) -> None:
        check_epsilon_k(self, MAX_DOMAIN)
        check_optional(self, "g", check_int, minimum=2, maximum=1 << 62)

    @property
    def hash_range(self) -> int:
        """g: the explicit one or the default ``round(e^eps) + 1``."""
        return self.g if self.g is not None else default_g(self.epsilon)

    @property
    def keep_probability(self) -> float:
        """p = e^eps / (e^eps + g - 1), computed without overflow."""
        return float(special.expit(self.epsilon - math.log(self.hash_range - 1)))

    @property
    def support_probabilities(self) -> tuple[float, float]:
        return self.keep_probability, 1.0 / self.hash_range

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Hash every item of ``x`` (n, 1) with a fresh seed and randomise the hash.

        Three uniforms per report, drawn report by report: the seed (floor(u * 2^32), exactly
        uniform since u is a multiple of 2^-53), keep-or-not, the replacement value.
        """
        xi, rng = items_rng(x, self.k, rng)
        g = self.hash_range
        u = rng.random((xi.shape[0], 3))
        seeds = np.floor(u[:, 0] * SEED_RANGE).astype(np.int64)
        h = olh_hash(seeds, xi[:, 0], g)
        return np.stack([grr_reply(h, self.keep_probability, u[:, 1], u[:, 2], g), seeds], axis=1)

    def _check_reports(self, y: Any, name: str) -> np.ndarray:
        a = check_report_int(y, name, 2)
        g = self.hash_range
        if not np.all((a[:, 0] >= 0) & (a[:, 0] < g)):
            raise InvalidParameterError(f"{name}[:, 0] must hold hash values in [0, {g})")
        if not np.all((a[:, 1] >= 0) & (a[:, 1] < SEED_RANGE)):
            raise InvalidParameterError(f"{name}[:, 1] must hold seeds in [0, 2^32)")
        return a

    def _supports(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``y == H_seed(v)`` per report."""
        return a[:, 0] == olh_hash(a[:, 1], v, self.hash_range)

    @property
    def loss_weights(self) -> tuple[float, float]:
        """The loss is +-epsilon or 0 (y = H_seed(v) or not)."""
        p = self.keep_probability
        return math.log(p) - (math.log1p(-p) - math.log(self.hash_range - 1)), 0.0


@dataclass(frozen=True)
class BinaryLocalHashing(OptimalLocalHashing):
    """Binary local hashing (BLH, Bassily & Smith 2015 in Wang et al.'s 2017 form): local
    hashing with the hash range fixed at g = 2, so one report carries one bit of the hashed item,
    kept with probability e^eps / (e^eps + 1). Reports are (n, 2) int64 ``[y, seed]`` as for
    :class:`OptimalLocalHashing`, with the same exact loss (+-eps or 0) and statistics.

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: the domain size (integer in [2, 2^53]).
    """

    g: int | None = 2
    name: ClassVar[str] = "binary_local_hashing"

    def __post_init__(self) -> None:
        if self.g != 2 or isinstance(self.g, bool):
            raise InvalidParameterError(
                f"g must be 2 for binary local hashing (use OptimalLocalHashing for another "
                f"range), got {self.g!r}"
            )
        super().__post_init__()

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name, "epsilon": self.epsilon, "k": self.k}
