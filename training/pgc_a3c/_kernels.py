"""Compiled (Numba) inner loops of the PGC-A3C engine: acting and the episode gradient, and
:func:`fused_block`, a whole block of lock-steps (acting, CartPole physics, gradients, release,
eq. 22, restarts) in one call for ``train_grid(engine="fused")``.

The lock-step engine in :mod:`ldp_audit.training.pgc_a3c` spends its time in two places:
choosing the actions of every row at every step, and the gradient of eqs. 15-18 of every episode
that ended at that step. With NumPy each is a few dozen calls on small arrays, so Python and call
overhead dominates; here each is one compiled loop. Its physics stays Gymnasium's
(``CartPoleVectorEnv``); the fused kernel steps Gymnasium's equations itself
(:func:`_cartpole_row`, checked step for step against ``CartPoleVectorEnv`` in
``tests/test_fused_pgc.py``).

The kernels work row by row, so a row's result never depends on which other rows share the
batch, and they keep IEEE semantics (no ``fastmath``): results are bit-for-bit reproducible.
``tests/test_pgc_kernels.py`` checks them against the NumPy formulation and torch autograd.

Parameter packing (see :func:`ldp_audit.training.pgc_a3c.unpack_theta`): theta[0:64] is theta_c
(16x4, row-major: theta_c[j, k] = theta[4 j + k]), theta[64:80] is theta_p row 0, theta[80:96]
row 1, theta[96:112] theta_v.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from ldp_audit.mechanisms.laplace import laplace_kernels
from ldp_audit.mechanisms.prs import prs_kernels

__all__ = [
    "act_and_record",
    "aggregate",
    "aggregate_adaptive",
    "ended_episodes",
    "episode_gradients_kernel",
    "record_scores",
]

_H, _O = 16, 4
_P0, _P1, _V = 64, 80, 96


@nb.njit(cache=True, nogil=True)
def _log_sigmoid_pair(d: float) -> tuple[float, float]:
    """(log pi_1, log pi_0) of the two-action softmax with logit difference d = z_1 - z_0,
    i.e. (-logaddexp(0, -d), -logaddexp(0, d)), computed without overflow."""
    e = math.log1p(math.exp(-abs(d)))
    if d > 0.0:
        return -e, -(d + e)
    return d - e, -e


@nb.njit(cache=True, nogil=True)
def act_and_record(
    state: np.ndarray,
    theta: np.ndarray,
    u: np.ndarray,
    alpha: np.ndarray,
    sample: np.ndarray,
    t: np.ndarray,
    obs_buf: np.ndarray,
    acts_buf: np.ndarray,
    actions: np.ndarray,
    slot: np.ndarray,
) -> None:
    """One lock-step of acting for every row i (section 4, alpha-greedy):

    - the observation is the float64 state rounded to float32 (what Gymnasium shows an agent),
      recorded at ``obs_buf[slot[i], t[i]]`` (the buffers are indexed through ``slot``, so the
      engine drops finished rows without moving the episode buffers);
    - greedy action argmax_a pi(a|s) = 1 iff (theta_p1 - theta_p0) . ReLU(theta_c s) > 0
      (ties go to action 0);
    - with probability alpha a uniformly random action: explore iff u < alpha, and then
      action = 1 iff u >= alpha / 2 (one uniform per agent-step decides both);
    - rows with ``sample[i]`` draw the non-exploring action from pi instead of taking the argmax:
      v = (u - alpha) / (1 - alpha) is uniform on [0, 1) given u >= alpha, action = 1 iff
      v < pi(1|s), so the same uniform still decides everything;
    - the action is recorded at ``acts_buf[slot[i], t[i]]`` and written to ``actions[i]``.

    Args:
        state: (4, E) float64 physical state (Gymnasium's layout).
        theta: (E, 112) the parameters each row acts with.
        u: (E,) uniforms in [0, 1); alpha: (E,) exploration probability per row.
        sample: (E,) bool, sample from pi rather than take the argmax.
        t: (E,) step index of each row in its episode.
        obs_buf: (S, L + 1, 4) float64; acts_buf: (S, L) int8; actions: (E,) int64 output.
        slot: (E,) int64, the buffer row of row i.
    """
    n = state.shape[1]
    for i in range(n):
        ti = t[i]
        si = slot[i]
        o0 = np.float64(np.float32(state[0, i]))
        o1 = np.float64(np.float32(state[1, i]))
        o2 = np.float64(np.float32(state[2, i]))
        o3 = np.float64(np.float32(state[3, i]))
        obs_buf[si, ti, 0] = o0
        obs_buf[si, ti, 1] = o1
        obs_buf[si, ti, 2] = o2
        obs_buf[si, ti, 3] = o3
        acc = 0.0
        for j in range(_H):
            p = theta[i, 4 * j] * o0
            p += theta[i, 4 * j + 1] * o1
            p += theta[i, 4 * j + 2] * o2
            p += theta[i, 4 * j + 3] * o3
            if p > 0.0:
                acc += p * (theta[i, _P1 + j] - theta[i, _P0 + j])
        ui, ai = u[i], alpha[i]
        if ui < ai:
            a = 1 if ui >= 0.5 * ai else 0
        elif sample[i]:
            # pi(1|s) = sigmoid(z_1 - z_0), evaluated without overflow
            if acc >= 0.0:
                pi1 = 1.0 / (1.0 + math.exp(-acc))
            else:
                e = math.exp(acc)
                pi1 = e / (1.0 + e)
            a = 1 if (ui - ai) / (1.0 - ai) < pi1 else 0
        else:
            a = 1 if acc > 0.0 else 0
        acts_buf[si, ti] = a
        actions[i] = a


@nb.njit(cache=True, nogil=True)
def episode_gradients_kernel(
    theta: np.ndarray,
    rows: np.ndarray,
    obs_buf: np.ndarray,
    acts_buf: np.ndarray,
    rews_buf: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    gamma: np.ndarray,
    lam: np.ndarray,
    beta: np.ndarray,
    out: np.ndarray,
    scores: np.ndarray,
    literal: np.ndarray,
) -> None:
    """Gradient of the episode loss (eqs. 15-18) for M episodes, written into ``out`` (M, 112);
    ``scores[m]`` gets the episode's return sum_t r_t (zeta: the steps the pole stood).

    Episode m is stored in row ``rows[m]`` of the buffers: states ``obs_buf[r, :T+1]`` (T + 1
    states: s_0..s_T), actions ``acts_buf[r, :T]``, rewards ``rews_buf[r, :T]``, T = lengths[m].
    Its parameters are ``theta[m]``.

    - Eq. 18 with the bootstrap discounted as in eq. 12: V_hat_t = r_t + gamma V_hat_{t+1},
      V_hat_T = V(s_T) if ``bootstrap[m]`` (episode cut at the step limit) else 0 (terminal).
    - ``literal[m]`` (the ``target="literal-eq18"`` ablation): eq. 18 exactly as printed,
      V_hat_t = sum_{j>=t} gamma^{j-t} r_j + V(s_T), the bootstrap undiscounted and taken even
      when the pole fell (V(s_T) of the terminal state as the network sees it).
    - A_t = V_hat_t - V(s_t) (eq. 12), a constant w.r.t. theta, as is V_hat.
    - Eq. 16: L_p = -sum_t log pi(a_t|s_t) A_t - beta sum_t H(pi(.|s_t)) (eq. 13 for H).
    - Eq. 17 x lambda (eq. 15): L_v = lambda sum_t (V_hat_t - V(s_t))^2.
    """
    m_total = rows.shape[0]
    t_max = 0
    for m in range(m_total):
        if lengths[m] > t_max:
            t_max = lengths[m]
    hid = np.empty((t_max + 1, _H))
    pre = np.empty((t_max + 1, _H))
    val = np.empty(t_max + 1)
    dif = np.empty(t_max + 1)
    vhat = np.empty(t_max + 1)
    wd = np.empty(_H)
    for m in range(m_total):
        scores[m] = _episode_grad(
            theta[m], rows[m], obs_buf, acts_buf, rews_buf, lengths[m], bootstrap[m],
            gamma[m], lam[m], beta[m], literal[m], out[m], hid, pre, val, dif, vhat, wd,
        )  # fmt: skip


@nb.njit(cache=True, nogil=True, inline="always")
def _value_targets(
    rews_buf: np.ndarray,
    r: int,
    big_t: int,
    val: np.ndarray,
    vhat: np.ndarray,
    g: float,
    lit: bool,
    boot: bool,
) -> float:
    """Fill ``vhat[:big_t]`` with eq. 18's targets for row ``r``; return the episode's return.

    The engine's reading bootstraps V(s_T) discounted as in eq. 12 (and 0 after a failure,
    ``boot`` False); ``lit`` is eq. 18 as printed (+ V(s_T), undiscounted, also after a failure).
    Shared by both gradient kernels, so their targets are the same operations in the same order.
    """
    if lit:
        nxt = 0.0
        for t in range(big_t - 1, -1, -1):
            nxt = rews_buf[r, t] + g * nxt
            vhat[t] = nxt + val[big_t]
    else:
        nxt = val[big_t] if boot else 0.0
        for t in range(big_t - 1, -1, -1):
            nxt = rews_buf[r, t] + g * nxt
            vhat[t] = nxt
    total = 0.0
    for t in range(big_t):
        total += rews_buf[r, t]
    return total


@nb.njit(cache=True, nogil=True)
def _episode_grad(
    th: np.ndarray,
    r: int,
    obs_buf: np.ndarray,
    acts_buf: np.ndarray,
    rews_buf: np.ndarray,
    big_t: int,
    boot: bool,
    g: float,
    lam: float,
    b: float,
    lit: bool,
    out: np.ndarray,
    hid: np.ndarray,
    pre: np.ndarray,
    val: np.ndarray,
    dif: np.ndarray,
    vhat: np.ndarray,
    wd: np.ndarray,
) -> float:
    """One episode of :func:`episode_gradients_kernel` (buffer row ``r``, length ``big_t``,
    parameters ``th``): writes the gradient into ``out`` (112,) and returns the score. The
    scratch arrays hold at least ``big_t + 1`` rows. Shared with :func:`fused_block`, so both
    engines compute every gradient with the same operations in the same order."""
    for j in range(_H):
        wd[j] = th[_P1 + j] - th[_P0 + j]
    # forward pass over s_0..s_T
    for t in range(big_t + 1):
        s0 = obs_buf[r, t, 0]
        s1 = obs_buf[r, t, 1]
        s2 = obs_buf[r, t, 2]
        s3 = obs_buf[r, t, 3]
        v = 0.0
        z0 = 0.0
        z1 = 0.0
        for j in range(_H):
            p = th[4 * j] * s0
            p += th[4 * j + 1] * s1
            p += th[4 * j + 2] * s2
            p += th[4 * j + 3] * s3
            pre[t, j] = p
            h = p if p > 0.0 else 0.0
            hid[t, j] = h
            v += th[_V + j] * h
            z0 += th[_P0 + j] * h
            z1 += th[_P1 + j] * h
        val[t] = v
        dif[t] = z1 - z0
    # eq. 18 (bootstrap discounted as in eq. 12)
    total = _value_targets(rews_buf, r, big_t, val, vhat, g, lit, boot)
    # backward pass
    for k in range(112):
        out[k] = 0.0
    two_lam = 2.0 * lam
    for t in range(big_t):
        adv = vhat[t] - val[t]  # eq. 12, a constant
        lp1, lp0 = _log_sigmoid_pair(dif[t])
        pi1 = math.exp(lp1)
        pi0 = math.exp(lp0)
        ent = -(pi0 * lp0 + pi1 * lp1)  # eq. 13
        # d/dz_1 of eq. 16 (dz_0 = -dz_1 with two actions)
        dz1 = -adv * (acts_buf[r, t] - pi1) + b * pi1 * (lp1 + ent)
        dv = -two_lam * adv  # d/dV of lambda (V_hat - V)^2
        s0 = obs_buf[r, t, 0]
        s1 = obs_buf[r, t, 1]
        s2 = obs_buf[r, t, 2]
        s3 = obs_buf[r, t, 3]
        for j in range(_H):
            h = hid[t, j]
            out[_P1 + j] += dz1 * h
            out[_V + j] += dv * h
            if pre[t, j] > 0.0:
                dh = dz1 * wd[j] + dv * th[_V + j]
                out[4 * j] += dh * s0
                out[4 * j + 1] += dh * s1
                out[4 * j + 2] += dh * s2
                out[4 * j + 3] += dh * s3
    for j in range(_H):
        out[_P0 + j] = -out[_P1 + j]
    return total


@nb.njit(cache=True, nogil=True)
def aggregate(
    theta: np.ndarray,
    buffer: np.ndarray,
    count: np.ndarray,
    version: np.ndarray,
    eta: np.ndarray,
    buffer_size: np.ndarray,
    trial: np.ndarray,
    reports: np.ndarray,
) -> None:
    """Eq. 22 for reports arriving in row order: report i joins the buffer of trial ``trial[i]``;
    when that buffer holds ``buffer_size`` reports, theta <- theta - eta * mean(buffer) and the
    buffer is emptied (``version`` counts the updates)."""
    d = theta.shape[1]
    for i in range(trial.shape[0]):
        g = trial[i]
        for k in range(d):
            buffer[g, k] += reports[i, k]
        count[g] += 1
        if count[g] >= buffer_size[g]:
            c = np.float64(count[g])
            e = eta[g]
            for k in range(d):
                theta[g, k] -= e * (buffer[g, k] / c)
                buffer[g, k] = 0.0
            count[g] = 0
            version[g] += 1


@nb.njit(cache=True, nogil=True)
def aggregate_adaptive(
    theta: np.ndarray,
    buffer: np.ndarray,
    count: np.ndarray,
    version: np.ndarray,
    lr: np.ndarray,
    buffer_size: np.ndarray,
    kind: np.ndarray,
    m1: np.ndarray,
    m2: np.ndarray,
    steps: np.ndarray,
    trial: np.ndarray,
    reports: np.ndarray,
) -> None:
    """Eq. 22 with an adaptive optimizer in place of plain SGD (the ``aggregator`` ablation).

    The aggregator's update direction is g = mean(buffer), exactly as in eq. 22, but the step
    is taken per trial by ``kind[g]``: 0 plain SGD (theta -= lr g, the same as
    :func:`aggregate`), 1 Adam (Kingma & Ba 2015, beta1 0.9, beta2 0.999, eps 1e-8, bias
    corrected), 2 RMSprop (decay 0.99 as in the public
    A3C CartPole code the paper's hyper-parameters match, eps 1e-10 as TensorFlow 1's default,
    no momentum, accumulator starting at 0).
    ``m1``/``m2`` hold the first/second moment estimates, ``steps`` the updates so far. It
    touches only released reports: post-processing, no privacy cost.
    """
    for i in range(trial.shape[0]):
        _agg_one(
            theta, buffer, count, version, lr, buffer_size, kind, m1, m2, steps, trial[i],
            reports[i],
        )  # fmt: skip


@nb.njit(cache=True, nogil=True)
def _agg_one(
    theta: np.ndarray,
    buffer: np.ndarray,
    count: np.ndarray,
    version: np.ndarray,
    lr: np.ndarray,
    buffer_size: np.ndarray,
    kind: np.ndarray,
    m1: np.ndarray,
    m2: np.ndarray,
    steps: np.ndarray,
    g: int,
    report: np.ndarray,
) -> None:
    """One report of :func:`aggregate_adaptive` (trial ``g``); shared with :func:`fused_block`."""
    d = theta.shape[1]
    for k in range(d):
        buffer[g, k] += report[k]
    count[g] += 1
    if count[g] >= buffer_size[g]:
        c = np.float64(count[g])
        e = lr[g]
        steps[g] += 1
        kd = kind[g]
        if kd == 1:
            b1, b2 = 0.9, 0.999
            c1 = 1.0 - b1 ** steps[g]
            c2 = 1.0 - b2 ** steps[g]
            for k in range(d):
                x = buffer[g, k] / c
                m1[g, k] = b1 * m1[g, k] + (1.0 - b1) * x
                m2[g, k] = b2 * m2[g, k] + (1.0 - b2) * x * x
                theta[g, k] -= e * (m1[g, k] / c1) / (math.sqrt(m2[g, k] / c2) + 1e-8)
                buffer[g, k] = 0.0
        elif kd == 2:
            rho = 0.99
            for k in range(d):
                x = buffer[g, k] / c
                m2[g, k] = rho * m2[g, k] + (1.0 - rho) * x * x
                theta[g, k] -= e * x / math.sqrt(m2[g, k] + 1e-10)
                buffer[g, k] = 0.0
        else:
            for k in range(d):
                theta[g, k] -= e * (buffer[g, k] / c)
                buffer[g, k] = 0.0
        count[g] = 0
        version[g] += 1


@nb.njit(cache=True, nogil=True)
def ended_episodes(
    rows: np.ndarray,
    row_trial: np.ndarray,
    max_sub: np.ndarray,
    n_sub: np.ndarray,
    t: np.ndarray,
    term: np.ndarray,
    trunc: np.ndarray,
    sub: np.ndarray,
    gs: np.ndarray,
    rank: np.ndarray,
    lengths: np.ndarray,
    boot: np.ndarray,
) -> int:
    """Which of the ended episodes in ``rows`` (sorted, so a trial's rows are contiguous and in
    worker order) are submitted: a trial takes at most ``max_sub - n_sub`` more, the later
    workers' episodes are discarded. Writes row, trial, rank within the trial's arrivals,
    length T = t + 1 and whether to bootstrap (cut, not terminal) of each kept episode; returns
    how many were kept."""
    m = 0
    prev = -1
    k = 0
    for i in range(rows.shape[0]):
        r = rows[i]
        g = row_trial[r]
        if g != prev:
            prev = g
            k = 0
        else:
            k += 1
        if k < max_sub[g] - n_sub[g]:
            sub[m] = r
            gs[m] = g
            rank[m] = k
            lengths[m] = t[r] + 1
            boot[m] = trunc[r] and not term[r]
            m += 1
    return m


@nb.njit(cache=True, nogil=True)
def record_scores(
    gs: np.ndarray,
    sub_index: np.ndarray,
    scores: np.ndarray,
    zoff: np.ndarray,
    zeta: np.ndarray,
    n_sub: np.ndarray,
    alpha: np.ndarray,
    alpha0: np.ndarray,
    alpha_decay: np.ndarray,
    max_sub: np.ndarray,
    stop_target: np.ndarray,
    window: np.ndarray,
    target: np.ndarray,
    active: np.ndarray,
    at_target: np.ndarray,
) -> bool:
    """Book the step's submissions: zeta_n of each (trial ``gs[i]``, 0-based n ``sub_index[i]``),
    the trials' submission counts and exploration rates alpha = max{0, alpha0 - n/decay}, and the
    stop criteria: a trial ends at ``max_sub`` submissions or, with ``stop_target``, as soon as a
    window completed this step has mu_n >= target (eqs. 25-26; scores are whole step counts, so
    the window sum is exact in any order). Returns whether some trial ended."""
    for i in range(gs.shape[0]):
        g = gs[i]
        zeta[zoff[g] + sub_index[i]] = scores[i]
        n_sub[g] += 1
    ended = False
    for i in range(gs.shape[0]):
        g = gs[i]
        alpha[g] = max(0.0, alpha0[g] - n_sub[g] / alpha_decay[g])
        if not active[g]:
            continue
        if n_sub[g] >= max_sub[g]:
            active[g] = False
            ended = True
        if stop_target[g]:
            w = window[g]
            lo = sub_index[i] - w + 1
            if lo >= 0:
                total = 0.0
                for j in range(lo, sub_index[i] + 1):
                    total += zeta[zoff[g] + j]
                if total / w >= target[g]:
                    active[g] = False
                    at_target[g] = True
                    ended = True
    return ended


# ==============================================================================================
# The fused lock-step: acting, CartPole physics, gradients, release, eq. 22 and restarts for a
# block of steps in ONE compiled call (``train_grid(..., engine="fused")``).
# ==============================================================================================

# Gymnasium's CartPole constants (gymnasium.envs.classic_control.cartpole, 1.x), spelled as
# Gymnasium computes them; tests/test_fused_pgc.py checks them against a Gymnasium instance.
_MASSCART = 1.0
_MASSPOLE = 0.1
_TOTAL_MASS = _MASSPOLE + _MASSCART
_LENGTH = 0.5
_POLEMASS_LENGTH = _MASSPOLE * _LENGTH
_FORCE_MAG = 10.0
_TAU = 0.02
_THETA_THRESHOLD = 12 * 2 * math.pi / 360
_X_THRESHOLD = 2.4
_INIT_LOW = -0.05
_INIT_SPAN = 0.05 - _INIT_LOW

#: Status codes of :func:`fused_block` (why it returned).
FUSED_STEPS = 0  # the asked number of steps ran, or the acting block is used up
FUSED_NEED_CHARGE = 1  # a trial may start an agent that is not charged yet
FUSED_NEED_NOISE = 2  # a config's pre-drawn mechanism randomness may not cover a step
FUSED_NEED_RESETS = 3  # a trial's reset uniforms may not cover a step
FUSED_NEED_OUTPUT = 4  # the transcript output arrays may not hold a step
FUSED_TRIAL_ENDED = 5  # some trial ended at the last step (the caller drops its rows)
FUSED_NONFINITE = 6  # a gradient was NaN/inf: nothing of that step was released
FUSED_PRS_OVERFLOW = 7  # a PRS projection overflowed: nothing of that step was released


@nb.njit(cache=True, nogil=True)
def _cartpole_row(state: np.ndarray, i: int, action: int, gravity: float) -> bool:
    """Gymnasium's ``CartPoleVectorEnv.step`` (Euler integrator) for column i of ``state``
    (4, N), with the same floating-point operations in the same order; returns terminated."""
    x = state[0, i]
    x_dot = state[1, i]
    theta = state[2, i]
    theta_dot = state[3, i]
    force = _FORCE_MAG if action == 1 else -_FORCE_MAG  # np.sign(action - 0.5) * force_mag
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + _POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / _TOTAL_MASS
    thetaacc = (gravity * sintheta - costheta * temp) / (
        _LENGTH * (4.0 / 3.0 - _MASSPOLE * (costheta * costheta) / _TOTAL_MASS)
    )
    xacc = temp - _POLEMASS_LENGTH * thetaacc * costheta / _TOTAL_MASS
    x = x + _TAU * x_dot
    x_dot = x_dot + _TAU * xacc
    theta = theta + _TAU * theta_dot
    theta_dot = theta_dot + _TAU * thetaacc
    state[0, i] = x
    state[1, i] = x_dot
    state[2, i] = theta
    state[3, i] = theta_dot
    return (
        (x < -_X_THRESHOLD)
        or (x > _X_THRESHOLD)
        or (theta < -_THETA_THRESHOLD)
        or (theta > _THETA_THRESHOLD)
    )


@nb.njit(cache=True, nogil=True)
def cartpole_step(
    state: np.ndarray,
    actions: np.ndarray,
    gravity: np.ndarray,
    steps: np.ndarray,
    max_steps: int,
    terminated: np.ndarray,
    truncated: np.ndarray,
) -> None:
    """The fused engine's CartPole physics for every column of ``state`` (4, N) in place:
    ``steps`` is incremented, ``terminated``/``truncated`` written as Gymnasium's
    ``CartPoleVectorEnv(max_episode_steps=max_steps)`` gives them (reward 1 each step)."""
    for i in range(state.shape[1]):
        terminated[i] = _cartpole_row(state, i, actions[i], gravity[i])
        steps[i] += 1
        truncated[i] = steps[i] >= max_steps


# The mechanisms' own compiled kernels (one implementation of Laplace and PRS: the fused engine
# calls the mechanism's kernel, not a copy of it). Numba compiles them into fused_block, but its
# cache tracks only this file: _flush_if_mechanisms_changed() drops fused_block's cached code
# when the mechanisms' kernels changed.
_LAPLACE = laplace_kernels()
_PRS = prs_kernels()
#: ||x[lo:lo+n]||_1 in NumPy's pairwise order (the Laplace mechanism's eq.-19 norm)
_pairwise_sum_abs = _LAPLACE.l1_norm
#: eq. 19 of one row (the Laplace mechanism's clip)
_laplace_clip_row = _LAPLACE.clip_row
#: one Laplace report from its noise row: z + clip(x)
_laplace_row = _LAPLACE.row
#: one PRS report (Algorithm 3) from its uniforms
_prs_row = _PRS.row


@nb.njit(cache=True, nogil=True)
def _transpose_row(th: np.ndarray, tt: np.ndarray, wd: np.ndarray) -> None:
    """theta (112,) in the engine's packing -> ``tt`` (112,) with theta_c column-major
    (tt[16 k + j] = theta_c[j, k]) and the rest as is, and ``wd`` = theta_p1 - theta_p0: the
    layout the fused kernel's loops over the 16 hidden units read contiguously (SIMD)."""
    for j in range(_H):
        for k in range(_O):
            tt[_H * k + j] = th[_O * j + k]
        wd[j] = th[_P1 + j] - th[_P0 + j]
    for k in range(_P0, 112):
        tt[k] = th[k]


