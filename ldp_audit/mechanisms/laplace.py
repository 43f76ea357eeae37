"""The Laplace mechanism of Algorithm 2 (eqs. 19-21) and its grid variant :class:`DiscreteLaplace`
(Mironov-resistant: integer noise on a fixed grid)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import (
    Mechanism,
    as_pair_batches,
    check_dim,
    check_no_overflow,
    check_optional,
    clip_l1,
    opposites,
    private_epsilon,
)
from ldp_audit.validation import (
    check_batch,
    check_positive,
    check_rng,
)


@dataclass(frozen=True)
class Laplace(Mechanism):
    """Laplace mechanism for gradient submissions (Algorithm 2).

    Each row g is L1-clipped to C/2 (eq. 19), so two clipped rows differ by at most C in L1
    norm (eq. 20), and Lap(C/epsilon) noise is added to every coordinate (eq. 21).

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        clip: C, the L1 sensitivity; rows are clipped to L1 norm C/2.
    """

    epsilon: float
    clip: float
    name: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", private_epsilon(self.epsilon))
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        check_no_overflow(self.clip / self.epsilon, self.clip, "the noise scale clip / epsilon")

    @property
    def scale(self) -> float:
        """The Laplace scale b = C / epsilon of eq. 21."""
        return self.clip / self.epsilon

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        """Eq. 19: clip each row to L1 norm C/2."""
        return clip_l1(x, self.clip / 2.0)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Return ``clip(x) + z`` with z_i ~ Lap(C/epsilon) i.i.d. (eqs. 19, 21).

        Args:
            x: (n, d) real array, one report per row; NaN/inf raise before any randomness.
            rng: the source of randomness.
        """
        xb = check_batch(x, "x")
        rng = check_rng(rng)
        noise = rng.laplace(0.0, self.scale, size=xb.shape)
        noise += self.clip_rows(xb)
        return noise

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact ``log p(y|x) - log p(y|x2) = (||y - c(x2)||_1 - ||y - c(x)||_1) / b`` per row.

        Bounded by ``||c(x) - c(x2)||_1 / b <= C / b = epsilon`` (eq. 20).
        """
        xb, x2b, yb = as_pair_batches(x, x2, y)
        d1 = np.abs(yb - self.clip_rows(xb)).sum(axis=1)
        d2 = np.abs(yb - self.clip_rows(x2b)).sum(axis=1)
        return (d2 - d1) / self.scale

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Input pairs an auditor should try: L1-ball extreme points, sign and dense vectors,
        huge out-of-range inputs."""
        d = check_dim(dim)
        c = self.clip
        e0 = np.eye(1, d)[0]  # the first unit vector
        ones = np.ones(d)
        # extreme points (L1 distance C: tight), huge ones (clipping must act), sign vectors on
        # the ball, dense and huge ones
        pairs = opposites(0.5 * c * e0, 1e6 * c * e0, 0.5 * c * ones / d, 1e6 * c * ones)
        pairs.append((np.zeros(d), 0.5 * c * e0))
        if d > 1:
            pairs.append((0.5 * c * e0, 0.5 * c * np.eye(1, d, 1)[0]))
        return pairs

    def event(self) -> Any:
        """``LaplaceEvent(epsilon)`` (eqs. 19-21: L1 sensitivity C, noise scale C / epsilon),
        which the PLD accountant composes exactly."""
        from ldp_audit.accountant.events import LaplaceEvent

        return LaplaceEvent(self.epsilon)


#: the largest grid index of a :class:`DiscreteLaplace` report, 2^53: an integer a double holds
#: exactly, far below the int64 maximum of the geometric draws
MAX_GRID_INDEX = 2.0**53


