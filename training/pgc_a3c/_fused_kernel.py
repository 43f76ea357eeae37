"""The fused lock-step of the PGC-A3C engine (``train_grid(engine="fused")``), compiled (Numba):
:func:`fused_block` runs a whole block of lock-steps (acting, CartPole physics, gradients,
release, eq. 22, restarts) in one call.

Its physics steps Gymnasium's equations itself (:func:`_cartpole_row`, checked step for step
against ``CartPoleVectorEnv`` in ``tests/test_fused_pgc.py``); the per-row pieces it shares with
the lock-step engine (the episode gradient of eqs. 15-18 with eq. 18's targets, the aggregator's
step and the step's bookkeeping) are the kernels of :mod:`ldp_audit.training.pgc_a3c._kernels`,
and the release applies the mechanisms' own kernels
(:func:`ldp_audit.mechanisms.laplace.laplace_kernels`,
:func:`ldp_audit.mechanisms.prs.prs_kernels`). Same operations in the same order as the
lock-step engine, IEEE semantics (no ``fastmath``): the same results bit for bit.

Numba caches :func:`fused_block` keyed on this file only, so the kernels compiled into it from
other files are fingerprinted beside the cache (:func:`_flush_if_mechanisms_changed`).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from ldp_audit.mechanisms.laplace import laplace_kernels
from ldp_audit.mechanisms.prs import prs_kernels
from ldp_audit.training.pgc_a3c._kernels import (
    _H,
    TrialBook,
    agg_one,
    choose_action,
    ended_episodes,
    episode_grad_t,
    grad_scratch,
    log_sigmoid_pair,
    observe,
    record_scores,
    transpose_row,
)

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
#: the caller must prepare more before the next step: a trial may start an agent that is not
#: charged yet, or a config's pre-drawn mechanism randomness, a trial's reset uniforms or the
#: transcript output arrays may not cover it
FUSED_NEED = 1
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


# The mechanisms' own compiled kernels (one implementation of Laplace and PRS: the fused engine
# calls the mechanism's kernel, not a copy of it). Numba compiles them into fused_block, but its
# cache tracks only this file: _flush_if_mechanisms_changed() drops fused_block's cached code
# when the mechanisms' kernels, or the lock-step kernels it calls (_SHARED), changed.
_LAPLACE = laplace_kernels()
_PRS = prs_kernels()
#: the kernels of ._kernels compiled into fused_block (fingerprinted with the mechanisms')
_SHARED = (
    observe,
    choose_action,
    log_sigmoid_pair,
    transpose_row,
    episode_grad_t,
    grad_scratch,
    agg_one,
    ended_episodes,
    record_scores,
)
#: ||x[lo:lo+n]||_1 in NumPy's pairwise order (the Laplace mechanism's eq.-19 norm)
_pairwise_sum_abs = _LAPLACE.l1_norm
#: one Laplace report from its noise row: z + clip(x)
_laplace_row = _LAPLACE.row
#: one PRS report (Algorithm 3) from its uniforms
_prs_row = _PRS.row


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
    row_tt: np.ndarray,  # (E, 112) each row's theta transposed (transpose_row)
    row_wd: np.ndarray,  # (E, 16) theta_p1 - theta_p0 of each row
    obs_buf: np.ndarray,
    acts_buf: np.ndarray,
    rews_buf: np.ndarray,
    episode_steps: int,
    # ---- acting ----
    act_block: np.ndarray,  # (A, E) uniforms
    block_pos: np.ndarray,  # (1,) int64
    sample_g: np.ndarray,
    # ---- per trial (G) ----
    agg: tuple,  # the aggregator's state: agg_one's arrays (Aggregator.state), theta first
    book: TrialBook,  # record_scores' bookkeeping (submissions, alpha, stop criteria)
    next_agent: np.ndarray,
    loss: tuple,  # the loss constants (gamma, lam, beta, literal), per trial
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
    out_int: np.ndarray,  # (6, cap): trial, agent, worker, round, submission, theta index
    out_report: np.ndarray,
    out_real: np.ndarray,  # (2, cap): score, gravity
    out_grad: np.ndarray,
    out_n: np.ndarray,  # (1,)
    snap_theta: np.ndarray,
    snap_cfg: np.ndarray,
    snap_n: np.ndarray,  # (1,)
    env_steps: np.ndarray,  # (1,)
    bad: np.ndarray,  # (1,) the trial of a non-finite gradient / overflowing PRS report
    halt: np.ndarray,  # (1,) nonzero: return before the next step (set from another thread)
) -> int:
    """Up to ``max_steps`` lock-steps of the engine in one call; returns a ``FUSED_*`` status.

    Each step is exactly :meth:`ldp_audit.training.pgc_a3c._Engine.run`'s: every live row
    acts (:func:`act_and_record`'s rule), steps its CartPole (:func:`_cartpole_row`), and
    records s_t, a_t, r_t; the episodes that ended are capped (:func:`ended_episodes`' rule),
    their gradients computed (:func:`episode_grad_t`), randomised in row order with each
    config's pre-drawn noise through the mechanisms' own kernels (Laplace:
    ``laplace_kernels().row``, z + clip(g) with z from ``noise``; none: clip(g); PRS:
    ``prs_kernels().row`` on its uniforms), applied by eq. 22 in row order (:func:`agg_one`),
    booked (:func:`record_scores`), and the ended rows restart with the new theta
    (``_Engine._start_rows``). Rows of ended trials are skipped until the caller drops them.

    Before a step it checks that every trial's agents that may start in it are charged
    (``paid``), that the pre-drawn randomness, reset uniforms and output arrays cover its worst
    case; otherwise it returns before the step, so the caller can charge, draw and resume.
    It also returns before a step once ``halt[0]`` is nonzero: the CLI's signal watchdog sets
    it from its thread (the kernel holds no GIL), so a block ends at the next lock-step after
    SIGINT / SIGTERM, not after up to ``max_steps`` of them.
    """
    theta, version = agg[0], agg[3]
    n_sub, active, max_sub, alpha_g = book.n_sub, book.active, book.max_sub, book.alpha_g
    gamma, lam, beta, literal = loss
    n_rows = state.shape[1]
    n_trials = theta.shape[0]
    n_cfg = noise_ptr.shape[0]
    d = theta.shape[1]
    a_len = act_block.shape[0]
    r_len = reset_block.shape[1]
    scratch = grad_scratch(obs_buf.shape[1])
    done = np.empty(n_rows, np.int64)
    row_term = np.empty(n_rows, np.bool_)
    row_trunc = np.empty(n_rows, np.bool_)
    k_row = np.empty(n_rows, np.int64)
    k_g = np.empty(n_rows, np.int64)
    k_sub = np.empty(n_rows, np.int64)
    k_len = np.empty(n_rows, np.int64)
    k_boot = np.empty(n_rows, np.bool_)
    k_score = np.empty(n_rows)
    grads = np.empty((n_rows, d))
    noisy = np.empty((n_rows, d))
    k_norm = np.empty(n_rows)
    prod = np.empty(_H)
    prs_bits = np.empty(d)  # the bits of a PRS report (d_hat <= d), not used here
    slow = np.zeros(n_cfg, np.bool_)
    for _ in range(max_steps):
        # ---------------- can the next step run with what the caller prepared? ----------------
        if halt[0] or block_pos[0] >= a_len:
            return FUSED_STEPS
        for g in range(n_trials):
            if not active[g]:
                continue
            need = next_agent[g] + rows_g[g]
            if need > agent_cap[g]:
                need = agent_cap[g]
            if paid[g] < need:
                return FUSED_NEED
            if reset_ptr[g] + rows_g[g] > r_len:
                return FUSED_NEED
        for c in range(n_cfg):
            if mech_kind[c] != 1 and noise_ptr[c] + rows_c[c] > noise_len[c]:
                return FUSED_NEED
        if out_n[0] + n_rows > out_int.shape[1] or snap_n[0] + n_trials > snap_theta.shape[0]:
            return FUSED_NEED
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
            o0, o1, o2, o3 = observe(state, i, obs_buf, si, ti)
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
            a = choose_action(acc, act_block[pos, i], alpha_g[g], sample_g[g])
            acts_buf[si, ti] = a
            term = _cartpole_row(state, i, a, gravity[i])
            steps[i] = ti + 1
            trunc = ti + 1 >= episode_steps
            rews_buf[si, ti] = 1.0
            if term or trunc:
                done[nd] = i
                row_term[i] = term
                row_trunc[i] = trunc
                nd += 1
        env_steps[0] += live
        if nd == 0:
            continue
        # ---------------- ended episodes: cap, gradients ----------------
        m = ended_episodes(
            done[:nd], row_trial, max_sub, n_sub, steps, row_term, row_trunc, k_row, k_g, k_sub,
            k_len, k_boot,
        )  # fmt: skip
        for q in range(m):
            i = k_row[q]
            g = k_g[q]
            si = slot[i]
            observe(state, i, obs_buf, si, k_len[q])  # s_T, recorded
            k_score[q] = episode_grad_t(
                row_tt[i], row_wd[i], si, obs_buf, acts_buf, rews_buf, k_len[q], k_boot[q],
                gamma[g], lam[g], beta[g], literal[g], grads[q], scratch,
            )  # fmt: skip
            k_sub[q] += n_sub[g]  # the rank among the trial's arrivals -> the submission index
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
                out_int[0, o] = g
                out_int[1, o] = row_agent[i]
                out_int[2, o] = row_worker[i]
                out_int[3, o] = row_round[i]
                out_int[4, o] = k_sub[q]
                out_int[5, o] = row_version[i]
                out_real[0, o] = k_score[q]
                out_real[1, o] = gravity[i]
                for kk in range(d):
                    out_report[o, kk] = noisy[q, kk]
                    out_grad[o, kk] = grads[q, kk]
                out_n[0] = o + 1
            agg_one(*agg, g, noisy[q])
        any_ended = record_scores(k_g[:m], k_sub[:m], k_score[:m], book)
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
            transpose_row(theta[g], row_tt[i], row_wd[i])
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
    """Drop :func:`fused_block`'s cached machine code when a kernel compiled into it changed.

    Numba keys a cached function on its own source file only, and :func:`fused_block` has
    ``laplace_kernels()``, ``prs_kernels()`` and the lock-step kernels it shares (``_SHARED``,
    from :mod:`ldp_audit.training.pgc_a3c._kernels`) compiled into it: an edit of
    ``ldp_audit/mechanisms/laplace.py``, ``prs.py`` or ``_kernels.py`` would otherwise keep
    running the old kernels from the cache. A fingerprint of their bytecode is kept beside the
    cache.
    """
    import hashlib
    from pathlib import Path

    h = hashlib.sha256()
    for k in (*_LAPLACE, *_PRS, *_SHARED):
        code = k.py_func.__code__
        h.update(code.co_code)
        h.update(repr((code.co_consts, code.co_names)).encode())
    fp = h.hexdigest()
    cache = getattr(fused_block, "_cache", None)
    path_of = getattr(cache, "cache_path", None)
    if path_of is None or not hasattr(cache, "flush"):
        return
    stamp = Path(path_of) / "_fused_kernel.fused_block.kernels.sha256"
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
