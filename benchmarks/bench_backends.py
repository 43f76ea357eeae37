"""PGC-A3C grid on the backends of ldp_audit.backends vs one lock-step batch, in one run.

``--set 1``: ``train_grid`` in one process (the baseline), ``train_grid(workers=2)`` (the engine's
own process pool), ``train_runs`` local (one config at a time) and ``train_runs`` on Ray (one task
per config). ``--set 2``: starts Ray (2 CPUs), warms it up, then twice: the baseline and
``grid_runs(train_grid, chunks=2)`` on Ray. Every result is compared bit for bit with the
baseline's. Prints the seconds and the ratios; writes JSON (``--out``).

    python benchmarks/bench_backends.py --set 1 --trials 2 --submissions 4000
    python benchmarks/bench_backends.py --set 2 --trials 2 --submissions 4000

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
from ldp_audit.training.pgc_a3c import PgcA3cConfig, train, train_grid


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
    p.add_argument("--set", type=int, choices=(1, 2), default=2)
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--submissions", type=int, default=4000)
    p.add_argument("--out", default=None, help="JSON file (default: print only)")
    a = p.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
