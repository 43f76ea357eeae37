"""Fail on a NEW import of another part's private name (``make lint``; a ratchet).

The code has three parts (docs/design: arrows point inward, no part reaches into another's
private names): the core ``ldp_audit/`` (less its two installed subpackages), ``training/``
(installed as ``ldp_audit.training``) and ``attacks/`` (``ldp_audit.attacks``). A file of one
part may not use a private name (``_name``, not ``__dunder__``) of another part's module::

    from ldp_audit.backends import _Sink          # training -> core: private
    from ldp_audit.training import fedrl as F
    F._metrics(...)                               # attacks -> training: private
    from ldp_audit.training._kernels import f     # a private module of another part

Today's violations are listed in ``scripts/private_imports_allowlist.txt`` (one
``FILE MODULE.NAME`` per line). A violation not in the list fails; a listed one that is gone
fails too, until it is removed from the list (so the list only shrinks). ``--update`` rewrites
the list from the tree (for a deliberate change, reviewed in the diff).

A second ratchet, ``scripts/private_imports_same_part_allowlist.txt``, lists the private names
(not private modules: ``_kernels`` is a part's own business) that a module imports from ANOTHER
module of its own part (``from ldp_audit.training.dprl import _fmt`` in ``dprl_report.py``): the
list only shrinks too, so a split module's rooms talk through public names.

A third check has no list: no file of the three parts uses a private name of a third-party
package (Opacus included), imported
(``from opacus.optimizers.optimizer import _generate_noise``), through a private module
(``from torch._C import x``), as an attribute of an imported name (``opacus._x``, ``np._y``) or
inherited: a subclass of a third-party class using a private name it does not define
(``self._get_flat_grad_sample(p)`` in a ``DPOptimizer`` subclass).
The standard library is left out (``sys._getframe`` and ``os._exit`` are documented API);
``tests/`` and ``benchmarks/`` are not scanned (their diffprivlib shim patches
``sklearn.tree._tree`` on purpose, docs/audit.md).

Usage: ``python scripts/check_private_imports.py [--update]``; exit 0 clean, 1 otherwise.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "scripts" / "private_imports_allowlist.txt"
SAME_PART_ALLOWLIST = ROOT / "scripts" / "private_imports_same_part_allowlist.txt"
#: source folder -> (part, the import name of the folder)
PARTS = {"ldp_audit": "ldp_audit", "training": "ldp_audit.training", "attacks": "ldp_audit.attacks"}


def _attribute_chain(node: ast.Attribute) -> tuple[str | None, list[str]]:
    """``a.b.c`` -> ("a", ["b", "c"]); the root is None when it is not a plain name."""
    chain: list[str] = [node.attr]
    v = node.value
    while isinstance(v, ast.Attribute):
        chain.append(v.attr)
        v = v.value
    return (v.id if isinstance(v, ast.Name) else None), list(reversed(chain))


def part_of_module(name: str) -> str | None:
    """The part an imported module belongs to (None: not ours)."""
    if name == "ldp_audit.training" or name.startswith("ldp_audit.training."):
        return "training"
    if name == "ldp_audit.attacks" or name.startswith("ldp_audit.attacks."):
        return "attacks"
    if name == "ldp_audit" or name.startswith("ldp_audit."):
        return "ldp_audit"
    return None


def module_file(name: str) -> Path | None:
    """The source file or package of an importable module of ours (None: not a module)."""
    part = part_of_module(name)
    if part is None:
        return None
    rel = name[len(PARTS[part]) :].lstrip(".")
    base = ROOT / part / Path(*rel.split(".")) if rel else ROOT / part
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve_from(node: ast.ImportFrom, here: str) -> str:
    if not node.level:
        return node.module or ""
    pkg = here.split(".")[: -node.level]
    return ".".join([*pkg, node.module] if node.module else pkg)


def violations_of(path: Path, *, same_part: bool = False) -> list[str]:
    """``MODULE.NAME`` of every other part's private name ``path`` uses; with ``same_part``,
    of every private name (not a private module) of another module of its own part."""
    folder = path.relative_to(ROOT).parts[0]
    here_part = folder
    rel = path.relative_to(ROOT / folder).with_suffix("")
    here = ".".join([PARTS[folder], *[p for p in rel.parts if p != "__init__"]])
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    aliases: dict[str, str] = {}  # local name -> module of another part

    def other_part(mod: str) -> bool:
        p = part_of_module(mod)
        return p is not None and p != here_part

    def sibling(mod: str) -> bool:  # another module of this file's own part
        return part_of_module(mod) == here_part and mod != here

    foreign = sibling if same_part else other_part

    def flagged(mod: str, name: str) -> bool:  # a private module is a part's own business
        return _private(name) and not (same_part and module_file(f"{mod}.{name}") is not None)

    attrs: list[ast.Attribute] = []
    for node in ast.walk(tree):  # one walk: imports now, private attribute uses for later
        if isinstance(node, ast.Attribute):
            if _private(node.attr):
                attrs.append(node)
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve_from(node, here)
            if not foreign(mod):
                continue
            for i, part in enumerate(mod.split(".")):
                if _private(part) and not same_part:
                    found.add(".".join(mod.split(".")[: i + 1]))
                    break
            for a in node.names:
                if flagged(mod, a.name):
                    found.add(f"{mod}.{a.name}")
                elif module_file(f"{mod}.{a.name}") is not None:
                    aliases[a.asname or a.name] = f"{mod}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if not foreign(a.name):
                    continue
                parts = a.name.split(".")
                for i, part in enumerate(parts):
                    if _private(part) and not same_part:
                        found.add(".".join(parts[: i + 1]))
                        break
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases.setdefault(parts[0], parts[0])
    for node in attrs:  # ``alias.mod._name``: the private name is the outermost attribute
        root, attrs_in_order = _attribute_chain(node)
        if root not in aliases:
            continue
        names = [aliases[root], *attrs_in_order]
        mod = names[0]
        for name in names[1:]:
            if not foreign(mod):
                break
            if flagged(mod, name):
                found.add(f"{mod}.{name}")
                break
            nxt = f"{mod}.{name}"
            if module_file(nxt) is None:
                break
            mod = nxt
    return sorted(found)


#: folders whose files may not use a third-party private name (no allowlist)
THIRD_PARTY_FOLDERS = tuple(PARTS)


def _third_party(mod: str) -> bool:
    top = mod.split(".")[0]
    return (
        bool(top)
        and top != "__future__"
        and part_of_module(mod) is None
        and (top not in sys.stdlib_module_names)
    )


def third_party_violations_of(path: Path) -> list[str]:
    """``MODULE.NAME`` of every private name of a third-party package ``path`` uses: imported,
    through a private module, or as an attribute of an imported name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    aliases: dict[str, str] = {}  # local name -> its third-party dotted name

    def private_module(mod: str) -> str | None:
        parts = mod.split(".")
        for i, part in enumerate(parts):
            if _private(part):
                return ".".join(parts[: i + 1])
        return None

    attrs: list[ast.Attribute] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if _private(node.attr):
                attrs.append(node)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            mod = node.module or ""
            if not _third_party(mod):
                continue
            bad = private_module(mod)
            if bad:
                found.add(bad)
            for a in node.names:
                if _private(a.name):
                    found.add(f"{mod}.{a.name}")
                elif a.name != "*":
                    aliases[a.asname or a.name] = f"{mod}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if not _third_party(a.name):
                    continue
                bad = private_module(a.name)
                if bad:
                    found.add(bad)
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    aliases.setdefault(top, top)
    for node in attrs:  # ``alias.sub._name``: the first private attribute of the chain
        root, names = _attribute_chain(node)
        if root not in aliases:
            continue
        i = next(i for i, n in enumerate(names) if _private(n))
        found.add(".".join([aliases[root], *names[: i + 1]]))
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        found.update(_inherited_private(cls, aliases))
    return sorted(found)


