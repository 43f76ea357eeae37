"""The gradient of the PGC-A3C episode loss L = L_p + lambda L_v (eqs. 12-18), by hand.

:func:`loss_gradients` is the engine's own code path (the compiled
:func:`ldp_audit.training.pgc_a3c._kernels.episode_gradients_kernel`). :func:`softmax_gradients`
is the batched NumPy formulation (any number of actions), the Gymnasium trainer's
(:func:`ldp_audit.training.pgc_a3c_gym.model.loss_gradients`) and, with two actions, the
reference the kernel is checked against (``loss_gradients_numpy`` in
``benchmarks/reference_pgc.py``: they agree to 1e-11 relative, measured about 1e-15). Both equal
torch autograd of ``benchmarks/reference_pgc.py`` (tests/test_pgc_a3c.py).

The loss sums run over the T_n steps at which an action was taken. The target of eq. 18 is
V_hat(s_t) = sum_{j=t}^{T-1} gamma^{j-t} r_j + gamma^{T-t} V(s_T), the discount on the bootstrap
taken from eq. 12 so that A(s_t) = V_hat(s_t) - V(s_t) (eq. 12 and eq. 18 then agree); V(s_T) is
0 when the pole fell (a terminal state has value 0, eq. 8) and the network's value when the
episode was cut. Advantage and target are constants (no gradient). ``target="literal-eq18"``
is eq. 18 as printed (+ V(s_T), undiscounted, also after a failure), an ablation.
"""

from __future__ import annotations

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c._kernels import episode_gradients_kernel
from ldp_audit.training.pgc_a3c.config import TARGETS
from ldp_audit.training.pgc_a3c.model import (
    DIM,
    OBS_DIM,
    check_params,
    unpack_views,
)

__all__ = ["loss_gradients"]


def softmax_gradients(
    theta: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    *,
    shape: tuple[int, int, int],
    gamma: float,
    lam: float | np.ndarray,
    beta: float | np.ndarray,
) -> np.ndarray:
    """Eqs. 15-18 in batched NumPy for the paper's network with a softmax over any number of
    actions: h = ReLU(theta_c s), logits theta_p h, value theta_v h, no biases.

    The one NumPy formulation of the episode gradient: the Gymnasium trainer's
    (:func:`ldp_audit.training.pgc_a3c_gym.model.loss_gradients`) and the reference the
    CartPole kernel is checked against (``benchmarks/reference_pgc.py``). d/dz_t = -A_t (onehot(a_t)
    - pi_t) + beta
    pi_t (log pi_t + H_t), d/dV_t = -2 lambda A_t, A_t = V_hat_t - V(s_t), V_hat_t =
    sum_{j>=t} gamma^{j-t} r_j + gamma^{T-t} V(s_T) (V(s_T) = 0 where the episode terminated).

    Args:
        theta: (M, d) parameters, d = hidden (obs_dim + n_actions + 1).
        obs: (M, L+1, obs_dim); actions, rewards: (M, L); lengths: (M,) in [1, L] (checked by
            the caller); bootstrap: (M,) True where the episode was cut.
        shape: (obs_dim, n_actions, hidden).
        gamma: one discount for every row; lam, beta: one number, or one per row.

    Returns:
        (M, d) gradients.
    """
    obs_dim, n_actions, hidden = shape
    m, big_l = np.shape(actions)
    lengths = np.asarray(lengths, dtype=np.int64)
    wc, wp, wv = unpack_views(theta, obs_dim, n_actions, hidden)
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
    pw = g ** steps.astype(np.float64)
    if big_l == 0 or pw[-1] > 1e-250:
        v_hat = np.cumsum((pw * r)[:, ::-1], axis=1)[:, ::-1] / pw
    else:  # gamma^L underflows: backward recursion
        v_hat = np.empty_like(r)
        acc = np.zeros(m)
        for t in range(big_l - 1, -1, -1):
            acc = r[:, t] + g * acc
            v_hat[:, t] = acc
    v_hat = v_hat + g ** np.maximum(lengths[:, None] - steps[None, :], 0) * v_last[:, None]
    adv = v_hat - v[:, :big_l]
    zt = z[:, :big_l]
    zmax = zt.max(axis=2, keepdims=True)
    logp = zt - (zmax + np.log(np.exp(zt - zmax).sum(axis=2, keepdims=True)))
    pi = np.exp(logp)
    ent = -(pi * logp).sum(axis=2, keepdims=True)  # eq. 13
    a_idx = np.asarray(actions, dtype=np.int64)
    onehot = (a_idx[:, :, None] == np.arange(n_actions)).astype(np.float64)
    if np.ndim(beta):  # one per row
        beta = np.asarray(beta, dtype=np.float64)[:, None, None]
    if np.ndim(lam):
        lam = np.asarray(lam, dtype=np.float64)[:, None]
    dz = -adv[:, :, None] * (onehot - pi) + beta * pi * (logp + ent)  # eq. 16
    dz = np.where(valid[:, :, None], dz, 0.0)
    dv = np.where(valid, -2.0 * lam * adv, 0.0)  # eq. 17 x lambda
    ht = h[:, :big_l]
    g_wp = np.matmul(dz.transpose(0, 2, 1), ht)  # (M, A, H)
    g_wv = np.matmul(dv[:, None, :], ht)[:, 0, :]  # (M, H)
    dh = np.matmul(dz, wp) + dv[:, :, None] * wv[:, None, :]  # (M, L, H)
    dpre = np.where(pre[:, :big_l] > 0.0, dh, 0.0)
    g_wc = np.matmul(dpre.transpose(0, 2, 1), s[:, :big_l])  # (M, H, O)
    return np.concatenate([g_wc.reshape(m, -1), g_wp.reshape(m, -1), g_wv], axis=1)


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

    The engine's own code path
    (:func:`ldp_audit.training.pgc_a3c._kernels.episode_gradients_kernel`): a row's result
    never depends on the other rows or on how far the inputs were padded.

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
    if target not in TARGETS:
        raise InvalidParameterError(f"target must be one of {TARGETS}, got {target!r}")
    theta = check_params(theta, DIM)
    # the shapes and values of the episode batch
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
