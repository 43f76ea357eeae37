"""White-box: the exact epsilon of our own mechanisms, from their ``privacy_loss``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp_audit.audit.plan import as_pair_list
from ldp_audit.audit.sampling import privatize_rows
from ldp_audit.errors import InvalidParameterError
from ldp_audit.validation import as_rng, check_int

__all__ = ["exact_epsilon"]


def exact_epsilon(
    mechanism: Any,
    pairs: Sequence[tuple[Any, Any]] | None = None,
    *,
    dim: int | None = None,
    samples: int = 20_000,
    rng: np.random.Generator | int | None = 0,
) -> float:
    """The supremum of the privacy loss over outputs, for the given pairs (white-box).

    Uses the mechanism's exact ``privacy_loss(x, x2, y)`` (``privacy_loss(x, x2, bits,
    matrices)`` for PRS, whose loss is conditional on the random matrix). The supremum over
    outputs is taken over probe outputs (``x``, ``x2``, points beyond them along ``x - x2``,
    sign vectors) and ``samples`` draws from each input; this is exact for our mechanisms
    (Laplace: the loss is constant beyond both clipped inputs; discrete outputs: the maximising
    output is drawn with overwhelming probability at moderate dimension) and a lower estimate
    otherwise. For a mechanism with ``delta > 0`` that exposes ``sigma`` and ``clip_rows``
    (the Gaussian), the exact analytic-Gaussian epsilon at ``delta`` for the pair's clipped L2
    distance is returned instead (Balle & Wang 2018), since its pure loss is unbounded.

    Args:
        mechanism: one of our mechanisms (anything with ``privacy_loss``).
        pairs: input pairs; None: ``candidate_pairs(dim)``.
        dim: input dimension for ``candidate_pairs``.
        samples: draws per input for the sample supremum.
        rng: generator or seed for those draws.

    Returns:
        The largest loss over the pairs (``inf`` if unbounded).

    Raises:
        InvalidParameterError: the mechanism has no ``privacy_loss``.
    """
    if not callable(getattr(mechanism, "privacy_loss", None)):
        raise InvalidParameterError(
            "exact_epsilon needs a mechanism with privacy_loss(x, x2, y) (white-box); got "
            f"{type(mechanism).__name__}. Use audit() for a black-box lower bound."
        )
    pair_list = as_pair_list(mechanism, pairs, dim)
    samples = check_int(samples, "samples", minimum=1)
    gen = as_rng(rng)
    delta = float(getattr(mechanism, "delta", 0.0) or 0.0)
    if (
        delta > 0
        and hasattr(mechanism, "sigma")
        and callable(getattr(mechanism, "clip_rows", None))
    ):
        from ldp_audit.mechanisms import analytic_gaussian_epsilon

        best = 0.0
        for x, x2 in pair_list:
            dist = float(
                np.linalg.norm(mechanism.clip_rows(x[None, :]) - mechanism.clip_rows(x2[None, :]))
            )
            if dist > 0:
                best = max(best, analytic_gaussian_epsilon(mechanism.sigma, dist, delta))
        return best
    best = 0.0
    with_matrices = callable(getattr(mechanism, "privatize_with_matrices", None))
    for x, x2 in pair_list:
        for src in (x, x2):
            batch = np.repeat(src[None, :], int(samples), axis=0)
            if with_matrices:
                _, bits, mats = mechanism.privatize_with_matrices(batch, gen)
                loss = mechanism.privacy_loss(x[None, :], x2[None, :], bits, mats)
            else:
                y = privatize_rows(mechanism, src, int(samples), gen)
                loss = mechanism.privacy_loss(x[None, :], x2[None, :], y)
            best = max(best, float(np.max(np.abs(loss))))
        if not with_matrices:
            diff = x - x2
            sgn = np.where(diff >= 0, 1.0, -1.0)
            probes = [x, x2, sgn, -sgn]
            for t in (0.5, 1.0, 2.0, 10.0, 1e3):
                probes += [x + t * diff, x2 - t * diff]
            for yv in probes:
                try:
                    loss = mechanism.privacy_loss(x[None, :], x2[None, :], yv[None, :])
                except (InvalidParameterError, ValueError):
                    continue
                best = max(best, float(np.max(np.abs(loss))))
    return best
