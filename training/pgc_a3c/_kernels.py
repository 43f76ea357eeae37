"""Compiled (Numba) inner loops of the PGC-A3C lock-step engine: acting, the episode gradient
(eqs. 15-18), the aggregator's eq. 22 and the step's bookkeeping. The fused engine's whole-block
kernel, which calls the per-row pieces here, is :mod:`ldp_audit.training.pgc_a3c._fused_kernel`.

The lock-step engine (:mod:`ldp_audit.training.pgc_a3c.engine`) spends its time in two places:
choosing the actions of every row at every step, and the gradient of eqs. 15-18 of every episode
that ended at that step. With NumPy each is a few dozen calls on small arrays, so Python and call
overhead dominates; here each is one compiled loop. Its physics stays Gymnasium's
(``CartPoleVectorEnv``).

The kernels work row by row, so a row's result never depends on which other rows share the
batch, and they keep IEEE semantics (no ``fastmath``): results are bit-for-bit reproducible.
``tests/test_pgc_kernels.py`` checks them against the NumPy formulation and torch autograd.

Parameter packing (see :func:`ldp_audit.training.pgc_a3c.model.unpack_theta`): theta[0:64] is
theta_c (16x4, row-major: theta_c[j, k] = theta[4 j + k]), theta[64:80] is theta_p row 0,
theta[80:96] row 1, theta[96:112] theta_v.
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import numba as nb
import numpy as np

_H, _O = 16, 4
_P0, _P1, _V = 64, 80, 96


@nb.njit(cache=True, nogil=True)
def log_sigmoid_pair(d: float) -> tuple[float, float]:
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
        o0, o1, o2, o3 = observe(state, i, obs_buf, si, ti)
        acc = 0.0
        for j in range(_H):
            p = theta[i, 4 * j] * o0
            p += theta[i, 4 * j + 1] * o1
            p += theta[i, 4 * j + 2] * o2
            p += theta[i, 4 * j + 3] * o3
            if p > 0.0:
                acc += p * (theta[i, _P1 + j] - theta[i, _P0 + j])
        a = choose_action(acc, u[i], alpha[i], sample[i])
        acts_buf[si, ti] = a
        actions[i] = a


@nb.njit(cache=True, nogil=True, inline="always")
def observe(
    state: np.ndarray, i: int, obs_buf: np.ndarray, si: int, ti: int
) -> tuple[float, float, float, float]:
    """Row i's observation: its float64 state (4, E) rounded to float32 (what Gymnasium shows an
    agent), recorded at ``obs_buf[si, ti]`` and returned. Shared by both engines' acting."""
    o0 = np.float64(np.float32(state[0, i]))
    o1 = np.float64(np.float32(state[1, i]))
    o2 = np.float64(np.float32(state[2, i]))
    o3 = np.float64(np.float32(state[3, i]))
    obs_buf[si, ti, 0] = o0
    obs_buf[si, ti, 1] = o1
    obs_buf[si, ti, 2] = o2
    obs_buf[si, ti, 3] = o3
    return o0, o1, o2, o3


@nb.njit(cache=True, nogil=True, inline="always")
def choose_action(acc: float, ui: float, ai: float, sample: bool) -> int:
    """The action from the greedy score ``acc`` = z_1 - z_0 and the row's uniform ``ui``
    (:func:`act_and_record`'s rule: explore iff ui < ai, then action 1 iff ui >= ai / 2; else
    with ``sample`` action 1 iff (ui - ai) / (1 - ai) < pi(1|s), else argmax with ties to 0).
    Shared by both engines' acting."""
    if ui < ai:
        return 1 if ui >= 0.5 * ai else 0
    if sample:
        # pi(1|s) = sigmoid(z_1 - z_0), evaluated without overflow
        if acc >= 0.0:
            pi1 = 1.0 / (1.0 + math.exp(-acc))
        else:
            e = math.exp(acc)
            pi1 = e / (1.0 + e)
        return 1 if (ui - ai) / (1.0 - ai) < pi1 else 0
    return 1 if acc > 0.0 else 0


