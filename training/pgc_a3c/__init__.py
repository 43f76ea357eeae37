"""PGC-A3C: locally private distributed A3C (Ono & Takahashi 2020, Algorithms 1-3), batched.

Read top to bottom: the network (section 4, "Implementation"), the episode loss and its gradient
(eqs. 15-18, written by hand, compiled, and checked against torch autograd), the alpha-greedy
rollout, the agent-side privatisation (Algorithms 2-3 from :mod:`ldp_audit.mechanisms`, charged to
the ledger *before* release), the aggregator (eq. 22), and the lock-step engine that emulates the
9 asynchronous agents deterministically.

Speed comes from running every agent of every trial (and of every config of a grid) in lock-step:
one vectorised CartPole over all rows, one compiled acting pass per step, one compiled backward
over the agents whose episodes ended at that step. There is no per-step Python loop over agents.

Our resolutions of what the paper leaves open (listed in README.md, "PGC-A3C engine"):

- Parameters are packed as theta = [theta_c (16x4, row-major), theta_p (2x16), theta_v (1x16)],
  d = 112, no biases; initialised Glorot-uniform (TensorFlow's default, the paper used TF 1.14).
- Loss sums run over the T_n steps at which an action was taken. The target of eq. 18 is
  V_hat(s_t) = sum_{j=t}^{T-1} gamma^{j-t} r_j + gamma^{T-t} V(s_T), the discount on the bootstrap
  taken from eq. 12 so that A(s_t) = V_hat(s_t) - V(s_t) (eq. 12 and eq. 18 then agree); V(s_T)
  is 0 when the pole fell (a terminal state has value 0, eq. 8) and the network's value when the
  episode was cut at ``episode_steps``. Advantage and target are constants (no gradient).
- Acting: with probability alpha a uniformly random action, else argmax pi (ties -> action 0);
  alpha = max{0, 0.5 - n/1800} with n the trial's submissions so far at that step. One uniform u
  per agent-step decides both: explore iff u < alpha, and then action = 1 iff u >= alpha/2.
  ``acting="sample"`` (an ablation, not the paper as printed) draws the non-exploring action from
  pi with the same uniform.
- Asynchrony: the ``n_agents`` workers of a trial step in lock-step; a worker copies the current
  theta when its episode starts and submits when it ends; reports arriving at the same step are
  applied in worker order; workers restart with the theta after those updates.
- Single-round mode: every episode is a new agent with a fresh gravity psi ~ U{gravities};
  ``rounds=T``: an agent plays T consecutive episodes (same gravity, fresh theta each time) and
  submits each at epsilon/T (section 3.2.1). ``max_submissions`` caps submissions per trial; the
  episodes still running when a trial stops are discarded (never released, never charged).
- ``mechanism="none"`` is the epsilon = inf baseline, the paper's "non-private A3C" (Table 2: it
  "succeeds in all trials"), released without noise (charged as ``NonPrivateEvent``). Our
  resolution: the paper gives it no privacy clip, but plain SGD at eta = 0.5 on the unclipped summed
  episode loss (eq. 22) drives theta to non-finite values within tens of submissions in some trials,
  so the baseline keeps a stabilising L1 clip with C = 10 (norm 5, 1000x the Laplace C). With the
  Laplace setting's C = 0.01 the noiseless run does not learn at all (see the README).

Randomness: ``seed`` -> ``SeedSequence(seed, spawn_key=(0, k))`` per trial k (initial theta,
acting uniforms, resets) and ``spawn_key=(1,)`` for the config's mechanism noise. A trial's acting
and reset streams are consumed in blocks independently of which other trials run beside it, and a
config in :func:`train_grid` gets exactly the run :func:`train` gives it with the same seed (and
the same with any ``workers``). The mechanism stream is shared by the config's trials in arrival
order, so one trial's noise depends on its sibling trials: changing ``max_submissions`` or
``stop_at_target`` of a config changes the noise its other trials draw (still reproducible).

Speed: the hot loops (acting, the episode gradient, eq. 22, the step's bookkeeping) are Numba
kernels in :mod:`ldp_audit.training.pgc_a3c._kernels`; the physics is Gymnasium's. ``engine="fused"``
(:class:`_FusedEngine`) runs each block of up to 256 lock-steps, physics included (Gymnasium's
equations, same operations, tested step for step against ``CartPoleVectorEnv``), in ONE
compiled call, with the same results bit for bit; it charges each agent when the agent starts
rather than when it submits (see :class:`_FusedEngine`).
"""

from __future__ import annotations

import functools
import gc
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from dataclasses import replace as dataclasses_replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ldp_audit._validation import (
    check_bool,
    check_epsilon,
    check_positive,
    check_real,
    check_rng,
)
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import Mechanism as _MechanismBase
from ldp_audit.release import ReleaseRequest, SealedRelease, release_many, require_sealed
from ldp_audit.training.pgc_a3c._kernels import (
    act_and_record,
    aggregate,
    aggregate_adaptive,
    ended_episodes,
    episode_gradients_kernel,
    record_scores,
)
from ldp_audit.training.cartpole import PAPER_GRAVITIES, PrivateGravityCartPole, initial_states
from ldp_audit.training.run_dir import TRANSCRIPT_KEYS

__all__ = [
    "DIM",
    "PgcA3cConfig",
    "TrainResult",
    "CoordinateLaplace",
    "PrivacyClaimWarning",
    "PrivateReport",
    "Aggregator",
    "privatize_reports",
    "init_theta",
    "unpack_theta",
    "greedy_actions",
    "rollout",
    "loss_gradients",
    "episode_gradients",
    "train",
    "train_grid",
    "ENGINES",
]

#: Shapes of the three weight matrices (section 4): theta_c 16x4, theta_p 2x16, theta_v 1x16.
HIDDEN, OBS_DIM, N_ACTIONS = 16, 4, 2
_SIZES = (HIDDEN * OBS_DIM, N_ACTIONS * HIDDEN, HIDDEN)
#: d = 112.
DIM = sum(_SIZES)
_MECHANISMS = ("laplace", "prs", "none")
_ACTING = ("argmax", "sample")
_CLIP_KINDS = ("l1", "coordinate")
_AGGREGATORS = ("sgd", "adam", "rmsprop")
_TARGETS = ("engine", "literal-eq18")
#: Step size of the adaptive aggregators when ``aggregator_lr`` is None: 1e-3, the published
#: default of Adam (Kingma & Ba 2015) and TensorFlow's for Adam and RMSprop (not tuned here).
ADAPTIVE_DEFAULT_LR = 1e-3
_PAPER_CLIP: dict[str, float] = {"laplace": 0.01, "prs": 1.0, "none": 10.0}
_PAPER_BUFFER = {"laplace": 1, "prs": 100, "none": 1}
#: Acting uniforms are drawn per trial in blocks of this many lock-steps.
_ACT_BLOCK = 256
#: Reset uniforms (1 for gravity + 4 for the initial state) drawn per trial in blocks.
_RESET_BLOCK = 256


# ==============================================================================================
# Config and result
# ==============================================================================================


