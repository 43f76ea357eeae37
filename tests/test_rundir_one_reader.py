"""One reader of a run directory (issue 37, items 3 and 4): the report, the systems' report
sections, the attacks, the Opacus scoring, the demo, DP-SGD RL, FRD and Flower read a run through
:class:`ldp_audit.rundir.RunDir` (its secrets only with ``for_scoring=True``), never its files
with the plain readers or ``np.load``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAIN = {"read_json", "read_npz", "read_config", "read_manifest"}
#: modules that still use a plain reader, and why; this list may only shrink
ALLOWED = {
    "ldp_audit/report/_load.py": {"read_json"},  # audits/attacks kept outside the run (extra)
    # whether a Flower run finished (a manifest) before its folder is known to be a run
    # (one reading in the runner both Flower apps share)
    "training/flower/run.py": {"read_manifest"},
}


def _direct_reads(f: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ldp_audit.rundir"):
            found |= {a.name for a in node.names} & PLAIN
        elif isinstance(node, ast.Attribute) and node.attr == "load":
            if isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy"):
                found.add("np.load")
    return found


def test_run_directories_are_read_through_rundir() -> None:
    files = [*(ROOT / "ldp_audit/report").glob("*.py"), *(ROOT / "attacks").rglob("*.py")]
    files += [*(ROOT / "ldp_audit/opacus").glob("*.py"), ROOT / "ldp_audit/demo.py"]
    files += [*(ROOT / "training").glob("*/report.py"), *(ROOT / "training/dprl").glob("*.py")]
    files += [*(ROOT / "training/frd").glob("*.py"), *(ROOT / "training/flower").glob("*.py")]
    assert len(files) > 20  # the scan sees the modules it is about
    found = {str(f.relative_to(ROOT)): r for f in sorted(files) if (r := _direct_reads(f))}
    assert found == ALLOWED


def test_the_scan_sees_a_direct_reader(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("import numpy as np\nfrom ldp_audit.rundir import RunDir, read_npz\nnp.load(1)\n")
    assert _direct_reads(f) == {"read_npz", "np.load"}
