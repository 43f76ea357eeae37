"""The released rows of FedRL, as mechanisms: :class:`OutputMechanism` (one agent's Q-output
row: clip, then Gaussian noise) and :func:`TargetMechanism` (alpha's target Y), with the
range of their noise scales and clip bounds (shared with the config).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ldp_audit.training.fedrl.gridworld import N_ACTIONS
from ldp_audit.validation import check_batch, check_int, check_probability, check_real_in, check_rng

#: noise scales and clip bounds accepted: Q outputs are float32, and sigma / B must stay finite
MAX_SCALE, MIN_BOUND = 1e6, 1e-6


# ----------------------------------------------------------------------------------------------
# The output mechanisms (what one released row is), auditable as black boxes
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputMechanism:
    """One released Q-output row: clip each of ``dim`` coordinates to ``[-bound, bound]`` (if a
    bound is given), add ``N(0, sigma^2)`` to each.

    With a bound and ``sigma > 0`` it is a Gaussian mechanism with L2 sensitivity
    ``2 * bound * sqrt(dim)`` (replace-one, local model); ``epsilon`` is the exact analytic
    Gaussian epsilon at ``delta`` (Balle & Wang 2018). Without a bound, or with ``sigma = 0``,
    ``epsilon`` is ``inf`` (:meth:`why_infinite` says why).

    Mechanism-like: ``epsilon``, ``delta``, ``epsilon_at(delta)``, ``privatize(x, rng)``,
    ``to_config()``, ``candidate_pairs(dim)``; :meth:`event` is the ledger event of one row.
    """

    sigma: float
    bound: float | None = None
    dim: int = N_ACTIONS
    delta: float = 1e-5
    name: str = field(default="fedrl_output_gaussian", init=False)

    def __post_init__(self) -> None:
        sigma = check_real_in(self.sigma, "sigma", lo=0, lo_open=False, hi=MAX_SCALE)
        object.__setattr__(self, "sigma", sigma)
        if self.bound is not None:
            b = check_real_in(self.bound, "bound", lo=MIN_BOUND, lo_open=False, hi=MAX_SCALE)
            object.__setattr__(self, "bound", b)
        check_int(self.dim, "dim", minimum=1)
        object.__setattr__(self, "delta", check_probability(self.delta, "delta"))

    @property
    def private(self) -> bool:
        """True when a finite (epsilon, delta) exists (bounded outputs and sigma > 0)."""
        return self.bound is not None and self.sigma > 0

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of one row: ``2 * bound * sqrt(dim)`` (inf when unbounded)."""
        return math.inf if self.bound is None else 2.0 * self.bound * math.sqrt(self.dim)

    @cached_property
    def epsilon(self) -> float:
        """Per-row epsilon at ``delta`` (analytic Gaussian), inf when not private."""
        return self.epsilon_at(self.delta)

    def epsilon_at(self, delta: float) -> float:
        """Per-row epsilon at another delta (``inf`` at delta = 0 or when not private)."""
        delta = check_real_in(delta, "delta", lo=0, lo_open=False, hi=1, hi_open=True)  # '0.1' too
        if not self.private or delta == 0.0:
            return math.inf
        from ldp_audit.mechanisms import analytic_gaussian_epsilon

        return analytic_gaussian_epsilon(self.sigma, self.sensitivity, delta)

    def why_infinite(self) -> str | None:
        """Why there is no finite epsilon, in words (None when there is one)."""
        what = "Q outputs" if self.dim > 1 else "targets Y"
        if self.bound is None:
            return (
                f"infinite, because the {what} are unbounded: their sensitivity is unbounded, "
                "so Gaussian noise of any fixed sigma gives no finite epsilon"
            )
        if self.sigma == 0:
            return "infinite, because no noise is added (sigma = 0)"
        return None

    def event(self) -> Any:
        """The ledger event of ONE released row."""
        from ldp_audit.accountant import GaussianEvent, NonPrivateEvent

        if not self.private:
            return NonPrivateEvent()
        return GaussianEvent(self.sigma / self.sensitivity)

    def exchange_event(self, rows: int) -> Any:
        """The ledger event of an exchange of ``rows`` rows (one object per ``rows``)."""
        from ldp_audit.accountant import SelfComposedEvent

        rows = check_int(rows, "rows", minimum=1)  # 2.5 rows was charged as 2 (int() truncated)
        cache = self.__dict__.setdefault("_exchange_events", {})
        if rows not in cache:
            one = self.event()
            cache[rows] = SelfComposedEvent(one, rows) if self.private and rows != 1 else one
        return cache[rows]

    def clip(self, x: np.ndarray) -> np.ndarray:
        return x if self.bound is None else np.clip(x, -self.bound, self.bound)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """``clip(x) + N(0, sigma^2)`` for (n, dim) rows."""
        check_rng(rng)
        xb = np.asarray(x)
        out = self.clip(check_batch(xb[None, :] if xb.ndim == 1 else xb, "x", dim=self.dim))
        if self.sigma > 0:
            out = out + self.sigma * rng.standard_normal(out.shape)
        return out

    def candidate_pairs(self, dim: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Opposite corners of the clip box (the worst pair) and far-out inputs."""
        b = 1.0 if self.bound is None else self.bound
        one = np.ones(self.dim)
        e0 = np.zeros(self.dim)
        e0[0] = 1.0
        return [(b * one, -b * one), (1e3 * b * one, -1e3 * b * one), (b * e0, -b * e0)]

    def to_config(self) -> dict[str, Any]:
        d = asdict(self)  # the fields (the cached epsilon and events are none)
        return {"name": d.pop("name"), **d}


def TargetMechanism(sigma: float, bound: float | None, delta: float = 1e-5) -> OutputMechanism:  # noqa: N802
    """The release of alpha's targets ``Y`` (one scalar per row)."""
    return OutputMechanism(sigma=sigma, bound=bound, dim=1, delta=delta)
