"""The report model: one JSON-able dict built from a validated run and its ledger.

HTML, Markdown and JSON are all rendered from this one dict, so the three formats never
disagree. Every section has a ``status`` ("run" / "not run"); nothing optional is left out
silently.
"""

from __future__ import annotations

import datetime as _dt
import heapq
import math
import re
from collections import Counter
from typing import Any

import numpy as np

from ldp_audit.report._ledger import LedgerStats
from ldp_audit.report._load import RunData

__all__ = ["build_model", "SCHEMA"]

SCHEMA = "ldp-audit-report/1"


def _num(v: Any) -> float | None:
    """A finite-or-infinite float, or None for anything that is not a number."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity", "+inf"):
        return math.inf
    return None


def _stats(x: np.ndarray) -> dict[str, float | int | None]:
    if x.size == 0:
        return {"count": 0, "min": None, "median": None, "mean": None, "max": None}
    return {
        "count": int(x.size),
        "min": float(x.min()),
        "median": float(np.median(x)),
        "mean": float(x.mean()),
        "max": float(x.max()),
    }


def _natural(agent: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in agent.split("/"))


def _run_section(run: RunData, missing: list[str]) -> dict[str, Any]:
    cfg = run.config
    present = {
        "secrets.npz": run.has_secrets,
        "audit.json": run.audits is not None,
        "attack_*.json": sorted(f"attack_{k}.json" for k in run.attacks),
    }
    out: dict[str, Any] = {
        "algorithm": cfg["algorithm"],
        "seed": cfg["seed"],
        "created": cfg.get("created"),
        "versions": cfg.get("versions", {}),
        "mechanism": cfg.get("mechanism"),
        "config": cfg["config"],
        "optional_files": present,
        "extra": [str(e) for e in run.extra],
        "missing": ", ".join(
            [m for m in (run.sources.get("missing") or "").split(", ") if m]
            + [m for m in missing if m not in (run.sources.get("missing") or "")]
        )
        or None,
    }
    out["status"] = _status_section(run)
    return out


def _status_section(run: RunData) -> dict[str, Any]:
    """Run status (config.json / manifest.json) and the manifest check (evidence intact?)."""
    from ldp_audit.rundir import verify_manifest

    status = run.config.get("status")
    try:
        man = verify_manifest(run.path)
    except Exception as exc:  # a malformed manifest is reported, never fatal
        man = {
            "status": "unreadable",
            "ok": False,
            "changed": [],
            "missing": [],
            "unlisted": [],
            "error": f"{type(exc).__name__}: {exc}",
        }
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
        parts = []
        if man["changed"]:
            parts.append("files changed since the run: " + ", ".join(man["changed"]))
        if man["missing"]:
            parts.append("files missing since the run: " + ", ".join(man["missing"]))
        evidence = "; ".join(parts)
    return {
        "ledger_check": _ledger_check(run),
        "run": run_status,
        "manifest": man.get("status"),
        "evidence_ok": bool(man["ok"]),
        "evidence": evidence,
        "changed": list(man["changed"]),
        "missing": list(man["missing"]),
        "added_later": list(man["unlisted"]),
    }


def _ledger_check(run: RunData) -> dict[str, Any] | None:
    """The run checked against its manifest, the ledger against the anchor the manifest records
    (id, rows, chain head, metadata digest) and both MACs, by
    :func:`ldp_audit.rundir.verify_run` (the checks on open, not the whole chain walk, which
    ``report`` runs before it reads anything): ``{"ok", "words", "authenticated", "detail"}``;
    None with a ``rundir`` that has no ``verify_run``."""
    from ldp_audit import rundir

    fn = getattr(rundir, "verify_run", None)
    if not callable(fn):
        return None
    try:
        res = fn(run.path, full=False)
    except Exception as exc:  # reported, never fatal
        return {
            "ok": False,
            "authenticated": False,
            "words": f"UNVERIFIED EVIDENCE: the run could not be checked against its manifest "
            f"({type(exc).__name__}: {exc}).",
            "detail": None,
        }
    detail = res.to_dict() if hasattr(res, "to_dict") else None
    ok = bool(getattr(res, "ok", False))
    auth = bool(getattr(res, "authenticated", False))
    if ok:
        led = getattr(res, "ledger", None) or {}
        how = (
            "authenticated with the ledger key"
            if auth
            else "unauthenticated: " + "; ".join(getattr(res, "notes", []) or ["no key"])
        )
        words = (
            f"The run matches its manifest and the ledger is the one it anchors "
            f"({led.get('rows')} charges, chain head {led.get('chain_head')}); {how}."
        )
    else:
        probs = list(getattr(res, "problems", []) or ["not recorded"])
        more = f" (and {len(probs) - 1} more)" if len(probs) > 1 else ""
        words = f"UNVERIFIED EVIDENCE: {probs[0]}{more}."
    return {"ok": ok, "authenticated": auth, "words": words, "detail": detail}


def release_counts(releases: list[str]) -> tuple[np.ndarray, list[str]]:
    """Releases per ledger id (ids in natural order) of a system's ``releases``."""
    c = Counter(releases)
    ids = sorted(c, key=_natural)
    return np.array([c[a] for a in ids], dtype=np.int64), ids


