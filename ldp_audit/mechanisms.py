"""The epsilon-LDP mechanisms of Ono & Takahashi (2020), vectorised over a batch of reports.

Every mechanism is a frozen dataclass, validated in ``__post_init__``, holding no random state.
``privatize(x, rng)`` takes ``x`` of shape (n, d) -- one row per report -- and a
``numpy.random.Generator``; every output row is an independent randomisation. Where the maths
allows, ``privacy_loss`` gives the exact log-likelihood ratio ``log p(y | x) - log p(y | x2)`` so
tests and the auditor can check the claimed epsilon exactly.

Where each equation of the paper (``papers/ono-takahashi-2020-locally-private-distributed-rl.md``)
lives:

* eq. 4 (bit flip)                       -> :class:`BitFlip`, :func:`_bitflip_log_probs`
* eq. 5 (sparse random matrix M)         -> :func:`_sign_codes`
* eq. 19 (L1 clip to C/2), eq. 20        -> :func:`_clip_l1`, :class:`Laplace`
* eq. 21 / Algorithm 2 (Laplace noise)   -> :meth:`Laplace.privatize`
* eq. 23 (element clip), eq. 24 (flip),
  Algorithm 3 (projected random sign)    -> :class:`ProjectedRandomSign`
* section 3.2.1 (multi-round split)      -> :func:`split_epsilon`

Known limitation (documented, not fixed): :class:`Laplace` draws its noise with
``Generator.laplace`` in IEEE floating point, which is subject to Mironov's (CCS 2012) attack on
the least significant bits: the set of reachable outputs depends on the input, so an adversary who
sees the exact float can in principle distinguish inputs. The snapping mechanism defends against
it at the cost of rounding and a slightly larger epsilon; we leave it out (see
README.md, "Mechanisms").

Every ``privatize`` consumes its generator report by report (each row's draws are contiguous in
the stream), so splitting a batch into consecutive parts and privatising them in order with the
same generator gives exactly the same output rows: the trainers rely on this for reproducibility.
"""

from __future__ import annotations

import abc
import math
import numbers
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np
from scipy import special

from ldp_audit._validation import (
    check_batch,
    check_epsilon,
    check_positive,
    check_real,
    check_rng,
)
from ldp_audit.errors import InvalidParameterError

__all__ = [
    "Mechanism",
    "Laplace",
    "DiscreteLaplace",
    "ProjectedRandomSign",
    "BitFlip",
    "RandomizedResponse",
    "Gaussian",
    "NoPrivacy",
    "MECHANISMS",
    "from_config",
    "split_epsilon",
    "default_reduced_dim",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "analytic_gaussian_sigma",
]

_SQRT3 = math.sqrt(3.0)
#: Cap on the number of float64 uniforms (matrix entries and flips) PRS draws per chunk.
_PRS_CHUNK_ELEMENTS = 1 << 22


# ----------------------------------------------------------------------------------------------
# validation helpers local to the mechanisms
# ----------------------------------------------------------------------------------------------


def _private_epsilon(value: Any, name: str = "epsilon") -> float:
    """Epsilon of a private mechanism: finite and > 0; inf is pointed at :class:`NoPrivacy`."""
    v = check_real(value, name)
    if v == math.inf:
        raise InvalidParameterError(
            f"{name} must be finite for a private mechanism, got {value!r}; for a non-private "
            "baseline use ldp_audit.mechanisms.NoPrivacy() explicitly"
        )
    return check_epsilon(v, name)


#: largest |noise| / scale a double-precision draw can reach, with margin: Generator.laplace is
#: -scale * log(u) with u >= 2^-53 (36.7 scales), standard_normal stays below 40.
_NOISE_TAIL = 64.0


def _check_no_overflow(noise_scale: float, offset: float, what: str) -> None:
    """Refuse parameters whose outputs could overflow to inf (an inf output is not noise)."""
    with np.errstate(over="ignore"):
        top = float(np.float64(noise_scale) * _NOISE_TAIL + np.float64(offset))
    if not math.isfinite(top):
        raise InvalidParameterError(
            f"{what} = {noise_scale!r} is too large: outputs would overflow to inf in double "
            "precision (the noise scale times 64 must stay below 1.8e308); use a larger epsilon "
            "or a smaller clip"
        )


