"""Extra mechanisms for the auditor's tests: four known-broken ones and their correct twins.

They are written the way a user would write them (plain classes with ``epsilon``,
``privatize(x, rng)`` and ``candidate_pairs(dim)``), so they also exercise the auditor's
black-box contract. ``dim`` is the input dimension the pairs are built for.

| fixture | bug | true epsilon |
|---|---|---|
| NoisyMaxValue | report-noisy-max returns the noisy max *value*, not its index | (d-1) eps |
| SparseVectorNoQueryNoise | sparse vector (c = 1) compares queries without noise | inf |
| DoubledRandomizedResponse | binary randomized response run at 2 eps, claims eps | 2 eps |
| TextbookFloatLaplace | ``clip(x) + b * ln(U)`` in IEEE doubles (Mironov 2012) | inf (low bits) |

Held-out-style extras with a ``broken`` switch: ExponentialMechanism (weights exp(eps u), not
exp(eps u / 2): 2 eps), UnaryEncoding (flip probability at 2 eps: 2 eps); TwoSidedGeometric is
a correct integer mechanism.

Correct twins: NoisyMaxIndex (Dwork & Roth Claim 3.9, counting queries, Lap(1/eps)),
SparseVector (AboveThreshold, Lap(2/eps) threshold, Lap(4/eps) queries; Lyu et al. 2017 Alg. 1
with c = 1), and TextbookFloatLaplace itself is correct in exact arithmetic (audit with
``float_bits=False``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _rows(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _counting_pairs(dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Neighbouring count vectors (adding one record raises each count by 0 or 1)."""
    zeros = np.zeros(dim)
    all_but_last = np.ones(dim)
    all_but_last[-1] = 0.0
    first = np.zeros(dim)
    first[0] = 1.0
    return [(zeros, all_but_last), (zeros, np.ones(dim)), (zeros, first)]


@dataclass(frozen=True)
class NoisyMaxIndex:
    """Correct report-noisy-max for counting queries: argmax_i (q_i + Lap(1/eps)); output (n, 1)."""

    epsilon: float
    dim: int = 5

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        q = _rows(x)
        noisy = q + rng.laplace(0.0, 1.0 / self.epsilon, size=q.shape)
        return np.argmax(noisy, axis=1).astype(np.float64)[:, None]

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return _counting_pairs(dim)


@dataclass(frozen=True)
class NoisyMaxValue(NoisyMaxIndex):
    """Broken: returns max_i (q_i + Lap(1/eps)), the noisy value. For q = 0 vs (1,..,1,0) the
    left tail of the maximum has likelihood ratio e^{(d-1) eps}."""

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        q = _rows(x)
        noisy = q + rng.laplace(0.0, 1.0 / self.epsilon, size=q.shape)
        return np.max(noisy, axis=1)[:, None]


@dataclass(frozen=True)
class SparseVector:
    """Correct AboveThreshold (sparse vector, c = 1, threshold 0): eps/2 on the threshold
    (Lap(2/eps)), eps/2 on the queries (Lap(4/eps)). Output per query: 1 (above, then stop),
    0 (below), -1 (not answered)."""

    epsilon: float
    dim: int = 4
    query_noise: bool = True

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        q = _rows(x)
        n, d = q.shape
        rho = rng.laplace(0.0, 2.0 / self.epsilon, size=(n, 1))
        nu = rng.laplace(0.0, 4.0 / self.epsilon, size=(n, d)) if self.query_noise else 0.0
        above = (q + nu) >= rho
        first = np.where(above.any(axis=1), np.argmax(above, axis=1), d)
        idx = np.arange(d)[None, :]
        out = np.where(idx < first[:, None], 0.0, -1.0)
        out[idx == first[:, None]] = 1.0
        return out

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        a = np.zeros(dim)
        a[0] = 1.0
        b = np.zeros(dim)
        b[1 % dim] = 1.0
        return [(a, b), (np.zeros(dim), np.ones(dim))]


