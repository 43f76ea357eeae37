"""Size limits and non-regular input files (issue 28, "Signals and sizes").

Every size-like option is estimated (ldp_audit.limits, ldp_audit.training.sizes) and refused
before any allocation when its memory or time estimate exceeds the limits, unless ``--force``;
a FIFO given as (or found in) an input is refused, naming it, before anything opens it.
"""

from __future__ import annotations

import json
import os
import signal
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from ldp_audit import limits
from ldp_audit.cli import main
from ldp_audit.errors import InvalidParameterError, RunDirectoryError

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")


@pytest.fixture
def _no_hang():
    """A FIFO opened by mistake blocks forever: fail after 60 s instead. Only for the FIFO tests:
    the alarm raises wherever the test is, so a test that trains (a cold Numba compile and two
    runs: 8 s of CPU) failed at a load of 12-19 (inside a compile, or out of a training step)."""

    def fail(signum, frame):  # noqa: ANN001
        raise AssertionError("the command blocked (a FIFO was opened?)")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture(autouse=True)
def _default_limits(monkeypatch: pytest.MonkeyPatch):
    for var in (limits.MEMORY_ENV, limits.TIME_ENV, limits.FORCE_ENV):
        monkeypatch.delenv(var, raising=False)


# ----------------------------------------------------------------------------------------------
# The issue's examples: refused fast, nothing allocated, nothing written
# ----------------------------------------------------------------------------------------------

ISSUE_EXAMPLES = [
    (["train", "dprl", "--algo", "reinforce", "--privacy", "dpsgd", "--hidden", "100000000"],
     "--hidden 100000000"),
    (["train", "dprl", "--algo", "reinforce", "--privacy", "dpsgd", "--num-envs", "1000000000"],
     "--num-envs 1000000000"),
    (["train", "frd", "--groups", "1000000"], "--groups 1000000"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "option"), ISSUE_EXAMPLES, ids=["hidden", "num-envs", "groups"])
def test_issue_example_refused_before_any_allocation(argv, option, tmp_path, capsys) -> None:
    out = tmp_path / "run"
    full = [*argv, "--out", str(out), "--no-progress"]
    assert main(full) == 2  # imports warmed
    capsys.readouterr()
    tracemalloc.start()
    t0 = time.process_time()
    try:
        code = main(full)
        cpu = time.process_time() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err
    assert code == 2
    # the message names the option, an estimate and the limit, and how to override
    assert option in err and "estimate" in err and "memory limit" in err, err
    assert "iB" in err and "--force" in err, err
    # measured 2026-11-26: 0.06 s CPU, 0.26 MiB traced; the bounds leave a factor of 30 and 190
    assert cpu < 2.0, cpu
    assert peak < 50 * 2**20, peak
    assert not out.exists()  # nothing written


def test_library_refuses_and_force_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    from ldp_audit.training import frd
    from ldp_audit.training.dprl.config import DprlConfig
    from ldp_audit.training.dprl.trainer import train

    with pytest.raises(InvalidParameterError, match=r"hidden=100000000 .*force=True"):
        train(DprlConfig(hidden=100_000_000))
    with pytest.raises(InvalidParameterError, match=r"groups=1000000 "):
        frd.train(frd.FrdConfig(groups=1_000_000), seed=0)
    with pytest.raises(InvalidParameterError, match=r"groups=1000000 "):
        frd.train_many([frd.FrdConfig(groups=1_000_000)], seed=0)
    # a tiny run under a tiny limit: refused, then let through by force=True (same result as
    # without any limit: the check only reads the config); no wall-clock alarm (a loaded
    # machine's slowness must not fail it)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    cfg = frd.FrdConfig(n_agents=2, groups=1, sections=10, exchange_period=3,
                        initial_episodes=2, hidden=8, layers=1, max_episodes=6,
                        stop_at_mission=False)  # fmt: skip
    free = frd.train(cfg, seed=3)
    monkeypatch.setenv(limits.MEMORY_ENV, "1K")
    with pytest.raises(InvalidParameterError, match=r"1\.0 KiB memory limit"):
        frd.train(cfg, seed=3)
    forced = frd.train(cfg, seed=3, force=True)
    assert np.array_equal(forced.scores, free.scores, equal_nan=True)
    assert forced.gravity.tolist() == free.gravity.tolist()


