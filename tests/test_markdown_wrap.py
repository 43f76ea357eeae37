"""Generated reproduction READMEs wrap their prose at 100 columns (issue 39: lines ran to 869
characters) without changing what they render to; ``unwrap_markdown`` joins them back."""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest

from ldp_audit.report.markdown import WIDTH, wrap_markdown
from tests.markdown_unwrap import unwrap_markdown

REPO = Path(__file__).resolve().parent.parent

PARA = " ".join(["word"] * 60) + " with `an inline code span` and [a link](https://example.org/x)"
ITEM = "- **Label:** " + " ".join(["value"] * 40)
QUOTE = "> " + " ".join(["quoted"] * 30)
TABLE = "| a | " + " ".join(["cell"] * 40) + " |\n|---|---|\n| 1 | 2 |"
CODE = "```\n" + " ".join(["code"] * 40) + "\n```"
SAMPLE = "\n\n".join(["# Title", PARA + "  \nafter a hard break", ITEM + "\n- second", QUOTE,
                      TABLE, CODE, "## " + " ".join(["h"] * 60)])  # fmt: skip


def _html(md: str) -> str:
    html = markdown.markdown(md, extensions=["tables", "fenced_code"])
    return re.sub(r"\s+", " ", html)


def test_prose_is_wrapped_and_renders_the_same() -> None:
    out = wrap_markdown(SAMPLE)
    assert out != SAMPLE
    for line in out.split("\n"):
        if not line.startswith(("|", "#")) and "code code" not in line:
            assert len(line.rstrip()) <= WIDTH, line
    assert _html(out) == _html(SAMPLE)  # a wrapped paragraph is the same paragraph
    assert TABLE in out and CODE in out  # what cannot be wrapped is left alone
    assert "  \nafter a hard break" in out  # the hard break stays at its line's end
    # unwrapping gives one line per paragraph / item again
    assert PARA + "  " in unwrap_markdown(out).split("\n")
    assert ITEM in unwrap_markdown(out).split("\n")


@pytest.mark.parametrize("text", ["", "short line", "a\n\nb", "x" * 300])
def test_lines_that_fit_or_cannot_break_are_unchanged(text: str) -> None:
    assert wrap_markdown(text) == text


def test_every_committed_reproduction_page_wraps_its_prose() -> None:
    for page in REPO.glob("reports/*/README.md"):
        text = page.read_text()
        assert wrap_markdown(text) == text, page
