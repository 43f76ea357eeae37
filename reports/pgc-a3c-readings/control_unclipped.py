"""Control: the non-private baseline with NO clip diverges (why the engine keeps C = 10).

The paper gives its non-private A3C no clip. Plain SGD at eta = 0.5 (eq. 22) on the unclipped
summed episode loss drives theta to non-finite values; the agent then refuses the non-finite
gradient (nothing non-finite is ever released) and the run stops with an error. For each of 12
seeds (one trial each, sampled acting, |B| = 1) this finds the first submission count at which
the run fails (bisection over ``max_submissions``; every run is deterministic from its seed),
and writes ``control_unclipped_<acting>.json`` beside this script.

    .venv/bin/python reports/pgc-a3c-readings/control_unclipped.py     # about 1-3 minutes
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ldp_audit.errors import LdpAuditError
from ldp_audit.training.pgc_a3c import PgcA3cConfig, train

HERE = Path(__file__).resolve().parent
HORIZON = 400
SEEDS = range(12)
NO_CLIP = 1e300  # an L1 bound no gradient reaches: the clip never acts


def fails(seed: int, n: int, acting: str) -> str | None:
    """The error message if the run with ``max_submissions = n`` fails, else None."""
    cfg = PgcA3cConfig(mechanism="none", clip=NO_CLIP, trials=1, max_submissions=n, acting=acting)
    try:
        train(cfg, seed=seed)
    except (LdpAuditError, ValueError, FloatingPointError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--acting", choices=("argmax", "sample"), default="sample")
    a = p.parse_args()
    t0 = time.perf_counter()
    rows = []
    for seed in SEEDS:
        err = fails(seed, HORIZON, a.acting)
        if err is None:
            rows.append({"seed": seed, "diverged": False, "first_failing_max_submissions": None})
            print(f"seed {seed}: no failure within {HORIZON} submissions")
            continue
        lo, hi = 0, HORIZON  # fails(hi), not fails(lo)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fails(seed, mid, a.acting) is None:
                lo = mid
            else:
                hi = mid
        msg = fails(seed, hi, a.acting)
        rows.append(
            {"seed": seed, "diverged": True, "first_failing_max_submissions": hi, "error": msg}
        )
        print(f"seed {seed}: fails at max_submissions = {hi} ({msg[:100]})")
    out = {
        "what": "non-private baseline, no clip (L1 bound 1e300), eta 0.5, |B| = 1, one trial "
        f"per seed, acting={a.acting}; first max_submissions at which training fails",
        "horizon": HORIZON,
        "diverged": sum(r["diverged"] for r in rows),
        "seeds": len(rows),
        "rows": rows,
        "seconds": time.perf_counter() - t0,
        "command": f"python reports/pgc-a3c-readings/control_unclipped.py --acting {a.acting}",
    }
    (HERE / f"control_unclipped_{a.acting}.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{out['diverged']}/{out['seeds']} diverged; {out['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
