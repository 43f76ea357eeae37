"""The trust boundary of PGC-A3C, agent side: each report is charged to the ledger, then
randomised (Algorithm 2, Laplace; Algorithm 3, PRS; from :mod:`ldp_audit.mechanisms`), then
sealed, through the core's release path (:mod:`ldp_audit.release`); plus the coordinate-clipping
ablation (:class:`CoordinateLaplace`, honest about its true epsilon) and the run's privacy
summary.

``mechanism="none"`` is the epsilon = inf baseline, the paper's "non-private A3C", released
without noise (charged as ``NonPrivateEvent``) after a stabilising L1 clip of C = 10 (see
:class:`ldp_audit.training.pgc_a3c.PgcA3cConfig`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import Mechanism as _MechanismBase
from ldp_audit.release import (
    Charging,
    ReleaseMechanism,
    ReleaseRequest,
    SealedRelease,
    release_many,
)
from ldp_audit.training.pgc_a3c.model import DIM
from ldp_audit.validation import check_batch, check_int, check_positive, check_rng

if TYPE_CHECKING:
    from ldp_audit.accountant import Accountant, DpEvent, Ledger
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

__all__ = ["PrivacyClaimWarning", "CoordinateLaplace", "privatize_reports", "report_request"]

# The release path itself lives in the core (ldp_audit.release): charge durably, randomise,
# seal (a sealed batch of reports is a ldp_audit.release.SealedRelease). PGC-A3C only adds its
# eq. 19 clip for the ``none`` baseline and its (trial, agent) ids (report_request), then hands
# its requests and its accountant (a ldp_audit.release.Charging) to release_many.


class PrivacyClaimWarning(UserWarning):
    """A run is configured so that its reports do NOT satisfy the epsilon its config names
    (the coordinate-clipping ablation): the true epsilon is charged and reported instead."""


@dataclass(frozen=True)
class CoordinateLaplace(_MechanismBase):
    """Laplace noise after clipping each coordinate to [-C/2, C/2] (an ablation, honest).

    The reading of eq. 19 as a per-coordinate clip: two clipped reports differ by at most C in
    every coordinate, so by at most d C in L1, and Lap(b) noise on each coordinate makes one
    report (d C / b)-LDP. With the paper's b = C / epsilon that is d * epsilon = 112 epsilon:
    :attr:`epsilon` is that TRUE value (what the ledger is charged and the auditor checks), not
    the epsilon whose noise scale was used. The noise is drawn exactly as
    :class:`ldp_audit.mechanisms.Laplace` draws it (one ``rng.laplace`` call of the batch's
    shape), so a coordinate-clipped run sees the same noise as the L1 run with the same seed.

    Args:
        coordinate_epsilon: C / b, the epsilon of ONE coordinate (the paper's epsilon when its
            noise scale b = C / epsilon is used); the report's epsilon is d times this.
        clip: C; each coordinate is clipped to [-C/2, C/2].
        dim: d, the report dimension (112 for PGC-A3C).
    """

    coordinate_epsilon: float
    clip: float
    dim: int = DIM
    name: ClassVar[str] = "coordinate_laplace"

    def __post_init__(self) -> None:
        eps = check_positive(self.coordinate_epsilon, "coordinate_epsilon")  # finite
        object.__setattr__(self, "coordinate_epsilon", eps)
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        object.__setattr__(self, "dim", check_int(self.dim, "dim", minimum=1))
        if not math.isfinite(self.scale * 64.0 + self.clip):
            raise InvalidParameterError(
                f"clip / coordinate_epsilon is too large (outputs overflow), got {self.scale}"
            )

    @property
    def scale(self) -> float:
        """b = C / coordinate_epsilon, the Laplace scale of every coordinate."""
        return self.clip / self.coordinate_epsilon

    @property
    def epsilon(self) -> float:
        """The true per-report epsilon d C / b = d * coordinate_epsilon (the clipped reports'
        L1 sensitivity is d C)."""
        return self.dim * self.coordinate_epsilon

    def clip_rows(self, x: np.ndarray) -> np.ndarray:
        """Each coordinate clipped to [-C/2, C/2]."""
        return np.clip(x, -self.clip / 2.0, self.clip / 2.0)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """``clip(x) + z``, z_i ~ Lap(b) i.i.d.; x (n, dim), finite."""
        xb = check_batch(x, dim=self.dim)  # finite: NaN or inf refused before any noise
        rng = check_rng(rng)
        noise = rng.laplace(0.0, self.scale, size=xb.shape)
        noise += self.clip_rows(xb)
        return noise

    def privacy_loss(self, x: Any, x2: Any, y: Any) -> np.ndarray:
        """Exact log p(y|x) - log p(y|x2) = (||y - c(x2)||_1 - ||y - c(x)||_1) / b per row."""
        xb = np.atleast_2d(np.asarray(x, dtype=np.float64))
        x2b = np.atleast_2d(np.asarray(x2, dtype=np.float64))
        yb = np.atleast_2d(np.asarray(y, dtype=np.float64))
        d1 = np.abs(yb - self.clip_rows(xb)).sum(axis=1)
        d2 = np.abs(yb - self.clip_rows(x2b)).sum(axis=1)
        return (d2 - d1) / self.scale

    def candidate_pairs(self, dim: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Pairs an auditor should try: the opposite corners of the clipping box (L1 distance
        d C, the worst case), huge inputs, and the L1-ball extreme points of eq. 19."""
        d = self.dim
        c = self.clip
        ones, e0 = np.ones(d), np.zeros(d)
        e0[0] = 1.0
        return [
            (0.5 * c * ones, -0.5 * c * ones),
            (1e6 * c * ones, -1e6 * c * ones),
            (0.5 * c * e0, -0.5 * c * e0),
        ]

    def to_config(self) -> dict[str, Any]:
        """The base's record with the true per-report epsilon after the name."""
        return {"name": self.name, "epsilon": self.epsilon} | super().to_config()


