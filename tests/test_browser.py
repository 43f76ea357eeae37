"""Render reports in headless Chromium: the page loads without errors and every image decodes.

Chromium is Debian's ``chromium`` package, installed by ``scripts/ensure_chromium.sh`` (which
``make test`` runs first). If it is missing, this test runs that script once itself; it skips,
saying why, only when Chromium cannot be installed (not root, no apt, no package).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ldp_audit.report import build_report
from ldp_audit.report.browser import find_chromium, page_check, screenshot
from tests.test_report_fixtures import GOOD_ATTACK, GOOD_AUDIT, ledger_for, make_run

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
DEMO_HTML = REPO / "reports" / "demo" / "index.html"


@pytest.fixture(scope="module")
def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        script = REPO / "scripts" / "ensure_chromium.sh"
        subprocess.run(["bash", str(script)], capture_output=True, timeout=600, check=False)
        binary = find_chromium()
    if binary is None:
        pytest.skip(
            "headless Chromium is not installed and scripts/ensure_chromium.sh could not "
            "install it (needs root and Debian's 'chromium' package): browser check skipped"
        )
    return binary


def _check(html: Path, chromium: str) -> dict:
    return page_check(html, binary=chromium)


@pytest.fixture(scope="module")
def fresh_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report rendered by the current code (so the check never sees only stale HTML)."""
    tmp = tmp_path_factory.mktemp("browser")
    run = make_run(tmp / "run", audit=[GOOD_AUDIT], attacks={"dynamics": GOOD_ATTACK})
    return build_report(run, ledger=ledger_for(run)).write(tmp / "out")["html"]


def test_fresh_report_loads_and_images_decode(chromium: str, fresh_report: Path) -> None:
    check = _check(fresh_report, chromium)
    assert check["errors"] == []
    assert check["images"] == 4 and check["decoded"] == 4
    assert check["title"].startswith("Privacy report: pgc-a3c")
    assert check["height"] > 1000  # laid out: verdict, tables and four figures


def test_committed_demo_report_loads_and_images_decode(chromium: str) -> None:
    if not DEMO_HTML.is_file():
        pytest.fail(
            f"{DEMO_HTML} is missing: regenerate it with the command in README.md (Privacy reports)"
        )
    check = _check(DEMO_HTML, chromium)
    assert check["errors"] == []
    assert check["images"] >= 3 and check["decoded"] == check["images"]
    assert (REPO / "reports" / "demo" / "screenshot.png").is_file()


def test_screenshot_is_a_png(chromium: str, fresh_report: Path, tmp_path: Path) -> None:
    png = screenshot(fresh_report, tmp_path / "shot.png", width=800, height=600, binary=chromium)
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (800, 600)