def _check_int(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _real_tuple(value: Any, name: str) -> tuple[float, ...]:
    """A sequence of real numbers as a tuple of floats (a bare number, string or bool refused)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, np.ndarray)):
        raise InvalidParameterError(
            f"{name} must be a sequence of numbers, got {value!r} ({type(value).__name__})"
        )
    return tuple(check_real(x, f"{name}[{k}]") for k, x in enumerate(value))


@dataclass(frozen=True, kw_only=True)
class PgcA3cConfig:
    """Everything that defines a PGC-A3C run (paper defaults, section 4 "Hyper Parameters")."""

    mechanism: str = "laplace"
    """Agent-side randomiser Q: "laplace" (Alg. 2), "prs" (Alg. 3) or "none" (eps = inf)."""
    epsilon: float = 1.0
    """Total LDP budget of one agent (over its ``rounds`` submissions); forced to inf for none."""
    trials: int = 20
    """Independent training runs K (Table 1 uses 20)."""
    n_agents: int = 9
    """Concurrent workers per trial (the paper's 9 threads)."""
    max_submissions: int = 90_000
    """Submissions per trial before training stops (the paper's N = 90,000)."""
    rounds: int = 1
    """Submissions per agent T; each at epsilon/T (section 3.2.1). 1 = the paper's main setting."""
    clip: float | None = None
    """C: L1 sensitivity for Laplace (eq. 19-20), element clip for PRS (eq. 23). None = paper
    default (0.01 Laplace, 1 PRS, 10 for the non-private baseline)."""
    buffer_size: int | None = None
    """MAX_BUF |B| of Algorithm 1. None = paper default (1 Laplace and none, 100 PRS)."""
    reduced_dim: int | None = None
    """PRS d_hat; None = max{1, min{d, floor(eps/2.5)}} at the per-submission epsilon."""
    eta: float = 0.5
    """Learning rate of eq. 22."""
    gamma: float = 0.99
    """Discount factor of eqs. 12 and 18."""
    lam: float = 0.5
    """Value-loss weight lambda of eq. 15."""
    beta: float = 0.01
    """Entropy weight beta of eq. 16."""
    gravities: tuple[float, ...] = PAPER_GRAVITIES
    """The private gravity psi of an agent is drawn uniformly from these."""
    agent_gravities: tuple[float, ...] | None = None
    """Optional fixed gravity of agent a (agents numbered in arrival order within each trial),
    e.g. to plant canaries for membership inference; agents beyond its length draw from
    ``gravities``. The reset stream is consumed the same way either way."""
    episode_steps: int = 200
    """Episodes are cut after this many steps (score max 200)."""
    alpha_start: float = 0.5
    """alpha = max{0, alpha_start - n / alpha_decay} (section 4)."""
    alpha_decay: float = 1800.0
    """See ``alpha_start``."""
    acting: str = "argmax"
    """The non-exploring action (probability 1 - alpha): "argmax" pi (Algorithm 1 and section 4
    as printed) or "sample" a ~ pi(.|s) (what the public A3C example the paper's hyper-parameters
    match does; an ablation, see README)."""
    stop_at_target: bool = False
    """Stop a trial once mu_n >= target_score is certain (FST known, eq. 26); later zeta are NaN."""
    target_score: float = 195.0
    """Theta of eq. 26."""
    window: int = 10
    """m of eq. 25."""
    budget: float | None = None
    """Optional per-agent epsilon budget enforced by the accountant (None = no budget)."""
    clip_kind: str = "l1"
    """How a report is clipped before the Laplace noise: "l1" (eq. 19 as printed, L1 norm C/2,
    sensitivity C, epsilon-LDP) or "coordinate" (an ablation, a reading of the paper that is NOT
    its claim: each coordinate clipped to [-C/2, C/2], so the L1 sensitivity is d C and the same
    noise Lap(C/epsilon) gives d * epsilon = 112 epsilon per report; that true epsilon is what
    the ledger is charged and every report shows, and a :class:`PrivacyClaimWarning` is
    issued). Laplace and the non-private baseline only."""
    aggregator: str = "sgd"
    """The aggregator's step on mean(B): "sgd" (eq. 22 as printed), "adam" or "rmsprop" (an
    ablation; post-processing of released reports, no privacy cost)."""
    aggregator_lr: float | None = None
    """Step size of the aggregator: None = ``eta`` for "sgd", ``ADAPTIVE_DEFAULT_LR`` (1e-3)
    for "adam" and "rmsprop"."""
    target: str = "engine"
    """The value target: "engine" (eq. 18 with the bootstrap discounted as in eq. 12 and
    V(s_T) = 0 after a failure) or "literal-eq18" (eq. 18 as printed: + V(s_T), undiscounted,
    also after a failure; an ablation that shows why the engine deviates)."""

    def __post_init__(self) -> None:
        if self.mechanism not in _MECHANISMS:
            raise InvalidParameterError(
                f"mechanism must be one of {_MECHANISMS}, got {self.mechanism!r}"
            )
        if self.mechanism == "none":
            object.__setattr__(self, "epsilon", math.inf)
        else:
            object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, "epsilon"))
        if self.acting not in _ACTING:
            raise InvalidParameterError(f"acting must be one of {_ACTING}, got {self.acting!r}")
        for name, allowed in (
            ("clip_kind", _CLIP_KINDS),
            ("aggregator", _AGGREGATORS),
            ("target", _TARGETS),
        ):
            if getattr(self, name) not in allowed:
                raise InvalidParameterError(
                    f"{name} must be one of {allowed}, got {getattr(self, name)!r}"
                )
        if self.clip_kind == "coordinate" and self.mechanism == "prs":
            raise InvalidParameterError(
                "clip_kind='coordinate' applies to mechanism 'laplace' or 'none' (PRS clips its "
                f"projected coordinates itself, eq. 23), got mechanism={self.mechanism!r}"
            )
        if self.aggregator_lr is not None:
            object.__setattr__(
                self, "aggregator_lr", check_positive(self.aggregator_lr, "aggregator_lr")
            )
        for name, lo in (("trials", 1), ("n_agents", 1), ("max_submissions", 1), ("rounds", 1)):
            _check_int(getattr(self, name), name, lo)
        _check_int(self.episode_steps, "episode_steps", 1)
        _check_int(self.window, "window", 1)
        if self.clip is not None:
            object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        if self.buffer_size is not None:
            _check_int(self.buffer_size, "buffer_size", 1)
        if self.reduced_dim is not None:
            if self.mechanism != "prs":
                raise InvalidParameterError(
                    f"reduced_dim applies to mechanism='prs' only, got mechanism={self.mechanism!r}"
                )
            if not 1 <= _check_int(self.reduced_dim, "reduced_dim", 1) <= DIM:
                raise InvalidParameterError(
                    f"reduced_dim must be in [1, {DIM}], got {self.reduced_dim!r}"
                )
        for name in ("eta", "lam", "alpha_decay"):
            check_positive(getattr(self, name), name)
        gamma = check_real(self.gamma, "gamma")
        if not 0.0 < gamma <= 1.0:
            raise InvalidParameterError(f"gamma must be in (0, 1], got {self.gamma!r}")
        for name in ("beta", "alpha_start"):
            v = check_real(getattr(self, name), name)
            if not (math.isfinite(v) and v >= 0):
                raise InvalidParameterError(f"{name} must be finite and >= 0, got {v!r}")
        if float(self.alpha_start) > 1.0:
            raise InvalidParameterError(f"alpha_start must be <= 1, got {self.alpha_start!r}")
        check_bool(self.stop_at_target, "stop_at_target")
        ts = check_real(self.target_score, "target_score")
        if not math.isfinite(ts):
            raise InvalidParameterError(f"target_score must be finite, got {self.target_score!r}")
        g = _real_tuple(self.gravities, "gravities")
        if not g or not all(math.isfinite(x) and x > 0 for x in g):
            raise InvalidParameterError(
                f"gravities must be a non-empty tuple of finite values > 0, got {self.gravities!r}"
            )
        object.__setattr__(self, "gravities", g)
        if self.agent_gravities is not None:
            ag = _real_tuple(self.agent_gravities, "agent_gravities")
            if not all(math.isfinite(x) and x > 0 for x in ag):
                raise InvalidParameterError(
                    f"agent_gravities must hold finite values > 0, got {self.agent_gravities!r}"
                )
            object.__setattr__(self, "agent_gravities", ag)
        if self.budget is not None:
            object.__setattr__(self, "budget", check_positive(self.budget, "budget"))

    # ------------------------------------------------------------------------------ derived
    @property
    def effective_clip(self) -> float:
        """C actually used (paper default when ``clip`` is None)."""
        return _PAPER_CLIP[self.mechanism] if self.clip is None else float(self.clip)

    @property
    def effective_buffer_size(self) -> int:
        """|B| actually used (paper default when ``buffer_size`` is None)."""
        return _PAPER_BUFFER[self.mechanism] if self.buffer_size is None else self.buffer_size

    @property
    def effective_aggregator_lr(self) -> float:
        """The aggregator's step size actually used (see ``aggregator_lr``)."""
        if self.aggregator_lr is not None:
            return float(self.aggregator_lr)
        return float(self.eta) if self.aggregator == "sgd" else ADAPTIVE_DEFAULT_LR

    @property
    def epsilon_per_submission(self) -> float:
        """epsilon / T (sequential composition, section 3.2.1): the per-report epsilon the
        config *claims*. With ``clip_kind="coordinate"`` the true one is
        :attr:`true_epsilon_per_submission` (d times larger)."""
        return self.epsilon / self.rounds

    @property
    def true_epsilon_per_submission(self) -> float:
        """The epsilon one report actually satisfies (what the ledger is charged): equal to
        :attr:`epsilon_per_submission` except with Laplace and ``clip_kind="coordinate"``,
        where it is d C / (C / epsilon) = 112 epsilon_per_submission."""
        if self.mechanism == "laplace" and self.clip_kind == "coordinate":
            return self.make_mechanism().epsilon
        return self.epsilon_per_submission

    def make_mechanism(self) -> Any:
        """The per-submission mechanism object of :mod:`ldp_audit.mechanisms` (or, for the
        coordinate-clipping ablation, :class:`CoordinateLaplace` with its true epsilon)."""
        from ldp_audit import mechanisms as M

        if self.mechanism == "laplace" and self.clip_kind == "coordinate":
            return CoordinateLaplace(
                coordinate_epsilon=self.epsilon_per_submission, clip=self.effective_clip, dim=DIM
            )
        if self.mechanism == "laplace":
            return M.Laplace(epsilon=self.epsilon_per_submission, clip=self.effective_clip)
        if self.mechanism == "prs":
            return M.ProjectedRandomSign(
                epsilon=self.epsilon_per_submission,
                clip=self.effective_clip,
                reduced_dim=self.reduced_dim,
            )
        return M.NoPrivacy()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (inf epsilon as the string "inf")."""
        d = asdict(self)
        d["gravities"] = list(self.gravities)
        if self.agent_gravities is not None:
            d["agent_gravities"] = list(self.agent_gravities)
        if math.isinf(d["epsilon"]):
            d["epsilon"] = "inf"
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PgcA3cConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        if d.get("epsilon") == "inf":
            d["epsilon"] = math.inf
        for key in ("gravities", "agent_gravities"):
            if d.get(key) is not None:
                d[key] = tuple(d[key])
        return cls(**d)


@dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        config: the run's config.
        seed: the seed it ran from.
        zeta: (trials, max_submissions) episode score of submission n (0-based column n is the
            paper's zeta_{n+1}); NaN where the trial stopped before that submission.
        theta: (trials, 112) final global parameters.
        submissions: (trials,) submissions made.
        stopped_at_target: (trials,) True where ``stop_at_target`` ended the trial early.
        privacy: per-agent privacy summary (epsilon per submission, rounds, total, agents, ...).
        env_steps: total environment steps taken (all trials).
        seconds: wall-clock seconds of the run.
        transcript: what crossed the trust boundary (None unless recorded), see run_dir.py.
        secrets: the matching ground truth (gravity, clean gradient), None unless recorded.
    """

    config: PgcA3cConfig
    seed: int
    zeta: np.ndarray
    theta: np.ndarray
    submissions: np.ndarray
    stopped_at_target: np.ndarray
    privacy: dict[str, Any]
    env_steps: int
    seconds: float
    transcript: dict[str, np.ndarray] | None = None
    secrets: dict[str, np.ndarray] | None = field(default=None, repr=False)


# ==============================================================================================
# Network (section 4) and the episode loss gradient (eqs. 15-18)
# ==============================================================================================


def init_theta(rng: np.random.Generator) -> np.ndarray:
    """Glorot-uniform initial parameters (112,) in our packing [theta_c, theta_p, theta_v]."""
    rng = check_rng(rng)
    parts = []
    for fan_out, fan_in in ((HIDDEN, OBS_DIM), (N_ACTIONS, HIDDEN), (1, HIDDEN)):
        lim = math.sqrt(6.0 / (fan_in + fan_out))
        parts.append(rng.uniform(-lim, lim, size=fan_out * fan_in))
    return np.concatenate(parts)


