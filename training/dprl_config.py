"""The configuration of one DP-RL run (:class:`DprlConfig`) and its checks.

Every check happens here, on construction, before any episode: bad input raises
``InvalidParameterError`` naming the parameter and the value. :mod:`ldp_audit.training.dprl`
trains a config; this module has no torch import.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError

__all__ = ["MAX_SCALE", "DprlConfig", "check_int", "check_real"]


def check_real(v: Any, name: str, *, lo: float | None = None, lo_open: bool = False,
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
MAX_SCALE = 1e6


def check_int(v: Any, name: str, *, minimum: int) -> int:
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
        check_real(nm, "noise_multiplier", lo=0.0, hi=MAX_SCALE)
        check_real(self.clip, "clip", lo=0.0, lo_open=True, hi=MAX_SCALE)
        check_real(self.delta, "delta", lo=0.0, lo_open=True, hi=1.0, hi_open=True)
        if self.budget_epsilon is not None:
            check_real(self.budget_epsilon, "budget_epsilon", lo=0.0, lo_open=True)
            if self.privacy != "dpsgd":
                raise InvalidParameterError(
                    f"budget_epsilon is a central DP-SGD budget: it needs privacy 'dpsgd', got "
                    f"privacy {self.privacy!r}"
                )
        check_int(self.canaries, "canaries", minimum=0)
        if self.canaries and self.privacy != "dpsgd":
            raise InvalidParameterError(
                f"canaries audit DP-SGD training: they need privacy 'dpsgd', got privacy "
                f"{self.privacy!r}"
            )
        if self.canaries == 1:
            raise InvalidParameterError("canaries must be 0 or >= 2, got 1")
        check_real(self.canary_scale, "canary_scale", lo=1.0)
        check_int(self.canary_seed, "canary_seed", minimum=0)
        if self.state_box is not None:
            if self.privacy != "obs-noise":
                raise InvalidParameterError(
                    f"state_box clips observations before the noise: it needs privacy "
                    f"'obs-noise', got privacy {self.privacy!r}"
                )
            from ldp_audit.training.obs_noise import CARTPOLE_IQR, check_box

            b = check_box(self.state_box, np.asarray(CARTPOLE_IQR))
            object.__setattr__(self, "state_box", tuple((float(a), float(c)) for a, c in b))
        check_int(self.hidden, "hidden", minimum=1)
        if self.lr is not None:
            check_real(self.lr, "lr", lo=0.0, lo_open=True)
        check_real(self.gamma, "gamma", lo=0.0, lo_open=True, hi=1.0)
        if self.store_updates is not None and not isinstance(self.store_updates, bool):
            raise InvalidParameterError(
                f"store_updates must be True, False or None, got {self.store_updates!r}"
            )
        if self.per_sample not in ("auto", "materialize", "ghost"):
            raise InvalidParameterError(
                f"per_sample must be 'auto', 'materialize' or 'ghost', got {self.per_sample!r}"
            )
        check_int(self.episodes, "episodes", minimum=1)
        check_real(self.dropout, "dropout", lo=0.0, hi=1.0, hi_open=True)
        if self.num_envs is not None:
            check_int(self.num_envs, "num_envs", minimum=1)
        check_int(self.total_steps, "total_steps", minimum=1)
        check_int(self.buffer_size, "buffer_size", minimum=1)
        check_int(self.batch_size, "batch_size", minimum=1)
        if self.batch_size > self.buffer_size:
            raise InvalidParameterError(
                f"batch_size must be <= buffer_size ({self.buffer_size}), got {self.batch_size}"
            )
        check_int(self.learning_starts, "learning_starts", minimum=1)
        if self.algo == "dqn" and self.learning_starts > self.buffer_size:
            raise InvalidParameterError(
                f"learning_starts must be <= buffer_size ({self.buffer_size}), got "
                f"{self.learning_starts}"
            )
        check_int(self.train_frequency, "train_frequency", minimum=1)
        check_int(self.target_frequency, "target_frequency", minimum=1)
        check_real(self.start_e, "start_e", lo=0.0, hi=1.0)
        check_real(self.end_e, "end_e", lo=0.0, hi=1.0)
        check_real(self.exploration_fraction, "exploration_fraction", lo=0.0, lo_open=True, hi=1.0)
        check_int(self.eval_episodes, "eval_episodes", minimum=0)
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
