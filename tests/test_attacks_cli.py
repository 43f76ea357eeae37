"""``ldp-audit attack``: help, usage errors, a tiny end-to-end run."""

from __future__ import annotations

import json
import subprocess
import sys

_MAIN = "import sys; from ldp_audit.cli import main; sys.exit(main(sys.argv[1:]))"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _MAIN, "attack", *args], capture_output=True, text=True
    )


def test_help_lists_attacks() -> None:
    out = _cli("--help")
    assert out.returncode == 0, out.stderr
    for name in ("dynamics", "membership", "sweep"):
        assert name in out.stdout


def test_usage_errors_exit_2() -> None:
    assert _cli("dynamics", "--epsilon", "-1").returncode == 2
    assert _cli("dynamics", "--mechanism", "bogus").returncode == 2
    assert _cli("membership", "--reports-per-agent", "0").returncode == 2


def test_dynamics_json_tiny(tmp_path) -> None:
    out_file = tmp_path / "r.json"
    out = _cli(
        "dynamics", "--mechanism", "laplace", "--epsilon", "1", "--agents", "30",
        "--shadow", "20", "--reports-per-agent", "2", "--json", "--out", str(out_file),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["n"] == 30 and d["reports_per_agent"] == 2
    assert d["composed_epsilon"] == 2.0 and d["violation"] is False
    assert json.loads(out_file.read_text())["correct"] == d["correct"]


def test_max_groups_without_run_dir_is_refused_not_ignored(capsys) -> None:
    # s53-attackprobe: `attack dynamics --max-groups 5` (no --run-dir) ran the simulated attack
    # on its 300 agents and exited 0, the option silently ignored
    from ldp_audit.cli import main

    rc = main(["attack", "dynamics", "--max-groups", "5", "--agents", "30", "--shadow", "20"])
    assert rc == 2 and "--max-groups applies only with --run-dir" in capsys.readouterr().err


def test_sweep_too_few_shadows_refused_before_any_simulation(tmp_path, capsys) -> None:
    # s57: `attack sweep --agents 3 --shadow 10` simulated a theta's episodes, then its task
    # failed ("task 1 of 3 ... failed"): the non-private cell's classifier needs >= 40 shadows
    from unittest import mock

    from ldp_audit.cli import main

    out = tmp_path / "sweep"
    with mock.patch("ldp_audit.attacks.sweep.theta_task", side_effect=AssertionError("ran")):
        rc = main(["attack", "sweep", "--agents", "3", "--shadow", "10", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "30 shadow gradients for 3 candidates" in err and "task" not in err, err
    assert not out.exists()
