"""RAPPOR (Erlingsson, Pihur & Korolova, CCS 2014) in its basic form: one-hot encoding (one hash
function, no Bloom-filter collisions: "basic RAPPOR" of the paper), the permanent randomised
response (PRR) and, for :class:`BasicRappor`, the instantaneous randomised response (IRR).

* PRR: every bit B_i of the one-hot encoding becomes B'_i = 1 with probability f/2, 0 with
  probability f/2, and B_i otherwise.
* IRR: the report bit S_i is 1 with probability q if B'_i = 1, with probability p if B'_i = 0.

**The memoised permanent response is an accounting matter.** In the deployed protocol a client
draws B' once per value and memoises it; every later report of that value re-randomises the
same B' with a fresh IRR. ``privatize`` draws a fresh PRR for every row, i.e. each row is the
*first* report of a client (or a client whose memo is not kept); its ``epsilon`` is the exact
privacy loss of *one* report (eps_1 of the paper). What many reports of one memoised value cost
together is capped by the PRR alone, ``permanent_epsilon`` (eps_inf = 2 ln((1 - f/2) / (f/2)):
every report is post-processing of B'), and :meth:`BasicRappor.longitudinal_event` is the
accounting event for that cap. To reproduce memoisation, keep
``b = rappor.permanent_response(x, rng)`` and report ``rappor.instantaneous_response(b, rng)``
as often as needed; charging the ledger per report with :meth:`event` or once per value with
:meth:`longitudinal_event` is the caller's choice, and only the latter holds when the memo is
kept.

:class:`OneTimeRappor` is the PRR alone (the report is B'): one-time RAPPOR, which is symmetric
unary encoding with p = 1 - f/2, q = f/2.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.frequency import FrequencyOracle, check_bits, items_rng, one_hot
from ldp_audit.mechanisms.unary import MAX_UNARY_K
from ldp_audit.validation import check_int, check_probability, check_rng

__all__ = ["BasicRappor", "OneTimeRappor", "rappor_f_for_epsilon"]

#: the smallest f: a bit kept with probability 1 - f/2 < 1 in double precision (f/2 >= 2^-53,
#: the spacing of the doubles below 1), so epsilon's logs stay finite (session 58: f = 1e-20
#: was taken and ``OneTimeRappor.epsilon`` raised 'math domain error'; epsilon at the bound: 73.5)
MIN_F = 2.0**-52


def rappor_f_for_epsilon(epsilon: float) -> float:
    """The PRR's f whose permanent epsilon is exactly ``epsilon`` (one-hot encoding, h = 1):
    ``f = 2 / (1 + e^{eps/2})``, the inverse of ``eps = 2 ln((1 - f/2) / (f/2))`` (no rounding)."""
    from ldp_audit.mechanisms.base import private_epsilon

    eps = private_epsilon(epsilon)
    return 2.0 / (1.0 + math.exp(eps / 2.0))


@dataclass(frozen=True)
class _RapporBase(FrequencyOracle):
    k: int
    f: float = 0.5

    def _validate_k_f(self) -> None:
        object.__setattr__(self, "k", check_int(self.k, "k", minimum=2, maximum=MAX_UNARY_K))
        object.__setattr__(self, "f", check_probability(self.f, "f"))
        if self.f < MIN_F:
            raise InvalidParameterError(f"f must be >= 2^-52 = {MIN_F:.4g}, got {self.f!r}")

    @property
    def permanent_epsilon(self) -> float:
        """eps_inf = 2 ln((1 - f/2) / (f/2)): the PRR's own epsilon, the cap for any number of
        reports of one memoised value."""
        h = self.f / 2.0
        return 2.0 * (math.log1p(-h) - math.log(h))

    def longitudinal_event(self) -> Any:
        """``PureDpEvent(permanent_epsilon)``: all reports of one memoised value together."""
        from ldp_audit.accountant.events import PureDpEvent

        return PureDpEvent(self.permanent_epsilon)

    def permanent_response(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """B' (n, k) int8 for the items of ``x`` (n, 1): one PRR per row, k uniforms per row."""
        xi, rng = items_rng(x, self.k, rng)
        return self._prr(xi, rng.random((xi.shape[0], self.k)))

    def _prr(self, xi: np.ndarray, u: np.ndarray) -> np.ndarray:
        h = self.f / 2.0
        # u < f/2: 1; f/2 <= u < f: 0; else the true bit
        return np.where(one_hot(xi, self.k), (u < h) | (u >= self.f), u < h).astype(np.int8)

    @property
    @abc.abstractmethod
    def bit_probabilities(self) -> tuple[float, float]:
        """(q*, p*): P(report bit = 1 | the item's bit) and P(report bit = 1 | another bit)."""

    @property
    def support_probabilities(self) -> tuple[float, float]:
        return self.bit_probabilities

    @property
    def epsilon(self) -> float:
        """The exact privacy loss bound of one report: ln(q* (1 - p*) / (p* (1 - q*)))."""
        q1, p1 = self.bit_probabilities
        return (math.log(q1) + math.log1p(-p1)) - (math.log(p1) + math.log1p(-q1))


