"""Differentially private single-agent deep RL on CartPole-v1 (Doulazmi & Odonnat slides).

Two algorithms, each readable top to bottom (CleanRL style): ``train_reinforce`` and
``train_dqn`` (in ``ldp_audit.training.dprl_algos``, importable from here); three privacy modes:

* ``"none"``: the non-private baselines (epsilon = inf);
* ``"dpsgd"``: central DP by DP-SGD. **Opacus** computes the per-sample gradients
  (``GradSampleModule``), clips each to L2 norm ``clip`` over the *whole* parameter vector and
  adds ``N(0, (noise_multiplier * clip)^2)`` per coordinate (``DPOptimizer``, noise from a seeded
  ``torch.Generator``). Every update is charged to the ledger (agent ``"model"``,
  ``scope="central"``) through :func:`ldp_audit.release.release_with` *before* the noise is drawn;
  what crossed the boundary (the noisy mean gradient) is sealed and recorded.

  - REINFORCE: the privacy unit is an **episode**. A Gymnasium vector env plays
    ``num_envs`` episodes at once; each episode's whole gradient is one per-sample gradient. Every
    episode is used in exactly one update and every update uses all fresh episodes (no
    subsampling), so each update is charged ``GaussianEvent(noise_multiplier)``; the composition
    over all ``T`` updates bounds any unit contributing at most one clipped gradient per update
    (an episode, and also a canary replayed in every update).
  - DQN: the privacy unit is a **transition**. Each update takes a *Poisson* sample of the replay
    buffer: every stored transition is included independently with the fixed rate
    ``q = batch_size / buffer_size`` (expected batch ``batch_size`` once the buffer is full). So
    every update is exactly a Poisson-sampled Gaussian at rate ``q`` for every transition present,
    and is charged ``PoissonSampledEvent(q, GaussianEvent(noise_multiplier))``. A transition stays
    in the buffer for many updates; conservatively we compose over *all* ``T`` updates of the run
    (it cannot be present for more), never fewer.

* ``"obs-noise"``: "LDP" by Gaussian observation noise (:mod:`ldp_audit.training.obs_noise`):
  every observation is released through :func:`ldp_audit.release.release` (charged first, one
  ledger row per observation, agent = the episode); epsilon is inf on raw states and finite with
  a declared state box.

One-run audit (Steinke, Nasr & Jagielski 2023): with ``canaries = m > 0`` the trainer plants ``m``
gradient canaries. The public design (config): canary ``i`` is the gradient
``canary_scale * clip * u_i`` with orthonormal directions ``u_i`` drawn from ``canary_seed``
(:func:`canary_directions`). The secret (secrets.npz): each canary is included with probability
1/2. An included canary is one more per-sample gradient in every update (REINFORCE) or in a
Poisson sample of the updates at rate ``q`` (DQN), clipped like every other sample.
:mod:`ldp_audit.attacks.one_run` scores the canaries from the released updates (white-box) or the
final model (black-box).

Randomness: one ``numpy.random.Generator`` and ``torch.Generator`` seeded from the run seed; no
global seeding. Bad input raises ``InvalidParameterError`` in :class:`DprlConfig` before any
episode runs.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import BudgetExceeded, InvalidParameterError, RunDirectoryError

__all__ = [
    "ALGORITHM",
    "DQN_PRESETS",
    "DQN_SOLVES",
    "DprlConfig",
    "DprlResult",
    "TrainerHooks",
    "canary_directions",
    "convergence_episode",
    "train",
    "greedy_evaluate",
]

ALGORITHM = "dprl"
#: DQN settings measured to solve CartPole-v1 (greedy mean of 25 episodes >= 475) at 100,000
#: environment steps: the DprlConfig defaults (CleanRL's DQN: buffer 10,000, batch 128, target
#: every 500 steps, epsilon 1 -> 0.05, gamma 0.99; our lr 1e-3, learning_starts 1,000,
#: train_frequency 4, hidden 128 x 128) with exploration over the first 20 % of the steps
#: instead of 50 %, then 25 greedy evaluation episodes. docs/dprl.md "Measured" has the runs.
DQN_SOLVES: dict[str, Any] = {"total_steps": 100_000, "exploration_fraction": 0.2,
                              "eval_episodes": 25}  # fmt: skip
#: Named DQN presets of ``reproduce dprl --dqn-preset`` (``legacy``: the DprlConfig defaults).
DQN_PRESETS: dict[str, dict[str, Any]] = {"legacy": {}, "solves": DQN_SOLVES}

#: CartPole-v1 is solved when the mean return over this many consecutive episodes is >= 475.
SOLVED_WINDOW = 25
SOLVED_RETURN = 475.0
MAX_EPISODE_STEPS = 500


# ------------------------------------------------------------------------------------------------
# Configuration (every check happens here, before any episode)
# ------------------------------------------------------------------------------------------------


def _real(v: Any, name: str, *, lo: float | None = None, lo_open: bool = False,
          hi: float | None = None, hi_open: bool = False) -> float:  # fmt: skip
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise InvalidParameterError(f"{name} must be a real number, got {v!r}")
    f = float(v)
    if math.isnan(f) or math.isinf(f):
        raise InvalidParameterError(f"{name} must be finite, got {v!r}")
    if lo is not None and (f <= lo if lo_open else f < lo):
        raise InvalidParameterError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, got {v!r}")
    if hi is not None and (f >= hi if hi_open else f > hi):
        raise InvalidParameterError(f"{name} must be {'<' if hi_open else '<='} {hi:g}, got {v!r}")
    return f


#: largest noise_multiplier and clip accepted (noise std up to 1e12 keeps float32 finite)
_MAX_SCALE = 1e6


def _int(v: Any, name: str, *, minimum: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {v!r}")
    return int(v)


@dataclass(frozen=True)
class DprlConfig:
    """One DP-RL run. Validated on construction (errors name the parameter and the value).

    Attributes (common):
        algo: "reinforce" or "dqn".
        privacy: "none", "dpsgd" or "obs-noise".
        noise_multiplier: DP-SGD noise std / clip, or the observation-noise sigma (>= 0).
        clip: DP-SGD per-sample L2 clip norm C (> 0).
        delta: the delta at which epsilon is reported (0 < delta < 1).
        budget_epsilon: optional central budget (DP-SGD): training stops cleanly once the next
            update would exceed it (checked by the ledger at ``delta``, RDP).
        canaries: gradient canaries planted for the one-run audit (DP-SGD only).
        canary_scale: a canary's raw gradient norm in units of ``clip`` (>= 1: clipping matters).
        canary_seed: public seed of the canary directions.
        state_box: obs-noise only: declared box ((lo, hi) x 4) the states are clipped to.
        hidden, lr, gamma: network width, Adam learning rate, discount.
        store_updates: keep every released noisy update in transcript.npz (default: REINFORCE
            yes, DQN no: the canary projections are always kept).
        per_sample: how DP-SGD gets the clipped sum of per-sample gradients: "materialize"
            (Opacus ``GradSampleModule``: every per-sample gradient, then ``DPOptimizer``
            clips), "ghost" (Opacus ghost clipping, ``GradSampleModuleFastGradientClipping``:
            per-sample norms without per-sample gradients, then a second backward of the
            clip-weighted loss) or "auto" (ghost for DQN, materialize for REINFORCE, whose
            per-episode sequences make ghost norms cost T^2 per episode; benchmarks/bench_dprl.py).
            Both clip the whole per-sample gradient to ``clip``.
        device: torch device of the network and its batches, ``"cpu"``, ``"cuda"`` or
            ``"auto"`` (:mod:`ldp_audit.training.device`). Every random draw (initialisation,
            dropout masks, actions, canary sampling, the DP-SGD noise) stays on the CPU
            generator and is moved, so a CPU run is bit for bit what it was before the option.
        eval_episodes: greedy evaluation episodes of the final network after training (DQN:
            argmax Q; REINFORCE: argmax of the policy, dropout off), on CartPole-v1 seeded from
            ``SeedSequence([seed, 1])``; 0 (default) skips it. Post-processing of the released
            model: no privacy cost, and the training's draws are unchanged.

    REINFORCE: episodes (total), num_envs (episodes per update), dropout.
    DQN: total_steps, num_envs, buffer_size, batch_size (expected Poisson batch), learning_starts,
    train_frequency (vector steps per update), target_frequency (env steps), start_e, end_e,
    exploration_fraction.
    """

    algo: str = "reinforce"
    privacy: str = "dpsgd"
    noise_multiplier: float = 1.0
    clip: float = 1.0
    delta: float = 1e-5
    budget_epsilon: float | None = None
    canaries: int = 0
    canary_scale: float = 10.0
    canary_seed: int = 20230101
    state_box: tuple[tuple[float, float], ...] | None = None
    hidden: int = 128
    lr: float | None = None
    gamma: float = 0.99
    store_updates: bool | None = None
    per_sample: str = "auto"
    # REINFORCE
    episodes: int = 800
    dropout: float = 0.5
    # DQN (and num_envs for both)
    num_envs: int | None = None
    total_steps: int = 30_000
    buffer_size: int = 10_000
    batch_size: int = 128
    learning_starts: int = 1_000
    train_frequency: int = 4
    target_frequency: int = 500
    start_e: float = 1.0
    end_e: float = 0.05
    exploration_fraction: float = 0.5
    device: str = "cpu"
    # evaluation (after training; consumes none of the training's random draws)
    eval_episodes: int = 0

    def __post_init__(self) -> None:
        if self.algo not in ("reinforce", "dqn"):
            raise InvalidParameterError(f"algo must be 'reinforce' or 'dqn', got {self.algo!r}")
        if self.privacy not in ("none", "dpsgd", "obs-noise"):
            raise InvalidParameterError(
                f"privacy must be 'none', 'dpsgd' or 'obs-noise', got {self.privacy!r}"
            )
        nm = self.noise_multiplier
        if isinstance(nm, bool) or not isinstance(nm, numbers.Real) or math.isnan(float(nm)):
            raise InvalidParameterError(f"noise_multiplier must be a real number, got {nm!r}")
        # the noise is added to float32 weights / observations: far larger values overflow them
        _real(nm, "noise_multiplier", lo=0.0, hi=_MAX_SCALE)
        _real(self.clip, "clip", lo=0.0, lo_open=True, hi=_MAX_SCALE)
        _real(self.delta, "delta", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        if self.budget_epsilon is not None:
            _real(self.budget_epsilon, "budget_epsilon", lo=0.0, lo_open=True)
            if self.privacy != "dpsgd":
                raise InvalidParameterError(
                    f"budget_epsilon is a central DP-SGD budget: it needs privacy 'dpsgd', got "
                    f"privacy {self.privacy!r}"
                )
        _int(self.canaries, "canaries", minimum=0)
        if self.canaries and self.privacy != "dpsgd":
            raise InvalidParameterError(
                f"canaries audit DP-SGD training: they need privacy 'dpsgd', got privacy "
                f"{self.privacy!r}"
            )
        if self.canaries == 1:
            raise InvalidParameterError("canaries must be 0 or >= 2, got 1")
        _real(self.canary_scale, "canary_scale", lo=1.0)
        _int(self.canary_seed, "canary_seed", minimum=0)
        if self.state_box is not None:
            if self.privacy != "obs-noise":
                raise InvalidParameterError(
                    f"state_box clips observations before the noise: it needs privacy "
                    f"'obs-noise', got privacy {self.privacy!r}"
                )
            from ldp_audit.training.obs_noise import CARTPOLE_IQR, check_box

            b = check_box(self.state_box, np.asarray(CARTPOLE_IQR))
            object.__setattr__(self, "state_box", tuple((float(a), float(c)) for a, c in b))
        _int(self.hidden, "hidden", minimum=1)
        if self.lr is not None:
            _real(self.lr, "lr", lo=0.0, lo_open=True)
        _real(self.gamma, "gamma", lo=0.0, lo_open=True, hi=1.0)
        if self.store_updates is not None and not isinstance(self.store_updates, bool):
            raise InvalidParameterError(
                f"store_updates must be True, False or None, got {self.store_updates!r}"
            )
        if self.per_sample not in ("auto", "materialize", "ghost"):
            raise InvalidParameterError(
                f"per_sample must be 'auto', 'materialize' or 'ghost', got {self.per_sample!r}"
            )
        _int(self.episodes, "episodes", minimum=1)
        _real(self.dropout, "dropout", lo=0.0, hi=1.0, hi_open=True)
        if self.num_envs is not None:
            _int(self.num_envs, "num_envs", minimum=1)
        _int(self.total_steps, "total_steps", minimum=1)
        _int(self.buffer_size, "buffer_size", minimum=1)
        _int(self.batch_size, "batch_size", minimum=1)
        if self.batch_size > self.buffer_size:
            raise InvalidParameterError(
                f"batch_size must be <= buffer_size ({self.buffer_size}), got {self.batch_size}"
            )
        _int(self.learning_starts, "learning_starts", minimum=1)
        if self.algo == "dqn" and self.learning_starts > self.buffer_size:
            raise InvalidParameterError(
                f"learning_starts must be <= buffer_size ({self.buffer_size}), got "
                f"{self.learning_starts}"
            )
        _int(self.train_frequency, "train_frequency", minimum=1)
        _int(self.target_frequency, "target_frequency", minimum=1)
        _real(self.start_e, "start_e", lo=0.0, hi=1.0)
        _real(self.end_e, "end_e", lo=0.0, hi=1.0)
        _real(self.exploration_fraction, "exploration_fraction", lo=0.0, lo_open=True, hi=1.0)
        _int(self.eval_episodes, "eval_episodes", minimum=0)
        from ldp_audit.training.device import check_device

        check_device(self.device)
        if self.canaries > self.n_params:
            raise InvalidParameterError(
                f"canaries must be <= the number of model parameters ({self.n_params}: the "
                f"canary directions are orthonormal), got {self.canaries}"
            )

    # --- derived quantities ---
    @property
    def envs(self) -> int:
        """Parallel environments (REINFORCE: episodes per update)."""
        if self.num_envs is not None:
            return int(self.num_envs)
        return 8 if self.algo == "reinforce" else 1

    @property
    def learning_rate(self) -> float:
        if self.lr is not None:
            return float(self.lr)
        return 1e-2 if self.algo == "reinforce" else 1e-3

    @property
    def sample_rate(self) -> float:
        """Per-update inclusion probability of one unit (REINFORCE 1; DQN Poisson rate q)."""
        return 1.0 if self.algo == "reinforce" else self.batch_size / self.buffer_size

    @property
    def layer_sizes(self) -> list[int]:
        h = self.hidden
        return [4, h, 2] if self.algo == "reinforce" else [4, h, h, 2]

    @property
    def n_params(self) -> int:
        s = self.layer_sizes
        return sum(a * b + b for a, b in zip(s[:-1], s[1:], strict=False))

    @property
    def n_updates(self) -> int:
        """Upper bound on the number of updates (the number of compositions charged)."""
        if self.algo == "reinforce":
            return -(-self.episodes // self.envs)
        vec_steps = -(-self.total_steps // self.envs)
        first = -(-self.learning_starts // self.envs)
        return 0 if vec_steps <= first else (vec_steps - 1 - first) // self.train_frequency + 1

    @property
    def ghost(self) -> bool:
        """Whether DP-SGD uses Opacus ghost clipping (see ``per_sample``)."""
        if self.per_sample == "auto":
            return self.algo == "dqn"
        return self.per_sample == "ghost"

    @property
    def keep_updates(self) -> bool:
        if self.store_updates is not None:
            return self.store_updates
        return self.algo == "reinforce"

    def update_event(self, sample_rate: float | None = None) -> Any:
        """The ledger event of ONE DP-SGD update."""
        from ldp_audit.accountant import GaussianEvent, NonPrivateEvent, PoissonSampledEvent

        if self.noise_multiplier == 0:
            return NonPrivateEvent()
        g = GaussianEvent(float(self.noise_multiplier))
        q = self.sample_rate if sample_rate is None else sample_rate
        return g if q >= 1.0 else PoissonSampledEvent(q, g)

    def obs_mechanism(self) -> Any:
        from ldp_audit.training.obs_noise import ObservationNoiseMechanism

        return ObservationNoiseMechanism(
            noise_multiplier=float(self.noise_multiplier),
            box=self.state_box,
            target_delta=self.delta,
        )

    def mechanism_config(self) -> dict[str, Any]:
        if self.privacy == "obs-noise":
            return self.obs_mechanism().to_config()
        if self.privacy == "dpsgd":
            return {
                "name": "dp-sgd",
                "noise_multiplier": float(self.noise_multiplier),
                "clip": float(self.clip),
                "sample_rate": self.sample_rate,
                "delta": float(self.delta),
                "privacy_unit": "episode" if self.algo == "reinforce" else "transition",
            }
        return {"name": "none"}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["state_box"] is not None:
            d["state_box"] = [list(b) for b in d["state_box"]]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DprlConfig:
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if kw.get("state_box") is not None:
            kw["state_box"] = tuple(tuple(b) for b in kw["state_box"])
        return cls(**kw)


@dataclass
class TrainerHooks:
    """Test-only seams for the broken-trainer fixtures (tests/broken_dprl.py).

    Attributes:
        optimizer_class: a ``DPOptimizer`` subclass used instead of Opacus's own (forces the
            materialised per-sample path: the fixtures rewrite its clipping).
        charged_sample_rate: maps the true sample rate to the one charged to the ledger.
        inspect_ghost: called on every ghost-clipped DQN update, after the clipped sum is in
            ``p.grad`` and before canaries and noise, as ``f(net, inputs, per_sample_norms,
            clipped_sum)`` (tests recompute the per-sample gradients independently).
    """

    optimizer_class: Any = None
    charged_sample_rate: Callable[[float], float] | None = None
    inspect_ghost: Callable[..., None] | None = None


@dataclass
class DprlResult:
    """What a run produced (also written to the run directory)."""

    config: DprlConfig
    seed: int
    returns: list[float]
    updates: int
    env_steps: int
    seconds: float
    privacy: dict[str, Any]
    stopped: str | None = None
    params: np.ndarray | None = None
    initial: np.ndarray | None = None
    transcript: dict[str, np.ndarray] = field(default_factory=dict)
    secrets: dict[str, np.ndarray] = field(default_factory=dict)
    device: str = "cpu"
    eval_returns: list[float] = field(default_factory=list)

    @property
    def convergence_episode(self) -> float:
        return convergence_episode(self.returns)


def convergence_episode(returns: Any) -> float:
    """1-based episode at which the mean of the last 25 returns first reaches 475; inf if never."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size < SOLVED_WINDOW:
        return math.inf
    c = np.concatenate([[0.0], np.cumsum(r)])
    mu = (c[SOLVED_WINDOW:] - c[:-SOLVED_WINDOW]) / SOLVED_WINDOW
    hit = np.flatnonzero(mu >= SOLVED_RETURN)
    return float(hit[0] + SOLVED_WINDOW) if hit.size else math.inf


