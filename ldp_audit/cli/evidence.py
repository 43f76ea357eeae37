"""A run directory as evidence on the command line: ``--expect-head`` / ``--allow-unverified``,
the verification before a command reads ``--run-dir``, and its result in the command's JSON
(shared by ``attack`` and the systems' generated ``attack`` subcommands)."""

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
    )
    banner = unverified_banner(res)
    if banner is not None:
        print(banner, file=sys.stderr if args.json else sys.stdout, flush=True)
    elif not res.authenticated:  # verified, but nothing of it under this machine's key
        why = "; ".join(res.notes)
        print(f"note: the run's evidence is unauthenticated: {why}", file=sys.stderr)
    return res


def with_evidence(d: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    res = getattr(args, "_evidence", None)
    if res is None:
        return d
    return {**d, "verified": res.ok, "verification": res.to_dict()}
