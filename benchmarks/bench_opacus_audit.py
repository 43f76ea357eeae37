"""Overhead of ``CanaryAudit.attach`` on a user's Opacus loop (issue 26).

For a small MLP and a small CNN, the same loop (same seeds: data, initial weights, Poisson
sampling, noise) runs without and with the audit attached (the recommended 500 gradient canaries,
``ldp_audit.opacus.RECOMMENDED_CANARIES``); steps per
second of each (wall and process CPU), their ratio, and the time of ``finish()`` (writing the
run and the whole one-run audit: every test, white-box). Repeated ``--repeats`` times, each
repeat running the loop without and then with the audit on the same seed (interleaved, so that
a change of the machine's load hits both), the medians reported with the median of the
per-repeat ratios and their range. The wall time the audited loop spent charging the ledger
(one durable SQLite transaction per ``prepay`` updates) is measured separately
(``ledger_ms_per_step``), and the load average before and after is recorded (the machine is
shared). Goal: <= 1.3x the loop's own time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_opacus_audit.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ldp_audit.opacus import RECOMMENDED_CANARIES, CanaryAudit

warnings.filterwarnings("ignore")


def _model(kind: str) -> nn.Module:
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 10),
    )  # fmt: skip


def one(kind: str, audited: bool, steps: int, canaries: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2048, 1, 16, 16, generator=g)
    y = torch.randint(0, 10, (2048,), generator=g)
    torch.manual_seed(seed)
    model = _model(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(TensorDataset(x, y), batch_size=64, generator=g)
    model, opt, loader = PrivacyEngine().make_private(
        module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
        max_grad_norm=1.0, noise_generator=torch.Generator().manual_seed(seed + 1),
    )  # fmt: skip
    tmp = tempfile.TemporaryDirectory()
    audit = None
    if audited:
        audit = CanaryAudit(Path(tmp.name) / "run", canaries=canaries, seed=seed, delta=1e-5)
        opt = audit.attach(opt, data_loader=loader)
        charge, spent = audit._charge, [0.0]

        def timed_charge(o: object) -> None:  # the ledger's wall time, for the record
            t = time.perf_counter()
            charge(o)
            spent[0] += time.perf_counter() - t

        audit._charge = timed_charge
    done = 0
    w0, c0 = time.perf_counter(), time.process_time()
    while done < steps:
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            done += 1
            if done == steps:
                break
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    out = {"steps": done, "wall": wall, "cpu": cpu,
           "params": sum(p.numel() for p in model.parameters())}  # fmt: skip
    if audit is not None:
        f0 = time.perf_counter()
        res = audit.finish()
        out["finish_seconds"] = time.perf_counter() - f0
        out["ledger_seconds"] = spent[0]
        out["violation"] = bool(res.violation)
    tmp.cleanup()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--canaries", type=int, default=RECOMMENDED_CANARIES)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/bench_opacus_audit.json")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for kind in ("mlp", "cnn"):
        one(kind, False, 10, a.canaries, 0)  # warm up (imports, allocator)
        base, aud = [], []
        load0 = os.getloadavg()[0]
        for r in range(a.repeats):
            base.append(one(kind, False, a.steps, a.canaries, r))
            aud.append(one(kind, True, a.steps, a.canaries, r))
        load1 = os.getloadavg()[0]
        bw = statistics.median(d["wall"] for d in base)
        aw = statistics.median(d["wall"] for d in aud)
        bc = statistics.median(d["cpu"] for d in base)
        ac = statistics.median(d["cpu"] for d in aud)
        pw = [x["wall"] / b["wall"] for b, x in zip(base, aud, strict=True)]
        pc = [x["cpu"] / b["cpu"] for b, x in zip(base, aud, strict=True)]
        row = {
            "model": kind,
            "params": base[0]["params"],
            "steps": a.steps,
            "canaries": a.canaries,
            "steps_per_s_without": a.steps / bw,
            "steps_per_s_with": a.steps / aw,
            "ratio_wall": aw / bw,
            "ratio_cpu": ac / bc,
            "ratio_wall_per_repeat": [min(pw), statistics.median(pw), max(pw)],
            "ratio_cpu_per_repeat": [min(pc), statistics.median(pc), max(pc)],
            "ledger_ms_per_step": 1e3
            * statistics.median(d["ledger_seconds"] for d in aud)
            / a.steps,
            "load_average_1min": [load0, load1],
            "finish_seconds": statistics.median(d["finish_seconds"] for d in aud),
            "violations": sum(d["violation"] for d in aud),
        }
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    doc = {
        "command": "OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_opacus_audit.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {platform.processor() or '?'}, torch threads 1",
        "niceness": os.nice(0),  # > 0: run niced beside other jobs (the load is in each row)
        "repeats": a.repeats,
        "rows": rows,
    }
    Path(a.out).write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
