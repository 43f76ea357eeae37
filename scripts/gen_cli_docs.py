"""Generate docs/cli-reference.md from the argparse parsers of ``ldp-audit``.

Walks :func:`ldp_audit.cli.build_parser` and every subparser (at any depth) and writes one
section per command: its description, its usage line and a table of its arguments (flags,
value, help with the defaults the parser shows). ``make docs`` runs it before ``mkdocs build``;
tests/test_docs.py checks that the committed page covers every command and option.

Usage::

    python scripts/gen_cli_docs.py [--out docs/cli-reference.md] [--check]

``--check`` writes nothing and exits 1 when the committed page differs from what the parsers
give now.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "cli-reference.md"

HEADER = """# CLI reference

Generated from the argparse parsers by `python scripts/gen_cli_docs.py` (run by `make docs`);
do not edit by hand. `ldp-audit COMMAND -h` prints the same text in a terminal. Exit codes:
0 ok / no violation, 1 violation found, 2 usage or input error, 3 internal error,
130 interrupted.
"""


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Yield (command path, parser, one-line help) for the parser and every subparser."""
    yield path, parser, ""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: (a.help or "") for a in action._choices_actions}
            for name, sub in action.choices.items():
                for p, sp, h in walk(sub, (*path, name)):
                    yield p, sp, h if p != (*path, name) else helps.get(name, "")


def _cell(text: str) -> str:
    """Help text in a table cell: one line, '|' escaped, and a '<' that opens a tag as an entity
    (a placeholder such as runs/demo-<timestamp> is otherwise an HTML tag, shown as nothing)."""
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", " ".join(str(text).split()).replace("|", "\\|"))


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.help in (None, argparse.SUPPRESS):
        return ""
    try:
        return parser._get_formatter()._expand_help(action)
    except (KeyError, TypeError, ValueError):
        return str(action.help)


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return "{" + ",".join(map(str, action.choices)) + "}"
    if action.metavar is not None:
        return (
            str(action.metavar)
            if not isinstance(action.metavar, tuple)
            else " ".join(action.metavar)
        )
    return action.dest.upper() if action.option_strings else action.dest


def section(path: tuple[str, ...], parser: argparse.ArgumentParser, short: str) -> str:
    name = " ".join(("ldp-audit", *path))
    level = "#" * min(2 + max(len(path) - 1, 0), 4)
    out = [f"{level} `{name}`", ""]
    desc = parser.description or short
    if desc:
        out += [" ".join(desc.split()), ""]
    out += ["```text", parser.format_usage().strip(), "```", ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                rows.append((f"`{choice.dest}`", "command", _cell(choice.help or "")))
            continue
        flags = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.dest}`"
        rows.append(
            (flags, f"`{_value(action)}`" if _value(action) else "", _cell(_help(parser, action)))
        )
    if rows:
        out += ["| argument | value | help |", "|---|---|---|"]
        out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
        out.append("")
    if parser.epilog:
        out += [" ".join(parser.epilog.split()), ""]
    return "\n".join(out)


def render() -> str:
    """The whole page, deterministic (fixed terminal width)."""
    os.environ["COLUMNS"] = "100"
    sys.path.insert(0, str(ROOT))
    from ldp_audit.cli import build_parser

    parser = build_parser()
    parser.prog = "ldp-audit"
    parts = [HEADER]
    for path, p, short in walk(parser):
        parts.append(section(path, p, short))
    return "\n".join(parts).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output Markdown file")
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 if stale")
    args = ap.parse_args(argv)
    text = render()
    out = Path(args.out)
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out} is stale: run python scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    print(f"wrote {out} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
