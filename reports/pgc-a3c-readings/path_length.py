"""Step size and path length: why the printed Laplace setting (L1 clip C = 0.01) cannot learn.

Measures, with the engine's own transcripts (``train(..., transcript=True)``: the released
reports and, in ``secrets``, the clean gradients):

1. the noiseless run clipped like the Laplace rows (``mechanism="none", clip=0.01``): how often
   the L1 clip C/2 = 0.005 is active, and so how far theta moves per update (eta x ||report||_1);
2. the non-private baseline (stabilising clip C = 10) with sampled acting, the runs that learn:
   the L1 path length theta travels until its FST (sum of eta x ||report||_1 over its updates,
   |B| = 1) and its net displacement ||theta_FST - theta_0||_1; divided by the printed step
   0.0025 this is the number of updates the Laplace setting would need even without noise.

Writes ``path_length.json`` beside this script.

    .venv/bin/python reports/pgc-a3c-readings/path_length.py     # about 1-3 minutes
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from ldp_audit.training.pgc_a3c import metrics
from ldp_audit.training.pgc_a3c import PgcA3cConfig, train

HERE = Path(__file__).resolve().parent
ETA = 0.5


def main() -> int:
    t0 = time.perf_counter()
    out: dict = {"eta": ETA}
    # 1. the printed clip, no noise: how often does it act?
    clip_runs = {}
    for acting in ("argmax", "sample"):
        res = train(
            PgcA3cConfig(mechanism="none", clip=0.01, trials=10, max_submissions=3000,
                         acting=acting),
            seed=0,
            transcript=True,
        )  # fmt: skip
        g = res.secrets["gradient"]
        n1 = np.abs(g).sum(axis=1)
        step = ETA * np.abs(res.transcript["report"]).sum(axis=1)
        clip_runs[acting] = {
            "reports": int(g.shape[0]),
            "share_clip_active": float(np.mean(n1 > 0.005)),
            "median_raw_gradient_l1": float(np.median(n1)),
            "min_raw_gradient_l1": float(n1.min()),
            "step_l1_median": float(np.median(step)),
            "step_l1_max": float(step.max()),
            "successes": int(np.isfinite(metrics.first_success_time(res.zeta)).sum()),
            "trials": 10,
        }
    out["noiseless_clip_0.01"] = clip_runs
    # 2. how far do the runs that learn travel?
    res = train(
        PgcA3cConfig(mechanism="none", trials=20, max_submissions=20000, acting="sample",
                     stop_at_target=True),
        seed=0,
        transcript=True,
    )  # fmt: skip
    tr = res.transcript
    fst = metrics.first_success_time(res.zeta)
    theta0 = tr["thetas"][0]  # not used per trial; per-trial theta_0 below
    del theta0
    rows = []
    for k in range(res.config.trials):
        if not np.isfinite(fst[k]):
            continue
        sel = (tr["trial"] == k) & (tr["submission"] < fst[k])  # updates before the FST
        steps = ETA * np.abs(tr["report"][sel]).sum(axis=1)
        first = tr["theta_index"][np.flatnonzero(tr["trial"] == k)[0]]
        theta_0 = tr["thetas"][first]
        theta_fst = theta_0 - ETA * tr["report"][sel].sum(axis=0)  # |B| = 1: every report
        rows.append(
            {
                "trial": k,
                "fst": int(fst[k]),
                "path_l1": float(steps.sum()),
                "net_displacement_l1": float(np.abs(theta_fst - theta_0).sum()),
                "updates_at_0.0025_for_path": float(steps.sum() / 0.0025),
                "updates_at_0.0025_for_displacement": float(
                    np.abs(theta_fst - theta_0).sum() / 0.0025
                ),
            }
        )
    out["learning_runs"] = {
        "config": "mechanism=none (C = 10), acting=sample, 20 trials, stop_at_target, seed 0",
        "successes": len(rows),
        "trials": 20,
        "rows": rows,
        "path_l1_min": min(r["path_l1"] for r in rows),
        "path_l1_median": float(np.median([r["path_l1"] for r in rows])),
        "path_l1_max": max(r["path_l1"] for r in rows),
        "net_displacement_l1_min": min(r["net_displacement_l1"] for r in rows),
        "net_displacement_l1_median": float(np.median([r["net_displacement_l1"] for r in rows])),
        "net_displacement_l1_max": max(r["net_displacement_l1"] for r in rows),
    }
    out["seconds"] = time.perf_counter() - t0
    out["command"] = "python reports/pgc-a3c-readings/path_length.py"
    (HERE / "path_length.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "learning_runs"}, indent=1))
    lr = out["learning_runs"]
    print(
        f"learning runs {lr['successes']}/20: path L1 min {lr['path_l1_min']:.0f} median "
        f"{lr['path_l1_median']:.0f} max {lr['path_l1_max']:.0f}; net displacement min "
        f"{lr['net_displacement_l1_min']:.1f} median {lr['net_displacement_l1_median']:.1f} max "
        f"{lr['net_displacement_l1_max']:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
