"""A failed Flower run's metrics.json says how many rounds ran (issue 39: three rounds whose
replies were all rejected left the parameters unchanged and were recorded as ``rounds: 1``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("flwr", reason="Flower not installed (ldp-audit[flower])")

from ldp_audit.mechanisms import Laplace  # noqa: E402
from ldp_audit.training.flower import digits as D  # noqa: E402
from ldp_audit.training.flower.server import FlowerRecorder  # noqa: E402


def test_rounds_count_rounds_not_distinct_parameters(tmp_path):
    rec = FlowerRecorder(
        tmp_path / "run", system="t", mechanism=Laplace(epsilon=2.0, clip=2.0), private=D.PRIVATE
    )
    model = D.initial_arrays()
    for rnd in (1, 2, 3):  # every reply rejected: the model is broadcast unchanged each round
        assert rec.broadcast(model) == 0
        rec.reject(rnd, node=7, reason="client error: test")
    path = rec.close()
    metrics = json.loads((path / "metrics.json").read_text())
    assert metrics["rounds"] == 3
    assert [r["round"] for r in metrics["rejected"]] == [1, 2, 3]
    assert metrics["submissions"] == 0
    assert json.loads((path / "manifest.json").read_text())["status"] == "failed"
    assert np.isfinite(metrics["seconds"])