@nb.njit(cache=True, nogil=True)
def episode_gradients_kernel(
    theta: np.ndarray,
    rows: np.ndarray,
    obs_buf: np.ndarray,
    acts_buf: np.ndarray,
    rews_buf: np.ndarray,
    lengths: np.ndarray,
    bootstrap: np.ndarray,
    loss: tuple,
    out: np.ndarray,
    scores: np.ndarray,
) -> None:
    """Gradient of the episode loss (eqs. 15-18) for M episodes, written into ``out`` (M, 112);
    ``scores[m]`` gets the episode's return sum_t r_t (zeta: the steps the pole stood).

    Episode m is stored in row ``rows[m]`` of the buffers: states ``obs_buf[r, :T+1]`` (T + 1
    states: s_0..s_T), actions ``acts_buf[r, :T]``, rewards ``rews_buf[r, :T]``, T = lengths[m].
    Its parameters are ``theta[m]``, its loss constants ``loss`` = (gamma, lam, beta, literal),
    each an (M,) array (the engines hold one such tuple, per trial).

    - Eq. 18 with the bootstrap discounted as in eq. 12: V_hat_t = r_t + gamma V_hat_{t+1},
      V_hat_T = V(s_T) if ``bootstrap[m]`` (episode cut at the step limit) else 0 (terminal).
    - ``literal[m]`` (the ``target="literal-eq18"`` ablation): eq. 18 exactly as printed,
      V_hat_t = sum_{j>=t} gamma^{j-t} r_j + V(s_T), the bootstrap undiscounted and taken even
      when the pole fell (V(s_T) of the terminal state as the network sees it).
    - A_t = V_hat_t - V(s_t) (eq. 12), a constant w.r.t. theta, as is V_hat.
    - Eq. 16: L_p = -sum_t log pi(a_t|s_t) A_t - beta sum_t H(pi(.|s_t)) (eq. 13 for H).
    - Eq. 17 x lambda (eq. 15): L_v = lambda sum_t (V_hat_t - V(s_t))^2.
    """
    gamma, lam, beta, literal = loss
    scratch = grad_scratch(obs_buf.shape[1])  # the buffers hold every episode's T + 1 states
    tt = np.empty(112)
    wd = np.empty(_H)
    for m in range(rows.shape[0]):
        transpose_row(theta[m], tt, wd)
        scores[m] = episode_grad_t(
            tt, wd, rows[m], obs_buf, acts_buf, rews_buf, lengths[m], bootstrap[m], gamma[m],
            lam[m], beta[m], literal[m], out[m], scratch,
        )  # fmt: skip


@nb.njit(cache=True, nogil=True)
def grad_scratch(t_pad: int) -> tuple:
    """The scratch arrays of :func:`episode_grad_t` for episodes of up to ``t_pad - 1`` steps:
    the hidden units (t_pad, 16), the values, logit differences and targets (t_pad,) and the
    gradient accumulator (112,); allocated once per call of either engine's kernel."""
    return np.empty((t_pad, _H)), np.empty(t_pad), np.empty(t_pad), np.empty(t_pad), np.empty(112)


@nb.njit(cache=True, nogil=True)
def transpose_row(th: np.ndarray, tt: np.ndarray, wd: np.ndarray) -> None:
    """theta (112,) in the engine's packing -> ``tt`` (112,) with theta_c column-major
    (tt[16 k + j] = theta_c[j, k]) and the rest as is, and ``wd`` = theta_p1 - theta_p0: the
    layout :func:`episode_grad_t`'s loops over the 16 hidden units read contiguously (SIMD)."""
    for j in range(_H):
        for k in range(_O):
            tt[_H * k + j] = th[_O * j + k]
        wd[j] = th[_P1 + j] - th[_P0 + j]
    for k in range(_P0, 112):
        tt[k] = th[k]


