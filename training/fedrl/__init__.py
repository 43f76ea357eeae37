"""FedRL (Zhuo et al. 2019): two-agent federated deep Q-learning with noisy Q outputs.

Agents alpha (3x3 view, has the rewards) and beta (5x5 view, no rewards) act in the same
GridWorld episodes (:mod:`ldp_audit.training.gridworld`). Each has a local CNN Q-network
(3x3 kernels, 32 filters, 256 hidden units, 16 joint actions, as in the public code). What
crosses between them, and nothing else:

* ``C_alpha``, ``C_beta``: each agent's Q outputs, optionally clipped to ``[-B, B]`` per
  coordinate, plus ``N(0, sigma^2)`` per coordinate (eqs. 1-2), for the current states when
  acting and for a replayed minibatch when learning (beta also sends its target network's outputs
  for the next states, which alpha needs for ``Y``);
* ``Y = r + gamma * max_a Q_f^alpha(s', a)`` (alpha's targets; they carry alpha's rewards),
  optionally clipped to ``[-B_Y, B_Y]`` and noised with ``N(0, sigma_Y^2)``.

The shared MLP (32 -> 32 -> 16; eq. 3) is fed the *released* values, so its update (eqs. 6-7)
is a function of released values only: both agents compute the same step and the MLP parameters
never need to be sent (in the paper they are sent after every update; here that exchange would
reveal nothing new, since it is post-processing). Each local network gets its gradient through
its own (clipped) outputs, with the other's output a constant (eqs. 4-5). One Adam step (lr 0.001)
updates all three parts per minibatch (the paper's two sequential steps merged; see
docs/fedrl.md). The target networks ARE updated every ``target_update`` steps (the public code
never updates them).

Privacy accounting (every exchange goes through :mod:`ldp_audit.release`, charged to the
sender's ledger agent BEFORE the noise is drawn):

* unbounded outputs (no ``clip_outputs``) or ``sigma = 0``: every exchange is a
  :class:`~ldp_audit.accountant.NonPrivateEvent`: epsilon is infinite, because an unbounded
  output has unbounded sensitivity, so no finite noise hides it;
* outputs clipped to ``[-B, B]``: one released row is a Gaussian mechanism on a 16-vector with
  L2 sensitivity ``2 B sqrt(16) = 8 B`` (local model: any two observations are neighbours), i.e.
  ``GaussianEvent(noise_multiplier = sigma / (8 B))``; an exchange of ``k`` rows is charged
  ``SelfComposedEvent(that, k)``; the accountant composes all exchanges of the run (``best`` of
  RDP / PLD / PRV) and reports each agent's (epsilon, delta);
* ``Y``: unprotected (``NonPrivateEvent``, ledger agent ``<trial>/alpha:Y``) unless
  ``clip_targets`` and ``target_sigma > 0`` are given (then a 1-D Gaussian, sensitivity
  ``2 B_Y``).

Test-time exchanges are charged to ``<trial>/<agent>@fedrl1`` (noisy, FedRL-1) and
``<trial>/<agent>@fedrl2`` (no noise, FedRL-2: non-private).

Baselines: DQN-alpha (alpha alone, its own observations and rewards: nothing is released) and
DQN-full (one network over both observations: the data are pooled, no privacy at all).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError, RunDirectoryError
from ldp_audit.training.gridworld import (
    ALPHA_VIEW,
    BETA_VIEW,
    N_ACTIONS,
    MapSet,
    VectorGridWorld,
    check_density,
    check_hist_len,
    check_meeting_rule,
    check_size,
    generate_maps,
)

__all__ = [
    "METHODS",
    "FedRLConfig",
    "OutputMechanism",
    "TargetMechanism",
    "train_fedrl",
    "run_fedrl",
    "report_sections",
    "privacy_table",
]

#: Methods trained by :func:`train_fedrl` (FedRL yields both FedRL-1 and FedRL-2 at test time).
METHODS = ("dqn-alpha", "dqn-full", "fedrl")
#: Rows of Table 1.
TABLE_ROWS = ("DQN-alpha", "FedRL-1", "FedRL-2", "DQN-full")


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


#: noise scales and clip bounds accepted: Q outputs are float32, and sigma / B must stay finite
_MAX_SCALE, _MIN_BOUND = 1e6, 1e-6


def _check_sigma(v: Any, name: str) -> float:
    if not _is_real(v) or math.isnan(float(v)) or float(v) < 0 or math.isinf(float(v)):
        raise InvalidParameterError(f"{name} must be a finite real number >= 0, got {v!r}")
    if float(v) > _MAX_SCALE:
        raise InvalidParameterError(f"{name} must be <= {_MAX_SCALE:g} (float32), got {v!r}")
    return float(v)


def _check_bound(v: Any, name: str) -> float | None:
    if v is None:
        return None
    if not _is_real(v) or math.isnan(float(v)) or not (0 < float(v) < math.inf):
        raise InvalidParameterError(f"{name} must be a finite real number > 0 (or None), got {v!r}")
    if not _MIN_BOUND <= float(v) <= _MAX_SCALE:
        raise InvalidParameterError(
            f"{name} must be in [{_MIN_BOUND:g}, {_MAX_SCALE:g}] (float32 Q outputs; sigma / B "
            f"must stay finite), got {v!r}"
        )
    return float(v)


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
        object.__setattr__(self, "sigma", _check_sigma(self.sigma, "sigma"))
        object.__setattr__(self, "bound", _check_bound(self.bound, "clip_outputs"))
        if not _is_int(self.dim) or self.dim < 1:
            raise InvalidParameterError(f"dim must be an integer >= 1, got {self.dim!r}")
        if not _is_real(self.delta) or not 0.0 < float(self.delta) < 1.0:
            raise InvalidParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        object.__setattr__(self, "delta", float(self.delta))

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
        if not self.private or float(delta) == 0.0:
            return math.inf
        from ldp_audit.mechanisms import analytic_gaussian_epsilon

        return analytic_gaussian_epsilon(self.sigma, self.sensitivity, float(delta))

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
        cache = self.__dict__.setdefault("_exchange_events", {})
        if rows not in cache:
            cache[rows] = self._exchange_event(rows)
        return cache[rows]

    def _exchange_event(self, rows: int) -> Any:
        from ldp_audit.accountant import NonPrivateEvent, SelfComposedEvent

        ev = self.event()
        if isinstance(ev, NonPrivateEvent) or rows == 1:
            return ev
        return SelfComposedEvent(ev, int(rows))

    def clip(self, x: np.ndarray) -> np.ndarray:
        return x if self.bound is None else np.clip(x, -self.bound, self.bound)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """``clip(x) + N(0, sigma^2)`` for (n, dim) rows."""
        if not isinstance(rng, np.random.Generator):
            raise InvalidParameterError(
                f"rng must be a numpy.random.Generator, got {type(rng).__name__}"
            )
        xb = np.asarray(x, dtype=np.float64)
        if xb.ndim == 1:
            xb = xb[None, :]
        if xb.ndim != 2 or xb.shape[1] != self.dim:
            raise InvalidParameterError(f"x must have shape (n, {self.dim}), got {xb.shape}")
        if not np.isfinite(xb).all():
            raise InvalidParameterError("x must be finite")
        out = self.clip(xb)
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
        return {
            "name": self.name,
            "sigma": self.sigma,
            "bound": self.bound,
            "dim": self.dim,
            "delta": self.delta,
        }


def TargetMechanism(sigma: float, bound: float | None, delta: float = 1e-5) -> OutputMechanism:  # noqa: N802
    """The release of alpha's targets ``Y`` (one scalar per row)."""
    return OutputMechanism(sigma=sigma, bound=bound, dim=1, delta=delta)


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FedRLConfig:
    """Everything a FedRL training run needs (validated on construction).

    Attributes:
        size: map size N (8, 16, 32; other sizes need ``t_max``).
        t_max: episode limit (default: the paper's 38 / 86 / 178).
        density: obstacle probability per cell, in [0, 1).
        n_maps: maps generated (paper: 8000; split 80 / 10 / 10 %).
        map_seed: seed of the maps.
        hist_len: observation history length H (Figure 4).
        sigma: noise standard deviation on every exchanged Q output (paper: 1).
        clip_outputs: B: clip exchanged Q outputs to [-B, B] (None: unbounded, as in the paper).
        target_sigma: noise on the released targets Y (0: unprotected, as in the paper).
        clip_targets: B_Y: clip Y to [-B_Y, B_Y] before its noise (needed for a finite epsilon).
        delta: the delta at which epsilons are reported.
        gamma: discount (public code: 0.9).
        lr: Adam learning rate (paper: 0.001).
        batch_size: replay minibatch.
        n_envs: maps played at once (the batched environment).
        train_steps: training iterations (each: one step of every env, one minibatch update).
        replay_size: replay memory (transitions).
        learning_starts: transitions stored before the first update.
        eps_start, eps_end, eps_decay: epsilon-greedy exploration, decayed linearly over
            ``eps_decay`` iterations.
        target_update: iterations between target-network updates.
        eval_maps: test maps evaluated at the end (greedy; <= the test split).
        methods: which of ``dqn-alpha``, ``dqn-full``, ``fedrl`` to train.
        runs: independent runs (seeds) per method.
        prepay_block: iterations charged per ledger transaction.
        device: torch device of the networks, ``"cpu"``, ``"cuda"`` or ``"auto"``
            (:mod:`ldp_audit.training.device`); every random draw stays on the CPU, so on the
            CPU a run is bit for bit the same as before the option existed.
        meeting_rule: the agents' distance for meeting, the +50, the shaping term and the
            test-time success check: ``"manhattan"`` (|dx| + |dy|, the paper's text; default,
            results unchanged) or ``"public-code"`` (|dx + dy|, what the authors' code
            computes; see :mod:`ldp_audit.training.gridworld`).
    """

    size: int = 8
    t_max: int | None = None
    density: float = 0.2
    n_maps: int = 8000
    map_seed: int = 0
    hist_len: int = 4
    sigma: float = 1.0
    clip_outputs: float | None = None
    target_sigma: float = 0.0
    clip_targets: float | None = None
    delta: float = 1e-5
    gamma: float = 0.9
    lr: float = 1e-3
    batch_size: int = 32
    n_envs: int = 16
    train_steps: int = 2000
    replay_size: int = 50_000
    learning_starts: int = 256
    eps_start: float = 1.0
    eps_end: float = 0.1
    eps_decay: int = 1000
    target_update: int = 100
    eval_maps: int = 800
    methods: tuple[str, ...] = METHODS
    runs: int = 1
    prepay_block: int = 50
    device: str = "cpu"
    meeting_rule: str = "manhattan"

    def __post_init__(self) -> None:
        from ldp_audit.training.device import check_device

        check_device(self.device)
        check_meeting_rule(self.meeting_rule)
        _, t = check_size(self.size, self.t_max)
        check_density(self.density)
        check_hist_len(self.hist_len)
        _check_sigma(self.sigma, "sigma")
        _check_bound(self.clip_outputs, "clip_outputs")
        _check_sigma(self.target_sigma, "target_sigma")
        _check_bound(self.clip_targets, "clip_targets")
        for name, lo in (
            ("n_maps", 10),
            ("map_seed", 0),
            ("batch_size", 1),
            ("n_envs", 1),
            ("train_steps", 1),
            ("replay_size", 1),
            ("learning_starts", 1),
            ("eps_decay", 1),
            ("target_update", 1),
            ("eval_maps", 1),
            ("runs", 1),
            ("prepay_block", 1),
        ):
            v = getattr(self, name)
            if not _is_int(v) or v < lo:
                raise InvalidParameterError(f"{name} must be an integer >= {lo}, got {v!r}")
        for name in ("gamma", "eps_start", "eps_end"):
            v = getattr(self, name)
            if not _is_real(v) or not 0.0 <= float(v) <= 1.0:
                raise InvalidParameterError(f"{name} must be a real number in [0, 1], got {v!r}")
        if not _is_real(self.lr) or not 0 < float(self.lr) < math.inf:
            raise InvalidParameterError(f"lr must be a real number > 0, got {self.lr!r}")
        if not _is_real(self.delta) or not 0 < float(self.delta) < 1:
            raise InvalidParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        if not isinstance(self.methods, (tuple, list)) or not self.methods:
            raise InvalidParameterError(
                f"methods must be a non-empty sequence of {METHODS}, got {self.methods!r}"
            )
        object.__setattr__(self, "methods", tuple(self.methods))
        for m in self.methods:
            if m not in METHODS:
                raise InvalidParameterError(f"methods must be among {METHODS}, got {m!r}")
        if len(set(self.methods)) != len(self.methods):
            raise InvalidParameterError(f"methods must not repeat, got {self.methods!r}")
        n_test = self.n_maps - int(round(0.8 * self.n_maps)) - int(round(0.1 * self.n_maps))
        if self.eval_maps > n_test:
            raise InvalidParameterError(
                f"eval_maps must be <= the {n_test} test maps of n_maps={self.n_maps}, "
                f"got {self.eval_maps}"
            )
        _ = t

    @property
    def episode_limit(self) -> int:
        return check_size(self.size, self.t_max)[1]

    def output_mechanism(self) -> OutputMechanism:
        return OutputMechanism(self.sigma, self.clip_outputs, N_ACTIONS, self.delta)

    def target_mechanism(self) -> OutputMechanism:
        return TargetMechanism(self.target_sigma, self.clip_targets, self.delta)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["methods"] = list(self.methods)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FedRLConfig:
        d = dict(d)
        if "methods" in d:
            d["methods"] = tuple(d["methods"])
        try:
            return cls(**d)
        except TypeError as exc:
            raise InvalidParameterError(f"invalid FedRL config: {exc}") from None


