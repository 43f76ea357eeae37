"""Reports/s of every mechanism, vectorised vs a straightforward per-report Python loop.

Both run in the same process on the same inputs (n reports of dimension d, default the paper's
n = 100,000 and d = 112); the ratio vectorised/loop is printed and everything is written as JSON.
The loop versions are the textbook per-report implementations of the same equations; the loop
may run on fewer reports (``--loop-n``) -- reports/s is a rate, so the ratio is unaffected.

    .venv/bin/python benchmarks/bench_mechanisms.py [--n 100000] [--d 112] [--loop-n 100000]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ldp_audit import mechanisms as m

SQRT3 = math.sqrt(3.0)


# ---- straightforward per-report implementations (the baseline) --------------------------------


def loop_laplace(mech: m.Laplace, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = np.empty_like(x)
    for i, g in enumerate(x):
        norm1 = np.abs(g).sum()
        g = g / max(1.0, norm1 / (mech.clip / 2))  # eq. 19
        out[i] = g + rng.laplace(0.0, mech.clip / mech.epsilon, size=g.shape)  # eq. 21
    return out


def loop_discrete_laplace(
    mech: m.DiscreteLaplace, x: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    d = x.shape[1]
    step, k_sens = mech.grid_step(d), mech.grid_sensitivity(d)
    p = 1 - math.exp(-mech.epsilon / k_sens)
    out = np.empty_like(x)
    for i, g in enumerate(x):
        g = g / max(1.0, np.abs(g).sum() / (mech.clip / 2))  # eq. 19
        k = np.rint(g / step)
        z = rng.geometric(p, size=d) - rng.geometric(p, size=d)
        out[i] = (k + z) * step
    return out


def loop_prs(mech: m.ProjectedRandomSign, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    d = x.shape[1]
    dh = mech.effective_reduced_dim(d)
    e = math.exp(mech.epsilon / dh)
    out = np.empty_like(x)
    for i, g in enumerate(x):
        mat = rng.choice([-SQRT3, 0.0, SQRT3], size=(dh, d), p=[1 / 6, 2 / 3, 1 / 6])  # eq. 5
        u = np.clip(mat @ g, -mech.clip, mech.clip)  # eq. 23
        p = 1 / (e + 1) + (u + mech.clip) / (2 * mech.clip) * (e - 1) / (e + 1)  # eq. 24
        ut = np.where(rng.random(dh) < p, mech.clip, -mech.clip)
        out[i] = mat.T @ ut
    return out


def loop_bitflip(mech: m.BitFlip, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    e = math.exp(mech.epsilon / x.shape[1])
    out = np.empty_like(x)
    for i, v in enumerate(x):
        p = 1 / (e + 1) + (v + 1) / 2 * (e - 1) / (e + 1)  # eq. 4
        out[i] = np.where(rng.random(v.shape) < p, 1.0, -1.0)
    return out


def loop_rr(mech: m.RandomizedResponse, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    keep = math.exp(mech.epsilon) / (math.exp(mech.epsilon) + mech.k - 1)
    out = np.empty((x.shape[0], 1), dtype=np.int64)
    for i, v in enumerate(x[:, 0].astype(int)):
        if rng.random() < keep:
            out[i, 0] = v
        else:
            others = [c for c in range(mech.k) if c != v]
            out[i, 0] = others[rng.integers(len(others))]
    return out


def loop_gaussian(mech: m.Gaussian, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = np.empty_like(x)
    for i, g in enumerate(x):
        g = g / max(1.0, np.linalg.norm(g) / mech.clip)
        out[i] = g + rng.normal(0.0, mech.sigma, size=g.shape)
    return out


# ---- harness ----------------------------------------------------------------------------------


def _time(fn: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray]:
    best, out = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="reports per batch")
    ap.add_argument("--d", type=int, default=112, help="report dimension (paper: 112)")
    ap.add_argument("--loop-n", type=int, default=100_000, help="reports for the Python loop")
    ap.add_argument("--repeats", type=int, default=3, help="vectorised timing: best of R")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_mechanisms.json"))
    args = ap.parse_args()

    data_rng = np.random.default_rng(args.seed)
    grad = data_rng.normal(0.0, 0.01, size=(args.n, args.d))
    unit = np.clip(data_rng.normal(0.0, 0.5, size=(args.n, args.d)), -1.0, 1.0)
    cats = data_rng.integers(0, 4, size=(args.n, 1)).astype(np.float64)
    cases = [
        ("Laplace(eps=1, C=0.01)", m.Laplace(epsilon=1.0, clip=0.01), grad, loop_laplace),
        (
            "DiscreteLaplace(eps=1, C=0.01)",
            m.DiscreteLaplace(epsilon=1.0, clip=0.01),
            grad,
            loop_discrete_laplace,
        ),
        ("PRS(eps=1, C=1) d_hat=1", m.ProjectedRandomSign(epsilon=1.0, clip=1.0), grad, loop_prs),
        ("PRS(eps=10, C=1) d_hat=4", m.ProjectedRandomSign(epsilon=10.0, clip=1.0), grad, loop_prs),
        ("BitFlip(eps=1)", m.BitFlip(epsilon=1.0), unit, loop_bitflip),
        (
            "RandomizedResponse(eps=1, k=4) d=1",
            m.RandomizedResponse(epsilon=1.0, k=4),
            cats,
            loop_rr,
        ),
        ("Gaussian(C=1, z=1.1)", m.Gaussian(clip=1.0, noise_multiplier=1.1), grad, loop_gaussian),
    ]
    rows = []
    print(f"n = {args.n} reports, d = {args.d}; loop on {min(args.loop_n, args.n)} reports")
    print(f"{'mechanism':38s} {'vectorised rep/s':>17s} {'loop rep/s':>12s} {'ratio':>8s}")
    for label, mech, x, loop in cases:
        xl = x[: min(args.loop_n, args.n)]
        t_vec, y = _time(
            lambda mech=mech, x=x: mech.privatize(x, np.random.default_rng(1)), args.repeats
        )
        t_loop, yl = _time(
            lambda mech=mech, xl=xl, loop=loop: loop(mech, xl, np.random.default_rng(1)), 1
        )
        assert y.shape == (x.shape[0], x.shape[1]) and yl.shape == (xl.shape[0], xl.shape[1])
        rate_vec, rate_loop = x.shape[0] / t_vec, xl.shape[0] / t_loop
        # sanity: both implement the same distribution (means agree to a few standard errors)
        se = float(np.std(yl) / math.sqrt(yl.size)) + float(np.std(y) / math.sqrt(y.size))
        mean_gap = abs(float(np.mean(y)) - float(np.mean(yl)))
        rows.append(
            {
                "mechanism": label,
                "config": mech.to_config(),
                "n": int(x.shape[0]),
                "d": int(x.shape[1]),
                "loop_n": int(xl.shape[0]),
                "vectorised_seconds": t_vec,
                "loop_seconds": t_loop,
                "vectorised_reports_per_s": rate_vec,
                "loop_reports_per_s": rate_loop,
                "speedup": rate_vec / rate_loop,
                "mean_gap_in_standard_errors": mean_gap / se if se > 0 else 0.0,
            }
        )
        print(f"{label:38s} {rate_vec:17,.0f} {rate_loop:12,.0f} {rate_vec / rate_loop:7.1f}x")
    result = {
        "benchmark": "bench_mechanisms",
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "results": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
