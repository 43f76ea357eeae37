"""Subset selection (SS; Wang et al., ICDE 2016 "Mutual information optimally local private
discrete distribution estimation", Ye & Barg, IEEE Trans. IT 2018 "k-subset mechanism").

A report is a subset Y of {0, ..., k-1} of fixed size omega (default
``omega = max(1, round(k / (e^eps + 1)))``, the variance-optimal size). With probability

    p = omega e^eps / (omega e^eps + k - omega)

the true item v is in Y together with omega - 1 items drawn uniformly without replacement from
the other k - 1; otherwise Y is omega items drawn uniformly from the other k - 1. So

    P(Y | v) = p / C(k-1, omega-1)  if v in Y,   (1 - p) / C(k-1, omega)  if v not in Y,

whose ratio is exactly e^eps; the exact privacy loss of a report between items v and v' is
+eps (v in Y, v' not), -eps (the reverse) or 0. The report is the subset's indicator vector,
(n, k) int8 with exactly omega ones per row.

Support probabilities (the frequency estimator of :mod:`~ldp_audit.mechanisms.frequency`):
p* = p and q* = (p (omega - 1) + (1 - p) omega) / (k - 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import check_epsilon_k, check_optional
from ldp_audit.mechanisms.frequency import FrequencyOracle, check_bits, items_rng
from ldp_audit.mechanisms.unary import MAX_UNARY_K
from ldp_audit.validation import check_epsilon, check_int

__all__ = ["SubsetSelection", "optimal_subset_size"]


def optimal_subset_size(epsilon: float, k: int) -> int:
    """Wang et al.'s size ``max(1, round(k / (e^eps + 1)))`` (at most k - 1)."""
    eps = check_epsilon(epsilon)
    kk = check_int(k, "k", minimum=2, maximum=MAX_UNARY_K)
    omega = int(np.rint(kk * float(special.expit(-eps))))
    return min(max(1, omega), kk - 1)


@dataclass(frozen=True)
class SubsetSelection(FrequencyOracle):
    """Subset selection: report a size-omega subset of the domain that holds the item with
    probability ``omega e^eps / (omega e^eps + k - omega)``; reports are (n, k) int8 indicators.

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: the domain size (integer in [2, 2^20]).
        subset_size: omega, an integer in [1, k - 1]; None means
            ``max(1, round(k / (e^eps + 1)))``.
    """

    epsilon: float
    k: int
    subset_size: int | None = None
    name: ClassVar[str] = "subset_selection"

    def __post_init__(self) -> None:
        check_epsilon_k(self, MAX_UNARY_K, check_epsilon)
        check_optional(self, "subset_size", check_int, minimum=1, maximum=self.k - 1)

    @property
    def omega(self) -> int:
        """The subset size: the explicit one or the optimal default."""
        if self.subset_size is not None:
            return self.subset_size
        return optimal_subset_size(self.epsilon, self.k)

    @property
    def include_probability(self) -> float:
        """p = omega e^eps / (omega e^eps + k - omega), computed without overflow."""
        w = self.omega
        return float(special.expit(self.epsilon + math.log(w) - math.log(self.k - w)))

    @property
    def support_probabilities(self) -> tuple[float, float]:
        p, w = self.include_probability, self.omega
        return p, (p * (w - 1) + (1.0 - p) * w) / (self.k - 1)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """A size-omega subset for every item of ``x`` (n, 1): (n, k) int8 indicators.

        k + 1 uniforms per report, drawn report by report: one sort key per item (the omega
        smallest keys form the subset; the true item's key is forced below or above all others)
        and the include-or-not draw.
        """
        xi, rng = items_rng(x, self.k, rng)
        n, k, w = xi.shape[0], self.k, self.omega
        u = rng.random((n, k + 1))
        keys = u[:, :k]
        rows = np.arange(n)
        keys[rows, xi[:, 0]] = np.where(u[:, k] < self.include_probability, -1.0, 2.0)
        chosen = np.argpartition(keys, w - 1, axis=1)[:, :w]
        out = np.zeros((n, k), dtype=np.int8)
        out[rows[:, None], chosen] = 1
        return out

    def _check_reports(self, y: Any, name: str) -> np.ndarray:
        b = check_bits(y, self.k, name)
        sizes = b.sum(axis=1, dtype=np.int64)
        if not np.all(sizes == self.omega):
            bad = int(sizes[sizes != self.omega][0])
            raise InvalidParameterError(
                f"{name} must hold subsets of size {self.omega} (one per row), got a row with "
                f"{bad} items"
            )
        return b

    @property
    def loss_weights(self) -> tuple[float, float]:
        """The loss is +-epsilon or 0 (v in Y or not)."""
        return self.epsilon, 0.0