def test_cli_force_lets_a_moderately_oversized_run_through(tmp_path, monkeypatch, capsys) -> None:
    argv = ["train", "frd", "--agents", "2", "--groups", "1", "--sections", "10",
            "--exchange-period", "3", "--initial-episodes", "2", "--hidden", "8", "--layers", "1",
            "--max-episodes", "6", "--no-stop-at-mission", "--no-progress"]  # fmt: skip
    monkeypatch.setenv(limits.MEMORY_ENV, "64K")  # the run's estimate: 350 MiB (the process)
    assert main([*argv, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "64.0 KiB memory limit" in err and "--force" in err
    assert not (tmp_path / "a").exists()
    assert main([*argv, "--out", str(tmp_path / "b"), "--force"]) == 0
    assert json.loads((tmp_path / "b" / "config.json").read_text())["config"]["groups"] == 1


# ----------------------------------------------------------------------------------------------
# Every size-like option of every command
# ----------------------------------------------------------------------------------------------

BIG = "1000000000000"
SIZE_OPTIONS = [
    (["train", "dprl", "--algo", "reinforce", "--privacy", "dpsgd"], "--hidden", "100000000"),
    (["train", "dprl", "--algo", "reinforce", "--privacy", "dpsgd"], "--num-envs", "1000000000"),
    (["train", "dprl", "--algo", "reinforce", "--privacy", "dpsgd"], "--episodes", BIG),
    (["train", "dprl", "--algo", "dqn", "--privacy", "dpsgd"], "--total-steps", BIG),
    (["train", "dprl", "--algo", "dqn", "--privacy", "obs-noise"], "--num-envs", "1000000000"),
    # session 56: trained, then exit 3 from gymnasium ("array is too big") at 2**63 - 1 (above
    # the option's cap since session 57: test_dprl_cli)
    (["train", "dprl", "--algo", "reinforce", "--privacy", "none"], "--eval-episodes", "100000000"),
    (["train", "frd"], "--groups", "1000000"),
    (["train", "frd"], "--agents", "100000000"),
    (["train", "frd"], "--hidden", "10000000"),
    (["train", "frd"], "--layers", "100000000"),
    (["train", "frd"], "--max-episodes", BIG),
    (["train", "fedrl", "--t-max", "100"], "--size", "1000000"),
    (["train", "fedrl"], "--n-maps", "10000000000"),
    (["train", "fedrl"], "--train-steps", "10000000000"),
    (["train", "fedrl"], "--n-envs", "10000000000"),
    (["train", "fedrl"], "--runs", "10000000"),
    (["train", "pgc-a3c", "--mechanism", "none"], "--trials", "100000"),
    (["train", "pgc-a3c", "--mechanism", "none", "--trials", "9"], "--max-submissions", "9999999"),
    (["reproduce", "pgc-a3c"], "--trials", "100000"),
    (["reproduce", "dprl"], "--episodes", BIG),
    (["reproduce", "dprl"], "--total-steps", BIG),
    (["reproduce", "frd"], "--groups", "1000000"),
    (["reproduce", "frd"], "--max-episodes", BIG),
    (["reproduce", "frd"], "--leak-groups", "100000000"),
    (["reproduce", "frd"], "--leak-shadow", "100000000"),
    (["reproduce", "fedrl"], "--n-maps", "10000000000"),
    (["reproduce", "fedrl"], "--runs", "10000000"),
    (["reproduce", "fedrl"], "--fig4-runs", "10000000"),
    # the option the user set is named, not a default one (session 57: --groups 1, --eval-maps
    # 800, --sections 100, --trials 20 and --train-steps 2000 were named)
    (["train", "frd", "--mode", "frd", "--epsilon", "1"], "--ldp-samples", "1000000000"),
    (["train", "frd"], "--episode-steps", "100000000"),
    (["train", "frd"], "--exchange-period", "100000000"),
    (["train", "fedrl"], "--t-max", "100000000"),
    (["reproduce", "pgc-a3c"], "--figure2-trials", "30000"),
    (["reproduce", "fedrl"], "--fig4-steps", "100000000000"),
    # counted since session 57 (a reproduction trained its grid, then failed evaluating)
    (["reproduce", "dprl"], "--eval-episodes", "100000000"),
]


@pytest.mark.parametrize(
    ("head", "option", "value"),
    SIZE_OPTIONS,
    ids=[f"{' '.join(h[:2])} {o}" for h, o, _ in SIZE_OPTIONS],
)
def test_every_size_option_is_bounded(head, option, value, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    assert main([*head, option, value, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{option} {value}" in err and "--force" in err, err
    assert not out.exists()


def test_attack_frd_shadow_is_bounded(tmp_path, capsys) -> None:
    from ldp_audit.training.frd.config import FrdConfig

    run = tmp_path / "run"
    run.mkdir()
    mech = {"name": "none"}  # the reader refuses a mechanism without a name
    doc = {"algorithm": "frd", "config": FrdConfig().to_dict(), "mechanism": mech, "seed": 0}
    (run / "config.json").write_text(json.dumps(doc))
    assert main(["attack", "frd", "--run-dir", str(run), "--shadow", "100000000"]) == 2
    err = capsys.readouterr().err
    assert "--shadow 100000000" in err and "--force" in err, err
    assert sorted(p.name for p in run.iterdir()) == ["config.json"]


def test_every_command_with_size_options_has_force() -> None:
    import argparse

    from ldp_audit.cli import build_parser

    def sub(p: argparse.ArgumentParser, *path: str) -> argparse.ArgumentParser:
        for name in path:
            acts = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
            p = acts[0].choices[name]
        return p

    parser = build_parser()
    for path in (("train", "dprl"), ("train", "frd"), ("train", "fedrl"), ("train", "pgc-a3c"),
                 ("reproduce", "dprl"), ("reproduce", "frd"), ("reproduce", "fedrl"),
                 ("reproduce", "pgc-a3c"), ("attack", "frd"), ("attack", "dynamics"),
                 ("attack", "membership"), ("attack", "sweep"), ("audit",)):  # fmt: skip
        opts = {o for a in sub(parser, *path)._actions for o in a.option_strings}
        assert "--force" in opts, path


# ----------------------------------------------------------------------------------------------
# The estimates and the limits themselves
# ----------------------------------------------------------------------------------------------


def test_estimates_follow_the_arithmetic() -> None:
    from ldp_audit.training.dprl.config import DprlConfig
    from ldp_audit.training.frd.config import FrdConfig
    from ldp_audit.training.frd.nets import param_layout
    from ldp_audit.training.sizes import dprl_estimates, frd_estimates

    # FRD's parameter count in closed form equals the trainer's layout (one agent, one group:
    # networks = 5 float64 copies of the parameters + one step's activations)
    for h, n_l in ((24, 2), (8, 1), (64, 3)):
        p = sum(fi * fo + fo for spec in param_layout(h, n_l).values() for _, fi, fo in spec)
        net = {e.what: e.nbytes for e in frd_estimates(FrdConfig(n_agents=1, hidden=h,
                                                                 layers=n_l))}  # fmt: skip
        assert net["the agents' networks"] == 5 * 8 * p + h * n_l * 8 * 8

    small, big = DprlConfig(hidden=128), DprlConfig(hidden=1280)
    net = {e.what: e.nbytes for e in dprl_estimates(small)}["the networks"]
    net10 = {e.what: e.nbytes for e in dprl_estimates(big)}["the networks"]
    # parameters are linear in the width for REINFORCE's 4-h-2 net (7h + 2)
    assert net10 / net == pytest.approx((7 * 1280 + 2) / (7 * 128 + 2))
    # at least the parameters, gradients and Adam's moments in float32
    assert net >= 4 * 4 * small.n_params


def test_check_resources_limits_and_force(monkeypatch: pytest.MonkeyPatch) -> None:
    e = [limits.Estimate("--x 5", "the things", nbytes=3 * 2**20, seconds=10.0)]
    monkeypatch.setenv(limits.MEMORY_ENV, "2M")
    with pytest.raises(InvalidParameterError, match=r"--x 5 needs about 3\.0 MiB for the things"):
        limits.check_resources(e, force=False, cli=True)
    assert limits.check_resources(e, force=True)["bytes"] == 3 * 2**20
    with limits.forcing():  # what --force sets for a reproduction's runs and workers
        limits.check_resources(e, force=False)
    assert os.environ.get(limits.FORCE_ENV) is None
    monkeypatch.setenv(limits.MEMORY_ENV, "4M")
    limits.check_resources(e, force=False)
    monkeypatch.setenv(limits.TIME_ENV, "5")
    with pytest.raises(InvalidParameterError, match=r"at least 10 s of compute"):
        limits.check_resources(e, force=False)
    monkeypatch.setenv(limits.MEMORY_ENV, "lots")
    with pytest.raises(InvalidParameterError, match=limits.MEMORY_ENV):
        limits.check_resources(e, force=False)
    # session 53: "0.1" was a limit of 0 bytes; "1_0" and a full-width "１" were read as numbers
    mem_time = limits.MEMORY_ENV, limits.TIME_ENV
    for env, text in zip(mem_time + mem_time[1:], ("0.1", "1_0", "１"), strict=True):
        monkeypatch.setenv(env, text)
        with pytest.raises(InvalidParameterError, match=rf"^{env} must be .*got '{text}'$"):
            limits.check_resources(e, force=False)
        monkeypatch.setenv(env, "4M" if env == limits.MEMORY_ENV else "5")
    with pytest.raises(InvalidParameterError, match="force"):
        limits.check_resources(e, force="yes")  # type: ignore[arg-type]
    monkeypatch.delenv(limits.MEMORY_ENV)
    mem, how = limits.memory_limit()
    total = limits.physical_memory()
    assert mem == min(limits.MEMORY_CAP, total // 2) if total else mem == 8 * 2**30, how


# ----------------------------------------------------------------------------------------------
# Non-regular input files
# ----------------------------------------------------------------------------------------------


def _fifo_run(tmp_path: Path, fifo_name: str = "transcript.npz") -> Path:
    run = tmp_path / "run"
    run.mkdir()
    doc = {"algorithm": "frd", "config": {}, "mechanism": {}, "seed": 0}
    if fifo_name != "config.json":
        (run / "config.json").write_text(json.dumps(doc))
    os.mkfifo(run / fifo_name)
    return run


FIFO_COMMANDS = [
    ["report", "{run}"],
    ["attack", "membership", "--run-dir", "{run}"],
    ["attack", "dynamics", "--run-dir", "{run}"],
    ["attack", "frd", "--run-dir", "{run}"],
    ["attack", "fedrl", "--run-dir", "{run}"],
    ["audit", "--run-dir", "{run}"],
    ["budget", "{run}", "--verify"],
    ["train", "dprl", "--algo", "dqn", "--privacy", "none", "--resume", "--out", "{run}"],
    ["train", "frd", "--resume", "--out", "{run}"],
    ["train", "pgc-a3c", "--mechanism", "none", "--resume", "--out", "{run}"],
]


@pytest.mark.usefixtures("_no_hang")
@pytest.mark.parametrize("fifo_name", ["transcript.npz", "config.json", "ledger.sqlite"])
@pytest.mark.parametrize("argv", FIFO_COMMANDS, ids=[" ".join(a[:2]) for a in FIFO_COMMANDS])
def test_a_fifo_in_a_run_is_refused_by_every_reader(argv, fifo_name, tmp_path, capsys) -> None:
    run = _fifo_run(tmp_path, fifo_name)
    code = main([a.format(run=run) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert str(run / fifo_name) in err and "FIFO" in err, err


@pytest.mark.usefixtures("_no_hang")
@pytest.mark.parametrize(
    "argv",
    [
        ["budget", "{f}"],
        ["report", "{f}"],
        ["attack", "frd", "--run-dir", "{f}"],
        ["attack", "membership", "--run-dir", "{f}"],
    ],  # fmt: skip
    ids=["budget", "report", "attack frd", "attack membership"],
)
def test_a_fifo_given_as_the_input_is_refused(argv, tmp_path, capsys) -> None:
    f = tmp_path / "pipe"
    os.mkfifo(f)
    assert main([a.format(f=f) for a in argv]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and "FIFO" in err, err


@pytest.mark.usefixtures("_no_hang")
def test_library_readers_refuse_a_fifo(tmp_path: Path) -> None:
    from ldp_audit import rundir

    run = _fifo_run(tmp_path)
    with pytest.raises(RunDirectoryError, match="FIFO"):
        rundir.read_npz(run, "transcript.npz")
    with pytest.raises(RunDirectoryError, match="FIFO"):
        rundir.verify_run(run)
    os.mkfifo(run / "metrics.json")
    with pytest.raises(RunDirectoryError, match=r"metrics\.json.*FIFO"):
        rundir.read_json(run, "metrics.json")


@pytest.mark.usefixtures("_no_hang")
@pytest.mark.parametrize(
    "argv",
    [
        ["budget", "{d}", "--verify"],
        ["budget", "{d}"],
        ["report", "{d}"],
        ["audit", "--run-dir", "{d}"],
    ],
    ids=["budget --verify", "budget", "report", "audit"],
)
def test_a_folder_that_is_no_run_is_refused_unwalked(argv, tmp_path, capsys, monkeypatch) -> None:
    """``budget /work --verify`` walked every folder under /work and hashed every file (11 min
    56 s, 2026-12-07) before saying /work/ledger.sqlite was missing; ``report /usr`` walked /usr
    and named a link to /dev/null. A folder holding none of config.json, manifest.json and
    ledger.sqlite is refused as no run without a walk (the FIFO below would be named)."""
    d = tmp_path / "home"
    (d / "deep" / "er").mkdir(parents=True)
    (d / "deep" / "er" / "notes.txt").write_text("x")
    os.mkfifo(d / "deep" / "pipe")
    walked: list[str] = []
    real_walk = os.walk

    def walk(top, *args, **kwargs):
        walked.append(str(top))
        return real_walk(top, *args, **kwargs)

    monkeypatch.setattr(os, "walk", walk)
    assert main([a.format(d=d) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "not a run" in err or "does not exist" in err, err
    assert "FIFO" not in err and not [w for w in walked if w.startswith(str(d))], (err, walked)


def test_audit_exact_probe_is_bounded(capsys) -> None:
    argv = ["audit", "--mechanism", "laplace", "--epsilon", "1", "--dim", "1000000", "--exact"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--exact with --dim 1000000" in err and "--force" in err, err


@pytest.mark.parametrize("attack", ["dynamics", "membership"])
def test_simulated_attack_sizes_are_bounded(attack, tmp_path, capsys) -> None:
    # each option is within its own bound; their product is what the attack holds
    out = tmp_path / "a.json"
    argv = ["attack", attack, "--agents", "1000000", "--reports-per-agent", "10000"]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--reports-per-agent 10000" in err and "TiB" in err and "--force" in err, err
    assert not out.exists()


def test_gym_env_sizes_are_bounded(tmp_path, capsys) -> None:
    # --agents and --hidden are each within their bounds; a Gymnasium run holds their product
    out = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--mechanism", "none", "--env", "Acrobot-v1",
            "--private-param", "LINK_MASS_1=0.5,1,2", "--agents", "100000", "--hidden", "4096",
            "--episode-steps", "1000000", "--out", str(out)]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--agents 100000" in err and "TiB" in err and "--force" in err, err
    assert not out.exists()


def test_attack_sweep_cells_are_bounded(tmp_path, capsys) -> None:
    out = tmp_path / "sweep"
    argv = ["attack", "sweep", "--agents", "1000000", "--shadow", "1000000", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--agents 1000000" in err and "GiB" in err and "--force" in err, err
    assert not out.exists()


def test_attack_frd_estimate_counts_the_private_parameters_candidates() -> None:
    """A run on another private parameter (three lengths, one gravity) costs the shadow run of
    three candidates, as a three-gravity run does (it was counted as k = 1)."""
    from ldp_audit.training.frd.config import FrdConfig
    from ldp_audit.training.sizes import frd_attack_estimates

    by_length = FrdConfig(private_param="length", private_values=(0.25, 0.5, 1.0))
    by_gravity = FrdConfig(gravities=(9.7, 9.8, 9.9))
    one = FrdConfig(gravities=(9.8, 9.9))
    assert len(by_length.candidates) == 3 and len(by_length.gravities) == 1
    cost = [(e.nbytes, e.seconds) for e in frd_attack_estimates(by_length, 100)]
    assert cost == [(e.nbytes, e.seconds) for e in frd_attack_estimates(by_gravity, 100)]
    assert cost != [(e.nbytes, e.seconds) for e in frd_attack_estimates(one, 100)]


def test_estimates_within_twice_the_measured_peak() -> None:
    """Every size estimate of the committed table (benchmarks/memory_sizes.py: PGC-A3C reproduce
    and train, its Gymnasium path, the smallest DP-RL, FRD and FedRL train and reproduce runs,
    the simulated attacks and sweep) is within a factor of 2 of the peak memory measured for it
    (the summed resident memory of the command's processes; make reproduce extrapolated from
    the per-submission slope), recomputed by today's code (the benchmark's config -> estimate);
    each row's recorded command is the one the script runs for its case today (the sweep's row
    kept the removed ``--quiet`` until session 52)."""
    import importlib.util

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "memory_sizes", root / "benchmarks/memory_sizes.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = json.loads((root / "benchmarks/results/memory_sizes.json").read_text())
    cases = {r["case"] for r in rows}
    assert {"base", "workers 2", "train", "make reproduce (extrapolated)"} <= cases
    assert {f"{c} {t}" for c in ("train", "reproduce") for t in ("dprl", "frd", "fedrl")} <= cases
    assert {
        "train gym, max-submissions 20000",
        "attack dynamics",
        "attack sweep",
        "attack frd",
        "audit --exact, dim 1000",
        "reproduce fedrl, attack",
        "train gym, max-submissions 40000",
        "attack dynamics, train-submissions 40k",
        "train fedrl, clip-outputs 1",
    } <= cases
    assert {f"reproduce {t}, workers 2" for t in ("dprl", "frd", "fedrl")} <= cases
    for r in rows:
        est = bench.estimate(r["config"])
        assert 0.5 <= est / r["peak_sum"] <= 2.0, (r["case"], est, r["peak_sum"])
        if r["case"] in bench.CASES:  # the command recorded is the one the script runs today
            assert r["args"] == " ".join(bench.CASES[r["case"]][0]), r["case"]
    for case in ("make reproduce (extrapolated)", "make reproduce (measured)"):
        full = next(r for r in rows if r["case"] == case)
        assert full["peak_sum"] <= 2e9  # the issue's goal: make reproduce within 2 GB


def test_reproduce_pgc_estimate_counts_figure2_and_workers() -> None:
    """The reproduction's check counts the Figure 2 runs and one process per worker (it
    counted neither, and no tally: 0.41 GiB for the 12.6 GB of make reproduce)."""
    from ldp_audit.training.pgc_a3c.reproduce import ReproduceConfig
    from ldp_audit.training.sizes import pgc_reproduce_estimates

    def parts(**kw: object) -> dict[str, float]:
        cfg = ReproduceConfig(trials=20, max_submissions=90_000, **kw)
        return {e.what: e.nbytes for e in pgc_reproduce_estimates(cfg) if e.nbytes}

    one, fig2, two = parts(workers=1, figure2=False), parts(workers=1), parts(workers=2)
    cells = "the per-submission results"
    assert fig2[cells] == pytest.approx(one[cells] * 14 / 10)  # 4 Figure 2 settings
    assert two["the Python processes"] == 3 * one["the Python processes"]  # + 2 workers
    assert sum(two.values()) >= 1.2 * 2**30


def test_reproduce_fedrl_estimate_counts_what_each_task_holds() -> None:
    """``reproduce fedrl`` trains each Table 1 (method, run) as a task of its own, without a
    transcript (record=False), and records only the short attack runs, each clipped one then
    composing its spent epsilon as a PLD at the planner's cap (720 MiB measured): the check
    counted five runs' replay memories and a transcript of every Table 1 step per worker,
    92.5 GiB for the Makefile's reproduce-fedrl (20 workers), which then needed --force, and
    no PLD (422 MiB estimated, 1,237 MiB measured for one clipped attack run)."""
    from ldp_audit.accountant.pld import MAX_POINTS
    from ldp_audit.training.fedrl.reproduce import ReproConfig
    from ldp_audit.training.sizes import fedrl_reproduce_estimates

    def est(workers: int = 1, **kw: object) -> tuple[float, float, list[str]]:
        rc = ReproConfig(**{"sizes": (8,), "runs": 5, "train_steps": (32000,), "hist_lens": (),
                            "attack_steps": 250, **kw})  # fmt: skip
        parts = fedrl_reproduce_estimates(rc, workers=workers)
        mem = [e for e in parts if e.nbytes]
        return sum(e.nbytes for e in mem), sum(e.seconds for e in parts), [e.option for e in mem]

    make, _, labels = est(workers=20)  # the Makefile's reproduce-fedrl
    assert 9 * 2**30 <= make <= 12 * 2**30  # 20 processes of about 0.42 GiB, 4 clipped PLDs
    assert labels[0] == "--workers 20"  # the processes, the largest part
    one, seconds, _ = est()
    pld = 64 * MAX_POINTS
    assert make == pytest.approx(20 * (one - pld) + 4 * pld)  # 4 clipped attack runs at most
    assert est(attack_sigmas=())[0] < one - pld + 2**20  # no attack, no PLD
    # Table 1 keeps no transcript: its steps cost time, not memory; the attack runs' steps do
    long, long_seconds, _ = est(train_steps=(320000,))
    assert long == one and long_seconds > 9 * seconds
    assert est(attack_steps=25000)[0] > one + 10 * 2**20
    assert est(runs=1)[0] == one  # one run per task, whatever --runs


def test_train_fedrl_estimate_counts_the_pld_of_a_clipped_run() -> None:
    """A clipped FedRL run's privacy table composes its spent epsilon as a PLD at the planner's
    cap (about 0.7 GiB), which the estimate did not count; an unclipped run's is infinite."""
    from ldp_audit.accountant.pld import MAX_POINTS
    from ldp_audit.training.fedrl.config import FedRLConfig
    from ldp_audit.training.sizes import fedrl_estimates

    def parts(**kw: object) -> dict[str, tuple[str, float]]:
        return {e.what: (e.option, e.nbytes) for e in fedrl_estimates(FedRLConfig(**kw), cli=True)}

    clipped, plain = parts(clip_outputs=1.0), parts()
    pld = "the accountant's PLD of the spent epsilon"
    assert clipped[pld] == ("--clip-outputs 1.0", 64 * MAX_POINTS) and plain[pld][1] == 0.0
    assert (
        sum(v for _, v in clipped.values()) - sum(v for _, v in plain.values()) == 64 * MAX_POINTS
    )


@pytest.mark.parametrize("target", ["reproduce-fedrl", "reproduce-fedrl-16"])
def test_make_reproduce_fedrl_passes_the_size_check_without_force(
    target, tmp_path, monkeypatch, capsys
) -> None:
    """The Makefile's FedRL reproductions, with their real settings, pass the memory check of a
    24 GiB machine (12 GiB: half of it) without --force; a 1-second time limit stops each one
    right after the memory check, before any work."""
    root = Path(__file__).resolve().parent.parent
    recipe = root.joinpath("Makefile").read_text().split(f"\n{target}: $(STAMP)\n", 1)[1]
    argv = recipe.split("\n\n", 1)[0].replace("\\\n", " ").split()
    assert argv[0] == "$(BIN)/ldp-audit" and "--force" not in argv
    subst = {"$(FEDRL_WORKERS)": "20", "$(FEDRL16_WORKERS)": "2"}
    argv = [subst.get(a, a) for a in argv[1:]]
    argv[argv.index("--out") + 1] = str(tmp_path / "out")
    monkeypatch.setenv("LDP_AUDIT_MEMORY_LIMIT", "12G")
    monkeypatch.setenv("LDP_AUDIT_TIME_LIMIT", "1")
    monkeypatch.setattr(os, "cpu_count", lambda: 16)  # the machine of the committed report
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "time limit" in err and "memory limit" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_commands_force_reaches_the_audit_and_its_refusal_names_the_option(
    tmp_path, capsys, monkeypatch
) -> None:
    """Session 57: `reproduce fedrl --audit-samples 1e14` read "samples=... lower samples, or
    pass force=True (--force)", and with --force it was refused all the same (the reproduction's
    --force never reached the audit)."""
    import inspect

    from ldp_audit.audit import api, plan
    from ldp_audit.mechanisms import Laplace

    kw = {k: p.default for k, p in inspect.signature(api.audit).parameters.items()}
    kw = {k: v for k, v in kw.items() if v is not inspect.Parameter.empty and k != "pairs"}
    mech = Laplace(epsilon=1.0, clip=1.0)
    assert plan.check_arguments(mech, **kw).force is False
    with limits.forcing():
        assert plan.check_arguments(mech, **kw).force is True
    out = tmp_path / "rep"
    monkeypatch.setattr("ldp_audit.audit.search._MAX_SECONDS", 1e-9)  # any audit is too long
    assert main(["reproduce", "fedrl", "--audit-samples", "5000", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--audit-samples=5000 would take about" in err and "lower it" in err, err
    assert not out.exists()
