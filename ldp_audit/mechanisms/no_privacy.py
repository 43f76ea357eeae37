"""The explicit non-private baseline (epsilon = inf)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldp_audit.mechanisms.base import (
    Mechanism,
    as_pair_batches,
    check_dim,
)
from ldp_audit.validation import (
    check_batch,
    check_rng,
)


@dataclass(frozen=True)
class NoPrivacy(Mechanism):
    """The explicit non-private baseline (epsilon = inf): returns its input unchanged.

    Used for the epsilon = inf runs (e.g. the non-private A3C column of Tables 1-3). It still
    refuses NaN/inf inputs so every mechanism has the same input contract.
    """

    name: ClassVar[str] = "no_privacy"

    @property
    def epsilon(self) -> float:
        """Always ``float('inf')``."""
        return math.inf

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Return a float64 copy of ``x`` (n, d); ``rng`` is validated but not used."""
        xb = check_batch(x, "x")
        check_rng(rng)
        return xb.copy()

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """0 where x and x2 are equal, inf where y == x != x2, -inf where y == x2 != x."""
        xb, x2b, yb = as_pair_batches(x, x2, y)
        same = np.all(xb == x2b, axis=1)
        is_x = np.all(yb == xb, axis=1)
        is_x2 = np.all(yb == x2b, axis=1)
        with np.errstate(invalid="ignore"):
            out = np.where(is_x, math.inf, 0.0) - np.where(is_x2, math.inf, 0.0)
        return np.where(same, 0.0, np.nan_to_num(out, nan=0.0, posinf=math.inf, neginf=-math.inf))

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        d = check_dim(dim)
        e0 = np.eye(1, d)[0]  # the first unit vector
        return [(np.zeros(d), e0)]

    def event(self) -> Any:
        """``NonPrivateEvent()``: every composition of it is infinite."""
        from ldp_audit.accountant.events import NonPrivateEvent

        return NonPrivateEvent()
