"""Head to head with LDP-Auditor (Arcolezi & Gambs, PETS 2024; github.com/hharcolezi/ldp-audit)
on its grid of pure-LDP protocols, at equal samples, plus the broken variants of its paper.

LDP-Auditor's estimator, reimplemented here from its paper and code (no code copied): for a
protocol, inputs v1 = 0 and v2 = k - 1, ``nb_trials`` reports of each; a fixed "attack" guesses
the input from a report (GRR: the report; SS / SUE / OUE / THE: a uniform pick among the items
the report supports, or among all k when it supports none; SHE: the maximum-likelihood item,
ties broken uniformly; BLH / OLH: a uniform pick among the items hashing to the report, or among
all k); the event is {guess = v1}. With TP and FP its counts under v1 and v2,

    eps_emp = ln(CP_lower(TP) / CP_upper(FP)),

each Clopper-Pearson bound from ``statsmodels.proportion_confint(count, n, alpha / 2, 'beta')``
(a two-sided interval at level alpha / 2, so each one-sided bound holds at alpha / 4 and the
estimate's error probability is alpha / 2; alpha = 0.01 in their experiments: 0.995).

This auditor, twice, at the same pair, the same number of reports per input and the same error
probability: *searched*, ``audit(mech, pairs=[(v1, v2)], samples=nb_trials, confidence=0.995,
rng=seed, tradeoff=False)`` (its event search, its shipped statistics, both verdicts); and
*fixed*, ``audit(mech, samples=nb_trials, confidence=0.995, rng=seed, event=(v1, v2, S))`` with
S their very event pre-registered (:func:`their_event`; every report counts it, the whole alpha
on it: on the same counts that is their formula, ``theirs_on_fixed_counts`` in the JSON).

    .venv/bin/python benchmarks/ldp_auditor_head_to_head.py               # reduced grid
    .venv/bin/python benchmarks/ldp_auditor_head_to_head.py --full        # their grid

Each finished cell is printed to stderr as one JSON line; ``--resume LOG`` reuses the cells of
such a log (same samples per input) and runs the rest.

Reduced grid: eps {0.25, 1, 4, 10}, k {25, 200}, 2 x 10^5 reports per input, seed 0 (170 CPU-s
measured; ``--samples 1000000``: about 14 CPU minutes). Full grid (their experiment_1.py): eps
{0.25, 0.5, 0.75, 1, 2, 4, 6, 10}, k {25, 50, 100, 150, 200}, 10^6 reports per input, seeds 0-4
(1,600 cells; hours on 2 cores). Writes JSON and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit import mechanisms as m
from ldp_audit.audit import audit
from ldp_audit.rundir import to_jsonable
from ldp_audit.stats import clopper_pearson_lower, clopper_pearson_upper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

PROTOCOLS = ("GRR", "SS", "SUE", "OUE", "THE", "SHE", "BLH", "OLH")
CHUNK = 20_000


def build(protocol: str, eps: float, k: int) -> Any:
    return {
        "GRR": lambda: m.RandomizedResponse(epsilon=eps, k=k),
        "SS": lambda: m.SubsetSelection(epsilon=eps, k=k),
        "SUE": lambda: m.SymmetricUnaryEncoding(epsilon=eps, k=k),
        "OUE": lambda: m.OptimizedUnaryEncoding(epsilon=eps, k=k),
        "THE": lambda: m.ThresholdHistogramEncoding(epsilon=eps, k=k),
        "SHE": lambda: m.SummationHistogramEncoding(epsilon=eps, k=k),
        "BLH": lambda: m.BinaryLocalHashing(epsilon=eps, k=k),
        "OLH": lambda: m.OptimalLocalHashing(epsilon=eps, k=k),
    }[protocol]()


def _pick(hit: np.ndarray, size: np.ndarray, k: int, u: np.ndarray) -> np.ndarray:
    """{uniform pick among the supported items = v1}: v1 supported and u < 1/size; nothing
    supported: a uniform pick among all k."""
    return np.where(size > 0, hit & (u * np.maximum(size, 1) < 1.0), u * k < 1.0)


def attack_hits(mech: Any, y: np.ndarray, u: np.ndarray) -> np.ndarray:
    """LDP-Auditor's event {guess = v1 = 0} for each report."""
    k = mech.k
    if isinstance(mech, m.RandomizedResponse):
        return y[:, 0] == 0
    if isinstance(mech, m.SubsetSelection):
        return _pick(y[:, 0] == 1, np.full(len(y), mech.omega), k, u)
    if isinstance(mech, (m.SymmetricUnaryEncoding, m.OptimizedUnaryEncoding)):
        return _pick(y[:, 0] == 1, y.sum(axis=1), k, u)
    if isinstance(mech, m.ThresholdHistogramEncoding):
        s = y > mech.theta
        return _pick(s[:, 0], s.sum(axis=1), k, u)
    if isinstance(mech, m.SummationHistogramEncoding):
        # the Laplace likelihood of item v is prop. to exp(eps (clip(y_v, 0, 1) - 1/2)) times a
        # factor common to all v: argmax = the items with the largest clip(y_v, 0, 1)
        c = np.clip(y, 0.0, 1.0)
        top = c.max(axis=1)
        ties = (c == top[:, None]).sum(axis=1)
        return _pick(c[:, 0] == top, ties, k, u)
    if isinstance(mech, m.OptimalLocalHashing):  # BLH, OLH, LHO
        g = mech.hash_range
        size = np.zeros(len(y), dtype=np.int64)
        for v in range(k):
            size += m.olh_hash(y[:, 1], v, g) == y[:, 0]
        return _pick(m.olh_hash(y[:, 1], 0, g) == y[:, 0], size, k, u)
    raise TypeError(type(mech).__name__)


