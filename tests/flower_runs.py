"""The default run's Flower runs, started ahead of the tests that read them.

A Flower run spends most of its wall time waiting for its SuperLink, SuperNodes and Ray to
start (about 7 s of CPU in 17-24 s wall on the quiet 2-core machine), so the autouse session
fixture ``_flower_pool`` (tests/conftest.py) starts every run below whose tests are selected
before the session's first test, two at a time in background threads, in this order; each test
waits only for its own run (``flower_runs[NAME].result()``; a run's failure, a ``pytest.fail``
from :func:`tests.flower_deploy.run_on_superlink` too, is raised there). Each run has its own
folder, SuperLink port and ``FLWR_HOME``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _pgc(base: Path, cfg: dict[str, Any], n_agents: int, seed: int, log: bool) -> Path:
    from ldp_audit.training.flower import pgc_app as F
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    agents = [F.AgentSecrets(*a) for a in AGENTS[:n_agents]]
    log_file = base / "log" if log else None
    cfg_ = PgcA3cConfig(**cfg)
    return F.run_simulation(
        cfg_, base / "run", agents=agents, ledger_dir=base / "ledgers", seed=seed, log=log_file
    )


#: the agents' (gravity, seed) of test_flower.py's runs
AGENTS = [(9.7, 11), (9.9, 12), (9.8, 13)]
#: test_flower.py's run read by most of its tests, and the budget-refusal run (prs, epsilon 6
#: over 3 rounds, a budget of 4.5: round 2 refused)
PGC_MAIN = {"mechanism": "laplace", "epsilon": 6.0, "rounds": 3, "buffer_size": 2}
PGC_BUDGET = {"mechanism": "prs", "epsilon": 6.0, "rounds": 3, "budget": 4.5}


def _deployment(base: Path) -> Path:
    """test_flower_deployment.py: the PGC-A3C app on a SuperLink and two SuperNodes."""
    from ldp_audit.training.flower.pgc_app import write_app_project
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
    from tests.flower_deploy import run_on_superlink

    run, ledgers = base / "run", base / "ledgers"
    app = write_app_project(base / "app")
    cfg = PgcA3cConfig(mechanism="laplace", epsilon=4.0, rounds=2)
    run_config = (
        f"pgc-config = {json.dumps(json.dumps(cfg.to_dict()))}\n"
        f"run-dir = {json.dumps(str(run))}\nseed = 3\nnum-agents = 2\n"
        f'scoring-gravities = "9.7,9.9"\ntimeout = 120.0\n'
    )
    nodes = [
        f'partition-id={k} gravity={g} agent-seed={seed} ledger-dir="{ledgers}"'
        for k, (g, seed) in enumerate(((9.7, 5), (9.9, 6)))
    ]
    run_on_superlink(base, app, run_config, nodes, run, env={"NUMBA_NUM_THREADS": "1"})
    return run


STATUS_APP = """from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

server_app = ServerApp()
client_app = ClientApp()


@server_app.main()
def main(grid, context):
    if context.run_config["fail"]:
        raise RuntimeError("the server app failed on purpose")
"""


def status_run(base: Path, fail: bool) -> tuple[int, str]:
    """test_flower_run_status.py: ``flwr_run`` of an app whose ServerApp raises (``fail``) or
    finishes; its return value and Flower's log."""
    from ldp_audit.training.flower.run import app_pyproject, flwr_run, write_app_project

    pyproject = app_pyproject("status-app", "a ServerApp that raises or finishes", "status_app",
                              "fail = false\n")  # fmt: skip
    app = write_app_project(base / "app", pyproject, "status_app", STATUS_APP)
    code = flwr_run(app, run_config={"fail": fail}, num_supernodes=1, log=base / "log", timeout=300)
    return code, (base / "log").read_text()


def sigterm_run(base: Path, app: str, args: list[str]) -> tuple[int, str, list[str], list[str]]:
    """test_flower.py's SIGTERM test: ``python -m ldp_audit.training.flower.APP`` signalled once
    its run's config.json appears (the ServerApp runs: its SuperLink is up); its exit status,
    stderr, the ``ldp-flwr-*`` folders left in its TMPDIR, and the processes still running that
    were below it at the signal or have that TMPDIR in their command line."""
    import os
    import signal
    import subprocess
    import sys
    import time

    tmp, out = base / "tmp", base / "r"
    tmp.mkdir()
    argv = [sys.executable, "-m", f"ldp_audit.training.flower.{app}", "--out", str(out),
            *args, "--rounds", "50"]  # fmt: skip
    p = subprocess.Popen(argv, env=dict(os.environ, TMPDIR=str(tmp)), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (out / "config.json").exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            _, err = p.communicate()
            raise AssertionError(f"{app} ended or hung before its run started: {err[-2000:]}")
        time.sleep(0.05)
    from ldp_audit.training.flower.run import _started, _tree

    tree = _tree(p.pid)  # flower-superexec and flwr-simulation run in sessions of their own
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    found = [str(q) for q, start in tree.items() if _started(q) == start]
    for f in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(tmp).encode() in f.read_bytes():
                found.append(f.parent.name)
        except OSError:
            continue  # ended meanwhile
    return p.returncode, err, [x.name for x in tmp.glob("ldp-flwr-*")], found


#: name -> (the tests that read it, its run: a folder -> what the tests read)
RUNS: dict[str, tuple[tuple[str, ...], Callable[[Path], Any]]] = {
    "pgc-main": (
        (
            "test_simulation_runs_with_flwr_run_not_the_deprecated_run_simulation",
            "test_transcript_layout_and_replay",
            "test_summary_says_where_the_run_is_and_what_it_spent",
            "test_each_agent_charged_its_own_ledger",
            "test_attack_and_report_read_the_flower_run",
        ),
        lambda base: (base, _pgc(base, PGC_MAIN, 3, seed=4, log=True)),
    ),
    "pgc-budget": (
        ("test_budget_refusal_releases_nothing",),
        lambda base: (base, _pgc(base, PGC_BUDGET, 2, seed=1, log=False)),
    ),
    "deployment": (
        ("test_superlink_supernodes_on_loopback",),
        lambda base: (base, _deployment(base)),
    ),
    "sigterm-pgc": (
        ("test_sigterm_stops_the_superlink_it_started[pgc_app-args0]",),
        lambda base: sigterm_run(base, "pgc_app", ["--gravities", "9.7,9.9"]),
    ),
    "status-raised": (
        ("test_flwr_run_returns_nonzero_when_the_server_app_raised[True-1]",),
        lambda base: status_run(base, True),
    ),
}
