"""Benchmark: the batched FRD/FedAvg engine vs one env + one torch model per agent.

The straightforward implementation (the reference) trains each agent on its own Gymnasium
``CartPoleEnv`` with its own ``torch.nn`` actor and critic and ``torch.optim.Adam``, one agent
after the other in a Python loop, with the same online A2C update (eq. 3), network size
(Table 1 setting 1: 2 x 24 ReLU) and hyperparameters. The batched engine
(:func:`ldp_audit.training.frd.train_many`) steps every agent at once. Both play the same number
of episodes per agent; we report agent-episodes/s and agent-steps/s and their ratio (episode
lengths differ between the two because the random streams differ, so agent-steps/s is the fairer
rate). The reference runs on a subset of agents (its cost is linear in the agent count).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_frd.py [--agents 512] [--ref-agents 8]
        [--episodes 20] [--reps 5] [--json benchmarks/results/bench_frd.json]

Both are timed in wall-clock AND process CPU time, interleaved over ``--reps`` repetitions (a
new seed each), and the ratio's median and range are reported: on a shared machine the wall
ratio moves with the load, the CPU ratio much less.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

import numpy as np


def reference(n_agents: int, episodes: int, seed: int) -> tuple[float, int, int]:
    """One env + one torch model per agent, Python loop. Returns (seconds, episodes, steps)."""
    import gymnasium as gym
    import torch
    from torch import nn

    torch.manual_seed(seed)  # benchmark script only (library code never seeds globally)
    rng = np.random.default_rng(seed)
    steps = eps = 0
    t0 = time.perf_counter()
    for _ in range(n_agents):
        env = gym.make("CartPole-v1").unwrapped
        env.gravity = float(rng.choice([9.7, 9.8, 9.9]))
        actor = nn.Sequential(nn.Linear(4, 24), nn.ReLU(), nn.Linear(24, 24), nn.ReLU(),
                              nn.Linear(24, 2))  # fmt: skip
        critic = nn.Sequential(nn.Linear(4, 24), nn.ReLU(), nn.Linear(24, 24), nn.ReLU(),
                               nn.Linear(24, 1))  # fmt: skip
        oa = torch.optim.Adam(actor.parameters(), lr=1e-3)
        oc = torch.optim.Adam(critic.parameters(), lr=5e-3)
        for _ in range(episodes):
            s, _ = env.reset(seed=int(rng.integers(2**31)))
            for t in range(500):
                x = torch.as_tensor(s, dtype=torch.float32)
                pi = torch.softmax(actor(x), dim=-1)
                act = int(rng.random() >= float(pi[0].detach()))
                s2, _, term, _, _ = env.step(act)
                r = -100.0 if term else 1.0
                v = critic(x)[0]
                with torch.no_grad():
                    target = r + (0.0 if term else 0.99 * float(critic(torch.as_tensor(
                        s2, dtype=torch.float32))[0]))  # fmt: skip
                adv = target - v
                loss_a = -torch.log(pi[act]) * adv.detach()
                loss_c = 0.5 * adv.pow(2)
                oa.zero_grad()
                oc.zero_grad()
                (loss_a + loss_c).backward()
                oa.step()
                oc.step()
                steps += 1
                s = s2
                if term or t == 499:
                    break
            eps += 1
    return time.perf_counter() - t0, eps, steps


def batched(n_agents: int, episodes: int, seed: int) -> tuple[float, float, int, int]:
    """The engine. Returns (wall seconds, CPU seconds, agent-episodes, agent-steps)."""
    from ldp_audit.training.frd.config import setting_config
    from ldp_audit.training.frd.engine import train_many

    # no exchange within the benchmark (I >= episodes): the same work as the reference
    cfg = setting_config(
        1, n_agents=1, groups=n_agents, max_episodes=episodes, initial_episodes=episodes,
        stop_at_mission=False,
    )  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    r = train_many([cfg], seed=seed)[0]
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    return secs, cpu, int(r.agent_episodes), int(np.nansum(r.scores))


def _timed_reference(n: int, episodes: int, seed: int) -> tuple[float, float, int, int]:
    c0 = time.process_time()
    secs, eps, steps = reference(n, episodes, seed)
    return secs, time.process_time() - c0, eps, steps


def _spread(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs, dtype=np.float64)
    return {"median": float(np.median(a)), "min": float(a.min()), "max": float(a.max())}


def kernel_costs(agents: int = 512, calls: int = 50) -> dict[str, dict[str, float]]:
    """Process CPU microseconds per row of the two step kernels, per Table 1 network shape."""
    from ldp_audit.training.frd.kernels import a2c_update_rows, act_rows
    from ldp_audit.training.frd.nets import Nets

    out = {}
    for H, L in ((24, 2), (100, 2), (24, 1)):
        sizes = Nets(H, L, 1, np.random.default_rng(0))
        P, pa = sizes.P, sizes.actor_size
        rng = np.random.default_rng(0)
        flat = rng.normal(0, 0.3, (agents, P)).astype(np.float32)
        m1, m2, t = np.zeros_like(flat), np.zeros_like(flat), np.zeros(agents)
        obs = rng.normal(0, 0.3, (agents, 4)).astype(np.float32)
        act, term = np.zeros(agents, np.int64), np.zeros(agents, bool)
        rows, pi, adv, u = np.arange(agents), np.zeros(agents), np.zeros(agents), rng.random(agents)
        per = [np.full(agents, v) for v in (0.99, -100.0, 1e-3, 5e-3)]

        def upd() -> None:
            a2c_update_rows(flat, m1, m2, t, rows, obs, obs, act, term, *per, H, L, pa, adv)  # noqa: B023

        act_rows(flat, rows, obs, u, H, L, pi, act)  # compile / warm
        upd()
        c = time.process_time()
        for _ in range(calls):
            act_rows(flat, rows, obs, u, H, L, pi, act)
        ca = (time.process_time() - c) / calls / agents * 1e6
        c = time.process_time()
        for _ in range(calls):
            upd()
        cu = (time.process_time() - c) / calls / agents * 1e6
        out[f"{H}x{L}"] = {"act_us_per_row": ca, "update_us_per_row": cu, "params": P}
        print(f"kernels {H}x{L} ({P} parameters): act_rows {ca:.2f} us/row, "
              f"a2c_update_rows {cu:.2f} us/row (CPU)")  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=512)
    ap.add_argument("--ref-agents", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5, help="interleaved repetitions of both")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="benchmarks/results/bench_frd.json")
    ap.add_argument(
        "--kernels", action="store_true", help="only the per-row CPU cost of the step kernels"
    )
    args = ap.parse_args()
    if args.kernels:
        kernel_costs()
        return 0
    batched(4, 2, args.seed)  # warm-up (imports, compiled kernels)
    reps = []
    for i in range(args.reps):
        # interleaved, so that both see the same load; a new seed per repetition
        rw, rc, re_, rst = _timed_reference(args.ref_agents, args.episodes, args.seed + i)
        bw, bc, be, bst = batched(args.agents, args.episodes, args.seed + i)
        rep = {
            "reference": {"agents": args.ref_agents, "wall_s": rw, "cpu_s": rc,
                          "agent_episodes": re_, "agent_steps": rst},
            "batched": {"agents": args.agents, "wall_s": bw, "cpu_s": bc,
                        "agent_episodes": be, "agent_steps": bst},
        }  # fmt: skip
        for clock in ("wall", "cpu"):
            rr, bb = rep["reference"], rep["batched"]
            rep[f"ratio_steps_per_s_{clock}"] = (bb["agent_steps"] / bb[f"{clock}_s"]) / (
                rr["agent_steps"] / rr[f"{clock}_s"]
            )
            rep[f"ratio_episodes_per_s_{clock}"] = (bb["agent_episodes"] / bb[f"{clock}_s"]) / (
                rr["agent_episodes"] / rr[f"{clock}_s"]
            )
        reps.append(rep)
        print(
            f"rep {i}: reference {args.ref_agents} agents {rw:.2f} s wall / {rc:.2f} s CPU, "
            f"{rst / rc:.0f} agent-steps/CPU-s; batched {args.agents} agents {bw:.2f} s wall / "
            f"{bc:.2f} s CPU, {bst / bc:.0f} agent-steps/CPU-s; ratio agent-steps/s "
            f"{rep['ratio_steps_per_s_wall']:.1f}x wall, {rep['ratio_steps_per_s_cpu']:.1f}x CPU; "
            f"agent-episodes/s {rep['ratio_episodes_per_s_wall']:.1f}x wall, "
            f"{rep['ratio_episodes_per_s_cpu']:.1f}x CPU",
            flush=True,
        )
    out = {
        "machine": f"{platform.machine()}, shared, loaded 2-core machine",
        "load_average": list(os.getloadavg()),
        "episodes_per_agent": args.episodes,
        "reps": reps,
    }
    for key in ("ratio_steps_per_s_wall", "ratio_steps_per_s_cpu", "ratio_episodes_per_s_wall",
                "ratio_episodes_per_s_cpu"):  # fmt: skip
        out[key] = _spread([r[key] for r in reps])
    print(
        "ratio over {} repetitions, median [min, max]: agent-steps/s {:.1f}x [{:.1f}, {:.1f}] "
        "wall, {:.1f}x [{:.1f}, {:.1f}] CPU; agent-episodes/s {:.1f}x [{:.1f}, {:.1f}] wall, "
        "{:.1f}x [{:.1f}, {:.1f}] CPU (target >= 30x)".format(
            args.reps,
            *out["ratio_steps_per_s_wall"].values(),
            *out["ratio_steps_per_s_cpu"].values(),
            *out["ratio_episodes_per_s_wall"].values(),
            *out["ratio_episodes_per_s_cpu"].values(),
        )
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))
    ok = all(math.isfinite(r["ratio_steps_per_s_cpu"]) for r in reps)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
