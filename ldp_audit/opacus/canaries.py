"""The public canary design of :class:`~ldp_audit.opacus.CanaryAudit` and the argument checks
the integration shares (docs/opacus.md).

:func:`canary_blocks` lays out ``m`` orthonormal gradient-canary directions on random disjoint
blocks of the model's parameter tensors; the auditor recomputes them from the run's public
``canary_seed`` and tensor sizes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import check_int

__all__ = [
    "ALGORITHM",
    "AUDIT_MARK",
    "CANARY_KINDS",
    "CLIP_TOLERANCE",
    "NOISE_SKETCH",
    "RECOMMENDED_CANARIES",
    "canary_blocks",
    "check_out",
    "dataset_holds",
    "noise_sketch",
]

ALGORITHM = "opacus"
CANARY_KINDS = ("gradient", "input")
"""The canary kinds a ``CanaryAudit`` plants."""
AUDIT_MARK = "_ldp_audit_canary_audit"
"""The optimizer attribute that marks an attached audit (attaching twice is refused)."""
RECOMMENDED_CANARIES = 500
"""The canary count docs/opacus.md recommends (its snippet, tests and measurements use it)."""
NOISE_SKETCH = 4096
"""Coordinates of the released noise kept per update for the all-lags dependence test."""
CLIP_TOLERANCE = 0.01
"""A clipping probe's clipped sum may exceed ``C`` by this fraction (rounding, low-precision
norms): ``attach.clip_probe`` measures, ``scoring`` judges."""
MAX_CANARY_SCALE = 1e6
"""The largest ``canary_scale``: a canary is clipped to norm ``C`` whatever its scale above 1
(the scale only has to make clipping matter; 10 by default), and ``attach.clip_probe`` sends rows
of up to 1e5 canary norms (``attach.PROBE``) through the optimizer's float32 per-sample norms,
whose squares must stay below float32's 3.4e38: ``(1e6 x 1e5 x C)^2`` is finite for every ``C``
up to 1.8e8 (``attach`` refuses a larger product). 1e308 was taken, and its canaries' inf norms
made the model NaN in a run that exited 0."""
ZERO_RELEASES = 5
"""The raw-gradient probe's releases of a batch of zero gradients as the generator advances: a
coordinate equal in all of them is noise not drawn fresh (``attach.raw_probe``)."""

#: the per-update fields the hooks record (``CanaryAudit._rows``), in the transcript's order
#: and dtypes (what the audit reads of each update beside the projections and the noise)
ROWS = (("batch_size", np.int64), ("charged", bool), ("noise_multiplier", np.float64),
         ("max_grad_norm", np.float64), ("expected_batch_size", np.float64))  # fmt: skip


def canary_blocks(sizes: Any, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The public canary design: ``m`` orthonormal directions spanning every large tensor.

    ``sizes`` are the parameter tensors' sizes (flat layout in this order). Each tensor with at
    least ``m`` entries (``L`` of them) is cut, after a random permutation, into ``m`` blocks of
    ``b_l = size_l // m`` entries; canary ``i`` has random signs on its block of every such
    tensor, scaled so that each tensor holds ``1 / L`` of its squared norm (norm 1). Disjoint
    blocks make the directions orthonormal; a projection costs ``O(n_params)`` (not the
    ``O(n_params m)`` of a dense frame); and a canary clipped tensor by tensor (per-layer
    clipping) keeps ``sqrt(L)`` times the whole-gradient clip along its direction. When no
    tensor has ``m`` entries, blocks of the whole flat vector are used (``L = 1``).

    Returns:
        ``(idx, weight)``: (m, B) int64 flat coordinates and (m, B) float32 weights.
    """
    sizes = [check_int(n, "tensor size", minimum=1) for n in np.atleast_1d(sizes).tolist()]
    d = sum(sizes)
    m = check_int(m, "canaries", minimum=2)
    if m > d:
        raise InvalidParameterError(
            f"canaries must be <= the number of trainable parameters ({d}: the canary "
            f"directions are orthonormal), got {m}"
        )
    rng = np.random.default_rng(check_int(seed, "canary_seed", minimum=0))
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    parts = [(o, n) for o, n in zip(offs, sizes, strict=True) if n >= m] or [(0, d)]
    L = len(parts)
    idx, wt = [], []
    for o, n in parts:
        b = n // m
        blk = (o + rng.permutation(n)[: m * b]).reshape(m, b).astype(np.int64)
        sgn = np.where(rng.random((m, b)) < 0.5, -1.0, 1.0) / math.sqrt(b * L)
        idx.append(blk)
        wt.append(sgn)
    return np.concatenate(idx, axis=1), np.concatenate(wt, axis=1).astype(np.float32)


def noise_sketch(sizes: Any, budget: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The public coordinates of the noise sketch: ``(flat_idx, tensor)`` of at most ``budget``
    coordinates, every tensor holding ``min(size, share)`` of them (water-filling: a small
    tensor is kept whole, the large ones share the rest equally), chosen at random inside each
    tensor (``seed``: the run's public canary seed). Sorted by flat index."""
    sizes = [check_int(n, "tensor size", minimum=1) for n in np.atleast_1d(sizes).tolist()]
    budget = check_int(budget, "budget", minimum=1)
    take = [0] * len(sizes)
    left, open_ = min(budget, sum(sizes)), list(range(len(sizes)))
    while open_ and left > 0:
        share = max(1, left // len(open_))
        small = [i for i in open_ if sizes[i] - take[i] <= share]
        for i in small or open_:
            add = min(sizes[i] - take[i], share, left)
            take[i] += add
            left -= add
        open_ = [i for i in open_ if take[i] < sizes[i]]
    rng = np.random.default_rng([check_int(seed, "canary_seed", minimum=0), 36])
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    idx = [o + np.sort(rng.permutation(n)[:k]) for o, n, k in zip(offs, sizes, take, strict=True)]
    grp = [np.full(k, i, dtype=np.int64) for i, k in enumerate(take)]
    return np.concatenate(idx).astype(np.int64), np.concatenate(grp)


def check_out(out: Any) -> Any:
    """``out`` can receive a new run (the Python API's words: no CLI flags)."""
    from pathlib import Path

    from ldp_audit.errors import RunDirectoryError
    from ldp_audit.rundir import check_new_dir

    if isinstance(out, (str, Path)) and Path(out).is_dir() and any(Path(out).iterdir()):
        raise RunDirectoryError(
            f"out {str(out)!r} already exists and is not empty; a run directory is evidence "
            f"and is never overwritten or appended to: pass a new out= path"
        )
    return check_new_dir(out, name="out", can_resume=False)


def dataset_holds(ds: Any, target: Any, depth: int = 0) -> bool:
    """Whether dataset ``ds`` is ``target`` or wraps it (``.dataset`` / ``.datasets``)."""
    if ds is None or depth > 20:
        return False
    if ds is target:
        return True
    inner = [getattr(ds, "dataset", None), *(getattr(ds, "datasets", None) or [])]
    return any(dataset_holds(x, target, depth + 1) for x in inner if x is not None)