def ldp_auditor_estimate(
    mech: Any, n: int, alpha: float, seed: int, delta: float = 0.0
) -> tuple[float, int, int]:
    """Their eps_emp at n reports per input (our privatize, their attack and estimator)."""
    rng = np.random.default_rng([seed, 40])
    counts = []
    for v in (0, mech.k - 1):
        hits = 0
        for start in range(0, n, CHUNK):
            size = min(CHUNK, n - start)
            y = mech.privatize(np.full((size, 1), float(v)), rng)
            hits += int(attack_hits(mech, y, rng.random(size)).sum())
        counts.append(hits)
    tp, fp = counts
    tpr = float(clopper_pearson_lower(tp, n, alpha / 4.0))
    fpr = float(clopper_pearson_upper(fp, n, alpha / 4.0))
    with np.errstate(divide="ignore"):
        return float(np.log((tpr - delta) / fpr)) if tpr > delta else -math.inf, tp, fp


def their_event(mech: Any, seed: int) -> Any:
    """Their attack's event {guess = v1} pre-registered for ``audit(event=...)``: GRR's output
    set {0}; for the others a callable, randomised by its own Generator (independent of the
    reports, so the event stays one fixed Bernoulli per report)."""
    if isinstance(mech, m.RandomizedResponse):
        return [0.0]
    g = np.random.default_rng([seed, 41])

    def guess_is_v1(y: np.ndarray, x: np.ndarray, x2: np.ndarray) -> np.ndarray:
        return attack_hits(mech, y, g.random(len(y)))

    return guess_is_v1


def ours(mech: Any, n: int, confidence: float, seed: int) -> dict[str, Any]:
    v1, v2 = np.array([0.0]), np.array([float(mech.k - 1)])
    f = audit(
        mech, samples=n, confidence=confidence, rng=seed, event=(v1, v2, their_event(mech, seed))
    )
    w = f.witness
    r = audit(mech, [(v1, v2)], samples=n, confidence=confidence, rng=seed, tradeoff=False)
    # their formula on the fixed column's counts: the same number (alpha / 4 on each side)
    with np.errstate(divide="ignore"):
        same = float(
            np.log(
                clopper_pearson_lower(w.k1, n, (1 - confidence) / 2)
                / clopper_pearson_upper(w.k2, n, (1 - confidence) / 2)
            )
        )
    return {
        "ours_fixed": f.epsilon_lower_bound,
        "ours_fixed_counts": [w.k1, w.k2],
        "theirs_on_fixed_counts": max(same, 0.0),
        "ours": r.distribution.epsilon_lower_bound,
        "ours_implementation": r.implementation.epsilon_lower_bound
        if r.implementation is not None
        else None,
        "ours_violation": bool(r.violation),
        "ours_witness": r.witness.event if r.witness else None,
    }


#: rows of an earlier run read back by ``--resume`` (its stderr log), by (protocol, eps, k, seed)
DONE: dict[tuple[str, float, int, int], dict[str, Any]] = {}


def cell(mech: Any, name: str, n: int, alpha: float, seed: int, **extra: Any) -> dict[str, Any]:
    key = (name, float(mech.epsilon), mech.k, seed)
    if key in DONE and DONE[key]["samples"] == n:
        print(json.dumps(DONE[key]), file=sys.stderr, flush=True)
        return DONE[key]
    t0 = time.process_time()
    theirs, tp, fp = ldp_auditor_estimate(mech, n, alpha, seed)
    t1 = time.process_time()
    row = {
        "protocol": name,
        "epsilon": float(mech.epsilon),
        "k": mech.k,
        "seed": seed,
        "samples": n,
        "theirs": theirs,
        "theirs_tp_fp": [tp, fp],
        **ours(mech, n, 1.0 - alpha / 2.0, seed),
        "cpu_s_theirs": round(t1 - t0, 2),
        "cpu_s_ours": round(time.process_time() - t1, 2),
        **extra,
    }
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def broken_cells(n: int, alpha: float, seed: int) -> list[dict[str, Any]]:
    import ldp_auditor_broken as b

    rows = []
    for eps in (0.25, 1.0, 4.0):
        for cls, name in (
            (b.PureLdpSue, "SUE (pure-LDP 1.1.2)"),
            (b.PureLdpOue, "OUE (pure-LDP 1.1.2)"),
        ):
            mech = cls(eps, 25)
            rows.append(cell(mech, name, n, alpha, seed, true_epsilon=mech.true_epsilon))
    for g in (2, 5, 10):
        mech = b.LocalHashingOnly(4.0, 25, g=g)
        rows.append(cell(mech, f"LHO (g = {g})", n, alpha, seed, true_epsilon=math.inf))
    return rows