def _inherited_private(cls: ast.ClassDef, aliases: dict[str, str]) -> set[str]:
    """``BASE._name`` of every private name a subclass of a third-party class uses through
    ``self`` / ``cls`` / ``super()`` without defining it in its own body (an inherited private
    method or attribute: ``self._get_flat_grad_sample(p)`` in a ``DPOptimizer`` subclass)."""
    bases = []
    for b in cls.bases:
        root, chain = _attribute_chain(b) if isinstance(b, ast.Attribute) else (None, [])
        if isinstance(b, ast.Name) and b.id in aliases:
            bases.append(aliases[b.id])
        elif root in aliases:
            bases.append(".".join([aliases[root], *chain]))
    if not bases:
        return set()
    own: set[str] = set()
    for n in ast.walk(cls):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            own.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            own.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            own.add(n.id)
    out = set()
    for n in ast.walk(cls):
        if not (isinstance(n, ast.Attribute) and _private(n.attr) and n.attr not in own):
            continue
        v = n.value
        if (isinstance(v, ast.Name) and v.id in ("self", "cls")) or (
            isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super"
        ):
            out.add(f"{bases[0]}.{n.attr}")
    return out


def scan_third_party() -> set[str]:
    out: set[str] = set()
    for folder in THIRD_PARTY_FOLDERS:
        for f in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in f.parts:
                continue
            for v in third_party_violations_of(f):
                out.add(f"{f.relative_to(ROOT).as_posix()} {v}")
    return out


