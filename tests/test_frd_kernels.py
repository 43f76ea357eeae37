"""The compiled FRD step kernels (training/frd/kernels.py) against torch autograd + Adam."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ldp_audit.training.frd.kernels import a2c_update_rows, act_rows
from ldp_audit.training.frd.nets import Nets


def _sizes(H, L):
    """(parameters of actor + critic, parameters of the actor) of the engine's layout."""
    nets = Nets(H, L, 1, np.random.default_rng(0))
    return nets.P, nets.actor_size


def _torch_nets(flat: np.ndarray, H: int, L: int):
    """Actor and critic ``torch.nn.Sequential`` loaded from one flat row (kernel layout)."""
    sizes = [4] + [H] * L
    nets, off = [], 0
    for nout in (2, 1):
        mods = []
        for k, (fi, fo) in enumerate(zip(sizes, sizes[1:] + [nout], strict=True)):
            lin = torch.nn.Linear(fi, fo)
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(flat[off : off + fi * fo].reshape(fi, fo).T))
                lin.bias.copy_(torch.from_numpy(flat[off + fi * fo : off + fi * fo + fo]))
            off += fi * fo + fo
            mods.append(lin)
            if k < L:
                mods.append(torch.nn.ReLU())
        nets.append(torch.nn.Sequential(*mods).double())
    return nets


def _load(actor, critic, flat: np.ndarray) -> None:
    off = 0
    with torch.no_grad():
        for net in (actor, critic):
            for mod in net:
                if isinstance(mod, torch.nn.Linear):
                    fo, fi = mod.weight.shape
                    mod.weight.copy_(torch.from_numpy(flat[off : off + fi * fo].reshape(fi, fo).T))
                    mod.bias.copy_(torch.from_numpy(flat[off + fi * fo : off + fi * fo + fo]))
                    off += fi * fo + fo


def _flat_of(actor, critic) -> np.ndarray:
    out = []
    for net in (actor, critic):
        for mod in net:
            if isinstance(mod, torch.nn.Linear):
                out += [mod.weight.detach().numpy().T.reshape(-1), mod.bias.detach().numpy()]
    return np.concatenate(out)


@pytest.mark.parametrize("H, L", [(24, 2), (7, 1), (5, 3)])
def test_kernels_match_torch_autograd_and_adam(H, L):
    rng = np.random.default_rng(H * 10 + L)
    A, (P, pa) = 5, _sizes(H, L)
    flat = rng.normal(0.0, 0.4, size=(A, P)).astype(np.float32)
    m1 = np.zeros((A, P), np.float32)
    m2 = np.zeros((A, P), np.float32)
    t = np.zeros(A)
    rows = np.array([0, 2, 3, 4])  # row 1 idle: must stay untouched
    gamma = np.full(A, 0.99)
    fail = np.full(A, -100.0)
    la, lc = np.full(A, 1e-3), np.full(A, 5e-3)
    ref = {r: _torch_nets(flat[r].astype(np.float64), H, L) for r in rows}
    # reference Adam state (float64), the formula the engine declares (docs/frd.md)
    ref_m = {r: np.zeros(P) for r in rows}
    ref_v = {r: np.zeros(P) for r in rows}
    lr_vec = np.where(np.arange(P) < pa, 1e-3, 5e-3)
    before_idle = flat[1].copy()
    for step in range(4):
        obs = rng.normal(0.0, 0.3, size=(A, 4)).astype(np.float32)
        obs2 = rng.normal(0.0, 0.3, size=(A, 4)).astype(np.float32)
        u = rng.random(A)
        term = np.array([False, False, step % 2 == 0, True, False])
        pi, act, adv = np.zeros(A), np.zeros(A, np.int64), np.zeros(A)
        act_rows(flat, rows, obs, u, H, L, pi, act)
        want_act = {}
        for r in rows:
            actor, critic = ref[r]
            x = torch.from_numpy(obs[r].astype(np.float64))
            p = torch.softmax(actor(x), dim=0)
            assert pi[r] == pytest.approx(float(p[0].detach()), rel=1e-5, abs=1e-6)
            want_act[r] = int(u[r] >= pi[r])
            assert act[r] == want_act[r]
        a2c_update_rows(flat, m1, m2, t, rows, obs, obs2, act, term, gamma, fail, la, lc, H, L,
                        pa, adv)  # fmt: skip
        for r in rows:
            actor, critic = ref[r]
            x = torch.from_numpy(obs[r].astype(np.float64))
            x2 = torch.from_numpy(obs2[r].astype(np.float64))
            with torch.no_grad():
                target = -100.0 if term[r] else 1.0 + 0.99 * float(critic(x2)[0])
            a_ = target - critic(x)[0]
            logp = torch.log_softmax(actor(x), dim=0)[act[r]]
            loss = -logp * a_.detach() + 0.5 * a_.pow(2)
            actor.zero_grad()
            critic.zero_grad()
            loss.backward()
            grad = np.concatenate(
                [mod.weight.grad.numpy().T.reshape(-1) if k == 0 else mod.bias.grad.numpy()
                 for net in (actor, critic) for mod in net if isinstance(mod, torch.nn.Linear)
                 for k in (0, 1)]
            )  # fmt: skip
            ref_m[r] = 0.9 * ref_m[r] + 0.1 * grad
            ref_v[r] = 0.999 * ref_v[r] + 0.001 * grad**2
            n = step + 1
            upd = lr_vec * np.sqrt(1 - 0.999**n) / (1 - 0.9**n) * ref_m[r]
            new = _flat_of(actor, critic) - upd / (np.sqrt(ref_v[r]) + 1e-8)
            _load(actor, critic, new)
            assert adv[r] == pytest.approx(float(a_.detach()), rel=1e-4, abs=1e-4)
            np.testing.assert_allclose(flat[r], _flat_of(actor, critic), rtol=1e-4, atol=2e-6)
    np.testing.assert_array_equal(flat[1], before_idle)
    assert t.tolist() == [4.0, 0.0, 4.0, 4.0, 4.0]


