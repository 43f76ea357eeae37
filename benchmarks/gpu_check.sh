#!/usr/bin/env bash
# FedRL and DP-SGD RL on a GPU against the CPU, in one run of under 8 minutes (issue 29).
#
# Run from the repository root on a machine with one GPU and no network:
#     bash benchmarks/gpu_check.sh            # GPU_CHECK_QUICK=1 or --quick: a CPU smoke run
# It finds a Python whose torch sees CUDA (the system python3 first, then .venv), installs the
# pure-Python packages the trainers need from the wheels in .whl/ if that Python lacks them
# (pip --no-index: nothing is downloaded), prints what it found (nvidia-smi, Python, torch, CUDA)
# and runs benchmarks/bench_gpu.py, which prints every measurement and writes
# "${OUT:-benchmarks/results}/gpu_check.json". Without a CUDA torch it says so and measures the
# CPU only. Exit status: 0 when every check passed (or was skipped for lack of a GPU or time),
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
OUTDIR=${OUT:-benchmarks/results}
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

# --- the measurements ------------------------------------------------------------------
USED=$(( $(date +%s) - T0 ))
BUDGET=$(( TOTAL_S - USED - 25 ))   # bench_gpu.py's own budget; it stops stages in time
if [ "$BUDGET" -lt 60 ]; then BUDGET=60; fi
ARGS=(--budget-s "$BUDGET" --out "$OUTDIR/gpu_check.json")
if [ "$QUICK" = "1" ]; then ARGS+=(--quick); fi
export GPU_CHECK_ENV="python=$PY cuda_python=${PY_CUDA:-none} candidates=${SEEN# }"
echo "== $PY benchmarks/bench_gpu.py ${ARGS[*]}"
timeout $(( BUDGET + 20 )) "$PY" -u benchmarks/bench_gpu.py "${ARGS[@]}"
rc=$?
if [ $rc -eq 124 ]; then
    echo "gpu_check.sh: bench_gpu.py ran past its budget and was stopped; the stages finished"
    echo "so far are in $OUTDIR/gpu_check.json"
fi
echo "== done in $(( $(date +%s) - T0 )) s, exit $rc; results: $OUTDIR/gpu_check.json"
exit $rc
