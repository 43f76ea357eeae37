"""Privacy-loss-distribution (PLD) composition with Google's dp_accounting (imported lazily).

Side-effect free. Each atomic event becomes a pessimistic PLD, self-composed ``count`` times, and
all are composed (FFT convolution); epsilon(delta) is read from the result. PLDs are upper bounds
(``pessimistic_estimate=True``), tight up to the discretisation interval.

* ``LaplaceEvent(eps)``: ``from_laplace_mechanism(1/eps)`` (sensitivity 1) -- the exact Laplace
  privacy loss, tighter than any pure-DP composition theorem;
* ``PureDpEvent(eps)``: ``from_privacy_parameters(eps, 0)``, the randomized-response PLD (the
  tight generic one). We build it directly and self-compose it: dp_accounting 0.6's
  ``RandomizedResponseDpEvent`` path in ``PLDAccountant`` ignores the composition count;
* ``GaussianEvent(sigma)``: ``from_gaussian_mechanism(sigma)``;
* ``PoissonSampledEvent(q, Laplace | Gaussian)``: the same with ``sampling_prob=q``
  (add/remove neighbours); ``PoissonSampledEvent(q, PureDp)``: the pure PLD at the amplified
  epsilon ``log(1 + q (e^eps - 1))``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ldp_audit.accountant.composition import amplified_epsilon
from ldp_audit.accountant.events import (
    DpEvent,
    GaussianEvent,
    LaplaceEvent,
    PoissonSampledEvent,
    PureDpEvent,
)
from ldp_audit.errors import InvalidParameterError

__all__ = ["DEFAULT_DISCRETIZATION", "supports", "event_pld", "pld_epsilon"]

#: dp_accounting's default value discretisation interval; the issue's golden values use it.
DEFAULT_DISCRETIZATION = 1e-4


def _base(event: DpEvent) -> tuple[DpEvent, float]:
    if isinstance(event, PoissonSampledEvent):
        return event.event, event.sample_rate
    return event, 1.0


def supports(event: DpEvent) -> bool:
    """Whether ``event`` (an atomic event from ``flatten``) has a PLD here."""
    inner, _ = _base(event)
    return isinstance(inner, PureDpEvent | LaplaceEvent | GaussianEvent)


def event_pld(
    event: DpEvent, *, value_discretization_interval: float = DEFAULT_DISCRETIZATION
) -> Any:
    """The dp_accounting ``PrivacyLossDistribution`` of one atomic event."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    vdi = value_discretization_interval
    inner, q = _base(event)
    if isinstance(inner, LaplaceEvent):
        return pld_lib.from_laplace_mechanism(
            1.0 / inner.epsilon, sensitivity=1.0, sampling_prob=q, value_discretization_interval=vdi
        )
    if isinstance(inner, GaussianEvent):
        return pld_lib.from_gaussian_mechanism(
            inner.noise_multiplier,
            sensitivity=1.0,
            sampling_prob=q,
            value_discretization_interval=vdi,
        )
    if isinstance(inner, PureDpEvent):
        eps = amplified_epsilon(inner.epsilon, q) if q < 1.0 else inner.epsilon
        return pld_lib.from_privacy_parameters(
            common.DifferentialPrivacyParameters(eps, 0.0), value_discretization_interval=vdi
        )
    raise InvalidParameterError(
        f"method 'pld' supports pure, Laplace, Gaussian and Poisson-sampled events, got {event!r}"
    )


def pld_epsilon(
    atoms: Mapping[DpEvent, int],
    *,
    delta: float,
    value_discretization_interval: float = DEFAULT_DISCRETIZATION,
) -> float:
    """Epsilon at ``delta`` of the composition of ``{atomic event: count}`` by PLD."""
    if not (0.0 < delta < 1.0):
        raise InvalidParameterError(f"delta must be in (0, 1) for method 'pld', got {delta!r}")
    total = None
    # A fixed order (by JSON) so the same history always gives the same number.
    for event, count in sorted(atoms.items(), key=lambda kv: repr(kv[0])):
        pld = event_pld(event, value_discretization_interval=value_discretization_interval)
        if int(count) > 1:
            pld = pld.self_compose(int(count))
        total = pld if total is None else total.compose(pld)
    if total is None:
        return 0.0
    return float(total.get_epsilon_for_delta(delta))
