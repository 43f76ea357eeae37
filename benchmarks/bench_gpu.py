"""FedRL and DP-SGD RL on a GPU against the CPU, in the same run (issue 29).

Called by ``benchmarks/gpu_check.sh`` (which finds a Python whose torch sees CUDA); runnable by
hand: ``python benchmarks/bench_gpu.py [--quick] [--budget-s S] [--out FILE] [--overwrite]``
(an existing ``--out``, the committed record by default, is refused unless ``--overwrite``).

What it measures, every number printed and written to JSON:

1. **Closeness** (only with CUDA): the CUDA results against the CPU results of the same
   computation with the same seeds.

   - One update of each FedRL network (the stacked local Q-networks, DQN-full's network, the
     shared MLP): outputs and gradients of ``sum(c * q)``. Bound: the float32 forward error bound
     of a ReLU network, ``|fl(q) - q| <= gamma_n * M`` with ``gamma_n = n u / (1 - n u)``,
     ``u = 2^-24``, ``n`` the number of accumulated terms along the longest path and ``M`` the
     same network evaluated on ``|W|`` and ``|x|`` (in float64); CPU and CUDA each obey it, so
     ``|cpu - cuda| <= 2 gamma_n M``. The gradients get the same bound with ``n`` counting the
     backward pass and the batch reduction and ``M`` the abs-network's gradient. TF32 is off
     for these checks.
   - One DP-SGD update (Opacus ghost clipping and per-sample gradients) of the DQN network:
     the noisy mean gradient on CUDA against a float64 CPU reference, within
     ``max(4 * (CPU float32 error), 2 gamma_n C)`` (C the clip norm: every clipped per-sample
     gradient is at most C per coordinate) plus one rounding of the noise addition. The noise
     itself is drawn on the CPU generator on both devices, so it is identical.
   - Whole short runs whose actions are all random (epsilon-greedy at epsilon 1), so both
     devices see the same episodes: FedRL's released Q outputs, DP-SGD DQN's released updates
     and canary projections and the final weights. These drift with float32 rounding through
     Adam, so the check is coarse: relative difference <= 1e-3, where a mismatched noise stream
     or batch gives differences of order 1.

2. **Speed**: seconds per training iteration of FedRL (one step of every map, one minibatch
   update; ``train_seconds / train_steps`` of the trainer itself) at a few map sizes, batch
   sizes and batched runs, on the CPU (1 thread, the trainer's default, and every core) and on
   CUDA; seconds per DP-SGD update (compute only: forward, per-sample clipping, noise, Adam) at
   a few batch sizes and widths, ghost and materialised; and whole short DQN / REINFORCE DP-SGD
   runs (environment, ledger and all) per update.

3. **FedRL Table 1 at a larger scale** on the GPU with what time is left (8x8, 5 runs per method,
   up to 32,000 iterations), if at least two minutes remain.

Exit 1 only when a closeness check fails or a stage breaks; without CUDA the CPU is measured
and the GPU parts say why they were skipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
U32 = 2.0**-24  # float32 unit roundoff


def _ensure_package() -> None:
    """Import ldp_audit from this source tree even when it is not installed (a GPU machine's
    own Python): training/ and attacks/ install as ldp_audit.training / ldp_audit.attacks."""
    import importlib.util

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import ldp_audit

    for sub in ("training", "attacks"):
        name = f"ldp_audit.{sub}"
        try:
            __import__(name)
        except ModuleNotFoundError:
            spec = importlib.util.spec_from_file_location(
                name, ROOT / sub / "__init__.py", submodule_search_locations=[str(ROOT / sub)]
            )
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            setattr(ldp_audit, sub, mod)


def probe() -> dict[str, Any]:
    """What this Python has: versions, CUDA, the packages the trainers need."""
    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
    for mod in ("numpy", "scipy", "torch", "opacus", "gymnasium", "dp_accounting", "tqdm"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            out[mod] = f"missing: {type(exc).__name__}: {exc}"
    try:
        import torch

        out["torch_cuda_build"] = torch.version.cuda
        out["cuda_available"] = bool(torch.cuda.is_available())
        if out["cuda_available"]:
            out["cuda_device"] = torch.cuda.get_device_name(0)
            out["cuda_capability"] = list(torch.cuda.get_device_capability(0))
    except Exception as exc:  # noqa: BLE001
        out["cuda_available"] = False
        out["cuda_error"] = f"{type(exc).__name__}: {exc}"
    import shutil
    import subprocess

    if shutil.which("nvidia-smi"):
        q = "name,driver_version,memory.total,clocks.max.sm"
        r = subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        out["nvidia_smi"] = (r.stdout or r.stderr).strip()
    else:
        out["nvidia_smi"] = "not found"
    try:
        with open("/proc/cpuinfo") as f:
            out["cpu_model"] = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?"
            )
    except OSError:
        out["cpu_model"] = platform.processor() or "?"
    if os.environ.get("GPU_CHECK_ENV"):  # what benchmarks/gpu_check.sh found
        out["gpu_check_sh"] = os.environ["GPU_CHECK_ENV"]
    try:
        _ensure_package()
        import ldp_audit.training.dprl.trainer  # noqa: F401
        import ldp_audit.training.fedrl  # noqa: F401

        out["ldp_audit"] = "ok"
    except Exception as exc:  # noqa: BLE001
        out["ldp_audit"] = f"import failed: {type(exc).__name__}: {exc}"
    return out


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def gamma(n: int) -> float:
    """Higham's gamma_n = n u / (1 - n u) for float32."""
    return n * U32 / (1.0 - n * U32)


