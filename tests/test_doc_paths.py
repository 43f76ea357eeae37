"""Every repository path the README and the docs name in backticks exists (a module that moved,
a renamed benchmark or a deleted report leaves no dangling reference)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("ldp_audit", "training", "attacks", "benchmarks", "scripts", "tests", "reports", "examples")
_PATH = re.compile(r"`((?:" + "|".join(TOPS) + r")/[A-Za-z0-9_./-]*)(?:::[A-Za-z0-9_\[\]-]+)?`")
#: a Gymnasium environment id (``ldp_audit/FedRLGridWorld-v0``) is not a path
_ENV_ID = re.compile(r"^[A-Za-z_]+/[A-Za-z0-9_]+-v\d+$")


def on_disk(path: str) -> Path:
    """The repository file of a path as the docs name it: ``ldp_audit/training/x.py`` and
    ``ldp_audit/attacks/x.py`` are the installed names of ``training/x.py`` and ``attacks/x.py``."""
    for pkg in ("training", "attacks"):
        if path.startswith(f"ldp_audit/{pkg}/"):
            path = path[len("ldp_audit/") :]
    return ROOT / path.rstrip("/")


#: generated pages (their paths are checked where they come from)
GENERATED = {"docs/cli-reference.md"}


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if p.relative_to(ROOT).as_posix() not in GENERATED]


def named_paths() -> dict[str, set[str]]:
    """path -> the pages that name it."""
    out: dict[str, set[str]] = {}
    for page in _pages():
        for m in _PATH.finditer(page.read_text(encoding="utf-8")):
            if _ENV_ID.match(m.group(1)):
                continue
            out.setdefault(m.group(1), set()).add(page.relative_to(ROOT).as_posix())
    return out


def test_the_extraction_sees_paths() -> None:
    found = named_paths()
    assert "ldp_audit/stats.py" in found and len(found) > 100


def test_every_named_path_exists() -> None:
    missing = [
        f"{path} (named in {', '.join(sorted(pages))})"
        for path, pages in sorted(named_paths().items())
        if not on_disk(path).exists()
    ]
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)