# ----------------------------------------------------------------------------------------------
# Networks (torch, imported lazily)
# ----------------------------------------------------------------------------------------------


def _torch() -> Any:
    import torch

    return torch


def _init_params(module: Any, gen: Any) -> None:
    """Re-initialise ``module`` from an explicit ``torch.Generator`` (no global seeding)."""
    torch = _torch()
    for m in module.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)):
            torch.nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5), generator=gen)
            fan_in = m.weight[0].numel()
            bound = 1.0 / math.sqrt(fan_in)
            torch.nn.init.uniform_(m.bias, -bound, bound, generator=gen)


def _local_q(view: int, hist: int) -> Any:
    nn = _torch().nn
    return nn.Sequential(
        nn.Conv2d(hist, 32, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * view * view, 256),
        nn.ReLU(),
        nn.Linear(256, N_ACTIONS),
    )


def _mlp() -> Any:
    nn = _torch().nn
    return nn.Sequential(
        nn.Linear(2 * N_ACTIONS, 2 * N_ACTIONS), nn.ReLU(), nn.Linear(2 * N_ACTIONS, N_ACTIONS)
    )


_FULLQ: list[Any] = []


def _full_q(hist: int) -> Any:
    """DQN-full's network: one conv branch per observation, concatenated, 256 hidden, 16 out."""
    torch = _torch()
    nn = torch.nn
    if not _FULLQ:  # one class per process (torch.func.stack_module_state needs the same class)

        class FullQ(nn.Module):
            def __init__(self, hist: int) -> None:
                super().__init__()
                self.ca = nn.Sequential(nn.Conv2d(hist, 32, 3, padding=1), nn.ReLU(), nn.Flatten())
                self.cb = nn.Sequential(nn.Conv2d(hist, 32, 3, padding=1), nn.ReLU(), nn.Flatten())
                self.head = nn.Sequential(
                    nn.Linear(32 * (ALPHA_VIEW**2 + BETA_VIEW**2), 256),
                    nn.ReLU(),
                    nn.Linear(256, N_ACTIONS),
                )

            def forward(self, sa: Any, sb: Any) -> Any:
                return self.head(torch.cat([self.ca(sa), self.cb(sb)], dim=1))

        _FULLQ.append(FullQ)
    return _FULLQ[0](hist)


# ----------------------------------------------------------------------------------------------
# Replay memory (each agent's half kept apart; rows aligned by index = the shared "ID")
# ----------------------------------------------------------------------------------------------


class _Replay:
    def __init__(self, cap: int, hist: int) -> None:
        self.cap, self.n, self.i = cap, 0, 0
        self.sa = np.zeros((cap, hist, ALPHA_VIEW, ALPHA_VIEW), np.float32)
        self.sa2 = np.zeros_like(self.sa)
        self.sb = np.zeros((cap, hist, BETA_VIEW, BETA_VIEW), np.float32)
        self.sb2 = np.zeros_like(self.sb)
        self.a = np.zeros(cap, np.int64)
        self.r = np.zeros(cap, np.float32)  # alpha's (private) rewards
        self.d = np.zeros(cap, np.float32)
        self.bump = np.zeros(cap, np.int64)  # obstacles hit in the step (attack ground truth)

    def add(self, sa, sb, a, r, sa2, sb2, d, bump) -> None:  # noqa: ANN001
        k = len(a)
        idx = (self.i + np.arange(k)) % self.cap
        self.bump[idx] = bump
        self.sa[idx], self.sb[idx], self.a[idx], self.r[idx] = sa, sb, a, r
        self.sa2[idx], self.sb2[idx], self.d[idx] = sa2, sb2, d
        self.i = int((self.i + k) % self.cap)
        self.n = min(self.cap, self.n + k)


# ----------------------------------------------------------------------------------------------
# One method, one run
# ----------------------------------------------------------------------------------------------


@dataclass
class _Log:
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


