"""Per-agent privacy spend read from a run's ledger through the accountant's public API.

The report never reads the ledger's tables itself: it asks ``ldp_audit.accountant`` (the owner
of the SQLite schema) for each agent's spend under basic sequential composition and under the
tightest valid method, so the numbers in a report are the numbers the accountant enforces.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ldp_audit.errors import LdpAuditError, RunDirectoryError
from ldp_audit.rundir.files import json_real


@dataclass(frozen=True)
class LedgerStats:
    """Per-agent spend, aligned arrays (one entry per agent in the ledger).

    Attributes:
        agents: agent ids (``"<trial>/<agent>"``).
        basic: epsilon spent under basic sequential composition.
        best: epsilon spent under the tightest valid method.
        method: the method that gave ``best`` for each agent.
        delta: the delta at which spend was evaluated.
        budget: the per-agent epsilon budget, or None when no budget was set.
    """

    agents: list[str]
    basic: np.ndarray
    best: np.ndarray
    method: list[str]
    delta: float
    budget: float | None
    central: dict[str, float] | None = None
    """Central (DP-SGD) claims by agent, when the ledger holds any; never summed with local."""
    remaining: np.ndarray | None = None
    """Budget left per agent under the budget's own method and delta (None: budget - best)."""
    budget_method: str | None = None
    """The composition the budget is enforced with ("basic", ...), when recorded."""
    chain_head: str | None = None
    """The ledger's hash-chain head (hex): a later copy must extend it (``budget --verify``)."""
    events: dict[str, list[dict[str, Any]]] | None = None
    """Per scope, the distinct events charged: ``{"event": json, "kind": class name, "charges":
    n, "agents": n}``, most charged first (at most 12 per scope); None when not read."""
    central_by_method: dict[str, float] | None = None
    """Every composition method's epsilon for the central id that spent most (its
    ``spent_detail().by_method``): the alternatives beside the claimed accountant's value."""
    charge_counts: dict[str, int] | None = None
    """Charges per agent (local scope), to compare with the transcript's releases per agent;
    None when the ledger cannot list its histories."""


def read_ledger(
    path: str | Path,
    *,
    delta: float = 0.0,
    budget: float | None = None,
) -> LedgerStats:
    """Read every agent's spend from an SQLite ledger.

    Args:
        path: the run's ``ledger.sqlite``.
        delta: delta at which to evaluate spend (0 for pure-epsilon events).
        budget: the per-agent epsilon budget, if the run set one.

    Raises:
        RunDirectoryError: the ledger cannot be opened or read by the accountant.
    """
    import sqlite3

    from ldp_audit.accountant import Accountant, Ledger
    from ldp_audit.accountant.methods import ALL_METHODS

    try:
        ledger = Ledger(str(path), create=False, readonly=True)  # never creates or alters one
    except (LdpAuditError, sqlite3.Error) as exc:
        raise RunDirectoryError(f"{path}: ledger cannot be opened ({exc})") from exc
    try:
        acc = Accountant(ledger=ledger)
        # bulk: agents with identical histories share one computation (90k agents in ~1 s)
        basic_d = acc.spent_all(delta=delta, method="basic", scope="local")
        best_d = acc.spent_all_detail(delta=delta, method="best", scope="local")
        agents = sorted(basic_d)
        basic = np.array([basic_d[a] for a in agents], dtype=np.float64)
        best = np.array([best_d[a][0] for a in agents], dtype=np.float64)
        method = [str(best_d[a][1]) for a in agents]
        central = acc.spent_all(delta=delta, method="best", scope="central") or None
        remaining, budget_method = None, None
        recorded = _recorded_budget(ledger)
        if budget is None and recorded is not None:
            budget = recorded["epsilon"]
        if recorded is not None and recorded.get("method") in ALL_METHODS:
            budget_method = str(recorded["method"])
            b_spent = acc.spent_all(
                delta=float(recorded.get("delta", 0.0)), method=budget_method, scope="local"
            )
            remaining = np.array([budget - b_spent[a] for a in agents], dtype=np.float64)
    except (LdpAuditError, sqlite3.Error) as exc:
        raise RunDirectoryError(f"{path}: ledger cannot be read ({exc})") from exc
    else:
        events, counts = _histories(ledger)
        read = {
            "chain_head": ledger.chain_head(),
            "events": events,
            "charge_counts": counts,
            "central_by_method": _central_by_method(acc, central, delta),
        }
    finally:
        ledger.close()
    if budget is not None and not (isinstance(budget, (int, float)) and math.isfinite(budget)):
        budget = None
    return LedgerStats(
        agents, basic, best, method, float(delta), budget, central, remaining, budget_method, **read
    )


_MAX_KINDS = 12


def _histories(ledger: Any) -> tuple[dict[str, list[dict[str, Any]]] | None, Any]:
    """The distinct events charged per scope (what the ledger says was released) and the charges
    per agent in the local scope (every charge row counted with its multiplicity), read from one
    listing of the histories; each None when the ledger cannot list them (the report then says
    "not recorded" / "not compared": both are courtesies, never fatal to the report)."""
    from ldp_audit.accountant.events import event_from_json

    out: dict[str, list[dict[str, Any]]] = {}
    counts = None
    try:
        for scope in ("local", "central"):
            hist = ledger.histories(None, scope)
            if scope == "local":
                counts = {str(a): sum(int(n) for _, n in h) for a, h in hist.items()}
            charges: Counter[str] = Counter()
            agents: Counter[str] = Counter()
            for h in hist.values():
                for text, n in h:
                    charges[text] += int(n)
                    agents[text] += 1
            rows = []
            for text in sorted(charges, key=lambda t: (-charges[t], t))[:_MAX_KINDS]:
                try:
                    kind = type(event_from_json(text)).__name__
                except Exception:  # an event this version cannot parse: named, not fatal
                    kind = "unknown"
                try:
                    ev = json.loads(text)
                except ValueError:
                    ev = text
                rows.append(
                    {"event": ev, "kind": kind, "charges": charges[text], "agents": agents[text]}
                )
            out[scope] = rows
    except Exception:
        return None, counts
    return out, counts


def _central_by_method(acc: Any, central: dict[str, float] | None, delta: float) -> Any:
    if not central:
        return None
    agent = max(sorted(central), key=lambda a: central[a])
    try:
        by = acc.spent_detail(agent, delta=delta, method="best").by_method
    except Exception:  # a method that cannot compose: the alternatives are then not listed
        return None
    return {str(k): float(v) for k, v in dict(by).items()}


def _recorded_budget(ledger: Any) -> dict[str, Any] | None:
    """The budget the accountant recorded in the ledger's metadata, if any."""
    text = ledger.meta().get("budget")
    if not text:
        return None
    try:
        b = json.loads(text)
    except (TypeError, ValueError):
        return None
    eps = json_real(b.get("epsilon")) if isinstance(b, dict) else None
    return b if eps is not None and math.isfinite(eps) else None
