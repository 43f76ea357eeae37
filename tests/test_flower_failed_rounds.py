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


def test_a_signal_while_the_recorder_closes_marks_the_run_interrupted(tmp_path):
    """Session 58 probe: ``FlowerRecorder.close`` finished the run in a ``finally`` with the
    status it had chosen before writing, so a Ctrl-C while it wrote (here: the metrics) sealed
    a run without its metrics.json as "complete". The signal is injected into that write."""
    from ldp_audit.rundir import verify_run

    rec = FlowerRecorder(tmp_path / "run", system="t", mechanism=Laplace(2.0, 2.0), private=None)
    rec.broadcast(D.initial_arrays())

    def write_json(name, obj):
        raise KeyboardInterrupt

    rec.writer.write_json = write_json
    with pytest.raises(KeyboardInterrupt):
        rec.close()
    res = verify_run(tmp_path / "run")
    assert res.ok and res.status == "interrupted", res.problems
