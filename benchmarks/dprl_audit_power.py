"""Power of the general one-run tests against per-layer clipping (docs/dprl.md, "power").

Idealised white-box game of the REINFORCE audit: m independent canaries, score
``N(ratio * mu * bit, 1)`` (per-layer clipping with random orthonormal canaries: ratio 1.69),
audited against the claim ``G_mu`` with the f-DP one-run test (``fdp_audit_scores``, guess
fractions 5-30 %). Prints the smallest p-value over the fractions per (m, mu, seed) and writes
``benchmarks/results/dprl_audit_power.json``.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dprl_audit_power.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ldp_audit.attacks.one_run_fdp import fdp_audit_scores, gdp_delta, profile_lines


def main() -> None:
    ratio = 1.69
    rows = []
    t0, c0 = time.perf_counter(), time.process_time()
    for m in (898, 1794):
        for mu in (0.8, 1.0, 1.5, 2.0):
            e = np.linspace(0, mu * mu / 2 + 7 * mu + 1, 24)
            lines = profile_lines(e, gdp_delta(mu, e))
            for seed in (0, 1):
                rng = np.random.default_rng(seed)
                bits = rng.random(m) < 0.5
                s = rng.standard_normal(m) + ratio * mu * bits
                res = fdp_audit_scores(s, bits, lines, confidence=0.95)
                p = min(r["p_value"] for r in res["p_values"])
                rows.append({"m": m, "mu_claimed": mu, "mu_true": ratio * mu, "seed": seed,
                             "min_p": p, "level_95_bonferroni_4": res["level"],
                             "p_values": res["p_values"]})  # fmt: skip
                print(f"m={m} mu={mu} seed={seed}: smallest p {p:.4f} (level {res['level']:.4f})")
    doc = {
        "machine": "shared, loaded 2-core machine",
        "wall_seconds": time.perf_counter() - t0,
        "cpu_seconds": time.process_time() - c0,
        "ratio": ratio,
        "rows": rows,
    }
    out = Path("benchmarks/results/dprl_audit_power.json")
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
