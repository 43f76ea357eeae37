"""The reproduction's one-run audit table alone (correct and broken DP-SGD trainers).

Runs ``ldp_audit.training.dprl.reproduce_runs.audit_table`` (3 seeds of each correct audit
configuration, the four broken fixtures) and writes
``benchmarks/results/dprl_audit_table.json`` with wall and CPU time.

Usage::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dprl_audit_table.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from ldp_audit.rundir import to_jsonable
from ldp_audit.training.dprl.config import ReproduceSettings
from ldp_audit.training.dprl.reproduce_runs import audit_table

torch.set_num_threads(1)


def main() -> None:
    t, c = time.perf_counter(), time.process_time()
    rows = audit_table(ReproduceSettings(audit_canaries=800), progress=True)
    doc = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/dprl_audit_table.py",
        "wall_seconds": time.perf_counter() - t,
        "cpu_seconds": time.process_time() - c,
        "machine": "shared, loaded 2-core machine",
        "audits": rows,
    }
    out = Path("benchmarks/results/dprl_audit_table.json")
    out.write_text(json.dumps(to_jsonable(doc), indent=1, allow_nan=False))
    print(f"wall {doc['wall_seconds']:.0f} s, cpu {doc['cpu_seconds']:.0f} s; wrote {out}")


if __name__ == "__main__":
    main()
