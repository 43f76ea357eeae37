"""Power and false alarms of the Opacus one-run audit (issue 26; docs/opacus.md "Power").

On the audit configuration of ``tests/opacus_loop.py`` (256 records, an MLP of 4,258 parameters,
Poisson rate 1/16, sigma 1, C 1, 80 updates), every trainer of ``tests/broken_opacus.py`` and
the correct ``DPOptimizer`` run on ``--seeds`` seeds (disjoint from the tests' seeds 0-20) at
each canary count of ``--canaries``, the audit at 95 % confidence. Per (trainer, canary count):
how often the verdict is a violation (white-box; black-box beside it) with its Clopper-Pearson
95 % interval, how often each test flagged, and the perfect-attacker ceiling of the (eps, delta)
bound with the canary count a refutation of the claim by that bound would need. Each run's
record is appended to ``--out`` as it finishes (JSON lines), so a stopped run keeps what it
measured; the summary is written to ``--summary``.

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/opacus_audit_power.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from opacus.optimizers import DPOptimizer
from scipy.stats import beta as beta_dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.broken_opacus import BROKEN  # noqa: E402
from tests.opacus_loop import audited_run  # noqa: E402

warnings.filterwarnings("ignore")

TRAINERS: dict[str, tuple[type, str | None, dict]] = {
    "correct DPOptimizer": (DPOptimizer, None, {}),
    **{name: (cls, test, {}) for name, (cls, test) in BROKEN.items()},
    "fixed-size shuffled batches (audited as Poisson at B / N)": (
        DPOptimizer,
        "sampling",
        {"poisson": False},
    ),
}


def clopper_pearson(k: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    a = (1 - conf) / 2
    lo = 0.0 if k == 0 else float(beta_dist.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta_dist.ppf(1 - a, k + 1, n - k))
    return lo, hi


def one(name: str, seed: int, canaries: int) -> dict:
    cls, expected, kw = TRAINERS[name]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.process_time()
        res = audited_run(Path(tmp) / "run", seed, optimizer_class=cls, canaries=canaries, **kw)
        cpu = time.process_time() - t0
    ex = res.extra
    bb = ex.get("black_box") or {}
    return {
        "trainer": name,
        "expected_test": expected,
        "seed": seed,
        "canaries": canaries,
        "violation": bool(res.violation),
        "flagged_by": ex["flagged_by"],
        "decided_by": ex["decided_by"],
        "p_values": {k: (t or {}).get("p_value") for k, t in ex["tests"].items()},
        "eps_lower_bound": res.epsilon_lower_bound,
        "eps_lower_bound_black": bb.get("epsilon_lower_bound"),
        "black_violation": bb.get("violation"),
        "claimed_epsilon": res.composed_epsilon,
        "steinke_ceiling": ex["steinke_ceiling"],
        "canaries_to_refute": ex["canaries_to_refute"],
        "cpu_seconds": cpu,
    }


def summarise(records: list[dict]) -> list[dict]:
    rows = []
    keys = sorted({(r["trainer"], r["canaries"]) for r in records}, key=lambda k: (k[1], k[0]))
    for name, m in keys:
        rs = [r for r in records if r["trainer"] == name and r["canaries"] == m]
        n = len(rs)
        k = sum(r["violation"] for r in rs)
        kb = sum(bool(r["black_violation"]) for r in rs)
        tests: dict[str, int] = {}
        for r in rs:
            for t in r["flagged_by"]:
                tests[t] = tests.get(t, 0) + 1
        exp = rs[0]["expected_test"]
        rows.append(
            {
                "trainer": name,
                "canaries": m,
                "runs": n,
                "seeds": [min(r["seed"] for r in rs), max(r["seed"] for r in rs)],
                "flagged_white": k,
                "flagged_white_ci95": clopper_pearson(k, n),
                "flagged_black": kb,
                "flagged_by_test": tests,
                "expected_test": exp,
                "decided_by_expected": sum(r["decided_by"] == exp for r in rs) if exp else None,
                "steinke_ceiling": rs[0]["steinke_ceiling"],
                "claimed_epsilon_median": sorted(r["claimed_epsilon"] for r in rs)[n // 2],
                "canaries_to_refute": rs[0]["canaries_to_refute"],
                "cpu_seconds_per_run": sum(r["cpu_seconds"] for r in rs) / n,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20, help="runs per (trainer, canary count)")
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--canaries", default="500", help="comma-separated canary counts")
    ap.add_argument("--trainers", default="", help="comma-separated subset (default: all)")
    ap.add_argument("--out", default="benchmarks/results/opacus_audit_power.jsonl")
    ap.add_argument("--summary", default="benchmarks/results/opacus_audit_power.json")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    names = [t for t in a.trainers.split(",") if t] or list(TRAINERS)
    bad = [t for t in names if t not in TRAINERS]
    if bad:
        ap.error(f"unknown trainers {bad}; known: {list(TRAINERS)}")
    counts = [int(c) for c in a.canaries.split(",")]
    out = Path(a.out)
    done = set()
    records = []
    if out.exists():  # resume: keep what an earlier (stopped) run measured
        for line in out.read_text().splitlines():
            r = json.loads(line)
            records.append(r)
            done.add((r["trainer"], r["seed"], r["canaries"]))
    t0 = time.perf_counter()
    load0 = os.getloadavg()[0]
    with out.open("a") as f:
        for m in counts:  # seeds outermost: a stopped run has as many seeds of every trainer
            for seed in range(a.first_seed, a.first_seed + a.seeds):
                for name in names:
                    if (name, seed, m) in done:
                        continue
                    r = one(name, seed, m)
                    records.append(r)
                    f.write(json.dumps(r) + "\n")
                    f.flush()
                    print(f"{m} {name} seed {seed}: {r['violation']} {r['flagged_by']}",
                          file=sys.stderr)  # fmt: skip
    cmd = (
        "OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/opacus_audit_power.py "
        + " ".join(repr(x) if " " in x else x for x in (argv if argv is not None else sys.argv[1:]))
    )
    summary = Path(a.summary)
    before = json.loads(summary.read_text()).get("commands", []) if summary.exists() else []
    doc = {
        "commands": before + [cmd],  # every invocation that added to --out
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch threads 1",
        "load_average_1min": [load0, os.getloadavg()[0]],
        "wall_seconds_last_invocation": time.perf_counter() - t0,
        "confidence": 0.95,
        "rows": summarise(records),
    }
    Path(a.summary).write_text(json.dumps(doc, indent=1))
    for row in doc["rows"]:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
