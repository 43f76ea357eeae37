"""The run directory train() writes (training/pgc_a3c/run_dir.py) reads back through RunDir, per
docs/interfaces.md."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from ldp_audit.errors import RunDirectoryError
from ldp_audit.rundir import RunDir, read_npz
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.grid import train
from ldp_audit.training.pgc_a3c.model import DIM


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("run")
    cfg = PgcA3cConfig(mechanism="laplace", epsilon=2.0, trials=2, max_submissions=30)
    return path, train(cfg, seed=4, run_dir=path)


def test_files_and_config(run):
    path, res = run
    for f in ("config.json", "ledger.sqlite", "transcript.npz", "secrets.npz", "metrics.json"):
        assert (path / f).is_file(), f
    c = RunDir(path).config
    assert c["algorithm"] == "pgc-a3c" and c["seed"] == 4
    assert c["mechanism"] == {"name": "laplace", "epsilon": 2.0, "clip": 0.01}
    assert PgcA3cConfig.from_dict(c["config"]) == res.config
    assert "numpy" in c["versions"]


def test_transcript_secrets_model_metrics(run):
    path, res = run
    rd = RunDir(path)
    t = rd.transcript()
    n = t["report"].shape[0]
    assert n == 60 and t["report"].shape == (n, DIM)
    for k in ("trial", "agent", "submission", "theta_index"):
        assert t[k].dtype == np.int64 and t[k].shape == (n,)
    np.testing.assert_array_equal(t["report"], res.transcript["report"])
    s = rd.secrets("gravity", "gradient", for_scoring=True)
    assert s["gravity"].shape == (n,) and s["gradient"].shape == (n, DIM)
    np.testing.assert_array_equal(read_npz(path, "model.npz", ("theta",))["theta"], res.theta)
    m = rd.metrics()
    assert [len(z) for z in m["zeta"]] == [30, 30]
    np.testing.assert_array_equal(np.array(m["zeta"]), res.zeta)
    assert m["privacy"]["epsilon_per_agent"] == 2.0


def test_malformed_run_dir_is_refused(run, tmp_path):
    with pytest.raises(RunDirectoryError):
        RunDir(tmp_path / "missing")
    (tmp_path / "config.json").write_text(json.dumps({"algorithm": "pgc-a3c"}))
    with pytest.raises(
        RunDirectoryError, match=r"config.json: missing key\(s\) config, mechanism, seed"
    ):
        RunDir(tmp_path)
    shutil.copy(run[0] / "config.json", tmp_path / "config.json")
    np.savez(tmp_path / "transcript.npz", report=np.zeros((2, DIM)))
    with pytest.raises(RunDirectoryError, match="lacks"):
        RunDir(tmp_path).transcript()
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
    with pytest.raises(RunDirectoryError, match="theta_index must index rows of thetas"):
        RunDir(tmp_path).transcript()
