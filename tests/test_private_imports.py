"""scripts/check_private_imports.py: a new cross-part private import fails ``make lint``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_private_imports.py"


@pytest.fixture
def checker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec = importlib.util.spec_from_file_location("check_private_imports_t", _SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "check_private_imports_t", mod)
    spec.loader.exec_module(mod)
    for d in ("ldp_audit", "training", "attacks", "scripts"):
        (tmp_path / d).mkdir()
    (tmp_path / "ldp_audit" / "__init__.py").write_text("")
    (tmp_path / "ldp_audit" / "backends.py").write_text("def _init(): pass\ndef run(): pass\n")
    (tmp_path / "training" / "__init__.py").write_text("")
    (tmp_path / "training" / "fedrl.py").write_text("def _metrics(): pass\n")
    (tmp_path / "training" / "_kernels.py").write_text("def f(): pass\n")
    (tmp_path / "attacks" / "__init__.py").write_text("")
    monkeypatch.setattr(mod, "ROOT", tmp_path)
    monkeypatch.setattr(mod, "ALLOWLIST", tmp_path / "scripts" / "allow.txt")
    monkeypatch.setattr(mod, "SAME_PART_ALLOWLIST", tmp_path / "scripts" / "allow_same.txt")
    return mod


def _write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.write_text(text)
    return p


def test_each_form_of_a_cross_part_private_use_is_found(checker, tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        "attacks/a.py",
        "from ldp_audit.backends import _init, run\n"
        "from ldp_audit.training import fedrl as F\n"
        "import ldp_audit.training.fedrl\n"
        "from ldp_audit.training._kernels import f\n"
        "def g():\n"
        "    F._metrics()\n"
        "    ldp_audit.training.fedrl._metrics()\n"
        "    F.__name__\n",
    )
    assert checker.violations_of(f) == [
        "ldp_audit.backends._init",
        "ldp_audit.training._kernels",
        "ldp_audit.training.fedrl._metrics",
    ]
    # the same names inside their own part are not cross-part
    own = _write(tmp_path, "training/b.py", "from ldp_audit.training.fedrl import _metrics\n")
    assert checker.violations_of(own) == []


def test_the_allowlist_is_a_ratchet(checker, tmp_path: Path, capsys) -> None:
    _write(tmp_path, "training/c.py", "from ldp_audit.backends import _init\n")
    assert checker.main([]) == 1  # new
    assert "training/c.py: uses ldp_audit.backends._init" in capsys.readouterr().out
    assert checker.main(["--update"]) == 0
    assert checker.main([]) == 0
    _write(tmp_path, "training/c.py", "from ldp_audit.backends import run\n")
    assert checker.main([]) == 1  # fixed, still listed
    assert "is fixed: remove it from the list" in capsys.readouterr().out


def test_same_part_private_names_have_their_own_ratchet(checker, tmp_path: Path, capsys) -> None:
    own = _write(
        tmp_path,
        "training/b.py",
        "from ldp_audit.training.fedrl import _metrics\n"
        "from ldp_audit.training import _kernels\n"  # a private module of its own part: fine
        "from ldp_audit.training import fedrl as F\n"
        "def g():\n"
        "    F._metrics()\n",
    )
    assert checker.violations_of(own) == []  # not cross-part
    assert checker.violations_of(own, same_part=True) == ["ldp_audit.training.fedrl._metrics"]
    # a module's own private names are not imports
    assert checker.violations_of(tmp_path / "training" / "fedrl.py", same_part=True) == []
    assert checker.main([]) == 1
    out = capsys.readouterr().out
    assert (
        "training/b.py: uses ldp_audit.training.fedrl._metrics, a private name of another "
        "module of its part" in out
    )
    assert checker.main(["--update"]) == 0
    assert (tmp_path / "scripts" / "allow.txt").read_text().count("\n") == 3  # the header only
    assert (
        "training/b.py ldp_audit.training.fedrl._metrics"
        in (tmp_path / "scripts" / "allow_same.txt").read_text()
    )
    assert checker.main([]) == 0
    _write(tmp_path, "training/b.py", "from ldp_audit.training.fedrl import F\n")
    assert checker.main([]) == 1  # fixed, still listed
    assert "allow_same.txt: 'training/b.py ldp_audit.training.fedrl._metrics' is fixed" in (
        capsys.readouterr().out
    )


def test_third_party_private_names_are_refused(checker, tmp_path: Path, capsys) -> None:
    """No allowlist: each form of a third-party private use fails; stdlib and public are fine."""
    f = _write(
        tmp_path,
        "training/d.py",
        "from opacus.optimizers.optimizer import (\n"
        "    DPOptimizer,\n"
        "    _generate_noise,\n"
        ")\n"
        "from torch._C import Generator\n"
        "import numpy as np\n"
        "import opacus.optimizers as O\n"
        "import sys, os\n"
        "from opacus import PrivacyEngine\n"
        "def g():\n"
        "    np.random._pickle\n"
        "    O.optimizer._mark_as_processed\n"
        "    PrivacyEngine._prepare\n"
        "    np.__version__, sys._getframe, os._exit\n",
    )
    assert checker.third_party_violations_of(f) == [
        "numpy.random._pickle",
        "opacus.PrivacyEngine._prepare",
        "opacus.optimizers.optimizer._generate_noise",
        "opacus.optimizers.optimizer._mark_as_processed",
        "torch._C",
    ]
    assert checker.main([]) == 1  # no allowlist takes them
    out = capsys.readouterr().out
    assert (
        "training/d.py: uses opacus.optimizers.optimizer._generate_noise, a private name of a "
        "third-party package" in out
    )
    _write(tmp_path, "training/d.py", "import numpy as np\nfrom opacus import PrivacyEngine\n")
    assert checker.main([]) == 0


def test_a_private_name_inherited_from_a_third_party_class_is_refused(
    checker, tmp_path: Path, capsys
) -> None:
    """A subclass of a third-party class may not use a private name it does not define itself
    (through ``self``, ``cls`` or ``super()``); its own private names and methods are fine."""
    f = _write(
        tmp_path,
        "training/e.py",
        "import torch\n"
        "def fixtures():\n"
        "    from opacus.optimizers import DPOptimizer\n"
        "    class NoClipping(DPOptimizer):\n"
        "        _own = 1\n"
        "        def clip_and_accumulate(self):\n"
        "            self._k = self._own + self._helper()\n"
        "            return self._get_flat_grad_sample(self._k), super()._prepare()\n"
        "        def _helper(self):\n"
        "            return self._k\n"
        "    class Net(torch.nn.Module):\n"
        "        def forward(self, x):\n"
        "            return self._modules\n"
        "    class Plain:\n"
        "        def f(self):\n"
        "            return self._anything\n",
    )
    assert checker.third_party_violations_of(f) == [
        "opacus.optimizers.DPOptimizer._get_flat_grad_sample",
        "opacus.optimizers.DPOptimizer._prepare",
        "torch.nn.Module._modules",
    ]
    assert checker.main([]) == 1
    assert (
        "training/e.py: uses opacus.optimizers.DPOptimizer._get_flat_grad_sample, a private "
        "name of a third-party package" in capsys.readouterr().out
    )
    _write(
        tmp_path,
        "training/e.py",
        "from opacus.optimizers import DPOptimizer\n"
        "class NoClipping(DPOptimizer):\n"
        "    def clip_and_accumulate(self):\n"
        "        for p, g in zip(self.params, self.grad_samples):\n"
        "            p.summed_grad = g.sum(dim=0)\n",
    )
    assert checker.main([]) == 0


def test_the_tree_uses_no_third_party_private_name() -> None:
    """The real tree (Opacus's ``_generate_noise`` and processed flags were replaced by
    ``dprl_privacy.gaussian_noise``)."""
    spec = importlib.util.spec_from_file_location("check_private_imports_real", _SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.scan_third_party() == set()


@pytest.mark.parametrize(
    "module", ["ldp_audit.training._kernels", "ldp_audit.training.fedrl_reproduce",
               "ldp_audit.cli._types"],
)  # fmt: skip
def test_the_former_alias_modules_are_gone(module: str) -> None:
    """One address per name (issue 37): no module kept only for old imports."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


