"""The same Flower app under Flower's deployment engine: a SuperLink and two SuperNodes started
as real processes on 127.0.0.1 (free ports, insecure HTTP on loopback only), ``flwr run`` of the
app project :func:`ldp_audit.training.flower.pgc_app.write_app_project` writes, and the run
directory it leaves is read by the attack and the report.

Bounded: every wait has a deadline (about 20-40 s in all on a quiet machine, 150 s at most); every
process this test starts is stopped (its own process group: SIGTERM, then SIGKILL) in a
``finally`` (the set-up is :func:`tests.flower_deploy.run_on_superlink`, shared with
test_flower_any_deployment.py; the run is started ahead, with the other Flower runs, by
tests/flower_runs.py). Skipped with a message when Flower is not installed.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr", reason="Flower not installed: pip install 'ldp-audit[flower]'")


def test_superlink_supernodes_on_loopback(flower_runs):
    """The run is tests/flower_runs.py's "deployment" (laplace, epsilon 4 over 2 rounds, agents
    of gravity 9.7 and 9.9), started ahead by the session fixture ``flower_runs``."""
    from ldp_audit.accountant import Accountant, Ledger
    from ldp_audit.rundir import RunDir

    tmp_path, run = flower_runs["deployment"].result()
    ledgers = tmp_path / "ledgers"
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    tr = RunDir(run).transcript()
    assert tr["report"].shape == (4, 112)
    # node order (by SuperNode id) decides who submits first; each agent once per round
    assert sorted(tr["agent"][:2]) == [0, 1] and list(tr["agent"][2:]) == list(tr["agent"][:2])
    for k in range(2):  # each SuperNode's agent charged its own ledger: 2 x eps/T = 4
        own = Accountant(ledger=Ledger(str(ledgers / f"agent-{k}.sqlite")))
        assert own.spent(f"0/{k}") == pytest.approx(4.0)
    from ldp_audit.cli import main

    assert main(["attack", "dynamics", "--run-dir", str(run), "--shadow", "20",
                 "--out", str(tmp_path / "attack.json")]) in (0, 1)  # fmt: skip
    assert json.loads((tmp_path / "attack.json").read_text())["n"] == 2
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) in (0, 1)
    assert (tmp_path / "report" / "report.json").exists()