class _Exchange:
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
        log: _Log,
    ) -> None:
        self.cfg, self.trials, self.rngs, self.log = cfg, list(trials), rngs, log
        self.mech = cfg.output_mechanism()
        self.ymech = cfg.target_mechanism()
        self.clean = OutputMechanism(0.0, None, N_ACTIONS, cfg.delta)
        from ldp_audit.release import reserve

        self.acc = reserve(accountant)  # topped up block by block (prepay_training)
        self.step = 0

    def ids(self, trial: int, agent: str, suffix: str = "") -> str:
        return f"{trial}/{agent}{suffix}"

    def prepay_training(self, iterations: int, updates: int) -> None:
        """Charge the next ``iterations`` acting exchanges and ``updates`` minibatch updates."""
        c = self.cfg
        charges = []
        ev_act = self.mech.exchange_event(c.n_envs)
        ev_b = self.mech.exchange_event(c.batch_size)
        ev_y = self.ymech.exchange_event(c.batch_size)
        for t in self.trials:
            for _ in range(iterations):
                charges += [(self.ids(t, "alpha"), ev_act), (self.ids(t, "beta"), ev_act)]
            for _ in range(updates):
                charges += [
                    (self.ids(t, "beta"), ev_b),  # C_beta(s)
                    (self.ids(t, "beta"), ev_b),  # C'_beta(s') from beta's target network
                    (self.ids(t, "alpha"), ev_b),  # C_alpha(s)
                    (self.ids(t, "alpha", ":Y"), ev_y),  # Y
                ]
        self.acc.add(charges)  # durable, one transaction

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
        from ldp_audit.release import release_with

        torch = _torch()
        mech = self.mech if mech is None else mech
        qc = q if mech.bound is None else torch.clamp(q, -mech.bound, mech.bound)
        k, n = q.shape[0], q.shape[1]
        raw = q.detach().reshape(k * n, -1).cpu().numpy().astype(np.float64)
        rng = self.rngs[sender]
        ev = mech.exchange_event(n)
        rel = release_with(
            lambda: mech.privatize(raw, rng),
            accountant=self.acc,
            charges=[(self.ids(t, sender, suffix), ev) for t in self.trials],
            epsilon=mech.epsilon,
            delta=mech.delta if mech.private else 0.0,
        )
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
        from ldp_audit.release import release_with

        k, n = y.shape
        rel = release_with(
            lambda: self.ymech.privatize(y.reshape(-1, 1), self.rngs["alpha"]),
            accountant=self.acc,
            charges=[
                (self.ids(t, "alpha", ":Y"), self.ymech.exchange_event(n)) for t in self.trials
            ],
            epsilon=self.ymech.epsilon,
            delta=self.ymech.delta if self.ymech.private else 0.0,
        )
        if self.log.record:
            self.log.y.append(
                rel,
                trial=np.repeat(np.asarray(self.trials, np.int64), n),
                step=np.full(k * n, self.step, np.int64),
            )
            self.log.y_reward.append(reward.reshape(-1).astype(np.float64))
            self.log.y_bump.append(bump.reshape(-1).astype(np.int64))
        return np.array(rel.values).reshape(k, n)  # a writable copy


