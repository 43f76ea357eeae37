"""PGC-A3C: locally private distributed A3C (Ono & Takahashi 2020, Algorithms 1-3), batched.

Read top to bottom: the network (section 4, "Implementation"), the episode loss and its gradient
(eqs. 15-18, written by hand in numpy and checked against torch autograd), the alpha-greedy
rollout, the agent-side privatisation (Algorithms 2-3 from :mod:`ldp_audit.mechanisms`, charged to
the ledger *before* release), the aggregator (eq. 22), and the lock-step engine that emulates the
9 asynchronous agents deterministically.

Speed comes from running every agent of every trial (and of every config of a grid) in lock-step:
one vectorised CartPole over all rows, one batched forward per step, one batched backward over the
agents whose episodes ended at that step. There is no per-step Python loop over agents.

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
config in :func:`train_grid` gets exactly the run :func:`train` gives it with the same seed.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit._validation import check_epsilon, check_positive, check_rng
from ldp_audit.errors import InvalidParameterError
from training.cartpole import PAPER_GRAVITIES, PrivateGravityCartPole, initial_states
from training.run_dir import TRANSCRIPT_KEYS

__all__ = [
    "DIM",
    "PgcA3cConfig",
    "TrainResult",
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
]

#: Shapes of the three weight matrices (section 4): theta_c 16x4, theta_p 2x16, theta_v 1x16.
HIDDEN, OBS_DIM, N_ACTIONS = 16, 4, 2
_SIZES = (HIDDEN * OBS_DIM, N_ACTIONS * HIDDEN, HIDDEN)
#: d = 112.
DIM = sum(_SIZES)
_MECHANISMS = ("laplace", "prs", "none")
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
    stop_at_target: bool = False
    """Stop a trial once mu_n >= target_score is certain (FST known, eq. 26); later zeta are NaN."""
    target_score: float = 195.0
    """Theta of eq. 26."""
    window: int = 10
    """m of eq. 25."""
    budget: float | None = None
    """Optional per-agent epsilon budget enforced by the accountant (None = no budget)."""

    def __post_init__(self) -> None:
        if self.mechanism not in _MECHANISMS:
            raise InvalidParameterError(
                f"mechanism must be one of {_MECHANISMS}, got {self.mechanism!r}"
            )
        if self.mechanism == "none":
            object.__setattr__(self, "epsilon", math.inf)
        else:
            object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, "epsilon"))
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
        if not 0.0 < float(self.gamma) <= 1.0:
            raise InvalidParameterError(f"gamma must be in (0, 1], got {self.gamma!r}")
        for name in ("beta", "alpha_start"):
            v = float(getattr(self, name))
            if not (math.isfinite(v) and v >= 0):
                raise InvalidParameterError(f"{name} must be finite and >= 0, got {v!r}")
        if float(self.alpha_start) > 1.0:
            raise InvalidParameterError(f"alpha_start must be <= 1, got {self.alpha_start!r}")
        g = tuple(float(x) for x in self.gravities)
        if not g or not all(math.isfinite(x) and x > 0 for x in g):
            raise InvalidParameterError(
                f"gravities must be a non-empty tuple of finite values > 0, got {self.gravities!r}"
            )
        object.__setattr__(self, "gravities", g)
        if self.agent_gravities is not None:
            ag = tuple(float(x) for x in self.agent_gravities)
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
    def epsilon_per_submission(self) -> float:
        """epsilon / T (sequential composition, section 3.2.1)."""
        return self.epsilon / self.rounds

    def make_mechanism(self) -> Any:
        """The per-submission mechanism object of :mod:`ldp_audit.mechanisms`."""
        from ldp_audit import mechanisms as M

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


class _Policy:
    """Per-row greedy policy in a layout that makes one batched step cheap."""

    def __init__(self, theta: np.ndarray) -> None:
        wc, wp, _ = unpack_theta(theta)
        self.wcT = np.ascontiguousarray(wc.transpose(2, 0, 1))  # (4, B, 16)
        self.wdiff = np.ascontiguousarray(wp[:, 1, :] - wp[:, 0, :])  # logit_1 - logit_0
        self._pre = np.empty(self.wdiff.shape)
        self._tmp = np.empty(self.wdiff.shape)

    def set_rows(self, rows: np.ndarray, theta: np.ndarray) -> None:
        wc, wp, _ = unpack_theta(theta)
        self.wcT[:, rows, :] = wc.transpose(2, 0, 1)
        self.wdiff[rows] = wp[:, 1, :] - wp[:, 0, :]

    def select(self, rows: np.ndarray) -> None:
        self.wcT = np.ascontiguousarray(self.wcT[:, rows, :])
        self.wdiff = self.wdiff[rows].copy()
        self._pre = np.empty(self.wdiff.shape)
        self._tmp = np.empty(self.wdiff.shape)

    def greedy(self, obs_t: np.ndarray) -> np.ndarray:
        """argmax_a pi(a|s) per row for observations obs_t (4, B); ties go to action 0."""
        pre, tmp = self._pre, self._tmp
        np.multiply(self.wcT[0], obs_t[0][:, None], out=pre)
        for k in range(1, OBS_DIM):
            np.multiply(self.wcT[k], obs_t[k][:, None], out=tmp)
            pre += tmp
        np.maximum(pre, 0.0, out=pre)  # ReLU
        pre *= self.wdiff
        return pre.sum(axis=1) > 0.0  # a last-axis sum: rounding independent of the batch


def greedy_actions(theta: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """argmax_a pi(a|s; theta) for rows of theta (B,112) and observations (B,4); ties -> 0."""
    t = _check_theta(theta)
    o = np.asarray(obs, dtype=np.float64)
    return _Policy(t).greedy(np.ascontiguousarray(o.T)).astype(np.int64)


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
) -> np.ndarray:
    """Gradient of the episode loss L = L_p + lambda L_v (eqs. 15-18) per row, by hand.

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
) -> dict[str, np.ndarray]:
    """Play one alpha-greedy episode per row, all rows in lock-step.

    Args:
        theta: (B, 112) parameters per row.
        gravity: (B,) gravity per row.
        init_states: (B, 4) initial physical states.
        uniforms: (steps, B) in [0, 1): explore iff u < alpha, then action = 1 iff u >= alpha/2.
        alpha: exploration probability, scalar or (B,).
        steps: episode cap.

    Returns:
        dict with obs (B, steps+1, 4), actions (B, steps), rewards (B, steps), lengths (B,),
        bootstrap (B,) (True where cut at ``steps``), score (B,).
    """
    theta = _check_theta(theta)
    b = theta.shape[0]
    env = PrivateGravityCartPole(gravity, episode_steps=steps)
    env.reset_rows(np.arange(b), init_states)
    pol = _Policy(theta)
    alpha_b = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (b,))
    obs = np.zeros((b, steps + 1, OBS_DIM))
    acts = np.zeros((b, steps), dtype=np.int64)
    rews = np.zeros((b, steps))
    lengths = np.zeros(b, dtype=np.int64)
    boot = np.zeros(b, dtype=bool)
    alive = np.arange(b)
    cur = env.observation.astype(np.float64)
    for t in range(steps):
        obs[alive, t] = cur
        u = uniforms[t, alive]
        a = np.where(u < alpha_b[alive], u >= alpha_b[alive] / 2.0, pol.greedy(cur.T.copy()))
        a = a.astype(np.int64)
        acts[alive, t] = a
        nxt, r, term, trunc = env.step(a)
        rews[alive, t] = r
        done = term | trunc
        cur = nxt.astype(np.float64)
        if done.any():
            ended = alive[done]
            obs[ended, t + 1] = cur[done]
            lengths[ended] = t + 1
            boot[ended] = trunc[done] & ~term[done]
            keep = np.flatnonzero(~done)
            alive, cur = alive[keep], cur[keep]
            if alive.size == 0:
                break
            env.select(keep)
            pol.select(keep)
    return {
        "obs": obs,
        "actions": acts,
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

    Returns:
        (grads (B, 112), scores (B,)).
    """
    rng = check_rng(rng)
    t = _check_theta(theta)
    g = np.broadcast_to(np.asarray(gravity, dtype=np.float64).reshape(-1), (t.shape[0],))
    steps = _check_int(steps, "steps", 1)
    init = initial_states(rng.random((t.shape[0], OBS_DIM)))
    uni = rng.random((steps, t.shape[0]))
    ro = rollout(t, g.copy(), init, uni, alpha, steps)
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

_REPORT_SEAL = object()


class PrivateReport:
    """A batch of privatised reports: the only thing the aggregator accepts.

    Only :func:`privatize_reports` constructs one (it holds a module-private seal), after the
    accountant charged every agent in it; the noisy array is read-only. A raw gradient (an
    ndarray, or anything else) handed to :meth:`Aggregator.receive` is refused.
    """

    __slots__ = ("_noisy", "trial", "agent", "epsilon", "_sealed")

    def __init__(
        self, noisy: np.ndarray, trial: np.ndarray, agent: np.ndarray, epsilon: float, *, seal: Any
    ) -> None:
        if seal is not _REPORT_SEAL:
            raise TypeError(
                "PrivateReport is created only by privatize_reports (agent side, after the charge)"
            )
        arr = np.array(noisy, dtype=np.float64, copy=True)
        arr.flags.writeable = False
        self._noisy = arr
        self.trial = np.asarray(trial, dtype=np.int64)
        self.agent = np.asarray(agent, dtype=np.int64)
        self.epsilon = float(epsilon)
        self._sealed = True

    @property
    def noisy(self) -> np.ndarray:
        """(n, 112) read-only privatised reports."""
        return self._noisy

    def __len__(self) -> int:
        return int(self._noisy.shape[0])


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
) -> PrivateReport:
    """Agent side: charge the ledger, then randomise, then release (Algorithm 1, step 3).

    The accountant is charged for every row *before* any noise is drawn or anything released;
    if the charge raises (e.g. :class:`~ldp_audit.errors.BudgetExceeded`) or the mechanism
    raises, no report exists and nothing reaches the aggregator.

    Args:
        grads: (n, 112) raw gradients (never leave this function).
        mechanism: per-submission mechanism (``privatize(x, rng)`` and ``epsilon``).
        accountant: ``ldp_audit.accountant.Accountant`` (``charge_many``).
        agent_ids: ledger agent id per row ("<trial>/<agent>").
        trial, agent: (n,) ids carried with the report.
        rng: noise generator.
        clip: if given, rows are clipped to L1 norm clip/2 first (eq. 19; the ``none`` baseline,
            whose mechanism adds no noise).
        event: the ledger event of one report (default ``event_for(mechanism)``).
    """
    group = dict(
        grads=grads,
        mechanism=mechanism,
        agent_ids=agent_ids,
        trial=trial,
        agent=agent,
        rng=rng,
        clip=clip,
        event=event,
    )
    return _privatize_groups([group], accountant)[0]


def _privatize_groups(groups: list[dict[str, Any]], accountant: Any) -> list[PrivateReport]:
    """:func:`privatize_reports` for several groups (mechanisms) with ONE ledger transaction:
    every row of every group is charged before any group draws noise."""
    charges = []
    for gr in groups:
        ev = gr["event"] if gr["event"] is not None else _accountant_api()[2](gr["mechanism"])
        charges.extend((a, ev) for a in gr["agent_ids"])
    accountant.charge_many(charges)  # durable, before release
    out = []
    for gr in groups:
        g, clip, mech = gr["grads"], gr["clip"], gr["mechanism"]
        x = g if clip is None else _clip_l1(g, clip / 2.0)
        noisy = mech.privatize(x, gr["rng"])
        out.append(
            PrivateReport(noisy, gr["trial"], gr["agent"], float(mech.epsilon), seal=_REPORT_SEAL)
        )
    return out


class Aggregator:
    """The central aggregator of Algorithm 1 for many independent trials at once.

    Buffers reports per trial and applies eq. 22, theta <- theta - eta * mean(B), whenever
    |B| >= MAX_BUF. It only ever touches :class:`PrivateReport` objects.
    """

    def __init__(self, theta: np.ndarray, eta: np.ndarray, buffer_size: np.ndarray) -> None:
        self.theta = np.array(theta, dtype=np.float64, copy=True)
        g = self.theta.shape[0]
        self.eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (g,)).copy()
        self.buffer_size = np.broadcast_to(np.asarray(buffer_size, dtype=np.int64), (g,)).copy()
        self.buffer = np.zeros_like(self.theta)
        self.count = np.zeros(g, dtype=np.int64)
        self.version = np.zeros(g, dtype=np.int64)  # bumps at every update of theta

    def receive(self, *reports: PrivateReport) -> None:
        """Apply batches of reports in row order (rows of one trial contiguous, in arrival
        order; different reports must concern different trials)."""
        for report in reports:
            if type(report) is not PrivateReport or not getattr(report, "_sealed", False):
                raise TypeError(
                    f"the aggregator accepts only PrivateReport objects from privatize_reports, "
                    f"got {type(report).__name__}"
                )
        if not reports:
            return
        if len(reports) == 1:
            tr, y = reports[0].trial, reports[0].noisy
        else:
            tr = np.concatenate([r.trial for r in reports])
            y = np.concatenate([r.noisy for r in reports])
        if tr.size == 0:
            return
        # rank of each row within its trial (rows of a trial are contiguous)
        first, counts = _runs(tr)
        rank = np.arange(tr.size) - np.repeat(first, counts)
        for k in range(int(rank.max()) + 1):  # at most n_agents passes, vectorised over trials
            sel = rank == k
            g = tr[sel]
            self.buffer[g] += y[sel]
            self.count[g] += 1
            full = self.count[g] >= self.buffer_size[g]
            if full.any():
                gf = g[full]
                # eq. 22: theta <- theta - eta * (1/|B|) sum_{g~ in B} g~
                self.theta[gf] -= self.eta[gf, None] * (self.buffer[gf] / self.count[gf, None])
                self.buffer[gf] = 0.0
                self.count[gf] = 0
                self.version[gf] += 1


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
        self.max_sub = per("max_submissions", np.int64)
        self.rounds = per("rounds", np.int64)
        self.n_agents = per("n_agents", np.int64)
        self.stop_target = per("stop_at_target", bool)
        self.target, self.window = per("target_score"), per("window", np.int64)
        buf = np.array([self.configs[c].effective_buffer_size for c in cfg_of], dtype=np.int64)
        self.agg = Aggregator(np.stack(thetas), per("eta"), buf)
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
        self.zeta = [np.full(self.configs[c].max_submissions, np.nan) for c in cfg_of]
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
        self.env = PrivateGravityCartPole(np.full(E, 9.8), episode_steps=self.S)
        self.policy = _Policy(self.row_theta)

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
        self.policy.set_rows(rows, th)
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
        while self.active.any():
            if self.block_pos >= _ACT_BLOCK:
                self._refill_act_block()
            u = self.act_block[self.block_pos]
            self.block_pos += 1
            E = self.row_trial.size
            ar = np.arange(E)
            st = self.env._env.state  # (4, E) float64, read without a copy
            obs_t = st.astype(np.float32).astype(np.float64)  # what Gymnasium shows the agent
            t = self.env._env.steps.astype(np.int64)  # a copy: step() increments in place
            self.obs[ar, t] = obs_t.T
            # alpha-greedy (section 4): alpha = max{0, 0.5 - n/1800}
            alpha = np.maximum(0.0, self.alpha0 - self.n_sub / self.alpha_decay)[self.row_trial]
            greedy = self.policy.greedy(obs_t)
            a = np.where(u < alpha, u >= 0.5 * alpha, greedy)
            self.acts[ar, t] = a
            obs, r, term, trunc = self.env.step(a.astype(np.int64))
            self.rews[ar, t] = r
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
        g = self.row_trial[rows]
        first, counts = _runs(g)
        rank = np.arange(g.size) - np.repeat(first, counts)
        keep = rank < (self.max_sub[g] - self.n_sub[g])  # the cap: later arrivals are discarded
        sub = rows[keep]
        gs, rk = g[keep], rank[keep]
        lengths = t[sub].astype(np.int64) + 1  # t was read before the step
        self.obs[sub, lengths] = obs[sub].astype(np.float64)
        big_l = int(lengths.max())
        boot = trunc[sub] & ~term[sub]
        grads = np.empty((sub.size, DIM))
        # rows bucketed by episode length (powers of two, as loss_gradients does): little work
        # goes into padding, and a row's gradient does not depend on the rows beside it
        blen = bucket_length(lengths)
        for lb in np.unique(blen).tolist():
            sel = np.flatnonzero(blen == lb)
            rs, gsel = sub[sel], gs[sel]
            grads[sel] = _gradients_fixed(
                self.row_theta[rs],
                self.obs[rs, : lb + 1],
                self.acts[rs, :lb],
                self.rews[rs, :lb],
                lengths[sel],
                boot[sel],
                self.gamma[gsel],
                self.lam[gsel],
                self.beta[gsel],
            )
        valid = np.arange(big_l)[None, :] < lengths[:, None]  # rows hold older episodes beyond
        scores = np.where(valid, self.rews[sub, :big_l], 0.0).sum(axis=1)  # zeta: steps survived
        sub_index = self.n_sub[gs] + rk
        cfg = self.cfg_of[gs]
        groups, cis, sels = [], [], []
        for ci in np.unique(cfg).tolist():  # configs own contiguous trials: rows stay in order
            sel = cfg == ci
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
        for gi, n, s in zip(gs.tolist(), sub_index.tolist(), scores.tolist(), strict=True):
            self.zeta[gi][n] = s
        np.add.at(self.n_sub, gs, 1)

        # ---- stop criteria ----
        ended_now = np.zeros(self.G, dtype=bool)
        tg = np.unique(gs)
        ended_now[tg[self.n_sub[tg] >= self.max_sub[tg]]] = True
        for gi in tg[self.stop_target[tg]].tolist():  # eq. 25-26 on the newly complete windows
            w, n = int(self.window[gi]), int(self.n_sub[gi])
            z = self.zeta[gi]
            lo = max(0, n - int(np.sum(gs == gi)) - w + 1)
            if n >= w:
                mu = np.convolve(z[lo:n], np.ones(w) / w, mode="valid")
                if mu.size and np.any(mu >= self.target[gi]):
                    ended_now[gi] = True
                    self.at_target[gi] = True
        self.active &= ~ended_now

        # ---- restart the workers whose episodes ended (trials still running) ----
        still = self.active[g]
        if still.any():
            rr = rows[still]
            new_agent = self.row_round[rr] + 1 >= self.rounds[g[still]]
            self._start_rows(rr, new_agent)
        if ended_now.any():
            self._compact()

    def _compact(self) -> None:
        keep = np.flatnonzero(self.active[self.row_trial])
        for name in (
            "row_trial",
            "row_worker",
            "row_agent",
            "row_round",
            "row_gravity",
            "row_theta",
            "row_version",
            "obs",
            "acts",
            "rews",
        ):
            setattr(self, name, getattr(self, name)[keep].copy())
        self.act_block = np.ascontiguousarray(self.act_block[:, keep])
        self.env.select(keep)
        self.policy.select(keep)

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
                    zeta=np.stack([self.zeta[g] for g in gs]),
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


# per-submission arrays recorded: the transcript's rows (run_dir.TRANSCRIPT_KEYS less the theta
# table) and the secrets the attacker must not see
_TR_KEYS = (*(k for k in TRANSCRIPT_KEYS if k != "thetas"), "gravity", "gradient")


def _privacy_summary(c: PgcA3cConfig, agents: np.ndarray, accountant: Any) -> dict[str, Any]:
    eps = c.epsilon
    return {
        "mechanism": c.mechanism,
        "local": True,
        "epsilon_per_submission": c.epsilon_per_submission if math.isfinite(eps) else "inf",
        "rounds": c.rounds,
        "epsilon_per_agent": eps if math.isfinite(eps) else "inf",
        "composition": "sequential (basic), section 3.2.1",
        "agents_per_trial": agents.tolist(),
        "note": (
            "each agent's reports satisfy epsilon_per_agent-LDP with respect to its gravity; "
            "agents were charged on the ledger before every release"
            if math.isfinite(eps)
            else "non-private baseline: L1-clipped gradients (C = effective clip), no noise"
        ),
    }


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
    Accountant, Ledger, _ = _accountant_api()
    if ledger is None:
        ledger = Ledger(":memory:")
    return Accountant(ledger=ledger, budget=budget)


def train_grid(
    configs: Sequence[PgcA3cConfig],
    *,
    seed: int | Sequence[int] = 0,
    run_dirs: Sequence[str | Path | None] | None = None,
    ledgers: Sequence[Any] | None = None,
    progress: bool | None = None,
    transcript: bool | None = None,
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

    Returns:
        One :class:`TrainResult` per config, in order.
    """
    configs = list(configs)
    if not configs or not all(isinstance(c, PgcA3cConfig) for c in configs):
        raise InvalidParameterError("configs must be a non-empty sequence of PgcA3cConfig")
    n = len(configs)
    seeds = [seed] * n if isinstance(seed, (int, np.integer)) else list(seed)
    if len(seeds) != n:
        raise InvalidParameterError(f"seed must be an int or one per config ({n}), got {seed!r}")
    for s in seeds:
        _check_int(s, "seed", 0)
    dirs = list(run_dirs) if run_dirs is not None else [None] * n
    if len(dirs) != n:
        raise InvalidParameterError(f"run_dirs must have one entry per config ({n})")
    from training import run_dir as rd

    accountants = []
    durable = any(d is not None for d in dirs) or (
        ledgers is not None and any(x is not None for x in ledgers)
    )
    if not durable and n > 1 and all(c.budget is None for c in configs):
        # nobody will read these ledgers: one in-memory ledger, one transaction per step
        accountants = [_make_accountant(None, None)] * n
    for i, c in enumerate(configs if not accountants else ()):
        led = ledgers[i] if ledgers is not None else None
        if led is None and dirs[i] is not None:
            led = rd.open_ledger(dirs[i])
        accountants.append(_make_accountant(led, c.budget))
    record = [(d is not None) if transcript is None else bool(transcript) for d in dirs]
    t0 = time.perf_counter()
    engine = _Engine(configs, seeds, accountants, record)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=int(sum(c.trials * c.max_submissions for c in configs)),
            desc="pgc-a3c submissions",
            unit="sub",
        )
    try:
        engine.run(bar)
    finally:
        if bar is not None:
            bar.close()
    results = engine.results(time.perf_counter() - t0)
    for d, res in zip(dirs, results, strict=True):
        if d is not None:
            rd.write_run(d, res)
    return results


def train(
    cfg: PgcA3cConfig,
    *,
    seed: int = 0,
    run_dir: str | Path | None = None,
    ledger: Any = None,
    progress: bool | None = None,
    transcript: bool | None = None,
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
    )[0]