def unpack_theta(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Views (B,16,4) theta_c, (B,2,16) theta_p, (B,16) theta_v of a (B,112) parameter batch."""
    b = theta.shape[0]
    c, p = _SIZES[0], _SIZES[0] + _SIZES[1]
    return (
        theta[:, :c].reshape(b, HIDDEN, OBS_DIM),
        theta[:, c:p].reshape(b, N_ACTIONS, HIDDEN),
        theta[:, p:].reshape(b, HIDDEN),
    )


def _check_theta(theta: Any, name: str = "theta") -> np.ndarray:
    t = np.asarray(theta, dtype=np.float64)
    if t.ndim == 1:
        t = t[None, :]
    if t.ndim != 2 or t.shape[1] != DIM or not np.all(np.isfinite(t)):
        raise InvalidParameterError(
            f"{name} must be a finite array of shape (B, {DIM}), got shape {np.shape(theta)}"
        )
    return np.ascontiguousarray(t)


def greedy_actions(theta: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """argmax_a pi(a|s; theta) for rows of theta (B,112) and observations (B,4); ties -> 0.

    The observations are rounded to float32 first, as the engine does with the state."""
    t = _check_theta(theta)
    o = np.asarray(obs, dtype=np.float64)
    if o.shape != (t.shape[0], OBS_DIM):
        raise InvalidParameterError(
            f"obs must have shape ({t.shape[0]}, {OBS_DIM}), got shape {o.shape}"
        )
    b = t.shape[0]
    actions = np.empty(b, dtype=np.int64)
    zeros = np.zeros(b)
    act_and_record(
        np.ascontiguousarray(o.T),
        t,
        zeros,
        zeros,
        np.zeros(b, dtype=np.bool_),
        np.zeros(b, dtype=np.int64),
        np.empty((b, 1, OBS_DIM)),
        np.empty((b, 1), dtype=np.int8),
        actions,
        np.arange(b, dtype=np.int64),
    )
    return actions


def _discount_matrix(gamma: float, length: int) -> np.ndarray:
    """G[j, t] = gamma^(j-t) for j >= t else 0, so (r @ G)[t] = sum_{j>=t} gamma^(j-t) r_j."""
    idx = np.arange(length)
    diff = idx[:, None] - idx[None, :]
    return np.where(diff >= 0, float(gamma) ** np.maximum(diff, 0), 0.0)


def bucket_length(lengths: np.ndarray) -> np.ndarray:
    """Padded length 2^ceil(log2 T) (at least 16) of the bucket an episode of length T goes to."""
    b = np.maximum(4, np.ceil(np.log2(np.maximum(np.asarray(lengths), 1))).astype(np.int64))
    return np.left_shift(1, b)


@functools.lru_cache(maxsize=64)
def _gamma_powers(gamma: float, length: int) -> np.ndarray:
    """gamma^k for k = 0..length (read-only, cached)."""
    tab = float(gamma) ** np.arange(length + 1, dtype=np.float64)
    tab.flags.writeable = False
    return tab


def _c(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x)


def _gradients_fixed(
    theta: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    gamma: np.ndarray,
    lam: np.ndarray,
    beta: np.ndarray,
) -> np.ndarray:
    """Eqs. 15-18 for rows padded to one bucket length L (obs (M, L+1, 4), the rest (M, L)).

    Contractions are batched matmuls of C-contiguous operands whose shapes depend only on L, so
    a row's gradient is bit-for-bit the same whichever other rows share its batch; entries past
    a row's length are masked to exact zeros before they can contribute.
    """
    m, big_l = actions.shape
    wc, wp, wv = unpack_theta(theta)
    s = _c(obs)  # (M, L+1, 4)
    pre = np.matmul(s, _c(wc.transpose(0, 2, 1)))  # theta_c s: (M, L+1, 16)
    h = np.maximum(pre, 0.0)  # ReLU
    z = np.matmul(h, _c(wp.transpose(0, 2, 1)))  # logits (M, L+1, 2)
    v = np.matmul(h, _c(wv[:, :, None]))[:, :, 0]  # V(s_t; theta) (M, L+1)
    ar = np.arange(m)
    v_last = np.where(bootstrap, v[ar, lengths], 0.0)

    steps = np.arange(big_l)
    valid = steps[None, :] < lengths[:, None]  # (M, L)
    r = np.where(valid, rewards, 0.0)
    # eq. 18, bootstrap discounted as in eq. 12:
    # V_hat_t = sum_{j=t}^{T-1} g^{j-t} r_j + g^{T-t} V_T
    if np.all(gamma == gamma[0]):  # the usual case: one table of powers, gathered
        tab = _gamma_powers(float(gamma[0]), big_l)
        pw = np.broadcast_to(tab[:big_l], (m, big_l))
        boot_pow = tab[np.maximum(lengths[:, None] - steps[None, :], 0)]
    else:
        pw = gamma[:, None] ** steps[None, :]  # gamma^t
        boot_pow = gamma[:, None] ** np.maximum(lengths[:, None] - steps[None, :], 0)
    if pw[:, -1].min() > 1e-250:
        # g^{-t} * (reverse cumulative sum of g^j r_j); cumsum is sequential
        v_hat = np.cumsum((pw * r)[:, ::-1], axis=1)[:, ::-1] / pw
    else:  # gamma^L would underflow: the discount matrix
        v_hat = np.empty((m, big_l))
        for g_val in np.unique(gamma):
            sel = gamma == g_val
            v_hat[sel] = r[sel] @ _discount_matrix(g_val, big_l)
    v_hat += boot_pow * v_last[:, None]
    v_t = v[:, :big_l]
    adv = v_hat - v_t  # eq. 12: A(s_t) = V_hat(s_t) - V(s_t), a constant

    # two-action softmax: log pi_1 = -log(1 + e^{-d}), log pi_0 = -log(1 + e^{d}), d = z_1 - z_0
    d = z[:, :big_l, 1] - z[:, :big_l, 0]
    logp1, logp0 = -np.logaddexp(0.0, -d), -np.logaddexp(0.0, d)
    pi1, pi0 = np.exp(logp1), np.exp(logp0)
    ent = -(pi0 * logp0 + pi1 * logp1)  # eq. 13
    # eq. 16: d/dz [-log pi(a) A] = -A (onehot - pi);  d/dz [-beta H] = beta pi (log pi + H).
    # With two actions both terms sum to zero over the actions, so dz_0 = -dz_1.
    dz1 = -adv * (actions - pi1) + beta[:, None] * pi1 * (logp1 + ent)
    dz1 = np.where(valid, dz1, 0.0)
    # eq. 17 x lambda (eq. 15): d/dV [lambda (V_hat - V)^2] = -2 lambda (V_hat - V)
    dv = np.where(valid, -2.0 * lam[:, None] * adv, 0.0)

    ht = _c(h[:, :big_l])
    g_wp1 = np.matmul(dz1[:, None, :], ht)[:, 0, :]  # (M, 16); row 0 is its negative
    g_wv = np.matmul(dv[:, None, :], ht)[:, 0, :]  # (M, 16)
    dh = dz1[:, :, None] * (wp[:, 1, :] - wp[:, 0, :])[:, None, :] + dv[:, :, None] * wv[:, None, :]
    dpre = np.where(pre[:, :big_l] > 0.0, dh, 0.0)
    g_wc = np.matmul(_c(dpre.transpose(0, 2, 1)), _c(s[:, :big_l]))  # (M, 16, 4)
    return np.concatenate([g_wc.reshape(m, -1), -g_wp1, g_wp1, g_wv], axis=1)


def loss_gradients(
    theta: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    *,
    gamma: float | np.ndarray = 0.99,
    lam: float | np.ndarray = 0.5,
    beta: float | np.ndarray = 0.01,
    target: str = "engine",
) -> np.ndarray:
    """Gradient of the episode loss L = L_p + lambda L_v (eqs. 15-18) per row, by hand.

    The engine's own code path (:func:`ldp_audit.training.pgc_a3c._kernels.episode_gradients_kernel`): a
    row's
    result never depends on the other rows or on how far the inputs were padded.

    Args:
        theta: (M, 112) parameters each episode was played with.
        obs: (M, L+1, 4) observations s_0..s_L (row m valid up to ``lengths[m]``, inclusive).
        actions: (M, L) actions a_0..a_{L-1}.
        rewards: (M, L) rewards r_0..r_{L-1}.
        lengths: (M,) T_m >= 1, the number of actions taken in row m's episode.
        bootstrap: (M,) True where the episode was cut (use V(s_T)), False where it terminated
            (V(s_T) = 0).
        gamma, lam, beta: scalars or (M,) per row.
        target: "engine" (eq. 18 with the bootstrap discounted as in eq. 12, V(s_T) = 0 after a
            failure) or "literal-eq18" (eq. 18 as printed: + V(s_T), undiscounted, always).

    Returns:
        (M, 112) gradients dL/dtheta in our packing.
    """
    if target not in _TARGETS:
        raise InvalidParameterError(f"target must be one of {_TARGETS}, got {target!r}")
    theta = _check_theta(theta)
    m, big_l = _check_episode_batch(theta, obs, actions, rewards, lengths, bootstrap)
    per = [
        np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=np.float64), (m,)))
        for x in (gamma, lam, beta)
    ]
    out = np.empty((m, DIM))
    episode_gradients_kernel(
        theta,
        np.arange(m, dtype=np.int64),
        np.ascontiguousarray(obs, dtype=np.float64),
        np.ascontiguousarray(actions, dtype=np.int8),
        np.ascontiguousarray(rewards, dtype=np.float64),
        np.ascontiguousarray(lengths, dtype=np.int64),
        np.ascontiguousarray(bootstrap, dtype=np.bool_),
        *per,
        out,
        np.empty(m),
        np.full(m, target == "literal-eq18", dtype=np.bool_),
    )
    return out


def _check_episode_batch(
    theta: np.ndarray,
    obs: Any,
    actions: Any,
    rewards: Any,
    lengths: Any,
    bootstrap: Any,
) -> tuple[int, int]:
    """Shapes and values of an episode batch; returns (M, L)."""
    m = theta.shape[0]
    a = np.asarray(actions)
    if a.ndim != 2 or a.shape[0] != m:
        raise InvalidParameterError(f"actions must have shape ({m}, L), got shape {a.shape}")
    big_l = a.shape[1]
    ln = np.asarray(lengths)
    if ln.shape != (m,) or ln.min() < 1 or ln.max() > big_l:
        raise InvalidParameterError(f"lengths must be (M,) in [1, {big_l}], got {lengths!r}")
    if not np.isin(a, (0, 1)).all():
        raise InvalidParameterError("actions must be 0 or 1")
    o = np.asarray(obs)
    if o.ndim != 3 or o.shape[0] != m or o.shape[2] != OBS_DIM or o.shape[1] <= ln.max():
        raise InvalidParameterError(
            f"obs must have shape ({m}, >= {int(ln.max()) + 1}, {OBS_DIM}), got shape {o.shape}"
        )
    r = np.asarray(rewards)
    if r.ndim != 2 or r.shape[0] != m or r.shape[1] < ln.max():
        raise InvalidParameterError(
            f"rewards must have shape ({m}, >= {int(ln.max())}), got shape {r.shape}"
        )
    if not (np.all(np.isfinite(o)) and np.all(np.isfinite(r))):
        raise InvalidParameterError("obs and rewards must be finite")
    if np.shape(bootstrap) != (m,):
        raise InvalidParameterError(
            f"bootstrap must have shape ({m},), got shape {np.shape(bootstrap)}"
        )
    return m, big_l


def _loss_gradients_numpy(
    theta: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    *,
    gamma: float | np.ndarray = 0.99,
    lam: float | np.ndarray = 0.5,
    beta: float | np.ndarray = 0.01,
) -> np.ndarray:
    """:func:`loss_gradients` in batched NumPy (the formulation before the compiled kernel;
    kept to cross-check the kernel in tests and benchmarks).

    Rows are grouped by :func:`bucket_length` and each group padded to exactly that length, so
    a row's result never depends on the other rows or on how far the inputs were padded.

    Args:
        theta: (M, 112) parameters each episode was played with.
        obs: (M, L+1, 4) observations s_0..s_L (row m valid up to ``lengths[m]``, inclusive).
        actions: (M, L) actions a_0..a_{L-1}.
        rewards: (M, L) rewards r_0..r_{L-1}.
        lengths: (M,) T_m >= 1, the number of actions taken in row m's episode.
        bootstrap: (M,) True where the episode was cut (use V(s_T)), False where it terminated
            (V(s_T) = 0).
        gamma, lam, beta: scalars or (M,) per row.

    Returns:
        (M, 112) gradients dL/dtheta in our packing.
    """
    theta = _check_theta(theta)
    m, big_l = np.shape(actions)
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.shape != (m,) or lengths.min() < 1 or lengths.max() > big_l:
        raise InvalidParameterError(f"lengths must be (M,) in [1, {big_l}], got {lengths!r}")
    boot = np.asarray(bootstrap, dtype=bool)
    per = [np.broadcast_to(np.asarray(x, dtype=np.float64), (m,)) for x in (gamma, lam, beta)]
    obs = np.asarray(obs, dtype=np.float64)
    actions, rewards = np.asarray(actions), np.asarray(rewards, dtype=np.float64)
    out = np.empty((m, DIM))
    blen = bucket_length(lengths)
    for lb in np.unique(blen).tolist():
        sel = np.flatnonzero(blen == lb)
        o = np.zeros((sel.size, lb + 1, OBS_DIM))
        a = np.zeros((sel.size, lb), dtype=np.int64)
        r = np.zeros((sel.size, lb))
        k = min(lb, big_l)
        o[:, : k + 1] = obs[sel, : k + 1]
        a[:, :k] = actions[sel, :k]
        r[:, :k] = rewards[sel, :k]
        out[sel] = _gradients_fixed(
            theta[sel], o, a, r, lengths[sel], boot[sel], *(x[sel] for x in per)
        )
    return out


def rollout(
    theta: np.ndarray,
    gravity: np.ndarray,
    init_states: np.ndarray,
    uniforms: np.ndarray,
    alpha: float | np.ndarray,
    steps: int = 200,
    *,
    acting: str = "argmax",
) -> dict[str, np.ndarray]:
    """Play one alpha-greedy episode per row, all rows in lock-step.

    Args:
        theta: (B, 112) parameters per row.
        gravity: (B,) gravity per row.
        init_states: (B, 4) initial physical states.
        uniforms: (steps, B) in [0, 1): explore iff u < alpha, then action = 1 iff u >= alpha/2.
        alpha: exploration probability, scalar or (B,).
        steps: episode cap.
        acting: "argmax" or "sample" (see ``PgcA3cConfig.acting``).

    Returns:
        dict with obs (B, steps+1, 4), actions (B, steps), rewards (B, steps), lengths (B,),
        bootstrap (B,) (True where cut at ``steps``), score (B,).
    """
    theta = _check_theta(theta)
    b = theta.shape[0]
    if acting not in _ACTING:
        raise InvalidParameterError(f"acting must be one of {_ACTING}, got {acting!r}")
    sample = np.full(b, acting == "sample")
    env = PrivateGravityCartPole(gravity, episode_steps=steps)
    env.reset_rows(np.arange(b), init_states)
    alpha_b = np.ascontiguousarray(np.broadcast_to(np.asarray(alpha, dtype=np.float64), (b,)))
    uniforms = np.asarray(uniforms, dtype=np.float64)
    obs = np.zeros((b, steps + 1, OBS_DIM))
    acts = np.zeros((b, steps), dtype=np.int8)
    rews = np.zeros((b, steps))
    lengths = np.zeros(b, dtype=np.int64)
    boot = np.zeros(b, dtype=bool)
    alive = np.arange(b)
    th = theta
    o_tmp = np.empty((b, 1, OBS_DIM))
    a_tmp = np.empty((b, 1), dtype=np.int8)
    a = np.empty(b, dtype=np.int64)
    zero_t = np.zeros(b, dtype=np.int64)
    ident = np.arange(b, dtype=np.int64)
    for t in range(steps):
        n = alive.size
        # the engine's own acting kernel (same observation rounding, greedy rule and ties)
        act_and_record(
            env._env.state,
            th,
            np.ascontiguousarray(uniforms[t, alive]),
            alpha_b[alive],
            sample[:n],
            zero_t[:n],
            o_tmp[:n],
            a_tmp[:n],
            a[:n],
            ident[:n],
        )
        obs[alive, t] = o_tmp[:n, 0]
        acts[alive, t] = a_tmp[:n, 0]
        nxt, r, term, trunc = env.step(a[:n])
        rews[alive, t] = r
        done = term | trunc
        if done.any():
            ended = alive[done]
            obs[ended, t + 1] = nxt[done].astype(np.float64)
            lengths[ended] = t + 1
            boot[ended] = trunc[done] & ~term[done]
            keep = np.flatnonzero(~done)
            alive = alive[keep]
            if alive.size == 0:
                break
            env.select(keep)
            th = np.ascontiguousarray(th[keep])
    return {
        "obs": obs,
        "actions": acts.astype(np.int64),
        "rewards": rews,
        "lengths": lengths,
        "bootstrap": boot,
        "score": rews.sum(axis=1),
    }


def episode_gradients(
    theta: Any,
    gravity: Any,
    rng: np.random.Generator,
    alpha: float | np.ndarray = 0.0,
    steps: int = 200,
    *,
    gamma: float = 0.99,
    lam: float = 0.5,
    beta: float = 0.01,
    acting: str = "argmax",
) -> tuple[np.ndarray, np.ndarray]:
    """The attacker's simulator: one episode per row, returns raw gradients and scores.

    The MDP is public; only the gravity is private, so anyone holding a broadcast theta can
    simulate what an agent with a candidate gravity would have submitted (before noise).

    Args:
        theta: (B, 112) (or (112,)) parameters.
        gravity: (B,) candidate gravity per row (a scalar is broadcast).
        rng: generator for the initial states and the alpha-greedy uniforms.
        alpha: exploration probability (scalar or (B,)).
        steps: episode cap (200 in the paper).
        gamma, lam, beta: loss hyper-parameters (paper defaults).
        acting: "argmax" (the paper) or "sample" (``PgcA3cConfig.acting``).

    Returns:
        (grads (B, 112), scores (B,)).
    """
    rng = check_rng(rng)
    t = _check_theta(theta)
    g = np.broadcast_to(np.asarray(gravity, dtype=np.float64).reshape(-1), (t.shape[0],))
    steps = _check_int(steps, "steps", 1)
    init = initial_states(rng.random((t.shape[0], OBS_DIM)))
    uni = rng.random((steps, t.shape[0]))
    ro = rollout(t, g.copy(), init, uni, alpha, steps, acting=acting)
    big_l = int(ro["lengths"].max())
    grads = loss_gradients(
        t,
        ro["obs"][:, : big_l + 1],
        ro["actions"][:, :big_l],
        ro["rewards"][:, :big_l],
        ro["lengths"],
        ro["bootstrap"],
        gamma=gamma,
        lam=lam,
        beta=beta,
    )
    return grads, ro["score"]


# ==============================================================================================
# Trust boundary: agent-side privatisation (Algorithms 2-3) and the aggregator (eq. 22)
# ==============================================================================================

# The release path itself lives in the core (ldp_audit.release): charge durably, randomise,
# seal. PGC-A3C only adds its eq. 19 clip for the ``none`` baseline and its (trial, agent) ids.
PrivateReport = SealedRelease  # the PGC-A3C name of a sealed batch of reports


class PrivacyClaimWarning(UserWarning):
    """A run is configured so that its reports do NOT satisfy the epsilon its config names
    (the coordinate-clipping ablation): the true epsilon is charged and reported instead."""


def _clip_coordinates(x: np.ndarray, bound: float) -> np.ndarray:
    """Each coordinate clipped to [-bound, bound] (the coordinate-clipping reading of eq. 19)."""
    return np.clip(x, -bound, bound)


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
        object.__setattr__(
            self, "coordinate_epsilon", check_epsilon(self.coordinate_epsilon, "coordinate_epsilon")
        )
        if math.isinf(self.coordinate_epsilon):
            raise InvalidParameterError("coordinate_epsilon must be finite, got inf")
        object.__setattr__(self, "clip", check_positive(self.clip, "clip"))
        object.__setattr__(self, "dim", _check_int(self.dim, "dim", 1))
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
        return _clip_coordinates(x, self.clip / 2.0)

    def privatize(self, x: Any, rng: np.random.Generator) -> np.ndarray:
        """``clip(x) + z``, z_i ~ Lap(b) i.i.d.; x (n, dim), finite."""
        xb = np.asarray(x, dtype=np.float64)
        if xb.ndim != 2 or xb.shape[1] != self.dim:
            raise InvalidParameterError(
                f"x must have shape (n, {self.dim}), got shape {np.shape(x)}"
            )
        if not np.all(np.isfinite(xb)):
            raise InvalidParameterError("x must be finite (NaN or inf refused before any noise)")
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
        return {
            "name": self.name,
            "epsilon": self.epsilon,
            "coordinate_epsilon": self.coordinate_epsilon,
            "clip": self.clip,
            "dim": self.dim,
        }


def _runs(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start index and length of each run of equal values in a sorted 1-D array."""
    edges = np.empty(x.size + 1, dtype=bool)
    edges[0] = edges[-1] = True
    np.not_equal(x[1:], x[:-1], out=edges[1:-1])
    pos = np.flatnonzero(edges)
    return pos[:-1], pos[1:] - pos[:-1]


def _clip_l1(x: np.ndarray, bound: float) -> np.ndarray:
    """Eq. 19: g / max{1, ||g||_1 / bound} per row."""
    n1 = np.abs(x).sum(axis=1, keepdims=True)
    return x / np.maximum(1.0, n1 / bound)


def privatize_reports(
    grads: np.ndarray,
    *,
    mechanism: Any,
    accountant: Any,
    agent_ids: Sequence[str],
    trial: np.ndarray,
    agent: np.ndarray,
    rng: np.random.Generator,
    clip: float | None = None,
    event: Any = None,
) -> SealedRelease:
    """Agent side: charge the ledger, then randomise, then release (Algorithm 1, step 3).

    A thin layer over :func:`ldp_audit.release.release`: the accountant is charged for every row
    *before* any noise is drawn; if the charge raises (e.g.
    :class:`~ldp_audit.errors.BudgetExceeded`) or the mechanism raises, nothing is released.

    Args:
        grads: (n, 112) raw gradients (never leave this function).
        mechanism: per-submission mechanism (``privatize(x, rng)`` and ``epsilon``).
        accountant: ``ldp_audit.accountant.Accountant`` (``charge_many``).
        agent_ids: ledger agent id per row ("<trial>/<agent>").
        trial, agent: (n,) ids carried with the report (``rel.trial``, ``rel.agent``).
        rng: noise generator.
        clip: if given, rows are clipped to L1 norm clip/2 first (eq. 19; the ``none`` baseline,
            whose mechanism adds no noise).
        event: the ledger event of one report (default ``event_for(mechanism)``).
    """
    return release_many(
        [_request(grads, mechanism, agent_ids, trial, agent, rng, clip, event)],
        accountant=accountant,
    )[0]


def _request(
    grads: np.ndarray,
    mechanism: Any,
    agent_ids: Sequence[str],
    trial: np.ndarray,
    agent: np.ndarray,
    rng: np.random.Generator,
    clip: float | None,
    event: Any,
    clip_kind: str = "l1",
) -> ReleaseRequest:
    if clip is None:
        pre = None
    elif clip_kind == "coordinate":
        pre = lambda g, b=clip / 2.0: _clip_coordinates(g, b)  # noqa: E731
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


def _privatize_groups(groups: list[dict[str, Any]], accountant: Any) -> list[SealedRelease]:
    """:func:`privatize_reports` for several groups (mechanisms) with ONE ledger transaction:
    every row of every group is charged before any group draws noise."""
    reqs = [
        _request(
            gr["grads"],
            gr["mechanism"],
            gr["agent_ids"],
            gr["trial"],
            gr["agent"],
            gr["rng"],
            gr["clip"],
            gr["event"],
            gr.get("clip_kind", "l1"),
        )
        for gr in groups
    ]
    return release_many(reqs, accountant=accountant)


class Aggregator:
    """The central aggregator of Algorithm 1 for many independent trials at once.

    Buffers reports per trial and applies eq. 22, theta <- theta - eta * mean(B), whenever
    |B| >= MAX_BUF. It only ever touches :class:`PrivateReport` objects.
    """

    def __init__(
        self,
        theta: np.ndarray,
        eta: np.ndarray,
        buffer_size: np.ndarray,
        optimizer: Any = None,
    ) -> None:
        self.theta = np.array(theta, dtype=np.float64, copy=True)
        g = self.theta.shape[0]
        self.eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (g,)).copy()
        self.buffer_size = np.broadcast_to(np.asarray(buffer_size, dtype=np.int64), (g,)).copy()
        self.buffer = np.zeros_like(self.theta)
        self.count = np.zeros(g, dtype=np.int64)
        self.version = np.zeros(g, dtype=np.int64)  # bumps at every update of theta
        # the aggregator ablation: per trial "sgd" / "adam" / "rmsprop" (post-processing)
        kinds = ["sgd"] * g if optimizer is None else list(np.broadcast_to(optimizer, (g,)))
        for k in kinds:
            if k not in _AGGREGATORS:
                raise InvalidParameterError(f"optimizer must be one of {_AGGREGATORS}, got {k!r}")
        self.kind = np.array([_AGGREGATORS.index(k) for k in kinds], dtype=np.int64)
        self.adaptive = bool(self.kind.any())
        if self.adaptive:
            self.m1 = np.zeros_like(self.theta)
            self.m2 = np.zeros_like(self.theta)
            self.steps = np.zeros(g, dtype=np.int64)

    def receive(self, *reports: PrivateReport) -> None:
        """Apply batches of reports in row order (rows of one trial contiguous, in arrival
        order; different reports must concern different trials)."""
        for report in reports:
            require_sealed(report, "the aggregator")
        if not reports:
            return
        if len(reports) == 1:
            tr, y = reports[0].trial, reports[0].noisy
        else:
            tr = np.concatenate([r.trial for r in reports])
            y = np.concatenate([r.noisy for r in reports])
        if tr.size == 0:
            return
        # eq. 22: theta <- theta - eta * (1/|B|) sum_{g~ in B} g~, one compiled pass in row order
        if self.adaptive:  # the same mean(B), stepped by Adam / RMSprop where asked
            aggregate_adaptive(
                self.theta,
                self.buffer,
                self.count,
                self.version,
                self.eta,
                self.buffer_size,
                self.kind,
                self.m1,
                self.m2,
                self.steps,
                np.ascontiguousarray(tr, dtype=np.int64),
                np.ascontiguousarray(y, dtype=np.float64),
            )
            return
        aggregate(
            self.theta,
            self.buffer,
            self.count,
            self.version,
            self.eta,
            self.buffer_size,
            np.ascontiguousarray(tr, dtype=np.int64),
            np.ascontiguousarray(y, dtype=np.float64),
        )