def test_a_rows_result_does_not_depend_on_its_batch():
    H, L = 24, 2
    P, pa = _sizes(H, L)
    rng = np.random.default_rng(1)
    base = rng.normal(0.0, 0.4, size=(6, P)).astype(np.float32)
    obs = rng.normal(0.0, 0.3, size=(6, 4)).astype(np.float32)
    obs2 = rng.normal(0.0, 0.3, size=(6, 4)).astype(np.float32)
    act = rng.integers(0, 2, 6)
    term = np.zeros(6, bool)
    outs = []
    for rows in (np.arange(6), np.array([3])):
        f, m1, m2, t = base.copy(), np.zeros_like(base), np.zeros_like(base), np.zeros(6)
        a2c_update_rows(f, m1, m2, t, rows, obs, obs2, act, term, np.full(6, 0.99),
                        np.full(6, -100.0), np.full(6, 1e-3), np.full(6, 5e-3), H, L, pa,
                        np.zeros(6))  # fmt: skip
        outs.append(f[3])
    np.testing.assert_array_equal(outs[0], outs[1])


def _grid_cells(g, states):
    """The cell ids of (n, 4) states on ProxyGrid ``g`` and whether a cut component was out of
    its range, in NumPy float64 (the reference for the compiled ``cells_rows``)."""
    out = ((states < g.low) | (states > g.high))[:, g.dims].any(axis=1)
    idx = np.floor((states[:, g.dims] - g.low[g.dims]) / g.width[g.dims])
    idx = np.clip(idx, 0, g.S - 1).astype(np.int64)
    return idx @ (g.S ** np.arange(len(g.dims), dtype=np.int64)), out


def test_cells_kernel_matches_proxy_grid_on_mixed_grids_and_counts_clipping():
    from ldp_audit.training.frd.config import setting_config
    from ldp_audit.training.frd.kernels import cells_rows
    from ldp_audit.training.frd.proxy import ProxyGrid

    cfgs = [setting_config(1), setting_config(3), setting_config(4, sections=7)]
    grids = [ProxyGrid(c.sections, c.proxy_dims, c.state_low, c.state_high) for c in cfgs]
    rng = np.random.default_rng(0)
    A = 300
    which = rng.integers(0, 3, A)
    hi = np.array(cfgs[0].state_high)
    obs = (rng.uniform(-1.3, 1.3, size=(A, 4)) * hi).astype(np.float32)  # ~1/4 out of range
    low = np.array([cfgs[w].state_low for w in which])
    high = np.array([cfgs[w].state_high for w in which])
    S = np.array([cfgs[w].sections for w in which], dtype=np.float64)
    mult = np.zeros((A, 4), np.int64)
    cut = np.zeros((A, 4), bool)
    for a, w in enumerate(which):
        for j, d in enumerate(cfgs[w].proxy_dims):
            mult[a, d], cut[a, d] = cfgs[w].sections ** j, True
    rows = np.flatnonzero(rng.random(A) < 0.7)
    cells, clipped = np.empty(rows.size, np.int64), np.empty(rows.size, bool)
    cells_rows(rows, obs, low, high, (high - low) / S[:, None], S, mult, cut, cells, clipped)
    for i, r in enumerate(rows):
        want_c, want_clip = _grid_cells(grids[which[r]], obs[r : r + 1].astype(np.float64))
        assert cells[i] == want_c[0] and clipped[i] == want_clip[0]
    assert 0 < clipped.sum() < rows.size
