"""Flower for any app under Flower's deployment engine: a SuperLink and two SuperNodes started as
real processes on 127.0.0.1 (free ports, insecure HTTP on loopback only), ``flwr run`` of the
digits example's app project (``examples/flower_digits``), each SuperNode with its own ledger
folder and private favourite digit in its node config; one node pins a budget the run config
does not ask for and refuses every round. The run directory is read by the report and the attack
(which predicts, and cannot score: a real federation's server has no ground truth).

Bounded: every wait has a deadline (150 s in all); every process this test starts is stopped (its
own process group: SIGTERM, then SIGKILL) in a ``finally``. Skipped when Flower is not installed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="Flower not installed: pip install 'ldp-audit[flower]'")

BIN = Path(sys.executable).parent
DEADLINE_S = 150.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    fh = open(log, "w")  # noqa: SIM115 (closed with the process below)
    p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    p._log = fh  # type: ignore[attr-defined]
    return p


def _stop(p: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        if p.poll() is not None:
            break
        try:
            os.killpg(p.pid, sig)  # the process group this test created for it
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    p._log.close()  # type: ignore[attr-defined]


def _wait_for(pred, what: str, until: float, procs: list, logs: list[Path]) -> None:
    while time.monotonic() < until:
        if pred():
            return
        for p in procs:
            if p.poll() is not None:
                tail = "\n".join(lg.read_text()[-1500:] for lg in logs)
                pytest.fail(f"a Flower process exited early while waiting for {what}:\n{tail}")
        time.sleep(0.5)
    tail = "\n".join(lg.read_text()[-1500:] for lg in logs)
    pytest.fail(f"timed out waiting for {what}:\n{tail}")


@pytest.mark.slow  # measured 80 s wall, 15.5 s user + 1.4 s sys CPU (2026-11-27, load ~11)
def test_digits_app_on_a_superlink_and_two_supernodes(tmp_path):
    from ldp_audit.accountant import Accountant, Ledger
    from ldp_audit.attacks.dynamics import attack_private_param_run
    from ldp_audit.cli import main
    from ldp_audit.rundir import read_config, verify_manifest
    from ldp_audit.training import flower_digits as D
    from ldp_audit.training.run_dir import read_transcript

    until = time.monotonic() + DEADLINE_S
    home, run = tmp_path / "flwr-home", tmp_path / "run"
    home.mkdir()
    app = D.write_app_project(tmp_path / "app")
    port = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "loop"\n\n[superlink.loop]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    mech = json.dumps({"name": "laplace", "epsilon": 2.0, "clip": 2.0})
    (tmp_path / "run.toml").write_text(
        f"run-dir = {json.dumps(str(run))}\nnum-server-rounds = 2\nmin-nodes = 2\n"
        f"ldp-mechanism = {json.dumps(mech)}\nldp-budget = 4.0\ntimeout = 120.0\n"
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    nodes = [  # node 1 pins a budget of 2.0 while the run config asks for 4.0: refused
        f"partition-id=0 favourite-digit=4 agent-seed=5 ldp-budget=4.0 "
        f'ledger-dir="{tmp_path / "node0"}"',
        f'partition-id=1 favourite-digit=7 ldp-budget=2.0 ledger-dir="{tmp_path / "node1"}"',
    ]
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    try:
        logs.append(tmp_path / "superlink.log")
        procs.append(
            _start(
                [str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port",
                 str(port), "--database", str(tmp_path / "state.db")],
                logs[-1],
                env,
            )
        )  # fmt: skip
        _wait_for(
            lambda: "Uvicorn running" in logs[0].read_text(), "the SuperLink", until, procs, logs
        )
        for k, node_cfg in enumerate(nodes):
            logs.append(tmp_path / f"supernode{k}.log")
            procs.append(
                _start(
                    [str(BIN / "flower-supernode"), "--insecure", "--superlink",
                     f"127.0.0.1:{port}", "--port", str(_free_port()), "--node-config", node_cfg],
                    logs[-1],
                    env,
                )
            )  # fmt: skip
        for lg in logs[1:]:
            _wait_for(lambda lg=lg: "SuperNode ID" in lg.read_text(), lg.name, until, procs, logs)
        out = subprocess.run(
            [
                str(BIN / "flwr"),
                "run",
                str(app),
                "loop",
                "--run-config",
                str(tmp_path / "run.toml"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=max(5.0, until - time.monotonic()),
        )
        assert out.returncode == 0, out.stdout + out.stderr
        _wait_for(
            lambda: (run / "manifest.json").exists(), "the run's manifest", until, procs, logs
        )
    finally:
        for p in reversed(procs):
            _stop(p)
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    assert verify_manifest(run)["ok"]
    assert read_config(run)["system"] == "digits-fedavg"
    tr = read_transcript(run)
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
