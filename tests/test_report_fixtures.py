"""Synthetic run directories for the report tests (layout of docs/interfaces.md)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.report import LedgerStats


def make_run(
    path: Path,
    *,
    trials: int = 2,
    agents: int = 3,
    submissions: int = 60,
    d: int = 4,
    epsilon: float = 5.0,
    seed: int = 0,
    audit: list[dict[str, Any]] | None = None,
    attacks: dict[str, dict[str, Any]] | None = None,
    ledger: str | None = "bare",
) -> Path:
    """Write a small, well-formed run directory.

    ``ledger``: "bare" (an SQLite file that is no ledger: pass LedgerStats to build_report),
    "real" (charged through ``ldp_audit.accountant``, one LaplaceEvent(epsilon) per submission),
    or None (no ledger file).
    """
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    n = trials * submissions
    trial = np.repeat(np.arange(trials), submissions).astype(np.int64)
    agent = np.tile(np.arange(submissions) % agents, trials).astype(np.int64)
    sub = np.tile(np.arange(submissions), trials).astype(np.int64)
    thetas = rng.normal(size=(n + trials, d))
    np.savez(
        path / "transcript.npz",
        trial=trial,
        agent=agent,
        submission=sub,
        theta_index=np.arange(n, dtype=np.int64),
        report=rng.laplace(size=(n, d)),
        score=rng.uniform(10, 200, size=n),
        thetas=thetas,
    )
    np.savez(path / "secrets.npz", gravity=rng.choice([9.7, 9.8, 9.9], size=n))
    np.savez(path / "model.npz", theta=rng.normal(size=(trials, d)))
    zeta = [
        np.minimum(200.0, 20 + 4 * np.arange(submissions) + 5 * t).tolist() for t in range(trials)
    ]
    (path / "metrics.json").write_text(json.dumps({"zeta": zeta, "note": "synthetic"}))
    cfg = {
        "algorithm": "pgc-a3c",
        "config": {"agents": agents, "max_submissions": submissions, "gamma": 0.99},
        "mechanism": {"name": "laplace", "epsilon": epsilon, "clip": 0.01},
        "seed": seed,
        "versions": {"ldp_audit": "0.1.0", "numpy": np.__version__},
        "created": "2026-11-22T04:00:00+00:00",
    }
    (path / "config.json").write_text(json.dumps(cfg))
    if ledger == "real":
        from ldp_audit.accountant import Accountant, LaplaceEvent

        acc = Accountant(ledger=str(path / "ledger.sqlite"))
        acc.charge_many(
            [(f"{t}/{a}", LaplaceEvent(epsilon)) for t, a in zip(trial, agent, strict=True)]
        )
        acc.close()
    elif ledger == "bare":
        con = sqlite3.connect(path / "ledger.sqlite")
        con.execute("CREATE TABLE t (x INTEGER)")
        con.commit()
        con.close()
    if audit is not None:
        (path / "audit.json").write_text(json.dumps(audit))
    for name, a in (attacks or {}).items():
        (path / f"attack_{name}.json").write_text(json.dumps(a))
    return path


def ledger_for(
    path: Path,
    *,
    per_submission: float = 5.0,
    best_factor: float = 1.0,
    budget: float | None = None,
    drop: int = 0,
) -> LedgerStats:
    """Per-agent spend consistent with make_run's transcript (``drop`` agents left uncharged)."""
    tr = np.load(path / "transcript.npz")
    ids, counts = np.unique(
        [f"{t}/{a}" for t, a in zip(tr["trial"], tr["agent"], strict=True)], return_counts=True
    )
    ids, counts = ids[drop:], counts[drop:]
    basic = counts * per_submission
    return LedgerStats(
        agents=[str(i) for i in ids],
        basic=basic.astype(float),
        best=basic * best_factor,
        method=["basic" if best_factor == 1.0 else "advanced"] * len(ids),
        delta=0.0,
        budget=budget,
    )


GOOD_AUDIT = {
    "mechanism": "laplace",
    "claimed_epsilon": 5.0,
    "exact_epsilon": 5.0,
    "epsilon_lower_bound": 4.1,
    "confidence": 0.95,
    "samples": 200000,
    "witness": {"pair": [[0.005, 0.0], [-0.005, 0.0]], "event": "y[0] > 0.004"},
    "seconds": 1.5,
    "violation": False,
}

GOOD_ATTACK = {
    "attack": "dynamics",
    "mechanism": {"name": "laplace", "epsilon": 5.0},
    "epsilon": 5.0,
    "reports_per_agent": 1,
    "k": 3,
    "n": 300,
    "correct": 110,
    "accuracy": 110 / 300,
    "accuracy_ci": [0.31, 0.42],
    "ceiling": 0.9867,
    "composed_epsilon": 5.0,
    "epsilon_lower_bound": 0.0,
    "confidence": 0.95,
    "chance": 1 / 3,
    "auc": None,
    "tpr_at_fpr": {},
    "advantage": 0.05,
    "violation": False,
}
