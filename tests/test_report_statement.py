"""The privacy statement and the verdict's wording (issues 28 and 31), without a browser."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ldp_audit.report import build_report
from ldp_audit.report._statement import FIELDS, MEANINGFUL_EPSILON, NOT_RECORDED, protection_words
from tests.test_report_fixtures import (
    DPSGD_BY_METHOD,
    STATEMENT_ONLY,
    ledger_for,
    make_run,
    make_system_run,
    system_ledger,
)

pytest.importorskip("ldp_audit.accountant")


def empty_audit_section(run_dir: Path, extra: list[Path] | None = None) -> list[dict]:
    """A section as FedRL's: an audit in its data and an empty paragraph, nothing else."""
    return [
        {
            "id": "fake-audit",
            "title": "Fake: black-box audit",
            "paragraphs": [""],
            "tables": [],
            "figures": {},
            "data": {"audit": [{"epsilon_lower_bound": 1.0, "claimed_epsilon": 2.0}]},
        }
    ]


def _build(kind: str, tmp: Path, **kw):
    run = make_system_run(kind, tmp / kind)
    return build_report(
        run, figures=False, sections_registry=STATEMENT_ONLY, ledger=system_ledger(kind, run)
    )


def test_statement_is_in_the_json_first_with_every_field(tmp_path: Path) -> None:
    rep = _build("pgc-a3c", tmp_path)
    doc = json.loads(rep.to_json())
    keys = list(doc)
    # identification, then the statement and the verdict, then the rest (schema unchanged)
    assert keys[:6] == [
        "schema",
        "generated",
        "generator",
        "run_dir",
        "privacy_statement",
        "verdict",
    ]
    assert doc["schema"] == "ldp-audit-report/1"
    st = doc["privacy_statement"]
    assert st["schema"] == "ldp-audit-privacy-statement/1"
    assert [r["key"] for r in st["rows"]] == [k for k, _ in FIELDS]
    assert st["fields"]["privacy_unit"].startswith("agent: the 1 report of one agent")
    assert st["claim"]["epsilon"] == 5.0 and st["claim"]["method"] == "basic"
    assert st["claim"]["unit"] == "agent" and st["claim"]["meaningful"] is True
    # the audit's size says how its samples were split (the witness counts are out of 18,000)
    assert st["fields"]["audit_size"] == (
        "20,000 samples per input (2,000 to choose the event, 18,000 to estimate it)"
    )
    md = rep.to_markdown()
    assert md.index("## Summary") < md.index("## Privacy statement") < md.index("**Verdict:")
    assert "20,000 per input: 2,000 to choose the event, 18,000 to estimate it" in md


def test_unrecorded_fields_say_so(tmp_path: Path) -> None:
    # a run with no trainer statement, no audit and no attack: the ledger is the claim, and
    # what nothing records is "not recorded" / "no audit was run", never a guess
    run = make_run(tmp_path / "r", ledger="real", epsilon=0.1)
    st = build_report(run, figures=False).model["privacy_statement"]
    assert st["claim"]["source"] == "ledger: the largest spend over ids, tightest valid method"
    assert st["claim"]["epsilon"] == pytest.approx(2.0)  # 20 reports at 0.1 per agent
    fields = st["fields"]
    assert fields["alternatives"] == "none (one method gives the claim)"
    assert fields["audit_lower_bound"] == "no audit was run"
    assert fields["audit_size"] == NOT_RECORDED


def test_named_accountant_is_the_claim_and_the_others_alternatives(tmp_path: Path) -> None:
    run = make_system_run("dprl", tmp_path / "d")
    cfg = json.loads((run / "config.json").read_text())
    cfg["config"]["accountant"] = "rdp"
    (run / "config.json").write_text(json.dumps(cfg))
    m = build_report(
        run, figures=False, sections_registry=STATEMENT_ONLY, ledger=system_ledger("dprl", run)
    ).model
    claim = m["privacy_statement"]["claim"]
    # metrics.json reports the PRV value as "epsilon"; config.json names rdp: the named one
    # is the method, the value stays the trainer's statement, and the others are alternatives
    assert claim["method"] == "rdp"
    alts = {a["method"]: a["epsilon"] for a in claim["alternatives"]}
    assert alts == {"prv": DPSGD_BY_METHOD["prv"], "pld": DPSGD_BY_METHOD["pld"]}
    first = m["verdict"]["claimed"][0]
    assert first.startswith("The claim: epsilon = 0.518 at delta = 1e-05 per episode, by rdp")
    assert "Alternatives, not the claim: 0.518 by prv" in first and "0.508 by pld" in first


