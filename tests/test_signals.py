"""SIGINT / SIGTERM end every command within 2 s of delivery, with the documented exit code
(130 / 143), also when the command is inside compiled code, a pool's shutdown, or a library that
swallows the signal (issue 28). Each case runs a real process and sends a real signal.

The 2 s bound is measured from ``send_signal`` to the process's exit as seen by ``wait``: the
watchdog's grace is 1 s, so a pass needs the machine to schedule a sleeping thread within about
a second, which holds on any machine that can run the suite."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ldp_audit.cli.signals import SignalWatchdog
from tests.waiting import ledger_rows, wait_for_charges

LIMIT_S = 2.0


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default. A test run started as a background
    job of a non-interactive shell (nohup ... &) has SIGINT ignored, and children inherit that;
    Python and ldp-audit then rightly keep ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


LDP_AUDIT = [sys.executable, "-m", "ldp_audit.cli"]


def _wait_exit(p: subprocess.Popen, sig: int, trace: Path | None = None) -> tuple[int, float]:
    """Send ``sig``; return the exit code and the seconds from delivery to exit. Delivery is
    the first time the watchdog saw the signal (its trace file, CLOCK_MONOTONIC like ours) where
    there is a trace, else the moment it was sent: a process inside an uninterruptible system
    call (an fsync on a busy disk) receives a signal only when the call returns."""
    t = time.monotonic()
    p.send_signal(sig)
    try:
        rc = p.wait(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure this test is about
        p.kill()
        p.wait()
        raise AssertionError(f"signal {sig} ignored for 30 s") from None
    end = time.monotonic()
    if trace is not None and trace.exists():
        seen = [float(line.split()[2]) for line in trace.read_text().splitlines() if line]
        if seen:
            t = max(t, min(seen))
    return rc, end - t


def _started(p: subprocess.Popen, marker: Path, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while not marker.exists():
        if p.poll() is not None:
            raise AssertionError(f"exited early with {p.returncode}: {p.stderr.read()[-2000:]}")
        if time.monotonic() - t0 > timeout:
            p.kill()
            raise AssertionError(f"{marker} never appeared")
        time.sleep(0.1)


def test_grace_is_validated() -> None:
    for bad in (0, -1, 11, True, "1", float("nan")):
        with pytest.raises(ValueError, match="grace"):
            SignalWatchdog(grace=bad)  # type: ignore[arg-type]


_SWALLOW = textwrap.dedent(
    """
    import signal, sys, time
    from ldp_audit.cli.signals import SignalWatchdog
    dog = SignalWatchdog(grace=1.0)
    assert dog.install()
    signal.signal(signal.SIGTERM, lambda s, f: None)   # a library that swallows the signal
    open(sys.argv[1], "w").close()
    for _ in range(600):
        time.sleep(0.1)
    sys.exit(0)
    """
)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_watchdog_ends_a_process_that_does_not_stop(tmp_path: Path, sig: int, code: int) -> None:
    """The Python handler does nothing (SIGINT: KeyboardInterrupt caught and ignored), so only
    the watchdog can end the process: it does so after its 1 s grace, with the code."""
    src = _SWALLOW
    if sig == signal.SIGINT:
        src = src.replace(
            "for _ in range(600):\n    time.sleep(0.1)",
            "for _ in range(600):\n    try:\n        time.sleep(0.1)\n"
            "    except KeyboardInterrupt:\n        pass",
        )
    marker = tmp_path / "ready"
    p = subprocess.Popen(
        [sys.executable, "-c", src, str(marker)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    _started(p, marker)
    rc, dt = _wait_exit(p, sig)
    err = p.stderr.read()
    assert rc == code, err
    assert 0.9 <= dt <= LIMIT_S, (dt, err)
    assert "forced exit" in err


def test_the_first_signal_calls_the_registered_hooks_at_once() -> None:
    """``on_signal`` hooks run from the watchdog's thread at the first SIGINT / SIGTERM, before
    the grace (``train pgc-a3c``'s fused engine ends its compiled block with one); a hook
    that raises does not stop the others; a removed one is not called."""
    from ldp_audit.interrupts import on_signal

    dog = SignalWatchdog(grace=10.0)
    dog._later = lambda signum: None  # no forced exit in this process
    calls: list[str] = []

    def bad() -> None:
        raise RuntimeError("x")

    removers = [on_signal(lambda: calls.append("a")), on_signal(bad), on_signal(calls.clear)]
    removers[2]()
    try:
        dog._arm(int(signal.SIGTERM), "pipe")
        dog._arm(int(signal.SIGTERM), "handler")  # the same delivery seen by the handler
    finally:
        for r in removers:
            r()
    assert calls == ["a"]


_CLOSING = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    from ldp_audit.cli.signals import SignalWatchdog
    from ldp_audit.interrupts import closing
    dog = SignalWatchdog(grace=0.2)
    assert dog.install()
    signal.signal(signal.SIGTERM, lambda s, f: None)   # seen, then the slow close below
    trace, closed = Path(sys.argv[2]), Path(sys.argv[3])
    with closing():
        open(sys.argv[1], "w").close()
        while not trace.exists():                # the watchdog has seen the signal
            time.sleep(0.005)
        time.sleep(0.6)                          # a run's files fsynced on a loaded disk
        closed.touch()
    for _ in range(600):
        time.sleep(0.1)
    """
)


