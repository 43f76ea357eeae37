"""The committed paper-reproduction reports are what today's writers make of their committed
results.json (issue 39): each opens with the privacy statement and the verdict, says what
reproduces bit for bit and on what, and a rerun can be checked against its intervals."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest, norm

from ldp_audit.cli import main as cli
from ldp_audit.errors import InvalidParameterError
from ldp_audit.report.markdown import wrap_markdown
from ldp_audit.training import committed_reports as C
from ldp_audit.training import reproduction_check as K
from ldp_audit.training import reproduction_statement as S
from ldp_audit.training.reproduction import machine_fingerprint
from tests.markdown_unwrap import unwrap_markdown

REPO = Path(__file__).resolve().parents[1]
NAMES = [p.split("/", 1)[1] for p in C.COMMITTED]


def _res(name: str) -> dict:
    return json.loads((REPO / "reports" / name / "results.json").read_text())


def test_the_seven_committed_reports_are_listed() -> None:
    assert NAMES == ["pgc-a3c", "pgc-a3c-sample", "pgc-a3c-readings", "dprl", "frd", "fedrl",
                     "fedrl-16"]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_committed_pages_equal_what_the_writer_makes_of_results_json(name: str) -> None:
    d = REPO / "reports" / name
    pages = C.render(d)
    assert "README.md" in pages
    if name.startswith("pgc-a3c") and name != "pgc-a3c-readings":
        assert set(pages) == {"README.md", "tables.md"}
    for page, text in pages.items():
        assert (d / page).read_text() == text, f"reports/{name}/{page} is stale: run make reports"
    assert C.rebuild(d, check=True) == []


@pytest.mark.parametrize("name", NAMES)
def test_every_report_opens_with_statement_and_verdict(name: str) -> None:
    page = (REPO / "reports" / name / "README.md").read_text()
    assert wrap_markdown(page) == page  # prose wrapped at 100 columns (issue 39)
    lines = unwrap_markdown(page).splitlines()  # one statement item per line
    assert lines[0].startswith("# ") and lines[1] == ""
    block = lines[2 : lines.index("", 2)]
    labels = [re.match(r"- \*\*([^:]+):\*\*", x).group(1) for x in block]  # type: ignore[union-attr]
    assert labels[0].startswith("Released, to whom (")
    assert labels[1:] == ["Privacy unit", "Mechanism and claim", "Audit / attack", "Verdict",
                          "Reproduces"]  # fmt: skip
    assert re.search(r"\((local|central) DP", block[0])
    # the machine results.json records is printed, and a missing fingerprint is said
    res = _res(name)
    if "fingerprint" in res:  # a report made after issue 39
        assert "the machine fingerprint results.json records: " in block[5]
    else:
        assert f"`{res['machine']}`" in block[5]
        assert "no CPU model or instruction-set fingerprint recorded" in block[5]
    assert f"ldp-audit reproduce check RERUN_FOLDER reports/{name}`" in block[5]


EXPECTED_VERDICT = {
    "pgc-a3c": ["no audit in this report"],
    "pgc-a3c-sample": ["no audit in this report"],
    "pgc-a3c-readings": [
        "l1 clip (printed, adam, adam-lr0.01) against the paper's claim: no violation found",
        "coordinate clip against the paper's claim: VIOLATION",
        "coordinate clip against the true claim (112 x epsilon): no violation found",
    ],
    "dprl": ["no violation found for the correct trainers at 95%", "caught 4/4 planted bugs"],
    "frd": ["attack: no violation found at 95%"],
    "fedrl": ["no violation found at 95% for the correct mechanism", "1/1 planted bugs caught"],
    "fedrl-16": ["no audit in this report"],
}


@pytest.mark.parametrize("name", NAMES)
def test_verdicts_read_the_results(name: str) -> None:
    verdict = next(x for x in S.statement_lines(_res(name)) if x.startswith("- **Verdict:**"))
    for words in EXPECTED_VERDICT[name]:
        assert words in verdict


def test_verdict_follows_the_results_not_the_report_name() -> None:
    """A violation recorded in results.json turns the verdict (nothing is hard-coded)."""
    res = _res("fedrl")
    res["audit"][0]["violation"] = True
    res["audit"][0]["epsilon_lower_bound"] = 9.0
    v = next(x for x in S.statement_lines(res) if x.startswith("- **Verdict:**"))
    assert "VIOLATION of the correct mechanism at 95%" in v
    res = _res("dprl")
    res["audits"][0]["white-box"]["violation"] = True
    v = next(x for x in S.statement_lines(res) if x.startswith("- **Verdict:**"))
    assert "VIOLATION in 1 run(s) of the correct trainers" in v
    res = _res("frd")
    res["leak"][0]["violation"] = True
    v = next(x for x in S.statement_lines(res) if x.startswith("- **Verdict:**"))
    assert "VIOLATION in 1 run(s)" in v


def test_fedrl_titles_and_commands_say_what_results_hold() -> None:
    r8 = (REPO / "reports/fedrl/README.md").read_text()
    r16 = (REPO / "reports/fedrl-16/README.md").read_text()
    assert r8.splitlines()[0].endswith(": Table 1, attacks and audit")
    assert r16.splitlines()[0].endswith(": Table 1")  # no Figure 4, attacks or audit there
    for text in (r8, r16):
        cmd = next(x for x in unwrap_markdown(text).splitlines() if x.startswith("Command: `"))
        assert re.search(r"^Command: `ldp-audit reproduce fedrl --out reports/fedrl(-16)? ", cmd)
        assert "`--out /" not in cmd.split("` (", 1)[0]  # the runnable part names no machine path
    for name in ("fedrl", "fedrl-16"):  # the writer appends the hand-written notes
        notes = (REPO / "reports" / name / "notes.md").read_text()
        page = (REPO / "reports" / name / "README.md").read_text()
        assert page.endswith("\n" + wrap_markdown(notes))
    res = _res("fedrl-16")
    res["fig4"] = {"4": {}}
    assert S.report_folder(res) == "reports/fedrl-16"


def test_a_recorded_fingerprint_is_printed() -> None:
    res = _res("fedrl-16")
    res["fingerprint"] = machine_fingerprint()
    line = S.statement_lines(res)[-2]
    assert "no CPU model" not in line
    assert "the machine fingerprint results.json records: " in line
    for v in res["fingerprint"]["versions"].values():
        assert v in line
    assert res["fingerprint"]["versions"]["numpy"] == np.__version__


def test_rebuild_rewrites_a_stale_page_and_the_command_checks(tmp_path: Path) -> None:
    d = tmp_path / "frd"
    shutil.copytree(REPO / "reports/frd", d)
    (d / "README.md").write_text("stale")
    assert C.main([str(d), "--check"]) == 1
    assert (d / "README.md").read_text() == "stale"  # --check writes nothing
    assert C.main([str(d)]) == 0
    assert (d / "README.md").read_text() == (REPO / "reports/frd/README.md").read_text()
    assert (d / "figure3.png").read_bytes() == (REPO / "reports/frd/figure3.png").read_bytes()
    assert C.main([str(d), "--check"]) == 0
    assert C.main([str(tmp_path / "nothing")]) == 2


def test_system_of_refuses_what_is_not_a_reproduction() -> None:
    with pytest.raises(InvalidParameterError, match="res must be"):
        S.system_of({"rounds": 3})
    with pytest.raises(InvalidParameterError, match="res must be"):
        S.system_of([1, 2])


# ---------------------------------------------------------------------- rerun check


def _fedrl_like(cells: dict[str, tuple[float, float, float]]) -> dict:
    """A synthetic (tiny) FedRL results.json with the given (estimate, lo, hi) SuccRates."""
    table = {m: {"succ_rate": v, "succ_rate_ci": [lo, hi], "avg_reward": 0.0,
                 "avg_reward_ci": [-1.0, 1.0]} for m, (v, lo, hi) in cells.items()}  # fmt: skip
    return {"table1": {"8": {"table": table}}}


def test_check_against_flags_inside_outside_and_differs(tmp_path: Path) -> None:
    committed = _fedrl_like({"A": (0.5, 0.4, 0.6), "B": (0.5, 0.4, 0.6), "C": (0.5, 0.4, 0.6)})
    rerun = _fedrl_like({"A": (0.55, 0.45, 0.65), "B": (0.62, 0.52, 0.72), "C": (0.9, 0.8, 1.0)})
    out = K.check_against(rerun, committed)
    status = {r["cell"]: r["status"] for r in out["cells"]}
    assert status["8x8 A succ_rate"] == "inside"
    assert status["8x8 B succ_rate"] == "outside"  # 0.62 > 0.6, but [0.52, 0.72] overlaps
    assert status["8x8 C succ_rate"] == "differs"  # [0.8, 1] misses [0.4, 0.6]
    assert out["counts"]["differs"] == 1 and not out["consistent"]
    assert "C succ_rate" in K.format_check(out) and "A succ_rate" not in K.format_check(out)
    for name, doc in (("rerun", rerun), ("committed", committed)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(doc))
    chk = ["reproduce", "check"]
    assert cli([*chk, str(tmp_path / "rerun"), str(tmp_path / "committed")]) == 1
    assert cli([*chk, str(tmp_path / "committed"), str(tmp_path / "committed")]) == 0
    assert cli([*chk, str(tmp_path / "rerun"), str(tmp_path / "none")]) == 2


def test_check_refuses_a_rerun_at_another_scale_unless_asked(tmp_path: Path) -> None:
    committed = _res("fedrl-16")
    rerun = json.loads(json.dumps(committed))
    rerun["config"]["train_steps"] = [800]
    rerun["config"]["runs"] = 2  # fewer runs is the same scale (wider intervals)
    with pytest.raises(InvalidParameterError, match=r"train_steps: rerun \[800\]"):
        K.check_against(rerun, committed)
    out = K.check_against(rerun, committed, any_scale=True)
    assert out["scale_differences"] == ["train_steps: rerun [800], committed [32000]"]
    assert "no verdict: the rerun is at another scale" in K.format_check(out)
    del rerun["config"]["train_steps"]  # a key one side lacks predates its option
    assert K.check_against(rerun, committed)["scale_differences"] == []
    (tmp_path / "r").mkdir()
    rerun["config"]["eval_maps"] = 100
    (tmp_path / "r" / "results.json").write_text(json.dumps(rerun))
    chk = ["reproduce", "check", str(tmp_path / "r"), str(REPO / "reports/fedrl-16")]
    assert cli(chk) == 2
    assert cli([*chk, "--any-scale"]) == 0


def test_check_against_committed_reports_and_refusals() -> None:
    for name in NAMES:  # a report against itself: every defined cell inside
        out = K.check_folders(REPO / "reports" / name, REPO / "reports" / name)
        assert out["consistent"] and out["counts"]["outside"] == out["counts"]["differs"] == 0
        assert out["counts"]["inside"] >= 8
    # the sampled-acting ablation is not a rerun of the printed reading: cells differ
    with pytest.raises(InvalidParameterError, match="acting: rerun 'sample'"):
        K.check_folders(REPO / "reports/pgc-a3c-sample", REPO / "reports/pgc-a3c")
    out = K.check_folders(REPO / "reports/pgc-a3c-sample", REPO / "reports/pgc-a3c", any_scale=True)
    assert out["counts"]["differs"] >= 5 and not out["consistent"]
    with pytest.raises(InvalidParameterError, match="no comparable cell"):
        K.check_folders(REPO / "reports/fedrl-16", REPO / "reports/fedrl")
    with pytest.raises(InvalidParameterError, match="rerun must be a rerun"):
        K.check_folders(REPO / "reports/frd", REPO / "reports/fedrl")


def test_check_against_chance_rates_match_the_documented_ones() -> None:
    """Two independent runs of the same distribution, 95% normal intervals of equal width:
    'outside' about 16.6% and 'differs' about 0.56% per cell, as the module documents.
    n = 20,000 cells, seed 0; each rate is tested with a two-sided exact binomial test at
    level 1e-4 (false-failure probability at most 2e-4 for both)."""
    rng = np.random.default_rng(0)
    n, half = 20_000, 1.959963984540054
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    committed = _fedrl_like({f"m{i}": (a[i], a[i] - half, a[i] + half) for i in range(n)})
    rerun = _fedrl_like({f"m{i}": (b[i], b[i] - half, b[i] + half) for i in range(n)})
    out = K.check_against(rerun, committed)
    rates = {"outside": 2 * norm.sf(half / math.sqrt(2)), "differs": 2 * norm.sf(half * 2**0.5)}
    assert abs(rates["outside"] - 0.166) < 0.001 and abs(rates["differs"] - 0.0056) < 0.0001
    succ = [r for r in out["cells"] if r["cell"].endswith("succ_rate")]
    outside = sum(r["status"] in ("outside", "differs") for r in succ)
    differs = sum(r["status"] == "differs" for r in succ)
    assert binomtest(outside, n, rates["outside"]).pvalue > 1e-4
    assert binomtest(differs, n, rates["differs"]).pvalue > 1e-4
