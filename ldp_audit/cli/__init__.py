"""The ``ldp-audit`` command.

Each subcommand lives in its own module with ``register(subparsers)``; the module's parser sets
``func`` (``args -> exit code``). Library code never prints; these modules do.
Exit codes: 0 success / no violation, 1 violation found, 2 usage error.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ldp_audit.errors import LdpAuditError

# subcommand module -> registers one or more subcommands
_MODULES = (
    "ldp_audit.cli.audit_cmd",  # audit
    "ldp_audit.cli.budget_cmd",  # budget
    "ldp_audit.cli.train_cmd",  # train, reproduce
    "ldp_audit.cli.attack_cmd",  # attack
    "ldp_audit.cli.report_cmd",  # report, demo
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ldp-audit",
        description="Audit, attack and account the privacy of locally private distributed RL.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except LdpAuditError as exc:
        print(f"ldp-audit: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
