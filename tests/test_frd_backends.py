"""``reproduce frd --backend {local,ray}``: the sweep's architecture batches and the leak runs as
tasks of ``ldp_audit.backends.run_tasks`` give the numbers of the former single ``train_many``
call, bit for bit, in this process, in a local pool and on a real local Ray instance started
here; a failing task names its cells and seed; bad backend options are usage errors before any
work.

Ray tests are skipped with a message when Ray is not installed (``pip install 'ldp-audit[ray]'``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")

from ldp_audit.backends import TaskError  # noqa: E402
from ldp_audit.training.frd import reproduce as R  # noqa: E402
from ldp_audit.training.frd.config import setting_config  # noqa: E402

_TIMINGS = ("sweep_seconds", "sweep_cpu_seconds", "sweep_task_cpu_seconds", "wall_seconds",
            "cpu_seconds", "load_average_at_end", "backend")  # fmt: skip


def _tiny(**kw):
    base = dict(settings=(1, 2, 5), agents=(1, 2), groups=2, max_episodes=30,
                ldp_epsilons=(1.0,), leak=False, seed=3)  # fmt: skip
    return R.ReproduceSettings(**{**base, **kw})


def _cfgs():
    """Three architectures (24x2, 100x2, 24x1), FRD, FedAvg and the LDP variant."""
    common = dict(groups=2, max_episodes=30)
    return [
        setting_config(1, n_agents=2, **common),
        setting_config(2, n_agents=1, **common),
        setting_config(5, n_agents=2, **common),
        setting_config(1, mode="fedavg", n_agents=2, **common),
        setting_config(2, n_agents=2, **common),
        setting_config(1, n_agents=2, ldp_epsilon=1.0, **common),
    ]


def _old_train_many(cfgs, seed):
    """The engine calls of ``train_many`` before the batches became tasks: one generator,
    spawned once per architecture (sorted), one ``_Engine`` per architecture, in-memory ledgers."""
    from ldp_audit.accountant import Accountant, Ledger
    from ldp_audit.training.frd.engine import _Engine, _Recorder

    rng = np.random.default_rng(seed)
    archs = sorted({c.arch() for c in cfgs})
    out = [None] * len(cfgs)
    for arch, r in zip(archs, rng.spawn(len(archs)), strict=True):
        idx = [i for i, c in enumerate(cfgs) if c.arch() == arch]
        recs = [_Recorder(cfgs[i], Accountant(ledger=Ledger(":memory:")), False) for i in idx]
        for i, res in zip(idx, _Engine([cfgs[i] for i in idx], recs, r, None).run(),
                          strict=True):  # fmt: skip
            out[i] = res
    return out


def _same(a, b):
    """Every array and count of two FrdResults equal, bit for bit."""
    assert a.config == b.config
    for name in ("mission", "scores", "gravity", "uploads"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.clipped_states == b.clipped_states and a.agent_episodes == b.agent_episodes
    assert a.memory_sizes == b.memory_sizes
    assert a.model.keys() == b.model.keys()
    for k in a.model:
        np.testing.assert_array_equal(a.model[k], b.model[k], err_msg=k)


def test_sweep_tasks_equal_the_single_batched_call():
    from ldp_audit.training.frd.engine import train_many

    cfgs = _cfgs()
    keys = [("k", i, c.n_agents) for i, c in enumerate(cfgs)]
    ref = _old_train_many(cfgs, 7)
    assert len({c.arch() for c in cfgs}) == 3
    assert any(np.isfinite(r.mission).any() or r.agent_episodes > 0 for r in ref)
    where = {"backend": "local", "address": None, "workers": None}
    tasks, task_cpu = R._sweep(cfgs, keys, 7, False, where)
    assert task_cpu > 0
    for a, b, c in zip(ref, tasks, train_many(cfgs, seed=7), strict=True):
        _same(a, b)
        _same(a, c)
    other = _old_train_many(cfgs, 8)  # the seed matters: the comparison could fail
    assert any(not np.array_equal(a.scores, b.scores, equal_nan=True)
               for a, b in zip(ref, other, strict=True))  # fmt: skip


def _no_timings(doc):
    return {k: v for k, v in doc.items() if k not in _TIMINGS}


# 25 s of CPU (two Ray workers import torch, the reproduction runs twice): under `slow`; the
# default suite keeps the FRD tasks in other processes (the local pool test below) and Ray's
# task path (tests/test_backends.py::test_ray_equals_local_bit_for_bit).
@pytest.mark.slow
def test_ray_gives_the_local_results(ray_local, tmp_path):
    s = _tiny(leak=True, leak_groups=2, leak_shadow=4, leak_epsilons=(1.0,))
    here = R.reproduce(s)
    on_ray = R.reproduce(s, out=tmp_path / "ray", progress=True, backend="ray", workers=2)
    assert on_ray["backend"]["backend"] == "ray"
    assert here["total_agent_episodes"] > 0 and here["leak"][0]["n"] > 0
    b = json.loads((tmp_path / "ray" / "results.json").read_text())
    from ldp_audit.rundir import to_jsonable

    a = json.loads(json.dumps(to_jsonable(here), allow_nan=False))
    assert len(a["rows"]) == 3 * 2 + 2 + 1 and len(a["leak"]) == 6
    assert _no_timings(a) == _no_timings(b)  # every mission time and leak row
    for run in ("frd-paper", "fedavg-wide", "frd-ldp1-paper"):  # each task wrote its run
        assert (tmp_path / "ray" / "leak_runs" / run / "manifest.json").is_file()


def test_a_failing_task_names_its_cells_and_seed(monkeypatch):
    def boom(configs, **kw):
        if configs[0].hidden == 100:
            raise FloatingPointError("loss became NaN")
        return real(configs, **kw)

    real = R.train_batch
    monkeypatch.setattr(R, "train_batch", boom)
    with pytest.raises(TaskError) as ei:
        R.reproduce(_tiny())
    msg = str(ei.value)
    assert "hidden=100, layers=2" in msg and "frd/s2/n1 frd/s2/n2" in msg
    assert "seed=3" in msg and "FloatingPointError: loss became NaN" in msg


def test_cli_backend_usage_errors_before_work(tmp_path, capsys):
    from ldp_audit.cli import main

    out = tmp_path / "rep"
    assert main(["reproduce", "frd", "--address", "auto", "--out", str(out)]) == 2
    assert "--address applies to --backend ray only, got --backend local" in capsys.readouterr().err
    for bad in (["--backend", "dask"], ["--workers", "0"], ["--workers", "x"]):
        with pytest.raises(SystemExit) as ei:
            main(["reproduce", "frd", *bad, "--out", str(out)])
        assert ei.value.code == 2
    assert not out.exists()


def test_cli_local_pool_gives_the_in_process_results(tmp_path):
    from ldp_audit.cli import main

    argv = ["reproduce", "frd", "--settings", "2,5", "--agents", "1,2", "--groups", "2",
            "--max-episodes", "20", "--ldp-epsilons", "1", "--no-leak", "--seed", "4"]  # fmt: skip
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "here")]) == 0
    assert main([*argv, "--workers", "2", "--out", str(tmp_path / "pool")]) == 0
    a = json.loads((tmp_path / "here" / "results.json").read_text())
    b = json.loads((tmp_path / "pool" / "results.json").read_text())
    assert a["backend"] == {"backend": "local", "address": None, "workers": None}
    assert b["backend"] == {"backend": "local", "address": None, "workers": 2}
    kinds = [(r["kind"], r["setting"]) for r in a["rows"]]
    assert kinds == [("frd", 2)] * 2 + [("frd", 5)] * 2 + [("frd", 1)] * 2 + [("fedavg", 1)] * 2 \
        + [("frd-ldp-1", 1)]  # fmt: skip
    assert a["total_agent_episodes"] > 0
    assert _no_timings(a) == _no_timings(b)  # three architecture batches, two processes


def test_a_killed_leak_attempt_is_moved_aside_not_overwritten(tmp_path):
    dead = tmp_path / "frd-paper"  # what a killed worker leaves: status running, no manifest
    dead.mkdir()
    (dead / "config.json").write_text(json.dumps({"status": "running"}))
    (dead / "ledger.sqlite").write_bytes(b"charges of the dead attempt")
    R._aside_dead_attempt(dead)
    kept = tmp_path / "frd-paper.attempt-1"
    assert not dead.exists() and (kept / "ledger.sqlite").read_bytes().startswith(b"charges")
    done = tmp_path / "fedavg-paper"  # a finished run of an earlier report: left for overwrite
    done.mkdir()
    (done / "config.json").write_text(json.dumps({"status": "complete"}))
    (done / "manifest.json").write_text("{}")
    R._aside_dead_attempt(done)
    assert done.is_dir() and not (tmp_path / "fedavg-paper.attempt-1").exists()


def test_train_batch_refuses_mixed_architectures_and_a_seed_for_rng():
    from ldp_audit.errors import InvalidParameterError
    from ldp_audit.training.frd.engine import train_batch

    cfgs = _cfgs()[:2]  # 24x2 and 100x2
    with pytest.raises(InvalidParameterError, match="one architecture"):
        train_batch(cfgs, rng=np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="rng must be a numpy.random.Generator"):
        train_batch(cfgs[:1], rng=0)
