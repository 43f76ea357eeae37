"""Samples and seconds to a verdict: the sequential audit against the fixed-sample audit.

For every broken mechanism of tests/broken_mechanisms.py (``known_broken(1.0)``, audited on
their declared candidate pairs at ``--dim``), plus a mildly broken Laplace (the scale of
epsilon 1.2 claiming 1, to show what the sequential mode pays where a violation is small) and
a correct Laplace (what it costs where there is nothing to find), each seed runs, in the same
process one after the other:

* the fixed-sample audit, ``audit(mech, samples=N)`` (the default mode);
* the sequential audit, ``audit(mech, samples=N, sequential=True)`` (N is its budget).

Both at confidence 0.95, exact-arithmetic reading (``float_bits=False``: the built-in
mechanisms compute in doubles, and their float bits would make every one of them "broken"),
no profile, no f-DP curve. Per mechanism: the verdicts, the bounds, the samples per input each
drew (sequential: over the stages it ran), the stages, and the wall / CPU seconds; the ratios
fixed / sequential.

``--check-tightness`` instead reruns the tightness table's settings of
benchmarks/bench_audit.py (its ``_tightness_settings``) at the table's sample size and seed in
the default mode, and compares the bounds with benchmarks/results/bench_audit.json exactly
(the default mode must be unchanged by the additions of issue 30).

    .venv/bin/python benchmarks/bench_audit_sequential.py [--samples 1000000] [--seeds 3]
        [--dim 4] [--json benchmarks/results/bench_audit_sequential.json]
    .venv/bin/python benchmarks/bench_audit_sequential.py --check-tightness [--settings 0 1 5]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ldp_audit.audit import audit  # noqa: E402
from ldp_audit.mechanisms import Laplace  # noqa: E402
from tests.broken_mechanisms import known_broken  # noqa: E402


class ScaledLaplace:
    """Laplace with the noise of ``real`` epsilon, claiming ``claim`` (broken when real > claim)."""

    def __init__(self, claim: float, real: float) -> None:
        self.epsilon = claim
        self.real = Laplace(epsilon=real, clip=1.0)

    def candidate_pairs(self, dim: int):
        return self.real.candidate_pairs(dim)

    def privatize(self, x, rng):
        return self.real.privatize(x, rng)


def _mechanisms() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = [(type(m).__name__, m) for m in known_broken(1.0)]
    out.append(("Laplace eps 1.2 claiming 1 (mild)", ScaledLaplace(1.0, 1.2)))
    out.append(("Laplace eps 1 (correct)", Laplace(epsilon=1.0, clip=1.0)))
    return out


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    r = fn()
    return r, time.perf_counter() - w0, time.process_time() - c0


def bench(args: argparse.Namespace) -> dict:
    rows = []
    common = dict(samples=args.samples, confidence=0.95, dim=args.dim, float_bits=False,
                  profile=False, tradeoff=False)  # fmt: skip
    for name, mech in _mechanisms():
        per_seed = []
        for seed in range(args.seeds):
            rf, wf, cf = _timed(lambda m=mech, s=seed: audit(m, rng=s, **common))
            rs, ws, cs = _timed(lambda m=mech, s=seed: audit(m, rng=s, sequential=True, **common))
            per_seed.append(
                {
                    "seed": seed,
                    "fixed": {
                        "violation": rf.violation,
                        "bound": rf.epsilon_lower_bound,
                        "samples": rf.samples,
                        "wall_s": wf,
                        "cpu_s": cf,
                    },
                    "sequential": {
                        "violation": rs.violation,
                        "bound": rs.epsilon_lower_bound,
                        "samples": rs.samples,
                        "stages": len(rs.sequential.stages),
                        "stopped": rs.sequential.stopped,
                        "wall_s": ws,
                        "cpu_s": cs,
                    },
                }  # fmt: skip
            )
            f, q = per_seed[-1]["fixed"], per_seed[-1]["sequential"]
            print(
                f"{name:36s} seed {seed}: fixed {f['violation']!s:5s} {f['bound']:8.3f} "
                f"{f['samples']:>8d} {wf:6.2f}s | sequential {q['violation']!s:5s} "
                f"{q['bound']:8.3f} {q['samples']:>8d} ({q['stages']} st, {q['stopped']}) "
                f"{ws:6.2f}s",
                flush=True,
            )

        def med(key: str, which: str, ps: list = per_seed) -> float:
            return float(np.median([p[which][key] for p in ps]))

        rows.append(
            {
                "mechanism": name,
                "claimed_epsilon": float(mech.epsilon),
                "seeds": per_seed,
                "fixed_violations": sum(p["fixed"]["violation"] for p in per_seed),
                "sequential_violations": sum(p["sequential"]["violation"] for p in per_seed),
                "median_samples_fixed": med("samples", "fixed"),
                "median_samples_sequential": med("samples", "sequential"),
                "median_wall_fixed": med("wall_s", "fixed"),
                "median_wall_sequential": med("wall_s", "sequential"),
                "median_cpu_fixed": med("cpu_s", "fixed"),
                "median_cpu_sequential": med("cpu_s", "sequential"),
                "samples_ratio": med("samples", "fixed") / med("samples", "sequential"),
                "wall_ratio": med("wall_s", "fixed") / med("wall_s", "sequential"),
            }
        )
    return {
        "command": f"benchmarks/bench_audit_sequential.py --samples {args.samples} "
        f"--seeds {args.seeds} --dim {args.dim}",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other jobs",
        "rows": rows,
    }


def check_tightness(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_audit import _tightness_settings

    ref = json.loads(Path("benchmarks/results/bench_audit.json").read_text())
    n, conf = int(ref["samples_per_input"]), float(ref["confidence"])
    settings = _tightness_settings()
    picks = args.settings if args.settings else range(len(settings))
    out = []
    for k in picks:
        name, mech, pairs, true, _, _, _ = settings[k]
        want = next(r for r in ref["results"] if r["setting"] == name)
        seed0 = want["seeds"][0]
        r = audit(mech, pairs, samples=n, confidence=conf, rng=seed0, dim=1, profile=False)
        rs = audit(mech, pairs, samples=n, confidence=conf, rng=seed0, dim=1, profile=False,
                   float_bits=False, pool=False, tradeoff=False)  # fmt: skip
        got = (r.distribution.epsilon_lower_bound, rs.distribution.epsilon_lower_bound / true)
        exp = (want["lower_bound"], want["seed_ratios_without_pooling"][0])
        same = got == exp
        print(f"{name:36s} bound {got[0]!r} vs {exp[0]!r}; seed ratio {got[1]!r} vs {exp[1]!r}: "
              f"{'identical' if same else 'DIFFERENT'}", flush=True)  # fmt: skip
        out.append({"setting": name, "got": list(got), "expected": list(exp), "identical": same})
    return {
        "command": "benchmarks/bench_audit_sequential.py --check-tightness"
        + (" --settings " + " ".join(map(str, args.settings)) if args.settings else ""),
        "date": datetime.date.today().isoformat(),
        "checks": out,
        "all_identical": all(c["identical"] for c in out),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--dim", type=int, default=4)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--check-tightness", action="store_true")
    ap.add_argument("--settings", type=int, nargs="*", default=None)
    args = ap.parse_args()
    if args.check_tightness:
        out = check_tightness(args)
        path = args.json or Path("benchmarks/results/bench_audit_sequential_tightness_check.json")
    else:
        out = bench(args)
        path = args.json or Path("benchmarks/results/bench_audit_sequential.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