@nb.njit(cache=True, nogil=True)
def _episode_grad_t(
    tt: np.ndarray,
    wd: np.ndarray,
    r: int,
    obs_buf: np.ndarray,
    acts_buf: np.ndarray,
    rews_buf: np.ndarray,
    big_t: int,
    boot: bool,
    g: float,
    lam: float,
    b: float,
    lit: bool,
    out: np.ndarray,
    hid: np.ndarray,
    val: np.ndarray,
    dif: np.ndarray,
    vhat: np.ndarray,
    gacc: np.ndarray,
) -> float:
    """:func:`_episode_grad` on the transposed parameters of :func:`_transpose_row`, written so
    that the loops over the 16 hidden units vectorise: every output is computed with the same
    operations in the same order (the sums over units stay sequential; a masked ``+= 0.0``
    replaces a skipped ``+=``, which is exact because these sums start at +0.0 and so never
    hold -0.0). tests/test_fused_pgc.py checks it bit for bit against the lock-step engine."""
    for t in range(big_t + 1):
        s0 = obs_buf[r, t, 0]
        s1 = obs_buf[r, t, 1]
        s2 = obs_buf[r, t, 2]
        s3 = obs_buf[r, t, 3]
        for j in range(_H):
            p = tt[j] * s0
            p += tt[_H + j] * s1
            p += tt[2 * _H + j] * s2
            p += tt[3 * _H + j] * s3
            hid[t, j] = p if p > 0.0 else 0.0
        v = 0.0
        z0 = 0.0
        z1 = 0.0
        for j in range(_H):
            h = hid[t, j]
            v += tt[_V + j] * h
            z0 += tt[_P0 + j] * h
            z1 += tt[_P1 + j] * h
        val[t] = v
        dif[t] = z1 - z0
    # eq. 18 (bootstrap discounted as in eq. 12)
    total = _value_targets(rews_buf, r, big_t, val, vhat, g, lit, boot)
    for k in range(112):
        gacc[k] = 0.0
    two_lam = 2.0 * lam
    for t in range(big_t):
        adv = vhat[t] - val[t]
        lp1, lp0 = _log_sigmoid_pair(dif[t])
        pi1 = math.exp(lp1)
        pi0 = math.exp(lp0)
        ent = -(pi0 * lp0 + pi1 * lp1)
        dz1 = -adv * (acts_buf[r, t] - pi1) + b * pi1 * (lp1 + ent)
        dv = -two_lam * adv
        s0 = obs_buf[r, t, 0]
        s1 = obs_buf[r, t, 1]
        s2 = obs_buf[r, t, 2]
        s3 = obs_buf[r, t, 3]
        for j in range(_H):
            h = hid[t, j]
            gacc[_P1 + j] += dz1 * h
            gacc[_V + j] += dv * h
            dh = dz1 * wd[j] + dv * tt[_V + j]
            on = h > 0.0  # iff the pre-activation is > 0 (h = ReLU of it)
            gacc[j] += dh * s0 if on else 0.0
            gacc[_H + j] += dh * s1 if on else 0.0
            gacc[2 * _H + j] += dh * s2 if on else 0.0
            gacc[3 * _H + j] += dh * s3 if on else 0.0
    for j in range(_H):
        for k in range(_O):
            out[_O * j + k] = gacc[_H * k + j]
        out[_P1 + j] = gacc[_P1 + j]
        out[_P0 + j] = -gacc[_P1 + j]
        out[_V + j] = gacc[_V + j]
    return total


