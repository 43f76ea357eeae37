"""The one-command demo (ldp_audit.demo): end to end on tiny settings, and its validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldp_audit.errors import InvalidParameterError, RunDirectoryError

pytest.importorskip("ldp_audit.training.pgc_a3c")
pytest.importorskip("ldp_audit.audit")
pytest.importorskip("ldp_audit.attacks.dynamics_run_dir")

from ldp_audit.demo import DemoSettings, run_demo  # noqa: E402

TINY = DemoSettings(max_submissions=60, audit_samples=2000, attack_shadow=5, attack_groups=20)


def test_demo_end_to_end_and_rerun_does_not_double_charge(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    res = run_demo(out, seed=1, settings=TINY)
    for name in (
        "config.json",
        "ledger.sqlite",
        "transcript.npz",
        "secrets.npz",
        "metrics.json",
        "model.npz",
        "audit.json",
        "attack_dynamics.json",
    ):
        assert (out / name).is_file(), name
    assert res.report["html"] == out / "report" / "index.html" and res.report["html"].is_file()
    assert set(res.seconds) == {"train", "audit", "attack", "report"}
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["seed"] == 1 and cfg["mechanism"]["name"] == "laplace"
    assert cfg["mechanism"]["epsilon"] == 5.0
    audits = json.loads((out / "audit.json").read_text())
    # one audit, two verdicts (distribution / implementation) and a privacy profile
    assert [a["float_bits"] for a in audits] == [True]
    assert set(audits[0]["verdicts"]) == {"distribution", "implementation"}
    assert audits[0]["profile"] is not None
    # the white-box loss of Laplace at eps = 5 over its candidate pairs is the claim itself
    assert all(a["exact_epsilon"] == pytest.approx(5.0, rel=1e-3) for a in audits)
    attack = json.loads((out / "attack_dynamics.json").read_text())
    assert attack["k"] == 3 and 0.0 <= attack["accuracy"] <= 1.0
    report = json.loads(res.report["json"].read_text())
    assert res.verdict == report["verdict"]["status"]
    assert res.violation == (res.verdict == "violation")
    assert report["run"]["status"]["run"] == "complete"
    assert report["run"]["status"]["evidence_ok"] is True
    assert report["audits"]["status"] == "run" and report["attacks"]["status"] == "run"
    first_agents = report["ledger"]["agents"]
    assert first_agents == report["ledger"]["agents_in_transcript"] > 0
    assert report["ledger"]["basic"]["max"] == pytest.approx(5.0)

    # a second demo into the same directory is refused: the first run is evidence
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(RunDirectoryError, match="already exists and is not empty"):
        run_demo(out, seed=1, settings=TINY)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    # --overwrite replaces it whole: a fresh ledger, no stale charges, no stale artefacts
    res2 = run_demo(out, seed=1, settings=TINY, overwrite=True)
    report2 = json.loads(res2.report["json"].read_text())
    assert report2["ledger"]["agents"] == first_agents
    assert report2["ledger"]["basic"]["max"] == pytest.approx(5.0)


def test_demo_validates_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="seed must be an integer >= 0, got -1"):
        run_demo(tmp_path / "d", seed=-1)
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(RunDirectoryError, match="out_dir .*file.* exists and is not a directory"):
        run_demo(f)
    with pytest.raises(InvalidParameterError, match="settings must be a DemoSettings"):
        run_demo(tmp_path / "d", settings={"epsilon": 5})  # type: ignore[arg-type]