def test_no_package_re_exports_a_private_name() -> None:
    """No ``__init__`` imports a private name of its modules, no ``_COMPAT`` / ``_REEXPORTED``
    tuple keeps unused imports alive, and no module forwards old names through ``__getattr__``
    (the exceptions load PUBLIC names lazily: the two packages' ``__all__``, Flower's
    ``LdpStrategy``, a class built on first use because Flower is an optional extra)."""
    lazy_public = {"ldp_audit/__init__.py", "attacks/__init__.py", "training/flower/server.py"}
    import ast

    root = _SCRIPT.parent.parent
    found = []
    for folder in ("ldp_audit", "training", "attacks"):
        for f in sorted((root / folder).rglob("*.py")):
            tree = ast.parse(f.read_text())
            rel = f.relative_to(root).as_posix()
            for node in tree.body:
                if f.name == "__init__.py" and isinstance(node, ast.ImportFrom):
                    found += [f"{rel}: {a.name}" for a in node.names if a.name.startswith("_")
                              and not a.name.startswith("__")]  # fmt: skip
                if isinstance(node, ast.Assign):
                    found += [f"{rel}: {t.id}" for t in node.targets if isinstance(t, ast.Name)
                              and ("COMPAT" in t.id or "REEXPORT" in t.id)]  # fmt: skip
                if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                    if rel not in lazy_public:
                        found.append(f"{rel}: __getattr__")
    assert found == []