def _eps_greedy(q: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    greedy = q.argmax(axis=-1)
    explore = rng.random(greedy.shape) < eps
    return np.where(explore, rng.integers(N_ACTIONS, size=greedy.shape), greedy)


_IM2COL: dict[tuple[int, int], Any] = {}


def _im2col_index(c: int, v: int, device: Any = None) -> Any:
    """Gather index (v*v*c*9,) into a zero-padded (c, v+2, v+2) window, flattened: row p of
    the result holds the 3x3 neighbourhood of position p of every channel, in the (c, kh, kw)
    order of a ``Conv2d`` weight (on ``device``; None: the CPU)."""
    key = (c, v) if device is None or str(device) == "cpu" else (c, v, str(device))
    if key not in _IM2COL:
        if len(key) == 3:
            _IM2COL[key] = _im2col_index(c, v).to(device)
            return _IM2COL[key]
        p = v + 2
        ci, pi, pj, di, dj = np.meshgrid(
            np.arange(c), np.arange(v), np.arange(v), np.arange(3), np.arange(3), indexing="ij"
        )
        flat = ci * p * p + (pi + di) * p + (pj + dj)  # (c, v, v, 3, 3)
        _IM2COL[key] = _torch().as_tensor(flat.transpose(1, 2, 0, 3, 4).reshape(-1))
    return _IM2COL[key]


def _conv3x3_relu(x: Any, w: Any, b: Any) -> Any:
    """Batched 3x3 convolution (padding 1) + ReLU of K runs at once, as one matmul.

    ``x`` (K, B, C, v, v), ``w`` (K, C*9, 32) (the ``Conv2d`` weight, see :class:`_Stacked`),
    ``b`` (K, 32) -> (K, B, v*v*32), flattened position-major (the next layer's weight is kept
    in that order: :func:`_pos_major`). Same arithmetic as ``torch.nn.Conv2d`` (im2col as one
    gather, then a matmul), without the grouped convolution that ``vmap`` over K weights
    turns into.
    """
    torch = _torch()
    k, bsz, c, v = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    xp = torch.nn.functional.pad(x.reshape(k * bsz, c, v, v), (1, 1, 1, 1))
    cols = xp.reshape(k * bsz, -1).index_select(1, _im2col_index(c, v, x.device))
    out = torch.baddbmm(b[:, None, :], cols.reshape(k, bsz * v * v, c * 9), w)
    return torch.relu(out).reshape(k, bsz, v * v * w.shape[2])


def _pos_major(w: Any, views: Sequence[int], inverse: bool = False, ch: int = 32) -> Any:
    """Reorder the input columns of a dense weight (K, out, sum(ch*v*v)) between torch's
    channel-major flatten of each conv output (``nn.Flatten`` of (ch, v, v)) and the
    position-major order :func:`_conv3x3_relu` produces (``inverse``: back to torch's order)."""
    torch = _torch()
    k, o = w.shape[0], w.shape[1]
    parts, start = [], 0
    for v in views:
        seg = w[:, :, start : start + ch * v * v]
        shape = (k, o, v * v, ch) if inverse else (k, o, ch, v * v)
        parts.append(seg.reshape(shape).transpose(2, 3).reshape(k, o, ch * v * v))
        start += ch * v * v
    return torch.cat(parts, dim=2).contiguous()


def _dense(x: Any, w: Any, b: Any) -> Any:
    """K dense layers at once: ``x`` (K, B, in), ``w`` (K, in, out) (transposed ``Linear``
    weight, see :class:`_Stacked`), ``b`` (K, out)."""
    return _torch().baddbmm(b[:, None, :], x, w)


def _fwd_local_q(p: dict, x: Any) -> Any:
    """The stacked local Q-networks (:func:`_local_q`) on ``x`` (K, B, H, v, v)."""
    torch = _torch()
    h = _conv3x3_relu(x, p["0.weight"], p["0.bias"])
    h = torch.relu(_dense(h, p["3.weight"], p["3.bias"]))
    return _dense(h, p["5.weight"], p["5.bias"])


def _fwd_full_q(p: dict, sa: Any, sb: Any) -> Any:
    """The stacked DQN-full networks (:func:`_full_q`) on both windows."""
    torch = _torch()
    ha = _conv3x3_relu(sa, p["ca.0.weight"], p["ca.0.bias"])
    hb = _conv3x3_relu(sb, p["cb.0.weight"], p["cb.0.bias"])
    h = torch.relu(_dense(torch.cat([ha, hb], dim=2), p["head.0.weight"], p["head.0.bias"]))
    return _dense(h, p["head.2.weight"], p["head.2.bias"])


def _fwd_mlp(p: dict, x: Any) -> Any:
    """The stacked shared MLPs (:func:`_mlp`) on ``x`` (K, B, 32)."""
    h = _torch().relu(_dense(x, p["0.weight"], p["0.bias"]))
    return _dense(h, p["2.weight"], p["2.bias"])


#: How :class:`_Stacked` stores each weight: ``"conv"`` (K, C*9, 32); ``"dense"`` transposed
#: (K, in, out), with the given conv views' columns position-major (None: the input's view).
_LAYOUT: dict[Callable[..., Any], dict[str, tuple[str, Any]]] = {
    _fwd_local_q: {
        "0.weight": ("conv", ()),
        "3.weight": ("dense", None),
        "5.weight": ("dense", ()),
    },
    _fwd_full_q: {
        "ca.0.weight": ("conv", ()),
        "cb.0.weight": ("conv", ()),
        "head.0.weight": ("dense", (ALPHA_VIEW, BETA_VIEW)),
        "head.2.weight": ("dense", ()),
    },
    _fwd_mlp: {"0.weight": ("dense", ()), "2.weight": ("dense", ())},
}


class _Stacked:
    """K independent copies of a network, evaluated at once with batched matmuls.

    The parameters are the ``torch.func.stack_module_state`` of K modules initialised from the
    runs' own generators; ``forward`` computes the module's function for all K at once (one
    ``torch.baddbmm`` per layer for all K; the convolution as one gather + matmul), cheaper on
    a CPU than ``vmap`` over ``functional_call``, which turns the K convolutions into one
    grouped convolution. Weights are stored in the layout the matmuls read (:data:`_LAYOUT`:
    transposed, conv-reading columns position-major), so no forward or backward pass copies a
    weight; Adam is element-wise, so a fixed permutation of a parameter changes nothing.
    :meth:`state` and :meth:`torch_params` return torch's layout. A test checks the forward
    pass and the gradients against ``vmap(functional_call)`` of the module.

    One Adam over the stacked parameters is exactly K independent Adams, and the sum of the K
    runs' losses gives each run its own gradient.
    """

    def __init__(
        self,
        make: Callable[[], Any],
        gens: Sequence[Any],
        forward: Callable[..., Any],
        view: int | None = None,
        device: Any = None,
    ) -> None:
        torch = _torch()
        self.device = torch.device("cpu" if device is None else device)
        mods = [make() for _ in gens]
        for m, g in zip(mods, gens, strict=True):
            _init_params(m, g)
        params, _ = torch.func.stack_module_state(mods)
        self._layout = {
            name: (kind, (view,) if views is None else views)
            for name, (kind, views) in _LAYOUT[forward].items()
        }
        self._shapes = {n: tuple(v.shape) for n, v in params.items()}
        with torch.no_grad():
            params = {n: self.to_internal(n, v) for n, v in params.items()}
        # initialised on the CPU from the runs' CPU generators, then moved (same values anywhere)
        self.params = {
            k: v.detach().to(self.device).clone().requires_grad_(True) for k, v in params.items()
        }
        self.target = {k: v.detach().clone() for k, v in self.params.items()}
        self.module = mods[0]  # the architecture (for reference checks)
        self._f = forward

    def to_internal(self, name: str, v: Any) -> Any:
        """A stacked parameter (or gradient) from torch's layout to the stored one."""
        if name not in self._layout:
            return v
        kind, views = self._layout[name]
        k = v.shape[0]
        if kind == "conv":
            return v.reshape(k, v.shape[1], -1).transpose(1, 2).contiguous()
        if views:
            v = _pos_major(v, views)
        return v.transpose(1, 2).contiguous()

    def to_torch(self, name: str, v: Any) -> Any:
        """A stacked parameter (or gradient) from the stored layout to torch's."""
        if name not in self._layout:
            return v
        kind, views = self._layout[name]
        v = v.transpose(1, 2)
        if kind == "conv":
            return v.reshape(self._shapes[name]).contiguous()
        return _pos_major(v, views, inverse=True) if views else v.contiguous()

    def __call__(self, *xs: Any) -> Any:
        return self._f(self.params, *xs)

    def tgt(self, *xs: Any) -> Any:
        return self._f(self.target, *xs)

    def sync(self) -> None:
        self.target = {k: v.detach().clone() for k, v in self.params.items()}

    def torch_params(self) -> dict[str, Any]:
        """The stacked parameters in torch's layout (detached; for ``functional_call``)."""
        return {n: self.to_torch(n, v.detach()) for n, v in self.params.items()}

    def state(self, k: int) -> dict[str, np.ndarray]:
        return {n: v[k].cpu().numpy().copy() for n, v in self.torch_params().items()}


def _train_runs(
    method: str,
    cfg: FedRLConfig,
    maps: MapSet,
    seed_seqs: Sequence[np.random.SeedSequence],
    trials: Sequence[int],
    accountant: Any,
    log: _Log,
    progress: Any = None,
    extras: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Train one method for K runs at once (batched over runs and maps); evaluate each run.

    ``extras`` (None: nothing more, the results of before the option existed): further
    evaluations of the same networks, each with its own child generators (every random stream
    of the training and of Table 1's evaluation is unchanged; the extra releases are charged
    to their own ledger agents, ``@curve1`` / ``@curve2`` / ``@explore``):

    * ``curve_points`` P, ``curve_maps`` M: at P evenly spaced iterations, greedy episodes on
      the first M test maps (FedRL: noisy, FedRL-1, and noise-free, FedRL-2): learning curves;
    * ``explore`` (eps, ...): after training, epsilon-greedy episodes on the test maps
      (FedRL: the noise-free outputs, FedRL-2's protocol), beside Table 1's greedy ones.
    """
    torch = _torch()
    kk = len(trials)
    spawned = [s.spawn(6) for s in seed_seqs]
    gens = [torch.Generator().manual_seed(int(sp[5].generate_state(1)[0])) for sp in spawned]
    master = np.random.SeedSequence([int(sp[0].generate_state(1)[0]) for sp in spawned])
    s_env, s_act, s_rep, s_alpha, s_beta = master.spawn(5)
    rng_env = np.random.default_rng(s_env)
    rng_act = np.random.default_rng(s_act)
    rng_rep = np.random.default_rng(s_rep)
    h, n = cfg.hist_len, cfg.n_envs
    fed = method == "fedrl"
    from ldp_audit.training.device import resolve_device

    dev = torch.device(resolve_device(cfg.device))
    if method == "dqn-alpha":
        nets = {
            "qa": _Stacked(lambda: _local_q(ALPHA_VIEW, h), gens, _fwd_local_q, ALPHA_VIEW, dev)
        }
    elif method == "dqn-full":
        nets = {"qf": _Stacked(lambda: _full_q(h), gens, _fwd_full_q, device=dev)}
    else:
        nets = {
            "qa": _Stacked(lambda: _local_q(ALPHA_VIEW, h), gens, _fwd_local_q, ALPHA_VIEW, dev),
            "qb": _Stacked(lambda: _local_q(BETA_VIEW, h), gens, _fwd_local_q, BETA_VIEW, dev),
            "g": _Stacked(_mlp, gens, _fwd_mlp, device=dev),
        }
    opt = torch.optim.Adam(
        [p for m in nets.values() for p in m.params.values()], lr=cfg.lr, fused=True
    )
    ex = (
        _Exchange(
            cfg,
            trials,
            accountant,
            {"alpha": np.random.default_rng(s_alpha), "beta": np.random.default_rng(s_beta)},
            log,
        )
        if fed
        else None
    )

    def shape(x: np.ndarray) -> np.ndarray:
        return x.reshape(kk, -1, *x.shape[1:])

    def q_values(sa: np.ndarray, sb: np.ndarray, *, kind: int, maps_idx: np.ndarray) -> Any:
        ta, tb = torch.as_tensor(shape(sa), device=dev), torch.as_tensor(shape(sb), device=dev)
        if method == "dqn-alpha":
            return nets["qa"](ta)
        if method == "dqn-full":
            return nets["qf"](ta, tb)
        ca = ex.send("alpha", nets["qa"](ta), sa, kind, map_index=maps_idx)
        cb = ex.send("beta", nets["qb"](tb), sb, kind, map_index=maps_idx)
        return nets["g"](torch.cat([ca, cb], dim=-1))

    extras = dict(extras or {})
    n_pts = int(extras.get("curve_points", 0))
    checkpoints = (
        sorted({max(1, round(cfg.train_steps * (i + 1) / n_pts)) for i in range(n_pts)})
        if n_pts
        else []
    )
    curve_test = maps.split["test"][: int(extras.get("curve_maps", cfg.eval_maps))]
    explore = tuple(float(e) for e in extras.get("explore", ()))
    xex, rng_explore = None, None
    if checkpoints or explore:  # own generators: no stream of the training is touched
        xss = np.random.SeedSequence([int(sp[0].generate_state(1)[0]) for sp in spawned] + [0x10E7])
        xs_alpha, xs_beta, xs_explore = xss.spawn(3)
        rng_explore = np.random.default_rng(xs_explore)
        if fed:
            xex = _Exchange(
                cfg,
                trials,
                accountant,
                {"alpha": np.random.default_rng(xs_alpha), "beta": np.random.default_rng(xs_beta)},
                _Log(record=False),
            )
    curve_evals: list[dict[str, list[dict[str, Any]]]] = []

    def extra_eval(test: np.ndarray, eps: float) -> dict[str, list[dict[str, Any]]]:
        if fed:
            modes = (
                (("FedRL-1", xex.mech, "@curve1"), ("FedRL-2", xex.clean, "@curve2"))
                if eps == 0
                else (("FedRL-2", xex.clean, "@explore"),)
            )
            return {
                lab: _evaluate(
                    cfg, maps, test, nets, method, xex, kk, -1, mech, sfx, eps, rng_explore
                )
                for lab, mech, sfx in modes
            }
        lab = "DQN-alpha" if method == "dqn-alpha" else "DQN-full"
        return {
            lab: _evaluate(cfg, maps, test, nets, method, None, kk, 0, None, "", eps, rng_explore)
        }

    train_idx = maps.split["train"]
    env = VectorGridWorld(
        maps, rng_env.choice(train_idx, kk * n), hist_len=h, meeting_rule=cfg.meeting_rule
    )
    sa, sb = env.reset()
    reps = [_Replay(cfg.replay_size, h) for _ in range(kk)]
    ep_ret = np.zeros(kk * n)
    every = max(1, cfg.train_steps // 20)
    curve_s = [[] for _ in range(kk)]
    curve_r = [[] for _ in range(kk)]
    win_s = [[] for _ in range(kk)]
    win_r = [[] for _ in range(kk)]
    updates = syncs = 0
    losses: list[float] = []
    t0 = time.perf_counter()
    block = cfg.prepay_block
    for it in range(cfg.train_steps):
        if fed and it % block == 0:
            n_it = min(block, cfg.train_steps - it)
            n_up = sum(1 for j in range(it, it + n_it) if (j + 1) * n >= cfg.learning_starts)
            ex.prepay_training(n_it, n_up)
        if ex is not None:
            ex.step = it
        eps = cfg.eps_start + (cfg.eps_end - cfg.eps_start) * min(1.0, it / cfg.eps_decay)
        with torch.inference_mode():
            q = q_values(sa, sb, kind=KIND_ACT, maps_idx=env.map_index.copy())
        act = _eps_greedy(q.cpu().numpy(), eps, rng_act).reshape(-1)
        r, done, met, _ = env.step(act)
        sa2, sb2 = env.observe()
        bumps = env.last_bumps.sum(1)
        term = (done & met).astype(np.float32)
        for k in range(kk):
            s = slice(k * n, (k + 1) * n)
            reps[k].add(sa[s], sb[s], act[s], r[s], sa2[s], sb2[s], term[s], bumps[s])
        ep_ret += r
        for slot in np.flatnonzero(done):
            win_s[slot // n].append(float(met[slot]))
            win_r[slot // n].append(float(ep_ret[slot]))
        ep_ret[done] = 0.0
        if done.any():
            slots = np.flatnonzero(done)
            env.reset_slots(slots, rng_env.choice(train_idx, slots.size))
            sa2, sb2 = env.observe()
        sa, sb = sa2, sb2
        if reps[0].n >= cfg.learning_starts:
            j = rng_rep.integers(reps[0].n, size=(kk, cfg.batch_size))
            losses.append(_update(method, cfg, nets, reps, j, opt, ex))
            updates += 1
            if updates % cfg.target_update == 0:  # the public code never does this
                for m in nets.values():
                    m.sync()
                syncs += 1
        if checkpoints and it + 1 in checkpoints:
            curve_evals.append(extra_eval(curve_test, 0.0))
        if (it + 1) % every == 0:
            for k in range(kk):
                curve_s[k].append(float(np.mean(win_s[k])) if win_s[k] else float("nan"))
                curve_r[k].append(float(np.mean(win_r[k])) if win_r[k] else float("nan"))
                win_s[k], win_r[k] = [], []
        if progress is not None:
            progress.update(kk)
    train_seconds = time.perf_counter() - t0
    test = maps.split["test"][: cfg.eval_maps]
    if fed:
        evals = {
            label: _evaluate(cfg, maps, test, nets, method, ex, kk, kind, mech, suffix)
            for label, kind, mech, suffix in (
                ("FedRL-1", KIND_FEDRL1, ex.mech, "@fedrl1"),
                ("FedRL-2", KIND_FEDRL2, ex.clean, "@fedrl2"),
            )
        }
    else:
        label = "DQN-alpha" if method == "dqn-alpha" else "DQN-full"
        evals = {label: _evaluate(cfg, maps, test, nets, method, None, kk, 0, None, "")}
    explore_evals = {eps: extra_eval(test, eps) for eps in explore}
    out = []
    for k, trial in enumerate(trials):
        res = {
            "method": method,
            "trial": int(trial),
            "train_seconds": train_seconds,
            "runs_batched": kk,
            "updates": updates,
            "target_syncs": syncs,
            "final_loss": float(np.mean(losses[-50:])) / kk if losses else None,
            "curve_success": curve_s[k],
            "curve_return": curve_r[k],
            "curve_every": every,
            "state": {name: m.state(k) for name, m in nets.items()},
        }
        for label, ev in evals.items():
            res[label] = ev[k]
        if checkpoints:
            res["eval_curve"] = {
                "iterations": checkpoints,
                "maps": int(len(curve_test)),
                "methods": {
                    lab: [_brief(c[lab][k]) for c in curve_evals] for lab in curve_evals[0]
                },
            }
        if explore:
            res["explore_eval"] = {
                lab: {
                    "0": _brief(evals[lab][k]),
                    **{f"{e:g}": _brief(explore_evals[e][lab][k]) for e in explore},
                }
                for lab in explore_evals[explore[0]]
            }
        out.append(res)
    return out


def _update(
    method: str,
    cfg: FedRLConfig,
    nets: dict,
    reps: list[_Replay],
    j: np.ndarray,
    opt: Any,
    ex: _Exchange | None,
) -> float:
    """One minibatch step of every run (eqs. 4-7 for FedRL); returns the summed loss."""
    torch = _torch()

    def g(name: str) -> np.ndarray:
        return np.stack([getattr(rep, name)[jj] for rep, jj in zip(reps, j, strict=True)])

    dev = next(iter(nets.values())).device
    sa_np, sb_np, sa2_np, sb2_np = g("sa"), g("sb"), g("sa2"), g("sb2")
    sa, sb = torch.as_tensor(sa_np, device=dev), torch.as_tensor(sb_np, device=dev)
    sa2, sb2 = torch.as_tensor(sa2_np, device=dev), torch.as_tensor(sb2_np, device=dev)
    a = torch.as_tensor(g("a"), device=dev)
    r = g("r").astype(np.float64)
    notdone = 1.0 - g("d").astype(np.float64)
    if method == "dqn-alpha":
        with torch.inference_mode():
            nxt = nets["qa"].tgt(sa2).max(dim=-1).values.double().cpu().numpy()
        y = torch.as_tensor(r + cfg.gamma * notdone * nxt, dtype=torch.float32, device=dev)
        q = nets["qa"](sa)
    elif method == "dqn-full":
        with torch.inference_mode():
            nxt = nets["qf"].tgt(sa2, sb2).max(dim=-1).values.double().cpu().numpy()
        y = torch.as_tensor(r + cfg.gamma * notdone * nxt, dtype=torch.float32, device=dev)
        q = nets["qf"](sa, sb)
    else:
        # beta -> alpha: C_beta(s_j) and C'_beta(s'_j) (beta's target network)
        cb = ex.send("beta", nets["qb"](sb), sb_np, KIND_BATCH)
        with torch.inference_mode():
            cb2 = ex.send("beta", nets["qb"].tgt(sb2), sb2_np, KIND_NEXT)
            # alpha computes Y from its own target outputs (noised, eq. 4) and C'_beta
            qa2 = nets["qa"].tgt(sa2)
            k, b = qa2.shape[0], qa2.shape[1]
            qa2n = ex.mech.privatize(
                qa2.reshape(k * b, -1).cpu().numpy().astype(np.float64), ex.rngs["alpha"]
            )
            qa2 = torch.as_tensor(qa2n, dtype=torch.float32, device=dev).reshape(k, b, -1)
            nxt = nets["g"].tgt(torch.cat([qa2, cb2], dim=-1)).max(dim=-1).values
            nxt = nxt.double().cpu().numpy()
        y_clean = r + cfg.gamma * notdone * nxt
        # alpha -> beta: C_alpha(s_j) and Y; the MLP sees released values only
        ca = ex.send("alpha", nets["qa"](sa), sa_np, KIND_BATCH)
        y = torch.as_tensor(ex.send_y(y_clean, r, g("bump")), dtype=torch.float32, device=dev)
        q = nets["g"](torch.cat([ca, cb], dim=-1))
    taken = q.gather(-1, a[..., None]).squeeze(-1)
    loss = ((taken - y) ** 2).mean(dim=1).sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def _brief(ev: dict[str, Any]) -> dict[str, Any]:
    return {k: ev[k] for k in ("episodes", "successes", "succ_rate", "avg_reward")}


def _evaluate(
    cfg: FedRLConfig,
    maps: MapSet,
    test: np.ndarray,
    nets: dict,
    method: str,
    ex: _Exchange | None,
    kk: int,
    kind: int,
    mech: OutputMechanism | None,
    suffix: str,
    explore: float = 0.0,
    rng: np.random.Generator | None = None,
) -> list[dict[str, Any]]:
    """Greedy episodes of every run on every test map at once; SuccRate, AvgRwd per run.

    ``explore`` > 0: epsilon-greedy instead (random joint action with probability ``explore``,
    drawn from ``rng``)."""
    torch = _torch()
    nt = len(test)
    env = VectorGridWorld(
        maps, np.tile(test, kk), hist_len=cfg.hist_len, meeting_rule=cfg.meeting_rule
    )
    sa, sb = env.reset()
    ret = np.zeros(kk * nt)
    met_all = np.zeros(kk * nt, dtype=bool)
    steps = np.zeros(kk * nt, dtype=np.int64)
    if ex is not None:
        # each step releases one row per map (finished maps included: charged, the safe side)
        ev = mech.exchange_event(nt)
        ex.acc.add(
            [
                (ex.ids(t, a, suffix), ev)
                for _ in range(cfg.episode_limit)
                for t in ex.trials
                for a in ("alpha", "beta")
            ]
        )
        ex.step = -1

    dev = next(iter(nets.values())).device

    def shape(x: np.ndarray) -> Any:
        return torch.as_tensor(x.reshape(kk, nt, *x.shape[1:]), device=dev)

    for _t in range(cfg.episode_limit):
        if env.done.all():
            break
        with torch.inference_mode():
            if method == "dqn-alpha":
                q = nets["qa"](shape(sa))
            elif method == "dqn-full":
                q = nets["qf"](shape(sa), shape(sb))
            else:
                mi = env.map_index.copy()
                ca = ex.send(
                    "alpha", nets["qa"](shape(sa)), sa, kind, mech=mech, suffix=suffix, map_index=mi
                )
                cb = ex.send(
                    "beta", nets["qb"](shape(sb)), sb, kind, mech=mech, suffix=suffix, map_index=mi
                )
                q = nets["g"](torch.cat([ca, cb], dim=-1))
        qn = q.cpu().numpy().reshape(kk * nt, -1)
        act = qn.argmax(axis=1) if explore == 0 else _eps_greedy(qn, explore, rng)
        r, _done, met, active = env.step(act)
        ret += r
        steps += active
        met_all |= met
        sa, sb = env.observe()
    out = []
    shortest = np.tile(maps.shortest[test], kk)
    for k in range(kk):
        s = slice(k * nt, (k + 1) * nt)
        m, rr = met_all[s], ret[s]
        succ = int(m.sum())
        out.append(
            {
                "episodes": nt,
                "successes": succ,
                "succ_rate": succ / nt,
                "avg_reward": float(rr.mean()),
                "reward_sd": float(rr.std(ddof=1)) if nt > 1 else 0.0,
                "path_ratio": float(np.mean(steps[s][m] / shortest[s][m])) if succ else None,
            }
        )
    return out


# ----------------------------------------------------------------------------------------------
# Runs: every method x every run, one run directory
# ----------------------------------------------------------------------------------------------


def run_fedrl(
    cfg: FedRLConfig,
    *,
    seed: int,
    accountant: Any = None,
    maps: MapSet | None = None,
    record: bool = True,
    progress: bool = False,
    threads: int | None = 1,
    _state: dict[str, Any] | None = None,
    force: bool = False,
    extras: dict[str, Any] | None = None,
    only: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """Train ``cfg.methods`` ``cfg.runs`` times each and evaluate on the test maps.

    Args:
        cfg: the configuration.
        seed: master seed (maps use ``cfg.map_seed``).
        accountant: the ledger's accountant (None: a private in-memory one).
        maps: pre-generated maps (must match ``cfg``); None generates them.
        record: keep the transcript of every release (for the run directory and attacks).
        progress: tqdm bar on stderr.
        threads: torch intra-op threads while training (restored afterwards); None leaves
            torch's setting alone. One thread is fastest on a small, shared machine: the
            networks are small and every run is batched into one matmul already.
        force: run even when the estimated memory or time exceeds this machine's limits
            (:mod:`ldp_audit.limits`; otherwise InvalidParameterError before any work).
        extras: further evaluations of the trained networks (learning curves, epsilon-greedy
            evaluation; see ``_train_runs``); they draw from their own generators, so the
            training and Table 1's numbers are the same with or without them.
        only: ``(method, run)``: train that one run alone (not batched with the others), from
            the same seed sequence it has in the batched order. A run's environment and
            exploration streams are shared by the runs batched with it, so a run trained alone
            gives other numbers than in the batch; ``only`` lets a reproduction make each
            (method, run) an independent task whose result does not depend on where it ran.

    Returns:
        ``{"results": [per method-run dict], "log": _Log, "maps": MapSet, "accountant": acc}``.
    """
    if not _is_int(seed) or seed < 0:
        raise InvalidParameterError(f"seed must be an integer >= 0, got {seed!r}")
    if threads is not None and (not _is_int(threads) or threads < 1):
        raise InvalidParameterError(f"threads must be an integer >= 1 (or None), got {threads!r}")
    from ldp_audit.accountant import Accountant
    from ldp_audit.release import Transcript
    from ldp_audit.training.device import resolve_device

    resolve_device(cfg.device)  # "cuda" without CUDA: refused before any work
    from ldp_audit.training.sizes import check_sizes

    check_sizes("fedrl", cfg, force=force)  # absurd sizes: refused before any allocation
    if maps is None:
        maps = generate_maps(
            cfg.size, cfg.n_maps, density=cfg.density, seed=cfg.map_seed, t_max=cfg.t_max
        )
    elif (maps.size, len(maps), maps.seed, maps.density) != (
        cfg.size,
        cfg.n_maps,
        cfg.map_seed,
        cfg.density,
    ):
        raise InvalidParameterError("maps do not match the config (size, n_maps, seed, density)")
    acc = Accountant(None) if accountant is None else accountant
    log = _Log(q=Transcript("report"), y=Transcript("report"), record=bool(record))
    if _state is not None:  # the caller writes what was released if training is interrupted
        _state["log"] = log
    seqs = np.random.SeedSequence(int(seed)).spawn(cfg.runs * len(METHODS))
    if only is not None:
        if (
            not isinstance(only, tuple)
            or len(only) != 2
            or only[0] not in cfg.methods
            or not _is_int(only[1])
            or not 0 <= only[1] < cfg.runs
        ):
            raise InvalidParameterError(
                f"only must be (method in {cfg.methods}, run in [0, {cfg.runs})), got {only!r}"
            )
    groups = (
        [(m, list(range(cfg.runs))) for m in cfg.methods]
        if only is None
        else [(only[0], [int(only[1])])]
    )
    bar = None
    if progress:
        from tqdm.auto import tqdm

        total = sum(len(g) for _, g in groups) * cfg.train_steps
        bar = tqdm(total=total, desc="fedrl", unit="it")
    results = []
    torch = _torch()
    old_threads = torch.get_num_threads()
    try:
        if threads is not None:
            torch.set_num_threads(int(threads))
        for method, group in groups:  # all runs of a method at once (batched over runs)
            ss = [seqs[run * len(METHODS) + METHODS.index(method)] for run in group]
            results.extend(_train_runs(method, cfg, maps, ss, group, acc, log, bar, extras))
    finally:
        torch.set_num_threads(old_threads)
        if bar is not None:
            bar.close()
    return {"results": results, "log": log, "maps": maps, "accountant": acc}


def _log_arrays(log: _Log) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    tr: dict[str, np.ndarray] = {}
    sec: dict[str, np.ndarray] = {}
    if len(log.q):
        for k, v in log.q.arrays().items():
            tr[f"q_{k}"] = v.astype(np.float32) if k == "report" else v
        sec["q_obs"] = np.concatenate(log.q_obs)
    if len(log.y):
        for k, v in log.y.arrays().items():
            tr[f"y_{k}"] = v.astype(np.float64)[:, 0] if k == "report" else v
        sec["y_reward"] = np.concatenate(log.y_reward)
        sec["y_bump"] = np.concatenate(log.y_bump)
    return tr, sec


def privacy_table(cfg: FedRLConfig, accountant: Any, runs: Sequence[int]) -> list[dict[str, Any]]:
    """Per agent and channel: charges and the accountant's (epsilon, delta), in words if inf."""
    mech, ymech = cfg.output_mechanism(), cfg.target_mechanism()
    channels = (
        ("alpha", "", "alpha's Q outputs (training)", mech),
        ("alpha", ":Y", "alpha's targets Y (training)", ymech),
        ("beta", "", "beta's Q outputs (training)", mech),
        ("alpha", "@fedrl1", "alpha's Q outputs (test, FedRL-1, noisy)", mech),
        ("beta", "@fedrl1", "beta's Q outputs (test, FedRL-1, noisy)", mech),
        ("alpha", "@fedrl2", "alpha's Q outputs (test, FedRL-2, no noise)", None),
        ("beta", "@fedrl2", "beta's Q outputs (test, FedRL-2, no noise)", None),
    )
    spent = accountant.spent_all_detail(delta=cfg.delta, method="best")
    rows = []
    for run in runs:
        for agent, suffix, what, m in channels:
            aid = f"{run}/{agent}{suffix}"
            if aid not in spent:
                continue
            eps, method = spent[aid]
            detail = accountant.spent_detail(aid, delta=cfg.delta, method="best")
            if math.isinf(eps):
                words = (
                    m.why_infinite()
                    if m is not None and m.why_infinite()
                    else "infinite, because the outputs are released without noise"
                )
            else:
                words = f"({eps:.4g}, {cfg.delta:g})-DP over the whole run ({method})"
            rows.append(
                {
                    "run": run,
                    "ledger_agent": aid,
                    "channel": what,
                    "charges": detail.charges,
                    "epsilon": eps,
                    "delta": cfg.delta,
                    "method": method,
                    "per_row_epsilon": (m.epsilon if m is not None else math.inf),
                    "sensitivity": (m.sensitivity if m is not None else math.inf),
                    "in_words": words,
                }
            )
    return rows


def train_fedrl(
    cfg: FedRLConfig,
    out: str | Path,
    *,
    seed: int = 0,
    mode: str = "new",
    progress: bool = False,
    threads: int | None = 1,
    force: bool = False,
) -> dict[str, Any]:
    """Train FedRL and its baselines and write the run directory ``out``.

    Files: config.json, ledger.sqlite (agents ``<run>/alpha``, ``<run>/alpha:Y``,
    ``<run>/beta`` and the test-time ``@fedrl1`` / ``@fedrl2`` channels), transcript.npz
    (``q_*``: every released Q-output row with trial, sender 0=alpha 1=beta, kind 0=act
    1=minibatch 2=beta's target outputs 3=FedRL-1 test 4=FedRL-2 test, step, map_index;
    ``y_*``: every released Y), secrets.npz (``q_obs`` (N, 25): the sender's current window,
    alpha's 3x3 in the centre and 255 elsewhere; ``y_reward``, ``y_bump``), metrics.json,
    privacy.json, model.npz, manifest.json.

    Returns:
        The metrics dict (also in metrics.json).
    """
    from ldp_audit.accountant import Accountant
    from ldp_audit.rundir import RunWriter

    if not isinstance(cfg, FedRLConfig):
        raise InvalidParameterError(f"cfg must be a FedRLConfig, got {type(cfg).__name__}")
    if not _is_int(seed) or seed < 0:
        raise InvalidParameterError(f"seed must be an integer >= 0, got {seed!r}")
    if threads is not None and (not _is_int(threads) or threads < 1):
        raise InvalidParameterError(f"threads must be an integer >= 1 (or None), got {threads!r}")
    if mode == "resume":
        raise InvalidParameterError(
            "mode 'resume' is not supported by fedrl (a run is short): start a new run"
        )
    from ldp_audit.training.device import resolve_device

    device = resolve_device(cfg.device)  # "cuda" without CUDA: refused before any file
    from ldp_audit.training.sizes import check_sizes

    check_sizes("fedrl", cfg, force=force)  # absurd sizes (``force``: see run_fedrl)
    w = RunWriter(
        out,
        algorithm="fedrl",
        config=cfg.to_dict(),
        seed=int(seed),
        mechanism=cfg.output_mechanism().to_config(),
        mode=mode,
        extra={"target_mechanism": cfg.target_mechanism().to_config(), "device": device},
    )
    ledger = w.open_ledger()
    acc = Accountant(ledger, run_id=str(Path(out).name))
    state: dict[str, Any] = {}
    try:
        res = run_fedrl(
            cfg,
            seed=seed,
            accountant=acc,
            progress=progress,
            record=True,
            threads=threads,
            _state=state,
            force=force,
        )
        state.update(res)
        metrics = _metrics(cfg, res["results"])
        metrics["device"] = device
        metrics["privacy"] = privacy_table(cfg, acc, range(cfg.runs))
        tr, sec = _log_arrays(res["log"])
        if tr:
            w.write_npz("transcript.npz", tr)
            w.write_npz("secrets.npz", sec)
        model = {}
        for r in res["results"]:
            for net, sd in r["state"].items():
                for name, arr in sd.items():
                    model[f"{r['method']}/{r['trial']}/{net}/{name}"] = arr
        w.write_npz("model.npz", model)
        w.write_json("metrics.json", metrics)
        w.finish()
        return metrics
    except BaseException:
        try:
            log = state.get("log")
            if log is not None:
                tr, sec = _log_arrays(log)
                if tr:
                    w.write_npz("transcript.npz", tr)
                    w.write_npz("secrets.npz", sec)
            w.finish(status="interrupted")
        except Exception:  # noqa: BLE001 - the original exception matters more
            pass
        raise
    finally:
        acc.close()


def _cp(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    from ldp_audit.stats import clopper_pearson_interval

    lo, hi = clopper_pearson_interval(k, n, 1.0 - conf)
    return float(lo), float(hi)


def _t_interval(x: Sequence[float], conf: float = 0.95) -> tuple[float, float, float]:
    from scipy import stats

    a = np.asarray(x, dtype=float)
    m = float(a.mean())
    if a.size < 2:
        return m, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + conf / 2, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    return m, m - half, m + half


def _metrics(cfg: FedRLConfig, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Table 1 rows: mean over runs with a 95 % t-interval, and the pooled CP interval."""
    table = {}
    for row in TABLE_ROWS:
        per = [r[row] for r in results if row in r]
        if not per:
            continue
        sr = [p["succ_rate"] for p in per]
        ar = [p["avg_reward"] for p in per]
        k = sum(p["successes"] for p in per)
        n = sum(p["episodes"] for p in per)
        m, lo, hi = _t_interval(sr)
        am, alo, ahi = _t_interval(ar)
        clo, chi = _cp(k, n)
        table[row] = {
            "runs": len(per),
            "succ_rate": m,
            "succ_rate_ci": [lo, hi],
            "succ_rate_pooled_cp": [clo, chi],
            "avg_reward": am,
            "avg_reward_ci": [alo, ahi],
            "per_run_succ_rate": sr,
            "per_run_avg_reward": ar,
            "path_ratio": [p["path_ratio"] for p in per],
        }
    out = {
        "algorithm": "fedrl",
        "size": cfg.size,
        "hist_len": cfg.hist_len,
        "table": table,
        "runs": [{k: v for k, v in r.items() if k != "state"} for r in results],
    }
    if any("explore_eval" in r for r in results):
        out["explore"] = _explore_table(results)
    if any("eval_curve" in r for r in results):
        out["curves"] = _curve_table(results)
    return out


def _pooled(evs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Runs' evaluations pooled: mean over runs with a t-interval, pooled Clopper-Pearson."""
    k = sum(e["successes"] for e in evs)
    n = sum(e["episodes"] for e in evs)
    m, lo, hi = _t_interval([e["succ_rate"] for e in evs])
    return {
        "runs": len(evs),
        "succ_rate": m,
        "succ_rate_ci": [lo, hi],
        "successes": k,
        "episodes": n,
        "pooled": k / n,
        "pooled_cp": list(_cp(k, n)),
        "per_run_succ_rate": [e["succ_rate"] for e in evs],
    }


def _explore_table(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Greedy (``"0"``) vs epsilon-greedy evaluation of the same networks, per method."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        for lab, per_eps in r.get("explore_eval", {}).items():
            for eps, ev in per_eps.items():
                out.setdefault(lab, {}).setdefault(eps, []).append(ev)
    return {lab: {eps: _pooled(evs) for eps, evs in d.items()} for lab, d in out.items()}


def _curve_table(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Learning curves pooled over runs, and per method whether each of the last two
    checkpoints' pooled rates lies inside the other's 95 % Clopper-Pearson interval (no change
    detectable at this resolution: "plateau"; not a proof of convergence)."""
    first = next(r["eval_curve"] for r in results if "eval_curve" in r)
    per: dict[str, list[list[dict[str, Any]]]] = {}
    for r in results:
        for lab, pts in r.get("eval_curve", {}).get("methods", {}).items():
            per.setdefault(lab, []).append(pts)
    methods, verdict = {}, {}
    for lab, runs in per.items():
        pts = [_pooled([run[i] for run in runs]) for i in range(len(runs[0]))]
        methods[lab] = pts
        if len(pts) >= 2:
            a, b = pts[-2], pts[-1]
            overlap = (
                a["pooled_cp"][0] <= b["pooled"] <= a["pooled_cp"][1]
                and b["pooled_cp"][0] <= a["pooled"] <= b["pooled_cp"][1]
            )
            verdict[lab] = {
                "plateau": bool(overlap),
                "last_two": [a["pooled"], b["pooled"]],
                "in_words": (
                    f"no change detectable between the last two checkpoints "
                    f"({100 * a['pooled']:.1f} % -> {100 * b['pooled']:.1f} %, each inside the "
                    "other's 95 % interval): plateaued at this resolution"
                    if overlap
                    else f"still changing: {100 * a['pooled']:.1f} % -> {100 * b['pooled']:.1f} % "
                    "between the last two checkpoints (outside each other's 95 % interval): not "
                    "converged"
                ),
            }
    return {
        "iterations": first["iterations"],
        "maps": first["maps"],
        "methods": methods,
        "converged": verdict,
    }


# ----------------------------------------------------------------------------------------------
# Report sections (ldp-audit report RUN)
# ----------------------------------------------------------------------------------------------

PAPER_TABLE1 = {
    "SuccRate": {
        "DQN-alpha": {8: 88.27, 16: 76.20, 32: 71.41},
        "FedRL-1": {8: 92.52, 16: 79.83, 32: 77.88},
        "FedRL-2": {8: 95.06, 16: 84.31, 32: 82.02},
        "DQN-full": {8: 93.69, 16: 83.40, 32: 79.73},
    },
    "AvgRwd": {
        "DQN-alpha": {8: 13.781, 16: 112.084, 32: 285.946},
        "FedRL-1": {8: 18.152, 16: 94.193, 32: 226.583},
        "FedRL-2": {8: 19.101, 16: 84.139, 32: 189.756},
        "DQN-full": {8: 31.286, 16: 38.114, 32: 52.72},
    },
}


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    v = float(v)
    if math.isinf(v):
        return "inf"
    if math.isnan(v):
        return "nan"
    return f"{v:.{nd}g}" if abs(v) >= 1e4 else f"{v:.{nd}f}"


def _curve_png(runs: list[dict[str, Any]]) -> bytes | None:
    try:
        import io

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in runs:
        ys = np.asarray(r["curve_success"], dtype=float)
        xs = (np.arange(len(ys)) + 1) * r["curve_every"]
        ax.plot(xs, ys, label=f"{r['method']} run {r['trial']}", lw=1)
    ax.set_xlabel("training iteration")
    ax.set_ylabel("training-episode success rate")
    ax.legend(fontsize=6)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def report_sections(run_dir: Path, extra: list[Path] | None = None) -> list[dict[str, Any]]:
    """Sections of ``ldp-audit report RUN`` for a FedRL run (TRAINERS.md point 4).

    Sections: the privacy accounting per agent and channel (epsilon in words when infinite),
    Table 1 of this run beside the paper's, learning curves, and, when present, the audit
    (``audit.json``) and the transcript attack (``attack_fedrl.json``).
    """
    from ldp_audit.rundir import read_config, read_json

    run_dir = Path(run_dir)
    if not (run_dir / "metrics.json").is_file():
        raise RunDirectoryError(f"{str(run_dir)!r} has no metrics.json (not a finished fedrl run)")
    cfg_doc = read_config(run_dir)
    cfg = cfg_doc.get("config", {})
    metrics = read_json(run_dir, "metrics.json")
    size = int(cfg.get("size", metrics.get("size", 8)))
    sections: list[dict[str, Any]] = []
    mech = OutputMechanism(
        float(cfg.get("sigma", 0.0)), cfg.get("clip_outputs"), N_ACTIONS, float(cfg["delta"])
    )
    ymech = TargetMechanism(
        float(cfg.get("target_sigma", 0.0)), cfg.get("clip_targets"), float(cfg["delta"])
    )
    priv = metrics.get("privacy", [])
    paras = [
        "Every Q output an agent sends is a release charged to that agent's ledger before the "
        "noise is drawn; an exchange of k rows is charged as k compositions of the per-row "
        "mechanism.",
        (
            f"Q outputs: per row {mech.why_infinite()}."
            if mech.why_infinite()
            else f"Q outputs clipped to [-{mech.bound:g}, {mech.bound:g}] per coordinate: one "
            f"row is a Gaussian mechanism with L2 sensitivity 2 B sqrt(16) = "
            f"{mech.sensitivity:g} and sigma = {mech.sigma:g}, i.e. per row "
            f"({_fmt(mech.epsilon)}, {mech.delta:g})-DP; the accountant composes all rows."
        ),
        (
            "Targets Y (they carry alpha's rewards): unprotected: "
            + (ymech.why_infinite() or "")
            + "; alpha's rewards leave it in the clear, as in the paper."
            if ymech.why_infinite()
            else f"Targets Y clipped to [-{ymech.bound:g}, {ymech.bound:g}] with sigma "
            f"{ymech.sigma:g}: per row ({_fmt(ymech.epsilon)}, {ymech.delta:g})-DP."
        ),
        "The shared MLP is updated from released values only (post-processing), so its "
        "parameters reveal nothing beyond the released rows.",
    ]
    sections.append(
        {
            "id": "fedrl-privacy",
            "title": "FedRL: privacy of what the agents exchange",
            "paragraphs": paras,
            "tables": [
                {
                    "caption": f"Accountant (best of RDP/PLD/PRV) at delta = {cfg['delta']:g}",
                    "header": ["run", "ledger agent", "channel", "charges", "epsilon", "in words"],
                    "rows": [
                        [
                            p["run"],
                            p["ledger_agent"],
                            p["channel"],
                            p["charges"],
                            _fmt(p["epsilon"]),
                            p["in_words"],
                        ]
                        for p in priv
                    ],
                }
            ],
            "figures": {},
            "data": {"privacy": priv, "mechanism": mech.to_config()},
        }
    )
    rows = []
    for name, t in metrics.get("table", {}).items():
        ps = PAPER_TABLE1["SuccRate"].get(name, {}).get(size)
        pr = PAPER_TABLE1["AvgRwd"].get(name, {}).get(size)
        lo, hi = t["succ_rate_ci"]
        rows.append(
            [
                name,
                t["runs"],
                f"{100 * t['succ_rate']:.1f} "
                + ("(1 run)" if lo is None else f"[{100 * lo:.1f}, {100 * hi:.1f}]"),
                "-" if ps is None else f"{ps:.2f}",
                f"{t['avg_reward']:.1f}",
                "-" if pr is None else f"{pr:.3f}",
            ]
        )
    figs = {}
    png = _curve_png(metrics.get("runs", []))
    if png:
        figs["fedrl_curves"] = png
    sections.append(
        {
            "id": "fedrl-table1",
            "title": f"FedRL: Table 1 at {size}x{size} (this run) beside the paper",
            "paragraphs": [
                f"Greedy episodes on {cfg.get('eval_maps')} test maps after "
                f"{cfg.get('train_steps')} training iterations x {cfg.get('n_envs')} maps; "
                "SuccRate with a 95 % t-interval over runs (nan with one run). The paper trained "
                "far longer; see reports/fedrl/README.md for the reproduction."
            ]
            + (
                [
                    "Meeting rule: public-code, the authors' code's distance |dx + dy| (not the "
                    "paper's Manhattan |dx| + |dy|) for meeting, the +50, the shaping term and "
                    "the success check: agents on the same anti-diagonal band count as met, so "
                    "these rates are not comparable with Manhattan ones (a random joint policy "
                    "succeeds far more often under this rule)."
                ]
                if cfg.get("meeting_rule", "manhattan") == "public-code"
                else []
            ),
            "tables": [
                {
                    "caption": "SuccRate (%) and AvgRwd, ours vs paper",
                    "header": ["method", "runs", "SuccRate", "paper", "AvgRwd", "paper"],
                    "rows": rows,
                }
            ],
            "figures": figs,
            "data": {"table": metrics.get("table", {})},
        }
    )
    for name, title in (("audit.json", "audit"), ("attack_fedrl.json", "attack")):
        f = run_dir / name
        if not f.is_file():
            continue
        doc = read_json(run_dir, name)
        if title == "attack":
            doc = doc.get("extra", doc)
            tab_rows = [
                [
                    a["target"],
                    a["n_test"],
                    _fmt(a["accuracy"]),
                    f"[{_fmt(a['accuracy_ci'][0])}, {_fmt(a['accuracy_ci'][1])}]",
                    _fmt(a["chance"]),
                    _fmt(a["ceiling"]),
                ]
                for a in doc.get("results", [])
            ]
            sections.append(
                {
                    "id": "fedrl-attack",
                    "title": "FedRL: attack on the transcript",
                    "paragraphs": [doc.get("summary", "")],
                    "tables": [
                        {
                            "caption": "accuracy with 95 % Clopper-Pearson interval, chance "
                            "(majority class) and the ceiling the per-row (epsilon, delta) allows",
                            "header": [
                                "target",
                                "test rows",
                                "accuracy",
                                "95 % CI",
                                "chance",
                                "ceiling",
                            ],
                            "rows": tab_rows,
                        }
                    ],
                    "figures": {},
                    "data": doc,
                }
            )
        else:
            items = doc if isinstance(doc, list) else [doc]
            sections.append(
                {
                    "id": "fedrl-audit",
                    "title": "FedRL: black-box audit of the output mechanism",
                    "paragraphs": [str(i.get("summary", "")) for i in items if isinstance(i, dict)],
                    "tables": [],
                    "figures": {},
                    "data": {"audit": items},
                }
            )
    return sections
