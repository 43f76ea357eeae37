"""What crosses between the agents: :class:`Exchange` charges each release to its sender's
ledger agent (a block reserved ahead), randomises it with the output mechanism and records it
in the run's :class:`Log` (transcript and the secrets behind it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.release import release_with, reserve
from ldp_audit.training.fedrl.config import FedRLConfig
from ldp_audit.training.fedrl.gridworld import BETA_VIEW, N_ACTIONS
from ldp_audit.training.fedrl.mechanisms import OutputMechanism


@dataclass
class Log:
    """What a FedRL run released (for transcript.npz) and the secrets behind it."""

    q: Any = None  # Transcript of Q outputs
    y: Any = None  # Transcript of Y
    q_obs: list[np.ndarray] = field(default_factory=list)  # (n, 25): sender's last window
    y_reward: list[np.ndarray] = field(default_factory=list)
    y_bump: list[np.ndarray] = field(default_factory=list)
    record: bool = True


KIND_ACT, KIND_BATCH, KIND_NEXT, KIND_FEDRL1, KIND_FEDRL2 = 0, 1, 2, 3, 4
SENDER_ALPHA, SENDER_BETA = 0, 1


def _last_window(obs: np.ndarray) -> np.ndarray:
    """(n, 25) view of the last history frame; a 3x3 window sits in the centre, rest 255."""
    w = obs[:, -1]
    n, v = w.shape[0], w.shape[1]
    out = np.full((n, BETA_VIEW, BETA_VIEW), 255, np.uint8)
    o = (BETA_VIEW - v) // 2
    out[:, o : o + v, o : o + v] = w.astype(np.uint8)
    return out.reshape(n, -1)


class Exchange:
    """Releases of K FedRL runs at once: charge (a reserved block), randomise, seal, record.

    Every release of a (K, n, d) tensor charges each run's sender ``<trial>/<agent>`` for its
    own n rows (one ledger event per run and exchange). The charges of a block of iterations
    are reserved ahead in ONE durable ledger transaction (:func:`ldp_audit.release.reserve`,
    ``Reservation.add``; a durable charge is an fsync'ed SQLite transaction, and FedRL releases
    several times per step); each release then draws its charges from the reservation, which
    refuses a release that was not reserved. An interrupted block leaves charges for rows
    never released (the safe direction).
    """

    def __init__(
        self,
        cfg: FedRLConfig,
        trials: Sequence[int],
        accountant: Any,
        rngs: dict[str, np.random.Generator],
        log: Log,
    ) -> None:
        self.cfg, self.trials, self.rngs, self.log = cfg, list(trials), rngs, log
        self.mech = cfg.output_mechanism()
        self.ymech = cfg.target_mechanism()
        self.clean = OutputMechanism(0.0, None, N_ACTIONS, cfg.delta)
        self.acc = reserve(accountant)  # topped up block by block (prepay_training)
        self.step = 0

    def prepay_training(self, iterations: int, updates: int) -> None:
        """Charge the next ``iterations`` acting exchanges and ``updates`` minibatch updates."""
        c = self.cfg
        charges = []
        ev_act = self.mech.exchange_event(c.n_envs)
        ev_b = self.mech.exchange_event(c.batch_size)
        ev_y = self.ymech.exchange_event(c.batch_size)
        for t in self.trials:
            a, b, y = f"{t}/alpha", f"{t}/beta", f"{t}/alpha:Y"
            charges += [(a, ev_act), (b, ev_act)] * iterations
            # an update: C_beta(s), C'_beta(s') (beta's target network), C_alpha(s), Y
            charges += [(b, ev_b), (b, ev_b), (a, ev_b), (y, ev_y)] * updates
        self.acc.add(charges)  # durable, one transaction

    def _release(self, mech: OutputMechanism, raw: np.ndarray, rng: Any, agent: str, n: int) -> Any:
        """Charge every run's ``<trial>/<agent>`` for its ``n`` rows (from the reservation),
        then randomise the (K n, d) rows ``raw`` with ``mech`` and ``rng``, sealed."""
        if not np.isfinite(raw).all():  # session 56: --lr 1e308 named only "x must be finite"
            raise InvalidParameterError(
                f"fedrl diverged: {agent}'s outputs are not finite at step {self.step} (nothing "
                f"of them was released); likely cause: a learning rate too large "
                f"(lr={self.cfg.lr:g})"
            )
        ev = mech.exchange_event(n)
        return release_with(
            lambda: mech.privatize(raw, rng),
            accountant=self.acc,
            charges=[(f"{t}/{agent}", ev) for t in self.trials],
            epsilon=mech.epsilon,
            delta=mech.delta if mech.private else 0.0,
        )

    def send(
        self,
        sender: str,
        q: Any,
        obs: np.ndarray,
        kind: int,
        *,
        mech: OutputMechanism | None = None,
        suffix: str = "",
        map_index: np.ndarray | None = None,
    ) -> Any:
        """Release ``sender``'s Q outputs ``q`` (torch, (K, n, 16)); returns a tensor whose value
        is the released one and whose gradient flows through the (clipped) output."""
        import torch

        mech = self.mech if mech is None else mech
        qc = q if mech.bound is None else torch.clamp(q, -mech.bound, mech.bound)
        k, n = q.shape[0], q.shape[1]
        raw = q.detach().reshape(k * n, -1).cpu().numpy().astype(np.float64)
        rel = self._release(mech, raw, self.rngs[sender], f"{sender}{suffix}", n)
        if self.log.record:
            rows = k * n
            self.log.q.append(
                rel,
                trial=np.repeat(np.asarray(self.trials, np.int64), n),
                sender=np.full(rows, SENDER_ALPHA if sender == "alpha" else SENDER_BETA, np.int64),
                kind=np.full(rows, kind, np.int64),
                step=np.full(rows, self.step, np.int64),
                map_index=(
                    np.full(rows, -1, np.int64) if map_index is None else map_index.reshape(-1)
                ),
            )
            self.log.q_obs.append(_last_window(obs.reshape(rows, *obs.shape[-3:])))
        released = torch.as_tensor(np.array(rel.values), dtype=qc.dtype, device=qc.device)
        released = released.reshape(k, n, -1)
        return qc + (released - qc).detach()

    def send_y(self, y: np.ndarray, reward: np.ndarray, bump: np.ndarray) -> np.ndarray:
        """Release alpha's targets ``y`` (K, n); returns the released (K, n) values."""
        k, n = y.shape
        rel = self._release(self.ymech, y.reshape(-1, 1), self.rngs["alpha"], "alpha:Y", n)
        if self.log.record:
            self.log.y.append(
                rel,
                trial=np.repeat(np.asarray(self.trials, np.int64), n),
                step=np.full(k * n, self.step, np.int64),
            )
            self.log.y_reward.append(reward.reshape(-1).astype(np.float64))
            self.log.y_bump.append(bump.reshape(-1).astype(np.int64))
        return np.array(rel.values).reshape(k, n)  # a writable copy
