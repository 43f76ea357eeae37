"""Cost of the keyed ledger (schema 3, HMAC per agent and per head) against schema 2.

The schema-2 ledger of commit ``0e0e94e`` (unkeyed: SHA-256 chain, CRC-32 state) is loaded from
git into a temporary module, so both run in this process on the same data. In memory
(``Ledger(":memory:")``: no fsync, so the per-row code is all that is measured): CPU ms per
``charge_rows`` call of 10 and 1,000 agents, new agents every call or the same agents, and CPU ms
of ``states()`` of every agent afterwards (what ``spent_all`` and the report's loader read).
Best of 3. In a file the commit's fsyncs (about 25 ms here) dominate both.

Usage: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_ledger_mac.py [--old COMMIT]``

``--old cf616fc --names "one file,store interface" --tally --one --repeats 7`` compares the
ledger before it was split into a store interface and the rules above it (the last commit of
the single-file ``ledger.py``, same schema 3) with today's, adds ``TallyLedger`` rows (counts
only) and 1-agent calls, best of 7 interleaved (``gc.collect()`` before each timed run).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ldp_audit.accountant.ledger as new

EVENT = json.dumps({"epsilon": 1.0, "type": "laplace"})


def _load_old(commit: str):  # noqa: ANN202 - a module
    src = subprocess.run(
        ["git", "show", f"{commit}:ldp_audit/accountant/ledger.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    tmp = Path(tempfile.mkdtemp()) / "old_ledger.py"
    tmp.write_text(src)
    spec = importlib.util.spec_from_file_location("old_ledger", tmp)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _one(
    mod, per_call: int, calls: int, existing: bool, tally: bool = False
) -> tuple[float, float]:  # noqa: ANN001, E501
    led = mod.TallyLedger() if tally else mod.Ledger(":memory:")
    if existing:
        led.charge_rows([(f"a{i}", EVENT, "local") for i in range(per_call)])
    gc.collect()  # the previous run's garbage is not collected during this one's timing
    t = time.process_time()
    for c in range(calls):
        base = 0 if existing else (c + 1) * per_call
        led.charge_rows([(f"a{base + i}", EVENT, "local") for i in range(per_call)])
    charge = (time.process_time() - t) / calls
    if not tally:
        led._all_states = None
    t = time.process_time()
    led.states()
    states = time.process_time() - t
    led.close()
    return charge * 1e3, states * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="0e0e94e", help="commit of the old ledger (schema 2)")
    ap.add_argument(
        "--names", default="schema 2,schema 3", help="labels of the old and the new ledger"
    )
    ap.add_argument("--tally", action="store_true", help="also TallyLedger (old vs new)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats (best of N)")
    ap.add_argument("--one", action="store_true", help="also 1 agent per call")
    args = ap.parse_args()
    old = _load_old(args.old)
    label_old, label_new = args.names.split(",")
    print(f"old = {label_old} ({args.old}), new = {label_new} (working tree)")
    for tally in (False, True) if args.tally else (False,):
        what = "TallyLedger()" if tally else 'Ledger(":memory:")'
        sizes = ((1, 400),) if args.one else ()
        for per_call, calls in (*sizes, (10, 300), (1000, 20)):
            for existing in (False, True):
                r = {name: [] for name in ("old", "new")}
                for _ in range(args.repeats):  # interleaved, best of N
                    for name, mod in (("old", old), ("new", new)):
                        r[name].append(_one(mod, per_call, calls, existing, tally))
                o, n = min(r["old"]), min(r["new"])
                kind = "same agents" if existing else "new agents "
                print(
                    f"{what} {per_call:>5} agents/call, {kind}: charge_rows {o[0]:.3f} -> "
                    f"{n[0]:.3f} CPU ms/call ({n[0] / o[0]:.2f}x); states() of all "
                    f"{o[1]:.1f} -> {n[1]:.1f} CPU ms"
                )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