@pytest.mark.parametrize(
    ("per_submission", "status"),
    [(0.5, "consistent"), (0.525, "no meaningful guarantee")],
)
def test_threshold_of_a_meaningful_claim(
    tmp_path: Path, per_submission: float, status: str
) -> None:
    from tests.test_report_fixtures import GOOD_ATTACK, GOOD_AUDIT

    run = make_run(tmp_path / "r", audit=[GOOD_AUDIT], attacks={"dynamics": GOOD_ATTACK})
    # 20 reports per agent: 10 per agent (at the threshold) and 10.5 (above it)
    rep = build_report(run, ledger=ledger_for(run, per_submission=per_submission), figures=False)
    v = rep.model["verdict"]
    assert MEANINGFUL_EPSILON == 10.0
    assert v["status"] == status
    upheld = [s for s in v["verified"] if "no violation found" in s or "within the ceiling" in s]
    assert upheld
    if status == "consistent":
        assert v["protection"] == "meaningful"
        assert not any("gives no protection" in s for s in upheld)
    else:
        assert v["protection"] == "none"
        assert all("but the claim itself gives no protection (epsilon = 10.5 per agent)" in s
                   for s in upheld)  # fmt: skip
        assert "consistent" not in rep.to_html().split('id="verdict" class="verdict ')[1][:20]


def test_empty_algorithm_section_says_where_its_audit_is(tmp_path: Path) -> None:
    run = make_system_run("fedrl", tmp_path / "f")
    reg = {"fedrl": "tests.test_report_statement:empty_audit_section"}
    rep = build_report(
        run, figures=False, sections_registry=reg, ledger=system_ledger("fedrl", run)
    )
    html, md = rep.to_html(), rep.to_markdown()
    note = "audit is the one shown under"  # the Audits section (the same result file)
    assert note in html and note in md
    assert "<p></p>" not in html
    # the infinite count is one number everywhere (tightest method): 2 ids, never 4
    led = rep.model["ledger"]
    assert led["infinite_agents"] == 2 and led["basic_not_applicable"] == 2
    assert "2 ledger ids spent epsilon = inf under every method" in md
    assert "4 ledger ids spent epsilon = inf" not in md


def test_poisson_sampled_dpsgd_states_its_sampling(tmp_path: Path) -> None:
    # a DQN-like run: privacy unit a transition, Poisson sampling at q = 0.01 (what the one-run
    # audit checked of it: test_poisson_sampling_states_what_todays_one_run_audit_checked)
    run = make_system_run("dprl", tmp_path / "q")
    cfg = json.loads((run / "config.json").read_text())
    cfg["mechanism"].update(sample_rate=0.01, privacy_unit="transition")
    (run / "config.json").write_text(json.dumps(cfg))
    att = json.loads((run / "attack_membership.json").read_text())
    del att["extra"]["f_dp"]
    (run / "attack_membership.json").write_text(json.dumps(att))
    met = json.loads((run / "metrics.json").read_text())
    met["privacy"].update(sample_rate=0.01, unit="transition")
    (run / "metrics.json").write_text(json.dumps(met))
    m = build_report(
        run, figures=False, sections_registry=STATEMENT_ONLY, ledger=system_ledger("dprl", run)
    ).model
    f = m["privacy_statement"]["fields"]
    assert f["privacy_unit"] == "transition"
    assert f["adjacency"].startswith("add/remove one transition (the Poisson-subsampled Gaussian")
    assert f["sampling"].startswith("Poisson sampling at rate q = 0.01 per update")
    assert f["mu_gdp"].startswith("not stated: Poisson-subsampled Gaussian")


@pytest.mark.parametrize(
    ("tests", "flagged", "needle"),
    [
        ({"ledger": {"rejected": False}}, [], "ledger test checked that every update was charged "
         "at this q (not flagged); the realised sampling was not tested (buffer grows)"),
        ({"ledger": {"rejected": True}}, ["ledger"], "at this q (FLAGGED)"),
        ({"ledger": {"rejected": False}, "sampling": {"rejected": True}}, ["sampling"],
         "sampling test (batch sizes against Poisson sampling at q) REJECTED it"),
        ({}, [], "not checked in this run (no white-box one-run audit)"),
    ],
)  # fmt: skip
def test_poisson_sampling_states_what_todays_one_run_audit_checked(
    tmp_path: Path, tests: dict, flagged: list, needle: str
) -> None:
    # the one-run audit of issue 36 has no mechanism test: its ledger test checks the charged
    # q, its sampling test (when it can run) the batch sizes
    run = make_system_run("dprl", tmp_path / "q")
    cfg = json.loads((run / "config.json").read_text())
    cfg["mechanism"].update(sample_rate=0.01, privacy_unit="transition")
    (run / "config.json").write_text(json.dumps(cfg))
    att = json.loads((run / "attack_membership.json").read_text())
    not_run = {} if "sampling" in tests else {"sampling": "buffer grows"}
    att["extra"].update(tests=tests, flagged_by=flagged, tests_not_run=not_run)
    (run / "attack_membership.json").write_text(json.dumps(att))
    f = build_report(
        run, figures=False, sections_registry=STATEMENT_ONLY, ledger=system_ledger("dprl", run)
    ).model["privacy_statement"]["fields"]
    assert f["sampling"].startswith("Poisson sampling at rate q = 0.01 per update")
    assert needle in f["sampling"], f["sampling"]


@pytest.mark.parametrize("eps", [math.inf, 50.0])
def test_a_void_claim_protects_nothing_in_words_not_a_python_none(eps: float) -> None:
    """The row "What the claim protects" of an infinite or meaningless claim began "None: ...",
    which a reader takes for a Python None leaking into the page."""
    words = protection_words({"epsilon": eps, "unit": "agent"})
    assert words.startswith("Nothing") and "None" not in words
