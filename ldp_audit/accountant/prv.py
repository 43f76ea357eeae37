"""Opacus's PRV accountant (Gopi-Lee-Wutschitz 2021) for Gaussian and DP-SGD histories.

Side-effect free; Opacus is imported lazily. A ``GaussianEvent(sigma)`` is a Poisson-sampled
Gaussian with sample rate 1. The history handed to Opacus is one ``(noise_multiplier,
sample_rate, steps)`` group per distinct event, which is exactly what Opacus's own
``PRVAccountant`` holds after ``steps`` calls of ``step`` with the same parameters: the numbers are
equal (tested). Opacus returns the upper end of its error interval (``eps_error`` 0.01).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np

from ldp_audit.accountant.events import DpEvent, GaussianEvent, unsampled
from ldp_audit.errors import InvalidParameterError

__all__ = ["MAX_POINTS", "opacus_history", "mesh_points", "plan", "prv_epsilon"]


def opacus_history(atoms: Mapping[DpEvent, int]) -> list[tuple[float, float, int]]:
    """Opacus's history format: ``[(noise_multiplier, sample_rate, steps), ...]``."""
    out = []
    for event, count in sorted(atoms.items(), key=lambda kv: repr(kv[0])):
        inner, q = unsampled(event)
        if not isinstance(inner, GaussianEvent):
            raise InvalidParameterError(
                f"method 'prv' supports Gaussian and Poisson-sampled Gaussian events, got {event!r}"
            )
        out.append((inner.noise_multiplier, q, int(count)))
    return out


#: Largest discretisation mesh (points) composed; longer histories get a coarser ``eps_error``.
MAX_POINTS = 4_000_000
#: Beyond this ``eps_error`` PRV is not worth computing (``best`` skips it, ``prv`` refuses).
MAX_EPS_ERROR = 0.5


def mesh_points(
    history: list[tuple[float, float, int]], *, delta: float, eps_error: float
) -> float:
    """Points of Opacus's discretisation domain for ``history`` (its ``_get_domain``, cheaply).

    Opacus composes by count (FFT power of the per-step distribution), so time and memory grow
    with this mesh, which grows like sqrt(total steps) / eps_error.
    """
    from opacus.accountants.analysis.prv.domain import compute_safe_domain_size
    from opacus.accountants.analysis.prv.prvs import PoissonSubsampledGaussianPRV

    delta_error = delta / 1000
    prvs = [PoissonSubsampledGaussianPRV(q, s) for s, q, _ in history]
    steps = [n for _, _, n in history]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        half = compute_safe_domain_size(
            prvs=prvs, max_self_compositions=steps, eps_error=eps_error, delta_error=delta_error
        )
    mesh = eps_error / np.sqrt(sum(steps) * np.log(12 / delta_error) / 2)
    return float(2 * half / mesh)


def plan(
    atoms: Mapping[DpEvent, int], *, delta: float, eps_error: float = 0.01
) -> tuple[float, float]:
    """``(eps_error, mesh points)`` that :func:`prv_epsilon` would use for this history.

    The requested ``eps_error`` is kept while the mesh has at most ``MAX_POINTS`` points; above,
    ``eps_error`` grows in proportion (the mesh shrinks back to ``MAX_POINTS``). Opacus returns
    the upper end of its error interval, so a coarser mesh gives a looser, still valid bound.
    """
    history = opacus_history(atoms)
    if not history:
        return eps_error, 0.0
    pts = mesh_points(history, delta=delta, eps_error=eps_error)
    if pts <= MAX_POINTS:
        return eps_error, pts
    return eps_error * pts / MAX_POINTS, float(MAX_POINTS)


def prv_epsilon(atoms: Mapping[DpEvent, int], *, delta: float, eps_error: float = 0.01) -> float:
    """Epsilon at ``delta`` from Opacus's ``PRVAccountant`` for the same history.

    Time and memory are bounded: see :func:`plan` (the error grows instead of the mesh).

    Raises:
        InvalidParameterError: the history would need ``eps_error`` > ``MAX_EPS_ERROR``.
    """
    if not (0.0 < delta < 1.0):
        raise InvalidParameterError(f"delta must be in (0, 1) for method 'prv', got {delta!r}")
    history = opacus_history(atoms)
    if not history:
        return 0.0
    from opacus.accountants import PRVAccountant

    err, _ = plan(atoms, delta=delta, eps_error=eps_error)
    if err > MAX_EPS_ERROR:
        raise InvalidParameterError(
            f"method 'prv' would need eps_error {err:.3g} (> {MAX_EPS_ERROR}) to keep its mesh "
            f"under {MAX_POINTS} points for {sum(n for *_, n in history)} steps; use 'rdp' or 'pld'"
        )
    acc = PRVAccountant()
    acc.history = history
    # sample_rate 1 makes Opacus evaluate log(0) on a masked branch: harmless, silenced.
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore")
        try:
            return float(acc.get_epsilon(delta=delta, eps_error=err))
        except (RuntimeError, ValueError) as exc:  # delta near 1: "Cannot compute epsilon";
            # tiny: "Floating point errors will dominate" (session 56: exit 3 after training)
            raise InvalidParameterError(
                f"method 'prv' cannot compute epsilon at delta={delta!r} (Opacus: {exc})"
            ) from None
