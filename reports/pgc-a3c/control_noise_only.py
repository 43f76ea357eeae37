"""Noise-only control for the PGC-A3C reproduction (writes control_noise_only.json here).

Reruns four grid settings of the committed reports with the *same seeds* (so the same initial
theta, acting uniforms, resets and mechanism noise) but with every episode gradient set to zero
before clipping and noise: theta then moves by the mechanism's noise alone. If a setting succeeds
about as often without its gradients, its successes are not evidence of learning.

    .venv/bin/python reports/pgc-a3c/control_noise_only.py     # about 4 minutes on 2 cores

An experiment, not library code: it swaps the engine's compiled gradient kernel for one that
zeroes its output (privacy is unaffected: the zero vector is charged and noised like any other).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from ldp_audit.training.pgc_a3c import metrics  # noqa: E402
from ldp_audit.training.pgc_a3c import engine as pgc_engine  # noqa: E402
from ldp_audit.training.pgc_a3c import PgcA3cConfig, train  # noqa: E402

SETTINGS = [  # (mechanism, epsilon, report key, acting, report folder)
    ("laplace", 1.0, "laplace-eps1-B1", "argmax", "pgc-a3c"),
    ("laplace", 10.0, "laplace-eps10-B1", "argmax", "pgc-a3c"),
    ("prs", 10.0, "prs-eps10-B100", "argmax", "pgc-a3c"),
    ("prs", 10.0, "prs-eps10-B100", "sample", "pgc-a3c-sample"),
]


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    # the lock-step engine calls the kernel through its own module (training/pgc_a3c/engine.py)
    real = pgc_engine.episode_gradients_kernel
    # the engine passes the kernel's arguments by position; find the gradient output by name
    out_at = list(inspect.signature(real.py_func).parameters).index("out")

    def zero_gradients(*args):
        real(*args)
        args[out_at][:] = 0.0

    pgc_engine.episode_gradients_kernel = zero_gradients
    out = {}
    for mech, eps, key, acting, folder in SETTINGS:
        report = json.loads((HERE.parent / folder / "results.json").read_text())
        grid = report["settings"][key]
        cfg = report["config"]
        t0 = time.perf_counter()
        res = train(
            PgcA3cConfig(
                mechanism=mech,
                epsilon=eps,
                trials=cfg["trials"],
                max_submissions=cfg["max_submissions"],
                stop_at_target=True,
                acting=acting,
            ),
            seed=grid["seed"],
            progress=True,
        )
        fst = metrics.first_success_time(res.zeta)
        ok = sorted(int(x) for x in fst if np.isfinite(x))
        name = f"{key}-{acting}"
        out[name] = {
            "report": f"reports/{folder}",
            "seed": grid["seed"],
            "trials": cfg["trials"],
            "noise_only_successes": len(ok),
            "noise_only_fst": ok,
            "with_gradient_successes": grid["successes"],
            "with_gradient_fst": sorted(int(x) for x in grid["fst"] if x is not None),
            "seconds": time.perf_counter() - t0,
        }
        print(
            f"{name}: noise only {len(ok)}/{cfg['trials']}, with gradients "
            f"{grid['successes']}/{cfg['trials']}",
            flush=True,
        )
    (HERE / "control_noise_only.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
