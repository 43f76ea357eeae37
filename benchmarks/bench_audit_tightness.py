"""Tightness of ``ldp_audit.audit`` where issue 40 found it weak, before and after the normal
tail model of the delta > 0 selection (``ldp_audit.audit.selection._NORMAL_TAIL``), against each
setting's tightness ceiling (``AuditResult.tightness_ceiling``: the bound at expected counts of
the best event of a mechanism exactly at its claim; for a Gaussian its own G_mu curve).

Settings (one pair, +-1, so L2 sensitivity 2): correct Gaussians at (1, 1e-3), sigma 2 at
delta 1e-2 / 1e-3 / 1e-5, sigma 1 (true epsilon 7.58 at delta 1e-3); randomized response at
epsilon 0.5 with k = 2 and 8. Default audits in the exact-arithmetic reading
(``float_bits=False``: the doubles of a Gaussian leak, see docs/audit.md), confidence 0.95, no
f-DP curve or profile, seeds 0..``--seeds``-1; bound / true epsilon per seed, its mean and
minimum, and the ceiling / true epsilon.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_audit_tightness.py --samples 1000000 \\
        --seeds 6 --json benchmarks/results/bench_audit_tightness.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

import ldp_audit.audit.selection as selection
from ldp_audit.audit import audit
from ldp_audit.mechanisms import (
    Gaussian,
    RandomizedResponse,
    analytic_gaussian_epsilon,
    analytic_gaussian_sigma,
)

PAIR = [(np.array([1.0]), np.array([-1.0]))]


def settings() -> list[tuple[str, object, float, object]]:
    out: list[tuple[str, object, float, object]] = []
    s = analytic_gaussian_sigma(1.0, 2.0, 1e-3)
    out.append(
        ("Gaussian at (1, 1e-3)", Gaussian(clip=1.0, noise_multiplier=s, delta=1e-3), 1.0, PAIR)
    )
    for d in (1e-2, 1e-3, 1e-5):
        eps = analytic_gaussian_epsilon(2.0, 2.0, d)
        out.append(
            (
                f"Gaussian sigma 2, delta {d:g}",
                Gaussian(clip=1.0, noise_multiplier=2.0, delta=d),
                eps,
                PAIR,
            )
        )
    eps = analytic_gaussian_epsilon(1.0, 2.0, 1e-3)
    out.append(
        (
            "Gaussian sigma 1, delta 1e-3",
            Gaussian(clip=1.0, noise_multiplier=1.0, delta=1e-3),
            eps,
            PAIR,
        )
    )
    for k in (2, 8):
        out.append((f"k-RR eps 0.5, k = {k}", RandomizedResponse(epsilon=0.5, k=k), 0.5, None))
    return out  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument(
        "--json", type=Path, default=Path("benchmarks/results/bench_audit_tightness.json")
    )
    a = ap.parse_args()
    rows = []
    t0, c0 = time.perf_counter(), time.process_time()
    for name, mech, true_eps, pairs in settings():
        row: dict = {"setting": name, "true_epsilon": true_eps, "samples": a.samples}
        for label, on in (("before", False), ("after", True)):
            selection._NORMAL_TAIL = on
            ratios, ceiling, cpu = [], None, 0.0
            for seed in range(a.seeds):
                c = time.process_time()
                r = audit(mech, pairs, samples=a.samples, rng=seed, float_bits=False,
                          tradeoff=False, profile=False)  # fmt: skip
                cpu += time.process_time() - c
                ratios.append(r.epsilon_lower_bound / true_eps)
                ceiling = r.tightness_ceiling / true_eps
            row[label] = {"ratios": ratios, "mean": float(np.mean(ratios)),
                          "min": float(np.min(ratios)), "cpu_s": cpu}  # fmt: skip
            row["ceiling"] = ceiling
        rows.append(row)
        print(f"{name}: before {row['before']['mean']:.3f} (min {row['before']['min']:.3f}), "
              f"after {row['after']['mean']:.3f} (min {row['after']['min']:.3f}), "
              f"ceiling {row['ceiling']:.3f}", flush=True)  # fmt: skip
    selection._NORMAL_TAIL = True
    out = {
        "command": f"benchmarks/bench_audit_tightness.py --samples {a.samples} --seeds {a.seeds}",
        "rows": rows,
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "machine": platform.platform(),
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=1))
    print(f"{out['wall_s']:.0f} s wall, {out['cpu_s']:.0f} s CPU")


if __name__ == "__main__":
    main()
