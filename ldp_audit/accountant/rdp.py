"""Renyi-DP analysis of a history, converted with Opacus (``opacus.accountants.analysis.rdp``).

Side-effect free. Opacus (and so torch) is imported lazily, on the first call.

RDP curves (order alpha > 1), all for one release:

* pure epsilon-DP (``PureDpEvent``): the tight generic curve, that of randomized response
  (Mironov 2017, Prop. 5; tight because randomized response dominates every epsilon-DP mechanism):
  ``D_alpha = log((e^{alpha eps} + e^{(1 - alpha) eps}) / (1 + e^eps)) / (alpha - 1)``;
* Laplace with sensitivity / scale = eps (``LaplaceEvent``; Mironov 2017, Table II):
  ``log(a/(2a - 1) e^{(a-1) eps} + (a-1)/(2a - 1) e^{-a eps}) / (a-1)`` with a = alpha;
* Gaussian and Poisson-sampled Gaussian: Opacus's ``compute_rdp`` (Mironov-Talwar-Zhang 2019);
* Poisson-sampled pure-DP or Laplace events: the pure curve at the amplified epsilon
  ``log(1 + q (e^eps - 1))``.

RDP adds up over releases; the sum is converted to (epsilon, delta) by Opacus's
``get_privacy_spent`` (Balle et al. 2020, Theorem 21) over Opacus's default orders, so a Gaussian
or DP-SGD history gives exactly the number Opacus's own ``RDPAccountant`` gives.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from ldp_audit.accountant.composition import amplified_epsilon, check_delta
from ldp_audit.accountant.events import (
    DpEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    unsampled,
)
from ldp_audit.errors import InvalidParameterError

__all__ = [
    "DEFAULT_ORDERS",
    "pure_dp_rdp",
    "laplace_rdp",
    "event_rdp",
    "rdp_epsilon",
]

#: Opacus's ``RDPAccountant.DEFAULT_ALPHAS`` (checked equal in the tests).
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
)


def pure_dp_rdp(epsilon: float, orders: Sequence[float]) -> np.ndarray:
    """RDP of one epsilon-DP release: the randomized-response curve (capped at epsilon)."""
    a = np.asarray(orders, dtype=np.float64)
    eps = float(epsilon)
    val = (np.logaddexp(a * eps, (1.0 - a) * eps) - np.logaddexp(0.0, eps)) / (a - 1.0)
    return np.minimum(val, eps)


def laplace_rdp(epsilon: float, orders: Sequence[float]) -> np.ndarray:
    """RDP of the Laplace mechanism with sensitivity / scale = epsilon (Mironov 2017, Table II)."""
    a = np.asarray(orders, dtype=np.float64)
    eps = float(epsilon)
    val = np.logaddexp(
        np.log(a / (2.0 * a - 1.0)) + (a - 1.0) * eps,
        np.log((a - 1.0) / (2.0 * a - 1.0)) - a * eps,
    ) / (a - 1.0)
    return np.minimum(val, eps)


def event_rdp(event: DpEvent, orders: Sequence[float] = DEFAULT_ORDERS) -> np.ndarray:
    """The RDP curve of one atomic event at ``orders``."""
    inner, q = unsampled(event)
    if isinstance(inner, GaussianEvent):
        from opacus.accountants.analysis import rdp as opacus_rdp

        return np.asarray(
            opacus_rdp.compute_rdp(
                q=q, noise_multiplier=inner.noise_multiplier, steps=1, orders=list(orders)
            ),
            dtype=np.float64,
        )
    if isinstance(inner, PureDpEvent | LaplaceEvent):
        if q < 1.0:
            return pure_dp_rdp(amplified_epsilon(inner.epsilon, q), orders)
        if isinstance(inner, LaplaceEvent):
            return laplace_rdp(inner.epsilon, orders)
        return pure_dp_rdp(inner.epsilon, orders)
    raise InvalidParameterError(
        f"method 'rdp' supports pure, Laplace, Gaussian and Poisson-sampled events, got {event!r}"
    )


def rdp_epsilon(
    atoms: Mapping[DpEvent, int], *, delta: float, orders: Sequence[float] = DEFAULT_ORDERS
) -> tuple[float, float]:
    """(epsilon, best order) of the composition of ``{atomic event: count}`` at ``delta``.

    For Gaussian and Poisson-sampled Gaussian histories this is Opacus's ``RDPAccountant``: the
    RDP of each (noise_multiplier, sample_rate, steps) group via ``compute_rdp`` summed, then
    ``get_privacy_spent``.
    """
    from opacus.accountants.analysis import rdp as opacus_rdp

    delta = check_delta(delta, positive=True)
    total = np.zeros(len(orders))
    for event, count in atoms.items():  # compute_rdp(steps=k) is k times its steps=1 curve
        total = total + event_rdp(event, orders) * int(count)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus warns when the best order is at the edge
        eps, order = opacus_rdp.get_privacy_spent(orders=list(orders), rdp=total, delta=delta)
    return float(eps), float(order)