# ------------------------------------------------------------------------------------------------
# Networks (initialised from the run's torch.Generator: no global RNG)
# ------------------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _quiet_hooks() -> None:
    """Opacus's full backward hooks warn when inputs need no grad (ours never do): silence it."""
    import warnings

    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")


def _make_dropout(p: float, gen: Any) -> Any:
    import torch
    from torch import nn

    class GenDropout(nn.Module):
        """Dropout whose masks come from the run's generator (nn.Dropout uses the global RNG).

        The masks drawn while acting are recorded (``record``) and replayed (``replay``) in the
        training forward, so the gradient is that of the very policy that acted (dropout is
        part of the stochastic policy, as in the slides' REINFORCE).
        """

        def __init__(self) -> None:
            super().__init__()
            self.p = p
            self.gen = gen
            self.record: list[torch.Tensor] | None = None
            self.replay: torch.Tensor | None = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.training or self.p == 0:
                return x
            if self.replay is not None:
                keep = self.replay
            else:
                keep = torch.rand(x.shape, generator=self.gen, dtype=x.dtype) >= self.p
                keep = keep.to(x.device)  # drawn on the CPU generator (no-op on the CPU)
                if self.record is not None:
                    self.record.append(keep)
            return x * keep / (1.0 - self.p)

    return GenDropout()


