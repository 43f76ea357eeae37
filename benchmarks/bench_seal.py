"""Cost of sealing and checking analysis files (issue 38).

``write_artifact`` of a 100 KB artefact into a finished run (the file, and its entry in
``analyses.json`` under the ledger key), and ``verify_run`` of a run with 0 vs 20 sealed
artefacts, and a read of ``transcript.npz`` (``RunDir.arrays``) after the check. Wall time,
medians. Usage: ``python benchmarks/bench_seal.py [ROWS]`` (default 10^4
charges; the key is a temporary one unless ``LDP_AUDIT_KEY_FILE`` is set).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _make(path: Path, rows: int) -> Path:
    from ldp_audit.accountant import Accountant, LaplaceEvent
    from ldp_audit.rundir import RunWriter

    w = RunWriter(path, algorithm="toy", config={}, seed=0)
    acc = Accountant(w.open_ledger())
    acc.charge_many([(f"a{i % 100}", LaplaceEvent(1.0)) for i in range(rows)])
    acc.ledger.close()
    w.write_npz("transcript.npz", {"agent": np.arange(rows)})
    w.finish()
    return path


def _verify_ms(path: Path) -> float:
    from ldp_audit.rundir import verify_run

    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        res = verify_run(path)
        times.append(time.perf_counter() - t0)
        if not res.ok:
            raise SystemExit(f"{path} does not verify: {res.problems}")
    return 1e3 * statistics.median(times)


def _read_ms(path: Path) -> float:
    from ldp_audit.rundir import RunDir

    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        RunDir(path).arrays("transcript.npz", "agent")
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main(rows: int) -> dict[str, float]:
    from ldp_audit.rundir import write_artifact

    root = Path(tempfile.mkdtemp())
    sealed = _make(root / "sealed", rows)
    doc = {"x": list(range(12000))}  # about 100 KB of JSON
    writes = []
    for i in range(20):
        t0 = time.perf_counter()
        write_artifact(sealed, f"attack_a{i}.json", doc)
        writes.append(time.perf_counter() - t0)
    bare = _make(root / "bare", rows)
    return {
        "rows": rows,
        "write_artifact_100KB_median_ms": 1e3 * statistics.median(writes),
        "verify_run_0_artefacts_ms": _verify_ms(bare),
        "verify_run_20_artefacts_ms": _verify_ms(sealed),
        "read_transcript_after_verify_ms": _read_ms(bare),
    }


if __name__ == "__main__":
    os.environ.setdefault("LDP_AUDIT_KEY_FILE", str(Path(tempfile.mkdtemp()) / "ledger.key"))
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000), indent=1))
