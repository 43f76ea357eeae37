"""The Gaussian mechanism and the analytic Gaussian mechanism (Balle & Wang 2018)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import (
    Mechanism,
    as_pair_batches,
    check_dim,
    clip_l2,
    opposites,
    private_epsilon,
)
from ldp_audit.stats import check_nonnegative
from ldp_audit.validation import (
    check_batch,
    check_positive,
    check_probability,
    check_real,
    check_real_in,
    check_rng,
)

#: the smallest noise multiplier: the analytic epsilon, about 2 / noise_multiplier^2, stays below
#: the root finder's 1e12 cap (1e-5: epsilon 2.0e10; 1e-6 was taken with epsilon inf, a private
#: mechanism claiming no privacy)
MIN_NOISE_MULTIPLIER = 1e-5
#: the range of ``clip`` and of ``sigma``: :meth:`Gaussian.privacy_loss` divides squared
#: distances, at most d (64 sigma + 2 clip)^2, by 2 sigma^2; both are finite normal doubles
#: there (sigma = 1e-300 gave NaN, clip = 1e300 an OverflowError)
SCALE_RANGE = (1e-100, 1e100)


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """Smallest delta such that N(0, sigma^2) noise on an L2-``sensitivity`` query is
    (epsilon, delta)-DP (Balle & Wang 2018, Theorem 8):

    ``delta = Phi(D/(2 s) - e s/D) - e^e Phi(-D/(2 s) - e s/D)``.
    """
    eps = check_nonnegative(epsilon, "epsilon")
    s = check_positive(sigma, "sigma")
    sens = check_positive(sensitivity, "sensitivity")
    if math.isinf(eps):
        return 0.0
    a = sens / (2.0 * s)
    b = eps * s / sens
    val = special.ndtr(a - b) - math.exp(min(eps + special.log_ndtr(-a - b), 700.0))
    return float(max(val, 0.0))


def analytic_gaussian_epsilon(sigma: float, sensitivity: float, delta: float) -> float:
    """The exact (smallest) epsilon of the Gaussian mechanism at ``delta`` (Balle & Wang 2018),
    found with a root finder on :func:`analytic_gaussian_delta` (decreasing in epsilon).

    Args:
        sigma: the noise standard deviation (> 0).
        sensitivity: the L2 sensitivity of the query (> 0); 2 * clip for replace-one.
        delta: in (0, 1).

    Returns:
        epsilon >= 0 (0.0 when delta already covers epsilon = 0).
    """
    s = check_positive(sigma, "sigma")
    sens = check_positive(sensitivity, "sensitivity")
    dl = check_probability(delta, "delta")

    def f(e: float) -> float:
        return analytic_gaussian_delta(e, s, sens) - dl

    if f(0.0) <= 0.0:
        return 0.0
    hi = 1.0
    while f(hi) > 0.0:
        hi *= 2.0
        if hi > 1e12:  # pragma: no cover - sigma so small that no finite epsilon is useful
            return math.inf
    from scipy import optimize

    return float(optimize.brentq(f, 0.0, hi, xtol=1e-13, rtol=1e-13, maxiter=500))


def analytic_gaussian_sigma(epsilon: float, sensitivity: float, delta: float) -> float:
    """The smallest sigma for which N(0, sigma^2) noise is (epsilon, delta)-DP on an
    L2-``sensitivity`` query (inverse of :func:`analytic_gaussian_epsilon`)."""
    eps = private_epsilon(epsilon)
    sens = check_positive(sensitivity, "sensitivity")
    dl = check_probability(delta, "delta")

    def f(log_s: float) -> float:
        return analytic_gaussian_delta(eps, math.exp(log_s), sens) - dl

    lo, hi = math.log(sens) - 1.0, math.log(sens) + 1.0
    while f(lo) <= 0.0:
        lo -= 2.0
    while f(hi) > 0.0:
        hi += 2.0
    from scipy import optimize

    return float(math.exp(optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-13, maxiter=500)))


@dataclass(frozen=True)
class Gaussian(Mechanism):
    """Gaussian mechanism: L2-clip each row to ``clip``, add N(0, (noise_multiplier * clip)^2).

    ``epsilon`` is the exact analytic-Gaussian-mechanism epsilon (Balle & Wang 2018) at
    ``delta`` for replace-one neighbours, whose L2 sensitivity is 2 * clip.

    Args:
        clip: L2 clip bound C, in [1e-100, 1e100] (:data:`SCALE_RANGE`).
        noise_multiplier: sigma / C, >= 1e-5 (:data:`MIN_NOISE_MULTIPLIER`); sigma in
            :data:`SCALE_RANGE` too.
        delta: the delta at which ``epsilon`` is reported, in (0, 1).
    """

    clip: float
    noise_multiplier: float
    delta: float = 1e-5  # type: ignore[assignment]  # a field here, a property elsewhere
    name: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        lo, hi = SCALE_RANGE
        clip = check_real_in(self.clip, "clip", lo=lo, lo_open=False, hi=hi)
        nm = check_real_in(self.noise_multiplier, "noise_multiplier", lo=MIN_NOISE_MULTIPLIER,
                           lo_open=False)  # fmt: skip
        object.__setattr__(self, "clip", clip)
        object.__setattr__(self, "noise_multiplier", nm)
        object.__setattr__(self, "delta", check_probability(self.delta, "delta"))
        if not lo <= self.sigma <= hi:
            raise InvalidParameterError(
                f"sigma = noise_multiplier x clip = {nm!r} x {clip!r} must be in "
                f"[{lo:g}, {hi:g}] (privacy_loss's squared distances over sigma^2), got "
                f"{self.sigma!r}"
            )

    @property
    def sigma(self) -> float:
        """The noise standard deviation noise_multiplier * clip."""
        return self.noise_multiplier * self.clip

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity for replace-one neighbours: 2 * clip."""
        return 2.0 * self.clip

    @cached_property
    def epsilon(self) -> float:  # type: ignore[override]
        """Analytic Gaussian mechanism epsilon at ``delta`` (replace-one, sensitivity 2C)."""
        return analytic_gaussian_epsilon(self.sigma, self.sensitivity, self.delta)

    def epsilon_at(self, delta: Any) -> float:
        """The analytic-Gaussian epsilon at another ``delta`` (the claimed privacy profile the
        auditor compares its lower curve with); ``inf`` at delta = 0."""
        d = check_real(delta, "delta")
        if d == 0.0:
            return math.inf
        d = check_probability(d, "delta")
        return analytic_gaussian_epsilon(self.sigma, self.sensitivity, d)

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        """L2 clip of every row to ``clip``."""
        return clip_l2(x, self.clip)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Return ``clip_L2(x) + N(0, sigma^2 I)`` row-wise."""
        xb = check_batch(x, "x")
        rng = check_rng(rng)
        noise = rng.standard_normal(size=xb.shape)
        noise *= self.sigma
        noise += self.clip_rows(xb)
        return noise

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact log-density ratio ``(||y - c(x2)||^2 - ||y - c(x)||^2) / (2 sigma^2)``
        (unbounded: the guarantee is (epsilon, delta), not pure)."""
        xb, x2b, yb = as_pair_batches(x, x2, y)
        d1 = ((yb - self.clip_rows(xb)) ** 2).sum(axis=1)
        d2 = ((yb - self.clip_rows(x2b)) ** 2).sum(axis=1)
        return (d2 - d1) / (2.0 * self.sigma**2)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Opposite points of the L2 ball (distance 2C), huge and dense inputs."""
        d = check_dim(dim)
        c = self.clip
        e0 = np.eye(1, d)[0]  # the first unit vector
        ones = np.ones(d) / math.sqrt(d)
        return opposites(c * e0, 1e6 * c * e0, c * ones, 1e6 * c * ones)

    def event(self) -> Any:
        """``GaussianEvent(noise_multiplier / 2)``: the noise is N(0, (noise_multiplier *
        clip)^2) on an input clipped to L2 norm ``clip``; in the local model any two inputs are
        neighbours (replace-one), so the L2 sensitivity is 2 * clip and the ratio of the noise's
        standard deviation to the sensitivity is noise_multiplier / 2."""
        from ldp_audit.accountant.events import GaussianEvent

        return GaussianEvent(self.noise_multiplier / 2.0)