def scan(*, same_part: bool = False) -> set[str]:
    out: set[str] = set()
    for folder in PARTS:
        for f in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in f.parts:
                continue
            for v in violations_of(f, same_part=same_part):
                out.add(f"{f.relative_to(ROOT).as_posix()} {v}")
    return out


def read_allowlist(path: Path) -> set[str]:
    if not path.exists():
        return set()
    return {
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


HEADER = (
    "# Private names of another part (core ldp_audit/, training/, attacks/) in use today; a\n"
    "# ratchet: scripts/check_private_imports.py fails on a new one and on a fixed one still\n"
    "# listed here. Fix by making the name public (documented) or moving the code; never add.\n"
)
SAME_PART_HEADER = (
    "# Private names (not private modules) of another module of the SAME part in use today\n"
    "# (many are package __init__ re-exports kept for old import paths); a ratchet like\n"
    "# private_imports_allowlist.txt: a new one fails make lint, a fixed one must be removed.\n"
)


def main(argv: list[str]) -> int:
    bad = False
    counts = []
    checks = (  # (same_part, allowlist, header, what a violation is)
        (False, ALLOWLIST, HEADER, "a private name of another part"),
        (
            True,
            SAME_PART_ALLOWLIST,
            SAME_PART_HEADER,
            "a private name of another module of its part",
        ),
    )
    for same_part, path, header, what in checks:
        now = scan(same_part=same_part)
        if "--update" in argv:
            path.write_text(header + "".join(f"{v}\n" for v in sorted(now)))
            print(f"{path.relative_to(ROOT)}: {len(now)} entries")
            continue
        allowed = read_allowlist(path)
        new, fixed = sorted(now - allowed), sorted(allowed - now)
        for v in new:
            f, name = v.split(" ", 1)
            print(f"{f}: uses {name}, {what} (make it public or move it)")
        for v in fixed:
            print(f"{path.relative_to(ROOT)}: '{v}' is fixed: remove it from the list")
        bad = bad or bool(new or fixed)
        counts.append(len(now))
    if "--update" in argv:
        return 0
    for v in sorted(scan_third_party()):  # no allowlist: every one fails
        f, name = v.split(" ", 1)
        print(f"{f}: uses {name}, a private name of a third-party package (use its public API)")
        bad = True
    if bad:
        return 1
    print(f"private imports: {counts[0]} known across parts, {counts[1]} within a part; none new")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
