"""The auditor's package layout (issue 25, "rooms"): one file per stage, each under ~800 lines,
the bounds taken from :mod:`ldp_audit.stats` (no private copy of the Clopper-Pearson / binomial
maths), and every name of the former single module still readable from ``ldp_audit.audit``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ldp_audit.audit as A

PKG = Path(A.__file__).parent


def test_every_stage_is_a_small_file():
    sizes = {f.name: len(f.read_text().splitlines()) for f in PKG.glob("*.py")}
    assert {"api.py", "selection.py", "statistics.py", "sampling.py", "exact.py"} <= set(sizes)
    assert max(sizes.values()) <= 800, sizes


def test_no_private_copy_of_the_beta_function_maths():
    """Clopper-Pearson bounds, the Poisson ratio bound and the binomial tail are stats'."""
    for f in PKG.glob("*.py"):
        text = f.read_text()
        assert not re.search(r"\bbetainc(inv)?\b", text), f.name
        assert "from scipy import special" not in text, f.name


@pytest.mark.parametrize(
    "name",
    [
        # public, and the private names the tests and docs read from the old module
        "audit", "exact_epsilon", "default_pairs", "from_scalar", "AuditResult", "Verdict",
        "Witness", "PrivacyProfile", "TradeoffCurve", "SequentialInfo", "sequential_alpha",
        "sequential_schedule", "estimation_samples", "max_refutable_epsilon", "MAX_DIM",
        "RATIO_TESTS", "VERDICT_KINDS", "_SHARES", "_CHUNK_ELEMENTS", "_TAIL_FIT", "_tail_rates",
        "_Coordinate", "_best_events", "_threshold_counts", "_probe_event", "_PROBE_LEVEL",
        "_audit_sequential", "_privatize_rows", "_build_statistics", "_Candidate", "_choose",
    ],
)  # fmt: skip
def test_old_names_stay_readable_from_the_package(name):
    import importlib

    value = getattr(A, name)
    assert value is not None
    if not name.startswith("_"):
        assert name in A.__all__
        return
    # a private name is read from the stage that holds it: one object, not a copy
    stages = [importlib.import_module(f"ldp_audit.audit.{s}") for s in A._STAGES]
    holders = [m for m in stages if name in vars(m)]
    assert holders and value is vars(holders[0])[name]


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute '_no_such_name'"):
        A._no_such_name  # noqa: B018
