"""Hadamard response (Acharya, Sun & Zhang, AISTATS 2019), the one-block form.

Let K be the smallest power of two with K >= k + 1 and H the K x K Sylvester-Hadamard matrix,
``H[i, j] = (-1)^popcount(i & j)``. Item v is given the set ``C_v = {y : H[v + 1, y] = +1}`` of
K/2 outputs (row 0 is skipped: it is all +1). The report is one output y in {0, ..., K-1}:

    P(y | v) = 2 e^eps / (K (e^eps + 1))   for y in C_v,     2 / (K (e^eps + 1))   otherwise,

so the exact privacy loss of a report is +-eps or 0. Rows of H are orthogonal, so for u != v,
|C_u & C_v| = K/4 and ``P(y in C_v | u) = 1/2``: a report supports v (``y in C_v``) with
probability p* = e^eps / (e^eps + 1) when the input is v and exactly q* = 1/2 otherwise, which
makes the estimator exactly unbiased.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import check_epsilon_k
from ldp_audit.mechanisms.frequency import (
    FrequencyOracle,
    check_report_int,
    items_rng,
)

__all__ = ["HadamardResponse", "hadamard_sign"]

#: the largest domain a Hadamard response accepts (K <= 2^52, so floor(u K) is exact).
MAX_HADAMARD_K = (1 << 52) - 1


def _parity(z: np.ndarray) -> np.ndarray:
    """popcount(z) mod 2 for int64 z >= 0 (folded XOR)."""
    z = z.astype(np.uint64)
    for s in (32, 16, 8, 4, 2, 1):
        z = z ^ (z >> np.uint64(s))
    return (z & np.uint64(1)).astype(np.int64)


def hadamard_sign(rows: Any, cols: Any) -> np.ndarray:
    """``H[rows, cols]`` of the Sylvester-Hadamard matrix, in {-1, +1} (int64, broadcasting)."""
    r = np.asarray(rows, dtype=np.int64)
    c = np.asarray(cols, dtype=np.int64)
    return 1 - 2 * _parity(r & c)


@dataclass(frozen=True)
class HadamardResponse(FrequencyOracle):
    """Hadamard response; reports are (n, 1) int64 outputs in {0, ..., K-1}.

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: the domain size (integer in [2, 2^52 - 1]).
    """

    epsilon: float
    k: int
    name: ClassVar[str] = "hadamard_response"

    def __post_init__(self) -> None:
        check_epsilon_k(self, MAX_HADAMARD_K)

    @property
    def output_size(self) -> int:
        """K: the smallest power of two >= k + 1."""
        return 1 << self.k.bit_length()

    @property
    def in_set_probability(self) -> float:
        """P(y in C_v | v) = e^eps / (e^eps + 1)."""
        return float(special.expit(self.epsilon))

    @property
    def support_probabilities(self) -> tuple[float, float]:
        return self.in_set_probability, 0.5

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """One output per item of ``x`` (n, 1): (n, 1) int64.

        Two uniforms per report, drawn report by report: y0 = floor(u0 K) is uniform on [K];
        with probability e^eps/(e^eps + 1) the output must lie in C_v, else outside it; when y0
        is on the wrong side it is moved by XOR with the lowest set bit of v + 1, a bijection
        between C_v and its complement, so the output is uniform on the chosen side.
        """
        xi, rng = items_rng(x, self.k, rng)
        big_k = self.output_size
        u = rng.random((xi.shape[0], 2))
        y0 = np.floor(u[:, 0] * big_k).astype(np.int64)
        row = xi[:, 0] + 1
        want_in = u[:, 1] < self.in_set_probability
        is_in = hadamard_sign(row, y0) == 1
        low_bit = row & -row
        return np.where(want_in == is_in, y0, y0 ^ low_bit)[:, None]

    def _check_reports(self, y: Any, name: str) -> np.ndarray:
        a = check_report_int(y, name, 1)[:, 0]
        if not np.all((a >= 0) & (a < self.output_size)):
            raise InvalidParameterError(f"{name} must hold outputs in [0, {self.output_size})")
        return a

    def _supports(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``y in C_v`` (H[v + 1, y] = +1) per report."""
        return hadamard_sign(v + 1, a) == 1

    @property
    def loss_weights(self) -> tuple[float, float]:
        """The loss is +-epsilon or 0 (y in C_v or not)."""
        return self.epsilon, 0.0
