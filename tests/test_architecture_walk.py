"""The walk of one release in docs/architecture.md ("One release, from environment to report")
names its steps as `path.py: name` pairs; every pair must still exist (the file, and the name
defined in it, read with ast), so a rename or a move cannot leave the walk stale silently."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
_PAIR = re.compile(r"`((?:ldp_audit|training|attacks)/[A-Za-z0-9_/]+\.py):\s+([A-Za-z_][\w.]*)`")


def walk_text() -> str:
    """The section "One release, from environment to report", up to the next ``## `` heading."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## One release, from environment to report")
    end = text.find("\n## ", start + 3)
    return text[start : None if end < 0 else end]


def pairs(text: str) -> list[tuple[str, str]]:
    """The ``(path, name)`` of every `path.py: name` in ``text``, in order."""
    return [(m.group(1), m.group(2)) for m in _PAIR.finditer(text)]


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a module or class body defines: functions, classes, assigned names."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


@cache
def _module(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text(encoding="utf-8"), filename=path)


def defined(path: str, dotted: str) -> bool:
    """Whether ``dotted`` (``f``, ``Class``, ``Class.method``) is defined in the file ``path``."""
    body: list[ast.stmt] = _module(path).body
    node: ast.AST | None = None
    for part in dotted.split("."):
        node = _names(body).get(part)
        if node is None:
            return False
        body = node.body if isinstance(node, ast.ClassDef) else []
    return True


def test_the_walk_names_every_stage() -> None:
    found = pairs(walk_text())
    assert len(found) >= 40, found
    files = {p for p, _ in found}
    for where in (
        "training/pgc_a3c/engine.py",
        "training/pgc_a3c/privacy.py",
        "ldp_audit/release.py",
        "ldp_audit/accountant/ledger.py",
        "ldp_audit/rundir/writer.py",
        "ldp_audit/rundir/reader.py",
        "ldp_audit/audit/api.py",
        "ldp_audit/report/__init__.py",
        "training/dprl/privacy.py",
        "training/fedrl/exchange.py",
        "training/frd/engine.py",
    ):
        assert where in files, f"the walk no longer names {where}"
    assert any(p.startswith("attacks/") for p in files)


def test_every_pair_of_the_walk_exists() -> None:
    stale = []
    for path, name in pairs(walk_text()):
        if not (ROOT / path).is_file():
            stale.append(f"{path} (no such file)")
        elif not defined(path, name):
            stale.append(f"{path}: {name} (not defined there)")
    assert not stale, "docs/architecture.md's walk names what is not there:\n" + "\n".join(stale)


def test_the_check_catches_a_stale_pair() -> None:
    text = (
        "`ldp_audit/release.py: release_many` `ldp_audit/release.py: SealedRelease.values` "
        "`ldp_audit/release.py: release_everything` `ldp_audit/release.py: SealedRelease.nope`"
    )
    got = pairs(text)
    assert got == [
        ("ldp_audit/release.py", "release_many"),
        ("ldp_audit/release.py", "SealedRelease.values"),
        ("ldp_audit/release.py", "release_everything"),
        ("ldp_audit/release.py", "SealedRelease.nope"),
    ]
    assert [defined(p, n) for p, n in got] == [True, True, False, False]
    # a module-level function is not a method, nor the other way round
    assert not defined("training/pgc_a3c/engine.py", "Engine.receive")
    assert not defined("training/pgc_a3c/aggregator.py", "receive")
    assert defined("training/pgc_a3c/aggregator.py", "Aggregator.receive")
