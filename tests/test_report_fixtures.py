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


def audit_entry(**kw: Any) -> dict[str, Any]:
    """An audit.json entry in the format AuditResult.to_dict() writes, with one distribution
    verdict carrying the entry's bound, claim and witness (``kw`` overrides the good audit's)."""
    e = {
        "mechanism": "laplace",
        "claimed_epsilon": 5.0,
        "exact_epsilon": 5.0,
        "epsilon_lower_bound": 4.1,
        "confidence": 0.95,
        "samples": 200000,
        "witness": {"pair": [[0.005, 0.0], [-0.005, 0.0]], "event": "y[0] > 0.004"},
        "seconds": 1.5,
        **kw,
    }
    e.setdefault("violation", e["epsilon_lower_bound"] > e["claimed_epsilon"])
    keys = ("epsilon_lower_bound", "claimed_epsilon", "violation", "witness")
    verdict = {"kind": "distribution", **{k: e[k] for k in keys}, "consequence": ""}
    return {**e, "verdicts": {"distribution": verdict}}


GOOD_AUDIT = audit_entry()

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


# ---------------------------------------------------------------- one small run per system
#: the systems whose run layout :func:`make_system_run` writes
SYSTEMS = ("pgc-a3c", "flower", "dprl", "fedrl", "frd")


def _json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj))


def _pgc_transcript(path: Path, agent: np.ndarray, d: int = 4) -> None:
    n = agent.size
    rng = np.random.default_rng(0)
    np.savez(
        path / "transcript.npz",
        trial=np.zeros(n, np.int64),
        agent=agent.astype(np.int64),
        submission=np.arange(n, dtype=np.int64),
        theta_index=np.arange(n, dtype=np.int64),
        report=rng.laplace(size=(n, d)),
        score=rng.uniform(10, 30, size=n),
        thetas=rng.normal(size=(n + 1, d)),
    )
    np.savez(path / "secrets.npz", gravity=rng.choice([9.7, 9.8, 9.9], size=n))
    np.savez(path / "model.npz", theta=rng.normal(size=(1, d)))


#: epsilon at delta 1e-5 of 3 full-batch Gaussian updates at noise multiplier 12 per method, as
#: ldp_audit.accountant computes them (Accountant.spent, 2026-11-26); reading them takes seconds
#: (PRV imports Opacus and torch), so the DP-SGD and FedRL fixtures pass precomputed stats
DPSGD_BY_METHOD = {"rdp": 0.557907357628626, "prv": 0.5182100193450457, "pld": 0.5081598798056932}
#: epsilon at delta 1e-5 of 4 Gaussian releases at noise multiplier 0.0625 (pld, same day)
FEDRL_PLD = 647.5379918257611


def system_ledger(kind: str, path: Path) -> LedgerStats | None:
    """Precomputed ledger stats for the fixtures whose ledgers are slow to read (the values
    ldp_audit.accountant gives for the events :func:`make_system_run` charges); None: read the
    run's ledger."""
    from ldp_audit.accountant import Ledger
    from ldp_audit.report._ledger import _histories

    if kind not in ("dprl", "fedrl"):
        return None
    led = Ledger(str(path / "ledger.sqlite"), create=False)
    try:
        events = _histories(led)[0]  # the charges per agent are not compared here
        head = led.chain_head()
    finally:
        led.close()
    if kind == "dprl":
        return LedgerStats(
            [], np.zeros(0), np.zeros(0), [], 1e-5, None,
            central={"model": DPSGD_BY_METHOD["pld"]}, chain_head=head, events=events,
            central_by_method=dict(DPSGD_BY_METHOD),
        )  # fmt: skip
    agents = ["0/alpha", "0/alpha:Y", "0/alpha@fedrl2", "0/beta"]
    best = [FEDRL_PLD, np.inf, np.inf, FEDRL_PLD]
    return LedgerStats(
        agents, np.full(4, np.inf), np.array(best),
        ["pld", "non_private", "non_private", "pld"], 1e-5, None,
        chain_head=head, events=events,
    )  # fmt: skip


#: Each shipped system's report part without its trainer's own sections: PGC-A3C's sections
#: (they read the transcript make_system_run writes) and the others' privacy-statement rows
#: (training/statements.py); ``build_report(..., sections_registry=STATEMENT_ONLY)``.
STATEMENT_ONLY = {
    "pgc-a3c": "ldp_audit.training.pgc_a3c.report:report_sections",
    "dprl": "tests.test_report_fixtures:dprl_statement",
    "fedrl": "tests.test_report_fixtures:fedrl_statement",
    "frd": "tests.test_report_fixtures:frd_statement",
}


