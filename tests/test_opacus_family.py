"""The stated-family bound of an Opacus run (issue 36 item 4): in the result, its JSON, the
report, and the one line on Opacus's own epsilon (item 5), on the documented test loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldp_audit.attacks.one_run_family import GDP_ASSUMPTION, SGM_ASSUMPTION, sgm_epsilon
from ldp_audit.opacus import report_sections
from tests.broken_opacus import NoiseHalfTheCharged
from tests.opacus_loop import audited_run


def test_family_bound_in_the_result_json_and_report(tmp_path: Path, copied_run) -> None:
    """Correct run, 500 canaries, 80 updates (96 charges, prepay 32): the white-box family
    bound names its assumption, is below the claim and within 0.8-1 of the epsilon of the 80
    updates taken; the black-box one uses the mu-GDP family."""
    run = tmp_path / "run"
    res = copied_run("opacus-seed-0", lambda out: audited_run(out, 0), run)
    fb = res.extra["family_bound"]
    assert fb["assumption"] == SGM_ASSUMPTION and fb["family"] == "subsampled Gaussian"
    assert not fb["refuted"] and fb["epsilon_lower_bound"] < res.epsilon
    taken = sgm_epsilon(1.0, 1 / 16, 80, 1e-5)
    assert 0.8 * taken < fb["epsilon_lower_bound"] < taken
    bb = res.extra["black_box"]["extra"]["family_bound"]
    assert bb["assumption"] == GDP_ASSUMPTION and not bb["refuted"]
    doc = json.loads((run / "attack_membership.json").read_text())
    assert doc["extra"]["family_bound"]["assumption"] == SGM_ASSUMPTION
    assert doc["extra"]["family_bound"]["epsilon_lower_bound"] == fb["epsilon_lower_bound"]
    secs = {s["id"]: s for s in report_sections(run)["sections"]}
    audit = secs["opacus-audit"]
    rows = audit["tables"][0]["rows"]
    fam = [r for r in rows if str(r[1]).startswith("family bound")]
    assert len(fam) == 2 and fam[0][4].startswith("consistent")
    assert any(SGM_ASSUMPTION in p for p in audit["paragraphs"])
    assert any(GDP_ASSUMPTION in p for p in audit["paragraphs"])
    # the claim vs Opacus's get_epsilon, in one line: 96 charges = 80 updates + 16 prepaid
    claim = secs["opacus-claim"]
    line = [p for p in claim["paragraphs"] if "PrivacyEngine.get_epsilon" in p]
    assert len(line) == 1 and "96 charges (80 updates + 16 prepaid" in line[0]
    opx = [r for r in claim["tables"][0]["rows"] if "get_epsilon" in str(r[0])]
    assert len(opx) == 1 and float(opx[0][1]) < res.epsilon


def test_noise_at_half_sigma_is_refuted_under_the_family(tmp_path: Path) -> None:
    res = audited_run(tmp_path / "run", 0, optimizer_class=NoiseHalfTheCharged, canaries=100,
                      epochs=2)  # fmt: skip
    fb = res.extra["family_bound"]
    assert fb["refuted"] and fb["epsilon_lower_bound"] > 2 * res.epsilon
    assert fb["noise_multiplier_upper_bound"] < 0.6
    assert res.extra["decided_by"] is not None  # the assumption-free verdict flags it too
    assert "family" not in res.extra["flagged_by"]  # the family bound stays beside the verdict


def test_claim_equals_opacus_when_nothing_is_prepaid(tmp_path: Path) -> None:
    """prepay 1: the ledger charged exactly the updates; the line says only the methods differ
    and the report's claim is within 1 % of Opacus's PRV number."""
    from ldp_audit.opacus import CanaryAudit
    from tests.opacus_loop import make_loop, train

    model, opt, loader = make_loop(0)
    audit = CanaryAudit(tmp_path / "run", canaries=50, seed=0, delta=1e-5, prepay=1)
    opt = audit.attach(opt, data_loader=loader)
    train(model, opt, loader, 2)
    res = audit.finish()
    claim = {s["id"]: s for s in report_sections(tmp_path / "run")["sections"]}["opacus-claim"]
    line = next(p for p in claim["paragraphs"] if "get_epsilon" in p)
    assert "the methods alone differ" in line
    opx = next(r for r in claim["tables"][0]["rows"] if "get_epsilon" in str(r[0]))
    assert float(opx[1]) == pytest.approx(res.epsilon, rel=0.01)