@nb.njit(cache=True, nogil=True)
def fused_block(
    max_steps: int,
    # ---- rows (E): physics and episode state ----
    state: np.ndarray,  # (4, E) float64
    steps: np.ndarray,  # (E,) int64 steps taken in the current episode
    gravity: np.ndarray,  # (E,) float64
    row_trial: np.ndarray,
    row_worker: np.ndarray,
    row_agent: np.ndarray,
    row_round: np.ndarray,
    row_version: np.ndarray,
    slot: np.ndarray,
    row_theta: np.ndarray,  # (E, 112)
    row_tt: np.ndarray,  # (E, 112) the same, transposed (_transpose_row)
    row_wd: np.ndarray,  # (E, 16) theta_p1 - theta_p0 of each row
    obs_buf: np.ndarray,
    acts_buf: np.ndarray,
    rews_buf: np.ndarray,
    episode_steps: int,
    # ---- acting ----
    act_block: np.ndarray,  # (A, E) uniforms
    block_pos: np.ndarray,  # (1,) int64
    alpha_g: np.ndarray,
    sample_g: np.ndarray,
    # ---- per trial (G) ----
    theta: np.ndarray,
    buffer: np.ndarray,
    count: np.ndarray,
    version: np.ndarray,
    lr: np.ndarray,
    buffer_size: np.ndarray,
    kind: np.ndarray,
    m1: np.ndarray,
    m2: np.ndarray,
    opt_steps: np.ndarray,
    n_sub: np.ndarray,
    next_agent: np.ndarray,
    active: np.ndarray,
    at_target: np.ndarray,
    zoff: np.ndarray,
    zeta: np.ndarray,
    alpha0: np.ndarray,
    alpha_decay: np.ndarray,
    max_sub: np.ndarray,
    stop_target: np.ndarray,
    window: np.ndarray,
    target: np.ndarray,
    gamma: np.ndarray,
    lam: np.ndarray,
    beta: np.ndarray,
    literal: np.ndarray,
    rounds: np.ndarray,
    rows_g: np.ndarray,  # live rows per trial
    gtable: np.ndarray,
    glen: np.ndarray,
    agtable: np.ndarray,
    aglen: np.ndarray,
    reset_block: np.ndarray,  # (G, R, 5)
    reset_ptr: np.ndarray,
    paid: np.ndarray,  # agents charged (all rounds) per trial: ids < paid[g]
    agent_cap: np.ndarray,  # no trial ever starts more agents than this
    cfg_of: np.ndarray,
    # ---- per config (C) ----
    mech_kind: np.ndarray,  # 0 Laplace, 1 none (clip only), 2 PRS
    coord_clip: np.ndarray,  # bool: coordinate clip instead of L1 (Laplace / none)
    clip_bound: np.ndarray,  # C/2 for the L1 / coordinate clip; C for PRS
    noise: np.ndarray,  # (C, K, W) pre-drawn mechanism randomness, consumed in order
    noise_ptr: np.ndarray,
    noise_len: np.ndarray,
    prs_dh: np.ndarray,
    prs_p0: np.ndarray,
    prs_slope: np.ndarray,
    rows_c: np.ndarray,  # live rows per config
    record: np.ndarray,
    recorded_version: np.ndarray,  # (G,)
    recorded_index: np.ndarray,  # (G,)
    n_thetas: np.ndarray,  # (C,) theta snapshots recorded so far per config
    # ---- outputs ----
    out_g: np.ndarray,
    out_agent: np.ndarray,
    out_worker: np.ndarray,
    out_round: np.ndarray,
    out_sub: np.ndarray,
    out_tidx: np.ndarray,
    out_report: np.ndarray,
    out_score: np.ndarray,
    out_grav: np.ndarray,
    out_grad: np.ndarray,
    out_n: np.ndarray,  # (1,)
    snap_theta: np.ndarray,
    snap_cfg: np.ndarray,
    snap_n: np.ndarray,  # (1,)
    env_steps: np.ndarray,  # (1,)
    bad: np.ndarray,  # (1,) the trial of a non-finite gradient / overflowing PRS report
) -> int:
    """Up to ``max_steps`` lock-steps of the engine in one call; returns a ``FUSED_*`` status.

    Each step is exactly :meth:`ldp_audit.training.pgc_a3c._Engine.run`'s: every live row
    acts (:func:`act_and_record`'s rule), steps its CartPole (:func:`_cartpole_row`), and
    records s_t, a_t, r_t; the episodes that ended are capped (:func:`ended_episodes`' rule),
    their gradients computed (:func:`_episode_grad`), randomised in row order with each
    config's pre-drawn noise through the mechanisms' own kernels (Laplace:
    ``laplace_kernels().row``, z + clip(g) with z from ``noise``; none: clip(g); PRS:
    ``prs_kernels().row`` on its uniforms), applied by eq. 22 in row order (:func:`_agg_one`),
    booked (:func:`record_scores`), and the ended rows restart with the new theta
    (``_Engine._start_rows``). Rows of ended trials are skipped until the caller drops them.

    Before a step it checks that every trial's agents that may start in it are charged
    (``paid``), that the pre-drawn randomness, reset uniforms and output arrays cover its worst
    case; otherwise it returns before the step, so the caller can charge, draw and resume.
    """
    n_rows = state.shape[1]
    n_trials = theta.shape[0]
    n_cfg = noise_ptr.shape[0]
    d = theta.shape[1]
    a_len = act_block.shape[0]
    r_len = reset_block.shape[1]
    t_pad = obs_buf.shape[1]
    hid = np.empty((t_pad, _H))
    val = np.empty(t_pad)
    dif = np.empty(t_pad)
    vhat = np.empty(t_pad)
    done = np.empty(n_rows, np.int64)
    done_term = np.empty(n_rows, np.bool_)
    done_trunc = np.empty(n_rows, np.bool_)
    k_row = np.empty(n_rows, np.int64)
    k_g = np.empty(n_rows, np.int64)
    k_sub = np.empty(n_rows, np.int64)
    k_score = np.empty(n_rows)
    grads = np.empty((n_rows, d))
    noisy = np.empty((n_rows, d))
    obs_f = np.empty(4)
    k_norm = np.empty(n_rows)
    prod = np.empty(_H)
    gacc = np.empty(d)
    prs_bits = np.empty(d)  # the bits of a PRS report (d_hat <= d), not used here
    slow = np.zeros(n_cfg, np.bool_)
    for _ in range(max_steps):
        # ---------------- can the next step run with what the caller prepared? ----------------
        if block_pos[0] >= a_len:
            return FUSED_STEPS
        for g in range(n_trials):
            if not active[g]:
                continue
            need = next_agent[g] + rows_g[g]
            if need > agent_cap[g]:
                need = agent_cap[g]
            if paid[g] < need:
                return FUSED_NEED_CHARGE
            if reset_ptr[g] + rows_g[g] > r_len:
                return FUSED_NEED_RESETS
        for c in range(n_cfg):
            if mech_kind[c] != 1 and noise_ptr[c] + rows_c[c] > noise_len[c]:
                return FUSED_NEED_NOISE
        if out_n[0] + n_rows > out_g.shape[0] or snap_n[0] + n_trials > snap_theta.shape[0]:
            return FUSED_NEED_OUTPUT
        # ---------------- acting and physics ----------------
        pos = block_pos[0]
        block_pos[0] = pos + 1
        nd = 0
        live = 0
        for i in range(n_rows):
            g = row_trial[i]
            if not active[g]:
                continue
            live += 1
            ti = steps[i]
            si = slot[i]
            o0 = np.float64(np.float32(state[0, i]))
            o1 = np.float64(np.float32(state[1, i]))
            o2 = np.float64(np.float32(state[2, i]))
            o3 = np.float64(np.float32(state[3, i]))
            obs_buf[si, ti, 0] = o0
            obs_buf[si, ti, 1] = o1
            obs_buf[si, ti, 2] = o2
            obs_buf[si, ti, 3] = o3
            # act_and_record's greedy score, the 16 units in SIMD lanes, summed in order
            tt = row_tt[i]
            wdi = row_wd[i]
            for j in range(_H):
                p = tt[j] * o0
                p += tt[_H + j] * o1
                p += tt[2 * _H + j] * o2
                p += tt[3 * _H + j] * o3
                prod[j] = p * wdi[j] if p > 0.0 else 0.0
            acc = 0.0
            for j in range(_H):
                acc += prod[j]
            ui = act_block[pos, i]
            ai = alpha_g[g]
            if ui < ai:
                a = 1 if ui >= 0.5 * ai else 0
            elif sample_g[g]:
                if acc >= 0.0:
                    pi1 = 1.0 / (1.0 + math.exp(-acc))
                else:
                    e = math.exp(acc)
                    pi1 = e / (1.0 + e)
                a = 1 if (ui - ai) / (1.0 - ai) < pi1 else 0
            else:
                a = 1 if acc > 0.0 else 0
            acts_buf[si, ti] = a
            term = _cartpole_row(state, i, a, gravity[i])
            steps[i] = ti + 1
            trunc = ti + 1 >= episode_steps
            rews_buf[si, ti] = 1.0
            if term or trunc:
                done[nd] = i
                done_term[nd] = term
                done_trunc[nd] = trunc
                nd += 1
        env_steps[0] += live
        if nd == 0:
            continue
        # ---------------- ended episodes: cap, gradients ----------------
        m = 0
        prev = -1
        k = 0
        for q in range(nd):
            i = done[q]
            g = row_trial[i]
            if g != prev:
                prev = g
                k = 0
            else:
                k += 1
            if k < max_sub[g] - n_sub[g]:
                si = slot[i]
                big_t = steps[i]
                for c4 in range(4):
                    obs_f[c4] = np.float64(np.float32(state[c4, i]))
                    obs_buf[si, big_t, c4] = obs_f[c4]
                boot = done_trunc[q] and not done_term[q]
                k_score[m] = _episode_grad_t(
                    row_tt[i], row_wd[i], si, obs_buf, acts_buf, rews_buf, big_t, boot,
                    gamma[g], lam[g], beta[g], literal[g], grads[m], hid, val, dif, vhat, gacc,
                )  # fmt: skip
                k_row[m] = i
                k_g[m] = g
                k_sub[m] = n_sub[g] + k
                m += 1
        # ---------------- agent side: randomise (agents were charged when they started) -----
        for q in range(m):
            for kk in range(d):
                if not math.isfinite(grads[q, kk]):
                    bad[0] = k_g[q]
                    return FUSED_NONFINITE
        # Laplace's L1 clip (ldp_audit.mechanisms._clip_l1) takes its overflow-safe path for
        # every row of a config's batch when one row's norm overflows: the same here
        for c in range(n_cfg):
            slow[c] = False
        for q in range(m):
            c = cfg_of[k_g[q]]
            if mech_kind[c] == 0 and not coord_clip[c]:
                k_norm[q] = _pairwise_sum_abs(grads[q], 0, d)
                if not math.isfinite(k_norm[q]):
                    slow[c] = True
        for q in range(m):
            c = cfg_of[k_g[q]]
            mk = mech_kind[c]
            if mk == 0 and not coord_clip[c]:
                _laplace_row(
                    grads[q], k_norm[q], clip_bound[c], slow[c], noise[c, noise_ptr[c]], noisy[q]
                )
                noise_ptr[c] += 1
                continue
            if mk == 2:
                ok = _prs_row(
                    noise[c, noise_ptr[c]], grads[q], prs_dh[c], clip_bound[c], prs_p0[c],
                    prs_slope[c], prs_bits, noisy[q],
                )  # fmt: skip
                if not ok:
                    bad[0] = k_g[q]
                    return FUSED_PRS_OVERFLOW
                noise_ptr[c] += 1
                continue
            bnd = clip_bound[c]
            if coord_clip[c]:
                for kk in range(d):
                    noisy[q, kk] = min(max(grads[q, kk], -bnd), bnd)
            else:
                n1 = _pairwise_sum_abs(grads[q], 0, d)
                den = n1 / bnd
                if den < 1.0:
                    den = 1.0
                for kk in range(d):
                    noisy[q, kk] = grads[q, kk] / den
            if mk == 0:
                z = noise[c, noise_ptr[c]]
                for kk in range(d):
                    noisy[q, kk] = z[kk] + noisy[q, kk]
                noise_ptr[c] += 1
        # ---------------- trust boundary: only `noisy` crosses it ----------------
        for q in range(m):
            i = k_row[q]
            g = k_g[q]
            c = cfg_of[g]
            if record[c]:
                o = out_n[0]
                out_g[o] = g
                out_agent[o] = row_agent[i]
                out_worker[o] = row_worker[i]
                out_round[o] = row_round[i]
                out_sub[o] = k_sub[q]
                out_tidx[o] = row_version[i]
                out_score[o] = k_score[q]
                out_grav[o] = gravity[i]
                for kk in range(d):
                    out_report[o, kk] = noisy[q, kk]
                    out_grad[o, kk] = grads[q, kk]
                out_n[0] = o + 1
            _agg_one(
                theta, buffer, count, version, lr, buffer_size, kind, m1, m2, opt_steps, g,
                noisy[q],
            )  # fmt: skip
        any_ended = record_scores(
            k_g[:m], k_sub[:m], k_score[:m], zoff, zeta, n_sub, alpha_g, alpha0, alpha_decay,
            max_sub, stop_target, window, target, active, at_target,
        )  # fmt: skip
        # ---------------- restarts (trials still running) ----------------
        for q in range(nd):
            i = done[q]
            g = row_trial[i]
            if not active[g]:
                continue
            c = cfg_of[g]
            rp = reset_ptr[g]
            reset_ptr[g] = rp + 1
            if row_round[i] + 1 >= rounds[g]:  # a new agent
                ag = next_agent[g]
                next_agent[g] = ag + 1
                row_agent[i] = ag
                row_round[i] = 0
                n_g = glen[g]
                idx = np.int64(reset_block[g, rp, 0] * n_g)
                if idx > n_g - 1:
                    idx = n_g - 1
                gravity[i] = gtable[g, idx]
                if ag < aglen[g]:
                    gravity[i] = agtable[g, ag]
            else:
                row_round[i] += 1
            for kk in range(d):
                row_theta[i, kk] = theta[g, kk]
            _transpose_row(theta[g], row_tt[i], row_wd[i])
            for c4 in range(4):
                state[c4, i] = _INIT_LOW + _INIT_SPAN * reset_block[g, rp, 1 + c4]
            steps[i] = 0
            if record[c]:
                if recorded_version[g] != version[g]:
                    sn = snap_n[0]
                    for kk in range(d):
                        snap_theta[sn, kk] = theta[g, kk]
                    snap_cfg[sn] = c
                    snap_n[0] = sn + 1
                    recorded_version[g] = version[g]
                    recorded_index[g] = n_thetas[c]
                    n_thetas[c] += 1
            row_version[i] = recorded_index[g]
        if any_ended:
            return FUSED_TRIAL_ENDED
    return FUSED_STEPS