def test_the_forced_exit_waits_for_a_run_being_closed(tmp_path: Path) -> None:
    """Session 54: the files of a run closed as "interrupted" (transcript, manifest, each
    fsynced) took longer than the grace at load 13, and the forced exit left it "running".
    Inside ``closing()`` the forced exit waits for the close (bounded), then ends the process
    with the code; the grace is 0.2 s and the close 0.6 s after the signal was seen."""
    marker, trace, closed = tmp_path / "ready", tmp_path / "trace", tmp_path / "closed"
    p = subprocess.Popen(
        [sys.executable, "-c", _CLOSING, str(marker), str(trace), str(closed)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LDP_AUDIT_SIGNAL_TRACE": str(trace)},
    )
    _started(p, marker)
    rc, dt = _wait_exit(p, signal.SIGTERM, trace)
    err = p.stderr.read()
    assert rc == 143 and "forced exit" in err, err
    assert closed.exists(), (dt, err)  # not cut off at the 0.2 s grace
    assert dt <= 0.6 + LIMIT_S, (dt, err)


def test_second_signal_ends_at_once(tmp_path: Path) -> None:
    src = _SWALLOW.replace("grace=1.0", "grace=8.0")
    marker = tmp_path / "ready"
    p = subprocess.Popen(
        [sys.executable, "-c", src, str(marker)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    _started(p, marker)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert p.poll() is None  # the 8 s grace is running
    rc, dt = _wait_exit(p, signal.SIGTERM)
    assert rc == 143 and dt <= LIMIT_S
    assert "a second signal" in p.stderr.read()


_COMMANDS = {
    "train-dprl": ["train", "dprl", "--algo", "dqn", "--privacy", "dpsgd", "--total-steps",
                   "500000", "--out", "{run}"],
    "train-pgc-a3c": ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "5",
                      "--trials", "8", "--out", "{run}"],
    "train-fedrl": ["train", "fedrl", "--out", "{run}"],
    "train-frd": ["train", "frd", "--out", "{run}"],
}  # fmt: skip


def _run_and_signal(tmp_path: Path, name: str, sig: int) -> tuple[int, float, str]:
    run = tmp_path / "run"
    argv = [a.format(run=run) for a in _COMMANDS[name]]
    trace = tmp_path / "signal-trace"
    env = {**os.environ, "LDP_AUDIT_PROGRESS": "never", "LDP_AUDIT_SIGNAL_TRACE": str(trace)}
    p = subprocess.Popen(
        [*LDP_AUDIT, *argv],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_default_sigint,
    )
    _started(p, run / "config.json")
    wait_for_charges(run, p)  # inside the training loop: the ledger has its first charge
    rc, dt = _wait_exit(p, sig, trace)
    return rc, dt, p.stderr.read()


def test_train_dprl_sigint_within_2s(tmp_path: Path) -> None:
    rc, dt, err = _run_and_signal(tmp_path, "train-dprl", signal.SIGINT)
    assert rc == 130, err[-2000:]
    assert dt <= LIMIT_S, (dt, err[-2000:])
    assert "Traceback" not in err


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_COMMANDS))
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_every_trainer_ends_within_2s(tmp_path: Path, name: str, sig: int, code: int) -> None:
    rc, dt, err = _run_and_signal(tmp_path, name, sig)
    assert rc == code, err[-2000:]
    assert dt <= LIMIT_S, (dt, err[-2000:])
    assert "Traceback" not in err


