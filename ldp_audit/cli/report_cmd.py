"""``ldp-audit report RUN_DIR [-o OUT_DIR]`` and ``ldp-audit demo [--out DIR] [--seed S]``.

``report`` turns a run directory into index.html (self-contained), report.md and report.json.
``demo`` trains, audits, attacks and reports end to end on embedded defaults and prints where
index.html is. Progress goes to stderr; ``--json`` prints the paths as JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ldp_audit.cli._types import int_at_least

_seed = int_at_least("seed", 0)
_top = int_at_least("top", 1)


def register(subparsers: Any) -> None:
    """Add the ``report`` and ``demo`` subcommands."""
    p = subparsers.add_parser(
        "report",
        help="write a privacy report (HTML, Markdown, JSON) from a run directory",
        description="Write index.html (self-contained), report.md and report.json from what a "
        "run left behind: ledger, audits, attacks, learning curves and a plain-language verdict.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (docs/interfaces.md)")
    p.add_argument(
        "-o", "--out", dest="out_dir", default=None, help="output folder (default RUN_DIR/report)"
    )
    p.add_argument("--top", type=_top, default=10, help="rows in the top-agents table")
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    p.add_argument(
        "--screenshot", action="store_true", help="also save screenshot.png (needs chromium)"
    )
    p.set_defaults(func=_report)

    d = subparsers.add_parser(
        "demo",
        help="train, audit, attack and report end to end on embedded defaults",
        description="A short PGC-A3C run (Laplace, eps = 5, a few agents) with its SQLite ledger, "
        "an audit of its mechanism, a dynamics attack on its transcript, and the report.",
    )
    d.add_argument("--out", default="runs/demo", help="run directory (default runs/demo)")
    d.add_argument("--seed", type=_seed, default=0)
    d.add_argument("--report-dir", default=None, help="where the report goes (default OUT/report)")
    d.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    d.add_argument("--json", action="store_true", help="print the written paths as JSON")
    d.add_argument(
        "--screenshot", action="store_true", help="also save screenshot.png (needs chromium)"
    )
    d.set_defaults(func=_demo)


def _screenshot(paths: dict[str, Path]) -> None:
    from ldp_audit.report.browser import screenshot

    paths["screenshot"] = screenshot(paths["html"], paths["html"].parent / "screenshot.png")


def _paths_json(paths: dict[str, Path], **extra: Any) -> str:
    return json.dumps({**{k: str(v) for k, v in paths.items()}, **extra}, indent=2)


def _report(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from ldp_audit.report import build_report

    def progress(it: Any) -> Any:
        return tqdm(it, desc="ledger agents", unit="agent", file=sys.stderr, leave=False)

    report = build_report(args.run_dir, top=args.top, progress=progress)
    out = Path(args.run_dir) / "report" if args.out_dir is None else Path(args.out_dir)
    paths = report.write(out)
    if args.screenshot:
        _screenshot(paths)
    verdict = report.model["verdict"]
    if args.json:
        print(_paths_json(paths, verdict=verdict["status"]))
    else:
        print(f"verdict: {verdict['status'].upper()}. {verdict['headline']}")
        print(
            f"report written: {paths['html']} (also {paths['markdown'].name}, {paths['json'].name})"
        )
    return 1 if verdict["status"] == "violation" else 0


def _demo(args: argparse.Namespace) -> int:
    from ldp_audit.demo import run_demo

    res = run_demo(
        args.out, seed=args.seed, report_dir=args.report_dir, progress=not args.no_progress
    )
    if args.screenshot:
        _screenshot(res.report)
    if args.json:
        print(_paths_json(res.report, run_dir=res.run_dir, seconds=res.seconds))
    else:
        secs = ", ".join(f"{k} {v:.1f} s" for k, v in res.seconds.items())
        print(f"demo run directory: {res.run_dir} ({secs})")
        print(f"open the report: {res.report['html'].resolve()}")
    return 0
