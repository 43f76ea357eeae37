#!/usr/bin/env bash
# FedRL, DP-SGD RL and FRD's distillation on a GPU against the CPU, in one run of under 8
# minutes (issue 29).
#
# Run from the repository root on a machine with one GPU and no network:
#     bash benchmarks/gpu_check.sh            # GPU_CHECK_QUICK=1 or --quick: a CPU smoke run
# It finds a Python whose torch sees CUDA (the system python3 first, then .venv), installs the
# pure-Python packages the trainers need from the wheels in .whl/ if that Python lacks them
# (pip --no-index: nothing is downloaded), prints what it found (nvidia-smi, Python, torch, CUDA)
# and runs benchmarks/bench_gpu.py, which prints every measurement and writes
# "${OUT:-runs/gpu_check}/gpu_check.json". Before it, a short FRD stage times one round of
# FRD's distillation (what FRD's --device moves) on both devices and checks they agree
# ("${OUT:-runs/gpu_check}/gpu_check_frd.json"). Without a CUDA torch it says so and
# measures the CPU only. Exit status: 0 when every check passed (or was skipped for lack of a GPU or time),
# 1 when a closeness check failed, a stage broke, or no usable Python was found.
set -u
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s)
TOTAL_S=${GPU_CHECK_TOTAL_S:-470}   # the whole script, start to end (< 8 minutes)
QUICK=${GPU_CHECK_QUICK:-0}
for a in "$@"; do
    case "$a" in
        --quick) QUICK=1 ;;
        *) echo "gpu_check.sh: unknown argument $a (only --quick)" >&2; exit 2 ;;
    esac
done
OUTDIR=${OUT:-runs/gpu_check}   # never the committed benchmarks/results/ (copy a kept run there)
mkdir -p "$OUTDIR" || exit 1
export PYTHONUNBUFFERED=1

echo "== gpu_check.sh $(date -u '+%Y-%m-%d %H:%M:%S') UTC on $(uname -srm), $(nproc) cores"
echo "   commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')  quick: $QUICK"
echo "== nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 60 nvidia-smi || echo "nvidia-smi failed (rc $?)"
else
    echo "nvidia-smi: not found (no NVIDIA driver here)"
fi

# --- which Python: the first whose torch sees CUDA; else the first with torch -------------
echo "== Pythons"
CANDS=()
for p in python3 /opt/torch/.venv/bin/python3 .venv/bin/python python; do
    if command -v "$p" >/dev/null 2>&1; then CANDS+=("$(command -v "$p")"); fi
done
PY_CUDA=""
PY_TORCH=""
SEEN=""
PROBE='import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda, torch.cuda.is_available())'
for p in "${CANDS[@]}"; do
    case " $SEEN " in *" $p "*) continue ;; esac
    SEEN="$SEEN $p"
    info=$(timeout 120 "$p" -c "$PROBE" 2>&1 | tail -1)
    rc=$?
    echo "   $p: python torch cuda-build cuda-available = $info"
    if [ $rc -eq 0 ] && [ -n "$info" ] && [ "${info##* }" = "True" ] && [ -z "$PY_CUDA" ]; then
        PY_CUDA=$p
    fi
    if [ $rc -eq 0 ] && { [ "${info##* }" = "True" ] || [ "${info##* }" = "False" ]; } \
        && [ -z "$PY_TORCH" ]; then
        PY_TORCH=$p
    fi
done
if [ -n "$PY_CUDA" ]; then
    PY=$PY_CUDA
    echo "   using $PY (torch with CUDA): GPU against CPU in the same process"
elif [ -n "$PY_TORCH" ]; then
    PY=$PY_TORCH
    echo "   NO CUDA: no Python here has a torch that sees a GPU; using $PY for the CPU only"
else
    echo "   no Python with torch found: nothing can be measured" >&2
    exit 1
fi

