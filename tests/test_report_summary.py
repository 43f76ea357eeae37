"""The report page reads in a minute (issue 39): a one-screen summary (claim, verdict, the
deciding number, what was not checked), a table of contents whose every link lands, a glossary
entry for every term of the field the page uses, and no per-agent plot for a run that has no
per-agent (local) charges."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ldp_audit.report import build_report
from ldp_audit.report._render import _has_local_agents
from ldp_audit.report._summary import glossary_used, link_terms, summary_rows, term_anchor
from tests.test_report_fixtures import GOOD_ATTACK, GOOD_AUDIT, ledger_for, make_run


@pytest.fixture
def report(tmp_path: Path):
    run = make_run(tmp_path / "run", audit=[GOOD_AUDIT], attacks={"dynamics": GOOD_ATTACK})
    return build_report(run, ledger=ledger_for(run, per_submission=0.1, best_factor=0.5))


def test_summary_answers_the_four_questions_first(report) -> None:
    rows = dict(summary_rows(report.model))
    assert list(rows)[:3] == ["Claim", "Verdict", "Deciding evidence"]
    claim = report.model["privacy_statement"]["claim"]
    assert f"epsilon = {claim['epsilon']:.4g}" in rows["Claim"]
    assert rows["Verdict"].startswith(report.model["verdict"]["status"])
    assert (
        "lower bound" in rows["Deciding evidence"]
        and "against the claim" in rows["Deciding evidence"]
    )
    page = report.to_html()
    # the summary comes before everything else the page shows
    assert (
        page.index('id="summary"')
        < page.index('id="privacy-statement"')
        < page.index('id="verdict"')
    )
    md = report.to_markdown()
    assert md.index("## Summary") < md.index("## Privacy statement")


def test_every_contents_link_lands_and_every_term_is_defined(report) -> None:
    page = report.to_html()
    ids = set(re.findall(r'id="([^"]+)"', page))
    nav = re.search(r'<nav class="toc">(.*?)</nav>', page).group(1)
    targets = re.findall(r'href="#([^"]+)"', nav)
    assert len(targets) >= 8 and set(targets) <= ids, set(targets) - ids
    # each link reads as the heading it lands on (the verdict's heading adds the verdict)
    heads = set(re.findall(r"<h2[^>]*>([^<]*)</h2>", page))
    names = re.findall(r'href="#[^"]+">([^<]+)</a>', nav)
    assert [n for n in names if n != "Verdict" and n not in heads] == [], heads
    used = re.findall(r'class="term" href="#(g-[^"]+)"', page)
    assert used and set(used) <= ids  # every term link has its glossary entry
    glossary = page[page.index('id="glossary"') :]
    visible = re.sub(r"<[^>]+>", " ", page[: page.index('id="glossary"')])
    for term in glossary_used(visible):
        assert f'id="g-{term_anchor(term)}"' in glossary, term
    # each term defined as the page uses it: the attacks table's "ceiling" is the accuracy the
    # claim allows; until session 54 its entry defined only the audit's ceiling (the largest
    # bound an audit of that size can produce), and the verdict's "within the ceiling 0.987 the
    # claim allows" linked there
    assert "<th>ceiling</th>" in page[page.index('id="attacks"') :]
    entry = re.search(r'<dt id="g-ceiling">ceiling</dt><dd>([^<]*)</dd>', page).group(1)
    assert "e^eps / (e^eps + k - 1)" in entry and "accuracy" in entry  # the attack's ceiling
    assert "largest lower bound an audit" in entry  # and the audit's, used by the statement
    # Markdown: the contents list names every section heading the report has
    md = report.to_markdown()
    for h in re.findall(r"^## (.+)$", md, flags=re.M):
        if h not in ("Summary",):
            assert h in md.split("## Privacy statement")[0], h


def test_terms_are_linked_once_and_never_inside_code_links_or_headings() -> None:
    page = (
        "<h2>mu-GDP</h2><p>The FST and <code>FST</code> and mu-GDP, FST again.</p>"
        '<a href="x">f-DP</a><p>f-DP here</p>'
    )
    out = link_terms(page, ["FST", "mu-GDP", "f-DP"])
    assert out.count('href="#g-fst"') == 1 and out.count('href="#g-mu-gdp"') == 1
    assert "<h2>mu-GDP</h2>" in out and "<code>FST</code>" in out
    assert (
        '<a href="x">f-DP</a>' in out and '<p><a class="term" href="#g-f-dp">f-DP</a> here' in out
    )
    assert glossary_used("mu-GDPs and xFST") == []  # whole words only


def test_a_central_only_run_shows_no_per_agent_spend() -> None:
    assert _has_local_agents({"ledger": {"agents": 6, "central": None}})
    assert not _has_local_agents({"ledger": {"agents": 0, "central": {"epsilon": 2.0}}})
    assert _has_local_agents({"ledger": {"agents": 0, "central": None}})  # says "no charges"


def test_per_trial_metrics_read_as_values_not_raw_json() -> None:
    """The PGC-A3C section's "other metrics" table showed ``[3000]`` and ``[false]``."""
    from ldp_audit.training.pgc_a3c.report import _cell

    assert _cell([3000]) == "3000" and _cell([False]) == "no" and _cell([True]) == "yes"
    assert _cell([1, 2]) == "1, 2 (per trial)" and _cell(5) == 5 and _cell(None) is None
    assert _cell({"a": 1}) == '{"a": 1}'  # anything else stays exact


def test_a_large_number_keeps_its_integer_part() -> None:
    """Four significant digits cut a number of 1,000 or more: the demo's "beside the paper" row
    gave the paper's median FST at epsilon 5, 5714.5 (training/pgc_a3c/paper.py), as 5714, and at
    epsilon 1, 18377, as 1.838e+04 (until session 54)."""
    from ldp_audit.report._tables import cell_text
    from ldp_audit.training.pgc_a3c.paper import PAPER

    assert [cell_text(v) for v in (5714.5, 18377.0, 20238.5, 1234.5678)] == [
        "5714.5", "18377", "20238.5", "1234.6"
    ]  # fmt: skip
    assert [cell_text(v) for v in (0.9867, 9.416, 123.456, -4055.0, 1e20)] == [
        "0.9867", "9.416", "123.5", "-4055", "1e+20"
    ]  # fmt: skip
    assert cell_text(PAPER["median_fst"]["laplace"][5.0]) == "5714.5"
