"""The bit flip of eq. 4, applied per coordinate at epsilon/d."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import (
    Mechanism,
    as_pair_batches,
    bitflip_log_probs,
    bitflip_prob_plus,
    check_dim,
    private_epsilon,
)
from ldp_audit.validation import (
    check_batch,
    check_rng,
)


@dataclass(frozen=True)
class BitFlip(Mechanism):
    """Bit flip (eq. 4) on inputs in [-1, 1], applied per coordinate at epsilon/d.

    Coordinate j of a report is +1 with probability
    ``1/(e^{e'}+1) + (x_j+1)/2 (e^{e'}-1)/(e^{e'}+1)``, e' = epsilon/d, else -1; by sequential
    composition one report of d coordinates is epsilon-LDP (d = 1 is exactly eq. 4).

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
    """

    epsilon: float
    name: ClassVar[str] = "bit_flip"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", private_epsilon(self.epsilon))

    def coordinate_epsilon(self, dim: int) -> float:
        """epsilon/d: what each coordinate's flip spends."""
        return self.epsilon / check_dim(dim)

    @staticmethod
    def _check_range(xb: np.ndarray, name: str) -> None:
        bad = np.abs(xb) > 1.0
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InvalidParameterError(
                f"{name} must have values in [-1, 1] (eq. 4), got {xb[idx]!r} at index {idx}"
            )

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Eq. 4 on every coordinate of ``x`` (n, d); returns (n, d) of +-1.0."""
        xb = check_batch(x, "x")
        self._check_range(xb, "x")
        rng = check_rng(rng)
        p = bitflip_prob_plus((xb + 1.0) / 2.0, self.coordinate_epsilon(xb.shape[1]))
        return np.where(rng.random(xb.shape) < p, 1.0, -1.0)

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact ``log P(y|x) - log P(y|x2)`` per row, y in {-1, +1}^d."""
        xb, x2b, yb = as_pair_batches(x, x2, y)
        self._check_range(xb, "x")
        self._check_range(x2b, "x2")
        if not np.all(np.abs(yb) == 1.0):
            raise InvalidParameterError("y must have values in {-1, +1}")
        e = self.coordinate_epsilon(yb.shape[1])
        lp1, lm1 = bitflip_log_probs((xb + 1.0) / 2.0, e)
        lp2, lm2 = bitflip_log_probs((x2b + 1.0) / 2.0, e)
        plus = yb > 0
        return (np.where(plus, lp1, lm1) - np.where(plus, lp2, lm2)).sum(axis=1)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Sign vectors (the extreme points) and a one-coordinate change."""
        d = check_dim(dim)
        ones = np.ones(d)
        one_flip = ones.copy()
        one_flip[0] = -1.0
        return [(ones, -ones), (ones, one_flip), (np.zeros(d), ones)]