@dataclass(frozen=True)
class BasicRappor(_RapporBase):
    """Basic RAPPOR: one-hot encoding, PRR with ``f``, IRR with ``p`` and ``q``; reports are
    (n, k) int8 bits. ``epsilon`` is the exact one-report bound eps_1 (a property of f, p, q);
    see the module docstring for memoisation and ``permanent_epsilon``.

    Args:
        k: the domain size (integer in [2, 2^20]).
        f: the PRR's randomisation probability, in [2^-52, 1) (Chrome's default 0.5).
        p: P(S_i = 1 | B'_i = 0), in [0, 1] (default 0.5).
        q: P(S_i = 1 | B'_i = 1), in [0, 1], q > p (default 0.75).
    """

    p: float = 0.5
    q: float = 0.75
    name: ClassVar[str] = "basic_rappor"

    def __post_init__(self) -> None:
        self._validate_k_f()
        object.__setattr__(self, "p", check_probability(self.p, "p", open_interval=False))
        object.__setattr__(self, "q", check_probability(self.q, "q", open_interval=False))
        if not self.q > self.p:
            raise InvalidParameterError(
                f"q must be greater than p (reports must carry signal), got p = {self.p!r}, "
                f"q = {self.q!r}"
            )

    @property
    def bit_probabilities(self) -> tuple[float, float]:
        h = self.f / 2.0
        q_star = (1.0 - h) * self.q + h * self.p
        p_star = h * self.q + (1.0 - h) * self.p
        return q_star, p_star

    def instantaneous_response(self, b_prime: Any, rng: np.random.Generator) -> np.ndarray:
        """S (n, k) int8 from memoised permanent responses B' (n, k): k uniforms per row."""
        b = check_bits(b_prime, self.k, "b_prime")
        return self._irr(b, check_rng(rng).random(b.shape))

    def _irr(self, b: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The IRR of permanent bits ``b`` from uniforms ``u`` (broadcast together): int8."""
        return np.where(b == 1, u < self.q, u < self.p).astype(np.int8)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """PRR then IRR for every item of ``x`` (n, 1): (n, k) int8.

        2k uniforms per report, drawn report by report (the first k for the PRR, the last k for
        the IRR).
        """
        xi, rng = items_rng(x, self.k, rng)
        u = rng.random((xi.shape[0], 2 * self.k))
        return self._irr(self._prr(xi, u[:, : self.k]), u[:, self.k :])


@dataclass(frozen=True)
class OneTimeRappor(_RapporBase):
    """One-time RAPPOR: the PRR alone, the report is B' ((n, k) int8 bits); ``epsilon`` is
    ``2 ln((1 - f/2) / (f/2))`` (equal to ``permanent_epsilon``). Build it for a target epsilon
    with ``OneTimeRappor(k, f=rappor_f_for_epsilon(eps))``.

    Args:
        k: the domain size (integer in [2, 2^20]).
        f: the PRR's randomisation probability, in [2^-52, 1) (:data:`MIN_F`).
    """

    name: ClassVar[str] = "one_time_rappor"

    def __post_init__(self) -> None:
        self._validate_k_f()

    @property
    def bit_probabilities(self) -> tuple[float, float]:
        h = self.f / 2.0
        return 1.0 - h, h

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """B' for every item of ``x`` (n, 1): (n, k) int8, k uniforms per report."""
        return self.permanent_response(x, rng)
