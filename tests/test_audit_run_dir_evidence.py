"""``audit --run-dir`` reads the claim from the run's config.json: the run is verified against its
manifest first, as ``attack`` and ``report`` do (issue 38: every reader of a run's evidence), and
the evidence options mean nothing without ``--run-dir``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ldp_audit.cli import EXIT_UNAUTHENTICATED, EXIT_USAGE, main

TINY = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1", "--max-submissions",
        "20", "--no-progress"]  # fmt: skip
AUDIT = ["--samples", "20000", "--no-progress", "--json"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("audit_evidence") / "run"
    with pytest.MonkeyPatch.context() as mp:  # the suite's key (tests/conftest.py) is per test
        mp.setenv("LDP_AUDIT_KEY_FILE", str(out.parent / "ledger.key"))
        assert main([*TINY, "--out", str(out)]) == 0
    return out


def _copy(run: Path, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "run"
    shutil.copytree(run, dst)
    return dst


def test_an_intact_run_is_audited_and_says_it_was_verified(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(run.parent / "ledger.key"))
    r = _copy(run, tmp_path)
    capsys.readouterr()
    assert main(["audit", "--run-dir", str(r), *AUDIT]) in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    assert doc["verified"] is True and doc["verification"]["authenticated"] is True
    assert (r / "audit.json").is_file()


def test_an_edited_claim_is_refused_before_any_audit(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LDP_AUDIT_KEY_FILE", str(run.parent / "ledger.key"))
    r = _copy(run, tmp_path)
    cfg = json.loads((r / "config.json").read_text())
    cfg["config"]["epsilon"] = 100.0  # a looser claim: an audit of it could never be refuted
    (r / "config.json").write_text(json.dumps(cfg))
    capsys.readouterr()
    assert main(["audit", "--run-dir", str(r), *AUDIT]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "config.json" in err and "Traceback" not in err
    assert not (r / "audit.json").exists()  # refused before any work: nothing written
    # told to go on anyway, the verdict is not the clean one: exit 4, and the JSON says so
    assert main(["audit", "--run-dir", str(r), *AUDIT, "--allow-unverified"]) in (
        1,
        EXIT_UNAUTHENTICATED,
    )
    out = capsys.readouterr().out
    doc = json.loads(out[out.index("{") :])
    assert doc["verified"] is False


@pytest.mark.parametrize("opt", [["--expect-head", "ab" * 32], ["--expect-root", "cd" * 32],
                                 ["--allow-unverified"]])  # fmt: skip
def test_evidence_options_need_run_dir(opt, capsys):
    argv = ["audit", "--mechanism", "laplace", "--epsilon", "1", "--samples", "20000", *opt]
    assert main(argv) == EXIT_USAGE
    assert f"{opt[0]} applies to --run-dir" in capsys.readouterr().err
