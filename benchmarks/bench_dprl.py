"""Benchmark: DP-SGD per-sample gradients with Opacus vs the slides' loop (one backward each).

For REINFORCE (per-episode gradients, B episodes of T steps) and DQN (per-transition gradients,
a batch of 128), in the same process, same seeds, same network:

* ``loop``: the straightforward implementation (the slides' DQN code, and what a DP REINFORCE
  without per-sample machinery does): for each sample, ``zero_grad``, forward, ``backward``,
  flatten, clip the whole gradient to C; then sum, add N(0, (sigma C)^2), divide by B;
* ``opacus``: ``GradSampleModule`` computes all per-sample gradients in one backward, then the
  same clipping (``DPOptimizer.clip_and_accumulate``'s formula) and noise;
* ``ghost``: Opacus's ghost clipping (``GradSampleModuleFastGradientClipping``, the two-backward
  loop of ``DPTensorFastGradientClipping.backward``): per-sample gradient *norms* from the
  layer activations and output gradients without materialising the per-sample gradients, then
  a second backward of the clip-weighted loss gives the clipped sum; the same noise.

All must give the same clipped sum of per-sample gradients (checked, max abs difference
printed; loop and opacus also the same clipped per-sample gradients). Wall time and process
CPU time are both measured.
Also: rollout episodes/s of a Gymnasium vector env (``vector_entry_point``, B envs) vs one
``gym.make`` env stepped episode by episode.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_dprl.py [--quick]

Writes ``benchmarks/results/bench_dprl.json``. ``--accountant --out FILE``: only the
accountant's time per composition method for DQN DP-SGD histories (:func:`bench_accountant`).
Figures are from a shared, loaded 2-core machine: only the ratios measured in the same run mean
anything.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)


def _net(sizes: list[int], seed: int) -> torch.nn.Module:
    from ldp_audit.training.dprl.algos import make_network
    from ldp_audit.training.dprl.config import DprlConfig

    algo = "reinforce" if len(sizes) == 3 else "dqn"
    # dropout 0: both implementations must see the same function (Opacus needs train mode)
    cfg = DprlConfig(algo=algo, privacy="dpsgd", hidden=sizes[1], dropout=0.0)
    return make_network(cfg, torch.Generator().manual_seed(seed))


def _clip(g: torch.Tensor, c: float) -> torch.Tensor:
    n = g.norm(dim=1)
    return g * (c / (n + 1e-6)).clamp(max=1.0).unsqueeze(1)


def _loss_reinforce(net, x, a, w):  # noqa: ANN001, ANN202
    lp = torch.log_softmax(net(x), dim=-1).gather(-1, a.unsqueeze(-1)).squeeze(-1)
    return -(w * lp).sum(dim=-1)


def _loss_dqn(net, s, a, y):  # noqa: ANN001, ANN202
    return (net(s).gather(-1, a.unsqueeze(-1)).squeeze(-1) - y) ** 2


def loop_grads(net, loss_fn, data, c):  # noqa: ANN001, ANN201
    """One forward + backward per sample, whole-gradient clip (the straightforward way)."""
    rows = []
    params = list(net.parameters())
    for i in range(data[0].shape[0]):
        net.zero_grad()
        loss_fn(net, *(d[i : i + 1] for d in data)).sum().backward()
        rows.append(torch.cat([p.grad.reshape(-1) for p in params]))
    return _clip(torch.stack(rows), c)


def opacus_grads(gsm, loss_fn, data, c):  # noqa: ANN001, ANN201
    """All per-sample gradients from one backward (Opacus GradSampleModule), same clip."""
    gsm.zero_grad()
    for p in gsm.parameters():
        p.grad_sample = None
    loss_fn(gsm, *data).sum().backward()
    g = torch.cat([p.grad_sample.reshape(data[0].shape[0], -1) for p in gsm.parameters()], dim=1)
    return _clip(g, c)


def ghost_sum(gfc, loss_fn, data, c):  # noqa: ANN001, ANN201
    """Clipped sum of per-sample gradients by ghost clipping (Opacus's two-backward loop)."""
    gfc.max_grad_norm = c
    params = [p for p in gfc.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    per_sample = loss_fn(gfc, *data)
    per_sample.sum().backward(retain_graph=True)  # hooks: per-sample norms only
    coef = gfc.get_clipping_coef()  # min(1, C / (norm + 1e-6)), Opacus's formula
    for p in params:
        p.grad = None
    gfc.disable_hooks()
    (coef.detach() * per_sample).sum().backward()  # the clipped sum, in one ordinary backward
    gfc.enable_hooks()
    return torch.cat([p.grad.reshape(-1) for p in params])


def _noisy(clipped: torch.Tensor, sigma: float, c: float, gen: torch.Generator) -> torch.Tensor:
    s = clipped.sum(dim=0) if clipped.dim() == 2 else clipped
    return (s + torch.normal(0.0, sigma * c, s.shape, generator=gen)) / len(s)


def bench_case(name, sizes, loss_fn, data, c, reps):  # noqa: ANN001, ANN201
    from opacus import GradSampleModule
    from opacus.grad_sample import GradSampleModuleFastGradientClipping

    net = _net(sizes, 0)
    gsm = GradSampleModule(_net(sizes, 0), batch_first=True, loss_reduction="sum")
    gfc = GradSampleModuleFastGradientClipping(
        _net(sizes, 0), batch_first=True, loss_reduction="sum", max_grad_norm=c
    )
    a = loop_grads(net, loss_fn, data, c)
    b = opacus_grads(gsm, loss_fn, data, c)
    g = ghost_sum(gfc, loss_fn, data, c)
    diff = float((a - b).abs().max())
    diff_ghost = float((a.sum(dim=0) - g).abs().max())
    times, cpu = {}, {}
    for label, fn, model in (("loop", loop_grads, net), ("opacus", opacus_grads, gsm),
                             ("ghost", ghost_sum, gfc)):  # fmt: skip
        fn(model, loss_fn, data, c)  # warm-up
        gen = torch.Generator().manual_seed(1)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(reps):
            _noisy(fn(model, loss_fn, data, c), 1.0, c, gen)
        times[label] = (time.perf_counter() - t0) / reps
        cpu[label] = (time.process_time() - c0) / reps
    n = data[0].shape[0]
    out = {
        "case": name,
        "samples_per_update": n,
        "loop_updates_per_s": 1.0 / times["loop"],
        "opacus_updates_per_s": 1.0 / times["opacus"],
        "ghost_updates_per_s": 1.0 / times["ghost"],
        "loop_samples_per_s": n / times["loop"],
        "opacus_samples_per_s": n / times["opacus"],
        "ghost_samples_per_s": n / times["ghost"],
        "speedup": times["loop"] / times["opacus"],
        "ghost_speedup": times["loop"] / times["ghost"],
        "cpu_seconds_per_update": cpu,
        "cpu_speedup": cpu["loop"] / cpu["opacus"],
        "ghost_cpu_speedup": cpu["loop"] / cpu["ghost"],
        "max_abs_diff_clipped_per_sample_grads": diff,
        "max_abs_diff_clipped_sum_ghost": diff_ghost,
    }
    print(
        f"{name}: loop {out['loop_samples_per_s']:.0f}, opacus {out['opacus_samples_per_s']:.0f}, "
        f"ghost {out['ghost_samples_per_s']:.0f} samples/s -> opacus {out['speedup']:.1f}x, "
        f"ghost {out['ghost_speedup']:.1f}x wall (CPU: {out['cpu_speedup']:.1f}x, "
        f"{out['ghost_cpu_speedup']:.1f}x); max |diff| per-sample {diff:.2e}, ghost sum "
        f"{diff_ghost:.2e}"
    )
    return out


def bench_rollout(n_envs: int, episodes: int) -> dict:
    import gymnasium as gym

    net = _net([4, 128, 2], 0)
    gen = torch.Generator().manual_seed(0)
    # straightforward: one env, one episode at a time
    env = gym.make("CartPole-v1")
    t0 = time.perf_counter()
    steps1 = 0
    for e in range(episodes):
        obs, _ = env.reset(seed=e)
        done = False
        while not done:
            with torch.no_grad():
                p = torch.softmax(net(torch.as_tensor(obs).unsqueeze(0)), -1)
            a = int(torch.multinomial(p, 1, generator=gen))
            obs, _, term, trunc, _ = env.step(a)
            done = term or trunc
            steps1 += 1
    t_single = time.perf_counter() - t0
    # vectorised: n_envs episodes per batch, masked after each ends
    envs = gym.make_vec("CartPole-v1", num_envs=n_envs, vectorization_mode="vector_entry_point")
    t0 = time.perf_counter()
    obs, _ = envs.reset(seed=0)
    for _ in range(episodes // n_envs):
        done = np.zeros(n_envs, dtype=bool)
        while not done.all():
            with torch.no_grad():
                p = torch.softmax(net(torch.as_tensor(obs)), -1)
            a = torch.multinomial(p, 1, generator=gen).reshape(-1).numpy()
            obs, _, term, trunc, _ = envs.step(a)
            done |= term | trunc
    t_vec = time.perf_counter() - t0
    out = {
        "case": f"rollout ({n_envs} envs)",
        "episodes": episodes,
        "single_env_episodes_per_s": episodes / t_single,
        "vector_env_episodes_per_s": (episodes // n_envs * n_envs) / t_vec,
    }
    out["speedup"] = out["vector_env_episodes_per_s"] / out["single_env_episodes_per_s"]
    print(
        f"rollout: single env {out['single_env_episodes_per_s']:.1f} episodes/s, vector env "
        f"({n_envs}) {out['vector_env_episodes_per_s']:.1f} episodes/s -> {out['speedup']:.1f}x"
    )
    return out


SIGMAS = (0.01, 0.03, 0.1, 0.5, 1.0)


def bench_accountant(updates: tuple[int, ...] = (2250, 24750), sigmas: tuple = SIGMAS) -> list:
    """CPU time and epsilon (delta 1e-5) per composition method for DQN's DP-SGD history.

    A DQN run of U updates is U Poisson-sampled Gaussians at q = 128/10,000. Each method is
    timed alone (``method_value``: RDP, PRV, PLD with its own planner; a refusal is recorded
    with its reason), then ``best`` (which adds the coarse PLD where PLD's planner refuses).
    """
    from ldp_audit.accountant import GaussianEvent, PoissonSampledEvent
    from ldp_audit.accountant.events import event_to_json
    from ldp_audit.accountant.methods import evaluate_full, method_value, signature

    out = []
    for u in updates:
        for s in sigmas:
            ev = PoissonSampledEvent(128 / 10_000, GaussianEvent(s))
            row: dict = {"updates": u, "sigma": s}
            for m in ("rdp", "prv", "pld"):
                t = time.process_time()
                try:
                    v = method_value({ev: u}, 1e-5, m)
                except Exception as exc:  # noqa: BLE001 - a refusal is a result here
                    v = f"refused: {str(exc)[:80]}"
                row[m] = {"epsilon": v, "cpu_s": time.process_time() - t}
            evaluate_full.cache_clear()
            t = time.process_time()
            eps, method, _, _ = evaluate_full(signature([(event_to_json(ev), u)]), 1e-5, "best")
            row["best"] = {"epsilon": eps, "method": method, "cpu_s": time.process_time() - t}
            print(row, flush=True)
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--out", default="benchmarks/results/bench_dprl.json")
    ap.add_argument("--accountant", action="store_true",
                    help="only the accountant's time per method (DQN histories)")  # fmt: skip
    args = ap.parse_args()
    if args.accountant:
        doc = {
            "machine": f"{platform.machine()} {platform.system()}, shared loaded 2-core machine",
            "accountant": bench_accountant(),
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.out}")
        return
    reps = 2 if args.quick else 5
    g = torch.Generator().manual_seed(0)
    results = []
    for B, T in ((256, 20), (32, 100), (64, 200)):
        data = (
            torch.randn(B, T, 4, generator=g),
            torch.randint(0, 2, (B, T), generator=g),
            torch.randn(B, T, generator=g),
        )
        results.append(
            bench_case(
                f"REINFORCE {B} episodes x {T} steps", [4, 128, 2], _loss_reinforce, data, 1.0, reps
            )  # fmt: skip
        )
    for n in (128, 512):
        data = (
            torch.randn(n, 4, generator=g),
            torch.randint(0, 2, (n,), generator=g),
            torch.randn(n, generator=g),
        )
        results.append(
            bench_case(f"DQN {n} transitions", [4, 128, 128, 2], _loss_dqn, data, 1.0, reps * 2)
        )
    results.append(bench_rollout(32, 64 if args.quick else 128))
    doc = {
        "machine": f"{platform.machine()} {platform.system()}, shared loaded 2-core machine",
        "torch_threads": torch.get_num_threads(),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