# --- the trainers' pure-Python dependencies, from carried wheels (no network) -------------
NEED='import opacus, gymnasium, dp_accounting, scipy, numpy'
if ! "$PY" -c "$NEED" >/dev/null 2>&1; then
    echo "== $PY lacks some of opacus / gymnasium / dp_accounting:"
    "$PY" -c "$NEED" 2>&1 | tail -1
    if ls .whl/*.whl >/dev/null 2>&1; then
        SITE=/tmp/gpu_check_site
        for w in .whl/*.whl; do
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
                --upgrade --target "$SITE" "$w" >/dev/null 2>&1 \
                && echo "   installed $(basename "$w") into $SITE" \
                || echo "   could not install $(basename "$w") (skipped)"
        done
        export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    else
        echo "   no .whl/ folder of wheels to install from (carry .whl, see docs/benchmarks.md)"
    fi
    "$PY" -c "$NEED" 2>&1 | tail -1 | sed 's/^/   after install: /'
fi

# --- FRD (issue 29): one round's distillation on CUDA against the CPU -------------------
# FRD's --device moves only the distillation (eq. 2, its torch part: every agent of a group at
# once over the global proxy memory); the acting kernels (Numba) and every random draw stay on
# the CPU. This stage times one round of it (the rows copied to the device, one epoch of
# minibatches of 256, the rows copied back) on both devices from the same inputs and checks
# that they agree; with Numba and time left, a short FRD training per device (per-round
# distillation and whole-run time). Without CUDA it times the CPU only and says so. At most
# GPU_CHECK_FRD_S seconds (default 90); the time it takes comes out of bench_gpu.py's budget,
# which is computed after it. Writes "$OUTDIR/gpu_check_frd.json".
FRD_S=${GPU_CHECK_FRD_S:-90}
echo "== FRD: distillation per round, cpu against cuda ($PY, at most $FRD_S s)"
timeout "$FRD_S" "$PY" -u - "$OUTDIR/gpu_check_frd.json" "$QUICK" "$FRD_S" <<'PYEOF'
import importlib.util, json, os, statistics, sys, time, traceback
from pathlib import Path

out, quick, budget = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3])
t_start = time.perf_counter()
ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
import ldp_audit  # noqa: E402,F401  (this source tree; training/ is ldp_audit.training)

try:
    import ldp_audit.training  # noqa: F401
except ModuleNotFoundError:
    spec = importlib.util.spec_from_file_location(
        "ldp_audit.training", ROOT / "training" / "__init__.py",
        submodule_search_locations=[str(ROOT / "training")])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ldp_audit.training"] = mod
    spec.loader.exec_module(mod)
import numpy as np  # noqa: E402
import torch  # noqa: E402
from ldp_audit.training.frd.engine import distil_rows  # noqa: E402
from ldp_audit.training.frd.nets import Nets  # noqa: E402

cuda = torch.cuda.is_available()
doc = {"stage": "frd", "quick": quick, "torch": torch.__version__, "cuda": cuda,
       "device_name": torch.cuda.get_device_name(0) if cuda else None,
       "cpu_torch_threads": torch.get_num_threads(),
       "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
       "what": "seconds per round of the distillation: the group's rows (parameters, Adam "
               "state) and the proxy set copied to the device, one epoch of minibatches of "
               "256 (forward, softmax, hand-written backward, Adam), the rows copied back; "
               "median of reps; the same inputs on both devices",
       "cases": [], "runs": [], "failures": []}


def save():
    Path(out).write_text(json.dumps(doc, indent=1))


def left():
    return budget - 8 - (time.perf_counter() - t_start)


def one_round(dev, nets, X, T, perm):
    """One round as the engine does it (_Engine._distil): rows to the device and back."""
    d = torch.device(dev)
    if dev == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    flat = nets.flat.to(d, copy=True)  # the engine's rows are a copy too (b[idx])
    m, v = torch.zeros_like(flat), torch.zeros_like(flat)
    t = torch.zeros((flat.shape[0], 1), dtype=torch.float64, device=d)
    distil_rows(nets, flat, m, v, t, torch.from_numpy(X).to(d), torch.from_numpy(T).to(d),
                [torch.from_numpy(perm).to(d)], 256, 1e-3)
    back = flat.cpu()
    return time.perf_counter() - t0, back


cases = [(24, 2, 4, 4000), (100, 2, 4, 4000), (100, 2, 32, 20000), (100, 2, 128, 20000)]
if quick:
    cases = cases[:2]
reps = 1 if quick else 3
try:
    for hidden, layers, agents, n in cases:
        if left() < 20:
            doc["cases"].append({"case": [hidden, layers, agents, n], "status": "skipped: time"})
            continue
        rng = np.random.default_rng(0)
        nets = Nets(hidden, layers, agents, rng)
        lo, hi = np.array([-2.4, -3, -0.2095, -3.5]), np.array([2.4, 3, 0.2095, 3.5])
        X = rng.uniform(lo, hi, (n, 4)).astype(np.float32)
        pol = rng.uniform(size=n)
        T = np.stack([pol, 1 - pol], 1).astype(np.float32)
        perm = rng.permutation(n)
        row = {"hidden": hidden, "layers": layers, "agents": agents, "proxy_states": n}
        for dev in ("cpu", "cuda") if cuda else ("cpu",):
            if dev == "cuda":
                one_round(dev, nets, X, T, perm)  # warm-up: CUDA context, cuBLAS
            ts, res = [], None
            for _ in range(reps):
                s, res = one_round(dev, nets, X, T, perm)
                ts.append(s)
            row[f"{dev}_s_per_round"] = statistics.median(ts)
            row[f"{dev}_result"] = res
        if cuda:
            a, b = row.pop("cpu_result"), row.pop("cuda_result")
            diff = float((a - b).abs().max())
            scale = float(a.abs().max())
            row["max_abs_diff"], row["max_abs_param"] = diff, scale
            # coarse, as bench_gpu.py's whole-run checks: float32 rounding through Adam moves
            # parameters by far less than 1e-3 of their scale; a wrong tensor moves them by O(1)
            row["close"] = diff <= 1e-3 * max(scale, 1.0)
            row["speedup"] = row["cpu_s_per_round"] / row["cuda_s_per_round"]
            if not row["close"]:
                doc["failures"].append(f"case {hidden}x{layers}, {agents} agents, {n}: {diff}")
        else:
            row.pop("cpu_result")
            row["cuda"] = "skipped: torch.cuda.is_available() is False"
        doc["cases"].append(row)
        print("   " + json.dumps(row), flush=True)
        save()
    # a short FRD training per device: the acting kernels need Numba
    try:
        import numba  # noqa: F401
        have_numba = True
    except ImportError:
        have_numba = False
    if not cuda or quick or not have_numba:
        why = "no CUDA" if not cuda else ("quick" if quick else "no numba in this Python")
        doc["runs"] = f"skipped: {why}"
    else:
        from ldp_audit.training.frd import engine as E
        from ldp_audit.training.frd.config import setting_config
        from ldp_audit.training.frd.engine import train_many

        real, per = E._Engine._distil, {"s": 0.0, "n": 0}

        def timed(self, *a, **k):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            real(self, *a, **k)
            torch.cuda.synchronize()
            per["s"] += time.perf_counter() - t0
            per["n"] += 1

        E._Engine._distil = timed
        train_many([setting_config(2, n_agents=2, groups=1, max_episodes=2)], seed=0)  # JIT
        for dev in ("cpu", "cuda"):
            if left() < 25:
                doc["runs"].append({"device": dev, "status": "skipped: time"})
                continue
            cfg = setting_config(2, n_agents=4, groups=8, max_episodes=76,
                                 stop_at_mission=False, device=dev)
            per.update(s=0.0, n=0)
            t0 = time.perf_counter()
            res = train_many([cfg], seed=1)[0]
            run = {"device": dev, "setting": 2, "groups": 8, "agents": 4, "max_episodes": 76,
                   "wall_s": time.perf_counter() - t0, "rounds": per["n"],
                   "distil_s_per_round": per["s"] / max(per["n"], 1),
                   "proxy_states": res.memory_sizes}
            doc["runs"].append(run)
            print("   " + json.dumps(run), flush=True)
            save()
except Exception:
    doc["failures"].append(traceback.format_exc())
    traceback.print_exc()
doc["seconds"] = time.perf_counter() - t_start
save()
print(f"   FRD stage: {len(doc['failures'])} failure(s) in {doc['seconds']:.0f} s -> {out}")
sys.exit(1 if doc["failures"] else 0)
PYEOF
FRD_RC=$?
if [ $FRD_RC -eq 124 ]; then
    echo "FRD stage ran past $FRD_S s and was stopped; what it finished is in gpu_check_frd.json"
    FRD_RC=0
fi

# --- the measurements ------------------------------------------------------------------
USED=$(( $(date +%s) - T0 ))
BUDGET=$(( TOTAL_S - USED - 25 ))   # bench_gpu.py's own budget; it stops stages in time
if [ "$BUDGET" -lt 60 ]; then BUDGET=60; fi
ARGS=(--budget-s "$BUDGET" --out "$OUTDIR/gpu_check.json" --overwrite)
if [ "$QUICK" = "1" ]; then ARGS+=(--quick); fi
export GPU_CHECK_ENV="python=$PY cuda_python=${PY_CUDA:-none} candidates=${SEEN# }"
echo "== $PY benchmarks/bench_gpu.py ${ARGS[*]}"
timeout $(( BUDGET + 20 )) "$PY" -u benchmarks/bench_gpu.py "${ARGS[@]}"
rc=$?
if [ $rc -eq 124 ]; then
    echo "gpu_check.sh: bench_gpu.py ran past its budget and was stopped; the stages finished"
    echo "so far are in $OUTDIR/gpu_check.json"
fi
if [ $rc -eq 0 ] && [ $FRD_RC -ne 0 ]; then rc=$FRD_RC; fi  # an FRD check failed or broke
echo "== done in $(( $(date +%s) - T0 )) s, exit $rc; results: $OUTDIR/gpu_check.json"
exit $rc
