"""The proxy experience memory: the state grid (:class:`ProxyGrid`), the LDP upload
(:class:`ProxyMemoryLDP`), the server's per-cell average. Part of
:mod:`ldp_audit.training.frd`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_batch, check_epsilon, check_int, check_probability

# ------------------------------------------------------------------------------------------------
# Proxy grid, LDP mechanism, server aggregation
# ------------------------------------------------------------------------------------------------


class ProxyGrid:
    """Cell id -> proxy state (midpoint) of a declared grid (state -> cell id: the engine's
    compiled :func:`ldp_audit.training.frd.kernels.cells_rows`)."""

    def __init__(self, sections: int, dims: Sequence[int], low: Sequence[float],
                 high: Sequence[float]) -> None:  # fmt: skip
        self.S = check_int(sections, "sections (S)", minimum=2)
        self.dims = np.asarray(dims, dtype=np.int64)
        self.low = np.asarray(low, dtype=np.float64)
        self.high = np.asarray(high, dtype=np.float64)
        self.width = (self.high - self.low) / self.S
        self.n_cells = self.S ** len(self.dims)
        self._mult = self.S ** np.arange(len(self.dims), dtype=np.int64)

    def midpoints(self, cells: np.ndarray) -> np.ndarray:
        """(n,) cell ids -> (n, 4) proxy states (uncut components at the range's middle)."""
        c = np.asarray(cells, dtype=np.int64).reshape(-1)
        if c.size and (c.min() < 0 or c.max() >= self.n_cells):
            raise InvalidParameterError(f"cell ids must be in [0, {self.n_cells}), got {c!r}")
        out = np.broadcast_to((self.low + self.high) / 2.0, (c.size, 4)).copy()
        idx = (c[:, None] // self._mult[None, :]) % self.S
        out[:, self.dims] = self.low[self.dims] + (idx + 0.5) * self.width[self.dims]
        return out


@dataclass(frozen=True)
class ProxyMemoryLDP:
    """The LDP upload of one agent's proxy memory: m randomised (cell, policy-bit) pairs.

    Input rows (one per sampled pair): ``[cell id, 2 pi(left) - 1]``; output rows ``[reported
    cell id, +-1]``. The cell id goes through k-ary randomized response over the declared cell set
    (``RandomizedResponse(epsilon * cell_share / m, k=n_cells)``), the policy value through the
    bit flip of eq. 4 (``BitFlip(epsilon * (1 - cell_share) / m)``). One upload of m pairs is
    ``epsilon``-LDP with respect to the agent's whole local memory (module docstring).

    Attributes:
        epsilon: per upload (> 0, finite).
        n_cells: size of the declared cell set (k of the randomized response).
        samples: m pairs per upload.
        cell_share: share of a pair's epsilon on the cell id.
    """

    epsilon: float
    n_cells: int
    samples: int = 32
    cell_share: float = 0.5

    def __post_init__(self) -> None:
        check_epsilon(self.epsilon)
        check_int(self.n_cells, "n_cells", minimum=2)
        check_int(self.samples, "samples", minimum=1)
        check_probability(self.cell_share, "cell_share")
        part = self.pair_epsilon * min(self.cell_share, 1.0 - self.cell_share)
        if not part >= sys.float_info.min:  # RR's and the bit's epsilon; debias divides by it
            raise InvalidParameterError(
                f"epsilon/samples * min(cell_share, 1 - cell_share) must be >= "
                f"{sys.float_info.min} (a part's epsilon), got epsilon={self.epsilon!r}, "
                f"samples={self.samples!r}, cell_share={self.cell_share!r}"
            )

    @property
    def delta(self) -> float:
        return 0.0

    @property
    def pair_epsilon(self) -> float:
        return float(self.epsilon) / int(self.samples)

    def parts(self) -> tuple[Any, Any]:
        """(RandomizedResponse for the cell id, BitFlip for the policy value)."""
        from ldp_audit.mechanisms import BitFlip, RandomizedResponse

        e = self.pair_epsilon
        return (
            RandomizedResponse(epsilon=e * self.cell_share, k=int(self.n_cells)),
            BitFlip(epsilon=e * (1.0 - self.cell_share)),
        )

    def event(self) -> Any:
        """The ledger event of one upload: ``PureDpEvent(epsilon)`` (the upload is epsilon-LDP)."""
        from ldp_audit.accountant import PureDpEvent

        return PureDpEvent(float(self.epsilon))

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """Randomise (n, 2) rows ``[cell, 2 pi - 1]``; returns (n, 2) ``[cell', +-1]``."""
        x = check_batch(x, "x", dim=2)
        rr, bf = self.parts()
        cells = rr.privatize(x[:, :1], rng)
        bits = bf.privatize(x[:, 1:], rng)
        return np.concatenate([cells.astype(np.float64), bits], axis=1)

    def debias(self, bits: np.ndarray) -> np.ndarray:
        """Unbiased estimate of ``2 pi - 1`` from a +-1 bit (eq. 4 inverted)."""
        e = self.pair_epsilon * (1.0 - self.cell_share)
        x = math.exp(min(e, 40.0))  # the factor is 1.0 in floats from e ~ 37 (exp overflows at 710)
        factor = (x + 1.0) / (x - 1.0) if x > 1.0 else 2.0 / e  # exp(e) rounds to 1 below ~1e-16
        return np.asarray(bits, dtype=np.float64) * factor

    def to_config(self) -> dict[str, Any]:
        return {
            "name": "frd_proxy_ldp",
            "epsilon": float(self.epsilon),
            "n_cells": int(self.n_cells),
            "samples": int(self.samples),
            "cell_share": float(self.cell_share),
        }


def aggregate_memories(release: Any, *, mechanism: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Server side: average the uploaded policies per cell (the global proxy memory).

    Args:
        release: a :class:`~ldp_audit.release.SealedRelease` whose rows are ``[cell, value]``
            (value = pi(left) for the non-private upload, a +-1 bit for the LDP one) with a
            ``agent`` meta array; each agent's value counts once per cell (its own average).
        mechanism: the :class:`ProxyMemoryLDP` to debias the bits with (None: non-private).

    Returns:
        ``(cells (N,) int64 sorted, pi_left (N,) float64 in [0, 1])``.

    Raises:
        InvalidParameterError: an empty proxy memory (no rows).
    """
    from ldp_audit.release import require_sealed

    rel = require_sealed(release, "the FRD server")
    v = np.asarray(rel.values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] == 0:
        raise InvalidParameterError(
            f"proxy memory must hold at least one (cell, policy) row, got shape {v.shape}"
        )
    cells = v[:, 0].astype(np.int64)
    if isinstance(mechanism, ProxyMemoryLDP):
        val = (1.0 + mechanism.debias(v[:, 1])) / 2.0
    else:
        val = v[:, 1]
    uc, inv = np.unique(cells, return_inverse=True)
    sums = np.bincount(inv, weights=val, minlength=uc.size)
    cnt = np.bincount(inv, minlength=uc.size)
    return uc, np.clip(sums / cnt, 0.0, 1.0)
