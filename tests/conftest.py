"""Fixtures shared by several test modules."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest


def pytest_configure(config) -> None:
    """A suite started where SIGINT is ignored (a background job of a non-interactive shell:
    `nohup make test &`) gets it back in its own process and so in every subprocess it starts:
    the CLI and the trainers keep an ignored SIGINT ignored (docs/cli.md), so the tests that
    interrupt a run with SIGINT would otherwise wait for a signal that cannot arrive."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items) -> None:
    """The test files that use the session's Ray instance (``ray_local``) run last, each file
    whole (its module-scoped fixtures are set up once): a started Ray keeps its background
    processes (GCS, raylet) polling until the worker ends, about 1 CPU-s every 30 s measured on
    the loaded 2-core machine (session 57), so it is started as late as possible. The order of
    everything else is unchanged (a stable sort)."""
    ray_files = {item.path for item in items if "ray_local" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: item.path in ray_files)


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray instance on 2 CPUs, started once per test process (each pytest-xdist
    worker) and shut down at its end (skipped without Ray). Per module it was started up to
    8 times in a `-n 2` run (4 modules, each split over both workers), 8-19 s each."""
    ray = pytest.importorskip("ray", reason="Ray not installed: pip install 'ldp-audit[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def _ledger_key(tmp_path_factory):
    """One ledger key file for the test session (every xdist worker), in a temp folder (never
    the user's ~/.config key; the first writer creates it, atomically); set before any fixture
    of any scope creates a ledger. Tests that need another key monkeypatch LDP_AUDIT_KEY_FILE /
    LDP_AUDIT_KEY themselves."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # popen-gwN: one key for all the session's workers
        base = base.parent  # (a documented block's run, written on one, is read on another)
    key_dir = base / "ledger-key"
    key_dir.mkdir(mode=0o700, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LDP_AUDIT_KEY", raising=False)
        mp.setenv("LDP_AUDIT_KEY_FILE", str(key_dir / "ledger.key"))
        # the high-water marks under an LDP_AUDIT_KEY of a test: never the user's ~/.local/state
        mp.setenv("XDG_STATE_HOME", str(key_dir / "state"))
        yield key_dir / "ledger.key"


def _session_folder(tmp_path_factory) -> Path:
    """The temporary folder every pytest-xdist worker of the session sees (popen-gwN: the
    session's folder is its own's parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def made_once(tmp_path_factory, _ledger_key):
    """``made_once(name, make)``: the path ``make(path)`` wrote (a path not there before) and
    what it returned (read back from a pickle), with ``make`` called once per test session
    under ``name``: a pytest-xdist worker makes it under a file lock in the session's shared
    folder, the other reads it. Callers copy it before they change anything in it
    (:func:`copied_run`); the marks it left are those of its first caller's folder."""
    import pickle
    import shutil

    from filelock import FileLock

    shared = _session_folder(tmp_path_factory)

    def get(name: str, make):
        folder, done = shared / f"made-once-{name}", shared / f"made-once-{name}.pickle"
        with FileLock(str(shared / f"made-once-{name}.lock")):
            if not done.exists():
                shutil.rmtree(folder, ignore_errors=True)  # a make that failed before
                folder.mkdir()
                done.write_bytes(pickle.dumps(make(folder / "run")))
        return folder / "run", pickle.loads(done.read_bytes())

    return get


@pytest.fixture
def copied_run(made_once, tmp_path, monkeypatch):
    """``copied_run(name, make, out)``: :func:`made_once`'s run copied to ``out`` and what
    ``make`` returned. The test gets its own folder of high-water marks (``LDP_AUDIT_HEADS``):
    an analysis one test seals into its copy would otherwise make every other copy of the run
    an older copy, refused as a rollback (``ldp_audit.accountant.ledger_marks``)."""
    import shutil

    monkeypatch.setenv("LDP_AUDIT_HEADS", str(tmp_path / "heads"))

    def copy(name: str, make, out: Path):
        folder, result = made_once(name, make)
        shutil.copytree(folder, out, symlinks=True)
        return result

    return copy


@pytest.fixture(scope="session", autouse=True)
def _flower_pool(request, tmp_path_factory, _ledger_key):
    """The Flower runs of tests/flower_runs.py whose tests are selected, started in background
    threads (two at a time) before the session's first test, so that the minutes they spend
    waiting for SuperLinks, SuperNodes and Ray overlap the other tests; name -> Future
    (empty without Flower, or when none of their tests is selected).

    Each run happens once per test session: a pytest-xdist worker runs it under a file lock in
    the session's shared folder and leaves its result there (pickled), and the other worker,
    whose tests of the same files need it too (``--dist load`` splits files), waits for the lock
    and reads it. Until session 57 the runs started with the first test that needed one, whose
    worker then waited for them (41 s of setup for test_flower.py's first test)."""
    import importlib.util
    import pickle
    from concurrent.futures import ThreadPoolExecutor

    from filelock import FileLock

    selected = {item.name for item in request.session.items}
    if importlib.util.find_spec("flwr") is None:
        yield {}
        return
    from tests.flower_runs import RUNS

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # popen-gwN: the session's folder is its parent
        shared = shared.parent

    def once(name, run):
        done = shared / f"flower-run-{name}.pickle"
        with FileLock(str(shared / f"flower-run-{name}.lock")):
            if not done.exists():
                result = run(tmp_path_factory.mktemp(name))
                done.write_bytes(pickle.dumps(result))
            return pickle.loads(done.read_bytes())

    with ThreadPoolExecutor(2) as pool:
        yield {
            name: pool.submit(once, name, run)
            for name, (tests, run) in RUNS.items()
            if selected.intersection(tests)
        }


@pytest.fixture(scope="session")
def flower_runs(_flower_pool):
    """The started Flower runs (:func:`_flower_pool`); skips the test without Flower."""
    pytest.importorskip("flwr", reason="Flower not installed: pip install 'ldp-audit[flower]'")
    return _flower_pool


@pytest.fixture
def npz_writes(monkeypatch):
    """Each ``RunWriter.write_npz`` call's (file, whether ``interrupts.closing()`` was open: a
    signal's forced exit waits for what is written inside it)."""
    from ldp_audit.interrupts import closing_open
    from ldp_audit.rundir import RunWriter

    written: list[tuple[str, bool]] = []
    real = RunWriter.write_npz

    def spy(self, name, *a, **k):
        written.append((name, closing_open()))
        return real(self, name, *a, **k)

    monkeypatch.setattr(RunWriter, "write_npz", spy)
    return written
