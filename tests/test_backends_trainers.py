"""``reproduce dprl --backend {local,ray}``: the other trainers' grids as tasks of
``ldp_audit.backends.run_tasks`` give the same results.json on every backend (a real local Ray
instance started here); a failing run names its spec and seed; bad backend options are usage
errors before any work.

Ray tests are skipped with a message when Ray is not installed (``pip install 'ldp-audit[ray]'``).
"""

from __future__ import annotations

import json

import pytest

from ldp_audit.backends import TaskError, backend_options, describe_spec
from ldp_audit.errors import InvalidParameterError


def _no_timings(doc):
    """A results document without its timing fields (the only thing a backend may change)."""
    if isinstance(doc, dict):
        return {
            k: _no_timings(v)
            for k, v in doc.items()
            if k not in ("seconds", "wall_seconds", "cpu_seconds")
        }
    if isinstance(doc, list):
        return [_no_timings(v) for v in doc]
    return doc


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray", reason="Ray not installed: pip install 'ldp-audit[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _dprl_settings():
    from ldp_audit.training.dprl_reproduce import ReproduceSettings

    return ReproduceSettings(
        seeds=2,
        episodes=16,
        total_steps=300,
        dpsgd_noise=(0.0, 1.0),
        obs_noise=(0.0, 1.0),
        audit_canaries=0,
    )


def test_dprl_reproduce_ray_equals_local(ray_local, tmp_path):
    pytest.importorskip("torch")
    from ldp_audit.training.dprl_reproduce import reproduce

    reproduce(_dprl_settings(), out=tmp_path / "local")
    reproduce(_dprl_settings(), out=tmp_path / "ray", backend="ray", workers=2)
    a = json.loads((tmp_path / "local" / "results.json").read_text())
    b = json.loads((tmp_path / "ray" / "results.json").read_text())
    assert len(a["runs"]) == 2 * 2 * 2 * 2  # algos x families x sigmas x seeds
    assert a["runs"][0]["returns"]  # real training happened
    assert _no_timings(a) == _no_timings(b)  # every return, epsilon and table cell


def test_dprl_cli_backend_usage_errors_before_work(tmp_path, capsys):
    from ldp_audit.cli import main

    out = tmp_path / "rep"
    code = main(["reproduce", "dprl", "--seeds", "1", "--address", "auto", "--out", str(out)])
    assert code == 2
    assert "address applies to backend='ray' only" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit) as ei:
        main(["reproduce", "dprl", "--backend", "dask", "--out", str(out)])
    assert ei.value.code == 2
    with pytest.raises(SystemExit) as ei:
        main(["reproduce", "dprl", "--workers", "0", "--out", str(out)])
    assert ei.value.code == 2
    assert not out.exists()


def _raise_for_sigma_one(spec, s):
    if spec["sigma"] == 1.0 and spec["algo"] == "dqn":
        raise FloatingPointError("loss became NaN")
    return {**spec, "returns": [], "seconds": 0.0}


def test_failing_spec_is_named():
    from functools import partial

    from ldp_audit.backends import run_tasks

    specs = [
        {"algo": a, "family": "dpsgd", "privacy": "dpsgd", "sigma": s, "seed": 4}
        for a in ("reinforce", "dqn")
        for s in (0.5, 1.0)
    ]
    with pytest.raises(TaskError, match=r"task 4 of 4 \(algo='dqn'.*sigma=1.0, seed=4\)"):
        run_tasks(partial(_raise_for_sigma_one, s=None), specs, describe=describe_spec)


def test_backend_options_validates():
    import argparse

    assert backend_options(argparse.Namespace()) == {
        "backend": "local",
        "address": None,
        "workers": None,
    }
    got = backend_options(argparse.Namespace(backend="ray", address="auto", workers=None))
    assert got == {"backend": "ray", "address": "auto", "workers": None}
    with pytest.raises(InvalidParameterError, match="address applies to backend='ray' only"):
        backend_options(backend="local", address="auto")
    with pytest.raises(InvalidParameterError, match="workers must be an integer >= 1"):
        backend_options(workers=True)
    assert describe_spec({"algo": "dqn", "sigma": 0.5, "seed": 3, "x": [1]}) == (
        "algo='dqn', sigma=0.5, seed=3"
    )
    assert describe_spec(("not", "a dict")) == "('not', 'a dict')"  # repr of a non-dict
