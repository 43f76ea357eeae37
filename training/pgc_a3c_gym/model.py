"""The ``pgc-a3c-gym`` network sized from the spaces, its episode gradient (eqs. 15-18, any
number of actions), the rollout and the attacker's simulator :func:`simulator_for`.

Part of :mod:`ldp_audit.training.pgc_a3c_gym` (overview in
:mod:`~ldp_audit.training.pgc_a3c_gym.trainer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.signal import lfilter
from scipy.special import log_softmax, ndtri, softmax

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.gym_envs import SyncParamVectorEnv, make_param_vector_env
from ldp_audit.training.pgc_a3c.model import check_params, glorot_uniform, unpack_views
from ldp_audit.validation import check_rng

if TYPE_CHECKING:
    from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig

__all__ = [
    "Network",
    "loss_gradients",
    "rollout",
    "episode_gradients",
    "episode_loss",
    "simulator_for",
]

SEED_BOUND = 2**63 - 1  # reset seeds are drawn below this


#: The range a Gaussian head's log standard deviation is used in (as SAC's implementations
#: clamp it; outside it the parameter gets no gradient): std in [2e-9, 7.4], never 0 or inf.
LOG_STD_RANGE = (-20.0, 2.0)


@dataclass(frozen=True)
class Network:
    """The paper's network sized from the spaces (no biases). ``box``: a ``Box`` action space's
    (low, high) bounds, flattened (None: ``Discrete``); its head is a diagonal Gaussian, the
    mean ``theta_p h`` and one learned log-std per action dimension packed last. ``nvec``: a
    ``MultiDiscrete`` (or ``MultiBinary``: 2 each) space's component sizes, flattened; one
    softmax per component over its slice of the logits (``n_actions`` = their sum)."""

    obs_dim: int
    n_actions: int
    hidden: int = 16
    box: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    nvec: tuple[int, ...] | None = None

    @property
    def dim(self) -> int:
        """d = hidden (obs_dim + n_actions + 1) (+ n_actions log-stds for a Box)."""
        return self.hidden * (self.obs_dim + self.n_actions + 1) + self.n_actions * self.continuous

    @property
    def continuous(self) -> bool:
        """A Gaussian head (a ``Box`` action space)."""
        return self.box is not None

    @property
    def width(self) -> int:
        """Numbers per action: 1 (an index), a Box's dimensions, a MultiDiscrete's components."""
        return len(self.nvec) if self.nvec else self.n_actions if self.continuous else 1

    @property
    def segments(self) -> list[tuple[int, int]]:
        """Each categorical component's slice (start, stop) of the logits."""
        ends = np.cumsum(self.nvec or (self.n_actions,)).tolist()
        return list(zip([0, *ends[:-1]], ends, strict=True))

    @property
    def draws(self) -> int:
        """Uniforms per agent-step: one (explore or not), plus one per action dimension (the
        uniform exploration or the Gaussian's sample) for a Box or per MultiDiscrete component
        (its exploration or its inverse-CDF sample)."""
        return 1 + (self.width if self.continuous or self.nvec else 0)

    def init(self, rng: np.random.Generator) -> np.ndarray:
        """Glorot-uniform parameters (d,) (TensorFlow's default, as the CartPole engine); a
        Gaussian head's log-stds start at 0 (std 1)."""
        g = glorot_uniform(check_rng(rng), self.obs_dim, self.n_actions, self.hidden)
        return np.concatenate([g, np.zeros(self.dim - g.size)])

    def check(self, theta: Any, name: str = "theta") -> np.ndarray:
        """``theta`` as a C-contiguous (B, d) float64 batch of finite values ((d,): one row)."""
        return check_params(theta, self.dim, name)

    def actions(self, *shape: int) -> np.ndarray:
        """A zero buffer of actions: indices (a MultiDiscrete: trailing ``width``), or vectors
        (trailing n_actions) for a Box."""
        if self.continuous:
            return np.zeros((*shape, self.n_actions))
        return np.zeros((*shape, self.width) if self.nvec else shape, dtype=np.int64)

    def split(self, theta: np.ndarray) -> tuple[np.ndarray, ...]:
        """Views theta_c (B, H, O), theta_p (B, A, H), theta_v (B, H) and the log-stds (B, A)
        (empty for a Discrete head)."""
        base = theta.shape[1] - self.n_actions * self.continuous
        views = unpack_views(theta[:, :base], self.obs_dim, self.n_actions, self.hidden)
        return (*views, theta[:, base:])

    def logits(self, theta: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Logits (B, A) of one observation per row (theta (B, d), obs (B, O)); a Gaussian
        head's means."""
        wc, wp, _, _ = self.split(theta)
        h = np.maximum(np.einsum("bho,bo->bh", wc, obs), 0.0)
        return np.einsum("bah,bh->ba", wp, h)

    def act(
        self, theta: np.ndarray, obs: np.ndarray, u: np.ndarray, alpha: np.ndarray, sample: bool
    ) -> np.ndarray:
        """The alpha-greedy action of each row from ``draws`` uniforms per row (B, draws) (see
        the module); a Box: explore uniformly within the bounds, else the mean (or, ``sample``,
        mean + std N^-1(u)), not clipped (the env's step clips it, as SB3 and CleanRL do)."""
        z = self.logits(theta, obs)
        u = u.reshape(len(z), self.draws)
        explore, v = u[:, 0] < alpha, u[:, 1:]
        if self.continuous:
            lo, hi = np.asarray(self.box)
            std = np.exp(np.clip(self.split(theta)[3], *LOG_STD_RANGE))
            greedy = z + std * ndtri(np.maximum(v, 1e-300)) if sample else z
            return np.where(explore[:, None], lo + v * (hi - lo), greedy)
        ve = vs = v  # per component j: explore floor(ve_j n_j), else argmax, or the CDF at vs_j
        if not self.nvec:  # Discrete: the one uniform u, rescaled on each side of alpha
            u = u[:, 0]
            ve = (u / np.where(alpha > 0, alpha, 1.0))[:, None]
            vs = ((u - alpha) / np.where(alpha < 1, 1.0 - alpha, 1.0))[:, None]
        out = np.empty(ve.shape, dtype=np.int64)
        for j, (a0, a1) in enumerate(self.segments):
            n_j = a1 - a0
            if sample:
                cdf = np.cumsum(softmax(z[:, a0:a1], axis=1), axis=1)
                greedy = np.minimum((cdf <= vs[:, j, None]).sum(axis=1), n_j - 1)
            else:
                greedy = np.argmax(z[:, a0:a1], axis=1)
            out[:, j] = np.where(explore, np.minimum((ve[:, j] * n_j).astype(np.int64), n_j - 1),
                                 greedy)  # fmt: skip
        return out if self.nvec else out[:, 0]


def loss_gradients(
    net: Network,
    theta: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    *,
    gamma: float = 0.99,
    lam: float | np.ndarray = 0.5,
    beta: float | np.ndarray = 0.01,
) -> np.ndarray:
    """Gradient of L = L_p + lambda L_v (eqs. 15-18) per episode row, by hand: eqs. 15-18 in
    batched NumPy for the paper's network with a softmax over any number of actions.

    The one NumPy formulation of the episode gradient: the Gymnasium trainer's and, with
    ``Network(4, 2, 16)``, the reference the CartPole kernel is checked against
    (``benchmarks/reference_pgc.py``). d/dz_t = -A_t (onehot(a_t) - pi_t) + beta pi_t (log pi_t
    + H_t), d/dV_t = -2 lambda A_t, A_t = V_hat_t - V(s_t), V_hat_t = sum_{j>=t} gamma^{j-t}
    r_j + gamma^{T-t} V(s_T) (V(s_T) = 0 where the episode terminated).

    A ``Box`` head (``net.box``) takes actions (M, L, A) as taken (unclipped) and the policy term
    -A_t log N(a_t; mu_t, std^2) - beta H (H = sum log std + const): d/dmu = -A_t (a_t - mu_t) /
    std^2, d/dlog std = sum_t -A_t ((a_t - mu_t)^2 / std^2 - 1) - beta. A ``MultiDiscrete``
    head (``net.nvec``) takes actions (M, L, K), one index per component; log pi(a_t) and H_t are
    sums over the components, so each component's slice of the logits gets eq. 16 with its own
    softmax.

    Args:
        net: the network.
        theta: (M, d) parameters each episode was played with.
        obs: (M, L+1, O) observations s_0..s_L (row m valid up to ``lengths[m]`` inclusive).
        actions: (M, L) actions; rewards: (M, L).
        lengths: (M,) T_m >= 1 actions taken.
        bootstrap: (M,) True where the episode was cut (use V(s_T)), False if it terminated.
        gamma: one discount for every row; lam, beta: one number, or one per row.

    Returns:
        (M, d) gradients.
    """
    theta = net.check(theta)
    m, big_l = np.shape(actions)[:2]
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.shape != (m,) or lengths.min() < 1 or lengths.max() > big_l:
        raise InvalidParameterError(f"lengths must be (M,) in [1, {big_l}], got {lengths!r}")
    n_actions = net.n_actions
    wc, wp, wv, log_std = net.split(theta)
    s = np.ascontiguousarray(obs, dtype=np.float64)
    pre = np.matmul(s, wc.transpose(0, 2, 1))  # (M, L+1, H)
    h = np.maximum(pre, 0.0)
    z = np.matmul(h, wp.transpose(0, 2, 1))  # (M, L+1, A)
    v = np.matmul(h, wv[:, :, None])[:, :, 0]  # (M, L+1)
    ar = np.arange(m)
    v_last = np.where(np.asarray(bootstrap, dtype=bool), v[ar, lengths], 0.0)
    steps = np.arange(big_l)
    valid = steps[None, :] < lengths[:, None]
    r = np.where(valid, np.asarray(rewards, dtype=np.float64), 0.0)
    g = float(gamma)
    # sum_{j>=t} gamma^{j-t} r_j = r_t + gamma (the same from t + 1): a first-order recursive
    # filter run backwards over the steps (no gamma^-t factor to overflow)
    v_hat = lfilter([1.0], [1.0, -g], r[:, ::-1], axis=1)[:, ::-1]
    v_hat = v_hat + g ** np.maximum(lengths[:, None] - steps[None, :], 0) * v_last[:, None]
    adv = v_hat - v[:, :big_l]
    if np.ndim(beta):  # one per row
        beta = np.asarray(beta, dtype=np.float64)[:, None, None]
    if np.ndim(lam):
        lam = np.asarray(lam, dtype=np.float64)[:, None]
    if net.continuous:  # log N(a; mu, std^2), entropy sum(log std) + const
        ls = np.clip(log_std, *LOG_STD_RANGE)[:, None, :]
        diff, inv_var = np.asarray(actions, dtype=np.float64) - z[:, :big_l], np.exp(-2.0 * ls)
        dz = -adv[:, :, None] * diff * inv_var  # d/d mu
        d_ls = -adv[:, :, None] * (diff * diff * inv_var - 1.0) - beta
        inside = (log_std >= LOG_STD_RANGE[0]) & (log_std <= LOG_STD_RANGE[1])
        g_ls = np.where(valid[:, :, None], d_ls, 0.0).sum(axis=1) * inside
    else:
        a_idx = np.asarray(actions, dtype=np.int64)
        a_idx = a_idx if net.nvec else a_idx[:, :, None]
        dz = np.empty((m, big_l, n_actions))
        for j, (a0, a1) in enumerate(net.segments):  # one softmax per component
            logp = log_softmax(z[:, :big_l, a0:a1], axis=2)
            pi = np.exp(logp)
            ent = -(pi * logp).sum(axis=2, keepdims=True)  # eq. 13
            onehot = (a_idx[:, :, j, None] == np.arange(a1 - a0)).astype(np.float64)
            dz[:, :, a0:a1] = -adv[:, :, None] * (onehot - pi) + beta * pi * (logp + ent)  # eq. 16
        g_ls = log_std  # (M, 0)
    dz = np.where(valid[:, :, None], dz, 0.0)
    dv = np.where(valid, -2.0 * lam * adv, 0.0)  # eq. 17 x lambda
    ht = h[:, :big_l]
    g_wp = np.matmul(dz.transpose(0, 2, 1), ht)  # (M, A, H)
    g_wv = np.matmul(dv[:, None, :], ht)[:, 0, :]  # (M, H)
    dh = np.matmul(dz, wp) + dv[:, :, None] * wv[:, None, :]  # (M, L, H)
    dpre = np.where(pre[:, :big_l] > 0.0, dh, 0.0)
    g_wc = np.matmul(dpre.transpose(0, 2, 1), s[:, :big_l])  # (M, H, O)
    return np.concatenate([g_wc.reshape(m, -1), g_wp.reshape(m, -1), g_wv, g_ls], axis=1)


# ==============================================================================================
# Rollouts: the attacker's simulator (and the tests')
# ==============================================================================================


def rollout(
    cfg: GymPgcConfig,
    theta: np.ndarray,
    values: np.ndarray,
    rng: np.random.Generator,
    alpha: float | np.ndarray = 0.0,
) -> dict[str, np.ndarray]:
    """Play one episode per row (theta (B, d), private value (B,)), all rows in lock-step.

    Returns:
        obs (B, L+1, O), actions (B, L) (a Box: (B, L, A)), rewards (B, L), lengths (B,),
        bootstrap (B,), score (B,).
    """
    rng = check_rng(rng)
    net = cfg.network
    th = net.check(theta)
    b = th.shape[0]
    vals = np.broadcast_to(np.asarray(values, dtype=np.float64).reshape(-1), (b,)).copy()
    alpha_b = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (b,)).copy()
    steps = cfg.steps
    env = make_param_vector_env(cfg.info, cfg.private_param, b, max_episode_steps=steps)
    try:
        env.set_param(np.arange(b), vals)
        o, _ = env.reset(seed=rng.integers(0, SEED_BOUND, size=b).tolist())
        obs = np.zeros((b, steps + 1, net.obs_dim))
        acts = net.actions(b, steps)
        rews = np.zeros((b, steps))
        lengths = np.full(b, steps, dtype=np.int64)
        boot = np.ones(b, dtype=bool)
        alive = np.ones(b, dtype=bool)
        cur = np.asarray(o, dtype=np.float64).reshape(b, -1)
        sample = cfg.acting == "sample"
        for t in range(steps):
            u = rng.random((b, net.draws))
            a = net.act(th, cur, u, alpha_b, sample)
            obs[alive, t] = cur[alive]
            acts[alive, t] = a[alive]
            nxt, r, term, trunc, _ = env.step(a)
            nxt = np.asarray(nxt, dtype=np.float64).reshape(b, -1)
            rews[alive, t] = r[alive]
            done = alive & (term | trunc | (t + 1 == steps))
            # rows whose episode is over keep stepping, ignored; Gymnasium's SyncVectorEnv
            # (autoreset DISABLED) must reset each row that ended, again and again
            again = (term | trunc) & ~alive if isinstance(env, SyncParamVectorEnv) else None
            if done.any():
                obs[done, t + 1] = nxt[done]
                lengths[done] = t + 1
                boot[done] = ~term[done]
                alive &= ~done
                if not alive.any():
                    break
            need = done if again is None else done | again
            if need.any():
                seeds = rng.integers(0, SEED_BOUND, size=int(need.sum())).tolist()
                o, _ = env.reset(seed=seeds, options={"reset_mask": need})
                nxt[need] = np.asarray(o, dtype=np.float64).reshape(b, -1)[need]
            cur = nxt
    finally:
        env.close()
    return {
        "obs": obs,
        "actions": acts,
        "rewards": rews,
        "lengths": lengths,
        "bootstrap": boot,
        "score": rews.sum(axis=1),
    }


