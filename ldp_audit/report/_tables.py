"""The report's tables: every section's rows of cells, number formatting, and the same table as
HTML and as Markdown.

Part of :mod:`ldp_audit.report._render` (the renderers lay the tables out on the page).
"""

from __future__ import annotations

import html
from typing import Any

from ldp_audit.report import markdown
from ldp_audit.report._audits import short_numbers
from ldp_audit.report.markdown import count_noun
from ldp_audit.rundir.files import fmt_number


def cell_text(v: Any, nd: int = 4) -> str:
    """A cell as readable text: numbers at ``nd`` significant digits, lists and dicts as
    comma-separated values (never a raw Python list)."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if 10 ** (nd - 1) <= abs(v) < 1e15:  # nd digits would cut it: 5714.5 -> 5714, 1.838e+04
            return f"{v:.1f}".removesuffix(".0")
        return fmt_number(v, nd, nan="NaN")
    if isinstance(v, (list, tuple)):
        if not v:
            return "none"
        head = ", ".join(cell_text(x, nd) for x in v[:8])
        return head + (f", ... ({len(v)} values)" if len(v) > 8 else "")
    if isinstance(v, dict):
        if not v:
            return "none"
        return "; ".join(f"{k}: {cell_text(x, nd)}" for k, x in v.items())
    return str(v)


def _short(v: Any, k: int = 4) -> str:
    if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
        head = ", ".join(f"{x:.4g}" for x in v[:k])
        return f"({head}{', ...' if len(v) > k else ''})"
    return cell_text(v)


def _witness(w: Any) -> str:
    """One readable line for an audit witness (AuditResult's Witness.to_dict()) or any value."""
    if w is None:
        return "n/a"
    if isinstance(w, dict) and "event" in w:
        parts = [f"event: {w['event']}"]
        if w.get("family"):
            parts[0] += f" [{w['family']}]"
        if all(k in w for k in ("k1", "n1", "k2", "n2")):
            parts.append(
                f"counts {w['k1']}/{w['n1']} under M(x) vs {w['k2']}/{w['n2']} under M(x2)"
            )
        if "x" in w and "x2" in w:
            parts.append(f"x = {_short(w['x'])}, x2 = {_short(w['x2'])}")
        s = "; ".join(parts)
    else:
        s = cell_text(w)
    s = short_numbers(s)
    return s if len(s) <= 400 else s[:397] + "..."


# ---------------------------------------------------------------------- tables (rows of cells)


def _attack_verdict(r: dict[str, Any]) -> str:
    if r["violation"]:
        return "EXCEEDS CEILING"
    if r.get("above_chance"):
        return "ABOVE CHANCE (within ceiling)"
    return "not above chance (within ceiling)"


def report_tables(m: dict[str, Any]) -> dict[str, tuple[list[str], list[list[Any]]]]:
    run, led, aud, att = m["run"], m["ledger"], m["audits"], m["attacks"]
    t: dict[str, tuple[list[str], list[list[Any]]]] = {}
    mech = run["mechanism"] or {}
    t["run"] = (
        ["field", "value"],
        [
            ["algorithm", run["algorithm"]],
            ["mechanism", _pairs(mech, "=", cell_text) or "several (see sections)"],
            ["seed", run["seed"]],
            ["created", run["created"]],
            *[[k, run[k]] for k in ("command", "machine") if run.get(k)],
            ["versions", _pairs(run["versions"]) or "n/a"],
            ["report generated with", _pairs(m.get("generator", {})) or "n/a"],
            *([["extra analysis inputs", run["extra"]]] if run.get("extra") else []),
        ],
    )
    st = run["status"]
    lc = st.get("ledger_check")
    sealed = st.get("sealed_analyses") or []
    later = [f for f in st["added_later"] if f not in sealed]
    rows = [  # a row without a value is left out
        ["status", st["run"]],
        ["manifest", st["manifest"] or "none"],
        ["evidence", st["evidence"]],
        ["sealed files (SHA-256 in manifest.json)", st.get("sealed")],
        ["sealed analyses (analyses.json)", sealed],
        ["added after the run" + (", not sealed" if sealed else ""), later],
        ["manifest, ledger anchor and keys", lc and lc["words"]],
    ]
    t["status"] = (["run status", "value"], [r for r in rows if r[1]])
    t["config"] = (["parameter", "value"], [[k, cell_text(v)] for k, v in run["config"].items()])
    stats = ("min", "median", "mean", "max")
    rows = [
        [name, *(s[k] for k in stats)]
        for name, s in (
            ("basic sequential composition", led["basic"]),
            ("tightest valid method", led["best"]),
            ("remaining budget", led["remaining"]),
            ("submissions per agent", led["submissions_per_agent"]),
        )
        if s is not None
    ]
    t["ledger"] = (["per agent (local scope)", *stats], rows)
    scope = {"local": "local (per-agent LDP)", "central": "central (model-level DP)"}
    t["scopes"] = (
        ["scope", "ledger ids", "min eps", "median eps", "max eps"],
        [
            [scope[sc["scope"]], sc["ids"], sc["min"], sc["median"], sc["max"]]
            for sc in led.get("scopes", [])
        ],
    )
    claim = m.get("claim") or {}
    t["claim"] = (
        ["trainer's privacy statement (metrics.json)", "value"],
        [[_CLAIM_LABELS.get(k, k), cell_text(v)] for k, v in claim.items()],
    )
    t["top"] = _columns(_TOP_COLUMNS, led["top_groups"])
    stmt = m.get("privacy_statement") or {}
    t["statement"] = (
        ["field", "value", "source"],
        [[r["label"], r["value"], r["source"]] for r in stmt.get("rows", [])],
    )
    t["one_run"] = _columns(_ONE_RUN_COLUMNS, aud.get("one_run") or [])
    arows = [(r, v) for r in aud["results"] for v in r["verdicts"]]
    t["audits"] = _columns(_AUDIT_COLUMNS, arows)
    t["attacks"] = _columns(_ATTACK_COLUMNS, [r for r in att["results"] if not r.get("one_run")])
    return t


def _columns(cols: dict[str, Any], items: list[Any]) -> tuple[list[str], list[list[Any]]]:
    """A table from ``header -> key or function of the item`` and the items (one row each)."""
    return list(cols), [[c(x) if callable(c) else x[c] for c in cols.values()] for x in items]


def _pairs(d: dict[str, Any], sep: str = " ", fmt: Any = str) -> str:
    return ", ".join(f"{k}{sep}{fmt(v)}" for k, v in d.items())


def _verdict_word(x: dict[str, Any]) -> str:
    return "VIOLATION" if x["violation"] else "no violation found"


def _exact_cell(rv: tuple[dict[str, Any], dict[str, Any]]) -> Any:
    r, v = rv
    if r["exact_epsilon"] is None:
        return None
    if v["kind"] == "distribution":
        return r["exact_epsilon"]
    return "not applicable (holds in exact arithmetic only)"


_ONE_RUN_COLUMNS: dict[str, Any] = {
    "one-run audit": "name",
    "setting": "setting",
    "canaries": "canaries",
    "claimed eps": "claimed_epsilon",
    "empirical lower bound": "epsilon_lower_bound",
    "confidence": "confidence",
    "ceiling (every guess right)": "ceiling",
    "verdict": _verdict_word,
}
_AUDIT_COLUMNS: dict[str, Any] = {
    "mechanism": lambda rv: rv[0]["mechanism"],
    "reading": lambda rv: rv[1]["reading"],
    "claimed eps": lambda rv: rv[1]["claimed_epsilon"],
    "exact eps (white-box; exact arithmetic only)": _exact_cell,
    "empirical lower bound": lambda rv: rv[1]["epsilon_lower_bound"],
    "confidence": lambda rv: rv[0]["confidence"],
    "samples per input": lambda rv: _samples_cell(rv[0]),
    "resolution (what this size could show)": lambda rv: _resolution_cell(rv[0]),
    "verdict": lambda rv: _verdict_word(rv[1]),
    "witness": lambda rv: _witness(rv[1]["witness"]),
}
_ATTACK_COLUMNS: dict[str, Any] = {
    "attack": "name",
    "accuracy": "accuracy",
    "CI": lambda r: (
        f"{cell_text(r['ci_low'])} to {cell_text(r['ci_high'])}"
        if r["ci_low"] is not None
        else None
    ),
    "chance": "chance",
    "ceiling": "ceiling",
    "implied eps lower bound": "implied_epsilon_lower_bound",
    "AUC": "auc",
    "advantage": "advantage",
    "TPR at low FPR": lambda r: cell_text(r["tpr_at_fpr"]) if r["tpr_at_fpr"] is not None else None,
    "targets": "samples",
    "verdict": _attack_verdict,
}

#: readable labels for keys of the trainer's privacy statement (metrics.json ``privacy``)
_CLAIM_LABELS = {
    "agents_per_trial": "agents started per trial (incl. those stopped before submitting)",
    "epsilon_per_submission": "epsilon per report",
    "epsilon_per_agent": "epsilon per agent (composed over its reports)",
    "epsilon_total": "epsilon per agent (composed over its reports)",
    "rounds": "reports per agent (rounds)",
    "agents": "agents charged",
    "max_spent_epsilon": "largest epsilon an agent spent",
}


def _resolution_cell(r: dict[str, Any]) -> Any:
    """The largest epsilon this audit could have refuted and the smallest event probability
    (under the second input) it could resolve, where the audit recorded them (issue 30)."""
    eps, p = r.get("max_refutable_epsilon"), r.get("resolution_probability")
    parts = []
    if isinstance(eps, (int, float)):
        parts.append(f"epsilon up to {eps:.3g}")
    if isinstance(p, (int, float)):
        parts.append(f"events of probability >= {p:.2g}")
    return "; ".join(parts) if parts else "not recorded"


def _samples_cell(r: dict[str, Any]) -> Any:
    """Samples per input with the selection / estimation split the witness counts come from."""
    n, sel = r.get("samples"), r.get("selection_samples")
    if isinstance(n, int) and isinstance(sel, int) and 0 < sel < n:
        return (
            f"{n:,} per input: {sel:,} to choose the event, {n - sel:,} to estimate it "
            "(the witness counts are out of these)"
        )
    return r.get("samples")


def _agents_cell(g: dict[str, Any]) -> str:
    if g["agents"] == 1:
        return g["first"]
    ex = ", ".join(g["examples"])
    more = g["agents"] - len(g["examples"])
    return f"{g['agents']:,} agents with identical rows ({ex}" + (
        f" and {more:,} more)" if more > 0 else ")"
    )


_TOP_COLUMNS: dict[str, Any] = {
    "agents": _agents_cell,
    "submissions each": "submissions",
    "spent (basic)": "basic",
    "spent (tightest)": "best",
    "method": "method",
    "remaining": "remaining",
}


def top_title(led: dict[str, Any]) -> str:
    groups = led["top_groups"]
    n = sum(g["agents"] for g in groups)
    if groups and n > len(groups):
        return (
            f"Largest spenders: {count_noun(n, 'agent')} in {count_noun(len(groups), 'row')} "
            "(agents with identical values share a row)"
        )
    return f"Largest spenders: {count_noun(len(groups), 'agent')}"


def html_table(head: list[str], rows: list[list[Any]]) -> str:
    out = [
        "<table><thead><tr>",
        *(f"<th>{html.escape(h)}</th>" for h in head),
        "</tr></thead><tbody>",
    ]
    if not rows:
        out.append(f'<tr><td class="na" colspan="{max(len(head), 1)}">no rows</td></tr>')
    for r in rows:
        out.append("<tr>")
        for c in r:
            cls = ' class="num"' if isinstance(c, (int, float)) and not isinstance(c, bool) else ""
            txt = html.escape(cell_text(c))
            if txt in ("VIOLATION", "EXCEEDS CEILING"):
                txt = f'<span class="bad">{txt}</span>'
            elif txt.startswith("ABOVE CHANCE"):
                txt = f'<span class="warn">{txt}</span>'
            elif c is None:
                txt = '<span class="na">n/a</span>'
            out.append(f"<td{cls}>{txt}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def md_table(head: list[str], rows: list[list[Any]]) -> str:
    def cell(c: Any) -> str:
        return cell_text(c).replace("|", "\\|").replace("\n", " ")

    return "\n".join(markdown.md_table(head, rows, cell))
