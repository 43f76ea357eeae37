"""``flwr_run`` says when the Flower run failed (issue 38 item 7): a ServerApp that raises ends
the run ``finished:failed`` (Flower's exit code 700) while ``flwr run --stream`` exits 0."""

from __future__ import annotations

import os

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


def test_stop_ends_every_process_below_the_superlink_in_all_its_groups() -> None:
    """``flwr_run``'s ``_stop`` killed the SuperLink's process group only, while
    ``flower-superexec`` and ``flwr-simulation`` (the ServerApp) run in sessions of their own:
    SIGTERMed 22 s into `python -m ldp_audit.training.flower.digits --clients 2 --rounds 2`, the
    command exited 143 with both still running (found with ``ps`` after the exit; they wrote
    into the run folder after it). A fake tree: a leader in its own session whose children
    start sessions of their own (one with a child, one ignoring SIGTERM)."""
    import signal
    import subprocess
    import time

    from ldp_audit.training.flower.run import _stop, _tree

    script = (
        "setsid sleep 60 & setsid sh -c 'sleep 60 & wait' & "
        "setsid sh -c 'trap \"\" TERM; sleep 60 & wait' & wait"
    )
    link = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(tree := _tree(link.pid)) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(tree) == 6, tree  # sh, sleep, sh + sleep, sh + sleep
        assert len({os.getpgid(p) for p in tree}) == 4
        t0 = time.monotonic()
        _stop(link, grace=0.5)
        assert time.monotonic() - t0 < 5
        assert link.returncode is not None
        left = [p for p, start in tree.items() if _tree(p).get(p) == start]
        assert not left, left
    finally:
        for p, start in tree.items():  # only what this test started, by id
            if _tree(p).get(p) == start:
                os.kill(p, signal.SIGKILL)
        link.wait(timeout=10)
