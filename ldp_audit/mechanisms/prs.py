"""The projected random sign mechanism (Algorithm 3: eqs. 5, 23, 24), its compiled kernel and
the paper's default reduced dimension."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
from scipy import special

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms.base import (
    SQRT3,
    Mechanism,
    as_pair_batches,
    bitflip_log_probs,
    bitflip_prob_plus,
    check_dim,
    check_optional,
    opposites,
    private_epsilon,
    row_scale,
)
from ldp_audit.validation import (
    check_batch,
    check_int,
    check_positive,
    check_rng,
)

#: Cap on the number of float64 uniforms (matrix entries and flips) PRS draws per chunk.
_PRS_CHUNK_ELEMENTS = 1 << 22


def default_reduced_dim(epsilon: float, dim: int) -> int:
    """The paper's default ``d_hat = max{1, min{d, floor(epsilon / 2.5)}}`` (section 3.1)."""
    return max(1, min(int(dim), math.floor(float(epsilon) / 2.5)))


def _sign_codes(uniforms: np.ndarray) -> np.ndarray:
    """Eq. 5 as int8 signs s in {-1, 0, +1} w.p. 1/6, 2/3, 1/6 from uniforms in [0, 1); the
    matrix is M = sqrt(3) s."""
    return (uniforms >= 5.0 / 6.0).astype(np.int8) - (uniforms < 1.0 / 6.0).astype(np.int8)


def _prs_row_py(
    uni: np.ndarray,
    x: np.ndarray,
    dh: int,
    clip: float,
    p0: float,
    slope: float,
    bits: np.ndarray,
    out: np.ndarray,
) -> bool:
    """Algorithm 3 for ONE report ``x`` (d,) from its uniforms ``uni`` (d_hat d + d_hat,).

    s = eq.-5 signs from the first d_hat d uniforms (M = sqrt(3) s); u = M x; ubar =
    clip(u, -C, C) (eq. 23); bit_k = +1 with probability p0 + slope (ubar_k + C)/(2C) (eq. 24,
    p0 = 1/(e^{e'}+1), slope = tanh(e'/2)), decided by the last d_hat uniforms, written to
    ``bits`` (d_hat,); out = M^T (C bits). Returns False (and leaves ``out`` unusable) if some
    projection is not finite, for the caller's overflow-safe path. Same uniforms -> same output
    as the NumPy formulation up to summation order in u.
    """
    d = x.shape[0]
    hi, lo = 5.0 / 6.0, 1.0 / 6.0
    for j in range(d):
        out[j] = 0.0
    for k in range(dh):
        base = k * d
        acc = 0.0
        for j in range(d):
            v = uni[base + j]
            if v >= hi:
                acc += x[j]
            elif v < lo:
                acc -= x[j]
        u = acc * SQRT3
        if not math.isfinite(u):
            return False
        ubar = min(max(u, -clip), clip)  # eq. 23
        a = min(max((ubar + clip) / (2.0 * clip), 0.0), 1.0)
        b = 1.0 if uni[dh * d + k] < p0 + a * slope else -1.0  # eq. 24
        bits[k] = b
        for j in range(d):
            v = uni[base + j]
            if v >= hi:
                out[j] += b
            elif v < lo:
                out[j] -= b
    for j in range(d):
        out[j] *= SQRT3 * clip  # M^T u~ = sqrt(3) C s^T bits
    return True


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
    """:func:`_prs_row_py` on every row of ``x`` (n, d) with its uniforms ``uni[i]``, its
    ``bits[i]`` and ``out[i]``; False as soon as one row's projection overflows."""
    for i in range(x.shape[0]):
        if not _PRS_ROW(uni[i], x[i], dh, clip, p0, slope, bits[i], out[i]):
            return False
    return True


class PrsKernels(NamedTuple):
    """The compiled (Numba ``njit``) kernels of :class:`ProjectedRandomSign`, callable from
    other ``njit`` code (the fused PGC-A3C engine, ``ldp_audit.training.pgc_a3c._fused_kernel``).

    Attributes:
        row: ``(uni, x, dh, clip, p0, slope, bits, out) -> bool``, one report of Algorithm 3
            from its d_hat d + d_hat uniforms (``rng.random`` draws, consumed report by report);
            False if a projection overflowed (the mechanism then takes its NumPy rescaling path).
        batch: the same arguments with a leading row axis; ``privatize`` calls it.
    """

    row: Any
    batch: Any


