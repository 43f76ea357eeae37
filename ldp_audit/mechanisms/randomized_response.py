"""k-ary randomized response (direct encoding / generalised randomized response)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms._base import (
    check_dim,
    check_int,
    private_epsilon,
)
from ldp_audit.mechanisms.frequency import FrequencyOracle, grr_reply
from ldp_audit.validation import (
    check_batch,
    check_rng,
)


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
        object.__setattr__(self, "epsilon", private_epsilon(self.epsilon))
        object.__setattr__(self, "k", check_int(self.k, "k", minimum=2))

    @property
    def keep_probability(self) -> float:
        """e^eps / (e^eps + k - 1), computed without overflow."""
        return float(special.expit(self.epsilon - math.log(self.k - 1)))

    def _check_values(self, x: Any, name: str) -> np.ndarray:
        xb = check_batch(x, name, dim=1)
        if not np.all((xb == np.rint(xb)) & (xb >= 0) & (xb <= self.k - 1)):
            bad = xb[~((xb == np.rint(xb)) & (xb >= 0) & (xb <= self.k - 1))][0]
            raise InvalidParameterError(
                f"{name} must hold integers in {{0, ..., {self.k - 1}}} (k = {self.k}), got {bad!r}"
            )
        return xb.astype(np.int64)

    @property
    def support_probabilities(self) -> tuple[float, float]:
        p = self.keep_probability
        return p, (1.0 - p) / (self.k - 1)

    def support(self, reports: Any, items: Any) -> np.ndarray:
        """``y == v`` per report."""
        y = self._check_values(reports, "reports")[:, 0]
        return y == np.broadcast_to(np.asarray(items, dtype=np.int64).reshape(-1), y.shape)

    def audit_statistics(self) -> list:
        """None: the auditor's own discrete-cell statistic already reads each output exactly
        (``{y = x}`` is one of its cells), and shipping none keeps the audits of this mechanism
        (the tightness table, the soundness runs) exactly as they were before the frequency
        oracles landed. ``SupportStatistic(rr)`` builds the support statistic if wanted."""
        return []

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Randomise every row of ``x`` (n, 1); returns (n, 1) int64."""
        xi = self._check_values(x, "x")
        rng = check_rng(rng)
        n = xi.shape[0]
        u = rng.random((n, 2))  # two uniforms per report, drawn report by report
        return grr_reply(xi, self.keep_probability, u[:, :1], u[:, 1:], self.k)

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact ``log P(y|x) - log P(y|x2)``: +-epsilon or 0 per row."""
        yi = self._check_values(y, "y")
        xi = self._check_values(np.asarray(x).reshape(-1, 1), "x")
        x2i = self._check_values(np.asarray(x2).reshape(-1, 1), "x2")
        for a, name in ((xi, "x"), (x2i, "x2")):
            if a.shape[0] not in (1, yi.shape[0]):
                raise InvalidParameterError(
                    f"{name} must have 1 or {yi.shape[0]} rows, got shape {a.shape}"
                )
        lp_keep = math.log(self.keep_probability)
        lp_other = math.log1p(-self.keep_probability) - math.log(self.k - 1)
        l1 = np.where(yi == xi, lp_keep, lp_other)
        l2 = np.where(yi == x2i, lp_keep, lp_other)
        return (l1 - l2)[:, 0]

    def candidate_pairs(self, dim: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pairs of distinct categories (dim must be 1)."""
        if check_dim(dim) != 1:
            raise InvalidParameterError(f"dim must be 1 for RandomizedResponse, got {dim!r}")
        pairs = [(np.array([0.0]), np.array([1.0]))]
        if self.k > 2:
            pairs.append((np.array([0.0]), np.array([float(self.k - 1)])))
        return pairs