def _ledger_section(
    run: RunData, led: LedgerStats, top: int, releases: list[str] | None = None
) -> dict[str, Any]:
    # with the system's releases (the ledger id of every transcript row) the ledger is checked
    # against them; without, agents come from the ledger alone
    known = releases is not None
    if known:
        counts, ids = release_counts(releases or [])
    else:
        counts, ids = np.zeros(0, np.int64), list(led.agents)
    in_ledger = set(led.agents)
    uncharged = [a for a in ids if a not in in_ledger] if known else []
    tr_counts = dict(zip(ids, counts.tolist(), strict=True)) if known else {}
    # per agent, the ledger's charges against the transcript's releases: fewer charges than
    # releases is spend that was never accounted (an agent with none is `uncharged` above);
    # more is charged-not-released (a prepaid block, an interrupted release): the safe side
    cc = led.charge_counts
    compared = known and cc is not None
    under = [a for a in ids if a in in_ledger and cc.get(a, 0) < tr_counts[a]] if compared else []
    over = [a for a in ids if cc.get(a, 0) > tr_counts[a]] if compared else []
    # largest spend first; ties in natural agent order ("0/2" before "0/10")
    order = heapq.nsmallest(
        top, range(len(led.agents)), key=lambda i: (-led.basic[i], _natural(led.agents[i]))
    )
    if led.budget is None:
        remaining = None
    elif led.remaining is not None:
        remaining = led.remaining
    else:
        remaining = led.budget - led.best
    rows = []
    for i in order:
        rows.append(
            {
                "agent": led.agents[i],
                "submissions": int(tr_counts[led.agents[i]])
                if known and led.agents[i] in tr_counts
                else None,
                "basic": float(led.basic[i]),
                "best": float(led.best[i]),
                "method": led.method[i],
                "remaining": None if remaining is None else float(remaining[i]),
            }
        )
    mech = run.config.get("mechanism") or {}
    mech_eps = _num(mech.get("epsilon"))
    central_vals = np.array(sorted((led.central or {}).values()), dtype=np.float64)
    inf_best = ~np.isfinite(led.best)
    return {
        "top_groups": _top_groups(led, tr_counts, remaining, top),
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
        "undercharged_agents": len(under),
        "undercharged_examples": [
            f"{a} ({cc.get(a, 0)} charges for {tr_counts[a]} releases)" for a in under[:5]
        ]
        if compared
        else [],
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
        "top_agents": rows,
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


def _top_groups(
    led: LedgerStats, tr_counts: dict[str, int], remaining: Any, top: int
) -> list[dict[str, Any]]:
    """The largest spenders with identical rows collapsed: one row per distinct (submissions,
    basic, tightest, method, remaining), with how many agents share it and a few of their ids."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, a in enumerate(led.agents):
        key = (
            tr_counts.get(a),
            float(led.basic[i]),
            float(led.best[i]),
            led.method[i],
            None if remaining is None else float(remaining[i]),
        )
        groups.setdefault(key, []).append(i)
    rows = []
    for key, idx in groups.items():
        names = sorted((led.agents[i] for i in idx), key=_natural)
        rows.append(
            {
                "agents": len(idx),
                "first": names[0],
                "examples": names[:3],
                "submissions": key[0],
                "basic": key[1],
                "best": key[2],
                "method": key[3],
                "remaining": key[4],
            }
        )
    rows.sort(key=lambda r: (-r["basic"], -r["best"], _natural(r["first"])))
    return rows[:top]


_NUM_RE = re.compile(r"-?\d+\.\d{5,}(?:[eE][-+]?\d+)?")


def short_numbers(text: str, nd: int = 4) -> str:
    """Rewrite long decimals in a string ("0.0059698183732840131") to ``nd`` significant
    digits ("0.00597"): readable witnesses, not 17-digit floats."""
    return _NUM_RE.sub(lambda m: f"{float(m.group(0)):.{nd}g}", text)


def _witness_model(w: Any) -> dict[str, Any] | None:
    """A witness (Witness.to_dict()) with rounded numbers, or None."""
    if not isinstance(w, dict):
        return None
    out: dict[str, Any] = {}
    for k, v in w.items():
        if k in ("x", "x2") and isinstance(v, list):
            out[k] = [round(float(x), 6) if isinstance(x, (int, float)) else x for x in v]
        elif isinstance(v, str):
            out[k] = short_numbers(v)
        else:
            out[k] = v
    return out


_READING = {
    "distribution": "distribution (exact arithmetic)",
    "implementation": "implementation (IEEE doubles, float bits searched)",
}


def _verdict_rows(e: dict[str, Any], claim: float, lb: float, viol: bool) -> list[dict[str, Any]]:
    """The audit's two verdicts (AuditResult.to_dict()["verdicts"]); one row for older files."""
    vs = e.get("verdicts")
    rows = []
    if isinstance(vs, dict) and vs:
        for kind in ("distribution", "implementation"):
            v = vs.get(kind)
            if not isinstance(v, dict):
                continue
            vlb = _num(v.get("epsilon_lower_bound"))
            vclaim = _num(v.get("claimed_epsilon"))
            rows.append(
                {
                    "kind": kind,
                    "reading": _READING[kind],
                    "epsilon_lower_bound": vlb if vlb is not None else 0.0,
                    "claimed_epsilon": vclaim if vclaim is not None else claim,
                    "violation": bool(v.get("violation"))
                    if isinstance(v.get("violation"), bool)
                    else (vlb or 0.0) > claim,
                    "witness": _witness_model(v.get("witness")),
                    "consequence": str(v.get("consequence") or ""),
                    "events_estimated": v.get("events_estimated"),
                }
            )
    if not rows:
        fb = e.get("float_bits")
        kind = "implementation" if fb is True else "distribution" if fb is False else None
        rows.append(
            {
                "kind": kind or "single",
                "reading": _READING.get(kind or "", "one reading (not recorded which)"),
                "epsilon_lower_bound": lb,
                "claimed_epsilon": claim,
                "violation": viol,
                "witness": _witness_model(e.get("witness")),
                "consequence": "",
                "events_estimated": e.get("events_estimated"),
            }
        )
    return rows


def _profile_model(p: Any) -> dict[str, Any] | None:
    if not isinstance(p, dict):
        return None
    d, lo, cl = p.get("delta"), p.get("epsilon_lower"), p.get("epsilon_claimed")
    if not (isinstance(d, list) and isinstance(lo, list) and isinstance(cl, list)):
        return None
    if not len(d) == len(lo) == len(cl) or not d:
        return None
    dd = [_num(x) for x in d]
    ll = [_num(x) for x in lo]
    cc = [_num(x) for x in cl]
    if any(x is None for x in dd + ll + cc):
        return None
    above = [a > b for a, b in zip(ll, cc, strict=True)]  # type: ignore[operator]
    return {
        "delta": dd,
        "epsilon_lower": ll,
        "epsilon_claimed": cc,
        "above_claim": above,
        "confidence": _num(p.get("confidence")),
        "claimed_from": p.get("claimed_from"),
    }


def _tradeoff_model(t: Any) -> dict[str, Any] | None:
    """The audited f-DP trade-off curve of an audit (``AuditResult.tradeoff.to_dict()``)."""
    if not isinstance(t, dict):
        return None
    keys = ("type1_upper", "type2_upper", "claimed_alpha", "claimed_beta")
    vals = {k: t.get(k) for k in keys}
    if not all(isinstance(v, list) and v for v in vals.values()):
        return None
    nums = {k: [_num(x) for x in v] for k, v in vals.items()}
    if any(x is None for v in nums.values() for x in v):
        return None
    if len(nums["type1_upper"]) != len(nums["type2_upper"]):
        return None
    if len(nums["claimed_alpha"]) != len(nums["claimed_beta"]):
        return None
    below = t.get("below_claim")
    if not (isinstance(below, list) and len(below) == len(nums["type1_upper"])):
        below = [False] * len(nums["type1_upper"])
    return {
        **nums,
        "below_claim": [bool(b) for b in below],
        "claimed_from": str(t.get("claimed_from", "")),
        "confidence": _num(t.get("confidence")),
    }


def _point_estimate(w: dict[str, Any] | None) -> float | None:
    """ln(k1/n1) - ln(k2/n2) of a witness: the event's epsilon estimate (inf when k2 = 0)."""
    if not w or not all(isinstance(w.get(k), int) for k in ("k1", "n1", "k2", "n2")):
        return None
    if w["n1"] <= 0 or w["n2"] <= 0 or w["k1"] <= 0:
        return None
    if w["k2"] == 0:
        return math.inf
    return math.log(w["k1"] / w["n1"]) - math.log(w["k2"] / w["n2"])


def _audit_section(run: RunData) -> dict[str, Any]:
    if run.audits is None:
        return {"status": "not run", "results": []}
    out = []
    default_name = str((run.config.get("mechanism") or {}).get("name", "mechanism"))
    for e in run.audits:
        claim = float(e["claimed_epsilon"])  # float("inf") parses the "inf" of to_dict()
        lb = float(e["epsilon_lower_bound"])
        viol = e.get("violation")
        viol = bool(viol) if isinstance(viol, bool) else lb > claim
        verdicts = _verdict_rows(e, claim, lb, viol)
        for v in verdicts:
            v["point_estimate"] = _point_estimate(v["witness"])
        # the overall verdict follows the stricter of the two readings
        viol = viol or any(v["violation"] for v in verdicts)
        leak = e.get("leak") if isinstance(e.get("leak"), str) else None
        warnings = e.get("warnings")
        out.append(
            {
                "mechanism": str(e.get("mechanism") or default_name),
                "claimed_epsilon": claim,
                "exact_epsilon": _num(e.get("exact_epsilon")),
                "epsilon_lower_bound": lb,
                "confidence": _num(e.get("confidence")),
                "delta": _num(e.get("delta")),
                "samples": e.get("samples"),
                "selection_samples": e.get("selection_samples"),
                "max_refutable_epsilon": _num(e.get("max_refutable_epsilon")),
                "resolution_probability": _num(e.get("resolution_probability")),
                "seconds": _num(e.get("seconds")),
                "violation": viol,
                "leak": leak,
                "witness": _witness_model(e.get("witness")),
                "verdicts": verdicts,
                "profile": _profile_model(e.get("profile")),
                "tradeoff": _tradeoff_model(e.get("tradeoff")),
                "warnings": [str(w) for w in warnings] if isinstance(warnings, list) else [],
                "source": e.get("source"),
            }
        )
    return {"status": "run", "results": out}


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None


def _attack_section(run: RunData) -> dict[str, Any]:
    if not run.attacks:
        return {"status": "not run", "results": []}
    out = []
    for name, a in run.attacks.items():
        ci = _first(a, "accuracy_ci", "ci", "confidence_interval")
        lo = _num(_first(a, "ci_low", "accuracy_low", "accuracy_lower"))
        hi = _num(_first(a, "ci_high", "accuracy_high", "accuracy_upper"))
        if isinstance(ci, (list, tuple)) and len(ci) == 2:
            lo, hi = _num(ci[0]), _num(ci[1])
        ceiling = _num(_first(a, "ceiling", "accuracy_ceiling"))
        viol = a.get("violation")
        if not isinstance(viol, bool):
            viol = lo is not None and ceiling is not None and lo > ceiling
        tpr = _first(a, "tpr_at_fpr", "tpr_at_low_fpr")
        chance = _num(_first(a, "chance", "baseline"))
        above_chance = lo is not None and chance is not None and lo > chance
        out.append(
            {
                "name": name,
                "attack": str(a.get("attack") or a.get("name") or name),
                "accuracy": float(a["accuracy"]),
                "ci_low": lo,
                "ci_high": hi,
                "confidence": _num(a.get("confidence")),
                "ceiling": ceiling,
                "chance": chance,
                "above_chance": above_chance,
                "source": run.sources.get(f"attack_{name}"),
                "k": _first(a, "k", "n_classes", "candidates"),
                # the ceiling applies to the epsilon composed over the T reports attacked together
                "epsilon": _num(_first(a, "composed_epsilon", "epsilon", "claimed_epsilon")),
                "reports_per_agent": _first(a, "reports_per_agent"),
                "mae": _num(a.get("mae")),
                "mae_baseline": _num(a.get("mae_baseline")),
                "implied_epsilon_lower_bound": _num(
                    _first(
                        a, "implied_epsilon_lower_bound", "epsilon_lower_bound", "implied_epsilon"
                    )
                ),
                "auc": _num(a.get("auc")),
                "advantage": _num(a.get("advantage")),
                "tpr_at_fpr": tpr
                if isinstance(tpr, (dict, list, float, int)) and tpr != {}
                else None,
                "samples": _first(a, "n", "samples", "n_targets"),
                "violation": viol,
                "details": {
                    k: v
                    for k, v in a.items()
                    if isinstance(v, (str, int, float, bool))
                    and not isinstance(v, bool)
                    or isinstance(v, bool)
                },
            }
        )
    return {"status": "run", "results": out}


def _claim_section(run: RunData) -> dict[str, Any] | None:
    """The trainer's own privacy statement (metrics.json ``privacy``), if it wrote one."""
    claim = run.metrics.get("privacy")
    if not isinstance(claim, dict):
        return None
    return {k: v for k, v in claim.items() if isinstance(v, (str, int, float, bool, list))}


def _fmt(v: float | None, nd: int = 3) -> str:
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "inf"
    return f"{v:.{nd}g}"


def _ci(r: dict[str, Any]) -> str:
    if r["ci_low"] is None:
        return ""
    conf = r.get("confidence")
    lvl = f"{conf * 100:.0f}% " if isinstance(conf, float) else ""
    return f" ({lvl}CI {_fmt(r['ci_low'])}-{_fmt(r['ci_high'])})"


def _audit_statements(
    r: dict[str, Any], violations: list[str], verified: list[str], notes: list[str]
) -> None:
    """Sentences for one audit entry: each of its verdicts, with its consequence."""
    ex = r["exact_epsilon"]
    for v in r["verdicts"]:
        lb, claim = _fmt(v["epsilon_lower_bound"]), _fmt(v["claimed_epsilon"])
        label = v["kind"] if v["kind"] != "single" else "audit"
        if v["violation"]:
            if v["kind"] == "single":
                msg = f"AUDIT VIOLATION: {r['mechanism']} leaks at least {lb} > claimed {claim}."
            else:
                msg = (
                    f"AUDIT VIOLATION ({label}): {r['mechanism']} leaks at least {lb} > claimed "
                    f"{claim}, read as {v['reading']}."
                )
            if v["consequence"]:
                msg += " " + v["consequence"]
            violations.append(msg)
        else:
            extra = ""
            if ex is not None and v["kind"] in ("distribution", "single"):
                extra = f"; white-box exact epsilon {_fmt(ex)} (holds in exact arithmetic only)"
            void = ""
            c = v["claimed_epsilon"]
            if c is not None and (math.isinf(c) or c > 10.0):
                void = (
                    f", but a claim of {claim} per release is above 10 and itself gives no "
                    "protection, so finding no violation says nothing"
                )
            verified.append(
                f"Audit of {r['mechanism']}, {v['reading']} reading: empirical lower bound {lb} "
                f"<= claim {claim}{extra}: no violation found (a black-box audit cannot prove "
                f"the claim){void}."
            )
    prof = r.get("profile")
    if prof is not None:
        bad = [d for d, a in zip(prof["delta"], prof["above_claim"], strict=True) if a]
        if bad:
            violations.append(
                f"PROFILE VIOLATION: the audited privacy profile of {r['mechanism']} lies above "
                f"the claimed one at delta = {', '.join(_fmt(d) for d in bad)}."
            )
        else:
            verified.append(
                f"Audited privacy profile of {r['mechanism']}: at every one of "
                f"{len(prof['delta'])} deltas the epsilon lower bound is at or below the claim."
            )
    for w in r.get("warnings") or []:
        notes.append(f"Audit of {r['mechanism']}: {w}")


def _n(count: int, noun: str, plural: str | None = None) -> str:
    """``"1 agent"``, ``"3,000 agents"``: a count with its noun in the right number."""
    return f"{count:,} {noun if count == 1 else (plural or noun + 's')}"


def _no_protection(claim: dict[str, Any]) -> str:
    unit = claim.get("unit") or "unit"
    return f"the claim itself gives no protection (epsilon = {_fmt(claim['epsilon'])} per {unit})"


def _one_run_statements(o: dict[str, Any], violations: list[str], verified: list[str]) -> None:
    lb, claim = _fmt(o["epsilon_lower_bound"]), _fmt(o["claimed_epsilon"])
    size = _n(o["canaries"], "canary", "canaries") if isinstance(o["canaries"], int) else "canaries"
    conf = o.get("confidence")
    lvl = f" at confidence {conf:g}" if isinstance(conf, float) else ""
    if o["violation"]:
        violations.append(
            f"ONE-RUN AUDIT VIOLATION ({o['setting']}): {o['name']} leaks at least {lb} > "
            f"claimed {claim}{lvl} ({size})."
        )
        return
    ceiling = (
        f"; with {size} it could not have shown more than {_fmt(o['ceiling'])}"
        if o.get("ceiling") is not None
        else ""
    )
    verified.append(
        f"One-run audit ({o['setting']}, {size}): empirical lower bound {lb} <= claim {claim}"
        f"{lvl}: no violation found{ceiling} (an audit cannot prove the claim)."
    )


def _verdict(model: dict[str, Any], system_claimed: list[str] | None = None) -> dict[str, Any]:
    led, aud, att = model["ledger"], model["audits"], model["attacks"]
    run = model["run"]
    mech = run["mechanism"] or {}
    stmt = model.get("privacy_statement") or {}
    the = stmt.get("claim") or {}
    one_run = aud.get("one_run") or []
    claimed: list[str] = []
    verified: list[str] = []
    not_verified: list[str] = []
    violations: list[str] = []
    if the.get("epsilon") is not None:
        alts = the.get("alternatives") or []
        alt = (
            " Alternatives, not the claim: "
            + "; ".join(f"{_fmt(a['epsilon'])} by {a['method']} ({a['source']})" for a in alts)
            + "."
            if alts
            else ""
        )
        claimed.append(
            f"The claim: epsilon = {_fmt(the['epsilon'])} at delta = {_fmt(the['delta'])} per "
            f"{the.get('unit') or 'unit'}, by {the.get('method') or 'an accountant not named'} "
            f"(from {the['source']}).{alt}"
        )
    eps_sub = led["epsilon_per_submission"]
    non_private = str(mech.get("name", "")).replace("_", "").lower() in ("none", "noprivacy")
    if mech.get("name") and (non_private or (eps_sub is not None and math.isinf(eps_sub))):
        claimed.append(
            f"No local privacy is claimed: the {mech['name']} mechanism releases reports without "
            "noise (epsilon = inf); the ledger records every release as non-private."
        )
    elif mech.get("name") and eps_sub is None:
        claimed.append(
            f"Releases go through the {mech['name']} mechanism (config.json gives no "
            "per-release epsilon for it; the claim above is composed by the accountant)."
        )
    elif mech.get("name"):
        claimed.append(
            f"Each report is randomised on the agent's side by the {mech['name']} mechanism at "
            f"epsilon = {_fmt(eps_sub)} per submission (delta = {_fmt(led['delta'])}); the "
            "aggregator only ever sees the noisy report."
        )
    else:
        claimed.append(
            f"The {run['algorithm']} run records its releases in the ledger; its mechanisms "
            "are described in the algorithm's sections below."
        )
    claimed.extend(system_claimed or [])  # the system's own sentences (its report sections)
    if led["agents"]:
        inf_note = ""
        if led.get("infinite_agents"):
            inf_note = (
                f" {_n(led['infinite_agents'], 'ledger id')} spent epsilon = inf under every "
                "method (non-private releases)."
            )
        if led.get("basic_not_applicable"):
            inf_note += (
                f" Basic composition does not apply to the Gaussian or approximate-DP events of "
                f"{_n(led['basic_not_applicable'], 'ledger id')} (inf under it, finite under "
                "the tightest method)."
            )
        claimed.append(
            f"Per agent, composed over its submissions: at most {_fmt(led['basic']['max'])} under "
            f"basic sequential composition and {_fmt(led['best']['max'])} under the tightest valid "
            f"method ({', '.join(led['methods'])}), over {_n(led['agents'], 'agent')} in the "
            f"ledger.{inf_note}"
        )
    claim = model.get("claim") or {}
    eps_agent = _num(claim.get("epsilon_per_agent"))
    if eps_agent is not None:
        how = f" ({claim['composition']})" if isinstance(claim.get("composition"), str) else ""
        claimed.append(f"The trainer claims each agent's reports are {_fmt(eps_agent)}-LDP{how}.")
        top = led["basic"]["max"]
        if top is not None and top > eps_agent * (1 + 1e-9):
            violations.append(
                f"LEDGER ABOVE CLAIM: an agent spent {_fmt(top)} under basic composition, more "
                f"than the trainer's per-agent claim {_fmt(eps_agent)}."
            )
        elif top is not None:
            verified.append(
                f"The ledger agrees with the trainer's claim: no agent spent more than "
                f"{_fmt(eps_agent)} (largest: {_fmt(top)})."
            )
    if led["budget"] is not None:
        over = led["over_budget"]
        msg = f"Budget {_fmt(led['budget'])} per agent: {_n(over, 'agent')} over budget."
        (not_verified if over else claimed).append(msg)
    else:
        claimed.append("No per-agent budget was set for this run.")
    if led["central"]:
        central_max = led["central"]["max_epsilon"]
        role = ""
        if the.get("epsilon") is not None and abs(central_max - the["epsilon"]) > 1e-9 * max(
            1.0, abs(the["epsilon"])
        ):
            role = " (the ledger's tightest method: an alternative, not the claim)"
        claimed.append(
            f"Central (model-level) charges are reported separately, never summed with the local "
            f"ones: {_n(led['central']['agents'], 'ledger id')}, largest central epsilon "
            f"{_fmt(central_max)}{role}."
        )
    st = run["status"]
    if st["run"] == "not recorded":
        not_verified.append(
            "The run's status is not recorded (no status in config.json, no manifest.json): "
            "whether it finished cannot be told."
        )
    elif st["run"] != "complete":
        not_verified.append(
            f"The run did not complete (status: {st['run']}): the ledger and the outputs hold "
            "only what was released before it stopped."
        )
    if run.get("missing"):
        not_verified.append(
            f"The run lacks files it writes when it completes: {run['missing']}; the report "
            "shows the ledger and what is present."
        )
    if st["changed"] or st["missing"]:
        not_verified.append(f"EVIDENCE CHANGED: {st['evidence']}.")
    elif st["evidence_ok"]:
        verified.append(
            "Evidence intact: every file the run wrote still has the SHA-256 of its manifest."
        )
    else:
        not_verified.append(st["evidence"][0].upper() + st["evidence"][1:] + ".")
    if st.get("ledger_check"):
        lc = st["ledger_check"]
        (verified if lc["ok"] else not_verified).append(lc["words"])
    if led.get("releases") == 0:
        not_verified.append("The run made no submissions: nothing was released or learned.")
    if led["uncharged_agents"]:
        not_verified.append(
            f"{_n(led['uncharged_agents'], 'agent')} submitted reports that the ledger never "
            f"charged (e.g. {', '.join(led['uncharged_examples'])}): their spend is NOT accounted."
        )
    elif led.get("releases") is not None:
        verified.append("Every agent that submitted a report was charged in the ledger.")
    if led.get("undercharged_agents"):
        not_verified.append(
            f"{_n(led['undercharged_agents'], 'agent')} released more reports than the ledger "
            f"charged (e.g. {', '.join(led['undercharged_examples'])}): part of their spend is "
            f"NOT accounted."
        )
    elif led.get("charges_compared") and not led["uncharged_agents"]:
        more = led.get("overcharged_agents") or 0
        verified.append(
            "Per agent, the ledger holds at least one charge for every release in the transcript"
            + (
                f" ({_n(more, 'agent')} charged more than released: prepaid or interrupted, the "
                f"safe side)."
                if more
                else " (the same count for every agent)."
            )
        )
    if aud["status"] == "run":
        for r in aud["results"]:
            _audit_statements(r, violations, verified, not_verified)
    for o in one_run:
        _one_run_statements(o, violations, verified)
    if aud["status"] != "run" and not one_run:
        not_verified.append(
            "No audit was run: neither an audit of the mechanism (audit.json) nor a one-run "
            "audit of this run."
        )
    elif aud["status"] != "run":
        not_verified.append(
            "The mechanism was not audited in isolation (no audit.json); the one-run audit "
            "(under Audits) is this run's audit."
        )
    attacks = [r for r in att["results"] if not r.get("one_run")]
    for r in attacks:
        ci = _ci(r)
        if r["violation"]:
            violations.append(
                f"ATTACK EXCEEDS CEILING: {r['name']} accuracy {_fmt(r['accuracy'])}{ci} > "
                f"ceiling {_fmt(r['ceiling'])} the claim allows."
            )
        elif r["above_chance"]:
            verified.append(
                f"Attack {r['name']}: accuracy {_fmt(r['accuracy'])}{ci} is ABOVE CHANCE "
                f"{_fmt(r['chance'])}: the attacker learns something about the secret (as any "
                f"epsilon > 0 allows), and stays within the ceiling {_fmt(r['ceiling'])} the "
                "claim allows."
            )
        else:
            verified.append(
                f"Attack {r['name']}: accuracy {_fmt(r['accuracy'])}{ci} is not "
                f"distinguishable from chance {_fmt(r['chance'])} and within the ceiling "
                f"{_fmt(r['ceiling'])} the claim allows."
            )
    if not attacks:
        not_verified.append(
            "No attack other than the one-run audit was run (no other attack_*.json)."
            if one_run
            else "No attack was run on the transcript (no attack_*.json)."
        )
    for sec in model.get("sections") or []:
        if sec.get("error"):
            not_verified.append(f"Section {sec['title']!r} could not be built: {sec['error']}")
    not_verified.append(
        "Lower bounds and attacks can only find leaks, never prove their absence; the claim "
        "rests on the mechanism's proof and on every release being charged before it is made."
    )
    meaningful = bool(the.get("meaningful", True)) if the.get("epsilon") is not None else True
    if not meaningful:
        # every sentence that finds the claim upheld says, in the same sentence, that it is void
        tag = _no_protection(the)
        verified = [
            v
            if v.startswith(("Evidence intact", "Every agent", "The run matches its manifest"))
            or "gives no protection" in v
            else v.rstrip(".") + f", but {tag}."
            for v in verified
        ]
    evidence_changed = bool(st["changed"] or st["missing"])
    audited = aud["status"] == "run" or bool(one_run)
    if violations:
        first = violations[0]
        status = "violation"
        label, rest = first.split(":", 1)
        headline = f"{_n(len(violations), 'privacy violation')} found. {label.capitalize()}: "
        headline += rest.strip().split(". ")[0].rstrip(".") + "."
    elif not meaningful:
        status = "no meaningful guarantee"
        above = (
            "" if math.isinf(the["epsilon"]) else f" (above {stmt.get('meaningful_epsilon', 10):g})"
        )
        headline = (
            f"{_no_protection(the)[0].upper()}{_no_protection(the)[1:]}{above}; the checks "
            "below found no contradiction of it, which says nothing about privacy."
        )
    elif audited and attacks and not evidence_changed:
        status = "consistent"
        headline = "Claims consistent with every audit and attack that was run."
    else:
        status = "partially verified"
        headline = "Claims not contradicted, but parts were not checked (see below)."
    return {
        "status": status,
        "headline": headline,
        "protection": the.get("protection"),
        "violations": violations,
        "claimed": claimed,
        "verified": verified,
        "not_verified": not_verified,
    }


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


def build_model(
    run: RunData,
    ledger: LedgerStats,
    *,
    top: int = 10,
    sections_registry: Any = None,
    figures: bool = True,
) -> dict[str, Any]:
    """Build the JSON-able report model of one run (see :func:`build_parts`)."""
    return build_parts(run, ledger, top=top, sections_registry=sections_registry, figures=figures)[
        0
    ]


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
        "ledger": _ledger_section(run, ledger, top, part.releases),
        "audits": _audit_section(run),
        "attacks": _attack_section(run),
        "claim": _claim_section(run),
        "sections": list(part.sections),
        "sections_source": part.note,
    }
    model["audits"]["one_run"] = one_run
    one_names = {o["name"] for o in one_run}
    for r in model["attacks"]["results"]:
        r["one_run"] = r["name"] in one_names
    statement = privacy_statement(run, ledger, model, facts=part.statement, unit=part.unit)
    model["privacy_statement"] = statement
    model["verdict"] = _verdict(model, part.claimed)
    # the statement first (after the identification), as on the page
    head = ("schema", "generated", "generator", "run_dir", "privacy_statement", "verdict")
    out = {**{k: model[k] for k in head}, **{k: v for k, v in model.items() if k not in head}}
    return out, part