def episode_gradients(
    cfg: GymPgcConfig,
    theta: Any,
    values: Any,
    rng: np.random.Generator,
    alpha: float | np.ndarray = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """The attacker's simulator: one episode per row at ``theta`` with private ``values``.

    The MDP is public except the parameter, so anyone holding a broadcast theta can simulate
    what an agent with a candidate value would have submitted before noise.

    Returns:
        (clean gradients (B, d), scores (B,)).
    """
    ro = rollout(cfg, theta, values, rng, alpha)
    th = cfg.network.check(theta)
    th = np.broadcast_to(th, (ro["lengths"].size, th.shape[1]))
    keys = ("obs", "actions", "rewards", "lengths", "bootstrap")
    return episode_loss(cfg, th, *(ro[k] for k in keys)), ro["score"]


def episode_loss(cfg: GymPgcConfig, theta: np.ndarray, obs: np.ndarray, *ep: np.ndarray) -> Any:
    """:func:`loss_gradients` at ``cfg``'s constants, ``ep`` (actions, rewards, lengths,
    bootstrap) cut to the longest episode."""
    actions, rewards, lengths, boot = ep
    big_l = int(lengths.max())
    cut = (obs[:, : big_l + 1], actions[:, :big_l], rewards[:, :big_l])
    return loss_gradients(cfg.network, theta, *cut, lengths, boot, gamma=cfg.gamma,
                          lam=cfg.lam, beta=cfg.beta)  # fmt: skip


def simulator_for(cfg: GymPgcConfig) -> Any:
    """``simulator(theta (B, d), values (B,), rng, alpha) -> (grads, scores)`` for ``cfg``'s
    public MDP (the interface of :func:`ldp_audit.attacks.dynamics_shadow.simulate_shadow`)."""
    return partial(episode_gradients, cfg)
