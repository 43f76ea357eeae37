"""Flower's deployment engine for the tests: a SuperLink and SuperNodes started as real processes
on 127.0.0.1 (free ports, insecure HTTP on loopback only), then ``flwr run`` of an app project
(``from tests.flower_deploy import run_on_superlink``; used by tests/flower_runs.py for
test_flower_deployment.py, and by test_flower_any_deployment.py).

Bounded: every wait has a deadline; every process started here is stopped (its own process
group: SIGTERM, then SIGKILL) in a ``finally``, whatever happens. A wait that times out, or a
Flower process that exits early, fails the calling test with the tail of every process's log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

#: the folder of this interpreter's console scripts (flower-superlink, flower-supernode, flwr)
BIN = Path(sys.executable).parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
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
            os.killpg(p.pid, sig)  # the process group _start created for it
        except ProcessLookupError:
            break
        try:
            p.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    p._log.close()  # type: ignore[attr-defined]


def _wait_for(
    pred: Callable[[], bool], what: str, until: float, procs: list, logs: list[Path]
) -> None:
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


def run_on_superlink(
    tmp_path: Path,
    app: Path,
    run_config: str,
    node_configs: Sequence[str],
    run_dir: Path,
    *,
    deadline_s: float = 150.0,
    env: dict[str, str] | None = None,
) -> None:
    """Start a SuperLink and one SuperNode per entry of ``node_configs`` (its ``--node-config``),
    ``flwr run`` the app project ``app`` with ``run_config`` (the text of its run-config TOML),
    and wait until ``run_dir/manifest.json`` exists; then stop every process.

    Files go under ``tmp_path``: ``flwr-home/`` (``FLWR_HOME``, a ``loop`` SuperLink connection),
    ``run.toml``, ``state.db`` and the logs ``superlink.log``, ``supernode{k}.log``. ``env`` adds
    variables to the processes' environment (``FLWR_HOME``, this interpreter's scripts first on
    ``PATH`` and ``OMP_NUM_THREADS=1`` are always set). Fails the calling test if ``flwr run``
    exits non-zero or anything takes longer than ``deadline_s`` seconds in all.
    """
    until = time.monotonic() + deadline_s
    home = tmp_path / "flwr-home"
    home.mkdir()
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "loop"\n\n[superlink.loop]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    (tmp_path / "run.toml").write_text(run_config)
    env = {
        **os.environ,
        "FLWR_HOME": str(home),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "OMP_NUM_THREADS": "1",
        **(env or {}),
    }
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
        for k, node_cfg in enumerate(node_configs):
            logs.append(tmp_path / f"supernode{k}.log")
            procs.append(
                _start(
                    [str(BIN / "flower-supernode"), "--insecure", "--superlink",
                     f"127.0.0.1:{port}", "--port", str(free_port()), "--node-config", node_cfg],
                    logs[-1],
                    env,
                )
            )  # fmt: skip
        for lg in logs[1:]:
            _wait_for(lambda lg=lg: "SuperNode ID" in lg.read_text(), lg.name, until, procs, logs)
        toml = str(tmp_path / "run.toml")
        out = subprocess.run(
            [str(BIN / "flwr"), "run", str(app), "loop", "--run-config", toml],
            env=env,
            capture_output=True,
            text=True,
            timeout=max(5.0, until - time.monotonic()),
        )
        assert out.returncode == 0, out.stdout + out.stderr
        _wait_for(
            lambda: (run_dir / "manifest.json").exists(), "the run's manifest", until, procs, logs
        )
    finally:
        for p in reversed(procs):
            _stop(p)
