"""Count the code lines of the toolkit: lines that hold code, without docstrings, comments and
blank lines (the measure of issue 37's goal).

A line counts when it holds a token other than a comment, a newline or an indent, and is not
part of a docstring: any statement that is a bare string (a module, class or function docstring,
and a config field's docstring under the field). A bracketed expression over several lines counts
each of its lines.

Usage: ``python scripts/count_code_lines.py [FOLDER ...]`` (default: ldp_audit training
attacks); prints one line per folder and the total.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ("ldp_audit", "training", "attacks")
_SKIP = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """The number of code lines of one Python source (see the module's docstring)."""
    doc: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            doc.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in _SKIP:
            continue
        lines.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in doc)
    return len(lines)


def count(folder: Path) -> tuple[int, int]:
    """(files, code lines) of every ``*.py`` under ``folder``."""
    files = [f for f in sorted(folder.rglob("*.py")) if "__pycache__" not in f.parts]
    return len(files), sum(code_lines(f.read_text()) for f in files)


def main(argv: list[str]) -> int:
    total = 0
    for name in argv or DEFAULT:
        n_files, n = count(ROOT / name)
        total += n
        print(f"{name}: {n} code lines in {n_files} files")
    print(f"total: {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
