"""Package-level promises: light import, one console script, one error hierarchy."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ldp_audit
from ldp_audit.errors import InvalidParameterError, LdpAuditError


def test_import_needs_only_numpy_and_scipy() -> None:
    code = (
        "import sys, ldp_audit, ldp_audit.mechanisms, ldp_audit.audit, ldp_audit.accountant;"
        "heavy = [m for m in ('torch', 'opacus', 'gymnasium', 'dp_accounting', 'sklearn',"
        " 'matplotlib') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_lazy_exports_resolve() -> None:
    for name in ldp_audit._LAZY:
        assert getattr(ldp_audit, name) is not None
    with pytest.raises(AttributeError):
        ldp_audit.no_such_name  # noqa: B018


def test_error_hierarchy() -> None:
    assert issubclass(InvalidParameterError, LdpAuditError)
    assert issubclass(InvalidParameterError, ValueError)


def test_cli_help_lists_every_subcommand() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ldp_audit.cli", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    for cmd in ("audit", "budget", "train", "reproduce", "attack", "report", "demo"):
        assert cmd in out.stdout


def test_cli_usage_error_exits_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ldp_audit.cli", "no-such-command"], capture_output=True, text=True
    )
    assert out.returncode == 2
