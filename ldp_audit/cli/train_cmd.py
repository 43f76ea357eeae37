"""``ldp-audit train NAME`` and ``ldp-audit reproduce NAME``: one subcommand per registered
system (:mod:`ldp_audit.systems`), generated from its ``SystemSpec`` by
:mod:`ldp_audit.cli.system_cmd`; and ``ldp-audit reproduce check``, a rerun against a committed
report's intervals. Progress bars go to stderr; ``--json`` prints JSON on stdout.
"""

from __future__ import annotations

import argparse
from typing import Any

from ldp_audit.cli.types import add_flags
from ldp_audit.errors import InvalidParameterError


def register(subparsers: Any, argv: list[str] | None = None) -> None:
    """Add the ``train`` and ``reproduce`` subcommands (given the command line ``argv``, only
    the system it names where that system registers the word: see ``register_systems``)."""
    train = subparsers.add_parser(
        "train", help="train a system (local DP: pgc-a3c, fedrl, frd; central DP-SGD: dprl)"
    )
    tsub = train.add_subparsers(dest="algorithm", metavar="ALGORITHM")
    tsub.required = True
    rep = subparsers.add_parser("reproduce", help="reproduce a paper's tables and figures")
    rsub = rep.add_subparsers(dest="target", metavar="TARGET")
    rsub.required = True
    # every registered system (ldp_audit.systems): its own CLI hook, or the generic one
    from ldp_audit.cli.system_cmd import register_systems

    register_systems(tsub, rsub, only=argv[1] if argv and len(argv) > 1 else None)
    _register_check(rsub)


def _register_check(rsub: Any) -> None:
    """``reproduce check RERUN COMMITTED``: a rerun against a committed report's intervals."""
    c = rsub.add_parser(
        "check",
        help="compare a rerun of a reproduction with a committed report, cell by cell, against "
        "the committed 95%% intervals (exit 1 when a cell differs)",
    )
    c.add_argument("rerun", help="the rerun's report folder (or its results.json)")
    c.add_argument("committed", help="the committed report folder, e.g. reports/fedrl")
    add_flags(
        c,
        all="list every cell (default: only the cells not inside the committed interval)",
        json="print the check as JSON (default: text)",
        any_scale="compare even when the rerun's horizon / training steps differ (no verdict then)",
    )
    c.set_defaults(func=_reproduce_check)


def _reproduce_check(args: argparse.Namespace) -> int:
    import json

    from ldp_audit.training.reproduction_check import check_folders, format_check

    try:
        result = check_folders(args.rerun, args.committed, any_scale=args.any_scale)
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidParameterError(f"reproduce check: {exc}") from None
    print(json.dumps(result, indent=1) if args.json else format_check(result, all_cells=args.all))
    return 0 if result["consistent"] else 1
