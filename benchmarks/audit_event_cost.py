"""What the event search costs against a pre-registered event (``audit(..., event=...)``), and
whether the search's cost can be lowered soundly (issue 40). Three measurements:

* ``validity``: k-RR (epsilon 1, k 4) with its ratio-exactly-e^eps event {y = 0} for the pair
  (0, 1), 20,000 samples per input, confidence 0.95, seeds 0-999: how many bounds exceed the
  true epsilon (Clopper-Pearson and the joint Poisson test).
* ``krr``: k-RR at k = 32, epsilon 0.5, 10^6 samples per input, confidence 0.95, seeds 0-19: the
  default search, its variants (more events, a smaller selection share), the pre-registered
  {y = 0} for the pair (0, 1), and the joint test: mean / min / median of bound / claim.
* ``grr``: the head-to-head's GRR cells (k 25 / 200, epsilon 0.25 / 1 / 4 / 10) and SS at k 200,
  epsilon 4 / 10, 2 x 10^5 reports per input, confidence 0.995, seeds 0-4: mean bound / epsilon
  of LDP-Auditor's estimator, ours with their event pre-registered, ours searched (and variants).

    .venv/bin/python benchmarks/audit_event_cost.py            # all three (about 3 CPU minutes)
    .venv/bin/python benchmarks/audit_event_cost.py krr grr    # some of them

Writes benchmarks/results/audit_event_cost.json (the parts run) and prints each row.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit import mechanisms as m
from ldp_audit.audit import audit
from ldp_audit.stats import clopper_pearson_upper

_H2H = Path(__file__).resolve().parent / "ldp_auditor_head_to_head.py"


def validity() -> dict[str, Any]:
    mech, out = m.RandomizedResponse(epsilon=1.0, k=4), {}
    for test in ("clopper-pearson", "poisson"):
        b = np.array(
            [
                audit(
                    mech, samples=20_000, rng=s, event=([0], [1], [0]), ratio_test=test
                ).epsilon_lower_bound
                for s in range(1000)
            ]
        )
        f = int((b > 1.0).sum())
        out[test] = {
            "flagged": f,
            "of": 1000,
            "rate_upper_95": float(clopper_pearson_upper(f, 1000, 0.05)),
            "median_bound": float(np.median(b)),
            "max_bound": float(b.max()),
        }
        print("validity", test, out[test], flush=True)
    return out


def krr() -> dict[str, Any]:
    mech, out = m.RandomizedResponse(epsilon=0.5, k=32), {}
    fixed = {"event": ([0.0], [1.0], [0.0])}
    variants: dict[str, dict[str, Any]] = {
        "default": {},
        "max_events=3": {"max_events": 3},
        "max_events=4": {"max_events": 4},
        "selection_fraction=0.05": {"selection_fraction": 0.05},
        "pre-registered {y = 0}, pair (0, 1)": fixed,
        "pre-registered, ratio_test=poisson": {**fixed, "ratio_test": "poisson"},
        "ratio_test=poisson": {"ratio_test": "poisson"},
    }
    for name, kw in variants.items():
        v = np.array(
            [
                audit(mech, samples=1_000_000, rng=s, **kw).epsilon_lower_bound / 0.5
                for s in range(20)
            ]
        )
        out[name] = {
            "mean": round(float(v.mean()), 4),
            "min": round(float(v.min()), 4),
            "median": round(float(np.median(v)), 4),
            "at_least_0.97": int((v >= 0.97).sum()),
        }
        print("krr", name, out[name], flush=True)
    return out


def grr() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("ldp_auditor_head_to_head", _H2H)
    assert spec is not None and spec.loader is not None
    h2h = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(h2h)
    n, alpha, conf = 200_000, 0.01, 0.995
    variants = {
        "searched": {},
        "searched, max_events=3": {"max_events": 3},
        "searched, selection_fraction=0.05": {"selection_fraction": 0.05},
    }
    cells = [("GRR", e, k) for k in (25, 200) for e in (0.25, 1.0, 4.0, 10.0)]
    cells += [("SS", 4.0, 200), ("SS", 10.0, 200)]
    out = {}
    for proto, e, k in cells:
        mech = h2h.build(proto, e, k)
        v1, v2 = np.array([0.0]), np.array([float(k - 1)])
        res: dict[str, list[float]] = {"theirs": [], "fixed": [], **{v: [] for v in variants}}
        for s in range(5):
            res["theirs"].append(max(h2h.ldp_auditor_estimate(mech, n, alpha, s)[0], 0.0) / e)
            ev = (v1, v2, h2h.their_event(mech, s))
            r = audit(mech, samples=n, confidence=conf, rng=s, event=ev)
            res["fixed"].append(r.epsilon_lower_bound / e)
            for name, kw in variants.items():
                r = audit(mech, [(v1, v2)], samples=n, confidence=conf, rng=s, tradeoff=False, **kw)
                res[name].append(r.distribution.epsilon_lower_bound / e)  # type: ignore[union-attr]
        key = f"{proto} k {k} eps {e:g}"
        out[key] = {c: round(float(np.mean(v)), 4) for c, v in res.items()}
        print("grr", key, out[key], flush=True)
    return out


def main() -> None:
    parts = {"validity": validity, "krr": krr, "grr": grr}
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        return
    want = sys.argv[1:] or list(parts)
    bad = [w for w in want if w not in parts]
    if bad:
        raise SystemExit(f"unknown part(s) {bad}; choose from {list(parts)}")
    path = Path("benchmarks/results/audit_event_cost.json")
    out = json.loads(path.read_text()) if path.exists() else {}
    for w in want:
        t0 = time.process_time()
        out[w] = {"rows": parts[w](), "cpu_s": round(time.process_time() - t0, 1)}
    path.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
