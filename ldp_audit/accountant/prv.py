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

from ldp_audit.accountant.events import DpEvent, GaussianEvent, PoissonSampledEvent
from ldp_audit.errors import InvalidParameterError

__all__ = ["supports", "opacus_history", "prv_epsilon"]


def supports(event: DpEvent) -> bool:
    """Whether ``event`` (an atomic event from ``flatten``) is a (Poisson-sampled) Gaussian."""
    if isinstance(event, PoissonSampledEvent):
        event = event.event
    return isinstance(event, GaussianEvent)


def opacus_history(atoms: Mapping[DpEvent, int]) -> list[tuple[float, float, int]]:
    """Opacus's history format: ``[(noise_multiplier, sample_rate, steps), ...]``."""
    out = []
    for event, count in sorted(atoms.items(), key=lambda kv: repr(kv[0])):
        q = 1.0
        inner = event
        if isinstance(event, PoissonSampledEvent):
            inner, q = event.event, event.sample_rate
        if not isinstance(inner, GaussianEvent):
            raise InvalidParameterError(
                f"method 'prv' supports Gaussian and Poisson-sampled Gaussian events, got {event!r}"
            )
        out.append((inner.noise_multiplier, q, int(count)))
    return out


def prv_epsilon(atoms: Mapping[DpEvent, int], *, delta: float, eps_error: float = 0.01) -> float:
    """Epsilon at ``delta`` from Opacus's ``PRVAccountant`` for the same history."""
    if not (0.0 < delta < 1.0):
        raise InvalidParameterError(f"delta must be in (0, 1) for method 'prv', got {delta!r}")
    history = opacus_history(atoms)
    if not history:
        return 0.0
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = history
    # sample_rate 1 makes Opacus evaluate log(0) on a masked branch: harmless, silenced.
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(acc.get_epsilon(delta=delta, eps_error=eps_error))