@nb.njit(cache=True, nogil=True)
def episode_grad_t(
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
    scratch: tuple,
) -> float:
    """One episode of :func:`episode_gradients_kernel` (buffer row ``r``, length ``big_t``, the
    parameters transposed by :func:`transpose_row` into ``tt`` and ``wd``): writes the gradient
    into ``out`` (112,, the engine's packing) and returns the score (``scratch``:
    :func:`grad_scratch`'s arrays, of at least ``big_t + 1`` rows). The one implementation of
    eqs. 15-18 that both engines call (the lock-step's :func:`episode_gradients_kernel` and the
    fused :func:`~ldp_audit.training.pgc_a3c._fused_kernel.fused_block`), so they compute every
    gradient with the same operations in the same order.

    Written so that the loops over the 16 hidden units vectorise, with the operations and order
    of the row-major scalar loop (before issue 25 the lock-step engine's ``_episode_grad``): the
    sums over units stay sequential, and a masked ``+= 0.0`` replaces a skipped ``+=``, which is
    exact because these sums start at +0.0 and so never hold -0.0.
    """
    hid, val, dif, vhat, gacc = scratch
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
    # eq. 18, V_hat_t = r_t + gamma V_hat_{t+1}: the bootstrap V(s_T) discounted as in eq. 12
    # (0 after a failure, ``boot`` False); ``lit``: eq. 18 as printed (+ V(s_T), undiscounted,
    # also after a failure)
    nxt = val[big_t] if boot and not lit else 0.0
    for t in range(big_t - 1, -1, -1):
        nxt = rews_buf[r, t] + g * nxt
        vhat[t] = nxt + val[big_t] if lit else nxt
    total = 0.0
    for t in range(big_t):
        total += rews_buf[r, t]
    for k in range(112):
        gacc[k] = 0.0
    two_lam = 2.0 * lam
    for t in range(big_t):
        adv = vhat[t] - val[t]
        lp1, lp0 = log_sigmoid_pair(dif[t])
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
def aggregate(trial: np.ndarray, reports: np.ndarray, *state: np.ndarray) -> None:
    """Eq. 22 for reports arriving in row order (``state``: :func:`agg_one`'s arrays, theta to
    steps): report i joins the buffer of trial ``trial[i]``; when that buffer holds
    ``buffer_size`` reports, the buffer's mean g = mean(buffer) steps theta and the buffer is
    emptied (``version`` counts the updates).

    The step is taken per trial by ``kind[g]``: 0 plain SGD, theta <- theta - lr g (eq. 22),
    and, the ``aggregator`` ablation, 1 Adam (Kingma & Ba 2015, beta1 0.9, beta2 0.999, eps
    1e-8, bias corrected), 2 RMSprop (decay 0.99 as in the public A3C CartPole code the
    paper's hyper-parameters match, eps 1e-10 as TensorFlow 1's default, no momentum,
    accumulator starting at 0). ``m1``/``m2`` hold the first/second moment estimates (empty
    for plain SGD), ``steps`` the updates so far. It touches only released reports:
    post-processing, no privacy cost.
    """
    for i in range(trial.shape[0]):
        agg_one(*state, trial[i], reports[i])


@nb.njit(cache=True, nogil=True)
def agg_one(
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
    """One report of :func:`aggregate` (trial ``g``); shared with :func:`fused_block`."""
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
        else:  # eq. 22's plain step
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
    length T = ``t`` (the row's steps, this one included) and whether to bootstrap (cut, not
    terminal) of each kept episode; returns how many were kept. Shared by both engines."""
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
            lengths[m] = t[r]
            boot[m] = trunc[r] and not term[r]
            m += 1
    return m


#: The per-trial bookkeeping :func:`record_scores` updates, one array per field (trial g's entry
#: at [g]; ``zeta_flat`` holds trial g's zeta_n from ``zoff[g]``), held once by each engine and
#: passed whole to the compiled code
TrialBook = namedtuple(
    "TrialBook",
    "zoff zeta_flat n_sub alpha_g alpha0 alpha_decay max_sub stop_target window target active "
    "at_target",
)


@nb.njit(cache=True, nogil=True)
def record_scores(gs: np.ndarray, sub_index: np.ndarray, scores: np.ndarray, book: Any) -> bool:
    """Book the step's submissions in ``book`` (a :data:`TrialBook`): zeta_n of each (trial
    ``gs[i]``, 0-based n ``sub_index[i]``), the trials' submission counts and exploration rates
    alpha = max{0, alpha0 - n/decay}, and the stop criteria: a trial ends at ``max_sub``
    submissions or, with ``stop_target``, as soon as a window completed this step has mu_n >=
    target (eqs. 25-26; scores are whole step counts, so the window sum is exact in any order).
    Returns whether some trial ended."""
    zoff, zeta, n_sub, active = book.zoff, book.zeta_flat, book.n_sub, book.active
    for i in range(gs.shape[0]):
        g = gs[i]
        zeta[zoff[g] + sub_index[i]] = scores[i]
        n_sub[g] += 1
    ended = False
    for i in range(gs.shape[0]):
        g = gs[i]
        book.alpha_g[g] = max(0.0, book.alpha0[g] - n_sub[g] / book.alpha_decay[g])
        if not active[g]:
            continue
        if n_sub[g] >= book.max_sub[g]:
            active[g] = False
            ended = True
        if book.stop_target[g]:
            w = book.window[g]
            lo = sub_index[i] - w + 1
            if lo >= 0:
                total = 0.0
                for j in range(lo, sub_index[i] + 1):
                    total += zeta[zoff[g] + j]
                if total / w >= book.target[g]:
                    active[g] = False
                    book.at_target[g] = True
                    ended = True
    return ended
