"""The central aggregator of Algorithm 1 (eq. 22): it buffers sealed reports per trial and
steps theta <- theta - eta * mean(B) whenever |B| >= MAX_BUF (or, as an ablation, an Adam or
RMSprop step on the same mean: post-processing of released reports, no privacy cost).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.release import SealedRelease, require_sealed
from ldp_audit.training.pgc_a3c._kernels import aggregate
from ldp_audit.training.pgc_a3c.config import AGGREGATORS

__all__ = ["Aggregator"]

#: largest |theta| a trial may reach: a CartPole run's parameters stay below 100 (74 after 20,000
#: submissions, mechanism none), and by 1e15 doubles no longer resolve a step of 0.1 (session
#: 57: --aggregator-lr 1e30 trained to 8e31 and exited 0)
MAX_THETA = 1e15


class Aggregator:
    """The central aggregator of Algorithm 1 for many independent trials at once.

    Buffers reports per trial and applies eq. 22, theta <- theta - eta * mean(B), whenever
    |B| >= MAX_BUF. It only ever touches :class:`~ldp_audit.release.SealedRelease` objects.
    """

    def __init__(
        self,
        theta: np.ndarray,
        eta: np.ndarray,
        buffer_size: np.ndarray,
        optimizer: Any = None,
    ) -> None:
        self.theta = np.array(theta, dtype=np.float64, copy=True)
        g = self.theta.shape[0]
        self.eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (g,)).copy()
        self.buffer_size = np.broadcast_to(np.asarray(buffer_size, dtype=np.int64), (g,)).copy()
        self.buffer = np.zeros_like(self.theta)
        self.count = np.zeros(g, dtype=np.int64)
        self.version = np.zeros(g, dtype=np.int64)  # bumps at every update of theta
        # the aggregator ablation: per trial "sgd" / "adam" / "rmsprop" (post-processing)
        kinds = ["sgd"] * g if optimizer is None else list(np.broadcast_to(optimizer, (g,)))
        for k in kinds:
            if k not in AGGREGATORS:
                raise InvalidParameterError(f"optimizer must be one of {AGGREGATORS}, got {k!r}")
        self.kind = np.array([AGGREGATORS.index(k) for k in kinds], dtype=np.int64)
        self.adaptive = bool(self.kind.any())
        # Adam / RMSprop moments; plain SGD (kind 0) never reads them: empty stand-ins
        self.m1 = np.zeros_like(self.theta) if self.adaptive else np.zeros((g, 0))
        self.m2 = np.zeros_like(self.m1)
        self.steps = np.zeros(g, dtype=np.int64)
        #: the arrays :func:`~ldp_audit.training.pgc_a3c._kernels.agg_one` steps, in its order
        self.state = (self.theta, self.buffer, self.count, self.version, self.eta,
                      self.buffer_size, self.kind, self.m1, self.m2, self.steps)  # fmt: skip

    def receive(self, *reports: SealedRelease) -> None:
        """Apply batches of reports in row order (rows of one trial contiguous, in arrival
        order; different reports must concern different trials)."""
        for report in reports:
            require_sealed(report, "the aggregator")
        if not reports:
            return
        tr = np.concatenate([r.trial for r in reports])
        y = np.concatenate([r.values for r in reports])
        if tr.size == 0:
            return
        # eq. 22: theta <- theta - eta * (1/|B|) sum_{g~ in B} g~, one compiled pass in row order
        # (sgd; Adam / RMSprop steps on the same mean(B) where the ablation asks)
        tr, y = np.ascontiguousarray(tr, dtype=np.int64), np.ascontiguousarray(y, dtype=np.float64)
        aggregate(tr, y, *self.state)
        self.check_diverged()

    def check_diverged(self) -> None:
        """Refuse a trial whose theta left ``[-MAX_THETA, MAX_THETA]`` (or is not finite): its
        training diverged, and its result would read as a failed but valid run."""
        big = ~(np.abs(self.theta) <= MAX_THETA).all(axis=1)
        if big.any():
            g = int(np.flatnonzero(big)[0])
            raise InvalidParameterError(
                f"pgc-a3c diverged: trial {g}'s theta reached {np.abs(self.theta[g]).max():.3g} "
                f"(beyond {MAX_THETA:g}) after {int(self.version[g])} updates; likely cause: a "
                f"learning rate too large (the aggregator's step {self.eta[g]:g}; --aggregator-lr"
                ", or --eta for sgd) or reports too noisy for it (--epsilon, --clip)"
            )
