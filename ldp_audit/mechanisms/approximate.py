"""Approximate (epsilon, delta)-LDP frequency oracles (Wang et al., "Local differential privacy
for data collection and analysis", Neurocomputing 2021), the ``A``-prefixed protocols LDP-Auditor
audits: generalised randomised response (AGRR) and symmetric unary encoding (ASUE) whose
probabilities spend a delta.

* AGRR keeps the item with p = (e^eps + (k-1) delta) / (e^eps + k - 1), else reports one of the
  other k - 1 items uniformly (q = (1 - p) / (k - 1) = (1 - delta) / (e^eps + k - 1)).
* ASUE keeps each bit of the one-hot encoding with p = (e^eps - s) / (e^eps - 1) and sets a 0
  bit with q = 1 - p = (s - 1) / (e^eps - 1), s = sqrt(e^eps (1 - delta) + delta).

Their exact privacy profiles, for items v != v', are
``delta(eps') = max(0, p - e^eps' q)`` (AGRR: the only output more likely under v is v) and
``delta(eps') = max(0, p^2 - e^eps' q^2)`` (ASUE: only the two bits of v and v' differ in law;
(1, 0) is the only pattern more likely under v), and both equal ``delta`` exactly at
``eps' = epsilon``: the claim is tight. ``epsilon_at(delta')`` inverts them. Their pure epsilon,
``epsilon_at(0)``, is ln(p/q) (AGRR) or 2 ln(p/q) (ASUE), above ``epsilon``.

The accountant has no (epsilon, delta) event for one report, so :meth:`event` refuses rather than
charging a pure epsilon the mechanism does not satisfy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.randomized_response import RandomizedResponse
from ldp_audit.mechanisms.unary import SymmetricUnaryEncoding
from ldp_audit.stats import check_delta_range
from ldp_audit.validation import check_probability

__all__ = ["ApproximateRandomizedResponse", "ApproximateSymmetricUnaryEncoding"]


def _log_expm1(x: float) -> float:
    """ln(e^x - 1) for x > 0, without overflow."""
    return x + math.log(-math.expm1(-x))


def _inverse_profile(p: float, q: float, delta: float) -> float:
    """The eps' with max(0, p - e^eps' q) = delta (0 when delta >= p - q)."""
    d = check_delta_range(delta)
    if d >= p - q:
        return 0.0
    return math.log(p - d) - math.log(q)


class _Approximate:
    """What the approximate oracles share (a mix-in: the claim, the profile, the refusal)."""

    delta: float

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]  # the oracle's, next in the MRO
        object.__setattr__(self, "delta", check_probability(self.delta, "delta"))

    def event(self) -> Any:
        raise InvalidParameterError(
            f"{type(self).__name__} is (epsilon, delta)-LDP: the accountant has no event for "
            "one (epsilon, delta) report, and a pure-epsilon charge would understate it"
        )


@dataclass(frozen=True)
class ApproximateRandomizedResponse(_Approximate, RandomizedResponse):
    """AGRR: k-ary randomised response keeping the item with
    ``(e^eps + (k-1) delta) / (e^eps + k - 1)``; (epsilon, delta)-LDP with delta exact.

    Args:
        epsilon: the claim's epsilon (finite, > 0).
        k: number of categories (integer >= 2).
        delta: the claim's delta, in (0, 1) (LDP-Auditor's default 1e-5).
    """

    delta: float = 1e-5  # type: ignore[assignment]  # a field here, a property elsewhere
    name: ClassVar[str] = "approximate_randomized_response"

    @property
    def keep_probability(self) -> float:
        """p = a + (1 - a) delta with a = e^eps / (e^eps + k - 1) (no overflow)."""
        a = float(special.expit(self.epsilon - math.log(self.k - 1)))
        return a + (1.0 - a) * self.delta

    def epsilon_at(self, delta: Any) -> float:
        """The exact profile's epsilon at ``delta``: ln((p - delta) / q)."""
        p, q = self.support_probabilities
        return _inverse_profile(p, q, delta)


@dataclass(frozen=True)
class ApproximateSymmetricUnaryEncoding(_Approximate, SymmetricUnaryEncoding):
    """ASUE: symmetric unary encoding with p = (e^eps - s) / (e^eps - 1), q = 1 - p,
    s = sqrt(e^eps (1 - delta) + delta); (epsilon, delta)-LDP with delta exact.

    Args:
        epsilon: the claim's epsilon (finite, > 0).
        k: the domain size (integer in [2, 2^20]).
        delta: the claim's delta, in (0, 1).
    """

    delta: float = 1e-5  # type: ignore[assignment]  # a field here, a property elsewhere
    name: ClassVar[str] = "approximate_symmetric_unary_encoding"

    @property
    def bit_probabilities(self) -> tuple[float, float]:
        e, d = self.epsilon, self.delta
        log_s = 0.5 * float(special.logsumexp([e + math.log1p(-d), math.log(d)]))
        q = math.exp(_log_expm1(log_s) - _log_expm1(e)) if log_s > 0 else 0.0
        return 1.0 - q, q

    def epsilon_at(self, delta: Any) -> float:
        """The exact profile's epsilon at ``delta``: ln((p^2 - delta) / q^2)."""
        p, q = self.bit_probabilities
        return _inverse_profile(p * p, q * q, delta)
