"""Golden hashes of tiny DP-SGD dprl runs with gradient canaries (test_dprl_canary_golden).

``PYTHONPATH=. python tests/dprl_canary_golden.py`` prints the JSON written to
tests/data/dprl_canary_golden.json. It was first run on the trainer's own canary code (commit
76ddc30, before train dprl planted its canaries through :mod:`ldp_audit.opacus`), and rerun
with dtype-tagged entries (:mod:`tests.golden_machine`) after the integration had been checked
equal to it on the same machine; the test checks that every array of every run is still the
same, bit for bit (float arrays only on the golden's CPU family: tests/golden_machine.py).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from tests.golden_machine import digest, machine_signature

TINY_RF = dict(algo="reinforce", privacy="dpsgd", episodes=16, num_envs=4, hidden=16)
TINY_DQN = dict(algo="dqn", privacy="dpsgd", total_steps=400, learning_starts=100,
                buffer_size=200, batch_size=20, train_frequency=2, hidden=16)  # fmt: skip

CASES = {
    "reinforce": (dict(TINY_RF, canaries=6, store_updates=True), 0),
    "reinforce-clip": (dict(TINY_RF, canaries=40, clip=0.5, noise_multiplier=0.3), 5),
    "dqn-ghost": (dict(TINY_DQN, canaries=7, clip=0.5, store_updates=True), 1),
    "dqn-materialize": (
        dict(TINY_DQN, canaries=7, clip=0.5, per_sample="materialize", store_updates=True),
        2,
    ),
}


#: arrays the golden's version did not write (issue 36: the embedded audit records what the
#: one-run audit's noise, contribution and ledger tests read); every array it wrote is compared
NEWER_ARRAYS = ("batch_size", "charged", "noise_multiplier", "max_grad_norm",
                "expected_batch_size", "noise_sq", "noise_sketch", "noise_shift",
                "noise_shift_at", "noise_data", "noise_grain", "canary_joins")  # fmt: skip


def run_case(name: str) -> dict[str, str | int]:
    import torch

    from ldp_audit.rundir import read_npz
    from ldp_audit.training.dprl.config import DprlConfig
    from ldp_audit.training.dprl.trainer import train

    torch.set_num_threads(1)
    kw, seed = CASES[name]
    cfg = DprlConfig(**kw)
    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "run"
        res = train(cfg, seed=seed, run_dir=run)
        out: dict[str, str | int] = {"updates": int(res.updates)}
        for f in ("transcript.npz", "secrets.npz", "model.npz"):
            arrs = {k: v for k, v in read_npz(run, f).items() if k not in NEWER_ARRAYS}
            out[f"{f}:keys"] = ",".join(sorted(arrs))
            for k in sorted(arrs):
                out[f"{f}:{k}"] = digest(np.asarray(arrs[k]))
        from ldp_audit.accountant import Ledger

        led = Ledger(str(run / "ledger.sqlite"))
        try:
            out["ledger_rows"] = len(led.records("model"))
        finally:
            led.close()
        out["returns"] = digest(np.asarray(res.returns, dtype=np.float64))
    return out


if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    out = {n: run_case(n) for n in names}
    out["_machine"] = machine_signature()
    print(json.dumps(out, indent=1, sort_keys=True))
