"""The report model: one JSON-able dict built from a validated run and its ledger.

HTML, Markdown and JSON are all rendered from this one dict, so the three formats never
disagree. Every section has a ``status`` ("run" / "not run"); nothing optional is left out
silently.
"""

from __future__ import annotations

import datetime as _dt
import heapq
from collections import Counter
from typing import Any

import numpy as np

from ldp_audit.report._audits import attack_section, audit_section
from ldp_audit.report._ledger import LedgerStats
from ldp_audit.report._load import RunData
from ldp_audit.report._verdict import claim_section, report_verdict
from ldp_audit.rundir import RunDir, verify_manifest, verify_run
from ldp_audit.rundir.files import json_real

SCHEMA = "ldp-audit-report/1"


_STATS = {"min": np.min, "median": np.median, "mean": np.mean, "max": np.max}


def _stats(x: np.ndarray) -> dict[str, float | int | None]:
    return {"count": int(x.size), **{k: float(f(x)) if x.size else None for k, f in _STATS.items()}}


def _natural(agent: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in agent.split("/"))


def _run_section(run: RunData, missing: list[str]) -> dict[str, Any]:
    cfg = run.config
    core_missing = [m for m in (run.sources.get("missing") or "").split(", ") if m]
    present = {
        "secrets.npz": run.has_secrets,
        "audit.json": run.audits is not None,
        "attack_*.json": sorted(f"attack_{k}.json" for k in run.attacks),
    }
    return {
        "algorithm": cfg["algorithm"],
        "seed": cfg["seed"],
        "created": cfg.get("created"),
        "command": cfg.get("command"),
        "machine": cfg.get("machine"),
        "versions": cfg.get("versions", {}),
        "mechanism": cfg.get("mechanism"),
        "config": cfg["config"],
        "optional_files": present,
        "extra": [str(e) for e in run.extra],
        "missing": ", ".join(dict.fromkeys([*core_missing, *missing])) or None,
        "status": _status_section(run),
    }