_IN_IMPORTS = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import ldp_audit.cli as cli

    real, marker = cli.build_parser, Path(sys.argv[1])

    def build_parser(argv=None):  # the import phase: the subcommands' modules load here
        marker.touch()
        for _ in range(6000):
            time.sleep(0.01)
        return real(argv)

    cli.build_parser = build_parser
    sys.argv = ["ldp-audit", "audit", "--mechanism", "laplace", "--epsilon", "1"]
    sys.exit(cli.main())
    """
)


def test_ctrl_c_while_the_commands_import_is_130_without_a_traceback(tmp_path: Path) -> None:
    """Issue 38 item 7: a Ctrl-C before the command started (its modules still importing)
    printed a KeyboardInterrupt traceback."""
    marker = tmp_path / "importing"
    p = subprocess.Popen(
        [sys.executable, "-c", _IN_IMPORTS, str(marker)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    _started(p, marker)
    rc, dt = _wait_exit(p, signal.SIGINT)
    err = p.stderr.read()
    assert rc == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "ldp-audit: interrupted" in err
    assert dt <= LIMIT_S


_BEFORE_THE_TRAINERS_HANDLER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import ldp_audit.cli as cli
    import ldp_audit.rundir.writer as w

    real, marker = w.RunWriter.open_ledger, Path(sys.argv[1])
    real_write = w.write_json_file

    def wait():
        marker.touch()
        for _ in range(6000):
            time.sleep(0.01)

    def open_ledger(self, **kw):  # the window after config.json, before the trainer's handler
        wait()
        return real(self, **kw)

    def write_json_file(path, *a, **k):  # config.json in place, its write not returned yet
        real_write(path, *a, **k)
        if not marker.exists():  # the first write only
            wait()

    if sys.argv[3] == "ledger":
        w.RunWriter.open_ledger = open_ledger
    elif sys.argv[3] == "kernel":  # the first kernel call loads the kernels (Python code)
        import ldp_audit.training.pgc_a3c.engine as e

        real_act = e.act_and_record

        def act_and_record(*a, **k):
            if not marker.exists():
                wait()
            return real_act(*a, **k)

        e.act_and_record = act_and_record
    else:
        w.write_json_file = write_json_file
    sys.argv = ["ldp-audit", "train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "5",
                "--max-submissions", "30", "--out", sys.argv[2]]
    sys.exit(cli.main())
    """
)


@pytest.mark.parametrize(
    "sig, code, where",
    [
        (signal.SIGINT, 130, "ledger"),
        (signal.SIGTERM, 143, "ledger"),
        (signal.SIGINT, 130, "config"),
        (signal.SIGINT, 130, "kernel"),
        (signal.SIGTERM, 143, "kernel"),
    ],
)
def test_a_signal_right_after_config_json_marks_the_run_interrupted(
    tmp_path: Path, sig: int, code: int, where: str
) -> None:
    """Session 49: a signal after ``config.json`` but before the trainer's own handler (its
    ledger opening, its engine compiling) left the run with no manifest: unmarked, and
    ``budget --verify`` said only that a file was missing. Session 51 ("kernel"): the engine's
    first kernel call loads the compiled kernels (numba's registries: Python code, seconds at
    load 30); a signal then set only the trainer's stop flag, read between steps, and the
    watchdog's forced exit came first, the run left "running" (5 of 5 ``train pgc-a3c`` runs
    signalled 0.3-2.3 s after config.json, session 50)."""
    marker, run = tmp_path / "in-window", tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-c", _BEFORE_THE_TRAINERS_HANDLER, str(marker), str(run), where],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LDP_AUDIT_PROGRESS": "never"},
        preexec_fn=_default_sigint,
    )
    _started(p, marker)
    rc, dt = _wait_exit(p, sig)
    err = p.stderr.read()
    assert rc == code and "Traceback" not in err, err
    assert "forced exit" not in err and dt <= LIMIT_S, (dt, err)
    from ldp_audit.rundir import verify_run

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert json.loads((run / "config.json").read_text())["status"] == "interrupted"
    res = verify_run(run)
    assert res.ok, res.problems