def _check_int(value: Any, name: str, *, minimum: int) -> int:
    """Return ``value`` as an int >= ``minimum`` (bools and non-integral floats are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    v = int(value)
    if v < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return v


def _check_dim(dim: Any) -> int:
    return _check_int(dim, "dim", minimum=1)


def _as_pair_batches(
    x: Any, x2: Any, y: Any, *, y_name: str = "y"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate (x, x2, y) for ``privacy_loss``; x and x2 may be (1, d) and broadcast over y."""
    yb = check_batch(y, y_name)
    n = yb.shape[0]
    out = []
    for arr, name in ((x, "x"), (x2, "x2")):
        a = np.asarray(arr)
        if a.ndim == 1:
            a = a[None, :]
        a = check_batch(a, name)
        if a.shape[0] not in (1, n):
            raise InvalidParameterError(
                f"{name} must have 1 or {n} rows (one per output), got shape {a.shape}"
            )
        out.append(a)
    return out[0], out[1], yb


# ----------------------------------------------------------------------------------------------
# numerically safe clipping (inputs may be as large as 1e308 without overflow or NaN)
# ----------------------------------------------------------------------------------------------


def _row_scale(x: np.ndarray) -> np.ndarray:
    """Max |x_ij| per row, shape (n, 1), with zero rows mapped to 1 (so x / scale is safe)."""
    m = np.abs(x).max(axis=1, keepdims=True)
    return np.where(m > 0, m, 1.0)


def _clip_l1(x: np.ndarray, bound: float) -> np.ndarray:
    """Eq. 19: ``g / max{1, ||g||_1 / bound}`` row-wise, without overflow for huge inputs."""
    s = np.abs(x).sum(axis=1)
    if np.isfinite(s).all():  # fast path: one pass, rows inside the ball are returned exactly
        return x * np.minimum(1.0, bound / np.where(s > 0, s, bound))[:, None]
    m = _row_scale(x)  # some row's norm overflowed: rescale by its largest entry first
    xs = x / m
    s = np.abs(xs).sum(axis=1, keepdims=True)  # in [1, d] (or 0): ||x||_1 = m * s
    with np.errstate(over="ignore"):
        over = (m * s) > bound  # m * s may be inf: then it is over
    scaled = xs * (bound / np.where(s > 0, s, 1.0))
    return np.where(over, scaled, x)


def _clip_l2(x: np.ndarray, bound: float) -> np.ndarray:
    """``g / max{1, ||g||_2 / bound}`` row-wise, without overflow for huge inputs."""
    with np.errstate(over="ignore"):
        s = np.sqrt(np.einsum("ij,ij->i", x, x))
    if np.isfinite(s).all():  # fast path (no entry near sqrt(float max))
        return x * np.minimum(1.0, bound / np.where(s > 0, s, bound))[:, None]
    m = _row_scale(x)
    xs = x / m
    s = np.sqrt(np.einsum("ij,ij->i", xs, xs))[:, None]  # ||x||_2 = m * s
    with np.errstate(over="ignore"):
        over = (m * s) > bound
    scaled = xs * (bound / np.where(s > 0, s, 1.0))
    return np.where(over, scaled, x)


