"""`ldp-audit train frd` -> `attack frd` -> report sections; reproduce; bad inputs (exit 2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ldp_audit.cli import main

SMALL = [
    "--setting", "5", "--agents", "4", "--groups", "6", "--sections", "10",
    "--exchange-period", "5", "--initial-episodes", "5", "--hidden", "24", "--layers", "1",
    "--max-episodes", "40", "--no-stop-at-mission", "--no-progress",
]  # fmt: skip


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--sections", "1"], "--sections must be an integer >= 2, got '1'"),
        (["--exchange-period", "0"], "--exchange-period must be an integer >= 1, got '0'"),
        (["--initial-episodes", "-1"], "--initial-episodes must be an integer >= 0, got '-1'"),
        (["--epsilon", "0"], "--epsilon must be 'inf' or a finite number in (0, inf), got '0'"),
        (["--epsilon", "-2"], "--epsilon must be 'inf' or a finite number in (0, inf), got '-2'"),
        (
            ["--gravities", "9.8"],
            "--gravities must be at least 2 comma-separated finite numbers > 0",
        ),
    ],
)
def test_bad_train_inputs_exit_2_naming_parameter(argv, needle, tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:  # argparse usage error
        main(["train", "frd", *argv, "--out", str(out)])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()  # refused before any work


def test_ldp_needs_frd_mode(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "frd", "--mode", "fedavg", "--epsilon", "1", "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err  # FrdConfig's own check, before any work
    assert "--epsilon is for mode 'frd' (the LDP proxy memory), got mode 'fedavg'" in err
    assert not out.exists()


def test_train_attack_report_end_to_end(tmp_path, capsys):
    """Wide gravity set: the proxy memory leaks well beyond chance (non-private), while the LDP
    run's attack stays within its ceiling. Deterministic (fixed seeds); the asserted bound is the
    one-sided 97.5% Clopper-Pearson lower limit of the measured accuracy."""
    from ldp_audit.training.frd.run import report_sections

    runs = {}
    for name, extra in (("plain", []), ("ldp", ["--epsilon", "0.5"])):
        rd = tmp_path / name
        argv = ["train", "frd", *SMALL, "--gravities", "4.9,9.8,19.6", *extra]
        assert main([*argv, "--out", str(rd), "--json"]) == 0
        met = json.loads(capsys.readouterr().out)
        assert met["uploads_per_agent_max"] == 6  # after episodes 10, 15, ..., 35 (not 40: last)
        assert main(["attack", "frd", "--run-dir", str(rd), "--shadow", "12", "--json"]) == 0
        runs[name] = json.loads(capsys.readouterr().out)
        assert (rd / "attack_dynamics.json").exists()
        # a second attack does not silently replace the artefact
        assert main(["attack", "frd", "--run-dir", str(rd)]) == 2
        capsys.readouterr()
    # the generic command dispatches FRD runs to the FRD attack (24 shadow agents per gravity,
    # its default): the non-private proxy memory leaks, CI above chance
    out = tmp_path / "dyn.json"
    rc = main(["attack", "dynamics", "--run-dir", str(tmp_path / "plain"), "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    assert json.loads(out.read_text())["accuracy_ci"][0] > 1 / 3
    plain, ldp = runs["plain"], runs["ldp"]
    assert plain["ceiling"] == 1.0 and plain["epsilon"] == "inf"
    assert plain["accuracy_ci"][0] > 1 / 3  # leaks: CI entirely above chance
    assert math.isclose(ldp["composed_epsilon"], 6 * 0.5)
    assert ldp["ceiling"] < 1.0 and not ldp["violation"]
    secs = report_sections(tmp_path / "plain", [tmp_path / "ldp", tmp_path / "missing"])
    (sec,) = secs
    assert sec["id"] == "frd"
    rows = {r[0].split(" ")[0]: r for r in sec["tables"][1]["rows"]}
    assert rows["plain"][1] == "non-private (inf)"
    assert float(rows["ldp"][1]) == pytest.approx(3.0)
    assert len(sec["tables"][2]["rows"]) == 2
    json.dumps(sec["data"])  # JSON-able


def test_attack_refuses_a_non_run(tmp_path, capsys):
    assert main(["attack", "frd", "--run-dir", str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def test_reproduce_small_writes_report_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "rep"
    argv = ["reproduce", "frd", "--out", str(out), "--settings", "5", "--agents", "1,2",
            "--groups", "2", "--max-episodes", "12", "--threshold", "15", "--no-leak",
            "--ldp-epsilons", "1", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((out / "results.json").read_text())
    kinds = {(r["kind"], r["agents"]) for r in doc["rows"]}
    assert kinds == {("frd", 1), ("frd", 2), ("fedavg", 1), ("fedavg", 2), ("frd-ldp-1", 2)}
    for r in doc["rows"]:
        m = np.array([math.inf if x == "inf" else x for x in r["mission"]], dtype=float)
        assert m.shape == (2,) and np.all((m >= 10) | np.isinf(m))  # window of 10 episodes
    assert (out / "figure3.png").read_bytes()[:4] == b"\x89PNG"
    readme = (out / "README.md").read_text()
    assert "Episodes to mission" in readme and "median [interval]" in readme
    assert "## The paper's trends, tested" in readme and doc["trends"]["correction"] == "holm"
    # each box's median sits inside its [min, max] (2 groups: the interval is [min, max])
    for r in doc["rows"]:
        m = [math.inf if x == "inf" else x for x in r["mission"]]
        mv = math.inf if r["median"] == "inf" else r["median"]
        med = "inf" if math.isinf(mv) else f"{mv:.3g}"
        assert f"| {med} [" in readme and min(m) <= mv <= max(m)
    capsys.readouterr()
    assert main(argv) == 2  # committed results are evidence
    assert "already holds a report" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (
            ["--leak-epsilons", "inf"],
            "--leak-epsilons must be comma-separated finite numbers > 0, got 'inf'",
        ),
        (
            ["--leak-epsilons", "0"],
            "--leak-epsilons must be comma-separated finite numbers > 0, got '0'",
        ),
        (["--leak-groups", "0"], "--leak-groups must be an integer >= 1, got '0'"),
        (["--leak-shadow", "-1"], "--leak-shadow must be an integer >= 1, got '-1'"),
    ],
)
def test_bad_reproduce_leak_inputs_exit_2_naming_parameter(argv, needle, tmp_path, capsys):
    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as e:
        main(["reproduce", "frd", *argv, "--out", str(out)])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_ldp_variant_keeps_a_fixed_upload_schedule_and_refuses_stop_at_mission(tmp_path, capsys):
    """A group that stops at its mission stops uploading when its agents' private dynamics say
    so, and the server counts the uploads: measured before the fix, 300 one-agent groups at 0.01
    per upload (claim 0.10 over <= 10 uploads), P(fewer uploads) was 42/154 at gravity 4.9 and
    3/146 at 19.6, an epsilon lower bound of 1.24 at 95% (docs/frd.md). The LDP variant now runs
    every agent to max_episodes by default (the same number of uploads whatever the mission) and
    refuses --stop-at-mission before any work; the non-private upload still stops by default."""
    from ldp_audit.training.frd.run import report_sections

    # threshold 9: every group meets its mission within a few episodes, long before episode 30
    base = ["train", "frd", "--setting", "5", "--agents", "2", "--groups", "3", "--sections",
            "10", "--exchange-period", "5", "--initial-episodes", "5", "--max-episodes", "30",
            "--threshold", "9", "--window", "2", "--no-progress"]  # fmt: skip
    for name, extra in (("ldp", ["--epsilon", "0.5"]), ("plain", [])):
        assert main([*base, *extra, "--out", str(tmp_path / name), "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert all(math.isfinite(m) and m < 30 for m in doc["mission"]), doc["mission"]
    ldp = json.loads((tmp_path / "ldp" / "metrics.json").read_text())
    plain = json.loads((tmp_path / "plain" / "metrics.json").read_text())
    # exchanges after episodes 10, 15, 20, 25 (episode 30 ends the run): 4 uploads, every agent
    assert ldp["uploads_per_agent_max"] == 4
    assert plain["uploads_per_agent_max"] < 4  # it stopped at its mission
    (sec,) = report_sections(tmp_path / "ldp")
    assert float(sec["tables"][1]["rows"][0][1]) == pytest.approx(4 * 0.5)
    out = tmp_path / "refused"
    assert main([*base, "--epsilon", "0.5", "--stop-at-mission", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--stop-at-mission=True with --epsilon=0.5" in err and "Traceback" not in err
    assert not out.exists()


def test_every_attack_of_a_run_takes_no_progress():
    """The run attacks (shadow training: minutes) take --no-progress like train and reproduce;
    `attack frd --no-progress` was refused as an unrecognized argument (2026-12-07)."""
    from ldp_audit.cli import build_parser
    from ldp_audit.cli.types import show_progress

    parser = build_parser()
    for name in ("frd", "fedrl", "dynamics", "membership"):
        args = parser.parse_args(["attack", name, "--run-dir", "RUN", "--no-progress"])
        assert args.no_progress is True and show_progress(args) is False, name
