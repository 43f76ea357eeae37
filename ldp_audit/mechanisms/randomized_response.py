"""k-ary randomized response (direct encoding / generalised randomized response)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.mechanisms.base import check_epsilon_k
from ldp_audit.mechanisms.frequency import FrequencyOracle, check_items, grr_reply, items_rng


@dataclass(frozen=True)
class RandomizedResponse(FrequencyOracle):
    """k-ary randomized response: keep the value w.p. e^eps/(e^eps + k - 1), else report one of
    the other k - 1 values uniformly (k = 2 is eq. 4 on {-1, +1} relabelled to {0, 1}).

    Input and output have shape (n, 1) with integer values in {0, ..., k-1} (floats holding
    integers are accepted); the output is int64.

    As a frequency oracle this is direct encoding / generalised randomised response (GRR, Wang
    et al. 2017): a report supports the item it names, :meth:`estimate` is the unbiased
    server-side estimator and :meth:`event`
    the accounting event ``PureDpEvent(epsilon)`` (see :mod:`ldp_audit.mechanisms.frequency`).

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: number of categories (integer >= 2).
    """

    epsilon: float
    k: int = 2
    name: ClassVar[str] = "randomized_response"

    def __post_init__(self) -> None:
        check_epsilon_k(self)

    @property
    def keep_probability(self) -> float:
        """e^eps / (e^eps + k - 1), computed without overflow."""
        return float(special.expit(self.epsilon - math.log(self.k - 1)))

    def _check_reports(self, y: Any, name: str) -> np.ndarray:
        return check_items(y, self.k, name)

    def _supports(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``y == v`` per report."""
        return a[:, 0] == v

    @property
    def loss_weights(self) -> tuple[float, float]:
        """The loss is +-epsilon or 0 (y = v or not)."""
        p = self.keep_probability
        return math.log(p) - (math.log1p(-p) - math.log(self.k - 1)), 0.0

    @property
    def support_probabilities(self) -> tuple[float, float]:
        p = self.keep_probability
        return p, (1.0 - p) / (self.k - 1)

    def audit_statistics(self) -> list:
        """None: the auditor's own discrete-cell statistic already reads each output exactly
        (``{y = x}`` is one of its cells), and shipping none keeps the audits of this mechanism
        (the tightness table, the soundness runs) exactly as they were before the frequency
        oracles landed. ``SupportStatistic(rr)`` builds the support statistic if wanted."""
        return []

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Randomise every row of ``x`` (n, 1); returns (n, 1) int64."""
        xi, rng = items_rng(x, self.k, rng)
        n = xi.shape[0]
        u = rng.random((n, 2))  # two uniforms per report, drawn report by report
        return grr_reply(xi, self.keep_probability, u[:, :1], u[:, 1:], self.k)
