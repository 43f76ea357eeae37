"""Soundness of ldp_audit.audit: seeded audits of correct mechanisms, fraction above true epsilon.

The guarantee is ``P(lower bound > true epsilon) <= 1 - confidence``. We run ``--audits``
(default 200) independent seeded audits spread over correct mechanisms whose true epsilon we
know exactly (``exact_epsilon``): binary randomized response, Laplace (exact-arithmetic mode;
in doubles its true epsilon is infinite, see the float-bit events), PRS with d_hat = 1, bit flip
on 2 coordinates (the same rotation and seeds as before issue 19, so the runs compare). Each
confidence level in ``--confidence`` is run; the number of exceedances (of the reported bound:
the larger of the two verdicts where float bits are searched), the fraction and its two-sided
95% Clopper-Pearson interval are printed and written as JSON.

A separate block of ``--gaussian-audits`` (default 40) audits the Gaussian mechanism (sigma 1,
sensitivity 1, delta = 1e-3, exact-arithmetic mode) with its privacy profile: the verdict
counts as above the truth when it exceeds the analytic-Gaussian epsilon at 1e-3, the profile
when any of its points exceeds the analytic epsilon at that delta.

    .venv/bin/python benchmarks/soundness_audit.py [--audits 200] [--samples 100000]
        [--confidence 0.95 0.8]
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
from ldp_audit.mechanisms import (
    BitFlip,
    Gaussian,
    Laplace,
    ProjectedRandomSign,
    RandomizedResponse,
    analytic_gaussian_epsilon,
)
from ldp_audit.stats import clopper_pearson_interval


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audits", type=int, default=200)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--confidence", type=float, nargs="+", default=[0.95, 0.8])
    ap.add_argument("--gaussian-audits", type=int, default=40)
    ap.add_argument("--seed", type=int, default=20261122)
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/soundness_audit.json"))
    ap.add_argument(
        "--pool",
        action="store_true",
        help="audit with pool=True (pooled event pairs, stats.epsilon_lower_bound_from_pooled_"
        "counts) instead of the default",
    )
    ap.add_argument(
        "--ratio-test",
        choices=["clopper-pearson", "poisson"],
        default="clopper-pearson",
        help="audit(ratio_test=...): 'poisson' = Poissonized estimation, joint conditional bound",
    )
    args = ap.parse_args()

    mechs = [
        ("rr eps=1", RandomizedResponse(epsilon=1.0), 1, True),
        ("laplace eps=1 (exact-arithmetic mode)", Laplace(epsilon=1.0, clip=1.0), 1, False),
        ("prs d_hat=1 eps=1", ProjectedRandomSign(epsilon=1.0, clip=1.0, reduced_dim=1), 1, True),
        ("bitflip eps=1 d=2", BitFlip(epsilon=1.0), 2, True),
    ]
    truths = [exact_epsilon(m, dim=d) for _, m, d, _ in mechs]
    root = np.random.default_rng(args.seed)
    groot = np.random.default_rng([args.seed, 19])  # own stream: the rotation's seeds as before
    out_rows = []
    for conf in args.confidence:
        seeds = root.spawn(args.audits)
        over = fdp_over = 0
        per_mech = {name: [0, 0] for name, *_ in mechs}
        ratios = []
        prof_over, prof_runs = 0, 0
        t0 = time.perf_counter()
        for i, s in enumerate(seeds):
            name, mech, dim, fb = mechs[i % len(mechs)]
            true = truths[i % len(mechs)]
            r = audit(mech, samples=args.samples, confidence=conf, rng=s, dim=dim, float_bits=fb,
                      pool=args.pool, ratio_test=args.ratio_test)  # fmt: skip
            # the claims equal the true epsilon: a point below f_{eps,0} is a false refutation
            fdp_over += r.tradeoff is not None and r.tradeoff.violation
            hit = r.epsilon_lower_bound > true
            over += hit
            per_mech[name][0] += hit
            per_mech[name][1] += 1
            ratios.append(r.epsilon_lower_bound / true)
        g_over = g_fdp = 0
        gauss = Gaussian(clip=0.5, noise_multiplier=2.0, delta=1e-3)
        for s in groot.spawn(args.gaussian_audits):
            r = audit(gauss, samples=args.samples, confidence=conf, rng=s, float_bits=False,
                      pool=args.pool, ratio_test=args.ratio_test)  # fmt: skip
            g_over += r.epsilon_lower_bound > gauss.epsilon
            g_fdp += r.tradeoff is not None and r.tradeoff.violation  # below G_1: false
            prof_runs += 1
            prof_over += any(
                lo > (math.inf if d == 0 else analytic_gaussian_epsilon(1.0, 1.0, d))
                for d, lo in zip(r.profile.delta, r.profile.epsilon_lower, strict=True)
            )
        secs = time.perf_counter() - t0
        lo, hi = clopper_pearson_interval(over, args.audits, 0.05)
        row = {
            "confidence": conf,
            "pool": args.pool,
            "ratio_test": args.ratio_test,
            "audits": args.audits,
            "tradeoff_curves_below_the_true_curve": int(fdp_over),
            "above_true_epsilon": int(over),
            "fraction": over / args.audits,
            "fraction_ci95": [lo, hi],
            "allowed": 1 - conf,
            "per_mechanism": {k: {"above": v[0], "audits": v[1]} for k, v in per_mech.items()},
            "median_ratio_bound_to_true": float(np.median(ratios)),
            "gaussian_audits": prof_runs,
            "gaussian_verdicts_above_true_epsilon": int(g_over),
            "gaussian_profiles_above_true_profile": int(prof_over),
            "gaussian_tradeoff_curves_below_g_mu": int(g_fdp),
            "seconds": secs,
        }
        out_rows.append(row)
        print(
            f"confidence {conf}: {over}/{args.audits} audits above the true epsilon "
            f"(fraction {over / args.audits:.3f}, 95% CI [{lo:.3f}, {hi:.3f}], allowed "
            f"{1 - conf:.3f}); median bound/true {np.median(ratios):.3f}; gaussian: verdicts "
            f"above the truth {g_over}/{prof_runs}, profiles above the true profile "
            f"{prof_over}/{prof_runs}; f-DP points below the true curve: {fdp_over}/"
            f"{args.audits}, gaussian {g_fdp}/{prof_runs}; {secs:.1f} s"
        )
    out = {
        "command": f"benchmarks/soundness_audit.py --audits {args.audits} --samples "
        f"{args.samples} --confidence {' '.join(map(str, args.confidence))} "
        f"--gaussian-audits {args.gaussian_audits}"
        + (" --pool" if args.pool else "")
        + f" --ratio-test {args.ratio_test}",
        "machine": f"{platform.machine()}, shared and loaded 2-core machine",
        "mechanisms": [
            {"name": n, "true_epsilon": t} for (n, *_), t in zip(mechs, truths, strict=True)
        ],
        "results": out_rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