# ==============================================================================================
# The lock-step engine: all agents of all trials (of all configs) at once
# ==============================================================================================


class _TrialStream:
    """A trial's acting/reset randomness, consumed in blocks (independent of batching)."""

    def __init__(self, seed: int, trial: int) -> None:
        ss = np.random.SeedSequence(seed, spawn_key=(0, trial))
        init_ss, act_ss, reset_ss = ss.spawn(3)
        self.init = np.random.default_rng(init_ss)
        self.act = np.random.default_rng(act_ss)
        self.reset = np.random.default_rng(reset_ss)


def _mechanism_rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1,)))


class _Engine:
    """Runs a list of configs in one lock-step batch; see the module docstring."""

    def __init__(
        self,
        configs: Sequence[PgcA3cConfig],
        seeds: Sequence[int],
        accountants: Sequence[Any],
        record: Sequence[bool],
    ) -> None:
        self.configs = list(configs)
        self.stop_requested = False  # set by a SIGINT/SIGTERM handler: stop at the next step
        steps = {c.episode_steps for c in self.configs}
        if len(steps) != 1:
            raise InvalidParameterError(
                f"configs of one grid must share episode_steps, got {sorted(steps)}"
            )
        self.S = steps.pop()
        self.seeds = [int(s) for s in seeds]
        self.accountants = list(accountants)
        # one accountant object for every config (train_grid without ledgers or run dirs):
        # agent ids get a "<config>:" prefix and each step is charged in one transaction
        self.shared_accountant = len(self.accountants) > 1 and all(
            a is self.accountants[0] for a in self.accountants
        )
        self.record = list(record)
        self.mechs = [c.make_mechanism() for c in self.configs]
        self.events = [_accountant_api()[2](m) for m in self.mechs]
        self.mech_rngs = [_mechanism_rng(s) for s in self.seeds]

        # ---- per trial (global index g) ----
        cfg_of, local, streams, thetas = [], [], [], []
        for ci, (c, seed) in enumerate(zip(self.configs, self.seeds, strict=True)):
            for k in range(c.trials):
                cfg_of.append(ci)
                local.append(k)
                st = _TrialStream(seed, k)
                streams.append(st)
                thetas.append(init_theta(st.init))
        self.cfg_of = np.array(cfg_of, dtype=np.int64)
        self.local = np.array(local, dtype=np.int64)
        self.streams = streams
        G = self.G = len(cfg_of)

        def per(attr: str, dtype: Any = np.float64) -> np.ndarray:
            return np.array([getattr(self.configs[c], attr) for c in cfg_of], dtype=dtype)

        self.gamma, self.lam, self.beta = per("gamma"), per("lam"), per("beta")
        self.alpha0, self.alpha_decay = per("alpha_start"), per("alpha_decay")
        self.sample_g = np.array([self.configs[c].acting == "sample" for c in cfg_of], dtype=bool)
        self.max_sub = per("max_submissions", np.int64)
        self.rounds = per("rounds", np.int64)
        self.n_agents = per("n_agents", np.int64)
        self.stop_target = per("stop_at_target", bool)
        self.target, self.window = per("target_score"), per("window", np.int64)
        buf = np.array([self.configs[c].effective_buffer_size for c in cfg_of], dtype=np.int64)
        self.literal = np.array(
            [self.configs[c].target == "literal-eq18" for c in cfg_of], dtype=np.bool_
        )
        self.agg = Aggregator(
            np.stack(thetas),
            np.array([self.configs[c].effective_aggregator_lr for c in cfg_of]),
            buf,
            optimizer=[self.configs[c].aggregator for c in cfg_of],
        )
        # gravity table per trial, padded: psi = table[g, floor(u * len_g)]
        width = max(len(c.gravities) for c in self.configs)
        self.gtable = np.zeros((G, width))
        self.glen = np.array([len(self.configs[c].gravities) for c in cfg_of], dtype=np.int64)
        for gi, c in enumerate(cfg_of):
            self.gtable[gi, : self.glen[gi]] = self.configs[c].gravities
        # fixed per-agent gravities (canaries), per trial; empty when not set
        self.agent_gtable = [
            np.asarray(self.configs[c].agent_gravities or (), dtype=np.float64) for c in cfg_of
        ]
        self.any_agent_g = any(t.size for t in self.agent_gtable)

        self.n_sub = np.zeros(G, dtype=np.int64)
        self.next_agent = np.zeros(G, dtype=np.int64)
        self.active = np.ones(G, dtype=bool)
        self.at_target = np.zeros(G, dtype=bool)
        # zeta_n of every trial in one flat array (trial g owns [zoff[g], zoff[g] + max_sub[g]))
        self.zoff = np.concatenate([[0], np.cumsum(self.max_sub)[:-1]]).astype(np.int64)
        self.zeta_flat = np.full(int(self.max_sub.sum()), np.nan)
        self.alpha_g = np.maximum(0.0, self.alpha0 - self.n_sub / self.alpha_decay)
        self.env_steps = 0

        # ---- per row (trial-major, worker order) ----
        self.row_trial = np.repeat(np.arange(G), self.n_agents)
        self.row_worker = np.concatenate([np.arange(n) for n in self.n_agents])
        E = self.row_trial.size
        self.row_agent = np.zeros(E, dtype=np.int64)
        self.row_round = np.zeros(E, dtype=np.int64)
        self.row_gravity = np.zeros(E)
        self.row_theta = np.zeros((E, DIM))
        self.row_version = np.full(E, -1, dtype=np.int64)
        s_pad = int(bucket_length(np.array([self.S]))[0])  # room for the largest bucket
        self.obs = np.zeros((E, s_pad + 1, OBS_DIM))
        self.acts = np.zeros((E, s_pad), dtype=np.int8)
        self.rews = np.zeros((E, s_pad), dtype=np.float32)
        # row -> buffer row of obs/acts/rews: dropping finished trials' rows (_compact) only
        # renumbers the rows, it never moves the episode buffers
        self.slot = np.arange(E, dtype=np.int64)
        self.env = PrivateGravityCartPole(np.full(E, 9.8), episode_steps=self.S)
        self.actions = np.zeros(E, dtype=np.int64)

        # ---- randomness in blocks ----
        self.act_block = np.zeros((_ACT_BLOCK, E))
        self.block_pos = _ACT_BLOCK
        self.reset_block = np.zeros((G, _RESET_BLOCK, 5))
        self.reset_ptr = np.full(G, _RESET_BLOCK, dtype=np.int64)

        # ---- transcript (per config) ----
        self.tr: list[dict[str, list[np.ndarray]]] = [
            {k: [] for k in _TR_KEYS} for _ in self.configs
        ]
        self.tr_thetas: list[list[np.ndarray]] = [[] for _ in self.configs]
        self.recorded_version = np.full(G, -1, dtype=np.int64)
        self.recorded_index = np.full(G, -1, dtype=np.int64)

        self._start_rows(np.arange(E), new_agent=np.ones(E, dtype=bool))

    # ------------------------------------------------------------------------------ streams
    def _refill_act_block(self) -> None:
        rt = self.row_trial
        first, counts = _runs(rt)
        blk = np.empty((_ACT_BLOCK, rt.size))
        for f, n in zip(first.tolist(), counts.tolist(), strict=True):
            blk[:, f : f + n] = self.streams[int(rt[f])].act.random((_ACT_BLOCK, n))
        self.act_block = blk
        self.block_pos = 0

    def _take_resets(self, g: np.ndarray) -> np.ndarray:
        """5 uniforms per restart, rows grouped by trial in order; consumed per trial."""
        first, counts = _runs(g)
        tg = g[first]
        need = self.reset_ptr[tg] + counts > _RESET_BLOCK
        for gi in tg[need].tolist():
            left = self.reset_block[gi, self.reset_ptr[gi] :]
            fresh = self.streams[gi].reset.random((_RESET_BLOCK - left.shape[0], 5))
            self.reset_block[gi] = np.concatenate([left, fresh])
            self.reset_ptr[gi] = 0
        rank = np.arange(g.size) - np.repeat(first, counts)
        out = self.reset_block[g, self.reset_ptr[g] + rank]
        self.reset_ptr[tg] += counts
        return out

    # ------------------------------------------------------------------------------ restarts
    def _start_rows(self, rows: np.ndarray, new_agent: np.ndarray) -> None:
        """Start an episode in ``rows`` (sorted): copy the current theta, maybe a new agent."""
        g = self.row_trial[rows]
        u = self._take_resets(g)
        na_rows, na_g = rows[new_agent], g[new_agent]
        if na_rows.size:
            first, counts = _runs(na_g)
            rank = np.arange(na_g.size) - np.repeat(first, counts)
            self.row_agent[na_rows] = self.next_agent[na_g] + rank
            self.next_agent[na_g[first]] += counts
            self.row_round[na_rows] = 0
            n_g = self.glen[na_g]  # psi uniform over the config's gravities
            idx = np.minimum((u[new_agent, 0] * n_g).astype(np.int64), n_g - 1)
            self.row_gravity[na_rows] = self.gtable[na_g, idx]
            if self.any_agent_g:
                for r, gi in zip(na_rows.tolist(), na_g.tolist(), strict=True):
                    table, a = self.agent_gtable[gi], self.row_agent[r]
                    if a < table.size:
                        self.row_gravity[r] = table[a]
        self.row_round[rows[~new_agent]] += 1
        th = self.agg.theta[g]
        self.row_theta[rows] = th
        self.env._reset_rows_unchecked(rows, initial_states(u[:, 1:]), self.row_gravity[rows])
        if any(self.record):
            self._record_broadcast(rows, g)

    def _record_broadcast(self, rows: np.ndarray, g: np.ndarray) -> None:
        for gi in np.unique(g).tolist():
            ci = int(self.cfg_of[gi])
            if not self.record[ci]:
                continue
            if self.recorded_version[gi] != self.agg.version[gi]:
                self.tr_thetas[ci].append(self.agg.theta[gi].copy())
                self.recorded_version[gi] = self.agg.version[gi]
                self.recorded_index[gi] = len(self.tr_thetas[ci]) - 1
        self.row_version[rows] = self.recorded_index[g]

    # ------------------------------------------------------------------------------ main loop
    def run(self, progress: Any = None) -> None:
        while self.active.any() and not self.stop_requested:
            if self.block_pos >= _ACT_BLOCK:
                self._refill_act_block()
            u = self.act_block[self.block_pos]
            self.block_pos += 1
            env = self.env._env
            t = env.steps.copy()  # step() increments in place
            # alpha-greedy (section 4): alpha = max{0, 0.5 - n/1800}; records s_t and a_t
            act_and_record(
                env.state,
                self.row_theta,
                u,
                self.alpha_g[self.row_trial],
                self.sample_g[self.row_trial],
                t,
                self.obs,
                self.acts,
                self.actions,
                self.slot,
            )
            obs, r, term, trunc = self.env._step_unchecked(self.actions)
            E = self.row_trial.size
            self.rews[self.slot, t] = r
            self.env_steps += E
            done = term | trunc
            if done.any():
                n0 = int(self.n_sub.sum())
                self._on_done(np.flatnonzero(done), t, obs, term, trunc)
                if progress is not None:
                    progress.update(int(self.n_sub.sum()) - n0)

    def _on_done(
        self,
        rows: np.ndarray,
        t: np.ndarray,
        obs: np.ndarray,
        term: np.ndarray,
        trunc: np.ndarray,
    ) -> None:
        n = rows.size
        sub, gs, rk = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        lengths, boot = np.empty(n, np.int64), np.empty(n, np.bool_)
        # the cap: a trial's later arrivals beyond max_submissions are discarded
        m = ended_episodes(
            rows, self.row_trial, self.max_sub, self.n_sub, t, term, trunc,
            sub, gs, rk, lengths, boot,
        )  # fmt: skip
        sub, gs, rk, lengths, boot = sub[:m], gs[:m], rk[:m], lengths[:m], boot[:m]
        g = self.row_trial[rows]
        slots = self.slot[sub]
        self.obs[slots, lengths] = obs[sub]  # s_T, the state the episode ended in
        grads = np.empty((sub.size, DIM))
        scores = np.empty(sub.size)  # zeta: steps survived
        episode_gradients_kernel(  # eqs. 15-18, one compiled loop over the ended episodes
            self.row_theta[sub],
            slots,
            self.obs,
            self.acts,
            self.rews,
            lengths,
            boot,
            self.gamma[gs],
            self.lam[gs],
            self.beta[gs],
            grads,
            scores,
            self.literal[gs],
        )
        sub_index = self.n_sub[gs] + rk
        cfg = self.cfg_of[gs]  # sorted: configs own contiguous blocks of trials
        groups, cis, sels = [], [], []
        c_first, c_count = _runs(cfg)
        for f, k in zip(c_first.tolist(), c_count.tolist(), strict=True):
            ci = int(cfg[f])
            sel = slice(f, f + k)
            c = self.configs[ci]
            lt, ag = self.local[gs[sel]], self.row_agent[sub[sel]]
            prefix = f"{ci}:" if self.shared_accountant else ""
            ids = [f"{prefix}{a}/{b}" for a, b in zip(lt.tolist(), ag.tolist(), strict=True)]
            groups.append(
                dict(
                    grads=grads[sel],
                    mechanism=self.mechs[ci],
                    agent_ids=ids,
                    trial=gs[sel],
                    agent=ag,
                    rng=self.mech_rngs[ci],
                    clip=c.effective_clip if c.mechanism == "none" else None,
                    event=self.events[ci],
                    clip_kind=c.clip_kind,
                )
            )
            cis.append(ci)
            sels.append(sel)
        if self.shared_accountant:  # one ledger transaction for the whole step
            reports = _privatize_groups(groups, self.accountants[0])
        else:
            reports = [
                _privatize_groups([g], self.accountants[c])[0]
                for g, c in zip(groups, cis, strict=True)
            ]
        # ---------------- trust boundary: only `reports` cross it ----------------
        for ci, sel, report in zip(cis, sels, reports, strict=True):
            lt, ag = self.local[gs[sel]], self.row_agent[sub[sel]]
            if self.record[ci]:
                rec = self.tr[ci]
                rec["trial"].append(lt)
                rec["agent"].append(ag)
                rec["worker"].append(self.row_worker[sub[sel]])
                rec["round"].append(self.row_round[sub[sel]])
                rec["submission"].append(sub_index[sel])
                rec["theta_index"].append(self.row_version[sub[sel]])
                rec["report"].append(np.array(report.noisy))
                rec["score"].append(scores[sel])
                rec["gravity"].append(self.row_gravity[sub[sel]])
                rec["gradient"].append(grads[sel])
        self.agg.receive(*reports)
        # zeta_n, submission counts, alpha, and the stop criteria (max_submissions; eqs. 25-26)
        any_ended = record_scores(
            gs,
            sub_index,
            scores,
            self.zoff,
            self.zeta_flat,
            self.n_sub,
            self.alpha_g,
            self.alpha0,
            self.alpha_decay,
            self.max_sub,
            self.stop_target,
            self.window,
            self.target,
            self.active,
            self.at_target,
        )

        # ---- restart the workers whose episodes ended (trials still running) ----
        still = self.active[g]
        if still.any():
            rr = rows[still]
            new_agent = self.row_round[rr] + 1 >= self.rounds[g[still]]
            self._start_rows(rr, new_agent)
        if any_ended:
            self._compact()

    #: per-row arrays (one entry per running worker) that ``_keep_rows`` filters together
    _ROW_FIELDS: tuple[str, ...] = (
        "row_trial",
        "row_worker",
        "row_agent",
        "row_round",
        "row_gravity",
        "row_theta",
        "row_version",
        "slot",
    )

    def _keep_rows(self, keep: np.ndarray) -> None:
        """Keep only the rows ``keep`` of every per-row array (the workers of ended trials go)."""
        for name in self._ROW_FIELDS:
            setattr(self, name, np.ascontiguousarray(getattr(self, name)[keep]))
        self.act_block = np.ascontiguousarray(self.act_block[:, keep])

    def _compact(self) -> None:
        keep = np.flatnonzero(self.active[self.row_trial])
        self._keep_rows(keep)
        self.env.select(keep)
        self.actions = np.zeros(keep.size, dtype=np.int64)

    # ------------------------------------------------------------------------------ results
    def results(self, seconds: float) -> list[TrainResult]:
        out = []
        for ci, c in enumerate(self.configs):
            gs = np.flatnonzero(self.cfg_of == ci)
            transcript = secrets = None
            if self.record[ci]:
                rec = self.tr[ci]

                def cat(k: str, dtype: Any, width: int | None = None, rec=rec) -> np.ndarray:
                    if rec[k]:
                        return np.concatenate(rec[k]).astype(dtype)
                    return np.zeros((0,) if width is None else (0, width), dtype=dtype)

                transcript = {
                    "trial": cat("trial", np.int64),
                    "agent": cat("agent", np.int64),
                    "worker": cat("worker", np.int64),
                    "round": cat("round", np.int64),
                    "submission": cat("submission", np.int64),
                    "theta_index": cat("theta_index", np.int64),
                    "report": cat("report", np.float64, DIM),
                    "score": cat("score", np.float64),
                    "thetas": np.array(self.tr_thetas[ci]).reshape(-1, DIM),
                }
                secrets = {
                    "gravity": cat("gravity", np.float64),
                    "gradient": cat("gradient", np.float64, DIM),
                }
            out.append(
                TrainResult(
                    config=c,
                    seed=self.seeds[ci],
                    zeta=np.stack(
                        [self.zeta_flat[self.zoff[g] : self.zoff[g] + self.max_sub[g]] for g in gs]
                    ),
                    theta=self.agg.theta[gs].copy(),
                    submissions=self.n_sub[gs].copy(),
                    stopped_at_target=self.at_target[gs].copy(),
                    privacy=_privacy_summary(c, self.next_agent[gs], self.accountants[ci]),
                    env_steps=int(self.env_steps),
                    seconds=seconds,
                    transcript=transcript,
                    secrets=secrets,
                )
            )
        return out