def _bitflip_log_probs(a: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """log P(+1) and log P(-1) of eq. 4 / eq. 24 for ``a = (x + 1) / 2`` in [0, 1].

    P(+1) = 1/(e^eps + 1) + a (e^eps - 1)/(e^eps + 1) = ((1 - a) + a e^eps) / (1 + e^eps), written
    in log space so that it stays exact for any finite eps (no overflow of e^eps).
    """
    with np.errstate(divide="ignore"):
        log_a = np.log(a)
        log_1ma = np.log1p(-a)
    norm_ = np.logaddexp(0.0, eps)
    log_plus = np.logaddexp(log_1ma, log_a + eps) - norm_
    log_minus = np.logaddexp(log_a, log_1ma + eps) - norm_
    return log_plus, log_minus


def _bitflip_prob_plus(a: np.ndarray, eps: float) -> np.ndarray:
    """P(+1) of eq. 4 / eq. 24: ``1/(e^eps+1) + a (e^eps-1)/(e^eps+1)`` for a in [0, 1]."""
    return special.expit(-eps) + a * math.tanh(eps / 2.0)


# ----------------------------------------------------------------------------------------------
# base class
# ----------------------------------------------------------------------------------------------


class Mechanism(abc.ABC):
    """Common behaviour of the built-in mechanisms (a user's mechanism needs only ``epsilon``
    and ``privatize``)."""

    name: ClassVar[str] = "mechanism"

    @property
    def delta(self) -> float:
        """The delta of the guarantee: 0.0 for pure epsilon-LDP mechanisms."""
        return 0.0

    @abc.abstractmethod
    def to_config(self) -> dict[str, Any]:
        """JSON-able description with a ``"name"`` key; :func:`from_config` inverts it."""

    @abc.abstractmethod
    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Randomise each row of ``x`` (n, d) independently with ``rng``."""


# ----------------------------------------------------------------------------------------------
# Laplace (Algorithm 2)
# ----------------------------------------------------------------------------------------------


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
        object.__setattr__(self, "epsilon", _private_epsilon(self.epsilon))
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        _check_no_overflow(self.clip / self.epsilon, self.clip, "the noise scale clip / epsilon")

    @property
    def scale(self) -> float:
        """The Laplace scale b = C / epsilon of eq. 21."""
        return self.clip / self.epsilon

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        """Eq. 19: clip each row to L1 norm C/2."""
        return _clip_l1(x, self.clip / 2.0)

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
        xb, x2b, yb = _as_pair_batches(x, x2, y)
        d1 = np.abs(yb - self.clip_rows(xb)).sum(axis=1)
        d2 = np.abs(yb - self.clip_rows(x2b)).sum(axis=1)
        return (d2 - d1) / self.scale

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Input pairs an auditor should try: L1-ball extreme points, sign and dense vectors,
        huge out-of-range inputs."""
        d = _check_dim(dim)
        c = self.clip
        e0 = np.zeros(d)
        e0[0] = 1.0
        ones = np.ones(d)
        pairs = [
            (0.5 * c * e0, -0.5 * c * e0),  # extreme points, L1 distance C: tight
            (1e6 * c * e0, -1e6 * c * e0),  # huge: clipping must act
            (0.5 * c * ones / d, -0.5 * c * ones / d),  # sign vectors on the ball
            (1e6 * c * ones, -1e6 * c * ones),  # dense and huge
            (np.zeros(d), 0.5 * c * e0),
        ]
        if d > 1:
            e1 = np.zeros(d)
            e1[1] = 1.0
            pairs.append((0.5 * c * e0, 0.5 * c * e1))
        return pairs

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name, "epsilon": self.epsilon, "clip": self.clip}


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
        object.__setattr__(self, "epsilon", _private_epsilon(self.epsilon))
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        if self.resolution is not None:
            object.__setattr__(self, "resolution", check_positive(self.resolution, "resolution"))
        # noise scale about (C + d gamma) / epsilon; gamma <= C at the default resolution
        step = self.clip if self.resolution is None else max(self.clip, self.resolution)
        _check_no_overflow(2.0 * step / self.epsilon, self.clip, "the noise scale clip / epsilon")

    def grid_step(self, dim: int) -> float:
        """gamma for inputs of dimension ``dim``."""
        d = _check_dim(dim)
        return self.resolution if self.resolution is not None else self.clip / (10.0 * d)

    def grid_sensitivity(self, dim: int) -> int:
        """K = ceil(C / gamma) + d: the L1 sensitivity of the rounded rows in grid units."""
        d = _check_dim(dim)
        return int(math.ceil(self.clip / self.grid_step(d) - 1e-12)) + d

    def noise_ratio(self, dim: int) -> float:
        """q = exp(-epsilon / K): P(Z = z) = (1 - q)/(1 + q) q^|z|."""
        return math.exp(-self.epsilon / self.grid_sensitivity(dim))

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        """Eq. 19: clip each row to L1 norm C/2."""
        return _clip_l1(x, self.clip / 2.0)

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
        xb, x2b, yb = _as_pair_batches(x, x2, y)
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

    def to_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epsilon": self.epsilon,
            "clip": self.clip,
            "resolution": self.resolution,
        }


# ----------------------------------------------------------------------------------------------
# Projected random sign (Algorithm 3)
# ----------------------------------------------------------------------------------------------


def default_reduced_dim(epsilon: float, dim: int) -> int:
    """The paper's default ``d_hat = max{1, min{d, floor(epsilon / 2.5)}}`` (section 3.1)."""
    return max(1, min(int(dim), math.floor(float(epsilon) / 2.5)))


def _sign_codes(uniforms: np.ndarray) -> np.ndarray:
    """Eq. 5 as int8 signs s in {-1, 0, +1} w.p. 1/6, 2/3, 1/6 from uniforms in [0, 1); the
    matrix is M = sqrt(3) s."""
    return (uniforms >= 5.0 / 6.0).astype(np.int8) - (uniforms < 1.0 / 6.0).astype(np.int8)


_SIGN_CODES = _sign_codes


