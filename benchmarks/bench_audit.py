"""Tightness and speed of ldp_audit.audit, against a straightforward auditor in the same run.

For each setting (Laplace at eps 0.1, 0.5, 1, 2; binary randomized response at eps 1; PRS with
d_hat = 1 on a saturating input pair) it reports the lower bound, its ratio to the true (exact)
epsilon and the seconds of ``audit(..., samples=N)`` (default N = 10^6 per input, confidence
0.95, exact-arithmetic mode: the built-in Laplace computes in doubles and is caught by the
float-bit events, which would make "bound / true epsilon" meaningless; that run is reported
separately as ``float_bits_bound``).

The straightforward baseline implements the same recipe the obvious way: one ``privatize`` call
per report (the way a per-report mechanism is usually called) and a Python loop over candidate
thresholds with boolean masks. It runs on ``--naive-samples`` per input (it is slow); the
comparison is in samples per second, which the sample count does not change.

    .venv/bin/python benchmarks/bench_audit.py [--samples 1000000] [--naive-samples 20000]
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np

from ldp_audit.audit import audit, exact_epsilon
from ldp_audit.mechanisms import Laplace, ProjectedRandomSign, RandomizedResponse
from ldp_audit.stats import epsilon_lower_bound_from_counts


def naive_audit(mech, x, x2, samples: int, confidence: float, seed: int) -> float:
    """Same recipe, straightforward code: per-report privatize, loop over thresholds."""
    rng = np.random.default_rng(seed)
    n_sel = samples // 10
    n_est = samples - n_sel

    def draw(v, n):
        return np.array([mech.privatize(v[None, :], rng)[0, 0] for _ in range(n)])

    s1, s2 = draw(x, n_sel), draw(x2, n_sel)
    pooled = np.sort(np.concatenate([s1, s2]))
    best = (-math.inf, 0.0, True, True)
    for t in pooled[:: max(1, len(pooled) // 128)]:
        for gt in (True, False):
            c1 = np.sum(s1 > t) if gt else np.sum(s1 <= t)
            c2 = np.sum(s2 > t) if gt else np.sum(s2 <= t)
            for x_num in (True, False):
                a, b = (c1, c2) if x_num else (c2, c1)
                v = epsilon_lower_bound_from_counts(a, n_sel, b, n_sel, 1 - confidence)
                if v > best[0]:
                    best = (v, t, gt, x_num)
    _, t, gt, x_num = best
    e1, e2 = draw(x, n_est), draw(x2, n_est)
    c1 = np.sum(e1 > t) if gt else np.sum(e1 <= t)
    c2 = np.sum(e2 > t) if gt else np.sum(e2 <= t)
    a, b = (c1, c2) if x_num else (c2, c1)
    return max(0.0, float(epsilon_lower_bound_from_counts(a, n_est, b, n_est, 1 - confidence)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--naive-samples", type=int, default=20_000)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/bench_audit.json"))
    args = ap.parse_args()

    sat = [(np.array([1e6]), np.array([-1e6]))]
    settings = [
        (f"laplace eps={e}", Laplace(epsilon=e, clip=1.0), None, 1) for e in (0.1, 0.5, 1.0, 2.0)
    ] + [
        ("randomized response eps=1", RandomizedResponse(epsilon=1.0), None, 1),
        (
            "prs d_hat=1 eps=1 saturating pair",
            ProjectedRandomSign(epsilon=1.0, clip=1.0, reduced_dim=1),
            sat,
            1,
        ),
    ]
    rows = []
    print(
        f"{'setting':36s} {'true':>6s} {'bound':>8s} {'ratio':>6s} {'sec':>6s} "
        f"{'float-bits':>10s} {'naive':>8s} {'speed-up':>8s}"
    )
    for name, mech, pairs, dim in settings:
        true = exact_epsilon(mech, pairs, dim=dim)
        r = audit(
            mech, pairs, samples=args.samples, confidence=args.confidence, rng=args.seed,
            dim=dim, float_bits=False,
        )  # fmt: skip
        rf = audit(mech, pairs, samples=args.samples, confidence=args.confidence, rng=args.seed,
                   dim=dim)  # fmt: skip
        x, x2 = (pairs or [(np.array(r.witness.x), np.array(r.witness.x2))])[0]
        t0 = time.perf_counter()
        nb = naive_audit(mech, x, x2, args.naive_samples, args.confidence, args.seed)
        naive_s = time.perf_counter() - t0
        # samples per second, all pairs and both inputs counted
        fast_rate = 2 * args.samples * r.pairs_tested / r.seconds
        naive_rate = 2 * args.naive_samples / naive_s
        row = {
            "setting": name,
            "true_epsilon": true,
            "lower_bound": r.epsilon_lower_bound,
            "ratio": r.epsilon_lower_bound / true,
            "seconds": r.seconds,
            "pairs_searched": r.pairs_tested,
            "witness": r.witness.to_dict() if r.witness else None,
            "float_bits_bound": rf.epsilon_lower_bound,
            "float_bits_seconds": rf.seconds,
            "naive_bound": nb,
            "naive_samples": args.naive_samples,
            "naive_seconds": naive_s,
            "samples_per_second": fast_rate,
            "naive_samples_per_second": naive_rate,
            "speedup": fast_rate / naive_rate,
        }
        rows.append(row)
        print(
            f"{name:36s} {true:6.3f} {r.epsilon_lower_bound:8.4f} {row['ratio']:6.3f} "
            f"{r.seconds:6.2f} {rf.epsilon_lower_bound:10.3f} {nb:8.3f} {row['speedup']:7.0f}x"
        )
    out = {
        "command": "benchmarks/bench_audit.py "
        + f"--samples {args.samples} --naive-samples {args.naive_samples} --seed {args.seed}",
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "samples_per_input": args.samples,
        "confidence": args.confidence,
        "results": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
