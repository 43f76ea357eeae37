"""The same Flower app under Flower's deployment engine: a SuperLink and two SuperNodes started
as real processes on 127.0.0.1 (free ports, insecure HTTP on loopback only), ``flwr run`` of the
app project :func:`ldp_audit.training.flower_app.write_app_project` writes, and the run
directory it leaves is read by the attack and the report.

Bounded: every wait has a deadline (about 20-40 s in all on a quiet machine, 150 s at most); every
process this test starts is stopped (its own process group: SIGTERM, then SIGKILL) in a
``finally``. Skipped with a message when Flower is not installed.
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


def test_superlink_supernodes_on_loopback(tmp_path):
    from ldp_audit.accountant import Accountant, Ledger
    from ldp_audit.training.flower_app import write_app_project
    from ldp_audit.training.pgc_a3c import PgcA3cConfig
    from ldp_audit.training.run_dir import read_transcript

    until = time.monotonic() + DEADLINE_S
    home, run, ledgers = tmp_path / "flwr-home", tmp_path / "run", tmp_path / "ledgers"
    home.mkdir()
    app = write_app_project(tmp_path / "app")
    port = _free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "loop"\n\n[superlink.loop]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    cfg = PgcA3cConfig(mechanism="laplace", epsilon=4.0, rounds=2)
    (tmp_path / "run.toml").write_text(
        f"pgc-config = {json.dumps(json.dumps(cfg.to_dict()))}\n"
        f"run-dir = {json.dumps(str(run))}\nseed = 3\nnum-agents = 2\n"
        f'scoring-gravities = "9.7,9.9"\ntimeout = 120.0\n'
    )
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": "1",
    }
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    try:
        logs.append(tmp_path / "superlink.log")
        procs.append(
            _start(
                [
                    str(BIN / "flower-superlink"),
                    "--insecure",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--database",
                    str(tmp_path / "state.db"),
                ],
                logs[-1],
                env,
            )
        )
        _wait_for(
            lambda: "Uvicorn running" in logs[0].read_text(), "the SuperLink", until, procs, logs
        )
        for k, (g, seed) in enumerate(((9.7, 5), (9.9, 6))):
            logs.append(tmp_path / f"supernode{k}.log")
            node_cfg = f'partition-id={k} gravity={g} agent-seed={seed} ledger-dir="{ledgers}"'
            procs.append(
                _start(
                    [
                        str(BIN / "flower-supernode"),
                        "--insecure",
                        "--superlink",
                        f"127.0.0.1:{port}",
                        "--port",
                        str(_free_port()),
                        "--node-config",
                        node_cfg,
                    ],
                    logs[-1],
                    env,
                )
            )
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
    tr = read_transcript(run)
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
