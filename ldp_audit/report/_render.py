"""Render a report model as self-contained HTML, Markdown and JSON.

The HTML embeds its figures as base64 PNG ``data:`` URIs and its CSS inline: no network, no
external files, so ``index.html`` opens the same in any browser, offline.
"""

from __future__ import annotations

import base64
import html
import json
from typing import Any

from ldp_audit.report._summary import (
    TOC,
    glossary_html,
    glossary_markdown,
    glossary_used,
    link_terms,
    summary_rows,
)
from ldp_audit.report._tables import (
    cell_text,
    html_table,
    md_table,
    report_tables,
    top_title,
)
from ldp_audit.report.markdown import count_noun

#: figure name -> caption, in display order.
FIGURE_TITLES = {
    "ledger": "Spent epsilon over submissions and per-agent spend",
    "audit": "Audit verdicts: one-sided confidence intervals for epsilon beside the claim",
    "profile": "Audited privacy profile: epsilon lower bound vs delta, beside the claimed one",
    "tradeoff": "Audited f-DP trade-off: upper confidence points (type I, type II error) of "
    "threshold tests beside the claimed trade-off curve",
    "attack": "Attack accuracy beside the ceiling curve",
}

_CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;margin:0;
 color:#1d2330;background:#f5f6f8;line-height:1.45}
main{max-width:1060px;margin:0 auto;padding:24px 28px 48px;background:#fff;min-height:100vh;
 overflow-wrap:break-word}