def make_network(cfg: DprlConfig, gen: Any) -> Any:
    """REINFORCE: 4-h-2 MLP with dropout; DQN: 4-h-h-2 MLP. Init as nn.Linear, from ``gen``."""
    import torch
    from torch import nn

    s = cfg.layer_sizes
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(s[:-1], s[1:], strict=False)):
        lin = nn.Linear(a, b)
        bound = 1.0 / math.sqrt(a)
        with torch.no_grad():
            lin.weight.uniform_(-bound, bound, generator=gen)
            lin.bias.uniform_(-bound, bound, generator=gen)
        layers.append(lin)
        if i < len(s) - 2:
            if cfg.algo == "reinforce":
                layers.append(_make_dropout(cfg.dropout, gen))
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def greedy_evaluate(cfg: DprlConfig, params: Any, *, seed: int, episodes: int) -> list[float]:
    """Returns of ``episodes`` greedy episodes of the network ``params`` on CartPole-v1.

    DQN acts by argmax Q, REINFORCE by the argmax of its policy (dropout off), on the true
    states. The episodes run side by side in one vector env seeded from
    ``SeedSequence([seed, 1])`` (independent of the training's draws); each env's first episode
    counts. Post-processing of the model: no privacy cost.
    """
    import gymnasium as gym
    import torch

    _int(episodes, "episodes", minimum=1)
    flat = np.asarray(params, dtype=np.float64).reshape(-1)
    if flat.size != cfg.n_params:
        raise InvalidParameterError(
            f"params must hold the config's {cfg.n_params} parameters, got {flat.size}"
        )
    net = make_network(cfg, torch.Generator().manual_seed(0))
    torch.nn.utils.vector_to_parameters(torch.as_tensor(flat, dtype=torch.float32),
                                        net.parameters())  # fmt: skip
    net.eval()
    env_seed = int(np.random.SeedSequence([int(seed), 1]).generate_state(1)[0])
    envs = gym.make_vec("CartPole-v1", num_envs=int(episodes),
                        vectorization_mode="vector_entry_point")  # fmt: skip
    try:
        obs, _ = envs.reset(seed=env_seed)
        alive = np.ones(int(episodes), dtype=bool)
        ret = np.zeros(int(episodes))
        while alive.any():
            with torch.no_grad():
                a = net(torch.as_tensor(obs, dtype=torch.float32)).argmax(dim=1).numpy()
            obs, rew, term, trunc, _ = envs.step(a)
            ret += np.where(alive, rew, 0.0)
            alive &= ~(np.asarray(term) | np.asarray(trunc))
    finally:
        envs.close()
    return [float(r) for r in ret]