#: ``engine`` values of :func:`train_grid`: the per-step Python loop, or the fused block kernel.
ENGINES = ("lockstep", "fused")
#: The fused engine charges, per top-up, the next ``_FUSED_RESERVE`` x (rows of the trial)
#: agents of a trial ahead (all their rounds), when fewer than half of that are left.
_FUSED_RESERVE = 8
#: Reports of mechanism randomness pre-drawn per top-up: this many x (rows of the config).
_FUSED_NOISE = 4


class _FusedEngine(_Engine):
    """The lock-step engine with each block of steps in ONE compiled call
    (:func:`ldp_audit.training.pgc_a3c._kernels.fused_block`): same randomness streams, same operations
    in the same order, so the same results bit for bit (tests/test_fused_pgc.py).

    What differs is when the ledger is charged: an agent is charged for all its rounds
    *before its first episode starts* (in blocks of agents: one ``ldp_audit.release.reserve``
    block per accountant, topped up with one durable ``Reservation.add`` per block), instead of
    at each submission; the compiled kernel stops before a release that was not reserved.
    Every release is still charged before it is randomised; the
    ledger additionally holds the agents started or reserved but not submitted when a trial
    stopped (at most ``_FUSED_RESERVE`` x n_agents per trial, plus the episodes in flight):
    charged and never released, the conservative direction. Mechanism randomness is drawn
    from each config's own generator in the same order and amounts as the lock-step engine
    uses it, ahead of use, after the agents it will be applied to were charged.
    """

    def __init__(
        self,
        configs: Sequence[PgcA3cConfig],
        seeds: Sequence[int],
        accountants: Sequence[Any],
        record: Sequence[bool],
    ) -> None:
        super().__init__(configs, seeds, accountants, record)
        from ldp_audit.mechanisms import ProjectedRandomSign

        G, C = self.G, len(self.configs)
        env = self.env._env
        self.f_state = np.array(env.state, dtype=np.float64, order="C", copy=True)
        self.f_steps = np.asarray(env.steps, dtype=np.int64).copy()
        self.f_block_pos = np.array([self.block_pos], dtype=np.int64)
        # observations are float32 values (the state rounded as Gymnasium shows it): a float32
        # episode buffer holds them exactly in half the memory the kernel streams through
        self.obs = np.zeros(self.obs.shape, dtype=np.float32)
        from ldp_audit.training.pgc_a3c._kernels import _transpose_row

        self.row_tt = np.empty_like(self.row_theta)
        self.row_wd = np.empty((self.row_theta.shape[0], HIDDEN))
        for i in range(self.row_theta.shape[0]):
            _transpose_row(self.row_theta[i], self.row_tt[i], self.row_wd[i])
        agg = self.agg
        if not agg.adaptive:  # _agg_one's SGD branch needs no moments; empty stand-ins
            agg.m1 = np.zeros((G, 0))
            agg.m2 = np.zeros((G, 0))
            agg.steps = np.zeros(G, dtype=np.int64)
        width = max(1, max(t.size for t in self.agent_gtable))
        self.agtable = np.zeros((G, width))
        self.aglen = np.array([t.size for t in self.agent_gtable], dtype=np.int64)
        for gi, t in enumerate(self.agent_gtable):
            self.agtable[gi, : t.size] = t
        # reset uniforms: the base engine's leftover, in a block that holds any step's restarts
        r_len = max(_RESET_BLOCK, 2 * int(self.n_agents.max()))
        self.f_reset = np.zeros((G, r_len, 5))
        self.f_reset_ptr = np.full(G, r_len, dtype=np.int64)
        for gi in range(G):
            left = self.reset_block[gi, self.reset_ptr[gi] :]
            self.f_reset[gi, r_len - left.shape[0] :] = left
            self.f_reset_ptr[gi] = r_len - left.shape[0]
        self.paid = np.zeros(G, dtype=np.int64)
        self.agent_cap = self.max_sub // self.rounds + self.n_agents
        # per config: mechanism kind and its pre-drawn randomness
        self.mech_kind = np.zeros(C, dtype=np.int64)
        self.coord_clip = np.zeros(C, dtype=np.bool_)
        self.clip_bound = np.zeros(C)
        self.prs_dh = np.ones(C, dtype=np.int64)
        self.prs_p0 = np.zeros(C)
        self.prs_slope = np.zeros(C)
        self.noise_width = np.zeros(C, dtype=np.int64)
        for ci, (c, mech) in enumerate(zip(self.configs, self.mechs, strict=True)):
            self.coord_clip[ci] = c.clip_kind == "coordinate"
            self.clip_bound[ci] = c.effective_clip / 2.0
            if c.mechanism == "none":
                self.mech_kind[ci] = 1
            elif c.mechanism == "prs":
                if type(mech) is not ProjectedRandomSign:
                    raise InvalidParameterError(
                        f"engine='fused' needs the stock PRS mechanism, got {type(mech).__name__}"
                    )
                dh = mech.effective_reduced_dim(DIM)
                bit_eps = mech.bit_epsilon(DIM)
                self.mech_kind[ci] = 2
                self.clip_bound[ci] = mech.clip
                self.prs_dh[ci] = dh
                self.prs_p0[ci] = 1.0 / (1.0 + math.exp(bit_eps))  # scipy.special.expit(-e)
                self.prs_slope[ci] = math.tanh(bit_eps / 2.0)
                self.noise_width[ci] = dh * DIM + dh
            else:
                self.noise_width[ci] = DIM
        self.noise_ptr = np.zeros(C, dtype=np.int64)
        self.noise_len = np.zeros(C, dtype=np.int64)
        self.n_thetas = np.array([len(t) for t in self.tr_thetas], dtype=np.int64)
        self.record_c = np.array(self.record, dtype=np.bool_)
        self.f_env_steps = np.zeros(1, dtype=np.int64)
        self.bad = np.zeros(1, dtype=np.int64)
        #: ``profile = True`` before :meth:`run` times its parts (benchmarks/bench_pgc.py):
        #: ``timings`` then maps each of ``_PROFILE_PARTS`` to {"wall": s, "cpu": s}
        #: (perf_counter, process_time) and "calls" to the kernel calls; off (the default), the
        #: hook costs one test per part per kernel call
        self.profile = False
        self.timings: dict[str, Any] = {}
        self._lap: Any = None
        self._alloc_outputs()
        self._count_rows()
        # the pre-drawn mechanism randomness, in one buffer allocated once: a config tops up
        # when fewer than 2 x its live rows are left, to fewer than (2 + _FUSED_NOISE) x them
        # (rows are only ever dropped, so this bounds every later top-up too)
        k_cap = (2 + _FUSED_NOISE) * max(1, int(self.rows_c.max()))
        self.noise = np.zeros((C, k_cap, max(1, int(self.noise_width.max()))))

    def _alloc_outputs(self) -> None:
        E, G = self.row_trial.size, self.G
        cap = 16 * E if any(self.record) else E
        self.out_int = np.zeros((6, cap), dtype=np.int64)
        self.out_report = np.zeros((cap if any(self.record) else 1, DIM))
        self.out_grad = np.zeros_like(self.out_report)
        self.out_score = np.zeros(cap)
        self.out_grav = np.zeros(cap)
        self.out_n = np.zeros(1, dtype=np.int64)
        scap = 16 * G if any(self.record) else G
        self.snap_theta = np.zeros((scap, DIM))
        self.snap_cfg = np.zeros(scap, dtype=np.int64)
        self.snap_n = np.zeros(1, dtype=np.int64)

    def _count_rows(self) -> None:
        self.rows_g = np.bincount(self.row_trial, minlength=self.G).astype(np.int64)
        self.rows_c = np.bincount(
            self.cfg_of, weights=self.rows_g, minlength=len(self.configs)
        ).astype(np.int64)

    # ---------------------------------------------------------------- what a block needs
    def _charge_ahead(self) -> None:
        """Charge, for every running trial short of them, the next agents it may start (all
        their rounds): ONE durable ``Reservation.add`` (:func:`ldp_audit.release.reserve`) per
        accountant, before any of them plays; ``paid`` is what the kernel may release."""
        nxt, rows, cap = self.next_agent, self.rows_g, self.agent_cap
        low = np.minimum(nxt + rows * (_FUSED_RESERVE // 2), cap)
        short = np.flatnonzero(self.active & (self.paid < low))
        if short.size == 0:
            return
        high = np.minimum(nxt + rows * _FUSED_RESERVE, cap)
        per_acc: dict[int, list[tuple[str, Any]]] = {}
        shared = self.shared_accountant
        for gi, lo, hi in zip(
            short.tolist(), self.paid[short].tolist(), high[short].tolist(), strict=True
        ):
            ci = int(self.cfg_of[gi])
            head = f"{ci}:{int(self.local[gi])}/" if shared else f"{int(self.local[gi])}/"
            ev = self.events[ci]
            reps = int(self.rounds[gi])
            lst = per_acc.setdefault(0 if shared else ci, [])
            if reps == 1:
                lst.extend([(head + str(a), ev) for a in range(lo, hi)])
            else:
                for a in range(lo, hi):
                    lst.extend([(head + str(a), ev)] * reps)
        if self._lap is not None:
            self._lap("charge_ids")
        blocks = self.__dict__.setdefault("reservations", {})
        for key, charges in per_acc.items():
            if charges:
                block = blocks.get(key)
                if block is None:
                    from ldp_audit.release import reserve

                    # released inside fused_block, which counts them itself (``paid``)
                    block = blocks[key] = reserve(self.accountants[key], itemised=False)
                block.add(charges)  # durable, first, same rows in the same order
        self.paid[short] = high[short]
        if self._lap is not None:
            self._lap("ledger_charges")

    def _draw_ahead(self) -> None:
        """Top up each config's pre-drawn mechanism randomness (after the charges), drawn
        from its own generator exactly as the mechanism draws it (Laplace: ``rng.laplace(0,
        b, (n, 112))``; PRS: ``rng.random((n, d_hat d + d_hat))``), so the values applied to
        the k-th report are those the lock-step engine applies. In place: a config's unused
        draws move to the front of its rows of ``noise``, the fresh ones follow."""
        left = self.noise_len - self.noise_ptr
        need = (self.mech_kind != 1) & (left < 2 * self.rows_c)
        if not need.any():
            return
        lap = self._lap
        for ci in np.flatnonzero(need).tolist():
            lo, n = int(self.noise_ptr[ci]), int(left[ci])
            buf = self.noise[ci]
            if n and lo:
                buf[:n] = buf[lo : lo + n]  # overlapping rows: NumPy copies through a buffer
            f = max(int(self.rows_c[ci]), 1) * _FUSED_NOISE
            rng, w = self.mech_rngs[ci], int(self.noise_width[ci])
            if lap is not None:
                lap("noise_shift")
            if self.mech_kind[ci] == 0:
                buf[n : n + f, :w] = rng.laplace(0.0, self.mechs[ci].scale, size=(f, w))
            elif w == buf.shape[1]:  # contiguous rows: the generator writes them itself
                rng.random(out=buf[n : n + f])
            else:
                buf[n : n + f, :w] = rng.random((f, w))
            if lap is not None:
                lap("mechanism_draws")
            self.noise_len[ci] = n + f
            self.noise_ptr[ci] = 0

    def _refill_resets(self) -> None:
        r_len = self.f_reset.shape[1]
        short = np.flatnonzero(self.active & (self.f_reset_ptr + 2 * self.rows_g > r_len))
        for gi in short.tolist():
            p = int(self.f_reset_ptr[gi])
            k = r_len - p
            blk = self.f_reset[gi]
            blk[:k] = blk[p:]  # overlapping rows: NumPy copies through a buffer
            self.streams[gi].reset.random(out=blk[k:])  # the same values as random((p, 5))
            self.f_reset_ptr[gi] = 0
        if self._lap is not None:
            self._lap("reset_draws")

    def _refill_act_block(self) -> None:
        """The base engine's acting block, drawn only for the rows of running trials (the rows
        of ended trials, not yet dropped, are skipped by the kernel: their streams are never
        read again), into the same buffer while the row count is unchanged."""
        rt = self.row_trial
        first, counts = _runs(rt)
        blk = self.act_block
        if blk.shape != (_ACT_BLOCK, rt.size):
            blk = np.empty((_ACT_BLOCK, rt.size))
        active = self.active
        for f, n in zip(first.tolist(), counts.tolist(), strict=True):
            gi = int(rt[f])
            if active[gi]:
                blk[:, f : f + n] = self.streams[gi].act.random((_ACT_BLOCK, n))
        self.act_block = blk
        self.block_pos = 0
        if self._lap is not None:
            self._lap("acting_uniforms")

    # ---------------------------------------------------------------- transcript and rows
    def _collect(self) -> None:
        n = int(self.out_n[0])
        if n:
            oi = self.out_int[:, :n]
            g = oi[0]
            cfg = self.cfg_of[g]
            first, counts = _runs(cfg)
            for f, k in zip(first.tolist(), counts.tolist(), strict=True):
                ci, sel = int(cfg[f]), slice(f, f + k)
                rec = self.tr[ci]
                rec["trial"].append(self.local[g[sel]])
                rec["agent"].append(oi[1, sel].copy())
                rec["worker"].append(oi[2, sel].copy())
                rec["round"].append(oi[3, sel].copy())
                rec["submission"].append(oi[4, sel].copy())
                rec["theta_index"].append(oi[5, sel].copy())
                rec["report"].append(self.out_report[sel].copy())
                rec["score"].append(self.out_score[sel].copy())
                rec["gravity"].append(self.out_grav[sel].copy())
                rec["gradient"].append(self.out_grad[sel].copy())
            self.out_n[0] = 0
        for j in range(int(self.snap_n[0])):
            self.tr_thetas[int(self.snap_cfg[j])].append(self.snap_theta[j].copy())
        self.snap_n[0] = 0

    _ROW_FIELDS = (*_Engine._ROW_FIELDS, "row_tt", "row_wd", "f_steps")

    def _compact_fused(self) -> None:
        keep = np.flatnonzero(self.active[self.row_trial])
        self._keep_rows(keep)
        self.f_state = np.ascontiguousarray(self.f_state[:, keep])
        self._count_rows()

    # ---------------------------------------------------------------- main loop
    def run(self, progress: Any = None) -> None:
        """Run to the end (or to a stop request), kernel call after kernel call.

        Python's cyclic garbage collector is paused while it runs and restored afterwards
        (errors included): the loop and the ledger it charges create no reference cycles, but
        a ledger's per-agent state grows by one object per agent, and the collector's repeated
        walks over it and over everything else the process holds cost the in-process tally
        about half its time (benchmarks/bench_pgc.py, "gc" rows). Memory is still freed by
        reference counting; only cycles wait for the collector's next run.
        """
        if self.profile:
            self._start_profile()
        collector_was_on = gc.isenabled()
        gc.disable()
        try:
            self._run(progress)
        finally:
            if collector_was_on:
                gc.enable()

    def _start_profile(self) -> None:
        tm: dict[str, Any] = {k: {"wall": 0.0, "cpu": 0.0} for k in _PROFILE_PARTS}
        tm["calls"] = 0
        wall, cpu = time.perf_counter, time.process_time
        mark = [wall(), cpu()]

        def lap(part: str) -> None:  # the time since the last lap goes to ``part``
            w, c = wall(), cpu()
            t = tm[part]
            t["wall"] += w - mark[0]
            t["cpu"] += c - mark[1]
            mark[0], mark[1] = w, c

        self.timings = tm
        self._lap = lap

    def _run(self, progress: Any) -> None:
        from ldp_audit.training.pgc_a3c._kernels import (
            FUSED_NONFINITE,
            FUSED_PRS_OVERFLOW,
            FUSED_TRIAL_ENDED,
            fused_block,
        )

        agg = self.agg
        lap = self._lap
        while self.active.any() and not self.stop_requested:
            if lap is not None:
                lap("other")
            if self.f_block_pos[0] >= _ACT_BLOCK:
                self.block_pos = _ACT_BLOCK
                self._refill_act_block()
                self.f_block_pos[0] = 0
            self._charge_ahead()  # 1. charge the agents that may start in the block
            self._draw_ahead()  # 2. then draw the randomness that will be applied
            self._refill_resets()
            n0 = int(self.n_sub.sum())
            oi = self.out_int
            if lap is not None:
                lap("other")
            status = fused_block(
                _ACT_BLOCK,
                self.f_state, self.f_steps, self.row_gravity, self.row_trial, self.row_worker,
                self.row_agent, self.row_round, self.row_version, self.slot, self.row_theta,
                self.row_tt, self.row_wd, self.obs, self.acts, self.rews, self.S,
                self.act_block, self.f_block_pos, self.alpha_g, self.sample_g,
                agg.theta, agg.buffer, agg.count, agg.version, agg.eta, agg.buffer_size,
                agg.kind, agg.m1, agg.m2, agg.steps,
                self.n_sub, self.next_agent, self.active, self.at_target, self.zoff,
                self.zeta_flat, self.alpha0, self.alpha_decay, self.max_sub, self.stop_target,
                self.window, self.target, self.gamma, self.lam, self.beta, self.literal,
                self.rounds, self.rows_g, self.gtable, self.glen, self.agtable, self.aglen,
                self.f_reset, self.f_reset_ptr, self.paid, self.agent_cap, self.cfg_of,
                self.mech_kind, self.coord_clip, self.clip_bound, self.noise, self.noise_ptr,
                self.noise_len, self.prs_dh, self.prs_p0, self.prs_slope, self.rows_c,
                self.record_c, self.recorded_version, self.recorded_index, self.n_thetas,
                oi[0], oi[1], oi[2], oi[3], oi[4], oi[5], self.out_report, self.out_score,
                self.out_grav, self.out_grad, self.out_n,
                self.snap_theta, self.snap_cfg, self.snap_n, self.f_env_steps, self.bad,
            )  # fmt: skip
            if lap is not None:
                lap("kernel")
                self.timings["calls"] += 1
            self.env_steps = int(self.f_env_steps[0])
            self._collect()
            if lap is not None:
                lap("transcript")
            if progress is not None:
                progress.update(int(self.n_sub.sum()) - n0)
            if status in (FUSED_NONFINITE, FUSED_PRS_OVERFLOW):
                gi = int(self.bad[0])
                what = (
                    "a NaN or inf gradient"
                    if status == FUSED_NONFINITE
                    else ("a PRS projection that overflows")
                )
                raise InvalidParameterError(
                    f"x must be finite: trial {int(self.local[gi])} of config "
                    f"{int(self.cfg_of[gi])} produced {what}; nothing of that step was "
                    "released (its agents were charged)"
                )
            if status == FUSED_TRIAL_ENDED:
                # the kernel skips the rows of ended trials; drop them once they are a quarter
                # (their acting streams are never read again, so results do not change)
                live = int(self.active[self.row_trial].sum())
                if 4 * live < 3 * self.row_trial.size:
                    if lap is not None:
                        lap("other")
                    self._compact_fused()
                    if lap is not None:
                        lap("compaction")
        if lap is not None:
            lap("other")


#: the parts of :meth:`_FusedEngine.run` its profile hook times (``profile = True``)
_PROFILE_PARTS = (
    "kernel",  # the compiled fused_block calls
    "charge_ids",  # building the (agent id, event) pairs to charge
    "ledger_charges",  # Accountant.charge_many (the ledger's code)
    "mechanism_draws",  # rng.laplace / rng.random of the configs' mechanism generators
    "noise_shift",  # moving a config's unused draws to the front of its buffer
    "reset_draws",  # the trials' reset uniforms
    "acting_uniforms",  # the trials' acting uniforms
    "transcript",  # copying the kernel's outputs into the transcript and secrets lists
    "compaction",  # dropping the rows of ended trials
    "other",  # the rest of the Python between kernel calls
)

# per-submission arrays recorded: the transcript's rows (run_dir.TRANSCRIPT_KEYS less the theta
# table) and the secrets the attacker must not see
_TR_KEYS = (*(k for k in TRANSCRIPT_KEYS if k != "thetas"), "gravity", "gradient")


def _privacy_summary(c: PgcA3cConfig, agents: np.ndarray, accountant: Any) -> dict[str, Any]:
    eps = c.epsilon
    out: dict[str, Any] = {
        "mechanism": c.mechanism,
        "local": True,
        "epsilon_per_submission": c.true_epsilon_per_submission if math.isfinite(eps) else "inf",
        "rounds": c.rounds,
        "epsilon_per_agent": c.true_epsilon_per_submission * c.rounds
        if math.isfinite(eps)
        else "inf",
        "composition": "sequential (basic), section 3.2.1",
        "agents_per_trial": agents.tolist(),
        "clip_kind": c.clip_kind,
        "aggregator": c.aggregator,
        "note": (
            "each agent's reports satisfy epsilon_per_agent-LDP with respect to its gravity; "
            "agents were charged on the ledger before every release"
            if math.isfinite(eps)
            else f"non-private baseline: {c.clip_kind}-clipped gradients (C = effective clip), "
            "no noise"
        ),
    }
    if c.clip_kind == "coordinate" and c.mechanism == "laplace":
        out["epsilon_claimed_per_submission"] = c.epsilon_per_submission
        out["epsilon_claimed_per_agent"] = eps
        out["warning"] = _coordinate_warning(c)
    return out


def _coordinate_warning(c: PgcA3cConfig) -> str:
    true = c.true_epsilon_per_submission
    return (
        f"clip_kind='coordinate': each report is {true:g}-LDP, NOT {c.epsilon_per_submission:g}-"
        f"LDP (each of the {DIM} coordinates is clipped to +-C/2, so the L1 sensitivity is "
        f"{DIM} C and Lap(C/{c.epsilon_per_submission:g}) noise gives {DIM} x "
        f"{c.epsilon_per_submission:g}); the ledger is charged {true:g} per report"
    )


# ==============================================================================================
# Public entry points
# ==============================================================================================


def _accountant_api() -> tuple[Any, Any, Any]:
    """(Accountant, Ledger, event_for) of ldp_audit.accountant (imported lazily)."""
    from ldp_audit.accountant.accountant import Accountant
    from ldp_audit.accountant.events import event_for
    from ldp_audit.accountant.ledger import Ledger

    return Accountant, Ledger, event_for


def _make_accountant(ledger: Any, budget: float | None) -> Any:
    Accountant, _, _ = _accountant_api()
    if ledger is None:
        # No run directory and no ledger object: nobody can read this ledger after the run, so
        # it keeps per-agent counts only (budgets enforced exactly as a ledger's, not evidence).
        from ldp_audit.accountant.ledger import TallyLedger

        ledger = TallyLedger()
    return Accountant(ledger=ledger, budget=budget)


def train_grid(
    configs: Sequence[PgcA3cConfig],
    *,
    seed: int | Sequence[int] = 0,
    run_dirs: Sequence[str | Path | None] | None = None,
    ledgers: Sequence[Any] | None = None,
    progress: bool | None = None,
    transcript: bool | None = None,
    workers: int = 1,
    run_mode: str = "new",
    engine: str = "lockstep",
    _sink: Any = None,
    force: bool = False,
) -> list[TrainResult]:
    """Run several configs (e.g. the 10 settings of Tables 1-3) in ONE lock-step batch.

    This is what ``reproduce pgc-a3c`` should call: all trials of all settings step together, so
    the per-step Python overhead is paid once for the whole grid. Config i's result is exactly
    ``train(configs[i], seed=seeds[i])`` (its randomness never depends on the other configs);
    configs must share ``episode_steps``.

    Args:
        configs: the settings.
        seed: one seed for all configs (common random numbers: trial k of every setting starts
            from the same theta) or one per config.
        run_dirs: optional run directory per config (None entries write nothing).
        ledgers: optional ``ldp_audit.accountant.Ledger`` per config; default: the run
            directory's ledger.sqlite, else an in-memory ledger.
        progress: show a tqdm bar on stderr (submissions); None = off.
        transcript: record the transcript (default: only for configs with a run directory).
            At paper scale a transcript holds 90,000 x trials reports; record it for attack runs.
        workers: processes to spread the configs over (one lock-step batch each; configs are
            dealt round-robin). The results are exactly those of ``workers=1``: a config's run
            never depends on the configs beside it. ``env_steps`` of every result is then the
            total over all workers. Not with ``ledgers`` (ledger objects stay in this process).
        run_mode: for ``run_dirs``: "new" (default; each path must not exist or be empty: a run
            directory is evidence and is never overwritten or appended to), "overwrite"
            (replace an earlier run), "resume" (same config and seed as the run there: rerun it
            from its seed, charging the same ledger, whose earlier charges keep counting).
        engine: "lockstep" (default: one Python iteration per lock-step) or "fused" (each
            block of up to 256 lock-steps in one compiled call, several times faster): the
            same results bit for bit (zeta, theta, transcript); the fused engine charges each
            agent's reports when the agent starts (a block of agents ahead, reserved with
            ``ldp_audit.release.reserve``), so its ledger also holds agents started or
            reserved but not submitted when a trial stopped (charged, never released: the safe
            direction).

        force: run even when the estimated memory or time of the batch exceeds this machine's
            limits (:mod:`ldp_audit.limits`; otherwise InvalidParameterError before any work).

    Returns:
        One :class:`TrainResult` per config, in order.
    """
    configs = list(configs)
    if not configs or not all(isinstance(c, PgcA3cConfig) for c in configs):
        raise InvalidParameterError("configs must be a non-empty sequence of PgcA3cConfig")
    from ldp_audit.limits import check_resources
    from ldp_audit.training.sizes import pgc_estimates

    keep = [
        (d is not None) if transcript is None else bool(transcript)
        for d in (list(run_dirs) if run_dirs is not None else [None] * len(configs))
    ]
    if len(keep) == len(configs):  # (a length mismatch is named below)
        check_resources(pgc_estimates(configs, keep), force=force)  # before any allocation
    n = len(configs)
    seeds = [seed] * n if isinstance(seed, (int, np.integer)) else list(seed)
    if len(seeds) != n:
        raise InvalidParameterError(f"seed must be an int or one per config ({n}), got {seed!r}")
    for s in seeds:
        _check_int(s, "seed", 0)
    dirs = list(run_dirs) if run_dirs is not None else [None] * n
    if len(dirs) != n:
        raise InvalidParameterError(f"run_dirs must have one entry per config ({n})")
    workers = _check_int(workers, "workers", 1)
    if not isinstance(engine, str) or engine not in ENGINES:
        raise InvalidParameterError(f"engine must be one of {ENGINES}, got {engine!r}")
    for c in configs:
        if c.clip_kind == "coordinate" and c.mechanism == "laplace":
            warnings.warn(_coordinate_warning(c), PrivacyClaimWarning, stacklevel=3)
    from ldp_audit.rundir import check_new_dir
    from ldp_audit.training import run_dir as rd

    if run_mode not in ("new", "overwrite", "resume"):
        raise InvalidParameterError(
            f"run_mode must be 'new', 'overwrite' or 'resume', got {run_mode!r}"
        )
    given = [d for d in dirs if d is not None]
    if len({str(Path(d).resolve()) for d in given}) != len(given):
        raise InvalidParameterError("run_dirs must be distinct paths")
    if run_mode != "resume":
        for d in given:  # every output path is checked before any work
            check_new_dir(d, name="run_dir", overwrite=(run_mode == "overwrite"))
    if workers > 1 and n > 1:
        if ledgers is not None:
            raise InvalidParameterError("workers > 1 cannot take ledger objects; use run_dirs")
        return _train_grid_parallel(
            configs, seeds, dirs, progress, transcript, workers, run_mode, engine
        )
    writers = [
        None if d is None else rd.open_writer(d, c, s, mode=run_mode)
        for d, c, s in zip(dirs, configs, seeds, strict=True)
    ]
    accountants = []
    durable = any(d is not None for d in dirs) or (
        ledgers is not None and any(x is not None for x in ledgers)
    )
    if not durable and n > 1 and all(c.budget is None for c in configs):
        # nobody will read these ledgers: one in-memory ledger, one transaction per step
        accountants = [_make_accountant(None, None)] * n
    for i, c in enumerate(configs if not accountants else ()):
        led = ledgers[i] if ledgers is not None else None
        if led is None and writers[i] is not None:
            led = writers[i].open_ledger()
        accountants.append(_make_accountant(led, c.budget))
    record = [(d is not None) if transcript is None else bool(transcript) for d in dirs]
    t0 = time.perf_counter()
    engine_cls = _FusedEngine if engine == "fused" else _Engine
    engine = engine_cls(configs, seeds, accountants, record)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=int(sum(c.trials * c.max_submissions for c in configs)),
            desc="pgc-a3c submissions",
            unit="sub",
        )
    # Ctrl-C / SIGTERM stop the engine at the next lock-step boundary (a second signal acts at
    # once), so an interrupted run still writes the transcript of every report it released: the
    # ledger and the transcript agree (charged-but-not-released rows of the step in flight are
    # the only difference, the safe direction).
    caught: list[tuple[int, Any]] = []
    restore = _install_stop_handlers(engine, caught)
    try:
        engine.run(bar if _sink is None else _sink)
    except BaseException:
        # Ctrl-C or a failure (BudgetExceeded included): the ledger already holds every charge
        # made (charged-but-not-released rows are the safe direction); mark each run folder so
        # no reader takes it for a finished run.
        for w in writers:
            if w is not None:
                w.finish(status="interrupted")
        raise
    finally:
        restore()
        if bar is not None:
            bar.close()
    results = engine.results(time.perf_counter() - t0)
    status = "interrupted" if caught else "complete"
    for w, res in zip(writers, results, strict=True):
        if w is not None:
            rd.write_run(w, res, status=status)
    if caught:
        signum, handler = caught[0]
        if callable(handler):
            handler(signum, None)  # the handler in force before (raises, e.g. KeyboardInterrupt)
        raise KeyboardInterrupt
    return results


def _install_stop_handlers(engine: Any, caught: list[tuple[int, Any]]) -> Any:
    """SIGINT/SIGTERM -> ``engine.stop_requested`` (main thread only); returns the restorer."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    sigs = [signal.SIGINT, signal.SIGTERM]
    old = {sig: signal.getsignal(sig) for sig in sigs}

    def on_signal(signum: int, frame: Any) -> None:
        if engine.stop_requested:  # a second signal: act at once
            h = old[signum]
            if callable(h):
                h(signum, frame)
            raise KeyboardInterrupt
        engine.stop_requested = True
        caught.append((signum, old[signum]))

    for sig in sigs:
        signal.signal(sig, on_signal)

    def restore() -> None:
        for sig in sigs:
            signal.signal(sig, old[sig])

    return restore


def _grid_worker(
    queue: Any,
    idx: list[int],
    configs: list[PgcA3cConfig],
    seeds: list[int],
    dirs: list[Any],
    transcript: bool | None,
    run_mode: str = "new",
    engine: str = "lockstep",
) -> None:
    """One process of :func:`_train_grid_parallel`: runs its configs, reports progress and
    results (or the exception) through ``queue``."""
    try:

        class _Sink:
            def __init__(self) -> None:
                self.pending, self.last = 0, time.monotonic()

            def update(self, k: int) -> None:
                self.pending += k
                now = time.monotonic()
                if now - self.last > 0.2:
                    queue.put(("progress", self.pending))
                    self.pending, self.last = 0, now

        with warnings.catch_warnings():  # the parent warned already
            warnings.simplefilter("ignore", PrivacyClaimWarning)
            res = train_grid(
                configs,
                seed=seeds,
                run_dirs=dirs,
                progress=False,
                transcript=transcript,
                run_mode=run_mode,
                engine=engine,
                _sink=_Sink(),
                force=True,  # the parent checked the whole grid's size (and honoured force)
            )
        queue.put(("done", idx, res))
    except BaseException as exc:  # noqa: BLE001 - forwarded to the parent, which re-raises
        import traceback

        queue.put(("error", idx, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))


def _train_grid_parallel(
    configs: list[PgcA3cConfig],
    seeds: list[int],
    dirs: list[Any],
    progress: bool | None,
    transcript: bool | None,
    workers: int,
    run_mode: str = "new",
    engine: str = "lockstep",
) -> list[TrainResult]:
    import multiprocessing as mp
    import queue as queue_mod

    # fork where the platform has it (workers start at once and work from <stdin> or a
    # notebook); the parent starts no thread before forking (the progress bar comes after)
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    q = ctx.Queue()
    n = len(configs)
    parts = [list(range(w, n, workers)) for w in range(min(workers, n))]
    procs = []
    for idx in parts:
        p = ctx.Process(
            target=_grid_worker,
            args=(
                q,
                idx,
                [configs[i] for i in idx],
                [seeds[i] for i in idx],
                [dirs[i] for i in idx],
                transcript,
                run_mode,
                engine,
            ),
            daemon=True,
        )
        p.start()
        procs.append(p)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=int(sum(c.trials * c.max_submissions for c in configs)),
            desc="pgc-a3c submissions",
            unit="sub",
        )
    t0 = time.perf_counter()
    out: list[Any] = [None] * n
    left = len(procs)
    try:
        while left:
            try:
                msg = q.get(timeout=1.0)
            except queue_mod.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"a train_grid worker died (exit code {dead[0].exitcode})"
                    ) from None
                continue
            if msg[0] == "progress":
                if bar is not None:
                    bar.update(msg[1])
            elif msg[0] == "error":
                raise RuntimeError(f"train_grid worker failed: {msg[2]}")
            else:
                _, idx, res = msg
                for i, r in zip(idx, res, strict=True):
                    out[i] = r
                left -= 1
    finally:
        if bar is not None:
            bar.close()
        for p in procs:
            if p.is_alive():
                p.terminate()
            p.join()
    secs = time.perf_counter() - t0
    # env_steps of a worker's results count that worker's batch; report the grid's total
    total_steps = sum(int(out[idx[0]].env_steps) for idx in parts)
    return [dataclasses_replace(r, env_steps=total_steps, seconds=secs) for r in out]


def train(
    cfg: PgcA3cConfig,
    *,
    seed: int = 0,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool | None = None,
    transcript: bool | None = None,
    run_mode: str = "new",
    engine: str = "lockstep",
    force: bool = False,
) -> TrainResult:
    """Train PGC-A3C (Algorithm 1) for ``cfg.trials`` independent trials in lock-step.

    Args:
        cfg: the run's config.
        seed: everything is derived from it (bit-for-bit reproducible).
        run_dir: if given, write config.json, ledger.sqlite, transcript.npz, secrets.npz,
            metrics.json and model.npz there (docs/interfaces.md).
        ledger: an ``ldp_audit.accountant.Ledger`` to charge (default: run_dir/ledger.sqlite,
            else in memory).
        progress: tqdm bar on stderr.
        transcript: record what crossed the trust boundary (default: when run_dir is given).
        run_mode: "new" (run_dir must not exist or be empty), "overwrite" or "resume" (see
            :func:`train_grid`).
        engine: "lockstep" or "fused" (see :func:`train_grid`).
        force: run even when the estimated memory or time exceeds the limits (see
            :func:`train_grid`).

    Returns:
        :class:`TrainResult`.
    """
    if not isinstance(cfg, PgcA3cConfig):
        raise InvalidParameterError(f"cfg must be a PgcA3cConfig, got {type(cfg).__name__}")
    return train_grid(
        [cfg],
        seed=seed,
        run_dirs=[run_dir],
        ledgers=[ledger],
        progress=progress,
        transcript=transcript,
        run_mode=run_mode,
        engine=engine,
        force=force,
    )[0]