def _flush_if_mechanisms_changed() -> None:
    """Drop :func:`fused_block`'s cached machine code when the mechanisms' kernels changed.

    Numba keys a cached function on its own source file only, and :func:`fused_block` has
    ``laplace_kernels()`` and ``prs_kernels()`` compiled into it: an edit of
    ``ldp_audit/mechanisms/laplace.py`` or ``prs.py`` would otherwise keep running the old
    kernels from the cache. A fingerprint of their bytecode is kept beside the cache.
    """
    import hashlib
    from pathlib import Path

    h = hashlib.sha256()
    for k in (*_LAPLACE, *_PRS):
        code = k.py_func.__code__
        h.update(code.co_code)
        h.update(repr((code.co_consts, code.co_names)).encode())
    fp = h.hexdigest()
    cache = getattr(fused_block, "_cache", None)
    path_of = getattr(cache, "cache_path", None)
    if path_of is None or not hasattr(cache, "flush"):
        return
    stamp = Path(path_of) / "_kernels.fused_block.mechanisms.sha256"
    try:
        if stamp.read_text() == fp:
            return
    except OSError:
        pass
    try:
        cache.flush()
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(fp)
    except OSError:  # a read-only cache: Numba then recompiles or uses its own fallback
        pass


_flush_if_mechanisms_changed()
