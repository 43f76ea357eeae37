"""``flwr_run`` says when the Flower run failed (issue 38 item 7): a ServerApp that raises ends
the run ``finished:failed`` (Flower's exit code 700) while ``flwr run --stream`` exits 0."""

from __future__ import annotations

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
