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


def _dprl_settings():
    from ldp_audit.training.dprl.config import ReproduceSettings

    return ReproduceSettings(
        seeds=2,
        episodes=16,
        total_steps=300,
        dpsgd_noise=(0.0, 1.0),
        obs_noise=(0.0, 1.0),
        audit_canaries=0,
    )


# The two tests below are the per-system instances of one mechanism (ldp_audit.backends.run_tasks
# deals a reproduction's tasks to a pool or to Ray and merges the results): its equality is
# tested by default in tests/test_backends.py (generic tasks), tests/test_reproduce_backends.py
# (PGC-A3C) and tests/test_frd_backends.py (FRD); these two (13 s and 39 s) run with -m slow so
# the default suite stays under 10 minutes on 2 cores.
@pytest.mark.slow
def test_dprl_reproduce_ray_equals_local(ray_local, tmp_path):
    pytest.importorskip("torch")
    from ldp_audit.training.dprl.reproduce import reproduce

    reproduce(_dprl_settings(), out=tmp_path / "local")
    reproduce(_dprl_settings(), out=tmp_path / "ray", backend="ray", workers=2)
    a = json.loads((tmp_path / "local" / "results.json").read_text())
    b = json.loads((tmp_path / "ray" / "results.json").read_text())
    assert len(a["runs"]) == 2 * 2 * 2 * 2  # algos x families x sigmas x seeds
    assert a["runs"][0]["returns"]  # real training happened
    assert _no_timings(a) == _no_timings(b)  # every return, epsilon and table cell


@pytest.mark.parametrize("system", ["dprl", "fedrl"])
def test_reproduce_cli_backend_usage_errors_before_work(system, tmp_path, capsys):
    from ldp_audit.cli import main

    out = tmp_path / "rep"
    code = main(["reproduce", system, "--address", "auto", "--out", str(out)])
    assert code == 2
    assert "--address applies to --backend ray only, got --backend local" in capsys.readouterr().err
    assert not out.exists()
    for bad in (["--backend", "dask"], ["--workers", "0"]):
        with pytest.raises(SystemExit) as ei:
            main(["reproduce", system, *bad, "--out", str(out)])
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


def _fedrl_tiny():
    from ldp_audit.training.fedrl.reproduce import ReproConfig

    return ReproConfig(
        sizes=(8,),
        runs=1,
        train_steps=(20,),
        n_envs=4,
        n_maps=100,
        eval_maps=10,
        hist_len=2,
        hist_lens=(1, 2),
        fig4_runs=1,
        attack_sigmas=(0.0, 1.0),
        attack_steps=20,
        audit_samples=0,
    )


def _fedrl_volatile(doc):
    """The results as sorted JSON text (NaN, an undefined interval, then equals NaN) without
    timings (every key naming "seconds") and the machine's load averages."""

    def strip(x):
        if isinstance(x, dict):
            return {
                k: strip(v)
                for k, v in x.items()
                if "seconds" not in str(k) and not str(k).startswith("load_average")
            }
        return [strip(v) for v in x] if isinstance(x, list) else x

    return json.dumps(strip(doc), sort_keys=True)


@pytest.mark.slow
def test_fedrl_reproduce_on_a_pool_and_ray_equals_one_process(ray_local):
    """Every stage (Table 1, Figure 4, attack settings) is a task: same numbers everywhere."""
    pytest.importorskip("torch")
    from ldp_audit.training.fedrl.reproduce import reproduce

    one = reproduce(_fedrl_tiny())
    assert set(one["table1"]) == {"8"} and list(one["fig4"]) == ["1", "2"]
    assert one["fig4"]["2"]["reused"] == "table1" and len(one["attacks"]) == 4
    pooled = reproduce(_fedrl_tiny(), workers=2)
    on_ray = reproduce(_fedrl_tiny(), backend="ray", workers=2)
    assert _fedrl_volatile(pooled) == _fedrl_volatile(one)
    assert _fedrl_volatile(on_ray) == _fedrl_volatile(one)
