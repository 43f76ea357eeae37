"""Unary encoding: symmetric (SUE, basic RAPPOR's one-shot form) and optimised (OUE).

The item v becomes the one-hot vector e_v in {0, 1}^k and each bit is reported independently:
a 1 stays 1 with probability p, a 0 becomes 1 with probability q (Wang et al. 2017, section 4.3).
One report's exact privacy loss between items v and v' is

    [y_v = 1] ln(p/q) + [y_v = 0] ln((1-p)/(1-q)) - (the same for v'),

at most ``ln(p (1 - q) / ((1 - p) q)) = epsilon`` (reached when y_v = 1 and y_v' = 0).

* SUE: p = e^{eps/2} / (e^{eps/2} + 1), q = 1 - p.
* OUE: p = 1/2, q = 1 / (e^eps + 1) (the variance-optimal choice).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.mechanisms.base import check_epsilon_k
from ldp_audit.mechanisms.frequency import FrequencyOracle, items_rng, one_hot

__all__ = ["SymmetricUnaryEncoding", "OptimizedUnaryEncoding"]

#: the largest k a unary encoding accepts (every report has k bits).
MAX_UNARY_K = 1 << 20


@dataclass(frozen=True)
class _UnaryEncoding(FrequencyOracle):
    """Shared maths of the unary encodings; a subclass defines :attr:`bit_probabilities`."""

    epsilon: float
    k: int

    def __post_init__(self) -> None:
        check_epsilon_k(self, MAX_UNARY_K)

    @property
    @abc.abstractmethod
    def bit_probabilities(self) -> tuple[float, float]:
        """(p, q): P(bit = 1 | the item's bit is 1) and P(bit = 1 | it is 0)."""

    @property
    def support_probabilities(self) -> tuple[float, float]:
        return self.bit_probabilities

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Randomise the one-hot encoding of every item of ``x`` (n, 1): (n, k) int8 bits.

        One uniform per bit, k per report, drawn report by report.
        """
        xi, rng = items_rng(x, self.k, rng)
        p, q = self.bit_probabilities
        u = rng.random((xi.shape[0], self.k))
        return np.where(one_hot(xi, self.k), u < p, u < q).astype(np.int8)


@dataclass(frozen=True)
class SymmetricUnaryEncoding(_UnaryEncoding):
    """Symmetric unary encoding (SUE; basic RAPPOR's one-time form): each bit of the one-hot
    encoding is kept with probability e^{eps/2} / (e^{eps/2} + 1).

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: the domain size (integer in [2, 2^20]).
    """

    name: ClassVar[str] = "symmetric_unary_encoding"

    @property
    def bit_probabilities(self) -> tuple[float, float]:
        p = float(special.expit(self.epsilon / 2.0))
        return p, float(special.expit(-self.epsilon / 2.0))


@dataclass(frozen=True)
class OptimizedUnaryEncoding(_UnaryEncoding):
    """Optimised unary encoding (OUE, Wang et al. 2017): the item's bit is 1 with probability
    1/2, every other bit is 1 with probability 1 / (e^eps + 1).

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: the domain size (integer in [2, 2^20]).
    """

    name: ClassVar[str] = "optimized_unary_encoding"

    @property
    def bit_probabilities(self) -> tuple[float, float]:
        return 0.5, float(special.expit(-self.epsilon))
