"""The Gaussian-family bound of ``ldp_audit.audit`` (``TradeoffCurve.family_epsilon_lower``,
assumption ``ldp_audit.audit.tradeoff.FAMILY_ASSUMPTION``) beside the assumption-free verdict,
on correct Gaussians (each exactly at its claim, so every audit is also a soundness check).

Settings (one pair, +-1, L2 sensitivity 2): the Gaussian at (1, 1e-3), sigma 2 at delta 1e-3
and 1e-5, sigma 1 at delta 1e-3 (true epsilon 7.58). Default audits in the exact-arithmetic
reading, confidence 0.95, seeds 0..``--seeds``-1 per setting; bound / true epsilon of the
verdict and of the family bound (median, minimum over the first 20 seeds), the one-event
tightness ceiling; the delta lower bounds / delta at the claimed epsilon (assumption-free and
family); and the family false alarms (family epsilon or delta above the true one) over all
audits with their one-sided 95 % Clopper-Pearson upper bound.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_audit_family.py --samples 1000000 \\
        --seeds 30 --json benchmarks/results/bench_audit_family.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from ldp_audit.audit import audit
from ldp_audit.mechanisms import Gaussian, analytic_gaussian_epsilon, analytic_gaussian_sigma
from ldp_audit.stats import clopper_pearson_upper

PAIR = [(np.array([1.0]), np.array([-1.0]))]


def settings() -> list[tuple[str, float, float]]:
    """(name, sigma, delta) with clip 1 (sensitivity 2)."""
    return [
        ("Gaussian at (1, 1e-3)", analytic_gaussian_sigma(1.0, 2.0, 1e-3), 1e-3),
        ("Gaussian sigma 2, delta 1e-3", 2.0, 1e-3),
        ("Gaussian sigma 2, delta 1e-5", 2.0, 1e-5),
        ("Gaussian sigma 1, delta 1e-3", 1.0, 1e-3),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_audit_family.json"))
    a = ap.parse_args()
    rows, alarms, audits = [], 0, 0
    t0, c0 = time.perf_counter(), time.process_time()
    for name, sigma, delta in settings():
        mech = Gaussian(clip=1.0, noise_multiplier=sigma, delta=delta)
        true_eps = analytic_gaussian_epsilon(sigma, 2.0, delta)
        verdict, family, ceiling, d_free, d_family = [], [], None, [], []
        for seed in range(a.seeds):
            r = audit(mech, PAIR, samples=a.samples, rng=seed, float_bits=False, profile=False)
            verdict.append(r.epsilon_lower_bound / true_eps)
            family.append(r.tradeoff.family_epsilon_lower / true_eps)
            d_free.append((r.delta_lower_bound or 0.0) / delta)
            d_family.append(r.tradeoff.family_delta_lower / delta)
            ceiling = r.tightness_ceiling / true_eps
        alarms += sum(f > 1.0 or d > 1.0 for f, d in zip(family, d_family, strict=True))
        audits += len(family)
        v20, f20 = verdict[:20], family[:20]
        row = {"setting": name, "true_epsilon": true_eps, "ceiling": ceiling,
               "verdict_median": float(np.median(v20)), "verdict_min": float(np.min(v20)),
               "family_median": float(np.median(f20)), "family_min": float(np.min(f20)),
               "family_above_truth": int(sum(f > 1.0 for f in family)),
               "delta_free_median": float(np.median(d_free[:20])),
               "delta_family_median": float(np.median(d_family[:20])),
               "delta_family_min": float(np.min(d_family[:20])),
               "delta_family_above_truth": int(sum(d > 1.0 for d in d_family)),
               "verdict": verdict, "family": family, "delta_free": d_free,
               "delta_family": d_family}  # fmt: skip
        rows.append(row)
        print(f"{name} (true {true_eps:.4g}): verdict median {row['verdict_median']:.3f} "
              f"(min {row['verdict_min']:.3f}, ceiling {ceiling:.3f}); family median "
              f"{row['family_median']:.3f} (min {row['family_min']:.3f}); family above the "
              f"truth {row['family_above_truth']}/{len(family)}; delta / claim: assumption-free "
              f"median {row['delta_free_median']:.3f}, family median "
              f"{row['delta_family_median']:.3f} (min {row['delta_family_min']:.3f}, above "
              f"{row['delta_family_above_truth']})", flush=True)  # fmt: skip
    out = {
        "command": f"benchmarks/bench_audit_family.py --samples {a.samples} --seeds {a.seeds}",
        "rows": rows,
        "family_false_alarms": alarms,
        "audits": audits,
        "false_alarm_rate_upper_95": float(clopper_pearson_upper(alarms, audits, 0.05)),
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "machine": platform.platform(),
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=1))
    up = out["false_alarm_rate_upper_95"]
    print(f"family false alarms {alarms}/{audits} (95% upper {up:.4f}); "
          f"{out['wall_s']:.0f} s wall, {out['cpu_s']:.0f} s CPU")  # fmt: skip


if __name__ == "__main__":
    main()