@dataclass(frozen=True)
class DiscreteLaplace(Mechanism):
    """Laplace mechanism on a grid: eq. 19 clipping, then discrete Laplace noise on gamma Z.

    Not in the paper: an optional variant of Algorithm 2 that resists Mironov's (2012) attack on
    floating-point Laplace noise. Each clipped row (eq. 19) is rounded to the grid gamma Z
    coordinate-wise, k = round(c(g) / gamma), and integer noise Z_j with
    P(Z = z) proportional to exp(-epsilon |z| / K) is added; the report is gamma (k + Z). Every
    report lies on the same grid whatever the input, and the noise is drawn as integers, so no
    input-dependent gaps in the set of possible outputs exist.

    Sensitivity in grid units: |round(u) - round(v)| <= ceil(|u - v|), so for two clipped rows
    (L1 distance <= C) ``||k - k'||_1 <= K = ceil(C / gamma) + d``; the noise is calibrated to K,
    which makes one report epsilon-LDP. The price is extra noise: the noise scale is about
    (C + d gamma) / epsilon instead of C / epsilon (10% more with the default gamma = C / (10 d)),
    plus rounding error of at most gamma / 2 per coordinate.

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        clip: C, the L1 sensitivity; rows are clipped to L1 norm C/2 (eq. 19).
        resolution: the grid step gamma (> 0); None means C / (10 d), fixed at ``privatize``.
    """

    epsilon: float
    clip: float
    resolution: float | None = None
    name: ClassVar[str] = "discrete_laplace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", private_epsilon(self.epsilon))
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        check_optional(self, "resolution", check_positive)
        # noise scale about (C + d gamma) / epsilon; gamma <= C at the default resolution
        step = self.clip if self.resolution is None else max(self.clip, self.resolution)
        what = "the noise scale clip / epsilon" if step == self.clip else "resolution / epsilon"
        check_no_overflow(2.0 * step / self.epsilon, self.clip, what)
        self.grid_sensitivity(1)  # the grid's own bound at the smallest d (privatize: its d)

    def grid_step(self, dim: int) -> float:
        """gamma for inputs of dimension ``dim``."""
        d = check_dim(dim)
        return self.resolution if self.resolution is not None else self.clip / (10.0 * d)

    def grid_sensitivity(self, dim: int) -> int:
        """K = ceil(C / gamma) + d: the L1 sensitivity of the rounded rows in grid units.

        Raises InvalidParameterError where the grid index k + Z of a report leaves the integers
        a double holds exactly, 2^53 (:data:`MAX_GRID_INDEX`): |k| <= C / (2 gamma) + 1, and
        Z = G1 - G2 with geometric G of success p = 1 - e^(-epsilon / K) stays below 64 / p
        but with probability e^-64. Past it the geometric draws saturate at the int64 maximum
        and cancel (session 58: ``DiscreteLaplace(epsilon=1e-20, clip=1)`` released its input
        unnoised; ``resolution=1e-300`` overflowed k: every output the same wrong value)."""
        d = check_dim(dim)
        k = int(math.ceil(self.clip / self.grid_step(d) - 1e-12)) + d
        p = -math.expm1(-self.epsilon / k)
        top = self.clip / (2.0 * self.grid_step(d)) + 1.0 + (64.0 / p if p > 0 else math.inf)
        if not top <= MAX_GRID_INDEX:
            raise InvalidParameterError(
                f"DiscreteLaplace(epsilon={self.epsilon!r}, clip={self.clip!r}, resolution="
                f"{self.resolution!r}) at d = {d}: its grid indices (the clipped row over gamma "
                f"= {self.grid_step(d):.3g}, plus the noise's tail 64 K / epsilon) reach {top:.3g}"
                f", beyond 2^53, what a double holds exactly; use a larger epsilon or resolution"
            )
        return k

    clip_rows = Laplace.clip_rows  # eq. 19: clip each row to L1 norm C/2

    def grid_centres(self, x: np.ndarray) -> np.ndarray:
        """k = round(c(x) / gamma) as int64 (|k_j| <= C / (2 gamma) + 1)."""
        return np.rint(self.clip_rows(x) / self.grid_step(x.shape[1])).astype(np.int64)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Return gamma (k + Z) with k the rounded clipped row and Z discrete Laplace noise.

        Z = G1 - G2 with G1, G2 i.i.d. geometric on {0, 1, ...} with success probability 1 - q
        (two draws per coordinate, drawn report by report).
        """
        xb = check_batch(x, "x")
        rng = check_rng(rng)
        n, d = xb.shape
        success = -math.expm1(-self.epsilon / self.grid_sensitivity(d))  # 1 - q
        g = rng.geometric(success, size=(n, d, 2))
        z = g[:, :, 0] - g[:, :, 1]  # the "- 1" offsets of the two geometrics cancel
        return (self.grid_centres(xb) + z).astype(np.float64) * self.grid_step(d)

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact ``log P(y|x) - log P(y|x2) = epsilon/K (||m - k2||_1 - ||m - k1||_1)`` with
        m = y / gamma, k1, k2 the grid centres; bounded by epsilon."""
        xb, x2b, yb = as_pair_batches(x, x2, y)
        d = yb.shape[1]
        step = self.grid_step(d)
        m_float = yb / step
        m_int = np.rint(m_float)
        if np.any(np.abs(m_float - m_int) > 1e-6 * np.maximum(1.0, np.abs(m_int))):
            raise InvalidParameterError(
                f"y must lie on the grid gamma Z (gamma = {step!r}); got off-grid values"
            )
        k1, k2 = self.grid_centres(xb), self.grid_centres(x2b)
        diff = np.abs(m_int - k2).sum(axis=1) - np.abs(m_int - k1).sum(axis=1)
        return diff * (self.epsilon / self.grid_sensitivity(d))

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The Laplace candidates (extreme points, sign vectors, huge and dense inputs)."""
        return Laplace(epsilon=self.epsilon, clip=self.clip).candidate_pairs(dim)


# ----------------------------------------------------------------------------------------------
# compiled row kernels (the fused PGC-A3C engine calls these, never a copy)
# ----------------------------------------------------------------------------------------------


def _l1_norm_row_py(x: np.ndarray, lo: int, n: int) -> float:
    """sum_k |x[lo + k]| for k < n in NumPy's pairwise order (``np.abs(x).sum()`` of a
    contiguous row: 8 accumulators up to 128 elements), so the L1 clip of eq. 19 is bit for bit
    :meth:`Laplace.clip_rows`'s. Rows longer than 128 are not supported (NaN)."""
    if n < 8:
        res = 0.0
        for k in range(n):
            res += abs(x[lo + k])
        return res
    if n <= 128:
        r0 = abs(x[lo])
        r1 = abs(x[lo + 1])
        r2 = abs(x[lo + 2])
        r3 = abs(x[lo + 3])
        r4 = abs(x[lo + 4])
        r5 = abs(x[lo + 5])
        r6 = abs(x[lo + 6])
        r7 = abs(x[lo + 7])
        i = 8
        stop = n - n % 8
        while i < stop:
            r0 += abs(x[lo + i])
            r1 += abs(x[lo + i + 1])
            r2 += abs(x[lo + i + 2])
            r3 += abs(x[lo + i + 3])
            r4 += abs(x[lo + i + 4])
            r5 += abs(x[lo + i + 5])
            r6 += abs(x[lo + i + 6])
            r7 += abs(x[lo + i + 7])
            i += 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res += abs(x[lo + i])
            i += 1
        return res
    # NumPy halves longer rows recursively; the engine's rows have d = 112 <= 128, and a
    # recursive function would not load from Numba's cache
    return math.nan


