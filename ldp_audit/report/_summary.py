"""What a reader sees first and last: the one-screen summary, the table of contents and the
glossary of the report page (issue 39, "pages that read in a minute").

The summary answers four questions from the report model alone: what is claimed, the verdict,
the one number that decides it, and what was not checked. The glossary defines every term of
the field the page uses, and :func:`link_terms` links each term's first use in the page's text
to its definition, so a reader who does not know "mu-GDP" or "FST" is one click from it.
"""

from __future__ import annotations

import html
import re
from typing import Any

#: term -> definition; a term is linked (to :func:`term_anchor`) where it first appears in the
#: page's text.
GLOSSARY: dict[str, str] = {
    "epsilon": "The privacy parameter: an observer's odds on any secret grow at most "
    "e^epsilon-fold from what is released. Smaller is more private; above about 10 it promises "
    "little.",
    "delta": "The probability with which an (epsilon, delta) guarantee may fail; 0 for pure "
    "epsilon-DP. It should be far below one over the number of people protected.",
    "local DP": "Local differential privacy: each agent randomises its own report before it leaves "
    "it, so nobody, not even the aggregator, sees raw data. Claims are per agent.",
    "central": "Central differential privacy (DP-SGD): a trusted trainer adds noise to the model "
    "update; the guarantee protects each training example in what the model releases.",
    "mu-GDP": "Gaussian differential privacy with parameter mu: distinguishing two neighbouring "
    "inputs is no easier than telling N(0, 1) from N(mu, 1). Composes exactly for Gaussian "
    "noise; every mu gives an epsilon at each delta.",
    "f-DP": "Trade-off-function DP: the curve f of the smallest type II error any test can reach "
    "at each type I error when telling two neighbouring inputs apart. epsilon-DP and mu-GDP "
    "are special curves; an audit's points above the claimed curve refute it.",
    "FST": "First success time (Ono & Takahashi 2020): the first submission after which the "
    "learned policy balances CartPole; inf when it never does within the run.",
    "canaries": "Planted test records (gradients or inputs), each included in training with "
    "probability 1/2; an auditor who guesses which were included gets a lower bound on epsilon "
    "from one training run.",
    "ceiling": "Of an attack: the best accuracy any attacker can reach if the claim holds, "
    "e^eps / (e^eps + k - 1) for an epsilon-LDP release of one of k equally likely secrets; "
    "accuracy above it contradicts the claim. Of an audit: the largest lower bound an audit of "
    "its size can produce (all guesses right); a claim above it cannot be refuted by that audit, "
    "however leaky the run.",
    "Clopper-Pearson": "The exact binomial confidence interval; audits use its one-sided bounds so "
    "that a reported lower bound on epsilon holds with the stated confidence.",
    "RDP": "Renyi differential privacy, the moments accountant of Opacus: a conservative way to "
    "compose Gaussian and subsampled-Gaussian releases.",
    "PRV": "The privacy random variable accountant (Gopi et al. 2021): composes privacy loss "
    "distributions numerically; tighter than RDP.",
    "PLD": "Privacy loss distribution accounting (dp_accounting): exact composition of Laplace and "
    "Gaussian releases up to discretisation.",
    "transcript": "Everything that crossed the trust boundary (the noisy reports and what was "
    "broadcast), in order: what attacks and audits read, never the trainer's internals.",
    "ledger": "The durable, chained record of every charge, written before each release; the "
    "accountant composes it into the epsilon each agent spent.",
}

#: (anchor, title) of the core's sections of the page, in order (the table of contents; the
#: system's own sections, the configuration and the glossary follow)
TOC = (
    ("summary", "Summary"),
    ("privacy-statement", "Privacy statement"),
    ("verdict", "Verdict"),
    ("status", "Run status and evidence"),
    ("ledger", "Privacy ledger"),
    ("audits", "Audits of the mechanisms used"),
    ("attacks", "Attacks on the transcript"),
)


def _num(x: Any) -> str:
    try:
        return f"{float(x):.4g}"
    except (TypeError, ValueError):
        return str(x)


def _first_sentence(text: str) -> str:
    """The text up to its first full stop followed by a space (the detail is further down)."""
    cut = re.search(r"(?<!\b[A-Za-z])\.\s", text)
    return text[: cut.start() + 1] if cut else text