def _clip_l1(x: np.ndarray, bound: float) -> np.ndarray:
    """Eq. 19: g / max{1, ||g||_1 / bound} per row."""
    n1 = np.abs(x).sum(axis=1, keepdims=True)
    return x / np.maximum(1.0, n1 / bound)


def privatize_reports(
    grads: np.ndarray,
    *,
    mechanism: ReleaseMechanism,
    accountant: Charging,
    agent_ids: Sequence[str],
    trial: np.ndarray,
    agent: np.ndarray,
    rng: np.random.Generator,
    clip: float | None = None,
    event: DpEvent | None = None,
) -> SealedRelease:
    """Agent side: charge the ledger, then randomise, then release (Algorithm 1, step 3).

    A thin layer over :func:`ldp_audit.release.release`: the accountant is charged for every row
    *before* any noise is drawn; if the charge raises (e.g.
    :class:`~ldp_audit.errors.BudgetExceeded`) or the mechanism raises, nothing is released.

    Args:
        grads: (n, 112) raw gradients (never leave this function).
        mechanism: per-submission mechanism (``privatize(x, rng)`` and ``epsilon``).
        accountant: ``ldp_audit.accountant.Accountant`` (``charge_many``).
        agent_ids: ledger agent id per row (``"<trial>/<agent>"``).
        trial, agent: (n,) ids carried with the report (``rel.trial``, ``rel.agent``).
        rng: noise generator.
        clip: if given, rows are clipped to L1 norm clip/2 first (eq. 19; the ``none`` baseline,
            whose mechanism adds no noise).
        event: the ledger event of one report (default ``event_for(mechanism)``).
    """
    return release_many(
        [report_request(grads, mechanism, agent_ids, trial, agent, rng, clip, event)],
        accountant=accountant,
    )[0]


def report_request(
    grads: np.ndarray,
    mechanism: ReleaseMechanism,
    agent_ids: Sequence[str],
    trial: np.ndarray,
    agent: np.ndarray,
    rng: np.random.Generator,
    clip: float | None,
    event: DpEvent | None,
    clip_kind: str = "l1",
) -> ReleaseRequest:
    """One group of reports for :func:`ldp_audit.release.release_many` (see
    :func:`privatize_reports`; ``clip_kind`` "coordinate" clips each coordinate instead)."""
    if clip is None:
        pre = None
    elif clip_kind == "coordinate":
        pre = lambda g, b=clip / 2.0: np.clip(g, -b, b)  # noqa: E731 (the coordinate reading)
    else:
        pre = lambda g, b=clip / 2.0: _clip_l1(g, b)  # noqa: E731
    return ReleaseRequest(
        values=grads,
        mechanism=mechanism,
        agent_ids=agent_ids,
        rng=rng,
        event=event,
        preprocess=pre,
        meta={
            "trial": np.asarray(trial, dtype=np.int64),
            "agent": np.asarray(agent, dtype=np.int64),
        },
    )


def privacy_summary(c: Any, agents: np.ndarray) -> dict[str, Any]:
    """The run's privacy record: a :class:`PgcA3cConfig`'s (its clipping and aggregator, the
    true per-report epsilon) or a Gymnasium run's ``GymPgcConfig``'s (its private parameter)."""
    eps, gym = c.epsilon, hasattr(c, "private_param")
    per = c.epsilon_per_submission if gym else c.true_epsilon_per_submission
    own = {"private_parameter": c.private_parameter()} if gym else {}
    out: dict[str, Any] = {
        "mechanism": c.mechanism,
        "local": True,
        "epsilon_per_submission": per if math.isfinite(eps) else "inf",
        "rounds": c.rounds,
        "epsilon_per_agent": (eps if gym else per * c.rounds) if math.isfinite(eps) else "inf",
        "composition": "sequential (basic), section 3.2.1",
        "agents_per_trial": agents.tolist(),
        **(own or {"clip_kind": c.clip_kind, "aggregator": c.aggregator}),
        "note": (
            f"each agent's reports satisfy epsilon_per_agent-LDP with respect to its "
            f"{c.private_param if gym else 'gravity'}; agents were charged on the ledger before "
            "every release"
            if math.isfinite(eps)
            else f"non-private baseline: {'L1' if gym else c.clip_kind}-clipped gradients (C = "
            "effective clip), no noise"
        ),
    }
    if not gym and c.clip_kind == "coordinate" and c.mechanism == "laplace":
        out["epsilon_claimed_per_submission"] = c.epsilon_per_submission
        out["epsilon_claimed_per_agent"] = eps
        out["warning"] = coordinate_warning(c)
    return out


def coordinate_warning(c: PgcA3cConfig) -> str:
    true = c.true_epsilon_per_submission
    return (
        f"clip_kind='coordinate': each report is {true:g}-LDP, NOT {c.epsilon_per_submission:g}-"
        f"LDP (each of the {DIM} coordinates is clipped to +-C/2, so the L1 sensitivity is "
        f"{DIM} C and Lap(C/{c.epsilon_per_submission:g}) noise gives {DIM} x "
        f"{c.epsilon_per_submission:g}); the ledger is charged {true:g} per report"
    )


def make_accountant(ledger: Ledger | None, budget: float | None) -> Accountant:
    from ldp_audit.accountant import Accountant, TallyLedger

    if ledger is None:
        # No run directory and no ledger object: nobody can read this ledger after the run, so
        # it keeps per-agent counts only (budgets enforced exactly as a ledger's, not evidence).
        ledger = TallyLedger()
    return Accountant(ledger=ledger, budget=budget)
