"""``reproduce pgc-a3c --backend {local,ray}``: the same results.json on every backend (a real
local Ray instance started here), failures name the setting and seed, a killed worker is retried
without charging any ledger twice, and a progress bar in submissions on stderr.

Ray tests are skipped with a message when Ray is not installed (``pip install 'ldp-audit[ray]'``).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

from ldp_audit.backends import TaskError
from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c import grid, reproduce, reproduce_report

pytest.importorskip("ldp_audit.training.pgc_a3c")

# A tiny version of the paper's grid: 10 settings + 4 Figure 2 runs, 2 trials x 120 submissions.
TINY = ["--trials", "2", "--max-submissions", "120", "--seed", "5", "--no-progress"]
VOLATILE = ("created", "seconds_total")


def _strip(doc: dict) -> dict:
    """results.json without what may differ between backends: timings, the backend itself."""
    doc = json.loads(json.dumps(doc))
    for k in VOLATILE:
        doc.pop(k)
    for k in ("backend", "address", "workers", "chunks", "engine"):
        doc["config"].pop(k, None)
    for group in ("settings", "figure2_runs"):
        for entry in doc.get(group, {}).values():
            entry.pop("seconds")
    return doc


def _reproduce_cli(out: Path, *extra: str) -> dict:
    from ldp_audit.cli import main

    assert main(["reproduce", "pgc-a3c", *TINY, "--out", str(out), *extra]) == 0
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def local_results(tmp_path_factory):
    return _reproduce_cli(tmp_path_factory.mktemp("local") / "rep", "--workers", "1")


def test_ray_results_json_equals_local(ray_local, local_results, tmp_path):
    remote = _reproduce_cli(tmp_path / "ray", "--backend", "ray", "--workers", "2")
    assert remote["config"]["backend"] == "ray" and local_results["config"]["backend"] == "local"
    assert len(local_results["settings"]) == 10 and len(local_results["figure2_runs"]) == 4
    assert _strip(remote) == _strip(local_results)  # every FST, interval, curve: bit for bit
    tables = (tmp_path / "ray" / "tables.md").read_text()
    assert "Table 1" in tables


def test_readings_on_ray_equal_local(ray_local):
    """``--readings`` (43 configs: 4 readings x 2 actings x 5 epsilons + 3 controls) on Ray."""
    from ldp_audit.training.pgc_a3c.readings import ReadingsConfig, run_readings

    kw = dict(trials=1, max_submissions=20, n_resamples=100, audit_samples=1000)
    local = run_readings(ReadingsConfig(**kw, workers=1), progress=False, audit=False)
    remote = run_readings(
        ReadingsConfig(**kw, workers=2, backend="ray"), progress=False, audit=False
    )
    assert len(local["settings"]) == 43
    for doc in (local, remote):
        for k in ("created", "seconds_train"):
            doc.pop(k)
        for k in ("backend", "workers"):
            doc["config"].pop(k)
    assert json.dumps(remote, sort_keys=True) == json.dumps(local, sort_keys=True)
    with pytest.raises(InvalidParameterError, match="address applies to backend='ray' only"):
        ReadingsConfig(address="auto")


def test_local_pool_results_json_equals_one_process(local_results, tmp_path):
    pooled = _reproduce_cli(tmp_path / "pool", "--backend", "local", "--workers", "2")
    assert _strip(pooled) == _strip(local_results)


def test_lockstep_engine_results_json_equals_fused(local_results, tmp_path):
    """The default fused engine and --engine lockstep give the same reproduction, bit for bit."""
    assert local_results["config"]["engine"] == "fused"
    lockstep = _reproduce_cli(tmp_path / "rep", "--workers", "1", "--engine", "lockstep")
    assert lockstep["config"]["engine"] == "lockstep"
    assert _strip(lockstep) == _strip(local_results)


def test_cli_address_without_ray_is_a_usage_error_before_work(tmp_path, capsys):
    from ldp_audit.cli import main

    out = tmp_path / "rep"
    code = main(["reproduce", "pgc-a3c", *TINY, "--address", "auto", "--out", str(out)])
    assert code == 2
    assert "--address applies to --backend ray only, got --backend local" in capsys.readouterr().err
    assert not out.exists()
    with pytest.raises(SystemExit) as ei:
        main(["reproduce", "pgc-a3c", "--backend", "dask", "--out", str(out)])
    assert ei.value.code == 2
    # the command line names its options, never run_tasks' arguments (address=, workers=)
    bad = ["--backend", "ray", "--address", "head"]
    assert main(["reproduce", "pgc-a3c", *TINY, *bad, "--out", str(out)]) == 2
    assert "error: --address must be 'auto', 'local', HOST:PORT" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ei:
        main(["reproduce", "pgc-a3c", "--workers", "0", "--out", str(out)])
    assert ei.value.code == 2
    assert "argument --workers: --workers must be an integer >= 1, got '0'" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as ei:
        main(["reproduce", "pgc-a3c", "--seed", "-1", "--out", str(out)])
    assert ei.value.code == 2
    assert "argument --seed: --seed must be an integer >= 0, got '-1'" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"backend": "spark"}, "backend must be one of"),
        ({"address": "auto"}, "address applies to backend='ray' only"),
        ({"backend": "ray", "address": ""}, "address must be 'auto', 'local', HOST:PORT"),
        ({"backend": "ray", "address": "head"}, "address must be 'auto', 'local', HOST:PORT"),
        ({"chunks": 0}, "chunks must be None or an integer >= 1"),
        ({"chunks": True}, "chunks must be None or an integer >= 1"),
    ],
)
def test_bad_backend_config_refused(kwargs, match):
    with pytest.raises(InvalidParameterError, match=match):
        reproduce.ReproduceConfig(**kwargs)


# --- failure and kill handling: grid functions run by the backend (module level: picklable) ---


def _failing_grid(configs, **kwargs):
    """Raises for the PRS epsilon = 2 setting, like a bug in one cell of the grid."""
    for c in configs:
        if c.mechanism == "prs" and c.epsilon == 2.0:
            raise FloatingPointError("theta became NaN")
    return grid.quiet_train_grid(configs, **kwargs)


def _dying_grid(configs, *, marker, **kwargs):
    """The first task to get here dies after training and charging its (in-memory) ledgers,
    before returning, as if its worker process were killed; later attempts run normally."""
    out = grid.quiet_train_grid(configs, **kwargs)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return out
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os._exit(1)


def _tiny_configs(budget: float | None = None):
    from ldp_audit.training.pgc_a3c.config import PgcA3cConfig

    return [
        PgcA3cConfig(mechanism=m, epsilon=e, trials=2, max_submissions=60, budget=budget)
        for m in ("laplace", "prs")
        for e in (1.0, 2.0)
    ]


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_failing_task_names_setting_and_seed(backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_local")
    cfgs, seeds = _tiny_configs(), [11, 12, 13, 14]
    with pytest.raises(TaskError) as ei:
        reproduce.engine_grid(cfgs, seeds, backend=backend, chunks=4, grid_fn=_failing_grid)
    msg = str(ei.value)
    assert "mechanism='prs', epsilon=2.0" in msg and "seed=14" in msg, msg
    assert "FloatingPointError: theta became NaN" in msg


def test_killed_worker_retried_without_double_charge(ray_local, tmp_path):
    """Each agent's budget is exactly its epsilon, enforced by its ledger: a retry that charged
    the dead attempt's ledger again would exceed it (BudgetExceededError). The ledgers are
    per run and live in the process running it, so the retry starts fresh ones and gives the
    local results bit for bit."""
    marker = tmp_path / "died"
    dying = functools.partial(_dying_grid, marker=str(marker))
    cfgs = _tiny_configs(budget=2.0)  # eps <= 2 per agent: one report each, spent exactly
    seeds = [21, 22, 23, 24]
    local = reproduce.engine_grid(cfgs, seeds)
    remote = reproduce.engine_grid(cfgs, seeds, backend="ray", chunks=2, grid_fn=dying)
    assert marker.exists()  # one worker really died
    for a, b in zip(local, remote, strict=True):
        assert a.zeta.tobytes() == b.zeta.tobytes() and a.theta.tobytes() == b.theta.tobytes()
        assert a.privacy == b.privacy


def _counting_grid(configs, *, calls, **kwargs):
    """quiet_train_grid that leaves one file per call (per task) in ``calls`` (a unique name:
    two tasks run one after the other in one worker may get configs lists with the same id)."""
    import tempfile

    fd, _ = tempfile.mkstemp(prefix=f"{os.getpid()}-{len(configs)}-", dir=calls)
    os.close(fd)
    return grid.quiet_train_grid(configs, **kwargs)


def test_ray_default_chunks_are_the_cpus_ray_has(ray_local, tmp_path):
    counting = functools.partial(_counting_grid, calls=str(tmp_path))
    cfgs, seeds = _tiny_configs(), [1, 2, 3, 4]
    one = reproduce.engine_grid(cfgs, seeds)
    got = reproduce.engine_grid(cfgs, seeds, backend="ray", workers=None, grid_fn=counting)
    calls = [p.name.split("-")[1] for p in tmp_path.iterdir()]
    assert calls == ["2", "2"]  # the fixture's Ray has 2 CPUs: 2 batches of 2 configs
    assert all(a.zeta.tobytes() == b.zeta.tobytes() for a, b in zip(one, got, strict=True))


def test_progress_bar_counts_submissions_on_every_backend(ray_local, capsys):
    cfgs, seeds = _tiny_configs(), [1, 2, 3, 4]
    total = sum(c.trials * c.max_submissions for c in cfgs)
    for kw in ({}, {"backend": "local", "workers": 2}, {"backend": "ray", "chunks": 2}):
        reproduce.engine_grid(cfgs, seeds, progress=True, **kw)
        err = capsys.readouterr().err
        assert "pgc-a3c submissions" in err and f"{total}/{total}" in err, (kw, err[-300:])


def test_committed_config_reruns_on_ray_command_unchanged():
    """backend/address/chunks/workers are not part of the rerun command (results do not
    depend on them)."""
    cfg = {
        **json.loads(
            (Path(__file__).resolve().parents[1] / "reports/pgc-a3c/results.json").read_text()
        )["config"],
        "backend": "ray",
        "address": "auto",
        "chunks": 7,
    }
    cmd = reproduce_report.reproduce_command(cfg)
    assert cmd.startswith("ldp-audit reproduce pgc-a3c --trials 20 --max-submissions 90000")
    assert "ray" not in cmd and "chunks" not in cmd and "auto" not in cmd
