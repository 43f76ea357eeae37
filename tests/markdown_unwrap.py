"""Test helper: :func:`unwrap_markdown`, the inverse of
:func:`ldp_audit.report.markdown.wrap_markdown` for reading a wrapped page line by line (the
tests of the generated READMEs read one statement item or command per line)."""

from __future__ import annotations

from ldp_audit.report.markdown import _KEEP, _LIST, _QUOTE, _prose_lines


def unwrap_markdown(text: str) -> str:
    """Join every line that continues the paragraph, list item or quote above it (the inverse
    of :func:`wrap_markdown` for reading; hand-wrapped prose is joined too). A hard break, a
    blank line, a new list item, a heading, a table or a fence starts a new line."""
    out: list[str] = []
    for line, prose in _prose_lines(text):
        stripped = line.strip()
        prev = out[-1] if out else ""
        joinable = (
            prose
            and stripped
            and prev.strip()
            and not prev.endswith("  ")
            and not prev.lstrip().startswith(_KEEP)
            and not stripped.startswith(_KEEP)
            and not _LIST.match(line)
        )
        if joinable:
            q = _QUOTE.match(line)
            piece = (line[len(q.group(0)) :] if q else line).lstrip()  # a hard break stays
            out[-1] = prev.rstrip() + " " + piece
        else:
            out.append(line)
    return "\n".join(out)
