"""docs/architecture.md's layout section is generated from the tree and must not drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_architecture_page_layout_is_current() -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_layout.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr


def test_layout_lists_every_module_of_the_three_parts() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for top in ("ldp_audit", "training", "attacks"):
        for p in (ROOT / top).rglob("*.py"):
            if "__pycache__" in p.parts:
                continue
            rel = p.relative_to(ROOT).as_posix()
            name = rel[: -len("/__init__.py")] + "/" if p.name == "__init__.py" else rel
            assert f"| `{name}` |" in page, name