def table(rows: list[dict[str, Any]], epsilons: list[float]) -> str:
    head = "| protocol | k | " + " | ".join(f"eps {e:g}" for e in epsilons) + " |"
    lines = [head, "|---|---:|" + "---:|" * len(epsilons)]
    keys = sorted(
        {(r["protocol"], r["k"]) for r in rows}, key=lambda t: (PROTOCOLS.index(t[0]), t[1])
    )
    for proto, k in keys:
        cells = []
        for e in epsilons:
            got = [r for r in rows if r["protocol"] == proto and r["k"] == k and r["epsilon"] == e]
            if not got:
                cells.append("")
                continue
            o, f, t = (
                np.mean([max(r[c], 0.0) for r in got]) / e for c in ("ours", "ours_fixed", "theirs")
            )
            mark = ("" if o >= t else " *") + ("" if f >= t else " +")
            cells.append(f"{o:.3f} / {f:.3f} / {t:.3f}{mark}")
        lines.append(f"| {proto} | {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="their full grid (hours)")
    ap.add_argument("--samples", type=int, default=None, help="reports per input")
    ap.add_argument("--seeds", type=int, default=None, help="seeds 0..S-1")
    ap.add_argument("--alpha", type=float, default=0.01, help="their alpha (0.01)")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS))
    ap.add_argument("--no-broken", action="store_true")
    ap.add_argument("--out", default="benchmarks/results/ldp_auditor_head_to_head.json")
    ap.add_argument("--resume", help="an earlier run's stderr log: its finished cells are reused")
    args = ap.parse_args()
    for line in Path(args.resume).read_text().splitlines() if args.resume else ():
        if line.startswith("{"):
            r = json.loads(line)
            DONE[(r["protocol"], r["epsilon"], r["k"], r["seed"])] = r
    if args.full:
        eps_grid, k_grid = [0.25, 0.5, 0.75, 1.0, 2.0, 4.0, 6.0, 10.0], [25, 50, 100, 150, 200]
        n, seeds = args.samples or 1_000_000, args.seeds or 5
    else:
        eps_grid, k_grid = [0.25, 1.0, 4.0, 10.0], [25, 200]
        n, seeds = args.samples or 200_000, args.seeds or 1
    protos = [p for p in args.protocols.split(",") if p]
    start = time.process_time()
    wall = time.perf_counter()
    rows = [
        cell(build(p, e, k), p, n, args.alpha, s)
        for s in range(seeds)
        for k in k_grid
        for e in eps_grid
        for p in protos
    ]
    broken = [] if args.no_broken else broken_cells(n, args.alpha, 0)
    out = {
        "command": " ".join(["benchmarks/ldp_auditor_head_to_head.py", *sys.argv[1:]]),
        "samples_per_input": n,
        "seeds": seeds,
        "alpha": args.alpha,
        "confidence_ours": 1.0 - args.alpha / 2.0,
        "cpu_s": round(time.process_time() - start, 1),
        "wall_s": round(time.perf_counter() - wall, 1),
        "rows": rows,
        "broken": broken,
    }
    Path(args.out).write_text(json.dumps(to_jsonable(out), indent=1, allow_nan=False) + "\n")
    for c, sym in (("ours", "*"), ("ours_fixed", "+")):
        below = sum(r[c] < max(r["theirs"], 0.0) for r in rows)
        print(f"{c}: >= theirs in {len(rows) - below} of {len(rows)} cells ({sym}: below)")
    print(table(rows, eps_grid))
    if broken:
        print("\n| variant | claim | true | ours | flagged | theirs | flagged |")
        print("|---|---:|---:|---:|---|---:|---|")
        for r in broken:
            print(
                f"| {r['protocol']} | {r['epsilon']:g} | {r['true_epsilon']:.3f} | "
                f"{r['ours']:.3f} | {'yes' if r['ours_violation'] else 'no'} | "
                f"{r['theirs']:.3f} | {'yes' if r['theirs'] > r['epsilon'] else 'no'} |"
            )
    print(f"\ncpu {out['cpu_s']} s, wall {out['wall_s']} s", file=sys.stderr)


if __name__ == "__main__":
    main()
