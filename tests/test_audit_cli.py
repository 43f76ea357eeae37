"""Tests of ``ldp-audit audit`` (ldp_audit.cli.audit_cmd).

Correct mechanisms are audited at confidence 1 - 1e-7 (false failure <= 1e-7 by the auditor's
guarantee); broken ones have margins of many standard errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

import pytest

from ldp_audit.cli import audit_cmd
from ldp_audit.errors import LdpAuditError


def run_cli(argv: list[str]) -> int:
    """Mirror ldp_audit.cli.main with only the audit subcommand registered."""
    parser = argparse.ArgumentParser(prog="ldp-audit")
    sub = parser.add_subparsers(dest="command")
    audit_cmd.register(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LdpAuditError as exc:
        print(f"ldp-audit: error: {exc}", file=sys.stderr)
        return 2


STRICT = ["--confidence", "0.9999999"]


def test_rr_no_violation_json(capsys):
    code = run_cli(
        ["audit", "--mechanism", "rr", "--epsilon", "1", "--samples", "50000", "--json", "--exact"]
        + STRICT
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["violation"] is False
    assert out["claimed_epsilon"] == 1.0 and 0.5 < out["epsilon_lower_bound"] <= 1.0
    assert out["exact_epsilon"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--mechanism", "prs", "--epsilon", "1", "--reduced-dim", "1", "--dim", "2"],
        ["--mechanism", "bitflip", "--epsilon", "1", "--dim", "2"],
        ["--mechanism", "gaussian", "--epsilon", "2", "--dim", "2", "--no-float-bits"],
        ["--mechanism", "laplace", "--epsilon", "1", "--no-float-bits"],
    ],
    ids=["prs", "bitflip", "gaussian", "laplace"],
)
def test_builtins_no_violation(argv, capsys):
    code = run_cli(["audit", *argv, "--samples", "30000", "--seed", "3", *STRICT])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "proves nothing" in text


def test_float_laplace_flagged_exit_1(capsys):
    code = run_cli(["audit", "--mechanism", "laplace", "--epsilon", "1", "--samples", "50000"])
    captured = capsys.readouterr()
    assert code == 1 and "VIOLATION" in captured.out
    assert "float bit cells" in captured.out


def test_user_module_mechanism_and_pairs(tmp_path, monkeypatch, capsys):
    (tmp_path / "my_mech_for_cli.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            class Broken:
                epsilon = 0.5
                def privatize(self, x, rng):
                    return x + rng.laplace(0.0, 0.5, size=x.shape)  # true epsilon 2

            def make():
                return Broken()

            PAIRS = [(np.zeros(1), np.ones(1))]
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    argv = ["audit", "--mechanism", "my_mech_for_cli:make", "--pairs", "my_mech_for_cli:PAIRS"]
    code = run_cli([*argv, "--samples", "50000", "--no-float-bits", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["violation"] is True and out["epsilon_lower_bound"] > 1.0
    # the class itself also works (instantiated with no arguments)
    code = run_cli(["audit", "--mechanism", "my_mech_for_cli:Broken", "--pairs",
                    "my_mech_for_cli:PAIRS", "--samples", "20000", "--no-float-bits"])  # fmt: skip
    assert code == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mechanism", "laplace"], "--epsilon is required"),
        (["--mechanism", "no_such_module_xyz:M"], "cannot import"),
        (["--mechanism", "json:NoSuchAttr"], "no attribute"),
        (["--mechanism", "nocolon"], "MODULE:ATTR"),
        (["--mechanism", "json:dumps", "--samples", "5000"], "zero-argument factory"),
        (["--mechanism", "json:decoder", "--samples", "5000"], "mechanism must have"),
    ],
)
def test_usage_errors_exit_2(argv, message, capsys):
    assert run_cli(["audit", *argv]) == 2
    assert message in capsys.readouterr().err


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        run_cli(["audit", "--mechanism", "rr", "--epsilon", "-1"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        run_cli(["audit", "--mechanism", "rr", "--epsilon", "1", "--confidence", "1.5"])
    assert exc.value.code == 2