def _laplace_clip_row_py(
    x: np.ndarray, s: float, bound: float, slow: bool, out: np.ndarray
) -> None:
    """Eq. 19 (:meth:`Laplace.clip_rows`, ``base.clip_l1``) of one row with L1 norm ``s``
    (from :func:`_l1_norm_row_py`): ``x * min(1, bound / s)``; with ``slow`` (some row of the
    batch overflowed) the overflow-safe path: rescale by max |x_j| first. Same operations as
    NumPy's."""
    d = x.shape[0]
    if not slow:
        den = s if s > 0.0 else bound
        f = bound / den
        if f > 1.0:
            f = 1.0
        for k in range(d):
            out[k] = x[k] * f
        return
    m = 0.0
    for k in range(d):
        if abs(x[k]) > m:
            m = abs(x[k])
    if not m > 0.0:
        m = 1.0
    for k in range(d):
        out[k] = x[k] / m
    s2 = _L1_NORM_ROW(out, 0, d)
    if m * s2 > bound:
        f = bound / (s2 if s2 > 0.0 else 1.0)
        for k in range(d):
            out[k] = out[k] * f
    else:
        for k in range(d):
            out[k] = x[k]


def _laplace_row_py(
    x: np.ndarray, s: float, bound: float, slow: bool, z: np.ndarray, out: np.ndarray
) -> None:
    """One report of :meth:`Laplace.privatize` (eqs. 19, 21) from its noise row ``z``
    (``rng.laplace(0, C / epsilon, d)``): ``out = z + clip(x)``, the mechanism's operations in
    its order, so the same ``z`` gives the same report bit for bit."""
    _LAPLACE_CLIP_ROW(x, s, bound, slow, out)
    for k in range(x.shape[0]):
        out[k] = z[k] + out[k]


class LaplaceKernels(NamedTuple):
    """The compiled (Numba ``njit``) row kernels of :class:`Laplace`, callable from other
    ``njit`` code (the fused PGC-A3C engine, ``ldp_audit.training.pgc_a3c._fused_kernel``).

    Attributes:
        l1_norm: ``(x, lo, n) -> float``, ||x[lo:lo+n]||_1 summed in NumPy's order (n <= 128).
        clip_row: ``(x, s, bound, slow, out)``, eq. 19 of one row with norm ``s`` into ``out``;
            ``slow``: the overflow-safe path, taken for every row of a batch in which some row's
            norm is not finite (as :meth:`Laplace.clip_rows` does).
        row: ``(x, s, bound, slow, z, out)``, one report: ``out = z + clip(x)`` (eq. 21).
    """

    l1_norm: Any
    clip_row: Any
    row: Any


_L1_NORM_ROW: Any = None
_LAPLACE_CLIP_ROW: Any = None
_KERNELS: LaplaceKernels | None = None


def laplace_kernels() -> LaplaceKernels:
    """The Laplace mechanism's compiled row kernels (:class:`LaplaceKernels`), compiled with
    Numba on first call and the same objects ever after (importing this module does not import
    Numba). Rows must have d <= 128 (the engine's d = 112)."""
    global _L1_NORM_ROW, _LAPLACE_CLIP_ROW, _KERNELS
    if _KERNELS is None:
        import numba as nb

        jit = nb.njit(cache=True, nogil=True)
        # each kernel calls the one before as a global, so that global must be compiled first
        _L1_NORM_ROW = jit(_l1_norm_row_py)
        _LAPLACE_CLIP_ROW = jit(_laplace_clip_row_py)
        _KERNELS = LaplaceKernels(_L1_NORM_ROW, _LAPLACE_CLIP_ROW, jit(_laplace_row_py))
    return _KERNELS
