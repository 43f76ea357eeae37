"""Compiled (Numba) per-step kernels of the FRD / FedAvg engine (:mod:`ldp_audit.training.frd`).

Each step of the batched A2C engine is, for every running agent, a forward pass of its actor at
the observation (the action), then — after Gymnasium's vectorised CartPole has stepped — a
forward pass of its critic at ``s`` and ``s'``, the one-step advantage of eq. 3, the backward pass
of both networks and one Adam step. With torch on stacked weights that was ~40 tensor calls per
step over *all* rows (idle ones masked), and the masked Adam dominated. Here each of the two
phases is one compiled loop over the running rows only: a row's parameters (a few KB) stay in
cache for its whole update, and an idle agent costs nothing.

Layout (shared with :class:`ldp_audit.training.frd._Nets`): one float32 row of ``P`` parameters
per agent, the actor's layers then the critic's; layer ``k`` is a ``(fan_in, fan_out)`` row-major
weight matrix followed by its ``fan_out`` bias (forward ``z = h @ W + b``), ReLU on hidden layers.

Rows are independent (a row's result never depends on which other rows share the batch) and the
kernels keep IEEE semantics (no ``fastmath``), so runs are bit-for-bit reproducible.
``tests/test_frd_kernels.py`` checks both kernels against torch autograd and ``torch.optim.Adam``.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

__all__ = ["act_rows", "a2c_update_rows", "cells_rows"]

_B1, _B2, _EPS = np.float32(0.9), np.float32(0.999), np.float32(1e-8)
_C1, _C2 = np.float32(1.0 - 0.9), np.float32(1.0 - 0.999)


@nb.njit(cache=True, nogil=True)
def _forward(w, off, x, H, L, nout, hs, z, out):  # noqa: ANN001, ANN202 - numba
    """MLP at ``w[off:]`` on the 4-vector ``x``; activations into ``hs`` (L+1, max(H, 4)),
    outputs into ``out``. Returns the offset just past the network."""
    for j in range(4):
        hs[0, j] = x[j]
    fi = 4
    for k in range(L + 1):
        fo = H if k < L else nout
        boff = off + fi * fo
        bias = w[boff : boff + fo]
        for o in range(fo):
            z[o] = bias[o]
        for i in range(fi):
            hi = hs[k, i]
            if hi != 0.0:
                wr = w[off + i * fo : off + i * fo + fo]
                for o in range(fo):
                    z[o] += hi * wr[o]
        if k < L:
            for o in range(fo):
                hs[k + 1, o] = z[o] if z[o] > 0.0 else 0.0
        else:
            for o in range(fo):
                out[o] = z[o]
        off = boff + fo
        fi = fo
    return off


@nb.njit(cache=True, nogil=True)
def _backward(w, off, H, L, nout, hs, dout, g, d, dprev):  # noqa: ANN001, ANN202 - numba
    """Gradient of ``sum(dout * out)`` w.r.t. the MLP at ``w[off:]`` (activations ``hs`` from
    :func:`_forward`) written into ``g`` at the same offsets."""
    offs = np.empty(L + 1, dtype=np.int64)
    fi = 4
    for k in range(L + 1):
        fo = H if k < L else nout
        offs[k] = off
        off += fi * fo + fo
        fi = fo
    for o in range(nout):
        d[o] = dout[o]
    fo = nout
    for k in range(L, -1, -1):
        fi = 4 if k == 0 else H
        base = offs[k]
        boff = base + fi * fo
        gb = g[boff : boff + fo]
        for o in range(fo):
            gb[o] = d[o]
        for i in range(fi):
            hi = hs[k, i]
            gr = g[base + i * fo : base + i * fo + fo]
            for o in range(fo):
                gr[o] = hi * d[o]
        if k > 0:
            for i in range(fi):
                if hs[k, i] > 0.0:
                    acc = 0.0
                    wr = w[base + i * fo : base + i * fo + fo]
                    for o in range(fo):
                        acc += wr[o] * d[o]
                    dprev[i] = acc
                else:
                    dprev[i] = 0.0
            for i in range(fi):
                d[i] = dprev[i]
        fo = fi


@nb.njit(cache=True, nogil=True)
def _pi_left(z0, z1):  # noqa: ANN001, ANN202 - numba
    """Softmax probability of action 0 from the two logits, without overflow."""
    dz = z1 - z0
    if dz > 0.0:
        e = math.exp(-dz)
        return e / (1.0 + e)
    return 1.0 / (1.0 + math.exp(dz))


@nb.njit(cache=True, nogil=True)
def _adam(w, mr, vr, g, lo, hi, step):  # noqa: ANN001, ANN202 - numba
    """Adam moments and update of ``w[lo:hi]`` with step size ``step`` (bias correction in),
    in float32 like the buffers (memory-bound: 7 float32 moves per parameter)."""
    st = np.float32(step)
    ws, ms, vs, gs = w[lo:hi], mr[lo:hi], vr[lo:hi], g[lo:hi]
    for j in range(hi - lo):
        gj = gs[j]
        mj = _B1 * ms[j] + _C1 * gj
        vj = _B2 * vs[j] + _C2 * gj * gj
        ms[j] = mj
        vs[j] = vj
        ws[j] -= st * mj / (np.sqrt(vj) + _EPS)


@nb.njit(cache=True, nogil=True)
def act_rows(flat, rows, obs, u, H, L, pi_left, actions):  # noqa: ANN001, ANN201 - numba
    """Actor forward for ``rows``: ``pi_left[r]`` = pi(left | obs[r]) and the action
    ``actions[r] = 0 if u[r] < pi_left[r] else 1`` (action 0 with probability pi_left)."""
    m = max(H, 4)
    hs = np.empty((L + 1, m), dtype=np.float32)
    z = np.empty(m, dtype=np.float32)
    out = np.empty(2)
    for r in rows:
        _forward(flat[r], 0, obs[r], H, L, 2, hs, z, out)
        p = _pi_left(out[0], out[1])
        pi_left[r] = p
        actions[r] = 0 if u[r] < p else 1


@nb.njit(cache=True, nogil=True)
def a2c_update_rows(  # noqa: ANN201 - numba
    flat,
    m1,
    m2,
    t,
    rows,
    obs,
    obs2,
    actions,
    term,
    gamma,
    fail,
    lr_actor,
    lr_critic,
    H,
    L,
    pa,
    adv_out,
):  # noqa: ANN001
    """One online A2C step (eq. 3) and one Adam step for each row in ``rows``, in place.

    Advantage ``adv = r + gamma V(s') (not terminal) - V(s)`` with ``r = fail`` on termination
    else 1 (a time-limit truncation bootstraps); actor loss ``-log pi(a|s) adv`` (adv constant),
    critic loss ``adv^2 / 2`` (target constant). Adam (beta 0.9, 0.999, eps 1e-8, per-row step
    count ``t``) with step size ``lr * sqrt(1 - b2^t) / (1 - b1^t)`` and eps added to
    ``sqrt(v)``; ``lr_actor`` on the first ``pa`` parameters, ``lr_critic`` on the rest.
    ``adv_out[r]`` receives the advantage.
    """
    P = flat.shape[1]
    mm = max(H, 4)
    hs = np.empty((L + 1, mm), dtype=np.float32)
    z = np.empty(mm, dtype=np.float32)
    d = np.empty(mm, dtype=np.float32)
    dprev = np.empty(mm, dtype=np.float32)
    out = np.empty(2)
    vout = np.empty(1)
    dl = np.empty(2)
    dv = np.empty(1)
    g = np.empty(P, dtype=np.float32)
    for r in rows:
        w = flat[r]
        # critic at s' first (its activations are not needed), then at s (kept for backward)
        _forward(w, pa, obs2[r], H, L, 1, hs, z, vout)
        v_next = vout[0]
        _forward(w, pa, obs[r], H, L, 1, hs, z, vout)
        if term[r]:
            target = fail[r]
        else:
            target = 1.0 + gamma[r] * v_next
        adv = target - vout[0]
        adv_out[r] = adv
        dv[0] = -adv
        _backward(w, pa, H, L, 1, hs, dv, g, d, dprev)
        _forward(w, 0, obs[r], H, L, 2, hs, z, out)
        p0 = _pi_left(out[0], out[1])
        a = actions[r]
        dl[0] = (p0 - (1.0 if a == 0 else 0.0)) * adv
        dl[1] = ((1.0 - p0) - (1.0 if a == 1 else 0.0)) * adv
        _backward(w, 0, H, L, 2, hs, dl, g, d, dprev)
        tt = t[r] + 1.0
        t[r] = tt
        bc = math.sqrt(1.0 - 0.999**tt) / (1.0 - 0.9**tt)
        sa = lr_actor[r] * bc
        sc = lr_critic[r] * bc
        _adam(w, m1[r], m2[r], g, 0, pa, sa)
        _adam(w, m1[r], m2[r], g, pa, P, sc)


@nb.njit(cache=True, nogil=True)
def cells_rows(rows, obs, low, high, width, S, mult, cut, cells, clipped):  # noqa: ANN001, ANN201
    """Proxy-grid cell id of ``obs[r]`` on row ``r``'s own grid for each ``r`` in ``rows``:
    ``sum_j clip(floor((s_j - low_j) / width_j), 0, S - 1) * mult_j`` over the cut components
    (``mult_j = 0`` for a component that is not cut); ``clipped[i]`` is True when a cut
    component lies outside ``[low_j, high_j]`` (the state is clipped into the edge cell).
    Outputs are indexed by position ``i`` in ``rows``; float64 arithmetic (``tests/
    test_frd_kernels.py`` checks it against a NumPy reference)."""
    for i in range(rows.shape[0]):
        r = rows[i]
        c = 0
        out = False
        top = S[r] - 1.0
        for j in range(4):
            if cut[r, j]:
                s = np.float64(obs[r, j])
                if s < low[r, j] or s > high[r, j]:
                    out = True
                k = math.floor((s - low[r, j]) / width[r, j])
                if k < 0.0:
                    k = 0.0
                elif k > top:
                    k = top
                c += np.int64(k) * mult[r, j]
        cells[i] = c
        clipped[i] = out