def _sync(dev: str) -> None:
    if dev == "cuda":
        import torch

        torch.cuda.synchronize()


class Bench:
    """Stages with a time budget; results written to JSON after every stage."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.perf_counter()
        self.doc: dict[str, Any] = {
            "benchmark": "bench_gpu",
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "command": "python " + " ".join(sys.argv),
            "quick": bool(args.quick),
            "budget_s": args.budget_s,
            "probe": probe(),
            "stages": {},
            "failures": [],
        }
        self.cuda = bool(self.doc["probe"].get("cuda_available"))
        self.devices = ["cpu", "cuda"] if self.cuda else ["cpu"]
        #: the device the closeness checks compare with the CPU ("cpu" in --self-test)
        self.gdev = "cuda"
        if args.self_test:  # the checks' plumbing on a machine without CUDA: cpu vs cpu
            self.cuda, self.gdev = True, "cpu"

    def left(self) -> float:
        return self.args.budget_s - (time.perf_counter() - self.t0)

    def say(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", flush=True)

    def write(self) -> None:
        self.doc["elapsed_s"] = time.perf_counter() - self.t0
        out = Path(self.args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.doc, indent=1, default=str, allow_nan=True))

    def stage(self, name: str, fn: Any, *, needs_cuda: bool = False, min_s: float = 0) -> None:
        if needs_cuda and not self.cuda:
            self.doc["stages"][name] = {"status": "skipped: torch here has no CUDA device"}
            self.say(f"{name}: skipped (no CUDA)")
            return
        if self.left() < min_s:
            self.doc["stages"][name] = {"status": f"skipped: {self.left():.0f} s left of budget"}
            self.say(f"{name}: skipped (time)")
            return
        self.say(f"== {name}")
        self.doc["stages"][name] = {"status": "running (stopped before it finished)", "rows": []}
        try:
            res = fn()
            res.setdefault("status", "ok")
        except Exception as exc:  # noqa: BLE001 - a broken stage is reported, then exit 1
            tb = traceback.format_exc()
            print(tb, flush=True)
            res = {"status": f"failed: {type(exc).__name__}: {exc}", "traceback": tb}
            self.doc["failures"].append(f"{name}: {type(exc).__name__}: {exc}")
        self.doc["stages"][name] = res
        self.write()

    def partial(self, name: str, row: dict[str, Any]) -> None:
        """Keep a finished row of a running stage on disk (a timeout loses only the rest)."""
        self.doc["stages"][name]["rows"].append(row)
        self.write()

    def check(self, name: str, ok: bool, detail: str) -> dict[str, Any]:
        self.say(f"  check {name}: {'PASS' if ok else 'FAIL'} ({detail})")
        if not ok:
            self.doc["failures"].append(f"{name}: {detail}")
        return {"check": name, "ok": bool(ok), "detail": detail}


# ----------------------------------------------------------------------------------------------
# 1. closeness
# ----------------------------------------------------------------------------------------------


def _net_close(b: Bench) -> dict[str, Any]:
    """One forward + backward of each stacked FedRL network, CPU vs CUDA, float32 bound."""
    import numpy as np
    import torch

    from ldp_audit.training.fedrl import networks as FN
    from ldp_audit.training.fedrl.gridworld import ALPHA_VIEW, BETA_VIEW, N_ACTIONS

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    h, k, bsz = 4, 3, (16 if b.args.quick else 64)
    rng = np.random.default_rng(0)
    cases = {
        "local_q_alpha": (
            lambda: FN.local_q(ALPHA_VIEW, h), FN.fwd_local_q, ALPHA_VIEW,
            [rng.integers(0, 4, (k, bsz, h, ALPHA_VIEW, ALPHA_VIEW))],
            [h * 9 + 1, 32 * ALPHA_VIEW**2 + 1, 256 + 1], [256, N_ACTIONS], ALPHA_VIEW**2,
        ),
        "local_q_beta": (
            lambda: FN.local_q(BETA_VIEW, h), FN.fwd_local_q, BETA_VIEW,
            [rng.integers(0, 4, (k, bsz, h, BETA_VIEW, BETA_VIEW))],
            [h * 9 + 1, 32 * BETA_VIEW**2 + 1, 256 + 1], [256, N_ACTIONS], BETA_VIEW**2,
        ),
        "full_q": (
            lambda: FN.full_q_class()(h), FN.fwd_full_q, None,
            [rng.integers(0, 4, (k, bsz, h, ALPHA_VIEW, ALPHA_VIEW)),
             rng.integers(0, 4, (k, bsz, h, BETA_VIEW, BETA_VIEW))],
            [h * 9 + 1, 32 * (ALPHA_VIEW**2 + BETA_VIEW**2) + 1, 256 + 1], [256, N_ACTIONS],
            BETA_VIEW**2,
        ),
        "mlp": (
            FN.mlp, FN.fwd_mlp, None, [rng.normal(0, 3, (k, bsz, 2 * N_ACTIONS))],
            [2 * N_ACTIONS + 1, 2 * N_ACTIONS + 1], [2 * N_ACTIONS, N_ACTIONS], 1,
        ),
    }  # fmt: skip
    out = []
    for name, (make, fwd, view, xs, fan_in, fan_out, positions) in cases.items():
        gens = [torch.Generator().manual_seed(100 + i) for i in range(k)]
        cpu = FN.Stacked(make, gens, fwd, view)
        gens = [torch.Generator().manual_seed(100 + i) for i in range(k)]
        gpu = FN.Stacked(make, gens, fwd, view, device=b.gdev)
        c = torch.as_tensor(rng.choice([-1.0, 1.0], (k, bsz, N_ACTIONS)), dtype=torch.float32)
        res = {}
        for tag, net, dev in (("cpu", cpu, "cpu"), ("cuda", gpu, b.gdev)):
            x = [torch.as_tensor(a, dtype=torch.float32, device=dev) for a in xs]
            q = net(*x)
            (q * c.to(dev)).sum().backward()
            res[tag] = (
                q.detach().cpu().double(),
                {n: p.grad.detach().cpu().double() for n, p in net.params.items()},
            )
        absp = {n: v.detach().abs().double().requires_grad_(True) for n, v in cpu.params.items()}
        ax = [torch.as_tensor(np.abs(a), dtype=torch.float64) for a in xs]
        m = fwd(absp, *ax)
        (m * c.abs().double()).sum().backward()
        n_fwd = sum(fan_in)
        n_grad = n_fwd + sum(fan_out) + bsz * positions + 8
        tol_q = 2 * gamma(n_fwd) * m.detach()
        dq = (res["cpu"][0] - res["cuda"][0]).abs()
        ok = bool((dq <= tol_q).all())
        worst = float((dq / tol_q.clamp_min(1e-300)).max())
        gworst = 0.0
        for n_, g in res["cpu"][1].items():
            tol_g = 2 * gamma(n_grad) * absp[n_].grad
            dg = (g - res["cuda"][1][n_]).abs()
            ok = ok and bool((dg <= tol_g).all())
            gworst = max(gworst, float((dg / tol_g.clamp_min(1e-300)).max()))
        out.append(
            b.check(
                f"fedrl-net-{name}",
                ok,
                f"max |cpu-cuda| / bound: outputs {worst:.3g}, gradients {gworst:.3g} "
                f"(n={n_fwd} fwd, {n_grad} grad terms; max |q| "
                f"{float(res['cpu'][0].abs().max()):.3g})",
            )
            | {"output_ratio": worst, "grad_ratio": gworst}
        )
    return {"checks": out}


def _dpsgd_close(b: Bench) -> dict[str, Any]:
    """One DP-SGD update (ghost and per-sample), CUDA vs a float64 CPU reference."""
    import numpy as np
    import torch
    from opacus import GradSampleModule
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping

    from ldp_audit.training.dprl import algos, config, privacy

    algos.quiet_opacus_warnings()
    torch.backends.cuda.matmul.allow_tf32 = False
    checks = []
    for ghost in (True, False):
        for hidden, bsz in ((64, 32), (128, 256)):
            cfg = config.DprlConfig(algo="dqn", hidden=hidden, batch_size=min(bsz, 10_000))
            clip = 1.0
            rng = np.random.default_rng(hidden + bsz)
            s = rng.normal(0, 1, (bsz, 4)).astype(np.float32)  # float32 inputs for all three
            a = rng.integers(0, 2, bsz)
            y = rng.normal(0, 2, bsz).astype(np.float32)
            got = {}
            for tag, dev, dt, nm in (
                ("cpu", "cpu", torch.float32, 0.0),
                ("cuda", b.gdev, torch.float32, 0.0),
                ("ref", "cpu", torch.float64, 0.0),
                ("cpu_noisy", "cpu", torch.float32, 0.5),
                ("cuda_noisy", b.gdev, torch.float32, 0.5),
            ):
                net = algos.make_network(cfg, torch.Generator().manual_seed(7)).to(dev, dt)
                if ghost:
                    model = GradSampleModuleFastGradientClipping(
                        net, batch_first=True, loss_reduction="sum", max_grad_norm=clip
                    )
                    base = DPOptimizerFastGradientClipping
                else:
                    model = GradSampleModule(net, batch_first=True, loss_reduction="sum")
                    base = DPOptimizer
                cls = privacy.cpu_noise_optimizer(base) if tag.startswith("cuda") else base
                opt = cls(
                    torch.optim.Adam(net.parameters(), lr=1e-3),
                    noise_multiplier=nm,
                    max_grad_norm=clip,
                    expected_batch_size=bsz,
                    loss_reduction="mean",
                    generator=torch.Generator().manual_seed(11),
                )
                st = torch.as_tensor(s, dtype=dt, device=dev)
                at = torch.as_tensor(a, device=dev).unsqueeze(1)
                yt = torch.as_tensor(y, dtype=dt, device=dev)
                per = (model(st).gather(1, at).squeeze(1) - yt) ** 2
                params = [p for p in net.parameters()]
                if ghost:
                    algos._ghost_backward(model, per, params)
                else:
                    per.sum().backward()
                opt.step()
                got[tag] = torch.cat([p.grad.detach().reshape(-1).cpu().double() for p in params])
            n = 4 + 1 + 2 * (hidden + 1) + 2 + 2 * hidden + bsz + 16  # fwd + bwd + norm + sum
            e_cpu = float((got["cpu"] - got["ref"]).abs().max())
            e_cuda = float((got["cuda"] - got["ref"]).abs().max())
            tol = max(4 * e_cpu, 2 * gamma(n) * clip) + U32 * float(got["ref"].abs().max())
            # the noise: drawn on the CPU generator on both devices, so the same numbers
            n_cpu = got["cpu_noisy"] - got["cpu"]
            n_cuda = got["cuda_noisy"] - got["cuda"]
            e_noise = float((n_cpu - n_cuda).abs().max())
            tol_noise = 4 * U32 * float(got["cpu_noisy"].abs().max() + got["cpu"].abs().max())
            tag = f"{'ghost' if ghost else 'materialize'}-h{hidden}-b{bsz}"
            checks.append(
                b.check(
                    f"dpsgd-update-{tag}",
                    e_cuda <= tol,
                    f"clipped mean gradient: max |cuda-ref| {e_cuda:.3g}, |cpu-ref| "
                    f"{e_cpu:.3g}, bound {tol:.3g}",
                )
                | {"err_cuda": e_cuda, "err_cpu": e_cpu, "bound": tol}
            )
            checks.append(
                b.check(
                    f"dpsgd-noise-{tag}",
                    e_noise <= tol_noise and float(n_cpu.abs().max()) > 0,
                    f"noise cpu vs cuda: max diff {e_noise:.3g} (rounding bound {tol_noise:.3g}),"
                    f" noise scale {float(n_cpu.abs().max()):.3g}",
                )
                | {"err_noise": e_noise, "bound": tol_noise}
            )
    return {"checks": checks}


def _rel(a: Any, c: Any) -> float:
    import numpy as np

    a, c = np.asarray(a, dtype=np.float64), np.asarray(c, dtype=np.float64)
    if a.shape != c.shape:
        return math.inf
    scale = max(float(np.abs(a).max(initial=0.0)), 1e-30)
    return float(np.abs(a - c).max(initial=0.0)) / scale


def _runs_close(b: Bench) -> dict[str, Any]:
    """Short whole runs with random actions (same episodes on both devices)."""
    from ldp_audit.training.dprl import config, trainer
    from ldp_audit.training.fedrl import exchange as FX
    from ldp_audit.training.fedrl import runs as FR
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.runs import run_fedrl

    q = b.args.quick
    checks = []
    cfg = dict(size=8, n_maps=200, train_steps=20 if q else 120, n_envs=8, batch_size=16,
               learning_starts=16, eval_maps=2, target_update=10, eps_start=1.0, eps_end=1.0,
               clip_outputs=2.0, sigma=0.5, runs=2)  # fmt: skip
    got = {}
    for key, dev in (("cpu", "cpu"), ("cuda", b.gdev)):
        r = run_fedrl(FedRLConfig(**cfg, device=dev), seed=3, record=True)
        tr, _ = FR.log_arrays(r["log"])
        # greedy evaluation differs by design; compare what training released and learned
        n_train = int((tr["q_kind"] <= FX.KIND_NEXT).sum())
        got[key] = (tr, r["results"], n_train)
    (tc, rc, nc), (tg, rg, ng) = got["cpu"], got["cuda"]
    sel_c, sel_g = tc["q_kind"] <= FX.KIND_NEXT, tg["q_kind"] <= FX.KIND_NEXT
    d_q = _rel(tc["q_report"][sel_c], tg["q_report"][sel_g])
    d_y = _rel(tc["y_report"], tg["y_report"])
    d_w = max(
        _rel(x["state"][net][p], y["state"][net][p])
        for x, y in zip(rc, rg, strict=True)
        for net in x["state"]
        for p in x["state"][net]
    )
    ok = nc == ng and max(d_q, d_y, d_w) <= 1e-3
    checks.append(
        b.check(
            "fedrl-run",
            ok,
            f"{nc} vs {ng} training rows; relative max diff: released Q {d_q:.3g}, Y {d_y:.3g}, "
            f"final weights {d_w:.3g} (<= 1e-3)",
        )
        | {"q": d_q, "y": d_y, "weights": d_w}
    )
    for per_sample in ("ghost", "materialize"):
        kw = dict(algo="dqn", privacy="dpsgd", total_steps=300 if q else 800,
                  learning_starts=100, buffer_size=500, batch_size=32, train_frequency=2,
                  hidden=64, canaries=4, start_e=1.0, end_e=1.0, noise_multiplier=0.5,
                  store_updates=True, per_sample=per_sample)  # fmt: skip
        res = {
            k: trainer.train(config.DprlConfig(**kw, device=d), seed=1)
            for k, d in (("cpu", "cpu"), ("cuda", b.gdev))
        }
        c, g = res["cpu"], res["cuda"]
        d_u = _rel(c.transcript["update"], g.transcript["update"])
        d_p = _rel(c.transcript["canary_projection"], g.transcript["canary_projection"])
        d_w = _rel(c.params, g.params)
        same = c.returns == g.returns and c.updates == g.updates
        checks.append(
            b.check(
                f"dpsgd-dqn-run-{per_sample}",
                same and max(d_u, d_p, d_w) <= 1e-3,
                f"{c.updates} updates, same episodes: {same}; relative max diff: updates "
                f"{d_u:.3g}, canary projections {d_p:.3g}, final weights {d_w:.3g} (<= 1e-3)",
            )
            | {"updates": d_u, "canary_projection": d_p, "weights": d_w}
        )
    return {"checks": checks}


# ----------------------------------------------------------------------------------------------
# 2. speed
# ----------------------------------------------------------------------------------------------


def _fedrl_speed(b: Bench) -> dict[str, Any]:
    import torch

    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.gridworld import generate_maps
    from ldp_audit.training.fedrl.runs import run_fedrl

    q = b.args.quick
    cores = os.cpu_count() or 1
    configs = (
        [dict(size=8, n_envs=8, batch_size=16, runs=1, steps=12),
         dict(size=8, n_envs=8, batch_size=64, runs=2, steps=12)]
        if q else
        [dict(size=8, n_envs=16, batch_size=32, runs=1, steps=200),
         dict(size=8, n_envs=16, batch_size=32, runs=5, steps=150),
         dict(size=8, n_envs=64, batch_size=256, runs=5, steps=100),
         dict(size=16, n_envs=64, batch_size=256, runs=5, steps=60)]
    )  # fmt: skip
    threads = [1] if q or cores == 1 else [1, cores]
    rows = []
    maps_by_size: dict[int, Any] = {}
    if b.cuda:  # CUDA context, cuBLAS handles: not timed
        warm = FedRLConfig(size=8, n_maps=100, n_envs=4, batch_size=8, learning_starts=8,
                             train_steps=5, eval_maps=1, methods=("fedrl",),
                             device="cuda")  # fmt: skip
        run_fedrl(warm, seed=0, record=False)
    for c in configs:
        if b.left() < 30:
            rows.append({**c, "status": "skipped: time"})
            continue
        size = c["size"]
        if size not in maps_by_size:
            maps_by_size[size] = generate_maps(size, 200, density=0.2, seed=0)
        row: dict[str, Any] = dict(c, method="fedrl")
        runs_on = [("cpu", t) for t in threads] + ([("cuda", 1)] if b.cuda else [])
        for dev, th in runs_on:
            cfg = FedRLConfig(size=size, n_maps=200, n_envs=c["n_envs"],
                                batch_size=c["batch_size"], learning_starts=c["batch_size"],
                                train_steps=c["steps"], eval_maps=2, runs=c["runs"],
                                methods=("fedrl",), device=dev)  # fmt: skip
            t = time.perf_counter()
            r = run_fedrl(cfg, seed=0, maps=maps_by_size[size], record=False, threads=th)
            wall = time.perf_counter() - t
            per = r["results"][0]["train_seconds"] / c["steps"]
            key = f"{dev}_t{th}" if dev == "cpu" else "cuda"
            row[f"{key}_s_per_iteration"] = per
            row[f"{key}_wall_s"] = wall
            b.say(f"  fedrl {c} {key}: {1e3 * per:.2f} ms / iteration")
        if b.cuda:
            for th in threads:
                row[f"speedup_cuda_vs_cpu_t{th}"] = (
                    row[f"cpu_t{th}_s_per_iteration"] / row["cuda_s_per_iteration"]
                )
        rows.append(row)
        b.partial("fedrl_speed", row)
    torch.set_num_threads(1)
    return {
        "unit": "seconds per training iteration (every map steps once, one minibatch update "
        "of every batched run), the trainer's own train_seconds / train_steps",
        "rows": rows,
    }


def _dp_update(model: Any, opt: Any, s: Any, a: Any, y: Any, params: Any, ghost: bool) -> None:
    """One DP-SGD update of the DQN loss on the batch (s, a, y), as the trainer does it."""
    from ldp_audit.training.dprl import algos

    opt.zero_grad()
    per = (model(s).gather(1, a).squeeze(1) - y) ** 2
    if ghost:
        algos._ghost_backward(model, per, params)
    else:
        per.sum().backward()
    opt.step()


def _dpsgd_speed(b: Bench) -> dict[str, Any]:
    import numpy as np
    import torch
    from opacus import GradSampleModule
    from opacus.grad_sample import GradSampleModuleFastGradientClipping
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping

    from ldp_audit.training.dprl import algos, config, privacy, trainer

    algos.quiet_opacus_warnings()
    q = b.args.quick
    cores = os.cpu_count() or 1
    n_upd = 5 if q else 30
    rows = []
    for ghost in (True, False):
        grid = [(16, 32)] if q else [(128, 128), (128, 1024), (512, 1024)]
        if ghost and not q:
            grid.append((512, 8192))  # per-sample gradients of this one would take 8.6 GB
        for hidden, bsz in grid:
            if b.left() < 20:
                rows.append({"hidden": hidden, "batch": bsz, "status": "skipped: time"})
                continue
            row: dict[str, Any] = {"per_sample": "ghost" if ghost else "materialize",
                                   "hidden": hidden, "batch": bsz}  # fmt: skip
            for dev in b.devices:
                ths = [1, cores] if dev == "cpu" and not q and cores > 1 else [1]
                for th in ths:
                    torch.set_num_threads(th)
                    cfg = config.DprlConfig(algo="dqn", hidden=hidden)
                    net = algos.make_network(cfg, torch.Generator().manual_seed(0)).to(dev)
                    if ghost:
                        model = GradSampleModuleFastGradientClipping(
                            net, batch_first=True, loss_reduction="sum", max_grad_norm=1.0
                        )
                        base = DPOptimizerFastGradientClipping
                    else:
                        model = GradSampleModule(net, batch_first=True, loss_reduction="sum")
                        base = DPOptimizer
                    opt = (privacy.cpu_noise_optimizer(base) if dev != "cpu" else base)(
                        torch.optim.Adam(net.parameters(), lr=1e-3),
                        noise_multiplier=1.0,
                        max_grad_norm=1.0,
                        expected_batch_size=bsz,
                        loss_reduction="mean",
                        generator=torch.Generator().manual_seed(1),
                    )
                    rng = np.random.default_rng(0)
                    s = torch.as_tensor(rng.normal(0, 1, (bsz, 4)), dtype=torch.float32,
                                        device=dev)  # fmt: skip
                    a = torch.as_tensor(rng.integers(0, 2, bsz), device=dev).unsqueeze(1)
                    y = torch.as_tensor(rng.normal(0, 1, bsz), dtype=torch.float32, device=dev)
                    params = list(net.parameters())
                    for _ in range(2):
                        _dp_update(model, opt, s, a, y, params, ghost)
                    _sync(dev)
                    t = time.perf_counter()
                    _dp_update(model, opt, s, a, y, params, ghost)
                    _sync(dev)
                    # about 2 s of timed updates (3 to n_upd of them)
                    n = max(3, min(n_upd, int(2.0 / max(time.perf_counter() - t, 1e-6))))
                    t = time.perf_counter()
                    for _ in range(n):
                        _dp_update(model, opt, s, a, y, params, ghost)
                    _sync(dev)
                    per_u = (time.perf_counter() - t) / n
                    key = f"{dev}_t{th}" if dev == "cpu" else "cuda"
                    row[f"{key}_s_per_update"] = per_u
                    row[f"{key}_updates_timed"] = n
                    b.say(f"  dpsgd {row['per_sample']} h{hidden} b{bsz} {key}: "
                          f"{1e3 * per_u:.2f} ms / update")  # fmt: skip
            torch.set_num_threads(1)
            if b.cuda:
                row["speedup_cuda_vs_cpu_t1"] = (
                    row["cpu_t1_s_per_update"] / row["cuda_s_per_update"]
                )
            rows.append(row)
            b.partial("dpsgd_speed", row)
    # whole runs: environment, replay, ledger and all
    runs = []
    cases = [
        ("dqn-ghost", dict(algo="dqn", privacy="dpsgd", total_steps=400 if q else 2000,
                           learning_starts=200, hidden=128, batch_size=128, canaries=8)),
        ("reinforce-materialize", dict(algo="reinforce", privacy="dpsgd",
                                       episodes=16 if q else 96, num_envs=8, hidden=128,
                                       canaries=8)),
    ]  # fmt: skip
    for name, kw in cases:
        if b.left() < 30:
            runs.append({"case": name, "status": "skipped: time"})
            continue
        row = {"case": name, **kw}
        for dev in b.devices:
            r = trainer.train(config.DprlConfig(**kw, device=dev), seed=0)
            row[f"{dev}_s_per_update"] = r.seconds / max(1, r.updates)
            row[f"{dev}_updates"] = r.updates
            b.say(f"  run {name} {dev}: {r.updates} updates, {r.seconds:.1f} s, "
                  f"{1e3 * r.seconds / max(1, r.updates):.2f} ms / update")  # fmt: skip
        if b.cuda:
            row["speedup_cuda_vs_cpu"] = row["cpu_s_per_update"] / row["cuda_s_per_update"]
        runs.append(row)
        b.partial("dpsgd_speed", row)
    return {
        "unit": "seconds per DP-SGD update; compute: forward, per-sample clipping, noise and "
        "Adam on a random batch (CPU at 1 thread and every core); runs: the trainer's seconds "
        "/ updates with environment, replay and ledger (1 thread)",
        "compute": rows,
        "runs": runs,
    }


# ----------------------------------------------------------------------------------------------
# 3. FedRL Table 1 at a larger scale on the GPU
# ----------------------------------------------------------------------------------------------


def _table1(b: Bench) -> dict[str, Any]:
    from ldp_audit.training.fedrl import metrics as FM
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.fedrl.gridworld import generate_maps
    from ldp_audit.training.fedrl.runs import run_fedrl

    speed = b.doc["stages"].get("fedrl_speed", {}).get("rows", [])
    per_it = next(
        (r.get("cuda_s_per_iteration") for r in speed
         if r.get("runs") == 5 and r.get("batch_size") == 32 and r.get("size") == 8),
        None,
    )  # fmt: skip
    if per_it is None:
        return {"status": "skipped: no CUDA timing of the 8x8, 5-run configuration"}
    maps = generate_maps(8, 8000, density=0.2, seed=0)
    eval_s = 30.0  # 800 test maps x 38 steps x 3 methods, batched, with a margin
    usable = b.left() - 45 - eval_s
    steps = int(min(32_000, usable / (3 * per_it * 1.15)) // 1000 * 1000)
    if steps < 4000:
        return {"status": f"skipped: {b.left():.0f} s left allow {steps} iterations (< 4000)"}
    # the committed reproduction's settings (training/fedrl/reproduce.py), longer training
    cfg = FedRLConfig(size=8, n_maps=8000, map_seed=0, sigma=1.0, train_steps=steps,
                        n_envs=16, eval_maps=800, runs=5, device="cuda")  # fmt: skip
    b.say(f"  Table 1 on cuda: 8x8, 5 runs per method, {steps} iterations")
    t = time.perf_counter()
    r = run_fedrl(cfg, seed=8000, maps=maps, record=False)
    secs = time.perf_counter() - t
    m = FM.table_metrics(cfg, r["results"])
    table = {
        k: {"succ_rate": v["succ_rate"], "succ_rate_ci": v["succ_rate_ci"],
            "per_run_succ_rate": v["per_run_succ_rate"], "avg_reward": v["avg_reward"]}
        for k, v in m["table"].items()
    }  # fmt: skip
    for k, v in table.items():
        b.say(f"  {k:9s} SuccRate {100 * v['succ_rate']:5.1f} % (runs: "
              + ", ".join(f"{100 * x:.1f}" for x in v["per_run_succ_rate"]) + ")")  # fmt: skip
    curves = {f"{x['method']}/{x['trial']}": x["curve_success"] for x in r["results"]}
    return {"config": cfg.to_dict(), "seconds": secs, "table": table, "curves": curves,
            "curve_every": r["results"][0]["curve_every"]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a CPU smoke run)")
    ap.add_argument("--budget-s", type=float, default=400.0, help="time budget in seconds")
    ap.add_argument(
        "--out",
        default=str(ROOT / "benchmarks" / "results" / "gpu_check.json"),
        help="the JSON to write (default: the committed benchmarks/results/gpu_check.json, "
        "never replaced without --overwrite)",
    )
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    ap.add_argument("--probe", action="store_true", help="print what this Python has, exit")
    ap.add_argument("--no-table1", action="store_true", help="skip the Table 1 run")
    ap.add_argument(
        "--self-test",
        action="store_true",
        help="run only the closeness checks with the CPU standing in for CUDA (tests the "
        "script without a GPU; every difference must be zero-ish)",
    )
    args = ap.parse_args(argv)
    if not args.probe and Path(args.out).exists() and not args.overwrite:  # before any work
        ap.error(
            f"--out {args.out} exists (committed results are evidence): pass another --out, "
            "or --overwrite to replace it"
        )
    if args.probe:
        print(json.dumps(probe(), indent=1))
        return 0
    b = Bench(args)
    p = b.doc["probe"]
    for k in ("python", "executable", "cpu_model", "cpu_count", "nvidia_smi", "torch",
              "torch_cuda_build", "cuda_available",
              "cuda_device", "opacus", "gymnasium", "dp_accounting", "ldp_audit"):  # fmt: skip
        print(f"  {k}: {p.get(k)}")
    if p.get("ldp_audit") != "ok":
        b.doc["failures"].append(f"ldp_audit: {p.get('ldp_audit')}")
        b.write()
        return 1
    import torch

    torch.set_num_threads(1)
    if not b.cuda:
        print("  NO CUDA: torch here sees no GPU; measuring the CPU only", flush=True)
    b.stage("close_networks", lambda: _net_close(b), needs_cuda=True)
    b.stage("close_dpsgd_update", lambda: _dpsgd_close(b), needs_cuda=True)
    b.stage("close_runs", lambda: _runs_close(b), needs_cuda=True, min_s=40)
    if args.self_test:
        b.write()
        print(json.dumps({"failures": b.doc["failures"], "out": args.out}), flush=True)
        return 1 if b.doc["failures"] else 0
    b.stage("fedrl_speed", lambda: _fedrl_speed(b), min_s=30)
    b.stage("dpsgd_speed", lambda: _dpsgd_speed(b), min_s=30)
    if not (args.quick or args.no_table1):
        b.stage("fedrl_table1", lambda: _table1(b), needs_cuda=True, min_s=120)
    b.write()
    print(json.dumps({"failures": b.doc["failures"], "out": args.out}), flush=True)
    return 1 if b.doc["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
