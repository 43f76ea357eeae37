"""Markdown that reads in an editor as well as rendered: prose wrapped at 100 columns.

The committed reproductions' ``README.md`` pages go through :func:`wrap_markdown` last (issue
39: lines ran to 869 characters). Rendered, a wrapped paragraph is the same paragraph (a single
line break is a space in Markdown); in a terminal, a diff or a code review it no longer runs off
the screen. Tables, code blocks, headings, images and HTML are left as they are (a table row
cannot be wrapped); a list item's or block quote's continuation lines keep its indentation or
``>``; a hard line break (two trailing spaces) stays at the end of its paragraph's last line.
:func:`md_table` writes a table's lines (the core report's and the reproduction
READMEs' tables alike).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

__all__ = ["WIDTH", "md_table", "wrap_markdown"]

#: the column prose is wrapped at (the project's line length)
WIDTH = 100

_LIST = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+")
_QUOTE = re.compile(r"^(\s*>\s?)+")
_KEEP = ("|", "#", "<", "![", "```", "~~~")


def _wrap(line: str, width: int) -> list[str]:
    hard = line.endswith("  ")
    body = line.rstrip()
    m = _QUOTE.match(body)
    if m:
        first = rest = m.group(0)
        text = body[len(first) :]
    else:
        lm = _LIST.match(body)
        first = ""
        rest = " " * len(lm.group(0)) if lm else re.match(r"\s*", body).group(0)
        text = body
    out = textwrap.wrap(
        text,
        width=width,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [body]
    if hard:
        out[-1] += "  "
    return out


def _prose_lines(text: str) -> Iterator[tuple[str, bool]]:
    """Each line of ``text`` with whether it is outside code fences (a fence line is not)."""
    fence = False
    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            yield line, False
        else:
            yield line, not fence


def wrap_markdown(text: str, width: int = WIDTH) -> str:
    """``text`` with every prose line longer than ``width`` wrapped (see the module docstring);
    lines that fit, tables, fenced and indented code, headings, images and HTML unchanged."""
    out: list[str] = []
    for line, prose in _prose_lines(text):
        indented_code = line.startswith(("    ", "\t")) and not _LIST.match(line)
        if not prose or len(line) <= width or line.lstrip().startswith(_KEEP) or indented_code:
            out.append(line)
        else:
            out.extend(_wrap(line, width))
    return "\n".join(out)


def md_table(head: Sequence[str], rows: Iterable[Sequence[Any]], cell: Callable = str) -> list[str]:
    """The lines of a Markdown table: ``head``, its rule and one line per row of ``rows``
    (each value written by ``cell``)."""
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]


def count_noun(count: int, noun: str, plural: str | None = None) -> str:
    """``"1 agent"``, ``"1,200 agents"``."""
    return f"{count:,} {noun if count == 1 else (plural or noun + 's')}"
