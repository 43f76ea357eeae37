"""Flower for any app under Flower's deployment engine: a SuperLink and two SuperNodes started as
real processes on 127.0.0.1 (free ports, insecure HTTP on loopback only), ``flwr run`` of the
digits example's app project (``examples/flower_digits``), each SuperNode with its own ledger
folder and private favourite digit in its node config; one node pins a budget the run config
does not ask for and refuses every round. The run directory is read by the report and the attack
(which predicts, and cannot score: a real federation's server has no ground truth).

Bounded: every wait has a deadline (150 s in all); every process this test starts is stopped (its
own process group: SIGTERM, then SIGKILL) in a ``finally`` (the set-up is
:func:`tests.flower_deploy.run_on_superlink`, shared with test_flower_deployment.py). Skipped
when Flower is not installed.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("flwr", reason="Flower not installed: pip install 'ldp-audit[flower]'")

from tests.flower_deploy import run_on_superlink  # noqa: E402


@pytest.mark.slow  # measured 80 s wall, 15.5 s user + 1.4 s sys CPU (2026-11-27, load ~11)
def test_digits_app_on_a_superlink_and_two_supernodes(tmp_path):
    from ldp_audit.accountant import Accountant, Ledger
    from ldp_audit.attacks.dynamics_run_dir import attack_private_param_run
    from ldp_audit.cli import main
    from ldp_audit.rundir import RunDir, read_config, verify_manifest
    from ldp_audit.training.flower import digits as D

    run = tmp_path / "run"
    app = D.write_app_project(tmp_path / "app")
    mech = json.dumps({"name": "laplace", "epsilon": 2.0, "clip": 2.0})
    run_config = (
        f"run-dir = {json.dumps(str(run))}\nnum-server-rounds = 2\nmin-nodes = 2\n"
        f"ldp-mechanism = {json.dumps(mech)}\nldp-budget = 4.0\ntimeout = 120.0\n"
    )
    nodes = [  # node 1 pins a budget of 2.0 while the run config asks for 4.0: refused
        f"partition-id=0 favourite-digit=4 agent-seed=5 ldp-budget=4.0 "
        f'ledger-dir="{tmp_path / "node0"}"',
        f'partition-id=1 favourite-digit=7 ldp-budget=2.0 ledger-dir="{tmp_path / "node1"}"',
    ]
    run_on_superlink(tmp_path, app, run_config, nodes, run)
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    assert verify_manifest(run)["ok"]
    assert read_config(run)["system"] == "digits-fedavg"
    tr = RunDir(run).transcript()
    assert tr["report"].shape == (2, 650) and tr["agent"].tolist() == [0, 0]
    rejected = json.loads((run / "metrics.json").read_text())["rejected"]
    assert len(rejected) == 2 and all("pinned to 2.0: refused" in r["reason"] for r in rejected)
    own = Accountant(ledger=Ledger(str(tmp_path / "node0" / "client-0.sqlite")))
    assert own.spent_all(delta=0.0) == pytest.approx({"0": 4.0})
    own.close()
    assert not (tmp_path / "node1").exists()  # refused before any charge or training
    assert not (run / "secrets.npz").exists()  # the server never learns a favourite digit
    pred = attack_private_param_run(run, simulator=D.simulator, n_shadow=10, seed=1)
    assert pred["guess"].shape == (1,) and pred["guess"][0] in D.CANDIDATES
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) in (0, 1)
    assert (tmp_path / "report" / "report.json").exists()
