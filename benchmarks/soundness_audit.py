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
when any of its points exceeds the analytic epsilon at that delta, its delta lower bound at the
claimed epsilon when it exceeds the claimed delta (the claim is the exact analytic epsilon at
that delta on the worst pair, so that is the true delta there).

``--sequential`` runs every audit in the anytime-valid sequential mode (``--samples`` is then
each audit's budget; the rows record the mean samples used). ``--delta-event`` adds the
delta-targeted event to the Gaussian audits (``audit(delta_event=True)``; a pure claim refuses it).

    .venv/bin/python benchmarks/soundness_audit.py [--audits 200] [--samples 100000]
        [--confidence 0.95 0.8] [--sequential]
        [--backend {local,ray} [--address ADDR] [--workers N]]

Each audit is one task of ``ldp_audit.backends.run_tasks`` with its own spawned generator (the
same as before), so ``--backend local --workers N`` (a process pool) and ``--backend ray`` give
the numbers of the default in-process run; only the timings differ.
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
from ldp_audit.errors import InvalidParameterError
from ldp_audit.mechanisms import (
    BitFlip,
    Gaussian,
    Laplace,
    ProjectedRandomSign,
    RandomizedResponse,
    analytic_gaussian_epsilon,
)
from ldp_audit.stats import clopper_pearson_interval


def _audit_task(item: dict) -> dict:
    """One seeded audit (a ``run_tasks`` task): what the tally needs from it."""
    r = audit(item["mech"], samples=item["samples"], confidence=item["confidence"],
              rng=item["rng"], dim=item["dim"], float_bits=item["float_bits"],
              pool=item["pool"], ratio_test=item["ratio_test"],
              sequential=item.get("sequential", False),
              delta_event=item.get("delta_event", False))  # fmt: skip
    out = {
        "bound": r.epsilon_lower_bound,
        "fdp": bool(r.tradeoff is not None and r.tradeoff.violation),
        "samples_used": r.samples,
    }
    if item["kind"] == "gaussian":
        # the claimed epsilon is the exact analytic epsilon at the claimed delta on the worst
        # pair, so the true delta at the claimed epsilon is the claimed delta
        out["delta_over"] = bool(r.delta_lower_bound is not None and r.delta_lower_bound > r.delta)
    if item["kind"] == "gaussian":
        out["profile_over"] = any(
            lo > (math.inf if d == 0 else analytic_gaussian_epsilon(1.0, 1.0, d))
            for d, lo in zip(r.profile.delta, r.profile.epsilon_lower, strict=True)
        )
    return out


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
    ap.add_argument(
        "--backend",
        choices=("local", "ray"),
        default=None,
        help="run the audits as ldp_audit.backends.run_tasks tasks here (a process pool with "
        "--workers > 1) or on Ray; default: in this process, as before",
    )
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="audit(sequential=True): the anytime-valid sequential mode (--samples is the budget)",
    )
    ap.add_argument(
        "--delta-event",
        action="store_true",
        help="audit(delta_event=True): the Gaussian audits add the delta-targeted event",
    )
    ap.add_argument("--address", default=None, help="with --backend ray: an existing cluster")
    ap.add_argument("--workers", type=int, default=None, help="pool size / Ray CPUs started here")
    args = ap.parse_args()
    from ldp_audit.backends import backend_options, describe_spec, run_tasks

    try:
        where = backend_options(args)  # usage errors (exit 2) before any audit
    except InvalidParameterError as exc:
        ap.error(str(exc))

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
        common = dict(samples=args.samples, confidence=conf, pool=args.pool,
                      ratio_test=args.ratio_test, sequential=args.sequential)  # fmt: skip
        items = [
            dict(
                kind="mechanism",
                mechanism=mechs[i % len(mechs)][0],
                audit=i,
                **common,
                mech=mechs[i % len(mechs)][1],
                dim=mechs[i % len(mechs)][2],
                float_bits=mechs[i % len(mechs)][3],
                rng=s,
            )  # fmt: skip
            for i, s in enumerate(seeds)
        ]
        gauss = Gaussian(clip=0.5, noise_multiplier=2.0, delta=1e-3)
        items += [
            dict(
                kind="gaussian",
                mechanism="gaussian",
                audit=j,
                **common,
                delta_event=args.delta_event,  # a pure claim refuses it
                mech=gauss,
                dim=None,
                float_bits=False,
                rng=s,
            )  # fmt: skip
            for j, s in enumerate(groot.spawn(args.gaussian_audits))
        ]
        outs = run_tasks(_audit_task, items, describe=describe_spec, **where)
        for i, o in enumerate(outs[: args.audits]):
            name = mechs[i % len(mechs)][0]
            true = truths[i % len(mechs)]
            # the claims equal the true epsilon: a point below f_{eps,0} is a false refutation
            fdp_over += o["fdp"]
            hit = o["bound"] > true
            over += hit
            per_mech[name][0] += hit
            per_mech[name][1] += 1
            ratios.append(o["bound"] / true)
        g_over = g_fdp = g_delta = 0
        for o in outs[args.audits :]:
            g_over += o["bound"] > gauss.epsilon
            g_delta += o["delta_over"]
            g_fdp += o["fdp"]  # below G_1: false
            prof_runs += 1
            prof_over += o["profile_over"]
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
            "gaussian_delta_bounds_above_true_delta": int(g_delta),
            "sequential": args.sequential,
            "delta_event": args.delta_event,
            "mean_samples_used": float(np.mean([o["samples_used"] for o in outs])),
            "seconds": secs,
        }
        out_rows.append(row)
        print(
            f"confidence {conf}: {over}/{args.audits} audits above the true epsilon "
            f"(fraction {over / args.audits:.3f}, 95% CI [{lo:.3f}, {hi:.3f}], allowed "
            f"{1 - conf:.3f}); median bound/true {np.median(ratios):.3f}; gaussian: verdicts "
            f"above the truth {g_over}/{prof_runs}, profiles above the true profile "
            f"{prof_over}/{prof_runs}, delta bounds above the true delta {g_delta}/{prof_runs}; "
            f"f-DP points below the true curve: {fdp_over}/"
            f"{args.audits}, gaussian {g_fdp}/{prof_runs}; {secs:.1f} s"
        )
    out = {
        "command": f"benchmarks/soundness_audit.py --audits {args.audits} --samples "
        f"{args.samples} --confidence {' '.join(map(str, args.confidence))} "
        f"--gaussian-audits {args.gaussian_audits}"
        + (" --pool" if args.pool else "")
        + f" --ratio-test {args.ratio_test}"
        + (" --sequential" if args.sequential else "")
        + (" --delta-event" if args.delta_event else "")
        + (f" --backend {args.backend}" if args.backend else "")
        + (f" --address {args.address}" if args.address else "")
        + (f" --workers {args.workers}" if args.workers else ""),
        "machine": f"{platform.machine()}, shared and loaded 2-core machine",
        "mechanisms": [
            {"name": n, "true_epsilon": t} for (n, *_), t in zip(mechs, truths, strict=True)
        ],
        "results": out_rows,
    }
    if args.backend:  # the default run's JSON is unchanged
        out["backend"] = where
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
