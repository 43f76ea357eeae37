"""``ldp-audit attack sweep`` keeps the progress convention of every command (docs/cli.md): bars
only where stderr is a terminal, ``LDP_AUDIT_PROGRESS=always|never`` overriding. Before this
test the sweep drew its bars into a pipe or a log whenever ``--quiet`` was not given (found by
running docs/guide/attacks.md's ``ldp-audit attack sweep`` with its output captured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ldp_audit.training.pgc_a3c")

# the smallest sweep: one theta, 3 agents and 14 shadow episodes per candidate (the fewest the
# non-private classifier can learn from: attacks.dynamics_shadow)
TINY = ["--agents", "3", "--shadow", "14", "--probe", "3", "--thetas", "init"]


def _sweep(out: Path, progress: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LDP_AUDIT_PROGRESS"}
    if progress is not None:
        env["LDP_AUDIT_PROGRESS"] = progress
    cmd = [sys.executable, "-m", "ldp_audit.cli", "attack", "sweep", *TINY, "--out", str(out)]
    # stdout and stderr are pipes: no terminal, as in `ldp-audit attack sweep > log 2>&1`
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_sweep_draws_no_bar_into_a_pipe(tmp_path: Path) -> None:
    res = _sweep(tmp_path / "sw", None)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    assert "%|" not in res.stderr, res.stderr[:500]  # no tqdm frame
    assert (tmp_path / "sw" / "sweep.json").is_file()
    assert len([ln for ln in res.stdout.splitlines() if "acc=" in ln]) == 33  # every cell
    # the command recorded is the one a reader reruns, not the interpreter's path to a module
    # (the committed reports/attacks/sweep.json said '/work/main/attacks/sweep.py --agents ...')
    doc = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert doc["settings"]["command"] == " ".join(
        ["ldp-audit attack sweep", *TINY, "--out", str(tmp_path / "sw")]
    )


def test_sweep_bar_forced_by_the_environment(tmp_path: Path) -> None:
    # the override still works, so the test above fails if the sweep drew bars into a pipe
    res = _sweep(tmp_path / "sw", "always")
    assert res.returncode in (0, 1), res.stderr[-2000:]
    assert "sweep cells (init)" in res.stderr and "%|" in res.stderr


def test_sweep_takes_no_progress_like_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """Session 51: ``attack sweep`` spelled its flag ``--quiet`` and refused ``--no-progress``
    (an unrecognized argument), the one command that did; ``--quiet`` now points at it."""
    from ldp_audit.cli import build_parser, main
    from ldp_audit.cli.types import show_progress

    args = build_parser().parse_args(["attack", "sweep", *TINY, "--no-progress"])
    assert args.no_progress is True and show_progress(args) is False
    with pytest.raises(SystemExit) as exc:
        main(["attack", "sweep", *TINY, "--quiet"])
    assert exc.value.code == 2
    assert "--quiet (did you mean --no-progress?)" in capsys.readouterr().err
