"""``flwr_run`` says when the Flower run failed (issue 38 item 7): a ServerApp that raises ends
the run ``finished:failed`` (Flower's exit code 700) while ``flwr run --stream`` exits 0."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr", reason="Flower not installed: pip install 'ldp-audit[flower]'")

from ldp_audit.training.flower.run import flwr_run  # noqa: E402

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "status-app"
version = "1.0.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "test"

[tool.flwr.app.components]
serverapp = "status_app:server_app"
clientapp = "status_app:client_app"

[tool.flwr.app.config]
fail = false
"""

APP = """from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

server_app = ServerApp()
client_app = ClientApp()


@server_app.main()
def main(grid, context):
    if context.run_config["fail"]:
        raise RuntimeError("the server app failed on purpose")
"""


@pytest.mark.parametrize(
    ("fail", "code"),
    [
        (True, 1),
        # the finishing app's 0 (13 s) is also what tests/test_flower_any.py's end-to-end
        # `flwr run` of the digits example asserts in the default run
        pytest.param(False, 0, marks=pytest.mark.slow),
    ],
)
def test_flwr_run_returns_nonzero_when_the_server_app_raised(tmp_path, fail, code) -> None:
    app = tmp_path / "app"
    app.mkdir()
    (app / "pyproject.toml").write_text(PYPROJECT)
    (app / "status_app.py").write_text(APP)
    log = tmp_path / "log"
    assert flwr_run(app, run_config={"fail": fail}, num_supernodes=1, log=log, timeout=300) == code
    text = log.read_text()
    assert ("finished:failed" in text) is fail
    assert ("finished:completed" in text) is not fail
