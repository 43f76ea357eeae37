"""The fused PGC-A3C engine's run loop: it pauses Python's cyclic garbage collector only while
it runs (restored afterwards, also when it raises, and left off when it was off), and its
profile hook times every part of the run without changing any result."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

from ldp_audit.errors import InvalidParameterError
from ldp_audit.training.pgc_a3c.config import PgcA3cConfig
from ldp_audit.training.pgc_a3c.fused import _PROFILE_PARTS, FusedEngine
from ldp_audit.training.pgc_a3c.grid import train
from ldp_audit.training.pgc_a3c.privacy import make_accountant


def _engine(cfg: PgcA3cConfig, seed: int = 0) -> FusedEngine:
    return FusedEngine([cfg], [seed], [make_accountant(None, None)], [False])


class _Sink:
    """A progress sink that records whether the collector was on at each update."""

    def __init__(self) -> None:
        self.collector_on: list[bool] = []

    def update(self, k: int) -> None:
        self.collector_on.append(gc.isenabled())


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_collector_is_paused_during_the_run_and_restored_after(collector_on):
    eng = _engine(PgcA3cConfig(trials=2, max_submissions=60))
    sink = _Sink()
    eng.run(sink)
    assert sink.collector_on and not any(sink.collector_on)  # off at every block boundary
    assert gc.isenabled()


def test_collector_left_off_when_it_was_off(collector_on):
    gc.disable()
    train(PgcA3cConfig(trials=1, max_submissions=20), seed=0, engine="fused")
    assert not gc.isenabled()


def test_collector_restored_when_the_run_raises(collector_on):
    """Unclipped, eta = 50: theta diverges to NaN; the engine refuses, the collector is back."""
    cfg = PgcA3cConfig(mechanism="none", trials=1, max_submissions=400, clip=1e300, eta=50.0)
    with pytest.raises(InvalidParameterError, match="diverged"):
        train(cfg, seed=0, engine="fused")
    assert gc.isenabled()


def test_profile_is_off_by_default_and_times_every_part_when_on():
    cfg = PgcA3cConfig(epsilon=2.0, trials=3, max_submissions=80)
    plain = _engine(cfg)
    plain.run()
    assert plain.profile is False and plain.timings == {}

    prof = _engine(cfg)
    prof.profile = True
    t0 = time.perf_counter()
    prof.run()
    outer = time.perf_counter() - t0
    tm = prof.timings
    assert set(tm) == {*_PROFILE_PARTS, "calls"}
    assert tm["calls"] >= 1
    for part in _PROFILE_PARTS:
        assert tm[part]["wall"] >= 0.0 and tm[part]["cpu"] >= 0.0, part
    assert tm["kernel"]["wall"] > 0.0 and tm["ledger_charges"]["wall"] > 0.0
    # consecutive laps: the parts add up to the time between the first and the last lap
    assert sum(tm[p]["wall"] for p in _PROFILE_PARTS) <= outer
    # and the profile changes nothing
    a, b = plain.results(0.0)[0], prof.results(0.0)[0]
    np.testing.assert_array_equal(a.zeta, b.zeta)
    np.testing.assert_array_equal(a.theta, b.theta)
    assert a.env_steps == b.env_steps


def test_a_halt_from_another_thread_ends_the_kernel_at_the_next_lock_step():
    """Session 54: a SIGTERM 10 minutes into a 90,000-submission ``train pgc-a3c`` at load 7
    met the watchdog's 1 s forced exit and left the run "running": Python's handler only sets
    the engine's stop flag when the compiled block (up to 256 lock-steps) returns. The watchdog
    now calls ``halt_soon`` from its thread (``ldp_audit.interrupts.on_signal``); the kernel
    reads it before every lock-step, so at most the step in flight (one step of each live row)
    runs after it. Waits for the event (the kernel has stepped), not for a time."""
    eng = _engine(PgcA3cConfig(trials=1, max_submissions=5000))
    rows = int(eng.row_trial.size)
    seen: list[int] = []

    def halt_once_stepping() -> None:
        t0 = time.monotonic()
        while eng.env_steps[0] < 1000 and time.monotonic() - t0 < 120:
            time.sleep(0.0002)
        eng.halt_soon()
        seen.append(int(eng.env_steps[0]))

    th = threading.Thread(target=halt_once_stepping)
    th.start()
    eng.run()
    th.join()
    assert seen and seen[0] >= 1000
    assert int(eng.env_steps[0]) - seen[0] <= rows  # the lock-step in flight only
    assert eng.active.any() and int(eng.n_sub.sum()) < 5000  # stopped, not finished


def test_a_signal_while_the_stop_handlers_are_installed_leaves_none_behind(monkeypatch):
    """Session 58 probe: a signal's KeyboardInterrupt after ``train``'s SIGINT handler was
    installed but before its restorer was returned (installing SIGTERM's, registering the
    watchdog hook) left the run's handler in force for the rest of the process: a later Ctrl-C
    (a notebook's) only set the stop flag of a finished engine. The signal is injected into the
    hook's registration."""
    import signal

    import ldp_audit.interrupts as interrupts
    from ldp_audit.training.pgc_a3c.grid import _install_stop_handlers

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def signalled(hook):
        raise KeyboardInterrupt

    monkeypatch.setattr(interrupts, "on_signal", signalled)
    with pytest.raises(KeyboardInterrupt):
        _install_stop_handlers(type("E", (), {"stop_requested": False})(), [])
    assert {s: signal.getsignal(s) for s in before} == before
