"""Rebuild the committed paper-reproduction reports from their committed results.json.

Each report folder under ``reports/`` (``pgc-a3c``, ``pgc-a3c-sample``, ``pgc-a3c-readings``,
``dprl``, ``frd``, ``fedrl``, ``fedrl-16``) holds the results.json its ``ldp-audit reproduce``
wrote, a hand-written ``notes.md`` and generated pages. :func:`render` returns the pages today's
writers make of that results.json (and notes.md, where the writer appends it) without rerunning
anything and without redrawing figures (the figures depend only on results a rebuild does not
change); :func:`rebuild` writes them; ``--check`` says which committed page differs.

Command (from the repository root)::

    python -m ldp_audit.training.committed_reports            # rewrite every report's pages
    python -m ldp_audit.training.committed_reports --check    # exit 1 if a page is stale
    python -m ldp_audit.training.committed_reports reports/frd
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.reproduction import notes_of, read_results
from ldp_audit.training.reproduction_statement import system_of

__all__ = ["COMMITTED", "render", "rebuild", "main"]

#: the committed reproduction reports, relative to the repository root
COMMITTED = (
    "reports/pgc-a3c",
    "reports/pgc-a3c-sample",
    "reports/pgc-a3c-readings",
    "reports/dprl",
    "reports/frd",
    "reports/fedrl",
    "reports/fedrl-16",
)


#: the module whose ``pages(results, notes)`` makes each system's pages (its writer calls it too)
PAGES = {
    "pgc-a3c": "pgc_a3c.reproduce_report",
    "pgc-a3c-readings": "pgc_a3c.readings",
    "dprl": "dprl.reproduce_report",
    "frd": "frd.reproduce",
    "fedrl": "fedrl.reproduce_report",
}


def render(folder: str | Path) -> dict[str, str]:
    """The generated pages (file name -> text) of the report in ``folder``, as today's writer
    makes them from the folder's results.json (and notes.md)."""
    res = read_results(folder)
    writer = importlib.import_module(f"ldp_audit.training.{PAGES[system_of(res)]}")
    return writer.pages(res, notes_of(folder))


def rebuild(folder: str | Path, *, check: bool = False) -> list[str]:
    """Write (or with ``check``, only compare) the pages of ``folder``; returns the paths of
    the pages that differed from what was on disk."""
    folder = Path(folder)
    stale = []
    for name, text in render(folder).items():
        p = folder / name
        if not p.is_file() or p.read_text() != text:
            stale.append(str(p))
            if not check:
                p.write_text(text)
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ldp_audit.training.committed_reports",
        description="Rewrite the committed reproduction reports' README.md (and tables.md) "
        "from their results.json and notes.md; nothing is rerun, no figure redrawn.",
    )
    ap.add_argument("folders", nargs="*", help=f"report folders (default: {' '.join(COMMITTED)})")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    a = ap.parse_args(argv)
    try:
        stale = [p for f in (a.folders or COMMITTED) for p in rebuild(f, check=a.check)]
    except (InvalidParameterError, OSError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for p in stale:
        print(f"{'stale' if a.check else 'rewrote'}: {p}")
    if not stale:
        print("every page is what its writer makes of its results.json")
    return 1 if a.check and stale else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