_PRS_ROW: Any = None
_KERNELS: PrsKernels | None = None


def prs_kernels() -> PrsKernels:
    """The PRS mechanism's compiled kernels (:class:`PrsKernels`), compiled with Numba on first
    call and the same objects ever after (importing this module does not import Numba)."""
    global _PRS_ROW, _KERNELS
    if _KERNELS is None:
        import numba as nb

        jit = nb.njit(cache=True, nogil=True)
        _PRS_ROW = jit(_prs_row_py)  # the batch kernel calls it as a global: compiled first
        _KERNELS = PrsKernels(_PRS_ROW, jit(_prs_kernel_py))
    return _KERNELS


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
        object.__setattr__(self, "epsilon", private_epsilon(self.epsilon))
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        check_optional(self, "reduced_dim", check_int, minimum=1)

    def effective_reduced_dim(self, dim: int) -> int:
        """d_hat for inputs of dimension ``dim`` (raises if ``reduced_dim`` is outside [1, d])."""
        d = check_dim(dim)
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
            u = np.einsum("nkd,nd->nk", signs, x, optimize=False) * SQRT3
        if not np.isfinite(u).all():  # an intermediate sum overflowed: rescale rows first
            m = row_scale(x)
            v = np.einsum("nkd,nd->nk", signs, x / m, optimize=False) * SQRT3
            with np.errstate(over="ignore"):
                u = v * m  # may be +-inf for huge inputs, never NaN (v finite, m finite > 0)
        return self.element_clip(u)

    def _prob_plus(self, ubar: np.ndarray, bit_eps: float) -> np.ndarray:
        """Eq. 24: P(u~_i = +C)."""
        a = (ubar + self.clip) / (2.0 * self.clip)
        return bitflip_prob_plus(np.clip(a, 0.0, 1.0), bit_eps)

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
        fast = all(
            getattr(type(self), h) is getattr(ProjectedRandomSign, h)
            for h in ("element_clip", "_prob_plus", "_projections")
        )
        kernel = prs_kernels().batch if fast else None  # compiled on first use
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            # One block of uniforms per report (M's entries, then the d_hat flips), so the
            # generator is consumed report by report and chunking never changes the output.
            uni = rng.random((hi - lo, dh * d + dh))
            bits = np.empty((hi - lo, dh))
            if not (fast and kernel(uni, xb[lo:hi], dh, self.clip, p0, slope, bits, out[lo:hi])):
                # NumPy: a subclass changed an equation, or a projection overflowed (inputs near
                # the float maximum: the rescaling path)
                signs = _sign_codes(uni[:, : dh * d].reshape(hi - lo, dh, d))  # eq. 5
                ubar = self._projections(signs, xb[lo:hi])  # eq. 23
                p = self._prob_plus(ubar, bit_eps)  # eq. 24
                bits = np.where(uni[:, dh * d :] < p, 1.0, -1.0)
                # M^T u~ = sqrt(3) C s^T bits
                out[lo:hi] = np.einsum("nkd,nk->nd", signs, bits, optimize=False) * (
                    SQRT3 * self.clip
                )
            if keep:
                bits_all[lo:hi] = bits
                mats[lo:hi] = _sign_codes(uni[:, : dh * d].reshape(hi - lo, dh, d)) * SQRT3
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

    def _check_internals(self, bits: Any, matrices: Any) -> tuple[np.ndarray, np.ndarray]:
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
        codes = mats / SQRT3
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
        xb, x2b, _ = as_pair_batches(x, x2, np.zeros((b.shape[0], signs.shape[2])))
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
        return bitflip_log_probs(a, bit_eps)

    def candidate_pairs(self, dim: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Input pairs an auditor should try: huge opposite inputs (every projection clipped to
        +-C), sign vectors, dense vectors, inputs at the clip bound."""
        d = check_dim(dim)
        c = self.clip
        e0 = np.eye(1, d)[0]  # the first unit vector
        ones = np.ones(d)
        # the last opposite pair has projections exactly +-C or 0
        pairs = opposites(1e6 * c * e0, 1e6 * c * ones, c * ones, c * e0 / SQRT3)
        return [*pairs, (np.zeros(d), 1e6 * c * e0)]