h1{font-size:26px;margin:0 0 4px}
h2{font-size:20px;margin:32px 0 8px;border-bottom:2px solid #e3e6eb;padding-bottom:4px}
h3{font-size:16px;margin:18px 0 6px}
.sub{color:#5b6475;font-size:13px;margin-bottom:16px}
.verdict{border-radius:8px;padding:14px 18px;margin:14px 0 8px;border-left:8px solid}
.verdict.consistent{background:#eaf7ee;border-color:#2ca02c}
.verdict.violation{background:#fdecec;border-color:#d62728}
.verdict.partially{background:#fff6e5;border-color:#ff9f1c}
.verdict.nomeaning{background:#f3f0f0;border-color:#7a1f1f}
.statement{border:2px solid #2a3550;border-radius:8px;padding:4px 16px 10px;margin:14px 0}
.statement h2{margin-top:10px}
.statement td.src{color:#5b6475;font-size:12px}
.verdict .head{font-size:19px;font-weight:700;margin-bottom:6px}
.verdict h3{margin:10px 0 2px;font-size:14px;text-transform:uppercase;letter-spacing:.04em;
 color:#3b4352}
.verdict ul{margin:2px 0 4px 20px;padding:0}
.verdict h3.violations{color:#b3161b}
.warn{color:#a35200;font-weight:700}
.errorbox{background:#fdecec;border:1px solid #d62728;padding:8px 12px;border-radius:6px}
.chain{font-family:monospace;font-size:12px;word-break:break-all}
table{border-collapse:collapse;margin:8px 0 12px;font-size:13.5px;display:block;max-width:100%;
 overflow-x:auto}
th,td{border:1px solid #d9dde3;padding:4px 9px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b3161b;font-weight:700}.good{color:#1f7a33;font-weight:600}.na{color:#7a8292;font-style:italic}
.notrun{background:#f4f4f6;border:1px dashed #aab;padding:8px 12px;border-radius:6px;color:#4a5263}
figure{margin:10px 0 18px}figure img{max-width:100%;height:auto;border:1px solid #e3e6eb;
 box-sizing:border-box}
figcaption{font-size:12.5px;color:#5b6475}
@media (max-width:760px){figure{overflow-x:auto}figure img{max-width:none;width:700px}}
details{margin:6px 0}summary{cursor:pointer;color:#2a5db0}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;font-size:12px}
code{font-size:12.5px}
.summary{border:2px solid #2a3550;border-radius:8px;padding:8px 16px;margin:12px 0;
 background:#f8f9fc}
.summary h2{margin-top:8px}.summary table{margin:4px 0;font-size:14px}.summary th{width:150px}
nav.toc{font-size:13.5px;margin:6px 0 14px}nav.toc a{margin-right:12px;display:inline-block;
 max-width:calc(100% - 12px)}
a.term{color:inherit;text-decoration:underline dotted}
dl.glossary dt{font-weight:700;margin-top:8px}dl.glossary dd{margin:2px 0 0 18px}
"""


# ---------------------------------------------------------------------- shared prose


def _ledger_note(led: dict[str, Any]) -> str:
    if led["agents_in_transcript"] is not None:  # the system gave its releases
        who = (
            f"{count_noun(led['agents'], 'agent')} in the ledger; "
            f"{count_noun(led['agents_in_transcript'], 'agent')} submitted "
            f"{count_noun(led.get('releases') or 0, 'report')}"
        )
    elif not led["agents"] and led.get("central"):
        who = "No local (per-agent) charges: this run's charges are central (below)"
    else:
        who = f"{count_noun(led['agents'], 'agent')} in the ledger (local scope)"
    methods = ", ".join(f"{k} ({count_noun(v, 'agent')})" for k, v in led["methods"].items())
    s = f"{who}. Spend is evaluated at delta = {cell_text(led['delta'])}. Methods that gave the "
    s += f"tightest bound: {methods or 'none'}. "
    if led.get("infinite_agents"):
        s += (
            f"{count_noun(led['infinite_agents'], 'ledger id')} spent epsilon = inf under every "
            "method "
            f"(e.g. {', '.join(led['infinite_examples'])}). "
        )
    if led.get("basic_not_applicable"):
        s += (
            f"Basic composition does not apply to the Gaussian or approximate-DP events of "
            f"{count_noun(led['basic_not_applicable'], 'ledger id')}: they show inf under it and a "
            "finite value under the tightest method. "
        )
    if led["budget"] is None:
        s += "No per-agent budget was set."
    else:
        how = led.get("budget_method")
        s += f"Budget: {cell_text(led['budget'])} per agent"
        s += f" (enforced under {how} composition)" if how else ""
        s += f"; {count_noun(led['over_budget'], 'agent')} over it."
    if led["uncharged_agents"]:
        s += (
            f" WARNING: {count_noun(led['uncharged_agents'], 'agent')} submitted without a "
            "ledger charge "
            f"(e.g. {', '.join(led['uncharged_examples'])})."
        )
    return s


#: how an attack's result reaches the report (`attack membership --run-dir` writes none into
#: the run: a reader who ran it without --out found this note unchanged, session 54)
_ATTACK_HOW = (
    "Run `ldp-audit attack NAME --run-dir RUN` on the transcript to measure what an attacker "
    "recovers: `attack dynamics` adds RUN/attack_dynamics.json; `attack membership` leaves the "
    "run as it is and keeps its result only with `--out FILE`; then `ldp-audit report RUN "
    "FILE ...` (`--overwrite` to replace the report)."
)
_NOT_RUN = {
    "audits": "Not run: no audit.json in this run directory or the extra inputs. Run "
    "`ldp-audit audit --run-dir RUN` (it audits every mechanism the run released through and "
    "writes RUN/audit.json, or names the command that audits a run it cannot), then `ldp-audit "
    "report RUN` again to verify the claim.",
    "attacks": "Not run: no attack_*.json in this run directory or the extra inputs. "
    + _ATTACK_HOW,
    "attacks_one_run": "Not run: no attack other than the one-run audit (under Audits). "
    + _ATTACK_HOW,
    "audits_isolated": "The mechanism was not audited in isolation (no audit.json): the one-run "
    "audit in the table above is this run's audit.",
}

_VERDICT_HEADS = (
    ("Violations found", "violations"),
    ("What was claimed", "claimed"),
    ("What the evidence shows", "verified"),
    ("What was not verified", "not_verified"),
)


def _code_spans(text: str) -> str:
    """Escape ``text`` for HTML, rendering `code` spans."""
    parts = text.split("`")
    out = []
    for i, part in enumerate(parts):
        esc = html.escape(part)
        out.append(f"<code>{esc}</code>" if i % 2 and i < len(parts) - 1 else esc)
    if len(parts) % 2 == 0:  # an unmatched backtick: keep it literally
        out[-1] = "`" + out[-1]
    return "".join(out)


#: the configuration section's heading, also its contents entry
_CONFIG_TITLE = "Run configuration and environment"
_VERDICT_CLASS = {
    "violation": "violation",
    "consistent": "consistent",
    "partially verified": "partially",
    "no meaningful guarantee": "nomeaning",
}


def _title_claim(m: dict[str, Any]) -> str:
    """The claim for the page title: the one claimed epsilon per unit (never the per-report
    epsilon alone when an agent makes several reports)."""
    the = (m.get("privacy_statement") or {}).get("claim") or {}
    eps = the.get("epsilon")
    if eps is None:
        e = m["ledger"]["epsilon_per_submission"]
        return f", epsilon = {cell_text(e)} per report" if e is not None else ""
    s = f", epsilon = {cell_text(eps)}"
    if the.get("delta"):
        s += f" at delta = {cell_text(the['delta'])}"
    s += f" per {the.get('unit') or 'unit'}"
    k = the.get("releases_per_unit")
    if the.get("per_release") is not None and isinstance(k, int):
        s += f" ({cell_text(the['per_release'])} per report x {count_noun(k, 'report')})"
    if not the.get("meaningful", True):
        s += " (no protection)"
    return s


def _slug(heading: str) -> str:
    """The anchor GitHub and mkdocs give a Markdown heading."""
    keep = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return keep.strip().replace(" ", "-")


def _has_local_agents(m: dict[str, Any]) -> bool:
    """Whether the ledger charged any agent locally (a central-only run, DP-SGD, has no
    per-agent spend to plot or rank: that figure and table are left out)."""
    led = m.get("ledger") or {}
    return bool(led.get("agents")) or not led.get("central")


def _empty_section_note(sec: dict[str, Any]) -> str | None:
    """What to say for an algorithm section that supplied no text, table or figure."""
    if any(p.strip() for p in sec["paragraphs"]) or sec["tables"] or sec["figures"]:
        return None
    data = sec.get("data") or {}
    if any(k in data for k in ("audit", "audits")):
        return (
            'This section\'s audit is the one shown under "Audits of the mechanisms used" above '
            "(the same result file; its entries are in report.json)."
        )
    return "The algorithm gave no content for this section (its data, if any, is in report.json)."


class _Doc:
    """The report page in one syntax: HTML, or Markdown (each element and a blank line)."""

    def __init__(self, md: bool, figures: dict[str, Any]) -> None:
        self.md, self.figures = md, figures
        self.out: list[str] = []

    def add(self, html_text: str, md_text: str | None = None) -> None:
        """``html_text`` in HTML, ``md_text`` in Markdown (None: an HTML-only element)."""
        if not self.md:
            self.out.append(html_text)
        elif md_text is not None:
            self.out += [md_text, ""]

    def h2(self, anchor: str, text: str) -> None:
        self.add(f'<h2 id="{html.escape(anchor)}">{html.escape(text)}</h2>', f"## {text}")

    def p(self, text: str, cls: str = "") -> None:
        self.add(f"<p{cls}>{_code_spans(text)}</p>", text)

    def table(self, head: list[str], rows: list[list[Any]]) -> None:
        self.add(html_table(head, rows), md_table(head, rows))

    def fig(self, name: str, cap: str | None = None) -> None:
        got = self.figures.get(name)
        if got is None:
            return
        cap = cap or FIGURE_TITLES[name]
        if self.md:
            return self.add("", f"![{cap}]({got})")
        b64, cap = base64.b64encode(got).decode("ascii"), html.escape(cap)
        self.add(
            f'<figure><img id="fig-{html.escape(name)}" alt="{cap}" '
            f'src="data:image/png;base64,{b64}"><figcaption>{cap}</figcaption></figure>'
        )


def _body(m: dict[str, Any], t: dict[str, Any], d: _Doc) -> list[str]:
    """Everything below the verdict (status, ledger, audits, attacks, the system's sections,
    the configuration), in ``d``'s syntax; the HTML alone explains the tables in prose."""
    esc = html.escape
    d.h2("status", "Run status and evidence")
    d.table(*t["status"])
    if m["ledger"].get("chain_head"):
        d.p(
            f"ledger chain head: {m['ledger']['chain_head']} (a later copy of this ledger must "
            "extend this hash chain: check it with `ldp-audit budget --verify`).",
            ' class="chain"',
        )
    d.h2("ledger", "Privacy ledger")
    note = _ledger_note(m["ledger"])
    d.add(f"<p>{esc(note)}</p>", note)
    d.table(*t["ledger"])
    d.p(
        "Local charges (each agent's own reports, LDP) and central charges (a model-level "
        "DP claim, e.g. DP-SGD) answer different questions and are shown side by side, never "
        "summed."
    )
    d.table(*t["scopes"])
    if m.get("claim"):
        d.table(*t["claim"])
    if _has_local_agents(m):
        d.fig("ledger")
        d.add(f"<h3>{esc(top_title(m['ledger']))}</h3>", f"### {top_title(m['ledger'])}")
        d.table(*t["top"])
    d.h2("audits", "Audits of the mechanisms used")
    one_run = m["audits"].get("one_run")
    if one_run:
        d.add(
            "<p>One-run audit (Steinke, Nasr &amp; Jagielski 2023): canaries planted in this "
            "very run, half of them included; the auditor guesses which, and the guesses "
            "give an empirical lower bound on epsilon at the stated confidence. The ceiling is "
            "the bound if every guess were right: a claim above it cannot be refuted with this "
            "many canaries.</p>"
        )
        d.table(*t["one_run"])
    if m["audits"]["status"] == "run":
        d.add(
            "<p>Each audit gives two verdicts: the <b>distribution</b> reading (outputs read in "
            "exact arithmetic: is the mechanism's mathematics right?) and the "
            "<b>implementation</b> reading (the same events plus the floating-point bits of the "
            "raw outputs: does this binary leak?). The overall verdict follows the stricter. The "
            "white-box exact epsilon is computed in exact arithmetic and says nothing about "
            "floating-point leaks.</p>"
        )
        d.table(*t["audits"])
        for r in m["audits"]["results"]:
            for vd in r["verdicts"]:
                if vd["consequence"]:
                    mech, kind, what = r["mechanism"], vd["kind"], vd["consequence"]
                    d.add(
                        f"<p><b>{esc(mech)}, {esc(kind)}:</b> {esc(what)}</p>",
                        f"**{mech}, {kind}:** {what}",
                    )
        d.fig("audit")
        d.add(
            "<p>A lower bound at or below the claim is consistent with it; it does not prove "
            "it. A lower bound above the claim is a violation at the stated confidence.</p>"
        )
        d.fig("profile")
        d.fig("tradeoff")
    else:
        d.p(_NOT_RUN["audits_isolated" if one_run else "audits"], ' class="notrun"')
    d.h2("attacks", "Attacks on the transcript")
    if t["attacks"][1]:
        d.table(*t["attacks"])
        d.fig("attack")
        d.add(
            "<p>The ceiling is the best accuracy any attacker can reach against one "
            "epsilon-LDP report with k equally likely secrets: e^eps / (e^eps + k - 1). "
            "Accuracy whose confidence interval lies above chance means the attacker learns "
            "something (any epsilon &gt; 0 allows that); above the ceiling it contradicts the "
            "claim.</p>"
        )
    else:
        d.p(_NOT_RUN["attacks_one_run" if one_run else "attacks"], ' class="notrun"')
    for sec in m.get("sections") or []:
        d.h2(f"section-{sec['id']}", sec["title"])
        if sec.get("error"):
            d.add(
                f'<div class="errorbox"><b>This section could not be built.</b> '
                f"{esc(sec['error'])}</div>",
                f"> **This section could not be built.** {sec['error']}",
            )
            continue
        empty = _empty_section_note(sec)
        if empty:
            d.p(empty, ' class="notrun"')
        for x in sec["paragraphs"]:
            if x.strip():
                d.p(x)
        for tb in sec["tables"]:
            if tb["caption"]:
                d.add(f"<h3>{esc(tb['caption'])}</h3>", f"**{tb['caption']}**")
            d.table(tb["header"], tb["rows"])
        for name in sec["figures"]:
            d.fig(f"section-{sec['id']}-{name}", f"{sec['title']}: {name}")
    d.h2("config", _CONFIG_TITLE)
    d.table(*t["run"])
    d.add("<details><summary>Full training configuration</summary>")
    d.table(*t["config"])
    d.add("</details>")
    return d.out


# ---------------------------------------------------------------------- renderers


def _head(m: dict[str, Any], t: dict[str, Any], d: _Doc) -> None:
    """The title, the summary, the privacy statement and the verdict, in ``d``'s syntax."""
    esc = html.escape
    v, run = m["verdict"], m["run"]
    mech = run["mechanism"] or {}
    mech_name = str(mech.get("name", "several mechanisms"))
    title = f"Privacy report: {run['algorithm']}, {mech_name}"
    title += f"{' mechanism' if mech else ''}{_title_claim(m)}"
    d.add(
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>Privacy report: {esc(run['algorithm'])} ({esc(mech_name)})</title>\n"
        f"<style>{_CSS}</style></head><body><main>"
    )
    d.add(f"<h1>{esc(title)}</h1>", f"# {title}")
    d.add(
        f'<div class="sub">Run directory <code>{esc(m["run_dir"])}</code> &middot; seed '
        f"{esc(cell_text(run['seed']))} &middot; status {esc(run['status']['run'])} &middot; "
        f"generated {esc(m['generated'])} by ldp-audit</div>",
        f"Run directory `{m['run_dir']}`, seed {run['seed']}, status {run['status']['run']}, "
        f"generated {m['generated']}.",
    )
    rows = summary_rows(m)
    d.add('<section id="summary" class="summary"><h2>Summary</h2>', "## Summary")
    d.add(
        "<table>"
        + "".join(f"<tr><th>{esc(k)}</th><td>{esc(x)}</td></tr>" for k, x in rows)
        + "</table>",
        "\n".join(f"- {k}: {x}" for k, x in rows),
    )
    heads = [title for a, title in TOC if a not in ("summary", "verdict")]
    heads += [sec["title"] for sec in m.get("sections") or []]
    heads += [_CONFIG_TITLE, "Glossary"]
    d.add("@@TOC@@", "Contents: " + " · ".join(f"[{h}](#{_slug(h)})" for h in heads))
    d.add("</section>")
    d.add(
        '<section id="privacy-statement" class="statement"><h2>Privacy statement</h2>',
        "## Privacy statement",
    )
    intro = (
        "What is protected, against whom, and how strongly, from what the run recorded "
        '("not recorded" where nothing records it). One epsilon is the claim; other '
        "accountants' values are alternatives."
    )
    d.add("<p>" + intro.replace('"', "&quot;") + "</p>", intro)
    d.table(*t["statement"])
    d.add("</section>")
    ev = v.get("evidence_words")
    d.add(
        f'<section id="verdict" class="verdict {_VERDICT_CLASS.get(v["status"], "partially")}">'
        f'<div class="head">Verdict: {esc(v["status"])}. {esc(v["headline"])}</div>'
        + (f'\n<div class="head bad">{esc(ev)}</div>' if ev else ""),
        f"**Verdict: {v['status']}.** {v['headline']}" + (f"\n**{ev}**\n" if ev else ""),
    )
    for title, key in _VERDICT_HEADS:
        items = v.get(key, [])
        if key == "violations" and not items:
            continue
        hcls = ' class="violations"' if key == "violations" else ""
        d.add(f'<h3 id="verdict-{key}"{hcls}>{title}</h3>', f"**{title}**")
        d.add(
            "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"
            if items
            else '<ul><li class="na">nothing</li></ul>',
            "\n".join(f"- {i}" for i in items or ["nothing"]),
        )
    d.add("</section>")


def render_html(model: dict[str, Any], figures: dict[str, bytes]) -> str:
    """The self-contained HTML page (inline CSS, figures as base64 PNG data URIs)."""
    d, t = _Doc(False, figures), report_tables(model)
    _head(model, t, d)
    body = "\n".join(x for x in _body(model, t, d) if x)
    terms = glossary_used(body)
    if terms:
        body += "\n" + glossary_html(terms)
    extra = [(f"section-{sec['id']}", sec["title"]) for sec in model.get("sections") or []]
    extra += [("config", _CONFIG_TITLE)] + ([("glossary", "Glossary")] if terms else [])
    links = "".join(f'<a href="#{html.escape(a)}">{html.escape(x)}</a> ' for a, x in [*TOC, *extra])
    body = link_terms(
        body.replace("@@TOC@@", f'<nav class="toc">Contents: {links}</nav>', 1), terms
    )
    return body + "\n</main></body></html>"


def render_markdown(model: dict[str, Any], figure_files: dict[str, str]) -> str:
    """The Markdown report; figures are linked as files (``figure_files``: name -> path)."""
    d, t = _Doc(True, figure_files), report_tables(model)
    _head(model, t, d)
    text = "\n".join(_body(model, t, d))
    return text + "\n" + "\n".join(glossary_markdown(glossary_used(text)))


def render_json(model: dict[str, Any]) -> str:
    """The report model as strict JSON (the project convention of
    :func:`ldp_audit.rundir.to_jsonable`: infinities as "inf"/"-inf", NaN as null)."""
    from ldp_audit.rundir import to_jsonable

    return json.dumps(to_jsonable(model), indent=2, sort_keys=False, allow_nan=False, default=str)