def summary_rows(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(question, answer) rows of the one-screen summary, from the report model."""
    v = model["verdict"]
    st = model.get("privacy_statement") or {}
    claim = st.get("claim") or {}
    if claim.get("epsilon") is not None:
        c = f"epsilon = {_num(claim['epsilon'])}"
        if claim.get("delta"):
            c += f" at delta = {_num(claim['delta'])}"
        c += f" per {claim.get('unit') or 'unit'}"
        if claim.get("method"):
            c += f" ({claim['method']} accountant)"
    else:
        c = "no epsilon recorded"
    rows = [("Claim", c), ("Verdict", f"{v['status']}: {_first_sentence(v['headline'])}")]
    audit = st.get("audit") or {}
    if v.get("violations"):
        decide = _first_sentence(v["violations"][0])
    elif audit.get("lower_bound") is not None:
        decide = (
            f"the audit's lower bound {_num(audit['lower_bound'])} at confidence "
            f"{_num(audit.get('confidence'))}"
        )
        if claim.get("epsilon") is not None:
            decide += f" against the claim {_num(claim['epsilon'])}"
        if audit.get("ceiling") is not None:
            decide += f" (this audit could not show more than {_num(audit['ceiling'])})"
    elif model.get("attacks", {}).get("results"):
        decide = "the attacks' accuracy against their ceiling (see Attacks)"
    else:
        decide = "none: no audit or attack was run, so nothing tests the claim"
    rows.append(("Deciding evidence", decide))
    nv = list(v.get("not_verified") or [])
    if nv:
        more = f" (and {len(nv) - 1} more under Verdict)" if len(nv) > 1 else ""
        rows.append(("Not checked", _first_sentence(nv[0]) + more))
    return rows


def term_anchor(term: str) -> str:
    """The anchor of a glossary term ("local DP" -> "local-dp")."""
    return term.lower().replace(" ", "-")


def glossary_used(text: str) -> list[str]:
    """The glossary terms that occur in ``text`` (in glossary order)."""
    return [t for t in GLOSSARY if _pattern(t).search(_TAG.sub(" ", text))]


def glossary_html(terms: list[str]) -> str:
    """The glossary section of the page: each term used, with its anchor and definition."""
    items = "".join(
        f'<dt id="g-{term_anchor(t)}">{html.escape(t)}</dt><dd>{html.escape(GLOSSARY[t])}</dd>'
        for t in terms
    )
    return f'<section id="glossary"><h2>Glossary</h2><dl class="glossary">{items}</dl></section>'


def glossary_markdown(terms: list[str]) -> list[str]:
    """The glossary section of the Markdown report."""
    return ["## Glossary", "", *(f"- **{t}**: {GLOSSARY[t]}" for t in terms), ""]


def _pattern(term: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w-])" + re.escape(term) + r"(?![\w-])")


_SKIP = {"a", "code", "title", "style", "h1", "h2", "h3", "th", "summary", "script"}
_TAG = re.compile(r"(<[^>]+>)")


def link_terms(page: str, terms: list[str]) -> str:
    """Link the first use of each term in the page's visible text (not inside a link, code,
    a heading or the glossary itself) to its glossary entry."""
    todo = dict.fromkeys(terms)
    parts = _TAG.split(page)
    stack: list[str] = []
    for i, part in enumerate(parts):
        if part.startswith("<"):
            m = re.match(r"<(/?)([a-zA-Z0-9]+)", part)
            if m and not part.endswith("/>"):
                name = m.group(2).lower()
                if m.group(1):
                    if name in stack:
                        del stack[len(stack) - 1 - stack[::-1].index(name) :]
                elif name in _SKIP or (name == "section" and 'id="glossary"' in part):
                    stack.append(name)
            continue
        if stack or not todo:
            continue
        for term in list(todo):
            pat = _pattern(html.escape(term))
            hit = pat.search(part)
            if hit:
                parts[i] = part = (
                    part[: hit.start()]
                    + f'<a class="term" href="#g-{term_anchor(term)}">{hit.group(0)}</a>'
                    + part[hit.end() :]
                )
                del todo[term]
    return "".join(parts)