def _flat_params(model: Any) -> np.ndarray:
    return np.concatenate(
        [p.detach().cpu().numpy().reshape(-1).astype(np.float64) for p in model.parameters()]
    )


def canary_directions(n_params: int, m: int, seed: int) -> np.ndarray:
    """The public canary design: (n_params, m) orthonormal columns from ``seed`` (QR)."""
    rng = np.random.default_rng(int(seed))
    a = rng.standard_normal((int(n_params), int(m)))
    q, r = np.linalg.qr(a)
    return q * np.sign(np.diag(r))  # a unique, uniformly distributed orthonormal frame


class _Canaries:
    """Gradient canaries: public directions, secret inclusion bits (scoring only)."""

    def __init__(self, cfg: DprlConfig, params: list[Any], rng: np.random.Generator) -> None:
        import torch

        self.m = cfg.canaries
        self.u = canary_directions(cfg.n_params, self.m, cfg.canary_seed)  # public
        self.included = rng.random(self.m) < 0.5  # secret
        self.participations = np.zeros(self.m, dtype=np.int64)
        g = torch.as_tensor(self.u[:, self.included].T * (cfg.canary_scale * cfg.clip))
        rows, off = [], 0
        for p in params:
            n = p.numel()
            rows.append(g[:, off : off + n].reshape((-1, *p.shape)).to(p.dtype).to(p.device))
            off += n
        self.rows = rows  # per parameter: (n_included, *shape)
        self.u32 = torch.as_tensor(self.u, dtype=torch.float32)

    def append_to(self, params: list[Any], sample_rate: float, gen: Any) -> None:
        """Add the included canaries (a Poisson sample at ``sample_rate``) as per-sample rows."""
        import torch

        k = self.rows[0].shape[0]
        if k == 0:
            return
        if sample_rate >= 1.0:
            sel = torch.ones(k, dtype=torch.bool)
        else:
            sel = torch.rand(k, generator=gen) < sample_rate
        idx = np.flatnonzero(self.included)[sel.numpy()]
        self.participations[idx] += 1
        sel = sel.to(self.rows[0].device)  # drawn on the CPU generator (no-op on the CPU)
        for p, r in zip(params, self.rows, strict=True):
            p.grad_sample = torch.cat([p.grad_sample, r[sel]], dim=0)


