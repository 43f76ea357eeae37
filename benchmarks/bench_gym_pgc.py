"""The generic Gymnasium PGC-A3C path against a straightforward per-agent loop (issue 27).

Straightforward: one Gymnasium env (``gym.make``) and one torch module per agent slot (9
slots), a Python loop per step (torch forward, ``env.step``), the episode loss of eqs. 15-18 by
torch autograd, the report released through ``ldp_audit.release`` (Laplace, epsilon 1, C =
0.01) and applied by eq. 22 to the server's module. Generic:
``ldp_audit.training.pgc_a3c_gym.trainer.train`` on the same environment, parameter and mechanism
with ``--trials`` trials of 9 agents in
lock-step (no run directory: an in-process ledger tally for both). Both run in this process,
one after the other; the table reports env-steps per second (wall) and per CPU-second.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/bench_gym_pgc.py \
        --out benchmarks/results/bench_gym_pgc.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from ldp_audit.accountant.accountant import Accountant
from ldp_audit.accountant.ledger import TallyLedger
from ldp_audit.mechanisms import Laplace
from ldp_audit.release import release
from ldp_audit.training.pgc_a3c_gym.config import GymPgcConfig
from ldp_audit.training.pgc_a3c_gym.trainer import train

CASES = {
    "Acrobot-v1": ("LINK_MASS_1", (0.5, 1.0, 2.0)),
    "MountainCar-v0": ("force", (0.0008, 0.001, 0.0012)),
}


class Net(torch.nn.Module):
    """The paper's network without biases, sized from the spaces."""

    def __init__(self, obs: int, actions: int, hidden: int = 16) -> None:
        super().__init__()
        self.c = torch.nn.Linear(obs, hidden, bias=False)
        self.p = torch.nn.Linear(hidden, actions, bias=False)
        self.v = torch.nn.Linear(hidden, 1, bias=False)

    def forward(self, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.c(s))
        return self.p(h), self.v(h)[..., 0]


def straightforward(env_id: str, steps_budget: int, seed: int) -> dict:
    name, values = CASES[env_id]
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    envs = [gym.make(env_id) for _ in range(9)]
    obs_dim = int(np.prod(envs[0].observation_space.shape))
    n_act = int(envs[0].action_space.n)
    server = Net(obs_dim, n_act)
    nets = [Net(obs_dim, n_act) for _ in range(9)]
    mech = Laplace(epsilon=1.0, clip=0.01)
    acc = Accountant(ledger=TallyLedger())
    gamma, lam, beta, eta = 0.99, 0.5, 0.01, 0.5
    steps = subs = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while steps < steps_budget:
        for k in range(9):  # each agent slot plays one episode, step by step
            env, net = envs[k], nets[k]
            setattr(env.unwrapped, name, float(rng.choice(values)))
            net.load_state_dict(server.state_dict())
            o, _ = env.reset(seed=int(rng.integers(2**31)))
            s_list, a_list, r_list = [], [], []
            alpha = max(0.0, 0.5 - subs / 1800.0)
            term = False
            while True:
                s = torch.as_tensor(np.asarray(o, dtype=np.float64).reshape(-1))
                with torch.no_grad():
                    z, _ = net(s.float())
                u = rng.random()
                a = int(u / alpha * n_act) if u < alpha else int(torch.argmax(z))
                o, r, term, trunc, _ = env.step(min(a, n_act - 1))
                s_list.append(s)
                a_list.append(a)
                r_list.append(r)
                steps += 1
                if term or trunc:
                    break
            S = torch.stack(s_list + [torch.as_tensor(np.asarray(o, np.float64).reshape(-1))])
            z, v = net(S.float())
            T = len(a_list)
            with torch.no_grad():
                boot = 0.0 if term else float(v[T])
                vhat = torch.zeros(T)
                acc_r = boot
                for t in range(T - 1, -1, -1):
                    acc_r = r_list[t] + gamma * acc_r
                    vhat[t] = acc_r
                adv = vhat - v[:T]
            logp = torch.log_softmax(z[:T], dim=1)
            ent = -(logp.exp() * logp).sum(1)
            loss = -(logp[torch.arange(T), torch.tensor(a_list)] * adv).sum() - beta * ent.sum()
            loss = loss + lam * ((vhat - v[:T]) ** 2).sum()
            net.zero_grad()
            loss.backward()
            g = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).double().numpy()
            rel = release(
                g[None, :], mechanism=mech, accountant=acc, agent_ids=[f"0/{subs}"], rng=rng
            )
            with torch.no_grad():  # eq. 22 at |B| = 1
                off = 0
                for p in server.parameters():
                    n = p.numel()
                    upd = torch.tensor(np.array(rel.values[0, off : off + n])).reshape(p.shape)
                    p -= eta * upd.float()
                    off += n
            subs += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"env_steps": steps, "submissions": subs, "wall_s": wall, "cpu_s": cpu}


def generic(env_id: str, trials: int, submissions: int, seed: int) -> dict:
    name, values = CASES[env_id]
    cfg = GymPgcConfig(
        env_id=env_id,
        private_param=name,
        values=values,
        mechanism="laplace",
        epsilon=1.0,
        trials=trials,
        max_submissions=submissions,
    )
    train(GymPgcConfig(**{**cfg.to_dict(), "trials": 1, "max_submissions": 2}), seed=seed)  # warm
    t0, c0 = time.perf_counter(), time.process_time()
    res = train(cfg, seed=seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "env_steps": int(res.env_steps),
        "submissions": int(res.submissions.sum()),
        "rows": trials * 9,
        "wall_s": wall,
        "cpu_s": cpu,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--submissions", type=int, default=20, help="per trial (generic path)")
    p.add_argument("--baseline-steps", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    out = {
        "command": " ".join(sys.argv),
        "machine": f"{platform.platform()}, {os.cpu_count()} CPUs, load {os.getloadavg()}",
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cases": {},
    }
    for env_id in CASES:
        base = straightforward(env_id, a.baseline_steps, a.seed)
        gen = generic(env_id, a.trials, a.submissions, a.seed)
        rb = base["env_steps"] / base["wall_s"], base["env_steps"] / base["cpu_s"]
        rg = gen["env_steps"] / gen["wall_s"], gen["env_steps"] / gen["cpu_s"]
        out["cases"][env_id] = {
            "straightforward": base,
            "generic": gen,
            "speedup_wall": rg[0] / rb[0],
            "speedup_cpu": rg[1] / rb[1],
        }
        print(
            f"{env_id}: straightforward {rb[0]:,.0f} steps/s wall ({rb[1]:,.0f}/CPU-s); generic "
            f"{rg[0]:,.0f} ({rg[1]:,.0f}/CPU-s); x{rg[0] / rb[0]:.0f} wall, x{rg[1] / rb[1]:.0f}"
            " CPU",
            flush=True,
        )
    out["load_after"] = os.getloadavg()
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
