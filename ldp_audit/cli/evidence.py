"""A run directory as evidence on the command line: ``--expect-head`` / ``--expect-root`` /
``--allow-unverified``, the verification before a command reads ``--run-dir``, its result in the
command's JSON and the exit code of a verdict read from it (shared by ``attack`` and the
systems' generated ``attack`` subcommands)."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def evidence_args(p: argparse.ArgumentParser) -> None:
    """``--expect-head`` and ``--allow-unverified`` for an attack that reads ``--run-dir``."""
    p.add_argument(
        "--expect-head",
        default=None,
        metavar="HEX",
        help="with --run-dir: the run's ledger must pass through this chain head (an anchor "
        "published elsewhere)",
    )
    p.add_argument(
        "--expect-root",
        default=None,
        metavar="HEX",
        help="with --run-dir: the run as a whole (manifest, ledger head, sealed analysis "
        "files) must have this root (printed by `budget RUN --verify` or `report`)",
    )
    p.add_argument(
        "--allow-unverified",
        action="store_true",
        help="with --run-dir: attack a run whose files do not match its manifest, or without "
        "manifest or ledger (refused by default, exit 2); the output then says so first and "
        "in its JSON",
    )


def check_evidence(args: argparse.Namespace) -> Any:
    """Verify ``--run-dir`` against its manifest before it is read (rundir.require_verified);
    unverified and allowed: the banner goes first (stderr with --json)."""
    from ldp_audit.rundir import require_verified, unverified_banner

    res = require_verified(
        args.run_dir,
        expect_head=args.expect_head,
        allow_unverified=args.allow_unverified,
        name="--run-dir",
        expect_root=getattr(args, "expect_root", None),
    )
    banner = unverified_banner(res)  # unverified or unauthenticated: said first
    if banner is not None:
        print(banner, file=sys.stderr if args.json else sys.stdout, flush=True)
    return res


def verdict_code(args: argparse.Namespace, violation: bool) -> int:
    """The exit code of an attack's verdict: 1 on a violation; 4 (``EXIT_UNAUTHENTICATED``)
    when ``--run-dir``'s evidence was read unauthenticated or with ``--allow-unverified``;
    else 0."""
    from ldp_audit.cli import EXIT_OK, EXIT_UNAUTHENTICATED, EXIT_VIOLATION

    if violation:
        return EXIT_VIOLATION
    res = getattr(args, "_evidence", None)
    if res is not None and res.evidence != "authenticated":
        return EXIT_UNAUTHENTICATED
    return EXIT_OK


def with_evidence(d: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    res = getattr(args, "_evidence", None)
    if res is None:
        return d
    return {**d, "verified": res.ok, "verification": res.to_dict()}