def _add_canaries_to_grad(canaries: Any, params: list[Any], sample_rate: float, gen: Any,
                          clip: float) -> None:  # fmt: skip
    """Ghost path: add the included canaries (Poisson sample at ``sample_rate``), each clipped
    with Opacus's factor ``min(1, C / (norm + 1e-6))``, straight into the clipped sum."""
    import torch

    k = canaries.rows[0].shape[0]
    if k == 0:
        return
    if sample_rate >= 1.0:
        sel = torch.ones(k, dtype=torch.bool)
    else:
        sel = torch.rand(k, generator=gen) < sample_rate
    idx = np.flatnonzero(canaries.included)[sel.numpy()]
    canaries.participations[idx] += 1
    if not sel.any():
        return
    sel = sel.to(canaries.rows[0].device)  # drawn on the CPU generator (no-op on the CPU)
    n = int(sel.sum())
    norms = sum(r[sel].reshape(n, -1).pow(2).sum(dim=1) for r in canaries.rows).sqrt()
    factor = (clip / (norms + 1e-6)).clamp(max=1.0)
    for p, r in zip(params, canaries.rows, strict=True):
        p.grad = p.grad + torch.einsum("i,i...", factor.to(r.dtype), r[sel])


def _cpu_noise(cls: Any) -> Any:
    """``cls`` (an Opacus DP optimizer) with its noise drawn on the CPU and moved.

    Opacus draws ``torch.normal(..., device=grad.device, generator=gen)``, which a CPU generator
    refuses for a CUDA tensor. Drawing on the CPU from the same generator, in the same order and
    shape, then moving, keeps the noise stream of a GPU run identical to the CPU run's. Used only
    off the CPU (the CPU path is Opacus's own); an optimizer class whose ``add_noise`` is not
    Opacus's (a test fixture) is returned unchanged.
    """
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
    from opacus.optimizers.optimizer import (
        _check_processed_flag,
        _generate_noise,
        _mark_as_processed,
    )

    if cls.add_noise not in (DPOptimizer.add_noise, DPOptimizerFastGradientClipping.add_noise):
        return cls

    def add_noise(self: Any) -> None:
        torch = _torch()
        nm = getattr(self, "_adjusted_noise_multiplier", self.noise_multiplier)
        for p in self.params:
            _check_processed_flag(p.summed_grad)
            ref = torch.empty(p.summed_grad.shape, dtype=p.summed_grad.dtype)  # on the CPU
            noise = _generate_noise(
                std=nm * self.max_grad_norm,
                reference=ref,
                generator=self.generator,
                secure_mode=self.secure_mode,
            )
            p.grad = (p.summed_grad + noise.to(p.summed_grad.device)).view_as(p)
            _mark_as_processed(p.summed_grad)

    return type(f"CpuNoise{cls.__name__}", (cls,), {"add_noise": add_noise})