def test_an_ignored_sigint_stays_ignored_while_pgc_a3c_trains(tmp_path: Path) -> None:
    """A command started with SIGINT ignored (a background job of a non-interactive shell,
    nohup) keeps ignoring it (docs/cli.md); until session 51 ``train pgc-a3c``'s own handler
    took SIGINT over while the engine ran, and such a run stopped at the next step (found by
    the session 51 probe, itself started with nohup: SIGINT stopped the engine, while the same
    run ignored it before and after the engine). SIGTERM still stops it."""
    run = tmp_path / "run"
    argv = ["train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "1"]
    argv += ["--max-submissions", "20000", "--no-progress", "--out", str(run)]
    p = subprocess.Popen(
        [*LDP_AUDIT, *argv],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        wait_for_charges(run, p)  # training under way
        n = ledger_rows(run / "ledger.sqlite", timeout=5.0)
        p.send_signal(signal.SIGINT)
        # a step releases at most one report per agent (9): far more rows mean it went on
        wait_for_charges(run, p, rows=n + 60)
        rc, _ = _wait_exit(p, signal.SIGTERM)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 143, p.stderr.read()
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"


_SLOW_TEARDOWN = textwrap.dedent(
    """
    import atexit, os, sys, time
    from pathlib import Path
    import ldp_audit.cli as cli

    marker, trace = Path(sys.argv[1]), Path(os.environ["LDP_AUDIT_SIGNAL_TRACE"])

    def slow_teardown():  # the interpreter's teardown after the work: until the signal is seen
        marker.touch()
        for _ in range(6000):
            if trace.exists():
                return
            time.sleep(0.01)

    atexit.register(slow_teardown)
    sys.argv = ["ldp-audit", "train", "pgc-a3c", "--mechanism", "laplace", "--epsilon", "5",
                "--max-submissions", "20", "--out", sys.argv[2]]
    sys.exit(cli.main())
    """
)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_the_teardown_is_the_one_line_and_130(
    tmp_path: Path, sig: int, code: int
) -> None:
    """Session 51: after the work and its output, the interpreter's teardown (2.6-5.4 s after
    ``train pgc-a3c`` at load 12) ran with the default handlers back: a signal there ended the
    process by the signal itself, no line (4 of 17 random deliveries to small runs). Now the
    console script runs the exit handlers and ends without the rest of the teardown, a signal
    meanwhile noted: the one line and 130 / 143, the run complete (its work was done)."""
    marker, run, trace = tmp_path / "tearing-down", tmp_path / "run", tmp_path / "trace"
    p = subprocess.Popen(
        [sys.executable, "-c", _SLOW_TEARDOWN, str(marker), str(run)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LDP_AUDIT_PROGRESS": "never", "LDP_AUDIT_SIGNAL_TRACE": str(trace)},
        preexec_fn=_default_sigint,
    )
    _started(p, marker)
    rc, dt = _wait_exit(p, sig, trace)
    err = p.stderr.read()
    assert rc == code and "Traceback" not in err and "forced exit" not in err, (rc, err)
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    assert err.strip().splitlines()[-1].startswith(f"ldp-audit: {word}"), err
    assert dt <= LIMIT_S, dt
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"


_SLOW_LIBRARY_IMPORT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import ldp_audit.cli as cli

    lib, marker, trace = Path(sys.argv[1]), Path(sys.argv[2]), os.environ["LDP_AUDIT_SIGNAL_TRACE"]
    (lib / "slowlib.py").write_text(
        "import os, sys, time\\n"
        f"open({str(marker)!r}, 'w').close()\\n"
        "try:\\n"  # module-level code of a library, as torch's C++ init calling back into Python
        f"    while not os.path.exists({trace!r}):\\n"
        "        time.sleep(0.01)\\n"
        f"    time.sleep({float(sys.argv[3])})\\n"  # the signal is handled here, in the import
        "except BaseException as exc:\\n"
        "    print('raised inside the import:', type(exc).__name__, file=sys.stderr)\\n"
        "    raise\\n"
    )
    sys.path.insert(0, str(lib))

    def command(argv):
        import slowlib  # noqa: F401
        time.sleep(30)  # the work after the import: the held signal is raised here
        return 0

    cli._main = command
    sys.argv = ["ldp-audit"]
    sys.exit(cli.main())
    """
)


@pytest.mark.parametrize(
    "sig, code, after", [(signal.SIGINT, 130, 0.2), (signal.SIGTERM, 143, 0.2), (2, 130, 1.5)]
)
def test_a_signal_inside_a_library_import_is_raised_after_it(
    tmp_path: Path, sig: int, code: int, after: float
) -> None:
    """Session 51 probe: 3 of 40 ``train fedrl`` runs signalled once, 0.3-4 s after config.json,
    ended by SIGABRT, no manifest, no line: the trainer imports torch there, and the
    KeyboardInterrupt raised in a Python callback of torch's C++ init ("terminate called after
    throwing an instance of 'pybind11::error_already_set'", torch/distributed/__init__.py).
    Now a signal inside an installed library's import is held until the import has returned,
    then raised: the one line and 130 / 143, nothing raised inside the import. Session 54: an
    import going on 1.5 s after the signal (numba's, at load 15-20) met the 1 s forced exit;
    the forced exit now waits for a held signal (at most 10 s)."""
    lib = tmp_path / "site-packages"
    lib.mkdir()
    marker, trace = tmp_path / "importing", tmp_path / "trace"
    p = subprocess.Popen(
        [sys.executable, "-c", _SLOW_LIBRARY_IMPORT, str(lib), str(marker), str(after)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LDP_AUDIT_SIGNAL_TRACE": str(trace)},
        preexec_fn=_default_sigint,
    )
    _started(p, marker)
    rc, dt = _wait_exit(p, sig, trace)
    err = p.stderr.read()
    assert "raised inside the import" not in err and "forced exit" not in err, err
    assert rc == code and "Traceback" not in err, (rc, err)
    word = "interrupted" if sig == signal.SIGINT else "terminated"
    assert err.strip().splitlines()[-1].startswith(f"ldp-audit: {word}"), err
    assert dt <= after + LIMIT_S, dt


_LIBRARIES_AT_THE_RUN_FOLDER = """
import sys
from ldp_audit.rundir import writer
from ldp_audit.training.dprl.config import DprlConfig
from ldp_audit.training.dprl.trainer import train
class Stop(Exception):
    pass
def record(*a, **k):
    libs = ("torch", "torch._dynamo", "gymnasium", "opacus.optimizers", "opacus.accountants")
    print(",".join(m for m in libs if m not in sys.modules))
    raise Stop
writer.RunWriter.__init__ = record
try:
    train(DprlConfig(algo="reinforce", privacy="dpsgd", episodes=2), run_dir=sys.argv[1])
except Stop:
    pass
"""


@pytest.mark.slow  # a fresh interpreter imports torch, its compiler and Opacus: 26 s at load 15
def test_train_dprl_imports_its_libraries_before_its_run_folder(tmp_path: Path) -> None:
    """Session 52 probe: every one of 8 `train dprl --algo reinforce --privacy dpsgd` runs
    signalled once 0-2.5 s after config.json (load 15) ended in the watchdog's forced exit, the
    run "running" with no manifest: torch, torch._dynamo, Opacus and gymnasium were imported
    after the run folder (14 s of imports at that load), and a signal inside a library's import
    is held until it returns (past the 1 s grace). Now they are imported before it, as `train
    fedrl` does (training.device.load_libraries): none is left to import at the folder."""
    out = subprocess.run(
        [sys.executable, "-c", _LIBRARIES_AT_THE_RUN_FOLDER, str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "", (out.stdout, out.stderr)


def test_train_dprl_and_frd_load_their_libraries_before_their_run_folder(
    tmp_path, monkeypatch
) -> None:
    """The default suite's cheap check of the test above: `train` of dprl and frd asks for
    torch (and its compiler), Opacus and gymnasium / numba (training.device.load_libraries)
    before it makes the run folder (frd too: 893 modules, 16 s at load 15, were imported after
    its folder; 87 of numba's, loaded with its kernels, still are)."""
    import ldp_audit.rundir
    from ldp_audit.training import device
    from ldp_audit.training.dprl.config import DprlConfig
    from ldp_audit.training.dprl.trainer import train
    from ldp_audit.training.frd import run as frd_run
    from ldp_audit.training.frd.config import FrdConfig

    calls: list = []

    def writer(*a, **k):
        calls.append("run folder")
        raise KeyboardInterrupt

    monkeypatch.setattr(device, "load_libraries", lambda *m: calls.append(m))
    monkeypatch.setattr(ldp_audit.rundir, "RunWriter", writer)
    monkeypatch.setattr(frd_run, "RunWriter", writer)
    with pytest.raises(KeyboardInterrupt):
        train(DprlConfig(algo="reinforce", privacy="dpsgd", episodes=2), run_dir=tmp_path / "r")
    with pytest.raises(KeyboardInterrupt):
        frd_run.train(FrdConfig(max_episodes=2), seed=0, run_dir=tmp_path / "f")
    assert len(calls) == 4 and calls[1] == calls[3] == "run folder", calls
    assert {"gymnasium", "opacus.optimizers", "opacus.accountants"} <= set(calls[0]), calls
    assert calls[2] == ("numba",), calls
