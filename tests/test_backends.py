"""ldp_audit.backends: local and Ray give the same results, failures name their item, a killed
worker's retry neither double-charges a ledger nor overwrites a run directory.

The Ray tests start a real local Ray instance (2 CPUs, no dashboard) once for the module and are
skipped with a message when Ray is not installed (``pip install 'ldp-audit[ray]'``).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from ldp_audit.backends import TaskError, TaskInputError, fresh_run_dir, run_tasks
from ldp_audit.errors import InvalidParameterError, RunDirectoryError


def _draw(item: tuple[int, np.random.Generator]) -> np.ndarray:
    k, rng = item
    return rng.standard_normal(3) * k


def _maybe_fail(item: dict) -> int:
    if item["seed"] == 2:
        raise ZeroDivisionError("boom")
    if item["seed"] == 3:
        raise InvalidParameterError("epsilon must be > 0, got -1.0")
    return item["seed"] * 10


def _describe(item: dict) -> str:
    return f"setting={item['setting']}, seed={item['seed']}"


def _items(n: int = 4) -> list[tuple[int, np.random.Generator]]:
    return list(zip(range(n), np.random.default_rng(7).spawn(n), strict=True))


def _expected(n: int = 4) -> list[np.ndarray]:
    return [_draw(it) for it in _items(n)]


def test_local_in_order_and_equal_to_loop():
    got = run_tasks(_draw, _items())
    for a, b in zip(got, _expected(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_local_pool_equal_to_in_process():
    got = run_tasks(_draw, _items(3), workers=2)
    for a, b in zip(got, _expected(3), strict=True):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"backend": "dask"}, "backend must be one of"),
        ({"backend": "local", "address": "auto"}, "address applies to backend='ray' only"),
        ({"workers": 0}, "workers must be an integer >= 1"),
        ({"workers": True}, "workers must be an integer >= 1"),
        ({"max_retries": -1}, "max_retries must be an integer >= 0"),
    ],
)
def test_bad_arguments_refused_before_work(kwargs, match):
    calls = []
    with pytest.raises(InvalidParameterError, match=match):
        run_tasks(calls.append, [1, 2], **kwargs)
    assert calls == []


def test_local_failure_names_item():
    items = [{"setting": "laplace eps=1", "seed": s} for s in (0, 1, 2)]
    with pytest.raises(TaskError) as ei:
        run_tasks(_maybe_fail, items, describe=_describe)
    msg = str(ei.value)
    assert "task 3 of 3" in msg and "setting=laplace eps=1, seed=2" in msg and "boom" in msg
    assert isinstance(ei.value.__cause__, ZeroDivisionError)
    assert ei.value.index == 2 and not isinstance(ei.value, TaskInputError)
    with pytest.raises(TaskInputError, match=r"seed=3\).*epsilon must be > 0"):
        run_tasks(_maybe_fail, [{"setting": "x", "seed": 3}], describe=_describe)


def _fail_or_sleep(item: str) -> str:
    if item == "fail":
        raise ZeroDivisionError("boom")
    time.sleep(120)
    return item


def test_local_pool_failure_stops_the_other_tasks():
    """A failed task ends the grid at once: the pool's other (running) tasks are terminated,
    not waited for (the pool used to wait for them on exit)."""
    t0 = time.perf_counter()
    with pytest.raises(TaskError, match=r"task 2 of 2.*boom"):
        run_tasks(_fail_or_sleep, ["sleep", "fail"], workers=2)
    assert time.perf_counter() - t0 < 60  # the sleeping task (120 s) was not waited for


def _state(pid: int) -> str:
    try:  # a zombie not yet reaped by its new parent counts as ended
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_pool_worker_ends_when_its_parent_is_killed():
    """A SIGKILLed ``reproduce pgc-a3c --trials 2 --workers 2`` left both pool workers blocked
    forever, 180-300 MiB each, holding its output pipes (found from outside, 2026-12-07); the
    pool's initializer now ends a worker within 0.5 s of its parent. Here: parent P forks W,
    W runs the initializer and sleeps; P is killed; W must end (not reach its 30 s sleep's
    end)."""
    from ldp_audit.backends import die_with_parent

    r, w = os.pipe()
    parent = os.fork()
    if parent == 0:  # P
        worker = os.fork()
        if worker == 0:  # W
            die_with_parent(os.getppid())
            time.sleep(30)
            os._exit(0)
        os.write(w, str(worker).encode())
        time.sleep(30)
        os._exit(0)
    os.close(w)
    worker = int(os.read(r, 32))
    os.close(r)
    assert _state(worker) not in ("gone", "Z")
    os.kill(parent, 9)
    os.waitpid(parent, 0)
    deadline = time.monotonic() + 5
    while _state(worker) not in ("gone", "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    ended = _state(worker) in ("gone", "Z")
    if not ended:
        os.kill(worker, 9)
    assert ended, "the worker outlived its killed parent"


def test_fresh_run_dir_moves_dead_attempt_aside(tmp_path):
    run = tmp_path / "run"
    assert fresh_run_dir(run) == run and not run.exists()
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"status": "running"}))
    (run / "ledger.sqlite").write_bytes(b"x")
    assert fresh_run_dir(run) == run
    assert not run.exists()
    kept = tmp_path / "run.attempt-1"
    assert (kept / "ledger.sqlite").read_bytes() == b"x"  # kept as evidence, not deleted
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"status": "complete"}))
    (run / "manifest.json").write_text("{}")
    with pytest.raises(RunDirectoryError, match="finished run"):
        fresh_run_dir(run)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.md").write_text("mine")
    with pytest.raises(RunDirectoryError, match="not an interrupted attempt"):
        fresh_run_dir(other)


# ----------------------------------------------------------------------------------- Ray


def test_ray_equals_local_bit_for_bit(ray_local):
    got = run_tasks(_draw, _items(), backend="ray")
    for a, b in zip(got, _expected(), strict=True):
        assert a.tobytes() == b.tobytes()


def test_ray_failure_names_item(ray_local):
    items = [{"setting": "prs eps=2", "seed": s} for s in (0, 2)]
    with pytest.raises(TaskError, match=r"task 2 of 2 \(setting=prs eps=2, seed=2\).*boom"):
        run_tasks(_maybe_fail, items, backend="ray", describe=_describe)
    with pytest.raises(TaskInputError, match="epsilon must be > 0"):
        run_tasks(_maybe_fail, [{"setting": "x", "seed": 3}], backend="ray", describe=_describe)


def _charge_then_maybe_die(item: dict) -> dict:
    """A task owning its run directory and ledger; the first attempt is killed after charging."""
    from ldp_audit.accountant import Accountant, PureDpEvent
    from ldp_audit.rundir import RunWriter

    run = fresh_run_dir(item["run_dir"])
    w = RunWriter(run, algorithm="test", config={"k": item["k"]}, seed=item["k"])
    acc = Accountant(ledger=w.open_ledger())
    acc.charge("0/0", PureDpEvent(1.0))
    marker = Path(item["marker"])
    if not marker.exists():
        marker.write_text("died once")
        os._exit(1)  # the worker process dies (as if killed): Ray retries the task
    spent = acc.spent("0/0")
    w.finish()
    return {"k": item["k"], "spent": spent}


def test_ray_killed_worker_retried_without_double_charge(ray_local, tmp_path):
    item = {"k": 5, "run_dir": str(tmp_path / "run"), "marker": str(tmp_path / "marker")}
    (res,) = run_tasks(_charge_then_maybe_die, [item], backend="ray", max_retries=2)
    assert res["k"] == 5
    assert math.isclose(res["spent"], 1.0)  # one charge in the retried run's ledger, not two
    assert (tmp_path / "run" / "manifest.json").exists()
    assert (tmp_path / "run.attempt-1" / "config.json").exists()  # the dead attempt, kept


def test_sweep_ray_equals_local(ray_local):
    from ldp_audit.attacks.sweep import sweep

    kw = dict(
        thetas=("init", "linear0:0:1:1"),
        epsilons=(1.0, math.inf),
        mechanisms=("laplace", "prs"),
        reports=(1, 3),
        n_agents=30,
        n_shadow=30,
        seed=3,
    )

    def strip(d):
        d = json.loads(json.dumps(d))
        d.pop("seconds")
        d["settings"].pop("backend")
        for t in d["thetas"]:
            t.pop("simulation_seconds")
        for r in d["results"]:
            r.pop("seconds")
        return d

    local = strip(sweep(**kw))
    remote = strip(sweep(**kw, backend="ray"))
    assert len(local["results"]) == 2 * 3 * 2
    assert local == remote


def test_cli_sweep_backend_usage_errors(tmp_path, capsys):
    from ldp_audit.cli import main

    out = tmp_path / "sweep"
    with pytest.raises(SystemExit) as ei:  # argparse choices
        main(["attack", "sweep", "--backend", "dask", "--out", str(out)])
    assert ei.value.code == 2
    code = main(["attack", "sweep", "--address", "auto", "--out", str(out), "--no-progress"])
    assert code == 2
    assert "--address applies to --backend ray only, got --backend local" in capsys.readouterr().err
    assert not out.exists()  # refused before any work


def test_train_runs_ray_equals_local(ray_local, tmp_path):
    """The trainer grid hook: PGC-A3C runs as Ray tasks give the local results bit for bit,
    each writing its own run directory."""
    from ldp_audit.backends import train_runs
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
    from ldp_audit.training.pgc_a3c.grid import train

    cfgs = [
        PgcA3cConfig(mechanism=m, epsilon=5.0, trials=2, max_submissions=30)
        for m in ("laplace", "prs")
    ]
    local = train_runs(train, [(c, 7, None) for c in cfgs])
    tasks = [(c, 7, tmp_path / f"run{i}") for i, c in enumerate(cfgs)]
    remote = train_runs(train, tasks, backend="ray")
    for a, b in zip(local, remote, strict=True):
        assert a.zeta.tobytes() == b.zeta.tobytes()
        assert a.theta.tobytes() == b.theta.tobytes()
    assert all((tmp_path / f"run{i}" / "manifest.json").exists() for i in range(2))
    with pytest.raises(InvalidParameterError, match="must not share a run_dir"):
        train_runs(train, [(cfgs[0], 1, tmp_path / "x"), (cfgs[1], 2, tmp_path / "x")])
    with pytest.raises(InvalidParameterError, match="seed must be an integer"):
        train_runs(train, [(cfgs[0], "1", None)])


def test_grid_runs_ray_equals_train_grid(ray_local, tmp_path):
    """Chunks of the grid as batched Ray tasks: bit for bit one train_grid call."""
    from ldp_audit.backends import grid_runs
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
    from ldp_audit.training.pgc_a3c.grid import train_grid

    cfgs = [
        PgcA3cConfig(mechanism=m, epsilon=e, trials=2, max_submissions=30)
        for m in ("laplace", "prs")
        for e in (1.0, 5.0)
    ]
    seeds = [3, 4, 5, 6]
    one = train_grid(cfgs, seed=seeds, progress=False)
    dirs = [tmp_path / f"run{i}" for i in range(4)]
    got = grid_runs(train_grid, cfgs, seeds, dirs, chunks=2, backend="ray")
    for a, b in zip(one, got, strict=True):
        assert a.config == b.config
        assert a.zeta.tobytes() == b.zeta.tobytes() and a.theta.tobytes() == b.theta.tobytes()
    assert all((d / "manifest.json").exists() for d in dirs)
    with pytest.raises(InvalidParameterError, match="same length"):
        grid_runs(train_grid, cfgs, seeds[:2])
    with pytest.raises(InvalidParameterError, match="chunks must be an integer >= 1"):
        grid_runs(train_grid, cfgs, seeds, chunks=0)


def test_unreachable_ray_cluster_is_a_usage_error(monkeypatch):
    """`--backend ray --address auto` with no cluster: Ray's ConnectionError reached the user as
    an internal error (exit 3, traceback); now InvalidParameterError naming the address."""
    import sys
    import types

    def init(**kw):
        raise ConnectionError("Could not find any running Ray instance")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init)
    monkeypatch.setitem(sys.modules, "ray", fake)
    from ldp_audit.backends import init_ray

    with pytest.raises(InvalidParameterError, match=r"address 'auto': no Ray cluster could be"):
        init_ray("auto", None)
