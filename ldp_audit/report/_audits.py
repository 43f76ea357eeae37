"""The report model's audit and attack sections: each audit's verdicts, witness, privacy
profile and trade-off curve, and each attack's result against its ceiling.

Part of :mod:`ldp_audit.report._model` (the whole model is built there).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ldp_audit.report._load import RunData
from ldp_audit.rundir.files import json_real

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


def _verdict_rows(e: dict[str, Any]) -> list[dict[str, Any]]:
    """The audit's verdicts (AuditResult.to_dict()["verdicts"]), distribution first."""
    vs = e.get("verdicts") or {}
    rows = []
    for kind in [k for k in _READING if k in vs]:  # checked by load_run
        v = vs[kind]
        witness = _witness_model(v.get("witness"))
        rows.append(
            {
                "kind": kind,
                "reading": _READING[kind],
                "epsilon_lower_bound": float(v["epsilon_lower_bound"]),
                "claimed_epsilon": float(v["claimed_epsilon"]),
                "violation": v.get("violation") is True,
                "witness": witness,
                "consequence": str(v.get("consequence") or ""),
                "events_estimated": v.get("events_estimated"),
                "point_estimate": _point_estimate(witness),
            }
        )
    return rows


def _num_lists(d: Any, keys: tuple[str, ...]) -> dict[str, list[float]] | None:
    """``d``'s non-empty lists of numbers under ``keys``, or None when one is missing or bad."""
    vals = [d.get(k) for k in keys] if isinstance(d, dict) else [None]
    if not all(isinstance(v, list) and v for v in vals):
        return None
    nums = {k: [json_real(x) for x in v] for k, v in zip(keys, vals, strict=True)}
    return None if any(x is None for v in nums.values() for x in v) else nums


def _profile_model(p: Any) -> dict[str, Any] | None:
    nums = _num_lists(p, ("delta", "epsilon_lower", "epsilon_claimed"))
    if nums is None or len({len(v) for v in nums.values()}) != 1:
        return None
    above = [a > b for a, b in zip(nums["epsilon_lower"], nums["epsilon_claimed"], strict=True)]
    return {
        **nums,
        "above_claim": above,
        "confidence": json_real(p.get("confidence")),
        "claimed_from": p.get("claimed_from"),
    }


def _tradeoff_model(t: Any) -> dict[str, Any] | None:
    """The audited f-DP trade-off curve of an audit (``AuditResult.tradeoff.to_dict()``)."""
    nums = _num_lists(t, ("type1_upper", "type2_upper", "claimed_alpha", "claimed_beta"))
    if nums is None or len(nums["type1_upper"]) != len(nums["type2_upper"]):
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
        "confidence": json_real(t.get("confidence")),
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


_AUDIT_REALS = ("max_refutable_epsilon", "resolution_probability", "seconds")


def audit_section(run: RunData) -> dict[str, Any]:
    if run.audits is None:
        return {"status": "not run", "results": []}
    out = []
    default_name = str((run.config.get("mechanism") or {}).get("name", "mechanism"))
    for e in run.audits:
        claim = float(e["claimed_epsilon"])  # float("inf") parses the "inf" of to_dict()
        lb = float(e["epsilon_lower_bound"])
        viol = e["violation"] if isinstance(e.get("violation"), bool) else lb > claim
        verdicts = _verdict_rows(e)
        # the overall verdict follows the stricter of the two readings
        viol = viol or any(v["violation"] for v in verdicts)
        leak = e.get("leak") if isinstance(e.get("leak"), str) else None
        warnings = e.get("warnings")
        out.append(
            {
                "mechanism": str(e.get("mechanism") or default_name),
                "claimed_epsilon": claim,
                "exact_epsilon": json_real(e.get("exact_epsilon")),
                "epsilon_lower_bound": lb,
                **{k: json_real(e.get(k)) for k in ("confidence", "delta")},
                **{k: e.get(k) for k in ("samples", "selection_samples")},
                **{k: json_real(e.get(k)) for k in _AUDIT_REALS},
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


def attack_section(run: RunData) -> dict[str, Any]:
    """Each attack (AttackResult.to_dict()) beside its ceiling."""
    if not run.attacks:
        return {"status": "not run", "results": []}
    out = []
    for name, a in run.attacks.items():
        ci = a.get("accuracy_ci")
        lo, hi = map(json_real, ci if isinstance(ci, list) and len(ci) == 2 else (None, None))
        ceiling, chance = json_real(a.get("ceiling")), json_real(a.get("chance"))
        viol = a.get("violation")
        if not isinstance(viol, bool):
            viol = lo is not None and ceiling is not None and lo > ceiling
        tpr = a.get("tpr_at_fpr")
        out.append(
            {
                "name": name,
                "attack": str(a.get("attack") or name),
                "accuracy": json_real(a["accuracy"]),  # null: the continuous variant
                "ci_low": lo,
                "ci_high": hi,
                "confidence": json_real(a.get("confidence")),
                "ceiling": ceiling,
                "chance": chance,
                "above_chance": lo is not None and chance is not None and lo > chance,
                "source": run.sources.get(f"attack_{name}"),
                "k": a.get("k"),
                # the ceiling applies to the epsilon composed over the T reports attacked together
                "epsilon": json_real(a.get("composed_epsilon", a.get("epsilon"))),
                "reports_per_agent": a.get("reports_per_agent"),
                **{k: json_real(a.get(k)) for k in ("mae", "mae_baseline")},
                "implied_epsilon_lower_bound": json_real(a.get("epsilon_lower_bound")),
                **{k: json_real(a.get(k)) for k in ("auc", "advantage")},
                "tpr_at_fpr": tpr if isinstance(tpr, dict) and tpr else None,
                "samples": a.get("n"),
                "violation": viol,
                "details": {k: v for k, v in a.items() if isinstance(v, (str, int, float))},
            }
        )
    return {"status": "run", "results": out}
