"""Speed of the batched PGC-A3C engine against the straightforward worker, in the same run.

Measures, on this machine and at this moment (both sides see the same load):

1. the straightforward worker (benchmarks/reference_pgc.py: one gymnasium CartPole-v1 and one
   torch module, a Python loop per step) for ``--ref-seconds`` seconds;
2. the lock-step engine (ldp_audit.training.pgc_a3c) on the same workload (Laplace, eps = 1),
   ``--settings`` x ``--trials`` trials x 9 agents, ``--submissions`` submissions each, in one
   process; then the same work spread over ``--workers`` processes (``train_grid(workers=...)``);
3. the engine on a paper-like grid (Laplace/PRS x eps) in one process;
4. the episode gradient (eqs. 15-18): the engine's compiled kernel vs the batched NumPy
   formulation vs torch autograd on the same episodes;
   Items 2-3 run both engines, the lock-step one (a Python iteration per step) and the fused
   one (``engine="fused"``: blocks of steps in one compiled call), on the same workload and
   seed, check that they give bit-for-bit the same results (a SHA-256 of every zeta and final
   theta). The core workload runs on an in-memory SQLite ``Ledger(":memory:")``, and with
   ``--tally`` also on the accountant's ``TallyLedger`` (with the engine's pause of Python's
   garbage collector, and once without it). Then the env-only ceiling (Gymnasium's
   ``CartPoleVectorEnv`` alone on the same number of rows with random actions), the floors
   (drawing the run's Laplace numbers and acting uniforms with NumPy, nothing else), and the
   breakdown: the fused engine's profile hook (``_FusedEngine.profile``) times every part of
   its run (kernel, charge ids, ledger charges, mechanism draws, reset and acting uniforms,
   transcript, compaction, the rest) per wall and CPU second and per env-step, and the best
   rate reachable if everything but the kernel and the required draws cost nothing, as a
   fraction of the ceiling. Every figure is given per wall second and per CPU second
   (``time.process_time``; on a loaded machine the wall figures mostly measure the load).
   ``--fused-baseline-rev REV``: the fused engine at REV against the current one on the core
   workload, alternately, in the same run;
5. with ``--baseline-rev REV``: before/after in the same run. The engine as it was at git
   revision REV (``training/pgc_a3c.py`` and ``training/_kernels.py``, or from the package on,
   every file of ``training/pgc_a3c/``, loaded from git into a temporary module) and the
   current engine alternately (``--baseline-repeats`` times each) on a reproduce-like grid
   (Tables 1-3 settings, ``stop_at_target``, ``--acting``), checking that both give
   bit-for-bit the same results, and the ratio of their times.

Prints env-steps/s and submissions/s of both and their ratio; writes JSON (``--out``).

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1 .venv/bin/python \
        benchmarks/bench_pgc.py --tally --paper-grid 4000   # ~6 minutes, 2 shared cores
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reference_pgc import loss_gradients_numpy, reference_train  # noqa: E402

from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.gradients import loss_gradients
from ldp_audit.training.pgc_a3c.grid import train, train_grid
from ldp_audit.training.pgc_a3c.model import DIM, init_theta
from ldp_audit.training.pgc_a3c.rollout import rollout


def bench_reference(seconds: float) -> dict:
    cfg = PgcA3cConfig(mechanism="laplace", epsilon=1.0, trials=1)
    c0 = time.process_time()
    r = reference_train(cfg, seed=0, max_seconds=seconds)
    cpu = time.process_time() - c0
    return {
        "cpu_seconds": cpu,
        "env_steps_per_cpu_s": r["env_steps"] / cpu,
        "seconds": r["seconds"],
        "submissions": r["submissions"],
        "env_steps": r["env_steps"],
        "env_steps_per_s": r["env_steps"] / r["seconds"],
        "submissions_per_s": r["submissions"] / r["seconds"],
    }


def bench_env_ceiling(rows: int, seconds: float = 5.0) -> dict:
    """The env-only ceiling: Gymnasium's ``CartPoleVectorEnv`` alone on ``rows`` rows (its own
    auto-reset), random actions drawn beforehand, nothing else; env-steps/s."""
    from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

    env = CartPoleVectorEnv(num_envs=rows, max_episode_steps=200)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, (256, rows))
    for k in range(20):  # warm up
        env.step(actions[k])
    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - t0 < seconds:
        for k in range(256):
            env.step(actions[k])
        n += 256
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "rows": rows,
        "steps": n,
        "seconds": wall,
        "cpu_seconds": cpu,
        "env_steps_per_s": n * rows / wall,
        "env_steps_per_cpu_s": n * rows / cpu,
    }


def bench_engine(
    settings: int,
    trials: int,
    submissions: int,
    same: bool,
    engine: str = "lockstep",
    ledger: str = "sqlite",
    collector: bool = False,
    module: Any = None,
) -> dict:
    """``same``: one config (Laplace, eps = 1: the reference worker's workload) with
    settings * trials trials; else a paper-like grid of ``settings`` configs. ``engine``:
    "lockstep" (``_Engine``) or "fused" (``_FusedEngine``), the same workload and seed.
    ``ledger``: "sqlite" (``Ledger(":memory:")``, a ledger of record kept in memory) or "tally"
    (the accountant's ``TallyLedger``: counts only, no evidence). The fused engine runs with its
    profile hook on (``timings``); ``collector=True`` runs it with Python's cyclic garbage
    collector left on (as before the engine paused it). ``module``: the engine module to time
    (default: the current one; ``_engine_at(rev)`` for an older revision)."""
    eps = [1.0, 2.0, 5.0, 10.0]
    from ldp_audit.training import pgc_a3c

    mod = pgc_a3c if module is None else module
    cfgs = []
    if same:
        cfgs = [
            mod.PgcA3cConfig(
                mechanism="laplace",
                epsilon=1.0,
                trials=settings * trials,
                max_submissions=submissions,
            )
        ]
    for i in range(settings if not same else 0):
        mech = ("laplace", "prs")[i % 2]
        cfgs.append(
            mod.PgcA3cConfig(
                mechanism=mech,
                epsilon=eps[(i // 2) % 4],
                trials=trials,
                max_submissions=submissions,
            )
        )
    from ldp_audit.accountant.ledger import Ledger, TallyLedger

    book = TallyLedger() if ledger == "tally" else Ledger(":memory:")
    if module is None:  # today's names
        from ldp_audit.training.pgc_a3c.engine import Engine
        from ldp_audit.training.pgc_a3c.fused import FusedEngine
        from ldp_audit.training.pgc_a3c.privacy import make_accountant
    else:  # an older revision's module (_engine_at): its names then
        Engine, FusedEngine, make_accountant = mod._Engine, mod._FusedEngine, mod._make_accountant
    acc = [make_accountant(book, None)] * len(cfgs)
    cls = FusedEngine if engine == "fused" else Engine
    gc.collect()  # start every measurement from the same collector state
    t0, c0 = time.perf_counter(), time.process_time()
    eng = cls(cfgs, [0] * len(cfgs), acc, [False] * len(cfgs))
    t_setup, c_setup = time.perf_counter() - t0, time.process_time() - c0
    rec = _Recorder(t0)
    profiled = engine == "fused" and hasattr(eng, "_start_profile")
    if profiled:
        eng.profile = True
    if profiled and collector:
        eng._start_profile()
        eng._run(rec)  # run() without pausing the collector
    else:
        eng.run(rec)
    t1, c1 = time.perf_counter(), time.process_time()
    secs = t1 - t0
    res = eng.results(secs)
    t_res, c_res = time.perf_counter() - t1, time.process_time() - c1
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    total = sum(c.trials * c.max_submissions for c in cfgs)
    # steady state: until 80% of all submissions arrived (before the tail of slow trials,
    # where few rows step and the per-step overhead dominates)
    k = int(np.searchsorted(rec.n, 0.8 * total))
    steady_subs_per_s = rec.n[k] / (rec.t[k] - t0)
    steps = res[0].env_steps  # the engine counts all rows of the grid
    subs = int(sum(r.submissions.sum() for r in res))
    digest = hashlib.sha256()
    for r in res:
        digest.update(np.ascontiguousarray(r.zeta).tobytes())
        digest.update(np.ascontiguousarray(r.theta).tobytes())
    out = {
        "engine": engine,
        "ledger": "TallyLedger" if ledger == "tally" else 'Ledger(":memory:")',
        "garbage_collector": "on" if (collector or not profiled) else "paused in run()",
        "workload": "laplace eps=1 (same as reference)" if same else "grid laplace/prs x eps",
        "settings": len(cfgs),
        "trials_per_setting": trials,
        "agents": settings * trials * 9,
        "submissions_per_trial": submissions,
        "seconds": secs,
        "cpu_seconds": cpu,
        "env_steps": steps,
        "submissions": subs,
        "env_steps_per_s": steps / secs,
        "env_steps_per_cpu_s": steps / cpu,
        "submissions_per_s": subs / secs,
        "steady_submissions_per_s": steady_subs_per_s,
        "steady_env_steps_per_s": steady_subs_per_s * steps / subs,
        "results_sha256": digest.hexdigest(),  # zeta and final theta of every trial
    }
    if profiled:
        parts = {k: v for k, v in eng.timings.items() if k != "calls"}
        parts["setup"] = {"wall": t_setup, "cpu": c_setup}
        parts["results"] = {"wall": t_res, "cpu": c_res}
        out["profile"] = parts
        out["kernel_calls"] = int(eng.timings["calls"])
        out["kernel_env_steps_per_s"] = steps / parts["kernel"]["wall"]
        out["kernel_env_steps_per_cpu_s"] = steps / parts["kernel"]["cpu"]
    elif engine == "fused" and getattr(eng, "timings", None):  # an older revision's timings
        tm = eng.timings
        out["kernel_env_steps_per_s"] = steps / tm["kernel"]
        out["kernel_env_steps_per_cpu_s"] = steps / tm["kernel_cpu"]
    return out


def bench_floors(reports: int, env_steps: int, rows: int, scale: float) -> dict:
    """What no engine can avoid while keeping NumPy generators and these results bit for bit:
    drawing the mechanism's Laplace noise (``rng.laplace(0, b, (n, 112))``, ``reports`` x 112
    numbers, in chunks of 4 x ``rows`` reports as the fused engine draws them) and one acting
    uniform per env-step (``rng.random``, blocks of 256 x ``rows``). Times per wall and CPU
    second. (A generator's stream does not depend on the chunking: checked here.)"""
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.laplace(0.0, scale, (n, DIM)) for n in (37, 1000, 3)])
    b = np.random.default_rng(0).laplace(0.0, scale, (1040, DIM))
    u = np.random.default_rng(1)
    ua = np.concatenate([u.random((n, 9)) for n in (5, 250, 1)])
    ub = np.random.default_rng(1).random((256, 9))
    chunk_invariant = bool(np.array_equal(a, b) and np.array_equal(ua, ub))

    def timed(fn, total: int, chunk: int) -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        left = total
        while left > 0:
            fn(min(chunk, left))
            left -= chunk
        return time.perf_counter() - t0, time.process_time() - c0

    rng = np.random.default_rng(2)
    lw, lc = timed(lambda n: rng.laplace(0.0, scale, (n, DIM)), reports, 4 * rows)
    aw, ac = timed(lambda n: rng.random((256, n // 256)), env_steps, 256 * rows)
    return {
        "reports": reports,
        "laplace_numbers": reports * DIM,
        "laplace_wall_s": lw,
        "laplace_cpu_s": lc,
        "laplace_ns_per_number_cpu": 1e9 * lc / (reports * DIM),
        "acting_uniforms": env_steps,
        "acting_wall_s": aw,
        "acting_cpu_s": ac,
        "chunking_gives_the_same_stream": chunk_invariant,
    }


def bench_parallel(
    settings: int, trials: int, submissions: int, workers: int, engine: str = "lockstep"
) -> dict:
    """The reference's workload (Laplace, eps = 1) with the same number of trials as
    ``bench_engine(same=True)``, dealt to ``workers`` processes as ``workers`` configs (seeds
    0..workers-1) through ``train_grid(workers=...)``."""
    total = settings * trials
    cfgs = [
        PgcA3cConfig(
            mechanism="laplace",
            epsilon=1.0,
            trials=total // workers + (1 if w < total % workers else 0),
            max_submissions=submissions,
        )
        for w in range(workers)
    ]
    t0 = time.perf_counter()
    res = train_grid(cfgs, seed=list(range(workers)), workers=workers, engine=engine)
    secs = time.perf_counter() - t0
    subs = int(sum(r.submissions.sum() for r in res))
    return {
        "engine": engine,
        "workload": "laplace eps=1 (same as reference)",
        "workers": workers,
        "trials": total,
        "submissions_per_trial": submissions,
        "seconds": secs,
        "env_steps": res[0].env_steps,
        "submissions": subs,
        "env_steps_per_s": res[0].env_steps / secs,
        "submissions_per_s": subs / secs,
    }


class _Recorder:
    """A progress sink recording (time, cumulative submissions)."""

    def __init__(self, t0: float) -> None:
        self.t, self.n, self._n = [t0], [0], 0

    def update(self, k: int) -> None:
        self._n += k
        self.t.append(time.perf_counter())
        self.n.append(self._n)


def bench_paper_grid(submissions: int, trials: int, engine: str = "lockstep") -> dict:
    """The Tables 1-3 grid (Laplace/PRS x eps 1, 2, 5, 10, plus eps = inf), stop_at_target,
    with ``engine`` ("lockstep" or "fused")."""
    cfgs = [
        PgcA3cConfig(
            mechanism=m, epsilon=e, trials=trials, max_submissions=submissions, stop_at_target=True
        )
        for m in ("laplace", "prs")
        for e in (1.0, 2.0, 5.0, 10.0)
    ]
    cfgs.append(
        PgcA3cConfig(
            mechanism="none", trials=trials, max_submissions=submissions, stop_at_target=True
        )
    )
    t0, c0 = time.perf_counter(), time.process_time()
    res = train_grid(cfgs, seed=0, engine=engine)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    subs = int(sum(r.submissions.sum() for r in res))
    digest = hashlib.sha256()
    for r in res:
        digest.update(np.ascontiguousarray(r.zeta).tobytes())
        digest.update(np.ascontiguousarray(r.theta).tobytes())
    return {
        "engine": engine,
        "cpu_seconds": cpu,
        "results_sha256": digest.hexdigest(),
        "settings": len(cfgs),
        "trials": trials,
        "max_submissions": submissions,
        "seconds": secs,
        "submissions": subs,
        "env_steps": res[0].env_steps,
        "submissions_per_s": subs / secs,
        "env_steps_per_s": res[0].env_steps / secs,
        "stopped_at_target": [int(r.stopped_at_target.sum()) for r in res],
    }


def _engine_at(rev: str):
    """The PGC-A3C engine module as it was at git revision ``rev`` (a temporary copy)."""
    import importlib
    import subprocess
    import tempfile

    root = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp(prefix="pgc-baseline-"))
    tag = "".join(ch for ch in rev if ch.isalnum())[:12]

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=root, check=True, capture_output=True, text=True
        ).stdout

    def files(folder: str) -> list[str]:
        out = subprocess.run(
            ["git", "ls-tree", "--name-only", f"{rev}:{folder}"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        return out.stdout.split() if out.returncode == 0 else []

    name = f"_base_pgc_{tag}"
    package = [f for f in files("training/pgc_a3c") if f.endswith(".py")]
    if package:  # the engine as a package (issue 25's rooms): every room, renamed as one
        (tmp / name).mkdir()
        for f in package:
            src = show(f"training/pgc_a3c/{f}").replace("ldp_audit.training.pgc_a3c", name)
            (tmp / name / f).write_text(src)
    else:  # one module and its kernels (before the package)
        (tmp / f"_base_kernels_{tag}.py").write_text(show("training/_kernels.py"))
        engine = show("training/pgc_a3c.py").replace(
            "from ldp_audit.training._kernels import", f"from _base_kernels_{tag} import"
        )
        (tmp / f"{name}.py").write_text(engine)
    sys.path.insert(0, str(tmp))
    return importlib.import_module(name)


def bench_before_after(rev: str, submissions: int, trials: int, acting: str, repeats: int) -> dict:
    """The Tables 1-3 grid (stop_at_target) with the engine at ``rev`` and the current engine,
    alternately; both must give bit-for-bit the same results."""
    from ldp_audit.training import pgc_a3c as new

    old = _engine_at(rev)

    def grid(mod):
        cfgs = [
            mod.PgcA3cConfig(
                mechanism=m,
                epsilon=e,
                trials=trials,
                max_submissions=submissions,
                stop_at_target=True,
                acting=acting,
                buffer_size=1 if m == "laplace" else 100,
            )
            for m in ("laplace", "prs")
            for e in (1.0, 2.0, 5.0, 10.0)
        ]
        cfgs += [
            mod.PgcA3cConfig(
                mechanism="none",
                trials=trials,
                max_submissions=submissions,
                stop_at_target=True,
                acting=acting,
                buffer_size=b,
            )
            for b in (1, 100)
        ]
        return cfgs

    for mod in (old, new):  # compile / load every kernel before any clock starts
        mod.train_grid(grid(mod)[:1] + grid(mod)[4:5] + grid(mod)[8:9], seed=1)
    times: dict[str, list[float]] = {"before": [], "after": []}
    results = {}
    for _ in range(repeats):
        for name, mod in (("before", old), ("after", new)):
            t0 = time.perf_counter()
            results[name] = mod.train_grid(grid(mod), seed=0)
            times[name].append(time.perf_counter() - t0)
    same = all(
        np.array_equal(a.zeta, b.zeta, equal_nan=True) and np.array_equal(a.theta, b.theta)
        for a, b in zip(results["before"], results["after"], strict=True)
    )
    subs = int(sum(r.submissions.sum() for r in results["after"]))
    return {
        "baseline_rev": rev,
        "workload": f"Tables 1-3 grid, 10 settings x {trials} trials x <= {submissions} "
        f"submissions, stop_at_target, acting={acting}, one process",
        "submissions": subs,
        "seconds_before": times["before"],
        "seconds_after": times["after"],
        "ratio_before_over_after": [
            b / a for b, a in zip(times["before"], times["after"], strict=True)
        ],
        "bit_for_bit_same": bool(same),
    }


def _torch_gradients(theta, ro, gamma=0.99, lam=0.5, beta=0.01):
    """The same loss with torch autograd, batched over rows (per-row weight tensors)."""
    import torch

    big_l = int(ro["lengths"].max())
    th = torch.tensor(theta, requires_grad=True)
    m = th.shape[0]
    wc = th[:, :64].reshape(m, 16, 4)
    wp = th[:, 64:96].reshape(m, 2, 16)
    wv = th[:, 96:].reshape(m, 16)
    s = torch.as_tensor(ro["obs"][:, : big_l + 1])
    h = torch.relu(torch.einsum("mjk,mlk->mlj", wc, s))
    z = torch.einsum("mkj,mlj->mlk", wp, h)
    v = torch.einsum("mj,mlj->ml", wv, h)
    lengths = torch.as_tensor(ro["lengths"])
    steps = torch.arange(big_l)
    valid = steps[None, :] < lengths[:, None]
    with torch.no_grad():
        boot = torch.as_tensor(ro["bootstrap"])
        v_last = torch.where(boot, v[torch.arange(m), lengths], torch.zeros(m))
        r = torch.where(valid, torch.as_tensor(ro["rewards"][:, :big_l]), torch.zeros(()))
        exps = (steps[:, None] - steps[None, :]).clamp(min=0).double()
        disc = torch.where(steps[:, None] >= steps[None, :], gamma**exps, torch.zeros(()))
        target = (
            r @ disc + gamma ** (lengths[:, None] - steps[None, :]).clamp(min=0) * v_last[:, None]
        )
        adv = target - v[:, :big_l]
    logp = torch.log_softmax(z[:, :big_l], dim=-1)
    pi = logp.exp()
    ent = -(pi * logp).sum(-1)
    a = torch.as_tensor(ro["actions"][:, :big_l]).long()
    lp_a = logp.gather(2, a[..., None]).squeeze(-1)
    loss_p = -(lp_a * adv) - beta * ent
    loss_v = (target - v[:, :big_l]) ** 2
    loss = torch.where(valid, loss_p + lam * loss_v, torch.zeros(())).sum()
    loss.backward()
    return th.grad.numpy()


def bench_gradients(rows: int = 200, repeats: int = 5) -> dict:
    rng = np.random.default_rng(0)
    theta = np.stack([init_theta(rng) for _ in range(rows)])
    ro = rollout(
        theta,
        rng.choice([9.7, 9.8, 9.9], rows),
        rng.uniform(-0.05, 0.05, (rows, 4)),
        rng.random((200, rows)),
        0.5,
    )
    big_l = int(ro["lengths"].max())
    args = (
        theta,
        ro["obs"][:, : big_l + 1],
        ro["actions"][:, :big_l],
        ro["rewards"][:, :big_l],
        ro["lengths"],
        ro["bootstrap"],
    )
    loss_gradients(*args)  # compile (or load the cached kernel) outside the timing
    t_kernel = min(_timeit(lambda: loss_gradients(*args)) for _ in range(repeats))
    t_np = min(_timeit(lambda: loss_gradients_numpy(*args)) for _ in range(repeats))
    t_torch = min(_timeit(lambda: _torch_gradients(theta, ro)) for _ in range(repeats))
    diff = float(np.abs(loss_gradients(*args) - _torch_gradients(theta, ro)).max())
    diff_np = float(np.abs(loss_gradients(*args) - loss_gradients_numpy(*args)).max())
    return {
        "rows": rows,
        "max_length": big_l,
        "kernel_ms": 1e3 * t_kernel,
        "numpy_ms": 1e3 * t_np,
        "torch_ms": 1e3 * t_torch,
        "numpy_over_kernel": t_np / t_kernel,
        "torch_over_kernel": t_torch / t_kernel,
        "max_abs_difference": diff,
        "max_abs_difference_numpy": diff_np,
        "dim": DIM,
    }


def _timeit(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ref-seconds", type=float, default=20.0)
    p.add_argument("--settings", type=int, default=10)
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--submissions", type=int, default=1000)
    p.add_argument(
        "--paper-grid",
        type=int,
        default=0,
        metavar="N",
        help="also time the 9-setting Tables 1-3 grid (20 trials, N submissions, stop_at_target)",
    )
    p.add_argument(
        "--workers", type=int, default=2, help="processes for the parallel run (train_grid)"
    )
    p.add_argument(
        "--baseline-rev",
        default=None,
        metavar="REV",
        help="also time the engine at git revision REV against the current one (same run)",
    )
    p.add_argument("--baseline-submissions", type=int, default=3000)
    p.add_argument("--baseline-repeats", type=int, default=2)
    p.add_argument("--acting", choices=("argmax", "sample"), default="sample")
    p.add_argument(
        "--only-baseline", action="store_true", help="run only the before/after comparison"
    )
    p.add_argument(
        "--tally",
        action="store_true",
        help="also run the fused engine charging an in-process TallyLedger (no ledger rows)",
    )
    p.add_argument(
        "--fused-baseline-rev",
        default=None,
        metavar="REV",
        help="also time the fused engine at git revision REV against the current one on the "
        "core workload, alternately, twice each (with --tally: both ledgers)",
    )
    p.add_argument(
        "--core-only",
        action="store_true",
        help="only the reference, both engines (and --tally) and the env-only ceiling",
    )
    p.add_argument("--out", default="benchmarks/results/bench_pgc.json")
    a = p.parse_args()
    if a.only_baseline:
        if not a.baseline_rev:
            p.error("--only-baseline needs --baseline-rev")
        ba = bench_before_after(
            a.baseline_rev, a.baseline_submissions, a.trials, a.acting, a.baseline_repeats
        )
        _print_before_after(ba)
        out = {
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
            "load_average_at_end": os.getloadavg(),
            "before_after": ba,
            "command": "python " + " ".join(sys.argv),
        }
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
        print(f"wrote {a.out}")
        return 0
    import torch

    # tiny networks: one torch thread is fastest (and fair on a shared 2-core machine)
    torch.set_num_threads(1)

    # compile (or load from Numba's cache) every kernel before any clock starts: a one-off
    # cost per installation, not part of the engine's throughput
    for mech, eps in (("laplace", 1.0), ("prs", 1.0), ("none", None)):
        kw = {} if eps is None else {"epsilon": eps}
        for engine in ("lockstep", "fused"):
            cfg = PgcA3cConfig(mechanism=mech, trials=2, max_submissions=20, **kw)
            train(cfg, seed=0, engine=engine)
    ref = bench_reference(a.ref_seconds)
    print(
        f"reference worker : {ref['env_steps_per_s']:>12,.0f} env-steps/s "
        f"{ref['submissions_per_s']:>10,.1f} submissions/s  ({ref['submissions']} subs; "
        f"{ref['env_steps_per_cpu_s']:,.0f} per CPU-s)"
    )
    eng = bench_engine(a.settings, a.trials, a.submissions, same=True)
    _print_engine("lockstep, sqlite ", eng, ref)
    fus = bench_engine(a.settings, a.trials, a.submissions, same=True, engine="fused")
    _print_engine("fused, sqlite    ", fus, ref)
    fus_t = fus_tc = None
    if a.tally:
        fus_t = bench_engine(
            a.settings, a.trials, a.submissions, same=True, engine="fused", ledger="tally"
        )
        _print_engine("fused, tally     ", fus_t, ref)
        fus_tc = bench_engine(
            a.settings,
            a.trials,
            a.submissions,
            same=True,
            engine="fused",
            ledger="tally",
            collector=True,
        )
        _print_engine("fused, tally, gc ", fus_tc, ref)
    ceiling = bench_env_ceiling(fus["agents"])
    print(
        f"env-only ceiling : {ceiling['env_steps_per_s']:>12,.0f} env-steps/s "
        f"(Gymnasium CartPoleVectorEnv alone, {ceiling['rows']} rows, random actions; "
        f"{ceiling['env_steps_per_cpu_s']:,.0f} per CPU-s)"
    )
    scale = PgcA3cConfig(mechanism="laplace", epsilon=1.0).make_mechanism().scale
    floors = bench_floors(fus["submissions"], fus["env_steps"], fus["agents"], scale)
    runs = {"fused, SQLite ledger": fus}
    if a.tally:
        runs["fused, TallyLedger"] = fus_t
        runs["fused, TallyLedger, collector on"] = fus_tc
    breakdown = _breakdown(runs, floors, ceiling)
    same_results = eng["results_sha256"] == fus["results_sha256"]
    fused_summary = {
        "bit_for_bit_same_as_lockstep": same_results,
        "fused_over_lockstep_wall": eng["seconds"] / fus["seconds"],
        "fused_over_lockstep_cpu": eng["cpu_seconds"] / fus["cpu_seconds"],
        "fused_over_reference_env_steps_per_s": fus["env_steps_per_s"] / ref["env_steps_per_s"],
        "fused_over_reference_env_steps_per_cpu_s": fus["env_steps_per_cpu_s"]
        / ref["env_steps_per_cpu_s"],
        "fused_fraction_of_ceiling": fus["env_steps_per_s"] / ceiling["env_steps_per_s"],
        "fused_fraction_of_ceiling_cpu": fus["env_steps_per_cpu_s"]
        / ceiling["env_steps_per_cpu_s"],
        "kernel_only_fraction_of_ceiling": fus["kernel_env_steps_per_s"]
        / ceiling["env_steps_per_s"],
        "kernel_only_fraction_of_ceiling_cpu": fus["kernel_env_steps_per_cpu_s"]
        / ceiling["env_steps_per_cpu_s"],
        "breakdown": breakdown,
    }
    fs = fused_summary
    print(
        f"fused vs lockstep: {fs['fused_over_lockstep_wall']:.2f}x wall, "
        f"{fs['fused_over_lockstep_cpu']:.2f}x CPU (both SQLite); bit-for-bit same results: "
        f"{same_results}"
    )
    for name, r in runs.items():
        fused_summary[name] = {
            "bit_for_bit_same_as_lockstep": r["results_sha256"] == eng["results_sha256"],
            "over_reference_env_steps_per_s": r["env_steps_per_s"] / ref["env_steps_per_s"],
            "over_reference_env_steps_per_cpu_s": r["env_steps_per_cpu_s"]
            / ref["env_steps_per_cpu_s"],
            "fraction_of_ceiling": r["env_steps_per_s"] / ceiling["env_steps_per_s"],
            "fraction_of_ceiling_cpu": r["env_steps_per_cpu_s"] / ceiling["env_steps_per_cpu_s"],
        }
        f = fused_summary[name]
        print(
            f"{name:33s}: {100 * f['fraction_of_ceiling']:.1f}% of the env-only ceiling "
            f"({100 * f['fraction_of_ceiling_cpu']:.1f}% per CPU-s), "
            f"{f['over_reference_env_steps_per_s']:,.0f}x / "
            f"{f['over_reference_env_steps_per_cpu_s']:,.0f}x the reference (wall / CPU); "
            f"same results: {f['bit_for_bit_same_as_lockstep']}"
        )
    base = None
    if a.fused_baseline_rev:
        old = _engine_at(a.fused_baseline_rev)
        old.train(
            old.PgcA3cConfig(mechanism="laplace", epsilon=1.0, trials=2, max_submissions=20),
            seed=0,
            engine="fused",
        )  # compile its kernels outside the clock
        base = {}
        for ledger in ("sqlite", "tally") if a.tally else ("sqlite",):
            for name, mod in (("before", old), ("after", None), ("before", old), ("after", None)):
                r = bench_engine(
                    a.settings, a.trials, a.submissions, same=True, engine="fused",
                    ledger=ledger, module=mod,
                )  # fmt: skip
                base.setdefault(ledger, {}).setdefault(name, []).append(r)
            b = base[ledger]
            b["same_results"] = all(
                r["results_sha256"] == eng["results_sha256"] for r in b["before"] + b["after"]
            )
            b["cpu_before_over_after"] = [
                x["cpu_seconds"] / y["cpu_seconds"]
                for x, y in zip(b["before"], b["after"], strict=True)
            ]
            b["wall_before_over_after"] = [
                x["seconds"] / y["seconds"] for x, y in zip(b["before"], b["after"], strict=True)
            ]
            print(
                f"fused at {a.fused_baseline_rev} vs now, {ledger}: CPU s before "
                + ", ".join(f"{x['cpu_seconds']:.2f}" for x in b["before"])
                + ", after "
                + ", ".join(f"{x['cpu_seconds']:.2f}" for x in b["after"])
                + " (before/after "
                + ", ".join(f"{q:.2f}x" for q in b["cpu_before_over_after"])
                + " CPU, "
                + ", ".join(f"{q:.2f}x" for q in b["wall_before_over_after"])
                + f" wall); same results: {b['same_results']}"
            )
        fused_summary["fused_before_after"] = base
    if a.core_only:
        out = {
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
            "load_average_at_end": os.getloadavg(),
            "python": platform.python_version(),
            "reference": ref,
            "engine": eng,
            "engine_fused": fus,
            "engine_fused_tally": fus_t,
            "engine_fused_tally_collector_on": fus_tc,
            "floors": floors,
            "env_only_ceiling": ceiling,
            "fused_summary": fused_summary,
            "command": "python " + " ".join(sys.argv),
        }
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
        print(f"wrote {a.out}")
        return 0
    grid = bench_engine(a.settings, a.trials, a.submissions, same=False)
    _print_engine("grid, lockstep   ", grid, ref)
    grid_f = bench_engine(a.settings, a.trials, a.submissions, same=False, engine="fused")
    _print_engine("grid, fused      ", grid_f, ref)
    fused_summary["grid_bit_for_bit_same"] = grid["results_sha256"] == grid_f["results_sha256"]
    fused_summary["grid_fused_over_lockstep_cpu"] = grid["cpu_seconds"] / grid_f["cpu_seconds"]
    print(f"grid bit-for-bit same results: {fused_summary['grid_bit_for_bit_same']}")
    par = bench_parallel(a.settings, a.trials, a.submissions, a.workers)
    ratio_par = par["env_steps_per_s"] / ref["env_steps_per_s"]
    print(
        f"lockstep, {a.workers} procs: {par['env_steps_per_s']:>12,.0f} env-steps/s "
        f"{par['submissions_per_s']:>10,.1f} submissions/s  ({par['seconds']:.1f} s wall; "
        f"ratio {ratio_par:,.0f}x env-steps/s)"
    )
    par_f = bench_parallel(a.settings, a.trials, a.submissions, a.workers, engine="fused")
    ratio_par_f = par_f["env_steps_per_s"] / ref["env_steps_per_s"]
    print(
        f"fused, {a.workers} procs   : {par_f['env_steps_per_s']:>12,.0f} env-steps/s "
        f"{par_f['submissions_per_s']:>10,.1f} submissions/s  ({par_f['seconds']:.1f} s wall; "
        f"ratio {ratio_par_f:,.0f}x env-steps/s)"
    )
    grad = bench_gradients()
    print(
        f"episode gradients: compiled kernel {grad['kernel_ms']:.2f} ms, numpy "
        f"{grad['numpy_ms']:.2f} ms, torch autograd {grad['torch_ms']:.1f} ms for "
        f"{grad['rows']} episodes (numpy/kernel {grad['numpy_over_kernel']:.1f}x, "
        f"torch/kernel {grad['torch_over_kernel']:.0f}x, max |diff| vs torch "
        f"{grad['max_abs_difference']:.1e})"
    )
    paper = None
    if a.paper_grid:
        paper = {}
        for engine in ("lockstep", "fused"):
            pg = paper[engine] = bench_paper_grid(a.paper_grid, a.trials, engine)
            print(
                f"paper grid, {engine:8s}: {pg['seconds']:.1f} s wall, {pg['cpu_seconds']:.1f} s "
                f"CPU for {pg['settings']} settings x {pg['trials']} trials x <= "
                f"{pg['max_submissions']} submissions, stop_at_target "
                f"({pg['submissions_per_s']:,.0f} submissions/s, "
                f"{pg['env_steps_per_s']:,.0f} env-steps/s)"
            )
        paper["bit_for_bit_same"] = (
            paper["lockstep"]["results_sha256"] == paper["fused"]["results_sha256"]
        )
        paper["fused_over_lockstep_wall"] = paper["lockstep"]["seconds"] / paper["fused"]["seconds"]
        paper["fused_over_lockstep_cpu"] = (
            paper["lockstep"]["cpu_seconds"] / paper["fused"]["cpu_seconds"]
        )
        print(
            f"paper grid fused vs lockstep: {paper['fused_over_lockstep_wall']:.2f}x wall, "
            f"{paper['fused_over_lockstep_cpu']:.2f}x CPU; bit-for-bit same: "
            f"{paper['bit_for_bit_same']}"
        )
    ba = None
    if a.baseline_rev:
        ba = bench_before_after(
            a.baseline_rev, a.baseline_submissions, a.trials, a.acting, a.baseline_repeats
        )
        _print_before_after(ba)
    out = {
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
        "load_average_at_end": os.getloadavg(),
        "before_after": ba,
        "python": platform.python_version(),
        "reference": ref,
        "engine": eng,
        "engine_fused": fus,
        "engine_fused_tally": fus_t,
        "engine_fused_tally_collector_on": fus_tc,
        "floors": floors,
        "env_only_ceiling": ceiling,
        "fused_summary": fused_summary,
        "engine_grid": grid,
        "engine_grid_fused": grid_f,
        "engine_parallel": par,
        "engine_parallel_fused": par_f,
        "ratio_parallel_fused_env_steps_per_s": ratio_par_f,
        "ratio_parallel_env_steps_per_s": ratio_par,
        "ratio_env_steps_per_s": eng["env_steps_per_s"] / ref["env_steps_per_s"],
        "ratio_submissions_per_s": eng["submissions_per_s"] / ref["submissions_per_s"],
        "gradients": grad,
        "paper_grid": paper,
        "command": "python " + " ".join(sys.argv),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {a.out}")
    return 0


def _breakdown(runs: dict[str, dict], floors: dict, ceiling: dict) -> dict:
    """Where each fused run's time goes (its profile hook), per env-step, and the best rate
    any engine of this design could reach: only the kernel and the required noise draws."""
    names = list(runs)
    parts = list(next(iter(runs.values()))["profile"])
    head = f"{'part (CPU s | ns per env-step | share)':42s}" + "".join(
        f"{n[:30]:>32s}" for n in names
    )
    print("fused engine, where the time goes (process CPU time; wall in the JSON)")
    print(head)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for part in [*parts, "total"]:
        cells = []
        for n in names:
            r = runs[n]
            prof = r["profile"]
            if part == "total":
                cpu, wall = r["cpu_seconds"], r["seconds"]
            else:
                cpu, wall = prof[part]["cpu"], prof[part]["wall"]
            ns = 1e9 * cpu / r["env_steps"]
            table.setdefault(part, {})[n] = {
                "cpu_s": cpu,
                "wall_s": wall,
                "ns_per_env_step_cpu": ns,
                "share_of_cpu": cpu / r["cpu_seconds"],
            }
            cells.append(f"{cpu:8.3f} s {ns:7.1f} ns {100 * cpu / r['cpu_seconds']:5.1f}%")
        print(f"{part:42s}" + "".join(f"{c:>32s}" for c in cells))
    steps = next(iter(runs.values()))["env_steps"]
    ceil_cpu = ceiling["env_steps_per_cpu_s"]
    print(
        f"floors: drawing the {floors['laplace_numbers']:,} Laplace numbers alone (NumPy, "
        f"{floors['reports']:,} reports) {floors['laplace_cpu_s']:.3f} s CPU = "
        f"{1e9 * floors['laplace_cpu_s'] / steps:.1f} ns per env-step "
        f"({floors['laplace_ns_per_number_cpu']:.1f} ns per number); the "
        f"{floors['acting_uniforms']:,} acting uniforms {floors['acting_cpu_s']:.3f} s CPU = "
        f"{1e9 * floors['acting_cpu_s'] / steps:.1f} ns per env-step; chunking gives the same "
        f"stream: {floors['chunking_gives_the_same_stream']}; the env-only ceiling "
        f"{1e9 / ceil_cpu:.1f} ns per env-step"
    )
    bounds = {}
    for n in names:
        k = runs[n]["profile"]["kernel"]["cpu"]
        b1 = steps / (k + floors["laplace_cpu_s"])
        b2 = steps / (k + floors["laplace_cpu_s"] + floors["acting_cpu_s"])
        bounds[n] = {
            "kernel_only_env_steps_per_cpu_s": steps / k,
            "kernel_only_fraction_of_ceiling_cpu": steps / k / ceil_cpu,
            "kernel_plus_noise_env_steps_per_cpu_s": b1,
            "kernel_plus_noise_fraction_of_ceiling_cpu": b1 / ceil_cpu,
            "kernel_noise_acting_env_steps_per_cpu_s": b2,
            "kernel_noise_acting_fraction_of_ceiling_cpu": b2 / ceil_cpu,
            "end_to_end_fraction_of_ceiling_cpu": runs[n]["env_steps_per_cpu_s"] / ceil_cpu,
        }
        bd = bounds[n]
        print(
            f"{n}: end to end {100 * bd['end_to_end_fraction_of_ceiling_cpu']:.1f}% of the "
            f"ceiling per CPU-s; best attainable if all but the kernel and the required draws "
            f"cost zero: kernel + Laplace {b1:,.0f} env-steps per CPU-s = "
            f"{100 * bd['kernel_plus_noise_fraction_of_ceiling_cpu']:.1f}% (+ acting uniforms "
            f"{100 * bd['kernel_noise_acting_fraction_of_ceiling_cpu']:.1f}%); the kernel alone "
            f"{100 * bd['kernel_only_fraction_of_ceiling_cpu']:.1f}%"
        )
    return {"parts": table, "bounds": bounds}


def _print_engine(label: str, e: dict, ref: dict) -> None:
    r = e["env_steps_per_s"] / ref["env_steps_per_s"]
    rc = e["env_steps_per_cpu_s"] / ref["env_steps_per_cpu_s"]
    print(
        f"{label}: {e['env_steps_per_s']:>12,.0f} env-steps/s "
        f"{e['submissions_per_s']:>10,.1f} submissions/s  ({e['agents']} rows, "
        f"{e['seconds']:.1f} s wall, {e['cpu_seconds']:.1f} s CPU; {r:,.0f}x the reference "
        f"per wall-s, {rc:,.0f}x per CPU-s)"
    )


def _print_before_after(ba: dict) -> None:
    for b, a_, r in zip(
        ba["seconds_before"], ba["seconds_after"], ba["ratio_before_over_after"], strict=True
    ):
        print(
            f"before/after     : engine at {ba['baseline_rev']} {b:.1f} s, now {a_:.1f} s "
            f"(before/after {r:.2f}x; {ba['workload']})"
        )
    print(f"bit-for-bit same results: {ba['bit_for_bit_same']}")


if __name__ == "__main__":
    sys.exit(main())
