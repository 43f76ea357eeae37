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
        [--episodes 20] [--json benchmarks/results/bench_frd.json]
"""

from __future__ import annotations

import argparse
import json
import math
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


def batched(n_agents: int, episodes: int, seed: int) -> tuple[float, int, int]:
    from ldp_audit.training.frd import setting_config, train_many

    # no exchange within the benchmark (I >= episodes): the same work as the reference
    cfg = setting_config(
        1, n_agents=1, groups=n_agents, max_episodes=episodes, initial_episodes=episodes,
        stop_at_mission=False,
    )  # fmt: skip
    t0 = time.perf_counter()
    r = train_many([cfg], seed=seed)[0]
    secs = time.perf_counter() - t0
    return secs, int(r.agent_episodes), int(np.nansum(r.scores))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=512)
    ap.add_argument("--ref-agents", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="benchmarks/results/bench_frd.json")
    args = ap.parse_args()
    batched(4, 2, args.seed)  # warm-up (imports)
    rs, re_, rst = reference(args.ref_agents, args.episodes, args.seed)
    bs, be, bst = batched(args.agents, args.episodes, args.seed)
    out = {
        "machine": f"{platform.machine()}, shared, loaded 2-core machine",
        "episodes_per_agent": args.episodes,
        "reference": {"agents": args.ref_agents, "seconds": rs, "agent_episodes": re_,
                      "agent_steps": rst, "episodes_per_s": re_ / rs, "steps_per_s": rst / rs},
        "batched": {"agents": args.agents, "seconds": bs, "agent_episodes": be,
                    "agent_steps": bst, "episodes_per_s": be / bs, "steps_per_s": bst / bs},
    }  # fmt: skip
    out["ratio_episodes_per_s"] = (
        out["batched"]["episodes_per_s"] / out["reference"]["episodes_per_s"]
    )
    out["ratio_steps_per_s"] = out["batched"]["steps_per_s"] / out["reference"]["steps_per_s"]
    for k in ("reference", "batched"):
        d = out[k]
        print(
            f"{k:9s}: {d['agents']:4d} agents x {args.episodes} episodes: {d['seconds']:.1f} s, "
            f"{d['episodes_per_s']:.1f} agent-episodes/s, {d['steps_per_s']:.0f} agent-steps/s"
        )
    print(
        f"ratio: {out['ratio_episodes_per_s']:.1f}x agent-episodes/s, "
        f"{out['ratio_steps_per_s']:.1f}x agent-steps/s (target >= 30x)"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if math.isfinite(out["ratio_steps_per_s"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
