"""The adaptive frequency oracle (ADP, as in Arcolezi et al.'s multi-freq-ldpy): generalised
randomised response when its estimator variance is the smaller one, optimised unary encoding
otherwise.

Wang et al. (USENIX Security 2017) give the variances at frequency 0 (up to 1/n):
GRR ``(e^eps + k - 2) / (e^eps - 1)^2`` and OUE ``4 e^eps / (e^eps - 1)^2``, so GRR is chosen
exactly when ``k < 3 e^eps + 2``. The choice depends only on (eps, k), never on the data, so the
adaptive oracle's privacy is that of the chosen oracle: epsilon exactly, with its exact loss,
reports, estimator and audit statistics (everything is delegated to :attr:`chosen`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldp_audit.mechanisms.base import check_epsilon_k
from ldp_audit.mechanisms.frequency import MAX_DOMAIN, FrequencyOracle
from ldp_audit.mechanisms.randomized_response import RandomizedResponse
from ldp_audit.mechanisms.unary import MAX_UNARY_K, OptimizedUnaryEncoding
from ldp_audit.validation import check_epsilon, check_int

__all__ = ["AdaptiveFrequencyOracle", "adaptive_uses_grr"]


def adaptive_uses_grr(epsilon: float, k: int) -> bool:
    """True when GRR's variance is below OUE's: ``k < 3 e^eps + 2`` (overflow-safe)."""
    eps = check_epsilon(epsilon)
    kk = check_int(k, "k", minimum=2, maximum=MAX_DOMAIN)
    return eps > 40.0 or kk < 3.0 * math.exp(eps) + 2.0


@dataclass(frozen=True)
class AdaptiveFrequencyOracle(FrequencyOracle):
    """ADP: :class:`RandomizedResponse` when ``k < 3 e^eps + 2``, else
    :class:`OptimizedUnaryEncoding` (reports are the chosen oracle's: (n, 1) or (n, k)).

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: the domain size (integer >= 2; at most 2^20 where OUE is chosen).
    """

    epsilon: float
    k: int
    name: ClassVar[str] = "adaptive_frequency_oracle"

    def __post_init__(self) -> None:
        check_epsilon_k(self, MAX_DOMAIN, check_epsilon)
        if not adaptive_uses_grr(self.epsilon, self.k):
            check_int(self.k, "k", minimum=2, maximum=MAX_UNARY_K)

    @property
    def chosen(self) -> FrequencyOracle:
        """The oracle ADP runs: GRR or OUE at the same (epsilon, k)."""
        if adaptive_uses_grr(self.epsilon, self.k):
            return RandomizedResponse(epsilon=self.epsilon, k=self.k)
        return OptimizedUnaryEncoding(epsilon=self.epsilon, k=self.k)

    @property
    def support_probabilities(self) -> tuple[float, float]:
        return self.chosen.support_probabilities

    def support(self, reports: Any, items: Any) -> np.ndarray:
        return self.chosen.support(reports, items)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """The chosen oracle's ``privatize`` (its draws, report by report)."""
        return self.chosen.privatize(x, rng)

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """The chosen oracle's exact loss (+-epsilon or 0 for GRR; UE's for OUE)."""
        return self.chosen.privacy_loss(x, x2, y)  # type: ignore[attr-defined]

    def audit_statistics(self) -> list[Any]:
        return self.chosen.audit_statistics()
