"""CPU time of each ``CanaryAudit`` hook per step on the overhead benchmark's loops (issue 36).

Runs the MLP and CNN loops of ``benchmarks/bench_opacus_audit.py`` without and with the audit
(150 steps, the recommended 500 canaries, seed 0) and times, with ``time.process_time``, the
audit's per-step work: appending the canaries (``_add_canaries``), recording the released update
(``_record``: the copies into the recorder's block and, every ``BLOCK`` updates, inside it, the
block's projections and released noise, ``_flush``, also timed on its own; the last block's
flush at ``finish()`` is counted in ``_flush`` per step too). Prints one line per model (ms of
CPU per step).

    OMP_NUM_THREADS=1 nice -n 5 .venv/bin/python benchmarks/opacus_hook_costs.py
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_opacus_audit as bench  # noqa: E402

from ldp_audit.opacus import RECOMMENDED_CANARIES, CanaryAudit  # noqa: E402

warnings.filterwarnings("ignore")
HOOKS = ("_add_canaries", "_record")


def main() -> int:
    torch.set_num_threads(1)
    stats: dict[str, list[float]] = {}
    attach = CanaryAudit.attach

    def timed_attach(self: CanaryAudit, *a: Any, **k: Any) -> Any:
        opt = attach(self, *a, **k)
        for obj, name in [(self, h) for h in HOOKS] + [(self._rec, "_flush")]:
            f = getattr(obj, name)

            def timed(*aa: Any, _f: Any = f, _n: str = name, **kk: Any) -> Any:
                t = time.process_time()
                out = _f(*aa, **kk)
                stats.setdefault(_n, []).append(time.process_time() - t)
                return out

            setattr(obj, name, timed)
        return opt

    CanaryAudit.attach = timed_attach  # type: ignore[method-assign]
    for kind in ("mlp", "cnn"):
        stats.clear()
        base = bench.one(kind, False, 150, RECOMMENDED_CANARIES, 0)
        aud = bench.one(kind, True, 150, RECOMMENDED_CANARIES, 0)
        per = {k: f"{1000 * sum(v) / aud['steps']:.3f}" for k, v in stats.items()}
        print(f"{kind}: step without {1000 * base['cpu'] / base['steps']:.2f} ms, with "
              f"{1000 * aud['cpu'] / aud['steps']:.2f} ms; hooks (ms/step): {per}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