def _prs_kernel_py(
    uni: np.ndarray,
    x: np.ndarray,
    dh: int,
    clip: float,
    p0: float,
    slope: float,
    bits: np.ndarray,
    out: np.ndarray,
) -> bool:
    """Algorithm 3 for rows of ``x`` from their uniforms ``uni`` (n, d_hat d + d_hat), compiled.

    Per row: s = eq.-5 signs from the first d_hat d uniforms (M = sqrt(3) s); u = M x; ubar =
    clip(u, -C, C) (eq. 23); bit_k = +1 with probability p0 + slope (ubar_k + C)/(2C) (eq. 24,
    p0 = 1/(e^{e'}+1), slope = tanh(e'/2)), decided by the last d_hat uniforms; out = M^T (C bits).
    Returns False (and leaves ``out`` unusable) if some projection is not finite, for the caller's
    overflow-safe path. Same uniforms -> same output as the NumPy formulation up to summation
    order in u.
    """
    n, d = x.shape
    hi, lo = 5.0 / 6.0, 1.0 / 6.0
    for i in range(n):
        for j in range(d):
            out[i, j] = 0.0
        for k in range(dh):
            base = k * d
            acc = 0.0
            for j in range(d):
                v = uni[i, base + j]
                if v >= hi:
                    acc += x[i, j]
                elif v < lo:
                    acc -= x[i, j]
            u = acc * _SQRT3
            if not math.isfinite(u):
                return False
            ubar = min(max(u, -clip), clip)  # eq. 23
            a = min(max((ubar + clip) / (2.0 * clip), 0.0), 1.0)
            b = 1.0 if uni[i, dh * d + k] < p0 + a * slope else -1.0  # eq. 24
            bits[i, k] = b
            for j in range(d):
                v = uni[i, base + j]
                if v >= hi:
                    out[i, j] += b
                elif v < lo:
                    out[i, j] -= b
        for j in range(d):
            out[i, j] *= _SQRT3 * clip  # M^T u~ = sqrt(3) C s^T bits
    return True


_PRS_KERNEL: Any = None


def _prs_kernel(*args: Any) -> bool:
    """:func:`_prs_kernel_py` compiled with Numba on first use (so importing this module does
    not import Numba: a usage error answers in well under a second)."""
    global _PRS_KERNEL
    if _PRS_KERNEL is None:
        import numba as nb

        _PRS_KERNEL = nb.njit(cache=True, nogil=True)(_prs_kernel_py)
    return bool(_PRS_KERNEL(*args))