def _statement_only(facts_of: Any, unit: str | None = None) -> Any:
    """A ``report_sections`` entry of the statement rows ``facts_of(context)`` alone."""

    def report(run_dir: Path, extra: Any = None, *, context: Any = None) -> dict[str, Any]:
        if context is None:
            return {}
        rows = {k: [v[0], v[1]] for k, v in facts_of(context).items()}
        return {"statement": {**rows, "unit": unit} if unit else rows}

    return report


def dprl_statement(run_dir: Path, extra: Any = None, *, context: Any = None) -> dict[str, Any]:
    from ldp_audit.training.statements import dprl_facts

    return _statement_only(dprl_facts)(run_dir, extra, context=context)


def fedrl_statement(run_dir: Path, extra: Any = None, *, context: Any = None) -> dict[str, Any]:
    from ldp_audit.training.statements import fedrl_facts

    return _statement_only(fedrl_facts)(run_dir, extra, context=context)


def frd_statement(run_dir: Path, extra: Any = None, *, context: Any = None) -> dict[str, Any]:
    from ldp_audit.training.statements import frd_facts

    return _statement_only(frd_facts, "agent")(run_dir, extra, context=context)


def make_system_run(kind: str, path: Path) -> Path:
    """A small run directory laid out as the ``kind`` system's trainer writes it (config.json,
    metrics.json with the trainer's privacy statement, a real ledger charged through
    ``ldp_audit.accountant`` with the events that trainer charges, and its audit/attack files).

    ``kind``: "pgc-a3c" (the demo's shape: 3 workers, every episode a new agent, 60 reports at
    epsilon 5), "flower" (PGC-A3C through Flower: 3 agents x 3 rounds at 2 each, 6 per agent),
    "dprl" (DP-SGD, central, a one-run audit), "fedrl" (Gaussian outputs at a huge per-row
    epsilon and non-private channels: infinite), "frd" (LDP uploads at 0.05).
    """
    from ldp_audit.accountant import (
        Accountant,
        GaussianEvent,
        LaplaceEvent,
        NonPrivateEvent,
        PureDpEvent,
    )

    if kind not in SYSTEMS:
        raise ValueError(f"kind must be one of {SYSTEMS}, got {kind!r}")
    path.mkdir(parents=True, exist_ok=True)
    versions = {"ldp_audit": "0.1.0", "numpy": np.__version__}
    acc = Accountant(ledger=str(path / "ledger.sqlite"))
    if kind in ("pgc-a3c", "flower"):
        flower = kind == "flower"
        rounds, per = (3, 2.0) if flower else (1, 5.0)
        n = 9 if flower else 60
        agent = np.arange(n) % 3 if flower else np.arange(n)
        _pgc_transcript(path, agent)
        cfg: dict[str, Any] = {
            "algorithm": "pgc-a3c",
            "config": {
                "mechanism": "laplace",
                "epsilon": per * rounds,
                "n_agents": 3,
                "rounds": rounds,
                "max_submissions": n,
            },
            "mechanism": {"name": "laplace", "epsilon": per, "clip": 0.01},
            "seed": 0,
            "versions": versions,
            "status": "complete",
        }
        if flower:
            cfg["engine"] = "flower 1.41.0"
            priv: dict[str, Any] = {
                "epsilon_per_submission": per,
                "rounds": rounds,
                "epsilon_total": per * rounds,
                "agents": 3,
                "max_spent_epsilon": per * rounds,
            }
        else:
            priv = {
                "mechanism": "laplace",
                "local": True,
                "epsilon_per_submission": per,
                "rounds": 1,
                "epsilon_per_agent": per,
                "composition": "sequential (basic), section 3.2.1",
                "agents_per_trial": [n + 2],
            }
        zeta = np.linspace(10, 30, n).tolist()
        _json(path / "metrics.json", {"zeta": [zeta], "privacy": priv})
        acc.charge_many([(f"0/{a}", LaplaceEvent(per)) for a in agent.tolist()])
        audit = audit_entry(
            claimed_epsilon=per,
            exact_epsilon=per,
            epsilon_lower_bound=0.8 * per,
            samples=20000,
            selection_samples=2000,
        )
        _json(path / "audit.json", [audit])
        _json(path / "attack_dynamics.json", {**GOOD_ATTACK, "epsilon": per * rounds})
    elif kind == "dprl":
        mech = {
            "name": "dp-sgd",
            "noise_multiplier": 12.0,
            "clip": 10.0,
            "sample_rate": 1.0,
            "delta": 1e-05,
            "privacy_unit": "episode",
        }
        cfg = {
            "algorithm": "dprl",
            "config": {"algo": "reinforce", "privacy": "dpsgd", "noise_multiplier": 12.0},
            "mechanism": mech,
            "seed": 0,
            "versions": versions,
            "status": "complete",
        }
        acc.charge_many([("model", GaussianEvent(12.0))] * 3, scope="central")
        by = {"rdp": DPSGD_BY_METHOD["rdp"], "prv": DPSGD_BY_METHOD["prv"]}
        priv = {
            "privacy": "dpsgd",
            "delta": 1e-05,
            "epsilon": by["prv"],
            "by_method": by,
            "unit": "episode",
            "updates": 3,
            "sample_rate": 1.0,
            "noise_multiplier": 12.0,
            "clip": 10.0,
        }
        _json(path / "metrics.json", {"returns": [10.0, 12.0], "privacy": priv})
        from ldp_audit.attacks.one_run_steinke import FRACTIONS, steinke_ceiling

        conf_each = 0.95 / 1.0 + 0.05 * 2 / 3
        one_run = {
            "attack": "one-run-white-box",
            "mechanism": mech,
            "epsilon": by["prv"],
            "composed_epsilon": by["prv"],
            "k": 2,
            "n": 100,
            "correct": 48,
            "accuracy": 0.48,
            "accuracy_ci": [0.379, 0.582],
            "ceiling": 0.627,
            "epsilon_lower_bound": 0.0,
            "confidence": 0.95,
            "chance": 0.5,
            "violation": False,
            "extra": {
                "setting": "white-box",
                "delta": 1e-05,
                "confidence_each": conf_each,
                "per_fraction": [{"fraction": f} for f in FRACTIONS],
                # what ldp_audit.opacus.scoring states: the bound with every guess right
                "steinke_ceiling": steinke_ceiling(100, delta=1e-05, beta=(1 - conf_each) / 6),
                "f_dp": {"mu_claimed": 3**0.5 / 12, "p_values": [{"p_value": 0.28}]},
            },
        }
        _json(path / "attack_membership.json", one_run)
    elif kind == "fedrl":
        cfg = {
            "algorithm": "fedrl",
            "config": {"size": 8, "sigma": 1.0, "clip_outputs": 2.0},
            "mechanism": {
                "name": "fedrl_output_gaussian",
                "sigma": 1.0,
                "bound": 2.0,
                "dim": 16,
                "delta": 1e-05,
            },
            "seed": 0,
            "versions": versions,
            "status": "complete",
        }
        _json(path / "metrics.json", {"methods": ["fedrl"]})
        acc.charge_many([("0/alpha", GaussianEvent(0.0625))] * 4)
        acc.charge_many([("0/beta", GaussianEvent(0.0625))] * 4)
        acc.charge_many([(a, NonPrivateEvent()) for a in ("0/alpha:Y", "0/alpha@fedrl2")] * 2)
        audit = audit_entry(
            mechanism="name=fedrl_output_gaussian, sigma=1.0, bound=2.0, dim=16, delta=1e-05",
            claimed_epsilon=195.35,
            exact_epsilon=None,
            epsilon_lower_bound=7.07,
            delta=1e-05,
            samples=5000,
            selection_samples=500,
        )
        _json(path / "audit.json", [audit])
        _json(
            path / "attack_fedrl.json",
            {**GOOD_ATTACK, "attack": "fedrl", "k": 2, "chance": 0.54, "ceiling": 1.0},
        )
    else:  # frd
        cfg = {
            "algorithm": "frd",
            "config": {"mode": "frd", "n_agents": 4, "groups": 2, "ldp_samples": 32},
            "mechanism": {"name": "frd_proxy_ldp", "epsilon": 0.05, "n_cells": 10000},
            "seed": 0,
            "versions": versions,
            "status": "complete",
        }
        _json(path / "metrics.json", {"mission": ["inf", "inf"]})
        acc.charge_many([(f"{g}/{a}", PureDpEvent(0.05)) for g in range(2) for a in range(4)] * 2)
        _json(
            path / "attack_dynamics.json",
            {**GOOD_ATTACK, "epsilon": 0.1, "ceiling": 0.356, "accuracy": 0.375},
        )
    acc.close()
    _json(path / "config.json", cfg)
    return path