class _DpSgd:
    """One DP-SGD update: Opacus clip + noise, charged first, sealed and recorded."""

    def __init__(self, cfg: DprlConfig, model: Any, base_opt: Any, accountant: Any, gen: Any,
                 hooks: TrainerHooks, canaries: _Canaries | None) -> None:  # fmt: skip
        from opacus.optimizers import DPOptimizer

        from ldp_audit.release import Transcript

        self.cfg = cfg
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.ghost = bool(getattr(model, "_ghost", False))
        if self.ghost:
            from opacus.optimizers import DPOptimizerFastGradientClipping as DPOptimizer
        cls = hooks.optimizer_class or DPOptimizer
        if self.params[0].device.type != "cpu":
            cls = _cpu_noise(cls)
        self.q = cfg.sample_rate
        expected = cfg.envs if cfg.algo == "reinforce" else cfg.batch_size
        self.opt = cls(
            base_opt,
            noise_multiplier=float(cfg.noise_multiplier),
            max_grad_norm=float(cfg.clip),
            expected_batch_size=int(expected),
            loss_reduction="mean",
            generator=gen,
        )
        q_charged = hooks.charged_sample_rate(self.q) if hooks.charged_sample_rate else self.q
        self.event = cfg.update_event(q_charged)
        self.accountant = accountant
        self.gen = gen
        self.canaries = canaries
        self.transcript = Transcript(values_key="update") if cfg.keep_updates else None
        self.proj: list[np.ndarray] = []
        self.norms: list[float] = []
        self.t = 0

    def zero_grad(self) -> None:
        self.opt.zero_grad()

    def step(self) -> None:
        """Per-sample gradients are in ``p.grad_sample``: add canaries, charge, noise, step."""
        from ldp_audit.release import release_with

        if self.canaries is not None:
            if self.ghost:
                _add_canaries_to_grad(self.canaries, self.params, self.q, self.gen,
                                      float(self.cfg.clip))  # fmt: skip
            else:
                self.canaries.append_to(self.params, self.q, self.gen)

        def randomise() -> Any:
            self.opt.step()  # clip each per-sample gradient, sum, add noise, / batch, Adam step
            return _torch().cat([p.grad.reshape(-1) for p in self.params]).reshape(1, -1)

        rel = release_with(
            randomise,
            accountant=self.accountant,
            charges=[("model", self.event)],
            epsilon=math.inf,  # per-update epsilon is not meaningful alone; see the ledger
            delta=float(self.cfg.delta),
            meta={"update_index": np.array([self.t])},
            scope="central",
        )
        v = rel.values  # the sealed noisy mean gradient (what crossed the boundary)
        self.norms.append(float(np.linalg.norm(v)))
        if self.canaries is not None:
            self.proj.append((v.astype(np.float64) @ self.canaries.u).reshape(-1))
        if self.transcript is not None:
            self.transcript.append(rel)
        self.opt.zero_grad()
        self.t += 1

    def arrays(self) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {"update_norm": np.asarray(self.norms, dtype=np.float64)}
        if self.transcript is not None and len(self.transcript):
            out.update(self.transcript.arrays())
        else:
            out["update_index"] = np.arange(self.t, dtype=np.int64)
        if self.canaries is not None:
            out["canary_projection"] = (
                np.stack(self.proj) if self.proj else np.zeros((0, self.canaries.m))
            )
        return out


class _ObsRelease:
    """Every observation the agent sees goes through ldp_audit.release (charged first)."""

    def __init__(self, cfg: DprlConfig, accountant: Any, rng: np.random.Generator) -> None:
        from ldp_audit.release import Transcript

        self.mech = cfg.obs_mechanism()
        self.event = self.mech.event()
        self.accountant = accountant
        self.rng = rng
        self.transcript = Transcript(values_key="observation")

    def __call__(self, obs: np.ndarray, episodes: np.ndarray, steps: np.ndarray) -> np.ndarray:
        from ldp_audit.release import release

        if len(episodes) == 0:
            return np.zeros((0, obs.shape[1]))
        rel = release(
            np.asarray(obs, dtype=np.float64),
            mechanism=self.mech,
            accountant=self.accountant,
            agent_ids=[f"ep{int(e)}" for e in episodes],
            rng=self.rng,
            event=self.event,
            meta={"episode": episodes.astype(np.int64), "step": steps.astype(np.int64)},
            scope="local",
        )
        self.transcript.append(rel)
        return rel.values


# ------------------------------------------------------------------------------------------------
# Results, privacy, run directory
# ------------------------------------------------------------------------------------------------