@dataclass(frozen=True)
class ProjectedRandomSign(Mechanism):
    """Projected random sign (PRS) mechanism (Algorithm 3).

    Per report: draw a fresh M in R^{d_hat x d} (eq. 5), project u = M g, clip each u_i to
    [-C, C] (eq. 23), randomise each clipped value to +-C with the bit flip of eq. 24 at
    epsilon/d_hat per coordinate, and report M^T u~.

    Debiasing: E[u~_i | M] = ubar_i (e^{e'} - 1)/(e^{e'} + 1) with e' = epsilon/d_hat, and
    E[M^T M] = d_hat I, so for an input whose projections are never clipped
    (sqrt(3) ||g||_1 <= C suffices) ``E[output] = debias_factor(d) * g`` with
    ``debias_factor(d) = d_hat (e^{e'} - 1)/(e^{e'} + 1)``. Dividing the mean report by it gives
    an unbiased gradient estimate in that regime; outside it the clipping biases the estimate
    towards zero.

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        clip: C, the element clip bound of eq. 23 (the report values are +-C).
        reduced_dim: d_hat; None means ``max{1, min{d, floor(epsilon/2.5)}}``. Must lie in
            [1, d], checked at ``privatize`` time since d comes with x.
    """

    epsilon: float
    clip: float
    reduced_dim: int | None = None
    name: ClassVar[str] = "projected_random_sign"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _private_epsilon(self.epsilon))
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        if self.reduced_dim is not None:
            object.__setattr__(
                self, "reduced_dim", _check_int(self.reduced_dim, "reduced_dim", minimum=1)
            )

    def effective_reduced_dim(self, dim: int) -> int:
        """d_hat for inputs of dimension ``dim`` (raises if ``reduced_dim`` is outside [1, d])."""
        d = _check_dim(dim)
        if self.reduced_dim is None:
            return default_reduced_dim(self.epsilon, d)
        if not 1 <= self.reduced_dim <= d:
            raise InvalidParameterError(
                f"reduced_dim must be in [1, d] = [1, {d}], got {self.reduced_dim!r}"
            )
        return self.reduced_dim

    def bit_epsilon(self, dim: int) -> float:
        """epsilon/d_hat, the budget each coordinate's flip spends (eq. 24)."""
        return self.epsilon / self.effective_reduced_dim(dim)

    def debias_factor(self, dim: int) -> float:
        """``d_hat (e^{e'} - 1)/(e^{e'} + 1)`` with e' = epsilon/d_hat: E[output] = factor * g
        for inputs whose projections stay inside [-C, C]."""
        dh = self.effective_reduced_dim(dim)
        return dh * math.tanh(self.bit_epsilon(dim) / 2.0)

    def element_clip(self, u: np.ndarray) -> np.ndarray:
        """Eq. 23: clip every projected coordinate to [-C, C]."""
        return np.clip(u, -self.clip, self.clip)

    def _projections(self, signs: np.ndarray, x: np.ndarray) -> np.ndarray:
        """ubar = clip(M g) (eq. 23) for signs (n, d_hat, d) and x (n, d), overflow-safe."""
        with np.errstate(over="ignore", invalid="ignore"):
            u = np.einsum("nkd,nd->nk", signs, x, optimize=False) * _SQRT3
        if not np.isfinite(u).all():  # an intermediate sum overflowed: rescale rows first
            m = _row_scale(x)
            v = np.einsum("nkd,nd->nk", signs, x / m, optimize=False) * _SQRT3
            with np.errstate(over="ignore"):
                u = v * m  # may be +-inf for huge inputs, never NaN (v finite, m finite > 0)
        return self.element_clip(u)

    def _prob_plus(self, ubar: np.ndarray, bit_eps: float) -> np.ndarray:
        """Eq. 24: P(u~_i = +C)."""
        a = (ubar + self.clip) / (2.0 * self.clip)
        return _bitflip_prob_plus(np.clip(a, 0.0, 1.0), bit_eps)

    def _run(
        self, x: Any, rng: np.random.Generator, keep: bool
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        xb = check_batch(x, "x")
        rng = check_rng(rng)
        n, d = xb.shape
        dh = self.effective_reduced_dim(d)
        bit_eps = self.bit_epsilon(d)
        out = np.empty((n, d))
        bits_all = np.empty((n, dh)) if keep else None
        mats = np.empty((n, dh, d)) if keep else None
        step = max(1, _PRS_CHUNK_ELEMENTS // (dh * d + dh))
        p0, slope = float(special.expit(-bit_eps)), math.tanh(bit_eps / 2.0)  # eq. 24
        # the compiled kernel implements eqs. 5, 23-24 itself: only when no subclass overrides them
        cls = type(self)
        fast = (
            all(
                getattr(cls, h) is getattr(ProjectedRandomSign, h)
                for h in ("element_clip", "_prob_plus", "_projections")
            )
            and _sign_codes is _SIGN_CODES
        )
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            # One block of uniforms per report (M's entries, then the d_hat flips), so the
            # generator is consumed report by report and chunking never changes the output.
            uni = rng.random((hi - lo, dh * d + dh))
            bits = np.empty((hi - lo, dh))
            if fast and _prs_kernel(uni, xb[lo:hi], dh, self.clip, p0, slope, bits, out[lo:hi]):
                if keep:
                    bits_all[lo:hi] = bits
                    mats[lo:hi] = _sign_codes(uni[:, : dh * d].reshape(hi - lo, dh, d)) * _SQRT3
                continue
            # a projection overflowed (inputs near the float maximum): the rescaling path
            signs = _sign_codes(uni[:, : dh * d].reshape(hi - lo, dh, d))  # eq. 5
            ubar = self._projections(signs, xb[lo:hi])  # eq. 23
            p = self._prob_plus(ubar, bit_eps)  # eq. 24
            bits = np.where(uni[:, dh * d :] < p, 1.0, -1.0)
            # M^T u~ = sqrt(3) C s^T bits
            out[lo:hi] = np.einsum("nkd,nk->nd", signs, bits, optimize=False) * (_SQRT3 * self.clip)
            if keep:
                bits_all[lo:hi] = bits
                mats[lo:hi] = signs * _SQRT3
        return out, bits_all, mats

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Algorithm 3 on every row of ``x`` (n, d); returns M^T u~ of shape (n, d)."""
        return self._run(x, rng, keep=False)[0]

    def privatize_with_matrices(
        self, x: Any, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Like :meth:`privatize` (same output for the same rng state) but also return the
        internals: ``(output (n, d), bits (n, d_hat) in {-1, +1}, matrices (n, d_hat, d))``,
        where u~ = C * bits and ``output = matrices^T u~`` row by row."""
        out, bits, mats = self._run(x, rng, keep=True)
        assert bits is not None and mats is not None
        return out, bits, mats

    def _check_internals(
        self, bits: Any, matrices: Any, n_rows: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        mats = np.asarray(matrices, dtype=np.float64)
        if mats.ndim != 3:
            raise InvalidParameterError(
                f"matrices must have shape (n, d_hat, d), got shape {mats.shape}"
            )
        n, dh, d = mats.shape
        if self.effective_reduced_dim(d) != dh:
            raise InvalidParameterError(
                f"matrices must have d_hat = {self.effective_reduced_dim(d)} rows for d = {d}, "
                f"got shape {mats.shape}"
            )
        codes = mats / _SQRT3
        signs = np.rint(codes)
        if not (np.all(np.abs(codes - signs) < 1e-9) and np.all(np.abs(signs) <= 1)):
            raise InvalidParameterError(
                "matrices must have entries in {-sqrt(3), 0, +sqrt(3)} (eq. 5)"
            )
        b = np.asarray(bits, dtype=np.float64)
        if b.shape != (n, dh) or not np.all(np.abs(b) == 1.0):
            raise InvalidParameterError(
                f"bits must have shape {(n, dh)} with values in {{-1, +1}}, got shape {b.shape}"
            )
        return b, signs

    def privacy_loss(self, x: Any, x2: Any, bits: Any, matrices: Any) -> np.ndarray:
        """Exact ``log P(bits | x, M) - log P(bits | x2, M)`` per report, conditional on M.

        M is independent of the input and the report M^T u~ is a function of (M, bits), so this
        upper-bounds the privacy loss of the report itself; each coordinate contributes at most
        epsilon/d_hat (eq. 24), hence at most epsilon in total.

        Args:
            x, x2: inputs, shape (n, d) or (1, d).
            bits: (n, d_hat) signs in {-1, +1} (u~ / C), as from :meth:`privatize_with_matrices`.
            matrices: (n, d_hat, d) random matrices with entries in {-sqrt3, 0, sqrt3}.
        """
        b, signs = self._check_internals(bits, matrices)
        xb, x2b, _ = _as_pair_batches(x, x2, np.zeros((b.shape[0], signs.shape[2])))
        if xb.shape[1] != signs.shape[2] or x2b.shape[1] != signs.shape[2]:
            raise InvalidParameterError(
                f"x and x2 must have d = {signs.shape[2]} columns, got {xb.shape} and {x2b.shape}"
            )
        d = signs.shape[2]
        eps_b = self.bit_epsilon(d)
        total = np.zeros(b.shape[0])
        for xx, sign in ((xb, 1.0), (x2b, -1.0)):
            xx = np.broadcast_to(xx, (b.shape[0], d))
            ubar = self._projections(signs, xx)
            lp, lm = self._log_probs(ubar, eps_b)
            total += sign * np.where(b > 0, lp, lm).sum(axis=1)
        return total

    def _log_probs(self, ubar: np.ndarray, bit_eps: float) -> tuple[np.ndarray, np.ndarray]:
        """Eq. 24 in log space: (log P(u~_i = +C), log P(u~_i = -C))."""
        a = np.clip((ubar + self.clip) / (2.0 * self.clip), 0.0, 1.0)
        return _bitflip_log_probs(a, bit_eps)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Input pairs an auditor should try: huge opposite inputs (every projection clipped to
        +-C), sign vectors, dense vectors, inputs at the clip bound."""
        d = _check_dim(dim)
        c = self.clip
        e0 = np.zeros(d)
        e0[0] = 1.0
        ones = np.ones(d)
        return [
            (1e6 * c * e0, -1e6 * c * e0),
            (1e6 * c * ones, -1e6 * c * ones),
            (c * ones, -c * ones),
            (c * e0 / _SQRT3, -c * e0 / _SQRT3),  # projections exactly +-C or 0
            (np.zeros(d), 1e6 * c * e0),
        ]

    def to_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epsilon": self.epsilon,
            "clip": self.clip,
            "reduced_dim": self.reduced_dim,
        }


# ----------------------------------------------------------------------------------------------
# Bit flip (eq. 4) and k-ary randomized response
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BitFlip(Mechanism):
    """Bit flip (eq. 4) on inputs in [-1, 1], applied per coordinate at epsilon/d.

    Coordinate j of a report is +1 with probability
    ``1/(e^{e'}+1) + (x_j+1)/2 (e^{e'}-1)/(e^{e'}+1)``, e' = epsilon/d, else -1; by sequential
    composition one report of d coordinates is epsilon-LDP (d = 1 is exactly eq. 4).

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
    """

    epsilon: float
    name: ClassVar[str] = "bit_flip"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _private_epsilon(self.epsilon))

    def coordinate_epsilon(self, dim: int) -> float:
        """epsilon/d: what each coordinate's flip spends."""
        return self.epsilon / _check_dim(dim)

    @staticmethod
    def _check_range(xb: np.ndarray, name: str) -> None:
        bad = np.abs(xb) > 1.0
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InvalidParameterError(
                f"{name} must have values in [-1, 1] (eq. 4), got {xb[idx]!r} at index {idx}"
            )

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Eq. 4 on every coordinate of ``x`` (n, d); returns (n, d) of +-1.0."""
        xb = check_batch(x, "x")
        self._check_range(xb, "x")
        rng = check_rng(rng)
        p = _bitflip_prob_plus((xb + 1.0) / 2.0, self.coordinate_epsilon(xb.shape[1]))
        return np.where(rng.random(xb.shape) < p, 1.0, -1.0)

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact ``log P(y|x) - log P(y|x2)`` per row, y in {-1, +1}^d."""
        xb, x2b, yb = _as_pair_batches(x, x2, y)
        self._check_range(xb, "x")
        self._check_range(x2b, "x2")
        if not np.all(np.abs(yb) == 1.0):
            raise InvalidParameterError("y must have values in {-1, +1}")
        e = self.coordinate_epsilon(yb.shape[1])
        lp1, lm1 = _bitflip_log_probs((xb + 1.0) / 2.0, e)
        lp2, lm2 = _bitflip_log_probs((x2b + 1.0) / 2.0, e)
        plus = yb > 0
        return (np.where(plus, lp1, lm1) - np.where(plus, lp2, lm2)).sum(axis=1)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Sign vectors (the extreme points) and a one-coordinate change."""
        d = _check_dim(dim)
        ones = np.ones(d)
        one_flip = ones.copy()
        one_flip[0] = -1.0
        return [(ones, -ones), (ones, one_flip), (np.zeros(d), ones)]

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name, "epsilon": self.epsilon}


@dataclass(frozen=True)
class RandomizedResponse(Mechanism):
    """k-ary randomized response: keep the value w.p. e^eps/(e^eps + k - 1), else report one of
    the other k - 1 values uniformly (k = 2 is eq. 4 on {-1, +1} relabelled to {0, 1}).

    Input and output have shape (n, 1) with integer values in {0, ..., k-1} (floats holding
    integers are accepted); the output is int64.

    Args:
        epsilon: the LDP parameter of one report (finite, > 0).
        k: number of categories (integer >= 2).
    """

    epsilon: float
    k: int = 2
    name: ClassVar[str] = "randomized_response"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _private_epsilon(self.epsilon))
        object.__setattr__(self, "k", _check_int(self.k, "k", minimum=2))

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

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Randomise every row of ``x`` (n, 1); returns (n, 1) int64."""
        xi = self._check_values(x, "x")
        rng = check_rng(rng)
        n = xi.shape[0]
        u = rng.random((n, 2))  # two uniforms per report, drawn report by report
        keep = u[:, :1] < self.keep_probability
        other = np.minimum(np.floor(u[:, 1:] * (self.k - 1)), self.k - 2).astype(np.int64)
        other = other + (other >= xi)  # uniform over {0..k-1} \ {x}
        return np.where(keep, xi, other)

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
        if _check_dim(dim) != 1:
            raise InvalidParameterError(f"dim must be 1 for RandomizedResponse, got {dim!r}")
        pairs = [(np.array([0.0]), np.array([1.0]))]
        if self.k > 2:
            pairs.append((np.array([0.0]), np.array([float(self.k - 1)])))
        return pairs

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name, "epsilon": self.epsilon, "k": self.k}


# ----------------------------------------------------------------------------------------------
# Gaussian mechanism and the analytic Gaussian mechanism (Balle & Wang 2018)
# ----------------------------------------------------------------------------------------------


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """Smallest delta such that N(0, sigma^2) noise on an L2-``sensitivity`` query is
    (epsilon, delta)-DP (Balle & Wang 2018, Theorem 8):

    ``delta = Phi(D/(2 s) - e s/D) - e^e Phi(-D/(2 s) - e s/D)``.
    """
    eps = check_real(epsilon, "epsilon")
    if eps < 0 or math.isnan(eps):
        raise InvalidParameterError(f"epsilon must be >= 0, got {epsilon!r}")
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
    dl = _check_delta(delta)

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
    eps = _private_epsilon(epsilon)
    sens = check_positive(sensitivity, "sensitivity")
    dl = _check_delta(delta)

    def f(log_s: float) -> float:
        return analytic_gaussian_delta(eps, math.exp(log_s), sens) - dl

    lo, hi = math.log(sens) - 1.0, math.log(sens) + 1.0
    while f(lo) <= 0.0:
        lo -= 2.0
    while f(hi) > 0.0:
        hi += 2.0
    from scipy import optimize

    return float(math.exp(optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-13, maxiter=500)))


def _check_delta(delta: Any) -> float:
    v = check_real(delta, "delta")
    if not 0.0 < v < 1.0:
        raise InvalidParameterError(f"delta must be in (0, 1), got {delta!r}")
    return v


@dataclass(frozen=True)
class Gaussian(Mechanism):
    """Gaussian mechanism: L2-clip each row to ``clip``, add N(0, (noise_multiplier * clip)^2).

    ``epsilon`` is the exact analytic-Gaussian-mechanism epsilon (Balle & Wang 2018) at
    ``delta`` for replace-one neighbours, whose L2 sensitivity is 2 * clip.

    Args:
        clip: L2 clip bound C (> 0).
        noise_multiplier: sigma / C (> 0).
        delta: the delta at which ``epsilon`` is reported, in (0, 1).
    """

    clip: float
    noise_multiplier: float
    delta: float = 1e-5  # type: ignore[assignment]  # a field here, a property elsewhere
    name: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        object.__setattr__(
            self, "noise_multiplier", check_positive(self.noise_multiplier, "noise_multiplier")
        )
        object.__setattr__(self, "delta", _check_delta(self.delta))
        _check_no_overflow(self.noise_multiplier * self.clip, self.clip, "sigma")

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
        return analytic_gaussian_epsilon(self.sigma, self.sensitivity, _check_delta(d))

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        """L2 clip of every row to ``clip``."""
        return _clip_l2(x, self.clip)

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
        xb, x2b, yb = _as_pair_batches(x, x2, y)
        d1 = ((yb - self.clip_rows(xb)) ** 2).sum(axis=1)
        d2 = ((yb - self.clip_rows(x2b)) ** 2).sum(axis=1)
        return (d2 - d1) / (2.0 * self.sigma**2)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Opposite points of the L2 ball (distance 2C), huge and dense inputs."""
        d = _check_dim(dim)
        c = self.clip
        e0 = np.zeros(d)
        e0[0] = 1.0
        ones = np.ones(d) / math.sqrt(d)
        return [
            (c * e0, -c * e0),
            (1e6 * c * e0, -1e6 * c * e0),
            (c * ones, -c * ones),
            (1e6 * c * ones, -1e6 * c * ones),
        ]

    def to_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "clip": self.clip,
            "noise_multiplier": self.noise_multiplier,
            "delta": self.delta,
        }


# ----------------------------------------------------------------------------------------------
# explicit non-private baseline
# ----------------------------------------------------------------------------------------------


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
        xb, x2b, yb = _as_pair_batches(x, x2, y)
        same = np.all(xb == x2b, axis=1)
        is_x = np.all(yb == xb, axis=1)
        is_x2 = np.all(yb == x2b, axis=1)
        with np.errstate(invalid="ignore"):
            out = np.where(is_x, math.inf, 0.0) - np.where(is_x2, math.inf, 0.0)
        return np.where(same, 0.0, np.nan_to_num(out, nan=0.0, posinf=math.inf, neginf=-math.inf))

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        d = _check_dim(dim)
        e0 = np.zeros(d)
        e0[0] = 1.0
        return [(np.zeros(d), e0)]

    def to_config(self) -> dict[str, Any]:
        return {"name": self.name}


# ----------------------------------------------------------------------------------------------
# registry, config round trip, composition helper
# ----------------------------------------------------------------------------------------------

#: name -> class for every built-in mechanism (the ``"name"`` of ``to_config``).
MECHANISMS: dict[str, type[Mechanism]] = {
    cls.name: cls
    for cls in (
        Laplace,
        DiscreteLaplace,
        ProjectedRandomSign,
        BitFlip,
        RandomizedResponse,
        Gaussian,
        NoPrivacy,
    )
}


def from_config(config: dict[str, Any]) -> Mechanism:
    """Rebuild a mechanism from ``mech.to_config()``.

    Raises:
        InvalidParameterError: unknown name, unknown or invalid fields.
    """
    if not isinstance(config, dict) or "name" not in config:
        raise InvalidParameterError(f"config must be a dict with a 'name' key, got {config!r}")
    kwargs = dict(config)
    name = kwargs.pop("name")
    cls = MECHANISMS.get(name)
    if cls is None:
        raise InvalidParameterError(
            f"config['name'] must be one of {sorted(MECHANISMS)}, got {name!r}"
        )
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InvalidParameterError(f"invalid fields for {name!r}: {exc}") from None


def split_epsilon(total: float, rounds: int) -> float:
    """Per-submission epsilon for T submissions under sequential composition (section 3.2.1):
    ``total / T``, so T reports of an epsilon/T-LDP mechanism are epsilon-LDP together.

    ``total = inf`` (explicit non-private baseline) returns inf.
    """
    t = check_epsilon(total, "total", allow_inf=True)
    r = _check_int(rounds, "rounds", minimum=1)
    return t / r
