"""results.json of the PGC-A3C reproductions follows the toolkit's JSON convention: an FST never
reached is "inf", not null (a null FST is refused), and the committed reports rebuild byte for
byte."""

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
    [(12.0, 12.0), (3, 3.0), ("inf", math.inf), (np.float64(7.0), 7.0)],
)
def test_fst_from_json_reads_numbers_and_inf(value, expected):
    assert metrics.fst_from_json(value) == expected


@pytest.mark.parametrize("bad", [None, True, "never", "nan", 0.0, float("nan"), [1.0], "-inf"])
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
    assert _fst_nulls(new) == 0  # no null FST
    assert any(v == "inf" for e in new["settings"].values() for v in e["fst"])
    assert json.dumps(new, indent=1, allow_nan=False) + "\n" == text  # strict JSON, as written
    notes = (d / "notes.md").read_text()
    assert reproduce_report.tables_markdown(new) == (d / "tables.md").read_text()
    assert reproduce_report.readme_markdown(new, notes) == (d / "README.md").read_text()
    verdicts = [(c["setting"], c["measure"], c["paper_vs_ci"]) for c in new["comparison"]]
    assert verdicts == [
        (c["setting"], c["measure"], c["paper_vs_ci"]) for c in reproduce_report.comparison(new)
    ]
    assert [c for c in new["comparison"] if c["paper_vs_ci"] == "below"]  # inf endpoints read


def test_committed_readings_report_uses_inf_and_rebuilds_unchanged():
    d = REPO / "reports" / "pgc-a3c-readings"
    new = json.loads((d / "results.json").read_text())
    assert _fst_nulls(new) == 0
    notes = (d / "notes.md").read_text()
    assert readings.readings_markdown(new, notes) == (d / "README.md").read_text()


def test_a_null_fst_in_results_is_refused_by_name():
    doc = json.loads((REPO / "reports" / "pgc-a3c-sample" / "results.json").read_text())
    entry = next(iter(doc["settings"].values()))
    entry["median_fst_ci"] = [entry["median_fst_ci"][0], None]  # the pre-2026-11-24 "never"
    with pytest.raises(InvalidParameterError, match="got None"):
        reproduce_report.tables_markdown(doc)
