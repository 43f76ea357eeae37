"""A run directory as evidence on the command line: ``--expect-head`` / ``--expect-root`` /
``--allow-unverified``, the verification before a command reads ``--run-dir``, its result in the
command's JSON and the exit code of a verdict read from it (shared by ``attack`` and the
systems' generated ``attack`` subcommands)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ldp_audit.cli.types import add_flags
from ldp_audit.errors import InvalidParameterError


def evidence_args(
    p: argparse.ArgumentParser,
    when: str = "with --run-dir: ",
    allow: str = "with --run-dir: attack a run whose files do not match its manifest, or without "
    "manifest or ledger (refused by default, exit 2); the output then says so first and in its "
    "JSON",
    root_when: str | None = None,
) -> None:
    """``--expect-head``, ``--expect-root`` and ``--allow-unverified`` for a command that reads
    a run (``--run-dir`` of an attack or audit, ``report``, ``budget --verify``): ``when`` says
    when they apply (``root_when`` for ``--expect-root``, default ``when``), ``allow`` what
    ``--allow-unverified`` does."""
    p.add_argument(
        "--expect-head",
        metavar="HEX",
        type=_hex64("--expect-head", "chain head"),
        help=f"{when}the ledger must pass through this chain head (an anchor published elsewhere)",
    )
    p.add_argument(
        "--expect-root",
        metavar="HEX",
        type=_hex64("--expect-root", "run root"),
        help=f"{when if root_when is None else root_when}the run as a whole (manifest, ledger "
        "head, sealed analysis files) must have this root (printed by `budget RUN --verify` or "
        "`report`)",
    )
    add_flags(p, allow_unverified=allow)


def _hex64(name: str, what: str) -> Any:
    """A converter refusing anything but 64 hex digits under the option's own name (the
    library's check named ``expect_root``, after the run was read)."""
    from ldp_audit.rundir.files import check_hex64

    def convert(text: str) -> str | None:
        try:
            return check_hex64(text, name, what)
        except InvalidParameterError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def run_dir_only(args: argparse.Namespace, dests: tuple[str, ...], why: str) -> None:
    """Refuse the options (``dests``) that mean something only with ``--run-dir`` when it is
    not given, instead of ignoring them."""
    given = [d for d in dests if getattr(args, d, None) not in (None, False)]
    if given and args.run_dir is None:
        opts = ", ".join(f"--{d}".replace("_", "-") for d in given)
        raise InvalidParameterError(f"{opts} applies {why}")


def check_evidence(args: argparse.Namespace, name: str = "--run-dir", more: Any = None) -> Any:
    """Verify ``--run-dir`` (``name``) against its manifest before it is read
    (rundir.require_verified), then ``more(args)``: the problems of further evidence (report's
    EXTRA analyses), kept as ``args.unsealed``; unverified and allowed, the banner goes first
    (stderr with --json)."""
    from ldp_audit.rundir.verify import require_verified, unverified_banner

    res = require_verified(
        args.run_dir,
        expect_head=args.expect_head,
        allow_unverified=args.allow_unverified,
        name=name,
        expect_root=getattr(args, "expect_root", None),
    )
    args.unsealed = more(args) if more is not None else []
    banner = unverified_banner(res)  # unverified or unauthenticated: said first
    if banner is None and args.unsealed:
        banner = f"UNVERIFIED EVIDENCE (read with --allow-unverified): {args.unsealed[0]}"
    if banner is not None:
        print(banner, file=sys.stderr if args.json else sys.stdout, flush=True)
    return res


def exit_code(violation: bool, authenticated: bool) -> int:
    """1 on a violation; else 0 for authenticated evidence, 4 (``EXIT_UNAUTHENTICATED``) for
    evidence read unauthenticated or with ``--allow-unverified``."""
    from ldp_audit.cli import EXIT_OK, EXIT_UNAUTHENTICATED, EXIT_VIOLATION

    return EXIT_VIOLATION if violation else EXIT_OK if authenticated else EXIT_UNAUTHENTICATED


def verdict_code(args: argparse.Namespace, violation: bool) -> int:
    """The exit code of an attack's verdict (:func:`exit_code` of ``--run-dir``'s evidence;
    authenticated when no run was read)."""
    res = getattr(args, "_evidence", None)
    return exit_code(violation, res is None or res.evidence == "authenticated")


def with_evidence(d: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    res = getattr(args, "_evidence", None)
    if res is None:
        return d
    return {**d, "verified": res.ok, "verification": res.to_dict()}
