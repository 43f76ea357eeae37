"""Benchmark: FedRL's batched GridWorld and batched training against the straightforward code.

1. Environment steps/s: :class:`VectorGridWorld` stepping B maps at once vs one
   ``gymnasium.make("ldp_audit/FedRLGridWorld-v0")`` env per map stepped in a Python loop
   (same maps, same random actions).
2. Training env-steps/s (DQN-alpha: same network, same replay, one minibatch update per 16 env
   steps): ours acts on 16 maps with one batched forward pass per step; the straightforward loop
   acts map by map (one forward pass and one gym step per map).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fedrl.py`` (writes
benchmarks/results/bench_fedrl.json). Measured on a shared, loaded 2-core machine: compare the
ratios, which are taken in the same run.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np


def bench_env(n_maps: int, steps: int) -> dict[str, float]:
    import gymnasium as gym

    from ldp_audit.training.gridworld import VectorGridWorld, generate_maps

    maps = generate_maps(16, n_maps, seed=0)
    rng = np.random.default_rng(0)
    acts = rng.integers(16, size=(steps, n_maps))
    vec = VectorGridWorld(maps, np.arange(n_maps), hist_len=4)
    vec.reset()
    t0 = time.perf_counter()
    n_vec = 0
    for t in range(steps):
        _, done, _, active = vec.step(acts[t])
        n_vec += int(active.sum())
        if done.any():
            idx = np.flatnonzero(done)
            vec.reset_slots(idx, vec.map_index[idx])
    t_vec = time.perf_counter() - t0
    envs = [gym.make("ldp_audit/FedRLGridWorld-v0", maps=maps, hist_len=4) for _ in range(n_maps)]
    for i, e in enumerate(envs):
        e.reset(options={"map_index": i})
    t0 = time.perf_counter()
    n_gym = 0
    for t in range(steps):
        for i, e in enumerate(envs):
            _, _, term, trunc, _ = e.step(int(acts[t, i]))
            n_gym += 1
            if term or trunc:
                e.reset(options={"map_index": i})
    t_gym = time.perf_counter() - t0
    return {
        "maps": n_maps,
        "steps_per_map": steps,
        "batched_steps_per_s": n_vec / t_vec,
        "gymnasium_steps_per_s": n_gym / t_gym,
        "ratio": (n_vec / t_vec) / (n_gym / t_gym),
    }


def bench_training(iterations: int, n_envs: int) -> dict[str, float]:
    import gymnasium as gym
    import torch

    from ldp_audit.training.fedrl import (
        FedRLConfig,
        _eps_greedy,
        _init_params,
        _local_q,
        _Replay,
        _train_runs,
    )
    from ldp_audit.training.gridworld import ALPHA_VIEW, generate_maps

    maps = generate_maps(8, 1000, seed=0)
    cfg = FedRLConfig(
        size=8,
        n_maps=1000,
        train_steps=iterations,
        n_envs=n_envs,
        eval_maps=1,
        methods=("dqn-alpha",),
    )
    out: dict[str, float] = {"iterations": iterations, "n_envs": n_envs}
    for method in ("dqn-alpha", "fedrl"):
        t0 = time.perf_counter()
        from ldp_audit.accountant import Accountant
        from ldp_audit.release import Transcript
        from ldp_audit.training.fedrl import _Log

        log = _Log(q=Transcript(), y=Transcript(), record=False)
        r = _train_runs(method, cfg, maps, [np.random.SeedSequence(1)], [0], Accountant(None), log)[
            0
        ]
        out[f"batched_{method}_env_steps_per_s"] = iterations * n_envs / r["train_seconds"]
        out[f"batched_{method}_seconds"] = time.perf_counter() - t0
    # straightforward: one gym env per map, one forward pass per map and step
    gen = torch.Generator().manual_seed(1)
    q = _local_q(ALPHA_VIEW, cfg.hist_len)
    _init_params(q, gen)
    tq = _local_q(ALPHA_VIEW, cfg.hist_len)
    tq.load_state_dict(q.state_dict())
    opt = torch.optim.Adam(q.parameters(), lr=cfg.lr)
    rep = _Replay(cfg.replay_size, cfg.hist_len)
    rng = np.random.default_rng(0)
    tr = maps.split["train"]
    envs = [
        gym.make("ldp_audit/FedRLGridWorld-v0", maps=maps, hist_len=cfg.hist_len)
        for _ in range(n_envs)
    ]
    obs = [e.reset(options={"map_index": int(tr[i])})[0] for i, e in enumerate(envs)]
    t0 = time.perf_counter()
    steps = 0
    for it in range(iterations):
        eps = max(cfg.eps_end, 1 - it / cfg.eps_decay)
        for i, e in enumerate(envs):
            with torch.no_grad():
                qa = q(torch.as_tensor(obs[i]["alpha"][None])).numpy()
            a = int(_eps_greedy(qa, eps, rng)[0])
            o2, r, term, trunc, _ = e.step(a)
            rep.add(
                obs[i]["alpha"][None],
                obs[i]["beta"][None],
                np.array([a]),
                np.array([r]),
                o2["alpha"][None],
                o2["beta"][None],
                np.array([float(term)]),
                np.array([0]),
            )
            obs[i] = o2
            if term or trunc:
                obs[i] = e.reset(options={"map_index": int(rng.choice(tr))})[0]
            steps += 1
        if rep.n >= cfg.learning_starts:
            j = rng.integers(rep.n, size=cfg.batch_size)
            with torch.no_grad():
                nxt = tq(torch.as_tensor(rep.sa2[j])).max(dim=1).values.numpy()
            y = torch.as_tensor(rep.r[j] + cfg.gamma * (1 - rep.d[j]) * nxt)
            qv = q(torch.as_tensor(rep.sa[j])).gather(1, torch.as_tensor(rep.a[j])[:, None])
            loss = ((qv.squeeze(1) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    t_loop = time.perf_counter() - t0
    out["loop_dqn-alpha_env_steps_per_s"] = steps / t_loop
    out["ratio_dqn-alpha"] = (
        out["batched_dqn-alpha_env_steps_per_s"] / out["loop_dqn-alpha_env_steps_per_s"]
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maps", type=int, default=800)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=400)
    ap.add_argument("--n-envs", type=int, default=16)
    args = ap.parse_args()
    res = {
        "machine": f"{platform.machine()} ({platform.processor() or 'cpu'}), 2 shared cores, "
        "loaded by other jobs",
        "env": bench_env(args.maps, args.steps),
        "training": bench_training(args.iterations, args.n_envs),
    }
    e, t = res["env"], res["training"]
    print(
        f"env: batched {e['batched_steps_per_s']:.0f} steps/s vs gymnasium loop "
        f"{e['gymnasium_steps_per_s']:.0f} steps/s: {e['ratio']:.0f}x ({e['maps']} maps)"
    )
    print(
        f"training (DQN-alpha, {t['n_envs']} maps): batched "
        f"{t['batched_dqn-alpha_env_steps_per_s']:.0f} env-steps/s vs per-map loop "
        f"{t['loop_dqn-alpha_env_steps_per_s']:.0f}: {t['ratio_dqn-alpha']:.1f}x; FedRL batched "
        f"{t['batched_fedrl_env_steps_per_s']:.0f} env-steps/s"
    )
    out = Path(__file__).parent / "results" / "bench_fedrl.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
