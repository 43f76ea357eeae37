"""The audit gallery's second part (docs/audit-gallery.md): the protocols added for issue 40
(LDP-Auditor's SS, THE, SHE, BLH and the adaptive GRR-or-OUE oracle), the broken variants of
LDP-Auditor's paper, and the longitudinal (memoised) protocols (RAPPOR, dBitFlipPM, LOLOHA) next
to clients that re-draw their permanent response at every report.

    .venv/bin/python benchmarks/protocols_gallery.py [--samples 200000] [--out PATH]

Every audit, as in benchmarks/audit_gallery.py: ``audit(mech, samples=S, rng=0,
float_bits=False, tradeoff=False)`` at confidence 0.95 over the mechanism's candidate pairs,
with the statistics it ships. Writes JSON (one row per audit: claim, exact true epsilon, bound,
verdict, witness, CPU seconds) and prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from ldp_audit import mechanisms as m
from ldp_audit.audit import audit
from ldp_audit.rundir import to_jsonable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _row(section: str, name: str, mech: Any, true_eps: float, samples: int) -> dict[str, Any]:
    t0 = time.process_time()
    r = audit(mech, samples=samples, rng=0, float_bits=False, tradeoff=False)
    row = {
        "section": section,
        "name": name,
        "claimed": float(mech.epsilon),
        "true": true_eps,
        "bound": r.epsilon_lower_bound,
        "violation": bool(r.violation),
        "witness": r.witness.event if r.witness else None,
        "cpu_s": round(time.process_time() - t0, 2),
    }
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    import ldp_auditor_broken as b

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--out", default="benchmarks/results/protocols_gallery.json")
    args = ap.parse_args()
    n = args.samples
    start, wall = time.process_time(), time.perf_counter()
    rows = []
    for eps in (1.0, 4.0):
        for name, mech in (
            ("SubsetSelection", m.SubsetSelection(eps, 8)),
            ("ThresholdHistogramEncoding", m.ThresholdHistogramEncoding(eps, 8)),
            ("SummationHistogramEncoding", m.SummationHistogramEncoding(eps, 8)),
            ("BinaryLocalHashing", m.BinaryLocalHashing(eps, 8)),
            ("AdaptiveFrequencyOracle (k 8)", m.AdaptiveFrequencyOracle(eps, 8)),
            ("AdaptiveFrequencyOracle (k 200)", m.AdaptiveFrequencyOracle(eps, 200)),
        ):
            rows.append(_row("correct", name, mech, eps, n))
    for name, mech, true in (
        ("SUE of pure-LDP 1.1.2", b.PureLdpSue(1.0, 8), b.PureLdpSue(1.0, 8).true_epsilon),
        ("OUE of pure-LDP 1.1.2", b.PureLdpOue(1.0, 8), b.PureLdpOue(1.0, 8).true_epsilon),
        ("local hashing only (g 2)", b.LocalHashingOnly(4.0, 25, g=2), math.inf),
        ("local hashing only (g 10)", b.LocalHashingOnly(4.0, 25, g=10), math.inf),
    ):
        rows.append(_row("broken", name, mech, true, n))
    for t in (1, 8, 32):
        good = m.MemoisedRappor(k=4, reports=t)
        rows.append(_row("longitudinal", f"MemoisedRappor, {t} reports", good, good.epsilon, n))
        bad = b.RedrawingRappor(k=4, reports=t)
        rows.append(
            _row("longitudinal", f"re-drawing RAPPOR, {t} reports", bad, bad.true_epsilon, n)
        )
    for t in (1, 4):
        good = m.DBitFlipPM(2.0, 8, d=2, reports=t)
        rows.append(_row("longitudinal", f"DBitFlipPM (eps 2, d 2), {t} reports", good, 2.0, n))
        bad = b.RedrawingDBitFlip(2.0, 8, d=2, reports=t)
        rows.append(
            _row("longitudinal", f"re-drawing dBitFlip, {t} reports", bad, bad.true_epsilon, n)
        )
    for t in (1, 8, 32):
        good = m.Loloha(2.0, 0.5, 4, reports=t)
        rows.append(_row("longitudinal", f"Loloha (eps_perm 2, eps_1 0.5, g 2), {t} reports",
                         good, good.epsilon, n))  # fmt: skip
        bad = b.RedrawingLoloha(2.0, 0.5, 4, reports=t)
        rows.append(
            _row("longitudinal", f"re-drawing LOLOHA, {t} reports", bad, bad.true_epsilon, n)
        )
    out = {
        "command": " ".join(["benchmarks/protocols_gallery.py", *sys.argv[1:]]),
        "samples": n,
        "cpu_s": round(time.process_time() - start, 1),
        "wall_s": round(time.perf_counter() - wall, 1),
        "rows": rows,
    }
    Path(args.out).write_text(json.dumps(to_jsonable(out), indent=1, allow_nan=False) + "\n")
    print("| section | mechanism | claimed eps | true eps | bound | bound / claim | violation |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(
            f"| {r['section']} | {r['name']} | {r['claimed']:.3f} | {r['true']:.3f} | "
            f"{r['bound']:.3f} | {r['bound'] / r['claimed']:.2f} | "
            f"{'**yes**' if r['violation'] else 'no'} |"
        )
    print(f"cpu {out['cpu_s']} s, wall {out['wall_s']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
