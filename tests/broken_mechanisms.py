"""Known-broken mechanisms: each claims ``epsilon`` but leaks more.

They are test fixtures for the verification tests (tests/test_mechanisms_verify.py) and for the
auditor (``from tests.broken_mechanisms import ...``). Each subclasses the correct mechanism and
changes one step, so ``privacy_loss`` reports the *true* loss of what it actually does while
``epsilon`` still reports the (false) claim. ``worst_pair(dim)`` is the input pair on which the
violation is largest; the mechanisms' ``candidate_pairs`` include it as well.

| fixture | bug | true worst-case loss |
|---|---|---|
| HalfScaleLaplace | Lap(C / (2 epsilon)) | 2 epsilon |
| L2ClipLaplace | clip to L2 norm C/2, calibrated as L1 | sqrt(d) epsilon |
| NoClipLaplace | no clipping | unbounded |
| PRSPerCoordinateEpsilon | epsilon per coordinate, not epsilon/d_hat | d_hat epsilon |
| PRSNoElementClip | eq. 23 skipped; eq. 24 probabilities clamped to [0, 1] | unbounded |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ldp_audit.mechanisms import Laplace, ProjectedRandomSign
from ldp_audit.mechanisms.base import clip_l2

__all__ = [
    "HalfScaleLaplace",
    "L2ClipLaplace",
    "NoClipLaplace",
    "PRSPerCoordinateEpsilon",
    "PRSNoElementClip",
    "BROKEN_MECHANISMS",
    "known_broken",
]


@dataclass(frozen=True)
class HalfScaleLaplace(Laplace):
    """Adds Lap(C / (2 epsilon)): half the scale eq. 21 asks for; true loss 2 epsilon."""

    name: ClassVar[str] = "broken_half_scale_laplace"

    @property
    def scale(self) -> float:
        return self.clip / (2.0 * self.epsilon)

    def worst_pair(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        return self.candidate_pairs(dim)[0]


@dataclass(frozen=True)
class L2ClipLaplace(Laplace):
    """Clips rows to L2 norm C/2 but calibrates the noise for L1 sensitivity C (eqs. 19-20):
    dense inputs differ by up to sqrt(d) C in L1, so the true loss is sqrt(d) epsilon."""

    name: ClassVar[str] = "broken_l2_clip_laplace"

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        return clip_l2(x, self.clip / 2.0)

    def worst_pair(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        v = np.full(dim, 0.5 * self.clip / math.sqrt(dim))
        return v, -v


@dataclass(frozen=True)
class NoClipLaplace(Laplace):
    """Skips the clipping of eq. 19: huge inputs are nearly revealed (unbounded loss)."""

    name: ClassVar[str] = "broken_no_clip_laplace"

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        return x

    def worst_pair(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        e0 = np.zeros(dim)
        e0[0] = 10.0 * self.clip
        return e0, -e0


@dataclass(frozen=True)
class PRSPerCoordinateEpsilon(ProjectedRandomSign):
    """Spends epsilon on every coordinate's flip instead of epsilon/d_hat (eq. 24): true loss
    d_hat epsilon (no violation when d_hat = 1)."""

    name: ClassVar[str] = "broken_prs_per_coordinate_epsilon"

    def bit_epsilon(self, dim: int) -> float:
        self.effective_reduced_dim(dim)  # keep the range check
        return self.epsilon

    def worst_pair(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        return self.candidate_pairs(dim)[0]


@dataclass(frozen=True)
class PRSNoElementClip(ProjectedRandomSign):
    """Skips the element clip of eq. 23; eq. 24 then gives probabilities outside [0, 1], which
    the sampler effectively clamps: projections beyond +-C make the bit deterministic
    (unbounded loss)."""

    name: ClassVar[str] = "broken_prs_no_element_clip"

    def element_clip(self, u: np.ndarray) -> np.ndarray:
        return u

    def _prob_plus(self, ubar: np.ndarray, bit_eps: float) -> np.ndarray:
        a = (ubar + self.clip) / (2.0 * self.clip)
        p = 1.0 / (math.exp(bit_eps) + 1.0) + a * math.tanh(bit_eps / 2.0)
        return np.clip(p, 0.0, 1.0)

    def _log_probs(self, ubar: np.ndarray, bit_eps: float) -> tuple[np.ndarray, np.ndarray]:
        p = self._prob_plus(ubar, bit_eps)
        with np.errstate(divide="ignore"):
            return np.log(p), np.log1p(-p)

    def worst_pair(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        return self.candidate_pairs(dim)[0]


#: Every broken fixture class, by its config name.
BROKEN_MECHANISMS: dict[str, type] = {
    cls.name: cls
    for cls in (
        HalfScaleLaplace,
        L2ClipLaplace,
        NoClipLaplace,
        PRSPerCoordinateEpsilon,
        PRSNoElementClip,
    )
}


def known_broken(epsilon: float = 1.0, clip: float = 1.0) -> list:
    """One instance of every fixture at parameters where its bug shows (PRS per-coordinate gets
    reduced_dim = 4 so that it differs from the correct mechanism)."""
    return [
        HalfScaleLaplace(epsilon=epsilon, clip=clip),
        L2ClipLaplace(epsilon=epsilon, clip=clip),
        NoClipLaplace(epsilon=epsilon, clip=clip),
        PRSPerCoordinateEpsilon(epsilon=epsilon, clip=clip, reduced_dim=4),
        PRSNoElementClip(epsilon=epsilon, clip=clip),
    ]