def test_the_strict_parsers_are_core_not_cli() -> None:
    """Arrows inward (issue 37): the config, the trainers and the attacks read numbers with
    ``ldp_audit.parse``; nothing outside ``ldp_audit/cli/`` imports ``ldp_audit.cli.types``."""
    import ast

    from ldp_audit import parse
    from ldp_audit.cli import types

    root = _SCRIPT.parent.parent
    users = []
    for folder in ("ldp_audit", "training", "attacks"):
        for f in sorted((root / folder).rglob("*.py")):
            if f.parent.name == "cli" and f.parent.parent.name == "ldp_audit":
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == "ldp_audit.cli.types":
                    users.append(f.relative_to(root).as_posix())
    assert users == []
    # one address: the CLI defines none of the core's readers (it imports what it uses)
    for name in parse.__all__:
        assert getattr(types, name, getattr(parse, name)) is getattr(parse, name), name


#: Two-file import circles left (a ratchet: a new one fails; a broken one must be removed).
#: Issue 37's four (ledger <-> ledger_migrate, audit api <-> sequential, attack_cmd <->
#: system_cmd, rundir reader <-> verify) are gone, and so is frd config <-> proxy (proxy checks
#: its integers with ldp_audit.validation.check_int).
_CIRCLES_LEFT: set[tuple[str, str]] = set()


def test_two_file_import_circles_are_a_ratchet() -> None:
    """No two modules of ldp_audit, training and attacks import each other (an import at any
    depth of the file counts, a lazy one included; one under ``if TYPE_CHECKING:`` does not),
    but for the circles left above."""
    import ast

    mods = {}
    for folder, prefix in (("ldp_audit", "ldp_audit"), ("training", "ldp_audit.training"),
                           ("attacks", "ldp_audit.attacks")):  # fmt: skip
        for f in (_SCRIPT.parent.parent / folder).rglob("*.py"):
            parts = f.relative_to(_SCRIPT.parent.parent / folder).with_suffix("").parts
            mods[".".join((prefix, *parts[: -1 if parts[-1] == "__init__" else None]))] = f
    edges = set()
    for m, f in mods.items():
        tree = ast.parse(f.read_text())
        typing_only = {  # imports under `if TYPE_CHECKING:` are no arrows at run time
            id(n) for b in ast.walk(tree) if isinstance(b, ast.If)
            and getattr(b.test, "id", None) == "TYPE_CHECKING" for n in ast.walk(b)
        }  # fmt: skip
        for n in ast.walk(tree):
            if id(n) in typing_only:
                continue
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else []
            if isinstance(n, ast.ImportFrom) and n.module and not n.level:
                names = [n.module, *(f"{n.module}.{a.name}" for a in n.names)]
            edges |= {(m, t) for t in names if t in mods and t != m}
    circles = {tuple(sorted(e)) for e in edges if e[::-1] in edges}
    assert circles <= _CIRCLES_LEFT, f"new import circles: {sorted(circles - _CIRCLES_LEFT)}"
    assert circles == _CIRCLES_LEFT, f"broken, remove: {sorted(_CIRCLES_LEFT - circles)}"


def test_the_core_modules_that_import_attacks_are_a_ratchet() -> None:
    """Arrows inward (issue 37): outside its entry points (``ldp_audit/cli/``, the demo) the
    core imports ``ldp_audit.attacks`` only in the Opacus one-run audit, for the reason
    docs/architecture.md gives; a new importer fails, one that stops must be removed here."""
    import ast

    root = _SCRIPT.parent.parent
    users = set()
    for f in sorted((root / "ldp_audit").rglob("*.py")):
        rel = f.relative_to(root).as_posix()
        if rel.startswith("ldp_audit/cli/") or rel == "ldp_audit/demo.py":
            continue
        for n in ast.walk(ast.parse(f.read_text())):
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else []
            mods += [n.module] if isinstance(n, ast.ImportFrom) and n.module else []
            if any(m == "ldp_audit.attacks" or m.startswith("ldp_audit.attacks.") for m in mods):
                users.add(rel)
    assert users == {"ldp_audit/opacus/scoring.py"}
