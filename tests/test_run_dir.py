"""Run directory written by train() reads back per docs/interfaces.md."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ldp_audit.errors import RunDirectoryError
from ldp_audit.training import run_dir as rd
from ldp_audit.training.pgc_a3c import DIM, PgcA3cConfig, train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    cfg = PgcA3cConfig(mechanism="laplace", epsilon=2.0, trials=2, max_submissions=30)
    return path, train(cfg, seed=4, run_dir=path)


def test_files_and_config(run):
    path, res = run
    for f in ("config.json", "ledger.sqlite", "transcript.npz", "secrets.npz", "metrics.json"):
        assert (path / f).is_file(), f
    c = rd.read_config(path)
    assert c["algorithm"] == "pgc-a3c" and c["seed"] == 4
    assert c["mechanism"] == {"name": "laplace", "epsilon": 2.0, "clip": 0.01}
    assert PgcA3cConfig.from_dict(c["config"]) == res.config
    assert "numpy" in c["versions"]


def test_transcript_secrets_model_metrics(run):
    path, res = run
    t = rd.read_transcript(path)
    n = t["report"].shape[0]
    assert n == 60 and t["report"].shape == (n, DIM)
    for k in ("trial", "agent", "submission", "theta_index"):
        assert t[k].dtype == np.int64 and t[k].shape == (n,)
    np.testing.assert_array_equal(t["report"], res.transcript["report"])
    s = rd.read_secrets(path)
    assert s["gravity"].shape == (n,) and s["gradient"].shape == (n, DIM)
    np.testing.assert_array_equal(rd.read_model(path), res.theta)
    m = rd.read_metrics(path)
    assert [len(z) for z in m["zeta"]] == [30, 30]
    np.testing.assert_array_equal(np.array(m["zeta"]), res.zeta)
    assert m["privacy"]["epsilon_per_agent"] == 2.0


def test_malformed_run_dir_is_refused(tmp_path):
    with pytest.raises(RunDirectoryError):
        rd.read_config(tmp_path / "missing")
    (tmp_path / "config.json").write_text(json.dumps({"algorithm": "pgc-a3c"}))
    with pytest.raises(RunDirectoryError, match="lacks"):
        rd.read_config(tmp_path)
    np.savez(tmp_path / "transcript.npz", report=np.zeros((2, DIM)))
    with pytest.raises(RunDirectoryError, match="lacks"):
        rd.read_transcript(tmp_path)
    np.savez(
        tmp_path / "transcript.npz",
        trial=np.zeros(2, dtype=np.int64),
        agent=np.zeros(2, dtype=np.int64),
        submission=np.zeros(2, dtype=np.int64),
        theta_index=np.array([0, 5]),
        report=np.zeros((2, DIM)),
        score=np.zeros(2),
        thetas=np.zeros((1, DIM)),
    )
    with pytest.raises(RunDirectoryError, match="theta_index"):
        rd.read_transcript(tmp_path)
