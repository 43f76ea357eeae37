"""results.json of the PGC-A3C reproductions follows the toolkit's JSON convention: an FST never
reached is "inf", not null; old files with null still read the same, and the committed reports
(rewritten mechanically from null to "inf") rebuild byte for byte."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c import metrics, readings, reproduce_report

REPO = Path(__file__).resolve().parents[1]
REPORTS = ("pgc-a3c", "pgc-a3c-sample")
#: the FST fields of a setting in results.json: an FST never reached is "inf"
FST_FIELDS = ("fst", "median_fst", "median_fst_ci")


def _legacy(results: dict) -> dict:
    """The same results as written before the "inf" convention: every "inf" FST is null."""
    doc = json.loads(json.dumps(results))
    for group in ("settings", "figure2_runs"):
        for entry in (doc.get(group) or {}).values():
            for name in FST_FIELDS:
                v = entry.get(name)
                if isinstance(v, list):
                    entry[name] = [None if x == "inf" else x for x in v]
                elif v == "inf":
                    entry[name] = None
    for row in doc.get("comparison") or []:
        if row["measure"] == "median_fst":
            row["ours"] = None if row["ours"] == "inf" else row["ours"]
            row["ci"] = [None if x == "inf" else x for x in row["ci"]]
    return doc


def _fst_nulls(doc: dict) -> int:
    n = 0
    for group in ("settings", "figure2_runs"):
        for entry in (doc.get(group) or {}).values():
            for name in FST_FIELDS:
                v = entry.get(name, 0)
                n += sum(x is None for x in v) if isinstance(v, list) else v is None
    return n


def test_summarize_writes_inf_strings_and_null_only_for_undefined():
    zeta = np.zeros((3, 40))
    zeta[0, 4:] = 200.0  # FST 5; trials 1 and 2 never
    out = metrics.summarize(
        zeta, reference_fst=np.array([np.inf]), rng=np.random.default_rng(0), n_resamples=200
    )
    text = json.dumps(out, allow_nan=False)  # strict JSON
    assert out["fst"] == [5.0, "inf", "inf"]
    assert out["median_fst"] == "inf"
    assert out["median_fst_ci"][1] == "inf"
    assert out["relative_auc"] is None  # the reference never succeeded: undefined, not infinite
    assert "null" in text and text.count('"inf"') >= 4


@pytest.mark.parametrize(
    "value, expected",
    [(12.0, 12.0), (3, 3.0), ("inf", math.inf), (None, math.inf), (np.float64(7.0), 7.0)],
)
def test_fst_from_json_reads_both_conventions(value, expected):
    assert metrics.fst_from_json(value) == expected


@pytest.mark.parametrize("bad", [True, "never", "nan", 0.0, float("nan"), [1.0], "-inf"])
def test_fst_from_json_refuses_what_is_not_an_fst(bad):
    with pytest.raises(InvalidParameterError, match="fst must be"):
        metrics.fst_from_json(bad)


def test_fst_to_json():
    assert metrics.fst_to_json(np.inf) == "inf" and metrics.fst_to_json(42.0) == 42.0
    with pytest.raises(InvalidParameterError, match="fst must be"):
        metrics.fst_to_json(float("nan"))


@pytest.mark.parametrize("name", REPORTS)
def test_committed_reports_use_inf_and_rebuild_unchanged(name):
    d = REPO / "reports" / name
    text = (d / "results.json").read_text()
    new = json.loads(text)
    assert _fst_nulls(new) == 0  # rewritten: no null FST left
    assert any(v == "inf" for e in new["settings"].values() for v in e["fst"])
    old = _legacy(new)
    assert _fst_nulls(old) > 0
    assert json.dumps(new, indent=1, allow_nan=False) + "\n" == text  # only null -> "inf"
    notes = (d / "notes.md").read_text()
    for doc in (new, old):  # the report is the committed one, from either form
        assert reproduce_report.tables_markdown(doc) == (d / "tables.md").read_text()
        assert reproduce_report.readme_markdown(doc, notes) == (d / "README.md").read_text()
    verdicts = [
        (c["setting"], c["measure"], c["paper_vs_ci"]) for c in reproduce_report.comparison(new)
    ]
    assert verdicts == [
        (c["setting"], c["measure"], c["paper_vs_ci"]) for c in reproduce_report.comparison(old)
    ]
    assert [c for c in new["comparison"] if c["paper_vs_ci"] == "below"]  # inf endpoints read


def test_committed_readings_report_uses_inf_and_rebuilds_unchanged():
    d = REPO / "reports" / "pgc-a3c-readings"
    new = json.loads((d / "results.json").read_text())
    assert _fst_nulls(new) == 0
    old = _legacy(new)
    assert _fst_nulls(old) > 0
    notes = (d / "notes.md").read_text()
    for doc in (new, old):
        assert readings.readings_markdown(doc, notes) == (d / "README.md").read_text()


def test_figure3_reads_legacy_and_new_fsts(tmp_path):
    d = REPO / "reports" / "pgc-a3c-sample"
    new = json.loads((d / "results.json").read_text())
    reproduce_report.figure3(new, tmp_path / "new.png")
    reproduce_report.figure3(_legacy(new), tmp_path / "old.png")
    assert (tmp_path / "new.png").read_bytes() == (tmp_path / "old.png").read_bytes()
