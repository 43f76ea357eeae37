"""Reports of any algorithm: runs without PGC layout, sections registry, manifest, extra inputs."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from ldp_audit import systems
from ldp_audit.cli import main
from ldp_audit.errors import RunDirectoryError
from ldp_audit.report import build_report, write_report
from ldp_audit.report._sections import registered_sections
from tests import report_fake_algorithm as fake

pytest.importorskip("ldp_audit.accountant")

REG = {"fakealgo": "tests.report_fake_algorithm:report_sections"}


def _fake_run(path: Path, *, status: str = "complete") -> Path:
    """A run of a non-PGC algorithm written under the run-directory contract."""
    from ldp_audit.accountant import Accountant, GaussianEvent, LaplaceEvent
    from ldp_audit.rundir import RunWriter

    w = RunWriter(path, algorithm="fakealgo", config={"epochs": 3, "lr": 0.1}, seed=7)
    acc = Accountant(ledger=w.open_ledger())
    acc.charge_many([(f"agent-{i}", LaplaceEvent(1.0)) for i in range(4)])
    acc.charge_many([(f"agent-{i}", LaplaceEvent(1.0)) for i in range(2)])
    acc.charge("model", GaussianEvent(2.0), scope="central")
    acc.close()
    w.write_json("metrics.json", {"returns": [1.0, 2.0, 3.0], "note": "fake"})
    w.finish(status=status)
    return path


def test_other_algorithm_loads_without_pgc_assumptions(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "run")
    fake.CALLS.clear()
    rep = build_report(run, sections_registry=REG)
    m = rep.model
    assert m["run"]["algorithm"] == "fakealgo"
    # nothing of one system's layout in the core: no transcript counts without the system's
    # releases, no learning curves of its own
    assert "learning" not in m and "submissions" not in m["run"]
    assert m["ledger"]["releases"] is None and m["ledger"]["agents_in_transcript"] is None
    # local and central scope side by side, never summed
    scopes = {s["scope"]: s for s in m["ledger"]["scopes"]}
    assert scopes["local"]["ids"] == 4 and scopes["local"]["max"] == pytest.approx(2.0)
    assert scopes["central"]["ids"] == 1 and scopes["central"]["max"] > 0
    assert m["ledger"]["basic"]["max"] == pytest.approx(2.0)  # central charge not added
    assert m["run"]["status"]["run"] == "complete" and m["run"]["status"]["evidence_ok"]
    # the registered section is called with the run directory and rendered everywhere
    assert fake.CALLS == [(run, None)]
    (sec,) = m["sections"]
    assert sec["id"] == "learning" and sec["error"] is None and sec["figures"] == ["curve"]
    assert sec["data"] == {"returns": [1.0, 2.0, "inf"]}  # the project's JSON convention
    assert "section-learning-curve" in rep.figures
    html = rep.to_html()
    assert "Fake learning curve" in html and "<code>3</code>" in html
    assert 'id="fig-section-learning-curve"' in html
    assert "learning" not in rep.figures  # no PGC learning figure for other algorithms
    md = rep.to_markdown()
    assert "## Fake learning curve" in md and "| central | 1.5 |" in md
    assert json.loads(rep.to_json())["sections"][0]["tables"][0]["rows"][1] == ["local", "inf"]


def test_registry_has_the_four_shipped_systems() -> None:
    # other registered systems may add their own entries (ldp_audit.systems); the trainers'
    # own sections are wrapped with their privacy-statement rows (training/statements.py)
    reg = registered_sections()
    assert {k: reg[k] for k in ("pgc-a3c", "dprl", "fedrl", "frd")} == {
        "pgc-a3c": "ldp_audit.training.pgc_a3c.report:report_sections",
        "dprl": "ldp_audit.training.statements:dprl_report",
        "fedrl": "ldp_audit.training.statements:fedrl_report",
        "frd": "ldp_audit.training.statements:frd_report",
    }


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ("tests.report_fake_algorithm:raising_sections", "RuntimeError: the fake trainer's"),
        ("tests.report_fake_algorithm:nope", "has no function 'nope'"),
        ("tests.report_broken_sections:report_sections", "import failed: RuntimeError"),
    ],
)
def test_failing_section_is_an_error_box_not_a_crash(
    tmp_path: Path, entry: str, needle: str
) -> None:
    run = _fake_run(tmp_path / "run")
    rep = build_report(run, sections_registry={"fakealgo": entry}, figures=False)
    (sec,) = rep.model["sections"]
    assert needle in sec["error"]
    page = rep.to_html()
    assert 'class="errorbox"' in page and html.escape(needle) in page
    assert any("could not be built" in x for x in rep.model["verdict"]["not_verified"])


def test_malformed_section_is_an_error_box_and_good_ones_stay(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "run")
    reg = {"fakealgo": "tests.report_fake_algorithm:malformed_sections"}
    secs = build_report(run, sections_registry=reg, figures=False).model["sections"]
    assert [s["error"] is None for s in secs] == [True, False]
    assert "figure 'x' must be PNG bytes" in secs[1]["error"]


def test_uninstalled_sections_module_is_skipped_with_a_note(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "run")
    reg = {"fakealgo": "ldp_audit.training.no_such_trainer:report_sections"}
    m = build_report(run, sections_registry=reg, figures=False).model
    assert m["sections"] == []
    assert m["sections_source"]["loaded"] is False
    assert "not installed" in m["sections_source"]["reason"]
    # said on the page (the verdict's "What was not verified"), not only in report.json
    why = "ldp_audit.training.no_such_trainer is not installed"
    assert any(why in x for x in m["verdict"]["not_verified"])


def test_manifest_check_names_changed_files_and_status(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "run")
    (run / "metrics.json").write_text(json.dumps({"returns": [9.0]}))
    m = build_report(run, sections_registry=REG, figures=False).model
    st = m["run"]["status"]
    assert st["evidence_ok"] is False and st["changed"] == ["metrics.json"]
    assert st["evidence"] == "files changed since the run: metrics.json"
    assert (
        "EVIDENCE CHANGED: files changed since the run: metrics.json."
        in (m["verdict"]["not_verified"])
    )
    assert m["verdict"]["status"] == "partially verified"

    run2 = _fake_run(tmp_path / "run2", status="interrupted")
    m2 = build_report(run2, sections_registry=REG, figures=False).model
    assert m2["run"]["status"]["run"] == "interrupted"
    assert any("did not complete (status: interrupted)" in x for x in m2["verdict"]["not_verified"])


def test_extra_folder_and_file_are_read(tmp_path: Path) -> None:
    from ldp_audit.audit import audit
    from ldp_audit.mechanisms import Laplace

    run = _fake_run(tmp_path / "run")
    res = audit(Laplace(epsilon=1.0, clip=1.0), samples=2000, rng=0, dim=1, float_bits=False)
    out = tmp_path / "audit-out"
    out.mkdir()
    (out / "audit.json").write_text(json.dumps(res.to_dict()))  # a single AuditResult dict
    (out / "notes.json").write_text(json.dumps({"unrelated": 1}))  # ignored
    attack = tmp_path / "attack.json"
    attack.write_text(
        json.dumps(
            {"attack": "membership", "accuracy": 0.5, "accuracy_ci": [0.4, 0.6], "chance": 0.5}
        )
    )
    m = build_report(run, extra=[out, attack], sections_registry=REG, figures=False).model
    assert m["audits"]["status"] == "run"
    (a,) = m["audits"]["results"]
    assert a["source"] == str(out / "audit.json")
    assert [v["kind"] for v in a["verdicts"]] == ["distribution"]
    (t,) = m["attacks"]["results"]
    assert t["name"] == "membership" and t["source"] == str(attack)
    assert m["run"]["extra"] == [str(out), str(attack)]
    # a file named twice, or the run's own as EXTRA, is read once (s53: `report RUN RUN` said
    # "2 privacy violations found" for the run's one audit)
    from ldp_audit.rundir import write_artifact

    write_artifact(run, "audit.json", [json.loads((out / "audit.json").read_text())])
    twice = [out, out / "audit.json", tmp_path / "audit-out" / ".." / "audit-out", run, attack]
    m = build_report(run, extra=[*twice, attack], sections_registry=REG, figures=False).model
    assert len(m["audits"]["results"]) == 2 and len(m["attacks"]["results"]) == 1
    with pytest.raises(RunDirectoryError, match="extra must be existing folders or JSON files"):
        build_report(run, extra=[tmp_path / "missing"], sections_registry=REG, figures=False)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "audit.json").write_text(json.dumps({"x": 1}))
    with pytest.raises(RunDirectoryError, match="holds neither an audit result nor an attack"):
        build_report(run, extra=[bad], sections_registry=REG, figures=False)


def test_chain_head_is_rendered_when_the_ledger_gives_one(tmp_path: Path) -> None:
    from tests.test_report_fixtures import ledger_for, make_run

    run = make_run(tmp_path / "r")
    led = ledger_for(run)
    if not hasattr(led, "chain_head"):
        pytest.skip("LedgerStats has no chain_head yet (ledger engineer's change)")
    import dataclasses

    led = dataclasses.replace(led, chain_head="ab" * 32)
    rep = build_report(run, ledger=led, figures=False)
    assert rep.model["ledger"]["chain_head"] == "ab" * 32
    assert f"ledger chain head: {'ab' * 32}" in rep.to_html()
    assert f"ledger chain head: {'ab' * 32}" in rep.to_markdown()


def test_cli_report_generic_run_with_extra_and_refused_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    spec = systems.SystemSpec(
        name="fakealgo", config=object, trainer=None, schema=None, report_sections=REG["fakealgo"]
    )
    systems.register(spec)  # a system whose only part is its report sections
    request.addfinalizer(lambda: systems.unregister("fakealgo"))
    run = _fake_run(tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert main(["report", str(run), "-o", str(tmp_path / "o"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "partially verified" and Path(out["html"]).is_file()
    # a report never replaces the run it reads, even with --overwrite
    for argv in (
        ["report", str(run), "-o", str(run), "--overwrite"],
        ["report", str(run), "-o", str(tmp_path), "--overwrite"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("ldp-audit: error: --out") and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    # an existing report folder is refused without suggesting --resume (report has none)
    assert main(["report", str(run), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "already exists and is not empty" in err and "--resume" not in err
    # an existing report is replaced only with --overwrite
    assert main(["report", str(run), "-o", str(tmp_path / "o")]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert main(["report", str(run), "-o", str(tmp_path / "o"), "--overwrite"]) == 0
    # default output: RUN_DIR/report, the run's one named report folder
    assert main(["report", str(run)]) == 0
    assert (run / "report" / "index.html").is_file()


def test_write_report_refuses_an_output_holding_its_input(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "run")
    with pytest.raises(RunDirectoryError, match="is a run directory"):
        write_report(run, run, overwrite=True)
    assert (run / "config.json").is_file()


def test_non_private_run_is_not_called_randomised(tmp_path: Path) -> None:
    """A non-private run: no "randomised ... noisy report" claim, infinite spend drawn without
    warnings, empty section tables say so."""
    import warnings

    from ldp_audit.accountant import Accountant, NonPrivateEvent
    from ldp_audit.rundir import RunWriter

    w = RunWriter(
        tmp_path / "run", algorithm="fakealgo", config={}, seed=0, mechanism={"name": "no_privacy"}
    )
    acc = Accountant(ledger=w.open_ledger())
    acc.charge_many([(f"a{i}", NonPrivateEvent()) for i in range(3)])
    acc.close()
    w.write_json("metrics.json", {})
    w.finish()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = build_report(tmp_path / "run", sections_registry={})
    claimed = " ".join(rep.model["verdict"]["claimed"])
    assert "No local privacy is claimed" in claimed and "noisy report" not in claimed
    assert rep.model["ledger"]["basic"]["max"] == float("inf")
    from ldp_audit.report._tables import html_table

    assert '<td class="na" colspan="2">no rows</td>' in html_table(["a", "b"], [])


def test_one_run_audit_documents_reads_the_run_and_extra(tmp_path):
    """The one-run results the dprl and opacus report sections show: the run's own
    attack_membership.json, then each extra file or folder's *.json whose attack is one-run;
    other attacks, broken JSON and missing files are skipped."""
    import json

    from ldp_audit.report import one_run_audit_documents

    run, extra = tmp_path / "run", tmp_path / "extra"
    run.mkdir()
    extra.mkdir()
    (run / "attack_membership.json").write_text(json.dumps({"attack": "one-run-steinke", "k": 0}))
    (extra / "a.json").write_text(json.dumps({"attack": "one-run-fdp", "k": 1}))
    (extra / "b.json").write_text(json.dumps({"attack": "dynamics", "k": 2}))
    (extra / "c.json").write_text("{not json")
    (tmp_path / "d.json").write_text(json.dumps({"attack": "one-run-x", "k": 3}))
    got = one_run_audit_documents(run, [extra, tmp_path / "d.json", tmp_path / "missing.json"])
    assert [(p.rsplit("/", 1)[1], d["k"]) for p, d in got] == [
        ("attack_membership.json", 0), ("a.json", 1), ("d.json", 3)
    ]  # fmt: skip
    assert one_run_audit_documents(tmp_path / "nothing") == []


def test_the_page_names_the_files_the_run_sealed(tmp_path: Path) -> None:
    """Which files are evidence: manifest.json's (SHA-256 at the end of the run), analyses.json's
    (sealed when the toolkit wrote them) and what was added by hand, not sealed; the page said
    only 'every file the run wrote has the SHA-256 it recorded', naming none."""
    from ldp_audit.rundir import write_artifact

    run = _fake_run(tmp_path / "run")
    from ldp_audit.attacks.scoring import AttackResult

    res = AttackResult.from_guesses(attack="guess", mechanism={"name": "laplace", "epsilon": 1.0},
                                    epsilon=1.0, reports_per_agent=1, k=2, n=50, correct=26,
                                    confidence=0.95)  # fmt: skip
    write_artifact(run, "attack_guess.json", res.to_dict())
    (run / "notes.txt").write_text("by hand")
    rep = build_report(run, sections_registry=REG, figures=False)
    st = rep.model["run"]["status"]
    assert st["sealed"] == ["config.json", "metrics.json"]
    assert st["sealed_analyses"] == ["attack_guess.json"] and "notes.txt" in st["added_later"]
    page = rep.to_html()
    assert (
        "<td>sealed files (SHA-256 in manifest.json)</td><td>config.json, metrics.json</td>" in page
    )
    assert "<td>sealed analyses (analyses.json)</td><td>attack_guess.json</td>" in page
    assert "<td>added after the run, not sealed</td><td>notes.txt</td>" in page
