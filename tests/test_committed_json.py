"""Every committed JSON file (benchmarks/results/, reports/) keeps the project's JSON convention
(docs/interfaces.md: +-infinity is the string "inf" / "-inf", NaN is null), so a strict reader
(``jq``, JavaScript's ``JSON.parse``, Python's ``json`` with ``parse_constant`` refusing) reads
it. Four benchmark scripts wrote Python's ``Infinity`` until session 52 (11 committed files)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _refuse(name: str) -> float:
    raise ValueError(f"non-standard JSON constant {name}")


def test_committed_json_is_strict_json() -> None:
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    files += sorted((ROOT / "reports").rglob("*.json"))
    assert len(files) > 50  # the folders were found
    bad = []
    for f in files:
        try:
            json.loads(f.read_text(encoding="utf-8"), parse_constant=_refuse)
        except ValueError as e:
            bad.append(f"{f.relative_to(ROOT)}: {e}")
    assert not bad, "\n".join(bad)