def _status_section(run: RunData) -> dict[str, Any]:
    """Run status (config.json / manifest.json) and the manifest check (evidence intact?)."""
    status = run.config.get("status")
    try:
        man = verify_manifest(run.path)
    except Exception as exc:  # a malformed manifest is reported, never fatal
        man = {"status": "unreadable", "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        man.update(changed=[], missing=[], unlisted=[])
    run_status = status if isinstance(status, str) else man.get("status")
    if not isinstance(run_status, str) or run_status in ("no manifest", "unreadable"):
        run_status = "not recorded"
    if man["status"] == "no manifest":
        evidence = (
            "no manifest.json: the run did not finish or predates manifests, so its files "
            "cannot be checked against what it wrote"
        )
    elif man["status"] == "unreadable":
        evidence = f"manifest.json cannot be read ({man.get('error')})"
    elif man["ok"]:
        evidence = "evidence intact: every file the run wrote has the SHA-256 it recorded"
    else:
        evidence = "; ".join(
            f"files {k} since the run: {', '.join(man[k])}"
            for k in ("changed", "missing")
            if man[k]
        )
    check = _ledger_check(run)
    try:  # the files the run sealed: manifest.json's SHA-256s, analyses.json's
        sealed = sorted((RunDir(run.path).manifest() or {}).get("files") or {})
    except Exception:  # a malformed manifest (or no config.json) is named above, never fatal
        sealed = []
    return {
        "ledger_check": check,
        "sealed": sealed,
        "sealed_analyses": sorted((check.get("detail") or {}).get("analyses") or {}),
        "run": run_status,
        "manifest": man.get("status"),
        "evidence_ok": bool(man["ok"]),
        "evidence": evidence,
        "changed": list(man["changed"]),
        "missing": list(man["missing"]),
        "added_later": list(man["unlisted"]),
    }


def _ledger_check(run: RunData) -> dict[str, Any]:
    """The run checked against its manifest, the ledger against the anchor the manifest records
    (id, rows, chain head, metadata digest) and both MACs, by
    :func:`ldp_audit.rundir.verify_run` (the checks on open, not the whole chain walk, which
    ``report`` runs before it reads anything): ``{"ok", "words", "authenticated", "detail"}``."""
    try:
        res = verify_run(run.path, full=False)
    except Exception as exc:  # reported, never fatal
        return {
            "ok": False,
            "authenticated": False,
            "words": f"UNVERIFIED EVIDENCE: the run could not be checked against its manifest "
            f"({type(exc).__name__}: {exc}).",
            "detail": None,
        }
    ok, auth, root = res.ok, res.authenticated, res.root
    if ok:
        led = res.ledger or {}
        how = (
            "authenticated with the ledger key"
            if auth
            else "unauthenticated: " + "; ".join(res.notes or ["no key"])
        )
        words = (
            f"The run matches its manifest and the ledger is the one it anchors "
            f"({led.get('rows')} charges, chain head {led.get('chain_head')})"
            + (f"; run root {root} (manifest, ledger head, sealed analyses)" if root else "")
            + f"; {how}."
        )
    else:
        probs = list(res.problems or ["not recorded"])
        more = f" (and {len(probs) - 1} more)" if len(probs) > 1 else ""
        words = f"UNVERIFIED EVIDENCE: {probs[0]}{more}."
    return {"ok": ok, "authenticated": auth, "words": words, "detail": res.to_dict()}


def _implied_charges(run: RunData) -> tuple[Counter, dict[str, int]] | str:
    """(charges the transcript's rows imply, the ledger's charges per id, every scope): the
    System contract's ``ledger_charges``, for a system whose report part gives no
    ``releases``; why not where the run or the system's code cannot give them (an interrupted
    run without its transcript, a plug-in's ``charges`` that raises)."""
    try:
        rd = RunDir(run.path)
        implied = rd.system.ledger_charges(rd.transcript(), rd.train_config)
        return Counter({str(a): int(n) for a, n in implied.items() if n}), rd.ledger_charges()
    except Exception as exc:  # the system's own code: the report never crashes on it
        return f"{type(exc).__name__}: {exc}"


def _ledger_section(
    run: RunData,
    led: LedgerStats,
    top: int,
    releases: list[str] | None = None,
    implied: tuple[Counter, dict[str, int]] | str | None = None,
) -> dict[str, Any]:
    failed = implied if isinstance(implied, str) else None  # said, never skipped in silence
    implied = None if failed else implied
    # with the system's releases (the ledger id of every transcript row), or the charges its
    # transcript implies (``implied``), the ledger is checked against them; without, agents
    # come from the ledger alone
    known = releases is not None or implied is not None
    tr_counts = Counter(releases or []) if implied is None else implied[0]  # releases per id
    ids = sorted(tr_counts, key=_natural) if known else list(led.agents)
    counts = np.array([tr_counts[a] for a in ids] if known else [], dtype=np.int64)
    in_ledger = set(led.agents) if implied is None else set(implied[1])
    uncharged = [a for a in ids if a not in in_ledger] if known else []
    # per agent, the ledger's charges against the transcript's releases: fewer charges than
    # releases is spend that was never accounted (an agent with none is `uncharged` above);
    # more is charged-not-released (a prepaid block, an interrupted release): the safe side
    cc = led.charge_counts if implied is None else implied[1]
    compared = known and cc is not None
    under = [a for a in ids if a in in_ledger and cc.get(a, 0) < tr_counts[a]] if compared else []
    over = [a for a in ids if cc.get(a, 0) > tr_counts[a]] if compared else []
    # largest spend first; ties in natural agent order ("0/2" before "0/10")
    order = heapq.nsmallest(
        top, range(len(led.agents)), key=lambda i: (-led.basic[i], _natural(led.agents[i]))
    )
    remaining = None if led.budget is None else led.remaining
    if remaining is None and led.budget is not None:
        remaining = led.budget - led.best
    rows = [
        {
            "agent": a,
            "submissions": tr_counts.get(a),
            "basic": float(led.basic[i]),
            "best": float(led.best[i]),
            "method": led.method[i],
            "remaining": None if remaining is None else float(remaining[i]),
        }
        for i, a in enumerate(led.agents)
    ]
    mech = run.config.get("mechanism") or {}
    mech_eps = json_real(mech.get("epsilon"))
    central_vals = np.array(sorted((led.central or {}).values()), dtype=np.float64)
    inf_best = ~np.isfinite(led.best)
    return {
        "top_groups": _top_groups(rows, top),
        # the one count of infinite spend (tightest method) used everywhere on the page
        "infinite_agents": int(inf_best.sum()),
        "infinite_examples": [led.agents[i] for i in np.flatnonzero(inf_best)[:5].tolist()],
        # basic composition cannot compose Gaussian / approximate-DP events: inf under basic
        # while another method gives a finite value (not a non-private release)
        "basic_not_applicable": int((~np.isfinite(led.basic) & ~inf_best).sum()),
        "status": "run",
        "agents": len(led.agents),
        "releases": int(counts.sum()) if known else None,
        "agents_in_transcript": len(ids) if known else None,
        "uncharged_agents": len(uncharged),
        "uncharged_examples": uncharged[:5],
        "charges_compared": bool(compared),
        **({"charges_not_compared": failed} if failed else {}),
        "undercharged_agents": len(under),
        "undercharged_examples": [  # empty unless compared (under is)
            f"{a} ({cc.get(a, 0)} charges for {tr_counts[a]} releases)" for a in under[:5]
        ],
        "overcharged_agents": len(over),
        "delta": led.delta,
        "epsilon_per_submission": mech_eps,
        "submissions_per_agent": _stats(counts.astype(np.float64)) if known else None,
        "basic": _stats(led.basic),
        "best": _stats(led.best),
        "methods": dict(Counter(led.method).most_common()),
        "budget": led.budget,
        "budget_method": led.budget_method,
        "remaining": None if remaining is None else _stats(remaining),
        "over_budget": None if remaining is None else int((remaining < -1e-12).sum()),
        "top_agents": [rows[i] for i in order],
        "central": None
        if not led.central
        else {
            "agents": len(led.central),
            "max_epsilon": float(max(led.central.values())),
        },
        # local (per-agent LDP) and central (model-level DP) side by side, never summed
        "scopes": [
            {"scope": "local", "ids": len(led.agents), **_stats(led.best)},
            {"scope": "central", "ids": int(central_vals.size), **_stats(central_vals)},
        ],
        "chain_head": getattr(led, "chain_head", None),
    }


def _top_groups(rows: list[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    """The largest spenders with identical rows collapsed: one row per distinct (submissions,
    basic, tightest, method, remaining), with how many agents share it and a few of their ids."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for r in rows:
        groups.setdefault(tuple(v for k, v in r.items() if k != "agent"), []).append(r["agent"])
    out = []
    for key, agents in groups.items():
        names = sorted(agents, key=_natural)
        same = dict(zip(("submissions", "basic", "best", "method", "remaining"), key, strict=True))
        out.append({"agents": len(names), "first": names[0], "examples": names[:3], **same})
    out.sort(key=lambda r: (-r["basic"], -r["best"], _natural(r["first"])))
    return out[:top]


def _generator() -> dict[str, str]:
    """What produced the report (the run's own versions are in ``run.versions``)."""
    import platform

    import matplotlib

    from ldp_audit import __version__

    return {
        "ldp_audit": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "matplotlib": matplotlib.__version__,
        "platform": f"{platform.system()} {platform.machine()}",
    }


def build_parts(
    run: RunData,
    ledger: LedgerStats,
    *,
    top: int = 10,
    sections_registry: Any = None,
    figures: bool = True,
) -> tuple[dict[str, Any], Any]:
    """Build the report model of one run and collect its system's part.

    The generic parts (run, status, ledger, audits, attacks, claim) are the core's; the run's
    system adds its own through its registered ``report_sections`` (called with a
    :class:`ldp_audit.report.plugin.ReportContext`): its sections, the ledger id of every
    release (checked against the ledger), its rows of the privacy statement and its sentences
    of the verdict.

    Args:
        run: the validated run directory.
        ledger: per-agent spend read from the run's ledger.
        top: number of agents in the top-spenders table.
        sections_registry: ``algorithm -> "module:function"`` (default: the system registry).
        figures: whether the system should draw its figures.

    Returns:
        (model, :class:`ldp_audit.report.plugin.SystemReport`). The model has keys ``schema``,
        ``generated``, ``run_dir``, ``privacy_statement``, ``verdict``, ``run``, ``ledger``,
        ``audits``, ``attacks``, ``claim``, ``sections``, ``sections_source``.
    """
    from ldp_audit.report._sections import system_report
    from ldp_audit.report._statement import one_run_audit, privacy_statement, the_claim
    from ldp_audit.report.plugin import ReportContext

    one_run = [o for name, a in run.attacks.items() if (o := one_run_audit(name, a)) is not None]
    context = ReportContext(
        run=run, ledger=ledger, claim=the_claim(run, ledger), one_run=one_run, figures=figures
    )
    part = system_report(
        run.path, run.algorithm, list(run.extra), registry=sections_registry, context=context
    )
    model: dict[str, Any] = {
        "schema": SCHEMA,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "generator": _generator(),
        "run_dir": str(run.path),
        "run": _run_section(run, part.missing),
        "ledger": _ledger_section(
            run,
            ledger,
            top,
            part.releases,
            None if part.releases is not None else _implied_charges(run),
        ),
        "audits": audit_section(run),
        "attacks": attack_section(run),
        "claim": claim_section(run),
        "sections": list(part.sections),
        "sections_source": part.note,
    }
    model["audits"]["one_run"] = one_run
    one_names = {o["name"] for o in one_run}
    for r in model["attacks"]["results"]:
        r["one_run"] = r["name"] in one_names
    statement = privacy_statement(run, ledger, model, facts=part.statement, unit=part.unit)
    model["privacy_statement"] = statement
    model["verdict"] = report_verdict(model, part.claimed)
    # the statement first (after the identification), as on the page
    head = ("schema", "generated", "generator", "run_dir", "privacy_statement", "verdict")
    out = {**{k: model[k] for k in head}, **{k: v for k, v in model.items() if k not in head}}
    return out, part
