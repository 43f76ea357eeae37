# The two commands a new user needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CORE_STAMP := $(VENV)/.installed-core
TORCH ?= torch==2.13.0+cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
WHEELS ?= /opt/wheels

.PHONY: demo test lint install reports reproduce reproduce-dprl reproduce-fedrl reproduce-fedrl-16 reproduce-frd bench clean docs

# Two stamps: the demo needs only the core (torch CPU + the package's own dependencies); the
# test suite, the docs, Ray and Flower are extras that `make test` adds on top.
$(CORE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU torch build first (local version +cpu), so nothing below pulls a multi-GB CUDA
	# build: from a local wheel folder if it has one, else from the CPU wheel index.
	$(BIN)/python -m pip install -q --find-links $(WHEELS) "$(TORCH)" \
		|| $(BIN)/python -m pip install -q "$(TORCH)" --extra-index-url $(TORCH_INDEX)
	$(BIN)/python -m pip install -q -e .
	touch $(CORE_STAMP)

$(STAMP): $(CORE_STAMP)
	$(BIN)/python -m pip install -q -e ".[test,docs,ray,flower]"
	touch $(STAMP)

install: $(STAMP)

# The demo's verdict is a real finding (the paper's float Laplace leaks through its bits), so
# exit 1 ("violation found") is the expected outcome; 2 (input error) or 3 (bug) fail make.
demo: $(CORE_STAMP)
	$(BIN)/ldp-audit demo || test $$? -eq 1

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/check_private_imports.py

# Two pytest-xdist workers (the 2-core machine the suite is sized for), work-stealing: an idle
# worker takes queued tests from the busy one at the end of the run. 2026-12-07 (session 56),
# fresh clone on the 2-core machine: 4,016 tests in 584 s and 644 s (two runs, 19:40 and 19:57 UTC)
# of pytest with --dist worksteal, 639 s with the default scheduling (706 s / 769 s wall with the venv build); stop 55's 3,972 tests took
# 732 s there the same afternoon (its CI: 887 s). Three workers: 636 s against two's 606 s in the
# warm checkout. (`python -m pytest` alone still runs the same tests serially.)
#
# `env -u PYTHONDONTWRITEBYTECODE`: a machine that sets it (this one does) makes every process
# the suite starts, each worker's collection and each CLI or documented block run in a
# subprocess, compile the project's modules from source again; collecting the suite took 17.9
# CPU-s without the bytecode cache and 10.1-10.5 with it (session 57, loaded machine).
# One BLAS / OpenMP thread per process: two workers on two cores, each with torch's and
# OpenBLAS's two threads, oversubscribe the cores. test_opacus_coverage + test_one_run_noise +
# test_audit (101 tests, -n 2, alternating, load average 9-12 from other work, session 57):
# 546 s / 367 s wall, 152 / 138 user CPU-s with the default threads; 315 s / 317 s, 117 / 132
# with one. With the three changes (and the Flower runs started first, Ray's files last), a fresh
# clone's `make test`, quiet machine, 2026-12-07 22:01 and 22:34 UTC: 4,060 / 4,062 tests in 499 s /
# 514 s of pytest, 595 s / 616 s wall with the venv build (the same machine that morning, before:
# 567.7 s of pytest in the warm checkout; stop 56's fresh clones 584-644 s, 706-773 s wall).
TEST_ENV := env -u PYTHONDONTWRITEBYTECODE OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
test: $(STAMP) lint
	-bash scripts/ensure_chromium.sh
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist worksteal

# The committed reports/pgc-a3c/: the paper's scale (10 settings x 20 trials x 90,000
# submissions; a trial stops once its FST is known), Figure 2 from separate full-length runs of
# 20 trials x 90,000, spread over the CPU cores (results do not depend on the worker count).
reproduce: $(STAMP)
	$(BIN)/ldp-audit reproduce pgc-a3c --trials 20 --max-submissions 90000 --seed 0 \
		--out reports/pgc-a3c --overwrite

# The committed reports of the other systems (each states its scale and wall time in its README).
# DP-SGD RL (issue 29): DQN preset 'solves' at 100,000 steps, the DP-SGD grid with clip-only and
# sigma 0.01 / 0.03; about 3,500 CPU-s. --cache keeps every finished run: the same command
# resumes after an interruption and, with every run cached, writes the report in about a minute.
reproduce-dprl: $(STAMP)
	$(BIN)/ldp-audit reproduce dprl --seeds 3 --episodes 600 --total-steps 100000 \
		--noise-multiplier 0 0.01 0.03 0.1 1 --clip-only --obs-noise 0 0.1 1 --audit-canaries 500 \
		--workers 2 --cache runs/dprl-cache --out reports/dprl --overwrite --no-progress

# FedRL: every (method, run) of Table 1 is its own task (20 at 8x8), one worker each
# (--threads 1 each); the committed report took 5 min 24 s wall, 58 CPU-min, on 16 cores with
# 20 workers (2026-11-26). The size check estimates 11.3 GiB (20 processes of one Table 1 run
# or attack run each, and the PLD of 4 clipped attack runs; it counted five runs and a
# transcript Table 1 never keeps, 92.5 GiB, and needed --force): 23 GiB of memory pass it.
# Fewer on a machine with under 5 cores: `--workers` above 4 x the cores is refused (results do
# not depend on the worker count).
FEDRL_WORKERS ?= $(shell (nproc 2>/dev/null || getconf _NPROCESSORS_ONLN) | awk '{print ($$1 * 4 < 20) ? $$1 * 4 : 20}')
reproduce-fedrl: $(STAMP)
	$(BIN)/ldp-audit reproduce fedrl --out reports/fedrl --overwrite --sizes 8 --runs 5 \
		--train-steps 32000 --hist-lens --attack-steps 250 --explore-eps 0.05 0.1 0.2 \
		--curve-points 8 --curve-maps 200 --workers $(FEDRL_WORKERS) --threads 1 \
		--no-progress

# FedRL Table 1 at 16x16 (issue 29; Table 1 only: no attack sweep or audit): 15 tasks; the
# committed reports/fedrl-16 took 65 min wall, 2,642 CPU-s (/usr/bin/time) with 2 workers at
# nice 19 on the shared 2-core machine (2026-11-27); estimated 6 min on 16 cores (FEDRL16_WORKERS=15).
FEDRL16_WORKERS ?= 2
reproduce-fedrl-16: $(STAMP)
	$(BIN)/ldp-audit reproduce fedrl --out reports/fedrl-16 --overwrite --sizes 16 --runs 5 \
		--train-steps 32000 --hist-lens --attack-sigmas --audit-samples 0 \
		--explore-eps 0.05 0.1 0.2 --curve-points 8 --curve-maps 200 \
		--workers $(FEDRL16_WORKERS) --threads 1 --no-progress

# Rebuild the committed reproduction reports' README.md (and tables.md) from their committed
# results.json and notes.md with today's writers: nothing is rerun, no figure redrawn
# (tests/test_committed_reports.py fails when a committed page is stale).
reports: $(STAMP)
	$(BIN)/python -m ldp_audit.training.committed_reports

reproduce-frd: $(STAMP)
	$(BIN)/ldp-audit reproduce frd --out reports/frd --overwrite --workers 2 --agents 1,2,4 --groups 30 \
		--max-episodes 250

# The documentation site (site/), strict: broken links and missing references fail.
docs: $(STAMP)
	$(BIN)/python scripts/gen_cli_docs.py
	$(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_mechanisms.py
	$(BIN)/python benchmarks/bench_audit.py
	$(BIN)/python benchmarks/bench_accountant.py
	$(BIN)/python benchmarks/bench_pgc.py
	$(BIN)/python benchmarks/bench_attacks.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info site
