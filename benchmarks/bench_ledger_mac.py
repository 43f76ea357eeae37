"""Cost of the keyed ledger (schema 3, HMAC per agent and per head) against schema 2.

The schema-2 ledger of commit ``0e0e94e`` (unkeyed: SHA-256 chain, CRC-32 state) is loaded from
git into a temporary module, so both run in this process on the same data. In memory
(``Ledger(":memory:")``: no fsync, so the per-row code is all that is measured): CPU ms per
``charge_rows`` call of 10 and 1,000 agents, new agents every call or the same agents, and CPU ms
of ``states()`` of every agent afterwards (what ``spent_all`` and the report's loader read).
Best of 3. In a file the commit's fsyncs (about 25 ms here) dominate both.

Usage: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_ledger_mac.py [--old COMMIT]``
"""

from __future__ import annotations

import argparse
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


def _one(mod, per_call: int, calls: int, existing: bool) -> tuple[float, float]:  # noqa: ANN001
    led = mod.Ledger(":memory:")
    if existing:
        led.charge_rows([(f"a{i}", EVENT, "local") for i in range(per_call)])
    t = time.process_time()
    for c in range(calls):
        base = 0 if existing else (c + 1) * per_call
        led.charge_rows([(f"a{base + i}", EVENT, "local") for i in range(per_call)])
    charge = (time.process_time() - t) / calls
    led._all_states = None
    t = time.process_time()
    led.states()
    states = time.process_time() - t
    led.close()
    return charge * 1e3, states * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default="0e0e94e", help="commit of the schema-2 ledger")
    args = ap.parse_args()
    old = _load_old(args.old)
    for per_call, calls in ((10, 300), (1000, 20)):
        for existing in (False, True):
            r = {
                name: min(_one(mod, per_call, calls, existing) for _ in range(3))
                for name, mod in (("schema 2", old), ("schema 3", new))
            }
            o, n = r["schema 2"], r["schema 3"]
            kind = "same agents" if existing else "new agents "
            print(
                f"{per_call:>5} agents/call, {kind}: charge_rows {o[0]:.3f} -> {n[0]:.3f} CPU "
                f"ms/call ({n[0] / o[0]:.2f}x); states() of all {o[1]:.1f} -> {n[1]:.1f} CPU ms"
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
