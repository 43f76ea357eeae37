"""Benchmark: FedRL's batched GridWorld and batched training against the straightforward code.

1. Environment steps/s: :class:`VectorGridWorld` stepping B maps at once vs one
   ``gymnasium.make("ldp_audit/FedRLGridWorld-v0")`` env per map stepped in a Python loop
   (same maps, same random actions).
2. Training (wall and CPU seconds, 5 runs as in Table 1, one minibatch update per 16 env steps):
   ours (all runs and maps batched; each layer of all runs one ``baddbmm``; fused Adam;
   inference mode for acting and targets; one torch thread) against (a) the trainer's previous
   network evaluation (``vmap`` over ``functional_call``, a grouped convolution), for DQN-alpha,
   DQN-full and FedRL, and (b) the straightforward DQN-alpha: one gym env per map, one forward
   pass per map and step, one run after the other.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fedrl.py --out PATH.json`` (default
``--out``: benchmarks/results/bench_fedrl.json, refused if it exists unless ``--overwrite``, so
the committed results are never replaced silently). Measured on a shared, loaded 2-core
machine: compare the ratios, which are taken in the same run.

3. ``--task-cost SIZE [--task-iterations N]``: the CPU seconds of ONE Table 1 task of
   ``reproduce fedrl`` (FedRL, run 0 trained alone, with the committed report's learning curves
   and epsilon-greedy evaluations) at map size SIZE, training timed apart from the evaluations,
   to extrapolate a full Table 1 from a short run (prints JSON; nothing else is run).
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

    from ldp_audit.training.fedrl.gridworld import VectorGridWorld, generate_maps

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


class _VmapStacked:
    """The trainer's previous network evaluation (kept here as the benchmark's baseline):
    ``torch.vmap`` over ``torch.func.functional_call`` of the module, parameters in torch's
    layout (vmap turns the K convolutions into one grouped convolution)."""

    def __init__(self, make, gens, forward=None, view=None, device=None) -> None:  # noqa: ANN001
        # ``device``: the trainer passes its device (this baseline is measured on the CPU)
        import copy

        import torch

        from ldp_audit.training.fedrl.networks import _init_params

        mods = [make() for _ in gens]
        for m, g in zip(mods, gens, strict=True):
            _init_params(m, g)
        params, _ = torch.func.stack_module_state(mods)
        self.params = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        self.target = {k: v.detach().clone() for k, v in self.params.items()}
        base = copy.deepcopy(mods[0]).to("meta")
        self.device = torch.device("cpu")
        self._f = torch.vmap(lambda p, *xs: torch.func.functional_call(base, p, xs))

    def __call__(self, *xs):  # noqa: ANN002, ANN204
        return self._f(self.params, *xs)

    def tgt(self, *xs):  # noqa: ANN002, ANN204
        return self._f(self.target, *xs)

    def sync(self) -> None:
        self.target = {k: v.detach().clone() for k, v in self.params.items()}

    def state(self, k: int) -> dict:
        return {n: v[k].detach().numpy().copy() for n, v in self.params.items()}


def _fedrl_at(rev: str):  # noqa: ANN202
    """``training/fedrl.py`` as it was at git revision ``rev``, imported as its own module (the
    trainer before a change, timed in the same run as the trainer now). Only revisions before
    the trainer became the package ``training/fedrl/`` have that one file."""
    import subprocess
    import sys
    import types

    repo = Path(__file__).resolve().parent.parent
    got = subprocess.run(
        ["git", "show", f"{rev}:training/fedrl.py"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    if got.returncode != 0:
        raise SystemExit(
            f"--against {rev}: git show {rev}:training/fedrl.py failed "
            f"({got.stderr.strip()}); from commit 3e8e38b on the trainer is the package "
            "training/fedrl/: give an earlier revision"
        )
    src = got.stdout
    name = f"_fedrl_at_{rev}"
    mod = types.ModuleType(name)
    sys.modules[name] = mod  # dataclasses look their module up
    exec(compile(src, f"training/fedrl.py@{rev}", "exec"), mod.__dict__)  # noqa: S102
    return mod


def _timed_batched(method: str, cfg, maps, vmap: bool, module=None) -> tuple[float, float]:  # noqa: ANN001
    """(wall, CPU) seconds of one batched training of ``cfg.runs`` runs of ``method``
    (``module``: another version of the trainer, e.g. :func:`_fedrl_at`)."""
    import torch

    from ldp_audit.accountant import Accountant
    from ldp_audit.release import Transcript
    from ldp_audit.training.fedrl import exchange, trainer

    if module is not None:  # the one-file trainer of an earlier revision
        exchange = trainer = module
        known = module.FedRLConfig.__dataclass_fields__  # an older trainer lacks e.g. device
        kw = {k: v for k, v in cfg.to_dict().items() if k in known}
        cfg = module.FedRLConfig(**{**kw, "methods": tuple(cfg.methods)})

    log = exchange.Log(q=Transcript(), y=Transcript(), record=False)
    seeds = [np.random.SeedSequence(1 + i) for i in range(cfg.runs)]
    saved = trainer.Stacked  # the name _train_runs looks up
    old_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        if vmap:
            trainer.Stacked = _VmapStacked
        t0, c0 = time.perf_counter(), time.process_time()
        trainer.train_runs(method, cfg, maps, seeds, list(range(cfg.runs)), Accountant(None), log)
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        trainer.Stacked = saved
        torch.set_num_threads(old_threads)


def _timed_loop(cfg, maps) -> tuple[float, float, int]:  # noqa: ANN001
    """The straightforward DQN-alpha: one gym env per map, one forward pass per map and step,
    one run at a time (``cfg.runs`` runs). Returns (wall, CPU, env steps)."""
    import gymnasium as gym
    import torch

    from ldp_audit.training.fedrl.evaluation import eps_greedy
    from ldp_audit.training.fedrl.gridworld import ALPHA_VIEW
    from ldp_audit.training.fedrl.networks import _init_params, local_q
    from ldp_audit.training.fedrl.trainer import _Replay

    old_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    steps = 0
    for run in range(cfg.runs):
        gen = torch.Generator().manual_seed(1 + run)
        q = local_q(ALPHA_VIEW, cfg.hist_len)
        _init_params(q, gen)
        tq = local_q(ALPHA_VIEW, cfg.hist_len)
        tq.load_state_dict(q.state_dict())
        opt = torch.optim.Adam(q.parameters(), lr=cfg.lr)
        rep = _Replay(cfg.replay_size, cfg.hist_len)
        rng = np.random.default_rng(run)
        tr = maps.split["train"]
        envs = [
            gym.make("ldp_audit/FedRLGridWorld-v0", maps=maps, hist_len=cfg.hist_len)
            for _ in range(cfg.n_envs)
        ]
        obs = [e.reset(options={"map_index": int(tr[i])})[0] for i, e in enumerate(envs)]
        updates = 0
        for it in range(cfg.train_steps):
            eps = max(cfg.eps_end, 1 - it / cfg.eps_decay)
            for i, e in enumerate(envs):
                with torch.no_grad():
                    qa = q(torch.as_tensor(obs[i]["alpha"][None])).numpy()
                a = int(eps_greedy(qa, eps, rng)[0])
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
                updates += 1
                if updates % cfg.target_update == 0:
                    tq.load_state_dict(q.state_dict())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    torch.set_num_threads(old_threads)
    return wall, cpu, steps


def bench_training(
    iterations: int, n_envs: int, runs: int, against: str | None = None
) -> dict[str, float]:
    """Training throughput of ``runs`` runs (Table 1 trains 5 per method), same config for all.

    ``ours``: the trainer (all runs and maps batched, one matmul per layer for all runs).
    ``vmap``: the trainer with its previous network evaluation (:class:`_VmapStacked`).
    ``loop``: the straightforward per-map, per-run DQN-alpha loop (:func:`_timed_loop`).
    ``rev``: the whole trainer at git revision ``against`` (if given), same config.
    """
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.gridworld import generate_maps

    maps = generate_maps(8, 1000, seed=0)
    cfg = FedRLConfig(
        size=8, n_maps=1000, train_steps=iterations, n_envs=n_envs, eval_maps=1, runs=runs
    )
    env_steps = iterations * n_envs * runs
    out: dict[str, float] = {"iterations": iterations, "n_envs": n_envs, "runs": runs}
    _timed_batched(
        "dqn-alpha", FedRLConfig(size=8, n_maps=1000, train_steps=2, eval_maps=1), maps, False
    )  # warm-up (imports, allocator)
    for method in ("dqn-alpha", "dqn-full", "fedrl"):
        variants = ("ours", "vmap") + (("rev",) if against else ())
        for variant in variants:
            old = _fedrl_at(against) if variant == "rev" else None
            wall, cpu = _timed_batched(method, cfg, maps, variant == "vmap", old)
            out[f"{variant}_{method}_wall_s"] = wall
            out[f"{variant}_{method}_cpu_s"] = cpu
            out[f"{variant}_{method}_env_steps_per_s"] = env_steps / wall
            out[f"{variant}_{method}_env_steps_per_cpu_s"] = env_steps / cpu
        for what in ("wall", "cpu"):
            for base in variants[1:]:
                out[f"ratio_{method}_vs_{base}_{what}"] = (
                    out[f"{base}_{method}_{what}_s"] / out[f"ours_{method}_{what}_s"]
                )
    if against:
        out["rev"] = against
    wall, cpu, steps = _timed_loop(cfg, maps)
    assert steps == env_steps
    out["loop_dqn-alpha_wall_s"] = wall
    out["loop_dqn-alpha_cpu_s"] = cpu
    out["loop_dqn-alpha_env_steps_per_s"] = steps / wall
    out["loop_dqn-alpha_env_steps_per_cpu_s"] = steps / cpu
    out["ratio_dqn-alpha_vs_loop_wall"] = wall / out["ours_dqn-alpha_wall_s"]
    out["ratio_dqn-alpha_vs_loop_cpu"] = cpu / out["ours_dqn-alpha_cpu_s"]
    return out


def task_cost(size: int, iterations: int) -> dict[str, object]:
    """CPU seconds of one ``reproduce fedrl`` Table 1 task (FedRL, run 0, trained alone, the
    committed report's extras: 8 curve points on 200 maps, epsilon-greedy at 0.05 / 0.1 / 0.2,
    800 test maps) at ``size``, with the evaluations' CPU timed apart (they do not grow with
    the iterations; at a short training they run near T_m: an upper bound)."""
    import os

    import torch

    from ldp_audit.training.fedrl import trainer as T
    from ldp_audit.training.fedrl.gridworld import generate_maps
    from ldp_audit.training.fedrl.reproduce import ReproConfig, _extras, _table1_config
    from ldp_audit.training.fedrl.runs import run_fedrl

    rc = ReproConfig(sizes=(size,), runs=5, train_steps=(iterations,),
                     explore_eps=(0.05, 0.1, 0.2), curve_points=8, curve_maps=200)  # fmt: skip
    c0, w0 = time.process_time(), time.perf_counter()
    maps = generate_maps(size, rc.n_maps, seed=rc.seed)
    c_maps, w_maps = time.process_time() - c0, time.perf_counter() - w0
    ev = {"cpu": 0.0, "calls": 0}
    real = T.eval_runs

    def timed(*a, **k):  # noqa: ANN002, ANN003, ANN202
        c = time.process_time()
        try:
            return real(*a, **k)
        finally:
            ev["cpu"] += time.process_time() - c
            ev["calls"] += 1

    T.eval_runs = timed  # the name _train_runs looks up
    try:
        cfg = _table1_config(rc, 0)
        c0, w0 = time.process_time(), time.perf_counter()
        r = run_fedrl(cfg, seed=rc.seed + 1000 * size, maps=maps, record=False, threads=1,
                      extras=_extras(rc), only=("fedrl", 0))  # fmt: skip
        c_task, w_task = time.process_time() - c0, time.perf_counter() - w0
    finally:
        T.eval_runs = real
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "size": size,
        "t_max": cfg.episode_limit,
        "iterations": iterations,
        "torch": torch.__version__,
        "load_average_end": [round(x, 2) for x in os.getloadavg()],
        "cpu_maps_s": c_maps,
        "wall_maps_s": w_maps,
        "cpu_task_s": c_task,
        "wall_task_s": w_task,
        "cpu_eval_s": ev["cpu"],
        "eval_calls": ev["calls"],
        "cpu_train_ms_per_iteration": 1000 * (c_task - ev["cpu"]) / iterations,
        "updates": r["results"][0]["updates"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maps", type=int, default=800)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--n-envs", type=int, default=16)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--against",
        default=None,
        metavar="REV",
        help="also time the whole trainer at this git revision (e.g. 664a275, before the "
        "batched-matmul change)",
    )
    ap.add_argument(
        "--task-cost",
        type=int,
        default=None,
        metavar="SIZE",
        help="only: the CPU seconds of one Table 1 task (FedRL) at map size SIZE (JSON)",
    )
    ap.add_argument("--task-iterations", type=int, default=1000)
    ap.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).parent / "results" / "bench_fedrl.json",
        help="the JSON to write (default: the committed benchmarks/results/bench_fedrl.json, "
        "which is never replaced without --overwrite)",
    )
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = ap.parse_args()
    if args.task_cost is None and args.out.exists() and not args.overwrite:  # before any work
        ap.error(
            f"--out {args.out} exists (committed results are evidence): pass another --out, "
            "or --overwrite to replace it"
        )
    if args.task_cost is not None:
        print(json.dumps(task_cost(args.task_cost, args.task_iterations), indent=1))
        return
    res = {
        "machine": f"{platform.machine()} ({platform.processor() or 'cpu'}), 2 shared cores, "
        "loaded by other jobs",
        "env": bench_env(args.maps, args.steps),
        "training": bench_training(args.iterations, args.n_envs, args.runs, args.against),
    }
    e, t = res["env"], res["training"]
    print(
        f"env: batched {e['batched_steps_per_s']:.0f} steps/s vs gymnasium loop "
        f"{e['gymnasium_steps_per_s']:.0f} steps/s: {e['ratio']:.0f}x ({e['maps']} maps)"
    )
    print(
        f"training, {t['runs']} runs x {t['iterations']} iterations x {t['n_envs']} maps "
        "(wall s / CPU s; ratios are time of the baseline / time of ours):"
    )
    for m in ("dqn-alpha", "dqn-full", "fedrl"):
        print(
            f"  {m:9s} ours {t[f'ours_{m}_wall_s']:6.1f} / {t[f'ours_{m}_cpu_s']:6.1f}   "
            f"previous (vmap) {t[f'vmap_{m}_wall_s']:6.1f} / {t[f'vmap_{m}_cpu_s']:6.1f}   "
            f"ratio {t[f'ratio_{m}_vs_vmap_wall']:.2f}x wall, "
            f"{t[f'ratio_{m}_vs_vmap_cpu']:.2f}x CPU"
        )
        if "rev" in t:
            print(
                f"  {'':9s} trainer at {t['rev']} {t[f'rev_{m}_wall_s']:6.1f} / "
                f"{t[f'rev_{m}_cpu_s']:6.1f}   ratio {t[f'ratio_{m}_vs_rev_wall']:.2f}x wall, "
                f"{t[f'ratio_{m}_vs_rev_cpu']:.2f}x CPU"
            )
    print(
        f"  dqn-alpha straightforward per-map loop {t['loop_dqn-alpha_wall_s']:.1f} / "
        f"{t['loop_dqn-alpha_cpu_s']:.1f}: ours is {t['ratio_dqn-alpha_vs_loop_wall']:.1f}x "
        f"(wall), {t['ratio_dqn-alpha_vs_loop_cpu']:.1f}x (CPU) faster"
    )
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
