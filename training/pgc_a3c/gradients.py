"""The gradient of the PGC-A3C episode loss L = L_p + lambda L_v (eqs. 12-18), by hand.

:func:`loss_gradients` is the engine's own code path (the compiled
:func:`ldp_audit.training.pgc_a3c._kernels.episode_gradients_kernel`); :func:`_loss_gradients_numpy`
is the batched NumPy formulation it replaced, kept to cross-check the kernel in tests and
benchmarks. Both equal torch autograd of ``benchmarks/reference_pgc.py`` (tests/test_pgc_a3c.py).

The loss sums run over the T_n steps at which an action was taken. The target of eq. 18 is
V_hat(s_t) = sum_{j=t}^{T-1} gamma^{j-t} r_j + gamma^{T-t} V(s_T), the discount on the bootstrap
taken from eq. 12 so that A(s_t) = V_hat(s_t) - V(s_t) (eq. 12 and eq. 18 then agree); V(s_T) is
0 when the pole fell (a terminal state has value 0, eq. 8) and the network's value when the
episode was cut. Advantage and target are constants (no gradient). ``target="literal-eq18"``
is eq. 18 as printed (+ V(s_T), undiscounted, also after a failure), an ablation.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c._kernels import episode_gradients_kernel
from ldp_audit.training.pgc_a3c.config import _TARGETS
from ldp_audit.training.pgc_a3c.model import DIM, OBS_DIM, _check_theta, unpack_theta

__all__ = ["bucket_length", "loss_gradients"]


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
