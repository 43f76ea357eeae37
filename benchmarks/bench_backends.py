"""PGC-A3C grid on the backends of ldp_audit.backends vs one lock-step batch, in one run.

``--set 1``: ``train_grid`` in one process (the baseline), ``train_grid(workers=2)`` (the engine's
own process pool), ``train_runs`` local (one config at a time) and ``train_runs`` on Ray (one task
per config). ``--set 2``: starts Ray (2 CPUs), warms it up, then twice: the baseline and
``grid_runs(train_grid, chunks=2)`` on Ray. Every result is compared bit for bit with the
baseline's. Prints the seconds and the ratios; writes JSON (``--out``).

``--set 3``: what ``reproduce pgc-a3c`` runs (the paper grid's 14 configs: 10 settings stopping
at their FST + 4 full Figure 2 runs, at ``--trials`` x ``--submissions``) on each way of running
it, in rounds A B C D then D C B A (load drift hits every variant alike): (A) one lock-step
batch in this process, (B) the engine's home-made fork pool ``train_grid(workers=2)``, (C)
``reproduce.engine_grid(backend="local", workers=2)`` (ldp_audit.backends' spawn pool, 2
``train_grid`` batches), (D) ``engine_grid(backend="ray")`` on a Ray instance with 2 CPUs started
(and warmed, as is this process) before the rounds; ``--variants AD`` runs only A and D. Wall
seconds, this process's CPU seconds, reaped child processes' CPU seconds and the CPU seconds
measured inside each task (C, D), each ratio against A of the same round.

    python benchmarks/bench_backends.py --set 1 --trials 2 --submissions 4000
    python benchmarks/bench_backends.py --set 2 --trials 2 --submissions 4000
    python benchmarks/bench_backends.py --set 3 --trials 2 --submissions 4000

``--set 4``: the cost of splitting the batch, for the projection to N machines: the same 14
configs in this process as 1, 7 and 14 ``train_grid`` batches one after the other
(``grid_runs(..., chunks=K)`` in-process), CPU seconds of each (the work one machine of a
cluster would do, summed), results checked equal.

    python benchmarks/bench_backends.py --set 4 --trials 20 --submissions 800

Needs Ray (``pip install 'ldp-audit[ray]'``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from ldp_audit.backends import grid_runs, train_runs
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.grid import train, train_grid


def grid(trials: int, subs: int) -> tuple[list[PgcA3cConfig], list[int]]:
    """The paper's 10 settings (Laplace B=1, PRS B=100 at eps 1, 2, 5, 10, and eps = inf)."""
    cfgs = []
    for m, buf in (("laplace", 1), ("prs", 100)):
        for e in (1.0, 2.0, 5.0, 10.0):
            cfgs.append(PgcA3cConfig(mechanism=m, epsilon=e, trials=trials, max_submissions=subs))
        cfgs.append(
            PgcA3cConfig(mechanism="none", buffer_size=buf, trials=trials, max_submissions=subs)
        )
    return cfgs, [100 + i for i in range(len(cfgs))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--set", type=int, choices=(1, 2, 3, 4), default=2)
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--submissions", type=int, default=4000)
    p.add_argument("--out", default=None, help="JSON file (default: print only)")
    p.add_argument("--variants", default="ABCD", help="set 3: which of A B C D to run (e.g. AD)")
    a = p.parse_args(argv)
    if a.set == 3:
        return set3(a)
    if a.set == 4:
        return set4(a)
    cfgs, seeds = grid(a.trials, a.submissions)
    out: dict = {
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{platform.machine()} {platform.system()}, shared 2-core machine",
        "configs": len(cfgs),
        "trials": a.trials,
        "max_submissions": a.submissions,
        "seconds": {},
    }
    res: dict = {}

    def run(name, f):
        t = time.perf_counter()
        res[name] = f()
        out["seconds"][name] = time.perf_counter() - t
        print(f"{name:28s} {out['seconds'][name]:7.1f} s", flush=True)

    tasks = [(c, s, None) for c, s in zip(cfgs, seeds, strict=True)]
    if a.set == 1:
        run("train_grid_1proc", lambda: train_grid(cfgs, seed=seeds, progress=False))
        run("train_grid_2proc", lambda: train_grid(cfgs, seed=seeds, workers=2, progress=False))
        run("train_runs_local", lambda: train_runs(train, tasks))
        run("train_runs_ray2", lambda: train_runs(train, tasks, backend="ray", workers=2))
        base = "train_grid_1proc"
    else:
        import ray

        t = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        out["ray_init_seconds"] = time.perf_counter() - t
        t = time.perf_counter()
        grid_runs(train_grid, cfgs[:2], seeds[:2], chunks=2, backend="ray")
        out["ray_warmup_seconds"] = time.perf_counter() - t
        for rep in (1, 2):
            run(f"train_grid_1proc_{rep}", lambda: train_grid(cfgs, seed=seeds, progress=False))
            run(
                f"grid_runs_ray_2chunks_{rep}",
                lambda: grid_runs(train_grid, cfgs, seeds, chunks=2, backend="ray"),
            )
        base = "train_grid_1proc_1"
    ref = res[base]
    out["equal_to_baseline"] = {
        k: all(
            x.zeta.tobytes() == y.zeta.tobytes() and x.theta.tobytes() == y.theta.tobytes()
            for x, y in zip(ref, v, strict=True)
        )
        for k, v in res.items()
    }
    out["ratio_vs_baseline"] = {k: v / out["seconds"][base] for k, v in out["seconds"].items()}
    print(json.dumps(out, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))
    return 0 if all(out["equal_to_baseline"].values()) else 1


def reproduce_grid(trials: int, subs: int) -> tuple[list[PgcA3cConfig], list[int]]:
    """The configs and seeds ``reproduce pgc-a3c --trials T --max-submissions N`` trains."""
    from ldp_audit.training.pgc_a3c import reproduce as rp

    cfg = rp.ReproduceConfig(trials=trials, max_submissions=subs)
    grid_, extra = rp._settings(cfg)
    cfgs = [rp.engine_config(s, subs) for s in grid_ + extra]
    return cfgs, [rp.setting_seed(cfg.seed, s.index) for s in grid_ + extra]


def timed_grid(configs: list, *, cpu_dir: str, **kwargs: object) -> list:
    """``reproduce.quiet_train_grid`` that records the task's own CPU seconds in ``cpu_dir``."""
    import os
    import uuid

    from ldp_audit.training.pgc_a3c.reproduce import quiet_train_grid

    t = time.process_time()
    out = quiet_train_grid(configs, **kwargs)
    cpu = time.process_time() - t
    Path(cpu_dir, f"{os.getpid()}-{uuid.uuid4().hex}.cpu").write_text(repr(cpu))
    return out


def set3(a: argparse.Namespace) -> int:
    import functools
    import os
    import resource
    import tempfile

    import ray

    from ldp_audit.training.pgc_a3c.reproduce import engine_grid, quiet_train_grid

    cfgs, seeds = reproduce_grid(a.trials, a.submissions)
    out: dict = {
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, shared "
        "and loaded",
        "configs": len(cfgs),
        "trials": a.trials,
        "max_submissions": a.submissions,
        "loadavg_start": os.getloadavg(),
        "runs": [],
    }
    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    out["ray_init_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    engine_grid(cfgs[:2], seeds[:2], backend="ray", chunks=2)  # workers up, caches warm
    out["ray_warmup_seconds"] = time.perf_counter() - t
    quiet_train_grid(cfgs[:2], seed=seeds[:2], progress=False)  # this process warm too
    base = None

    def variant(name: str) -> list:
        with tempfile.TemporaryDirectory() as d:
            timed = functools.partial(timed_grid, cpu_dir=d)
            if name == "A_one_process":
                res = quiet_train_grid(cfgs, seed=seeds, progress=False)
            elif name == "B_fork_pool_train_grid_workers2":
                res = quiet_train_grid(cfgs, seed=seeds, progress=False, workers=2)
            elif name == "C_backends_local_pool2":
                res = engine_grid(cfgs, seeds, backend="local", workers=2, grid_fn=timed)
            else:
                res = engine_grid(cfgs, seeds, backend="ray", chunks=2, grid_fn=timed)
            task_cpu = [float(p.read_text()) for p in Path(d).glob("*.cpu")]
        return res, task_cpu

    order = ["A_one_process", "B_fork_pool_train_grid_workers2", "C_backends_local_pool2", "D_ray2"]
    order = [n for n in order if n[0] in a.variants.upper()]
    if not order or order[0] != "A_one_process":
        raise SystemExit("--variants must include A (the baseline)")
    ok = True
    for rnd, names in enumerate((order, order[::-1]), start=1):
        row: dict = {"round": rnd}
        for name in names:
            c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t, p = time.perf_counter(), time.process_time()
            res, task_cpu = variant(name)
            wall, cpu = time.perf_counter() - t, time.process_time() - p
            c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            kids = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
            if base is None:
                base = res
            same = all(
                x.zeta.tobytes() == y.zeta.tobytes() and x.theta.tobytes() == y.theta.tobytes()
                for x, y in zip(base, res, strict=True)
            )
            ok &= same
            row[name] = {
                "wall": wall,
                "cpu_this_process": cpu,
                "cpu_reaped_children": kids,
                "cpu_inside_tasks": sum(task_cpu) if task_cpu else None,
                "tasks": len(task_cpu) or None,
                "equal_to_A": same,
            }
            print(
                f"round {rnd} {name:34s} wall {wall:7.1f} s  cpu here {cpu:7.1f} s  "
                f"children {kids:6.1f} s  in tasks {sum(task_cpu):6.1f} s  equal {same}",
                flush=True,
            )
        for name in order:
            row[name]["wall_vs_A"] = row[name]["wall"] / row["A_one_process"]["wall"]
        out["runs"].append(row)
    out["loadavg_end"] = os.getloadavg()
    ray.shutdown()
    print(json.dumps(out, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if ok else 1


def set4(a: argparse.Namespace) -> int:
    import os

    from ldp_audit.training.pgc_a3c.reproduce import quiet_train_grid

    cfgs, seeds = reproduce_grid(a.trials, a.submissions)
    out: dict = {
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{platform.machine()} {platform.system()}, {os.cpu_count()} cores, shared "
        "and loaded",
        "configs": len(cfgs),
        "trials": a.trials,
        "max_submissions": a.submissions,
        "loadavg_start": os.getloadavg(),
        "runs": {},
    }
    base = None
    ok = True
    for chunks in (1, 7, 14, 1):
        t, p = time.perf_counter(), time.process_time()
        res = grid_runs(quiet_train_grid, cfgs, seeds, chunks=chunks)
        wall, cpu = time.perf_counter() - t, time.process_time() - p
        base = res if base is None else base
        same = all(
            x.zeta.tobytes() == y.zeta.tobytes() and x.theta.tobytes() == y.theta.tobytes()
            for x, y in zip(base, res, strict=True)
        )
        ok &= same
        subs = int(sum(int(r.submissions.sum()) for r in res))
        name = f"chunks_{chunks}" + ("_again" if f"chunks_{chunks}" in out["runs"] else "")
        out["runs"][name] = {
            "wall": wall,
            "cpu": cpu,
            "submissions": subs,
            "cpu_us_per_submission": 1e6 * cpu / subs,
            "equal_to_first": same,
        }
        print(
            f"{name:16s} wall {wall:7.1f} s  cpu {cpu:7.1f} s  {subs} submissions  "
            f"{1e6 * cpu / subs:6.1f} cpu-us/submission  equal {same}",
            flush=True,
        )
    out["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
