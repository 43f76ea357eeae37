"""Training: one method for K runs at once (batched over runs and maps), the replay memory and
one minibatch update (eqs. 4-7 for FedRL).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ldp_audit.training.fedrl.config import FedRLConfig
from ldp_audit.training.fedrl.evaluation import brief, eps_greedy, eval_runs, joint_q
from ldp_audit.training.fedrl.exchange import (
    KIND_ACT,
    KIND_BATCH,
    KIND_FEDRL1,
    KIND_FEDRL2,
    KIND_NEXT,
    Exchange,
    Log,
    check_finite,
)
from ldp_audit.training.fedrl.gridworld import (
    ALPHA_VIEW,
    BETA_VIEW,
    MapSet,
    VectorGridWorld,
)
from ldp_audit.training.fedrl.networks import (
    Stacked,
    full_q_class,
    fwd_full_q,
    fwd_local_q,
    fwd_mlp,
    local_q,
    mlp,
)

# ----------------------------------------------------------------------------------------------
# Replay memory (each agent's half kept apart; rows aligned by index = the shared "ID")
# ----------------------------------------------------------------------------------------------


class _Replay:
    #: a transition's columns, in add's order: alpha's and beta's windows, the joint action,
    #: alpha's (private) reward, the next windows, done, obstacles hit (attack ground truth)
    COLUMNS = ("sa", "sb", "a", "r", "sa2", "sb2", "d", "bump")

    def __init__(self, cap: int, hist: int) -> None:
        self.cap, self.n, self.i = cap, 0, 0
        wa, wb = (hist, ALPHA_VIEW, ALPHA_VIEW), (hist, BETA_VIEW, BETA_VIEW)
        f4, i8 = np.float32, np.int64
        kinds = ((wa, f4), (wb, f4), ((), i8), ((), f4), (wa, f4), (wb, f4), ((), f4), ((), i8))
        for name, (shape, dtype) in zip(self.COLUMNS, kinds, strict=True):
            setattr(self, name, np.zeros((cap, *shape), dtype))

    def add(self, *columns: np.ndarray) -> None:
        idx = (self.i + np.arange(len(columns[0]))) % self.cap
        for name, v in zip(self.COLUMNS, columns, strict=True):
            getattr(self, name)[idx] = v
        self.i = int((self.i + idx.size) % self.cap)
        self.n = min(self.cap, self.n + idx.size)


# ----------------------------------------------------------------------------------------------
# One method, K runs
# ----------------------------------------------------------------------------------------------


def train_runs(
    method: str,
    cfg: FedRLConfig,
    maps: MapSet,
    seed_seqs: Sequence[np.random.SeedSequence],
    trials: Sequence[int],
    accountant: Any,
    log: Log,
    progress: Any = None,
    extras: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Train one method for K runs at once (batched over runs and maps); evaluate each run.

    ``extras`` (None: nothing more, the results of before the option existed): further
    evaluations of the same networks, each with its own child generators (every random stream
    of the training and of Table 1's evaluation is unchanged; the extra releases are charged
    to their own ledger agents, ``@curve1`` / ``@curve2`` / ``@explore``):

    * ``curve_points`` P, ``curve_maps`` M: at P evenly spaced iterations, greedy episodes on
      the first M test maps (FedRL: noisy, FedRL-1, and noise-free, FedRL-2): learning curves;
    * ``explore`` (eps, ...): after training, epsilon-greedy episodes on the test maps
      (FedRL: the noise-free outputs, FedRL-2's protocol), beside Table 1's greedy ones.
    """
    import torch

    kk = len(trials)
    spawned = [s.spawn(6) for s in seed_seqs]
    gens = [torch.Generator().manual_seed(int(sp[5].generate_state(1)[0])) for sp in spawned]
    master = np.random.SeedSequence([int(sp[0].generate_state(1)[0]) for sp in spawned])
    s_env, s_act, s_rep, s_alpha, s_beta = master.spawn(5)
    rng_env, rng_act, rng_rep = (np.random.default_rng(x) for x in (s_env, s_act, s_rep))
    h, n = cfg.hist_len, cfg.n_envs
    fed = method == "fedrl"
    from ldp_audit.training.device import resolve_device

    dev = torch.device(resolve_device(cfg.device))
    # each network: (module factory, stacked forward, view); the method's, initialised in order
    parts = {
        "qa": (lambda: local_q(ALPHA_VIEW, h), fwd_local_q, ALPHA_VIEW),
        "qb": (lambda: local_q(BETA_VIEW, h), fwd_local_q, BETA_VIEW),
        "qf": (lambda: full_q_class()(h), fwd_full_q, None),
        "g": (mlp, fwd_mlp, None),
    }
    names = {"dqn-alpha": ("qa",), "dqn-full": ("qf",)}.get(method, ("qa", "qb", "g"))
    nets = {n: Stacked(parts[n][0], gens, parts[n][1], parts[n][2], dev) for n in names}
    opt = torch.optim.Adam(
        [p for m in nets.values() for p in m.params.values()], lr=cfg.lr, fused=True
    )

    def exchange(seq_alpha: Any, seq_beta: Any, log: Log) -> Exchange:
        rngs = {"alpha": np.random.default_rng(seq_alpha), "beta": np.random.default_rng(seq_beta)}
        return Exchange(cfg, trials, accountant, rngs, log)

    ex = exchange(s_alpha, s_beta, log) if fed else None

    def tensor(x: np.ndarray) -> Any:  # (K n, ...) -> the networks' (K, n, ...) input
        return torch.as_tensor(x.reshape(kk, -1, *x.shape[1:]), device=dev)

    extras = dict(extras or {})
    n_pts = int(extras.get("curve_points", 0))
    checkpoints = sorted({max(1, round(cfg.train_steps * (i + 1) / n_pts)) for i in range(n_pts)})
    curve_test = maps.split["test"][: int(extras.get("curve_maps", cfg.eval_maps))]
    explore = tuple(float(e) for e in extras.get("explore", ()))
    xex, rng_explore = None, None
    if checkpoints or explore:  # own generators: no stream of the training is touched
        xss = np.random.SeedSequence([int(sp[0].generate_state(1)[0]) for sp in spawned] + [0x10E7])
        xs_alpha, xs_beta, xs_explore = xss.spawn(3)
        rng_explore = np.random.default_rng(xs_explore)
        if fed:
            xex = exchange(xs_alpha, xs_beta, Log(record=False))
    curve_evals: list[dict[str, list[dict[str, Any]]]] = []

    # (label, exchange, transcript kind, mechanism, ledger suffix) of each evaluation
    solo = (("DQN-alpha" if method == "dqn-alpha" else "DQN-full", None, 0, None, ""),)

    def evaluate(test: np.ndarray, modes: Any, eps: float = 0.0) -> dict[str, Any]:
        return {
            lab: eval_runs(cfg, maps, test, nets, method, e, kk, kind, mech, sfx, eps, rng_explore)
            for lab, e, kind, mech, sfx in modes
        }

    def extra_eval(test: np.ndarray, eps: float) -> dict[str, list[dict[str, Any]]]:
        if not fed:
            return evaluate(test, solo, eps)
        if eps == 0:
            curves = (
                ("FedRL-1", xex, -1, xex.mech, "@curve1"),
                ("FedRL-2", xex, -1, xex.clean, "@curve2"),
            )
            return evaluate(test, curves)
        return evaluate(test, (("FedRL-2", xex, -1, xex.clean, "@explore"),), eps)

    train_idx = maps.split["train"]
    env = VectorGridWorld(
        maps, rng_env.choice(train_idx, kk * n), hist_len=h, meeting_rule=cfg.meeting_rule
    )
    sa, sb = env.reset()
    reps = [_Replay(cfg.replay_size, h) for _ in range(kk)]
    ep_ret = np.zeros(kk * n)
    every = max(1, cfg.train_steps // 20)
    curve_s, curve_r, win_s, win_r = ([[] for _ in range(kk)] for _ in range(4))
    updates = syncs = 0
    losses: list[float] = []
    t0 = time.perf_counter()
    block = cfg.prepay_block
    for it in range(cfg.train_steps):
        if fed and it % block == 0:
            n_it = min(block, cfg.train_steps - it)
            n_up = sum(1 for j in range(it, it + n_it) if (j + 1) * n >= cfg.learning_starts)
            ex.prepay_training(n_it, n_up)
        if ex is not None:
            ex.step = it
        eps = cfg.eps_start + (cfg.eps_end - cfg.eps_start) * min(1.0, it / cfg.eps_decay)
        with torch.inference_mode():
            q = joint_q(
                method, nets, ex, (sa, sb), tensor, KIND_ACT, map_index=env.map_index.copy()
            )
            check_finite(cfg, q, "the joint Q-values are", it)
        act = eps_greedy(q.cpu().numpy(), eps, rng_act).reshape(-1)
        r, done, met, _ = env.step(act)
        sa2, sb2 = env.observe()
        bumps = env.last_bumps.sum(1)
        term = (done & met).astype(np.float32)
        for k in range(kk):
            s = slice(k * n, (k + 1) * n)
            reps[k].add(sa[s], sb[s], act[s], r[s], sa2[s], sb2[s], term[s], bumps[s])
        ep_ret += r
        slots = np.flatnonzero(done)
        for slot in slots:
            win_s[slot // n].append(float(met[slot]))
            win_r[slot // n].append(float(ep_ret[slot]))
        ep_ret[done] = 0.0
        if slots.size:
            env.reset_slots(slots, rng_env.choice(train_idx, slots.size))
            sa2, sb2 = env.observe()
        sa, sb = sa2, sb2
        if reps[0].n >= cfg.learning_starts:
            j = rng_rep.integers(reps[0].n, size=(kk, cfg.batch_size))
            losses.append(_update(method, cfg, nets, reps, j, opt, ex))
            updates += 1
            if updates % cfg.target_update == 0:  # the public code never does this
                for m in nets.values():
                    m.sync()
                syncs += 1
        if checkpoints and it + 1 in checkpoints:
            curve_evals.append(extra_eval(curve_test, 0.0))
        if (it + 1) % every == 0:
            for k in range(kk):
                curve_s[k].append(float(np.mean(win_s[k])) if win_s[k] else float("nan"))
                curve_r[k].append(float(np.mean(win_r[k])) if win_r[k] else float("nan"))
                win_s[k], win_r[k] = [], []
        if progress is not None:
            progress.update(kk)
    train_seconds = time.perf_counter() - t0
    test = maps.split["test"][: cfg.eval_maps]
    tests = (
        (
            ("FedRL-1", ex, KIND_FEDRL1, ex.mech, "@fedrl1"),
            ("FedRL-2", ex, KIND_FEDRL2, ex.clean, "@fedrl2"),
        )
        if fed
        else solo
    )
    evals = evaluate(test, tests)
    explore_evals = {eps: extra_eval(test, eps) for eps in explore}
    out = []
    for k, trial in enumerate(trials):
        res = {
            "method": method,
            "trial": int(trial),
            "train_seconds": train_seconds,
            "runs_batched": kk,
            "updates": updates,
            "target_syncs": syncs,
            "final_loss": float(np.mean(losses[-50:])) / kk if losses else None,
            "curve_success": curve_s[k],
            "curve_return": curve_r[k],
            "curve_every": every,
            "state": {name: m.state(k) for name, m in nets.items()},
        }
        for label, ev in evals.items():
            res[label] = ev[k]
        if checkpoints:
            res["eval_curve"] = {
                "iterations": checkpoints,
                "maps": int(len(curve_test)),
                "methods": {lab: [brief(c[lab][k]) for c in curve_evals] for lab in curve_evals[0]},
            }
        if explore:
            res["explore_eval"] = {
                lab: {
                    "0": brief(evals[lab][k]),
                    **{f"{e:g}": brief(explore_evals[e][lab][k]) for e in explore},
                }
                for lab in explore_evals[explore[0]]
            }
        out.append(res)
    return out


def _update(
    method: str,
    cfg: FedRLConfig,
    nets: dict,
    reps: list[_Replay],
    j: np.ndarray,
    opt: Any,
    ex: Exchange | None,
) -> float:
    """One minibatch step of every run (eqs. 4-7 for FedRL); returns the summed loss."""
    import torch

    def g(name: str) -> np.ndarray:
        return np.stack([getattr(rep, name)[jj] for rep, jj in zip(reps, j, strict=True)])

    dev = next(iter(nets.values())).device
    sa_np, sb_np, sa2_np, sb2_np = g("sa"), g("sb"), g("sa2"), g("sb2")
    sa, sb, sa2, sb2, a = (
        torch.as_tensor(x, device=dev) for x in (sa_np, sb_np, sa2_np, sb2_np, g("a"))
    )
    r = g("r").astype(np.float64)
    notdone = 1.0 - g("d").astype(np.float64)
    if method != "fedrl":  # DQN-alpha: alpha's view only; DQN-full: both views, one network
        net = nets["qa"] if method == "dqn-alpha" else nets["qf"]
        ins, ins2 = ((sa,), (sa2,)) if method == "dqn-alpha" else ((sa, sb), (sa2, sb2))
        with torch.inference_mode():
            nxt = net.tgt(*ins2).max(dim=-1).values.double().cpu().numpy()
        y = torch.as_tensor(r + cfg.gamma * notdone * nxt, dtype=torch.float32, device=dev)
        q = net(*ins)
    else:
        # beta -> alpha: C_beta(s_j) and C'_beta(s'_j) (beta's target network)
        cb = ex.send("beta", nets["qb"](sb), sb_np, KIND_BATCH)
        with torch.inference_mode():
            cb2 = ex.send("beta", nets["qb"].tgt(sb2), sb2_np, KIND_NEXT)
            # alpha computes Y from its own target outputs (noised, eq. 4) and C'_beta
            qa2 = nets["qa"].tgt(sa2)
            k, b = qa2.shape[0], qa2.shape[1]
            qa2n = ex.mech.privatize(
                qa2.reshape(k * b, -1).cpu().numpy().astype(np.float64), ex.rngs["alpha"]
            )
            qa2 = torch.as_tensor(qa2n, dtype=torch.float32, device=dev).reshape(k, b, -1)
            nxt = nets["g"].tgt(torch.cat([qa2, cb2], dim=-1)).max(dim=-1).values
            nxt = nxt.double().cpu().numpy()
        y_clean = r + cfg.gamma * notdone * nxt
        # alpha -> beta: C_alpha(s_j) and Y; the MLP sees released values only
        ca = ex.send("alpha", nets["qa"](sa), sa_np, KIND_BATCH)
        y = torch.as_tensor(ex.send_y(y_clean, r, g("bump")), dtype=torch.float32, device=dev)
        q = nets["g"](torch.cat([ca, cb], dim=-1))
    taken = q.gather(-1, a[..., None]).squeeze(-1)
    loss = ((taken - y) ** 2).mean(dim=1).sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())