@dataclass(frozen=True)
class SparseVectorNoQueryNoise(SparseVector):
    """Broken (Lyu, Su & Li 2017, Alg. 5-like): no noise on the queries. With q = (1, 0, ...)
    the output (0, 1, ...) is impossible while (0, 1, ...) has positive probability from
    q = (0, 1, ...): infinite loss."""

    query_noise: bool = False


@dataclass(frozen=True)
class DoubledRandomizedResponse:
    """Broken: binary randomized response that keeps the bit w.p. e^{2 eps}/(e^{2 eps} + 1)
    while claiming eps (true epsilon 2 eps). Input/output (n, 1) in {0, 1}."""

    epsilon: float

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        b = _rows(x)
        keep = rng.random(b.shape) < 1.0 / (1.0 + math.exp(-2.0 * self.epsilon))
        return np.where(keep, b, 1.0 - b)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.zeros(1), np.ones(1))]


@dataclass(frozen=True)
class TextbookFloatLaplace:
    """The textbook Laplace mechanism on [0, C] (sensitivity C) in IEEE doubles:
    ``y = clip(x, 0, C) - b sgn(u) ln(1 - 2|u|)`` with ``u = U - 1/2``, ``U`` uniform,
    ``b = C / eps``. Exactly eps-DP over the reals; Mironov (2012): the set of reachable doubles
    depends on the input, so its true epsilon as a map into doubles is infinite."""

    epsilon: float
    clip: float = 1.0

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        v = np.clip(_rows(x), 0.0, self.clip)
        u = rng.random(v.shape) - 0.5
        noise = -(self.clip / self.epsilon) * np.sign(u) * np.log(1.0 - 2.0 * np.abs(u))
        return v + noise

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.zeros(dim), np.full(dim, self.clip))]


@dataclass(frozen=True)
class ExponentialMechanism:
    """Exponential mechanism over d candidates with utilities x (sensitivity 1): candidate j
    w.p. proportional to exp(eps x_j / 2). ``broken=True`` drops the 1/2 (true epsilon 2 eps on
    the pair below, where the utilities move by +-1 in opposite directions). Output (n, 1)."""

    epsilon: float
    broken: bool = False
    dim: int = 4

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        w = (self.epsilon if self.broken else self.epsilon / 2.0) * _rows(x)
        p = np.exp(w - w.max(axis=1, keepdims=True))
        cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
        u = rng.random((x.shape[0], 1))
        return np.minimum((u > cdf).sum(axis=1), x.shape[1] - 1).astype(np.float64)[:, None]

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        a = np.zeros(dim)
        a[0] = 1.0
        return [(a, 1.0 - a)]


@dataclass(frozen=True)
class UnaryEncoding:
    """Optimized unary encoding (Wang et al. 2017) of a value in {0..k-1}: one-hot, keep a 1
    w.p. 1/2, turn a 0 on w.p. 1/(e^eps + 1); output (n, k) bits. ``broken=True`` uses
    1/(e^{2 eps} + 1): the loss ln(p (1 - q) / (q (1 - p))) = ln((1 - q)/q) becomes 2 eps."""

    epsilon: float
    k: int = 8
    broken: bool = False

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        e = 2.0 * self.epsilon if self.broken else self.epsilon
        onehot = np.zeros((x.shape[0], self.k))
        onehot[np.arange(x.shape[0]), _rows(x)[:, 0].astype(int)] = 1.0
        prob = np.where(onehot == 1.0, 0.5, 1.0 / (math.exp(e) + 1.0))
        return (rng.random(onehot.shape) < prob).astype(np.float64)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.zeros(1), np.ones(1))]


@dataclass(frozen=True)
class TwoSidedGeometric:
    """Correct geometric mechanism on integers clipped to [0, 10] (sensitivity 1): x + G1 - G2
    with G ~ Geometric(1 - e^-eps) - 1; integer outputs (float-safe)."""

    epsilon: float

    def privatize(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        a = math.exp(-self.epsilon)
        q = np.clip(np.round(_rows(x)), 0.0, 10.0)
        return q + rng.geometric(1.0 - a, q.shape) - rng.geometric(1.0 - a, q.shape)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(np.zeros(dim), np.ones(dim))]