def _result(cfg, seed, returns, dp, obs_release, canaries, net, initial, env_steps, t0, stopped):  # noqa: ANN001
    transcript: dict[str, np.ndarray] = {}
    secrets: dict[str, np.ndarray] = {}
    if dp is not None:
        transcript.update(dp.arrays())
    if obs_release is not None and len(obs_release.transcript):
        transcript.update(obs_release.transcript.arrays())
    if canaries is not None:
        secrets["canary_included"] = canaries.included.copy()
        secrets["canary_participations"] = canaries.participations.copy()
    return DprlResult(
        config=cfg,
        seed=int(seed),
        returns=[float(r) for r in returns],
        updates=dp.t if dp is not None else 0,
        env_steps=int(env_steps),
        seconds=time.perf_counter() - t0,
        privacy={},
        stopped=stopped,
        params=_flat_params(net),
        initial=initial,
        transcript=transcript,
        secrets=secrets,
        device=str(next(net.parameters()).device.type),
    )


def privacy_summary(cfg: DprlConfig, accountant: Any, result: DprlResult | None = None) -> dict:
    """The run's guarantee from the ledger, with the privacy unit and a sentence in words."""
    from ldp_audit.accountant import compose

    out: dict[str, Any] = {"privacy": cfg.privacy, "delta": float(cfg.delta)}
    if cfg.privacy == "none":
        out.update(epsilon=math.inf, unit=None, words="non-private baseline: epsilon = inf")
        return out
    if cfg.privacy == "dpsgd":
        unit = "episode" if cfg.algo == "reinforce" else "transition"
        n = None
        # the ledger's "best": RDP, PRV and PLD (a coarse PLD where PLD's planner refuses:
        # at sigma <= 0.1 it is 10-60x tighter than RDP for well under a second; docs/dprl.md)
        det = accountant.spent_detail("model", delta=cfg.delta, method="best")
        by: dict[str, Any] = {m: float(v) for m, v in det.by_method.items()}
        for m, why in det.skipped.items():
            by[m] = f"unavailable: {why}"
        eps = float(det.epsilon)
        out.update(
            epsilon=eps,
            by_method=by,
            unit=unit,
            updates=result.updates if result is not None else n,
            sample_rate=cfg.sample_rate,
            noise_multiplier=float(cfg.noise_multiplier),
            clip=float(cfg.clip),
            method=det.method,
            words=(
                f"central DP-SGD, privacy unit = one {unit}: ({_fmt(eps)}, {cfg.delta:g})-DP "
                f"over {result.updates if result is not None else '?'} updates (ledger: "
                + ", ".join(f"{k} {_fmt(v) if isinstance(v, float) else v}" for k, v in by.items())
                + ")"
            ),
        )
        return out
    mech = cfg.obs_mechanism()
    per_obs = mech.epsilon
    ep_len = int(max(result.returns)) + 1 if result is not None and result.returns else 501
    if math.isinf(per_obs):
        ep_eps = math.inf
    else:
        ep_eps, _ = compose([(mech.event(), ep_len)], delta=cfg.delta, method="rdp")
    out.update(
        epsilon=ep_eps,
        per_observation_epsilon=per_obs,
        observations_per_episode=ep_len,
        unit="episode (its states)",
        iqr=list(mech.iqr),
        box=None if mech.box is None else [list(b) for b in mech.box],
        words=mech.describe()
        + (
            ""
            if math.isinf(ep_eps)
            else f"; the longest episode's {ep_len} observations compose to ({_fmt(ep_eps)}, "
            f"{cfg.delta:g}) (RDP). Rewards and episode ends are not noised."
        ),
    )
    return out


def _fmt(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.4g}"


def _check_budget_before(cfg: DprlConfig, accountant: Any) -> None:
    """Refuse, before any episode, a budget that cannot pay for even one more update."""
    if cfg.budget_epsilon is None or cfg.privacy != "dpsgd":
        return
    from ldp_audit.accountant import compose

    hist = [(cfg.update_event(), 1)]
    spent_n = len([a for a in accountant.agents(scope="central") if a == "model"])
    if spent_n:
        try:
            cur = accountant.spent("model", delta=cfg.delta, method="rdp")
        except Exception:  # noqa: BLE001
            cur = math.inf
        if cur >= cfg.budget_epsilon:
            raise BudgetExceeded(
                f"budget_epsilon {cfg.budget_epsilon:g} is already spent ({_fmt(cur)} at delta "
                f"{cfg.delta:g}); nothing was trained or charged"
            )
    one, _ = compose(hist, delta=cfg.delta, method="rdp")
    if one > cfg.budget_epsilon:
        raise InvalidParameterError(
            f"budget_epsilon must pay for at least one update ({_fmt(one)} at delta "
            f"{cfg.delta:g}), got {cfg.budget_epsilon!r}"
        )


