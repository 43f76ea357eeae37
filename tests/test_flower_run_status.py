"""``flwr_run`` says when the Flower run failed (issue 38 item 7): a ServerApp that raises ends
the run ``finished:failed`` (Flower's exit code 700) while ``flwr run --stream`` exits 0."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest

pytest.importorskip("flwr", reason="Flower not installed: pip install 'ldp-audit[flower]'")

from tests.flower_runs import status_run  # noqa: E402


@pytest.mark.parametrize(
    ("fail", "code"),
    [
        (True, 1),
        # the finishing app's 0 (13 s) is also what tests/test_flower_any.py's end-to-end
        # `flwr run` of the digits example asserts in the default run
        pytest.param(False, 0, marks=pytest.mark.slow),
    ],
)
def test_flwr_run_returns_nonzero_when_the_server_app_raised(
    flower_runs, tmp_path, fail, code
) -> None:
    """The app and its run: tests/flower_runs.py's ``status_run``; the default run's case is
    started ahead by the session fixture ``flower_runs``."""
    future = flower_runs.get("status-raised") if fail else None
    got, text = future.result() if future else status_run(tmp_path, fail)
    assert got == code
    assert ("finished:failed" in text) is fail
    assert ("finished:completed" in text) is not fail


def _fake_tree() -> tuple[subprocess.Popen, dict[int, bytes]]:
    """A SuperLink-shaped tree: a leader in its own session whose children start sessions of
    their own (one with a child, one ignoring SIGTERM); the leader and its 6 processes."""
    from ldp_audit.training.flower.run import _tree

    script = (
        "setsid sleep 60 & setsid sh -c 'sleep 60 & wait' & "
        "setsid sh -c 'trap \"\" TERM; sleep 60 & wait' & wait"
    )
    link = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(tree := _tree(link.pid)) < 6 and time.monotonic() < deadline:
        time.sleep(0.02)
    return link, tree


def _left(tree: dict[int, bytes]) -> list[int]:
    """Those of ``tree`` still running; killed (by id, only what the test started)."""
    from ldp_audit.training.flower.run import _started

    left = [p for p, start in tree.items() if _started(p) == start]
    for p in left:
        os.kill(p, signal.SIGKILL)
    return left


def test_stop_ends_every_process_below_the_superlink_in_all_its_groups() -> None:
    """``flwr_run``'s ``_stop`` killed the SuperLink's process group only, while
    ``flower-superexec`` and ``flwr-simulation`` (the ServerApp) run in sessions of their own:
    SIGTERMed 22 s into `python -m ldp_audit.training.flower.digits --clients 2 --rounds 2`, the
    command exited 143 with both still running (found with ``ps`` after the exit). 5 of this
    fake tree's 6 processes outlived the old ``_stop``."""
    from ldp_audit.training.flower.run import _stop

    link, tree = _fake_tree()
    try:
        assert len(tree) == 6 and len({os.getpgid(p) for p in tree}) == 4, tree
        t0 = time.monotonic()
        _stop(link, grace=0.5)  # the one ignoring SIGTERM is killed after the grace
        assert time.monotonic() - t0 < 5 and link.returncode is not None
    finally:
        assert not _left(tree)
        link.wait(timeout=10)


def test_a_second_signal_while_stopping_kills_what_is_left_at_once() -> None:
    """A second Ctrl-C / SIGTERM during ``_stop``'s grace (20 s by default) raised out of it
    and left the processes it had not ended yet running: now they are killed, then it goes
    on."""
    from ldp_audit.interrupts import Terminated
    from ldp_audit.training.flower.run import _stop

    def second(signum: int, frame: object) -> None:
        raise Terminated()

    link, tree = _fake_tree()
    old = signal.signal(signal.SIGALRM, second)
    try:
        assert len(tree) == 6, tree
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        t0 = time.monotonic()
        with pytest.raises(Terminated):
            _stop(link, grace=30.0)
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        assert not _left(tree)
        link.wait(timeout=10)


def test_without_proc_stop_ends_the_superlinks_group(monkeypatch) -> None:
    """Where there is no ``/proc`` to walk (not Linux) ``_stop`` does what it did before: the
    SuperLink's own process group, SIGKILL after the grace (the tree walk found nothing there
    and stopped nothing)."""
    from ldp_audit.training.flower import run

    monkeypatch.setattr(run, "_HAS_PROC", False)
    link = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & wait"], start_new_session=True)
    group = os.getpgid(link.pid)
    try:
        t0 = time.monotonic()
        run._stop(link, grace=0.5)
        assert link.returncode is not None and time.monotonic() - t0 < 5
        deadline = time.monotonic() + 10  # its sleep went with the group (killed: reaped by
        while time.monotonic() < deadline:  # init a moment later, a zombie in the group until then)
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        else:
            pytest.fail(f"process group {group} outlived _stop")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