def train(
    cfg: DprlConfig,
    *,
    seed: int = 0,
    run_dir: str | Path | None = None,
    progress: bool = False,
    run_mode: str = "new",
    hooks: TrainerHooks | None = None,
    ledger: Any = None,
    force: bool = False,
) -> DprlResult:
    """Train one run; with ``run_dir`` write the run directory (docs/dprl.md).

    Args:
        cfg: the configuration (already validated).
        seed: the run seed (every random draw derives from it).
        run_dir: where to write the run (None: nothing written, in-memory ledger).
        progress: a tqdm bar on stderr.
        run_mode: "new", "overwrite" or "resume" (:class:`ldp_audit.rundir.RunWriter`).
        hooks: test-only seams (broken-trainer fixtures).
        ledger: an explicit ledger when ``run_dir`` is None (tests).
        force: run even when the estimated memory or time exceeds this machine's limits
            (:mod:`ldp_audit.limits`; otherwise InvalidParameterError before any work).

    Returns:
        :class:`DprlResult`; ``result.privacy`` holds the accountant's guarantee.
    """
    from ldp_audit.accountant import Accountant, Budget, Ledger
    from ldp_audit.rundir import RunWriter

    if not isinstance(cfg, DprlConfig):
        raise InvalidParameterError(f"cfg must be a DprlConfig, got {type(cfg).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidParameterError(f"seed must be an integer >= 0, got {seed!r}")
    from ldp_audit.training.sizes import check_sizes

    check_sizes("dprl", cfg, force=force)  # absurd sizes: refused before any allocation
    hooks = hooks or TrainerHooks()
    from ldp_audit.training.device import resolve_device

    device = resolve_device(cfg.device)  # "cuda" without CUDA: refused before any file
    if run_dir is not None and run_mode != "resume":  # refused before any file is written
        _check_budget_before(cfg, Accountant(ledger=Ledger(":memory:")))
    writer = None
    if run_dir is not None:
        writer = RunWriter(
            run_dir,
            algorithm=ALGORITHM,
            config=cfg.to_dict(),
            seed=int(seed),
            mechanism=cfg.mechanism_config(),
            mode=run_mode,
            extra={"device": device},
        )
        ledger = writer.open_ledger()
    elif ledger is None:
        ledger = Ledger(":memory:")
    budget = (
        Budget(epsilon=float(cfg.budget_epsilon), delta=float(cfg.delta), method="rdp")
        if cfg.budget_epsilon is not None
        else None
    )
    try:
        accountant = Accountant(ledger=ledger, central_budget=budget, run_id=str(run_dir or ""))
        _check_budget_before(cfg, accountant)
    except BaseException:
        if writer is not None:
            writer.finish(status="failed")
        raise
    from ldp_audit.training.dprl_algos import train_dqn, train_reinforce

    fn = train_reinforce if cfg.algo == "reinforce" else train_dqn
    try:
        res = fn(cfg, seed=int(seed), accountant=accountant, hooks=hooks, progress=progress)
        res.privacy = privacy_summary(cfg, accountant, res)
        if cfg.eval_episodes and res.stopped != "interrupted":
            res.eval_returns = greedy_evaluate(cfg, res.params, seed=int(seed),
                                               episodes=cfg.eval_episodes)  # fmt: skip
    except BaseException:
        if writer is not None:
            writer.finish(status="interrupted")
        raise
    if res.stopped == "interrupted":  # Ctrl-C: what was released so far, then re-raise
        if writer is not None:
            write_run(writer, res, status="interrupted")
        raise KeyboardInterrupt
    if writer is not None:
        write_run(writer, res)
    return res


def write_run(writer: Any, res: DprlResult, *, status: str = "complete") -> Path:
    """transcript.npz, secrets.npz, metrics.json, model.npz, then the manifest."""
    from ldp_audit.rundir import json_number

    cfg = res.config
    if res.transcript:
        writer.write_npz("transcript.npz", res.transcript)
    if res.secrets:
        writer.write_npz("secrets.npz", res.secrets)
    conv = res.convergence_episode
    writer.write_json(
        "metrics.json",
        {
            "returns": res.returns,
            "episodes": len(res.returns),
            "convergence_episode": json_number(conv),
            "solved": bool(math.isfinite(conv)),
            "updates": res.updates,
            "env_steps": res.env_steps,
            "seconds": res.seconds,
            "stopped": res.stopped,
            "privacy": res.privacy,
            "algo": cfg.algo,
            "n_params": cfg.n_params,
            "device": res.device,
            **(
                {"eval_returns": res.eval_returns, "eval_mean": float(np.mean(res.eval_returns))}
                if res.eval_returns
                else {}
            ),
        },
    )
    writer.write_npz("model.npz", {"params": res.params, "initial": res.initial})
    writer.finish(status=status)
    return writer.path


def read_run(run_dir: str | Path) -> dict[str, Any]:
    """config, metrics and model of a dprl run (refuses other algorithms' runs)."""
    import json

    from ldp_audit.rundir import read_config, read_npz

    doc = read_config(run_dir)
    if doc.get("algorithm") != ALGORITHM:
        raise RunDirectoryError(
            f"run_dir {str(run_dir)!r} is a {doc.get('algorithm')!r} run, not a {ALGORITHM!r} run"
        )
    p = Path(run_dir)
    try:
        metrics = json.loads((p / "metrics.json").read_text())
    except (OSError, ValueError) as exc:
        raise RunDirectoryError(f"cannot read {p / 'metrics.json'}: {exc}") from None
    return {
        "doc": doc,
        "config": DprlConfig.from_dict(doc["config"]),
        "metrics": metrics,
        "model": read_npz(p, "model.npz", ("params", "initial")),
    }


# The algorithms live in ldp_audit.training.dprl_algos and the report sections in
# ldp_audit.training.dprl_report; their names stay importable from here, loaded on first use
# (both modules import this one).
_MOVED = {
    "_ghost_backward": "dprl_algos",
    "_num": "dprl_report",
    "report_sections": "dprl_report",
    "train_dqn": "dprl_algos",
    "train_reinforce": "dprl_algos",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(f"ldp_audit.training.{_MOVED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
