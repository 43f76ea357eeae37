"""Headless Chromium helpers: render a report, check it in a real browser, take a screenshot.

Used by the browser test and to refresh ``reports/demo/screenshot.png``. Chromium runs with a
fresh profile and every network-touching feature off, so rendering a report makes no network
request (the report needs none: it is self-contained).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ldp_audit.errors import InvalidParameterError

__all__ = ["find_chromium", "chromium_command", "dump_dom", "screenshot", "CHECK_SCRIPT"]

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--mute-audio",
)

#: Appended to a copy of the page before ``--dump-dom``: after load, it writes into the DOM the
#: number of images, how many decoded (naturalWidth > 0) and every JS error seen.
CHECK_SCRIPT = """<script>
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); }, true);
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  var out = document.createElement('pre');
  out.id = 'ldp-audit-check';
  out.textContent = JSON.stringify({images: imgs.length, decoded: ok,
    errors: window.__errors, title: document.title});
  document.body.appendChild(out);
});
</script>"""


def find_chromium() -> str | None:
    """Path of a Chromium binary (``chromium`` or ``chromium-browser``), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium_command(binary: str, user_data_dir: str | Path, *extra: str) -> list[str]:
    """The full Chromium command line with the project's flags and a fresh profile dir."""
    return [binary, *_FLAGS, f"--user-data-dir={user_data_dir}", *extra]


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)


def _binary(binary: str | None) -> str:
    b = binary or find_chromium()
    if b is None:
        raise InvalidParameterError(
            "chromium must be installed to render a report (run scripts/ensure_chromium.sh), "
            "found none on PATH"
        )
    return b


def dump_dom(html_path: str | Path, *, binary: str | None = None, timeout: float = 60.0) -> str:
    """Load ``html_path`` (with :data:`CHECK_SCRIPT` injected) headless and return the DOM."""
    src = Path(html_path)
    with tempfile.TemporaryDirectory(prefix="ldp-audit-chromium-") as tmp:
        page = Path(tmp) / "page.html"
        text = src.read_text(encoding="utf-8")
        page.write_text(text.replace("</body>", CHECK_SCRIPT + "</body>", 1), encoding="utf-8")
        cmd = chromium_command(
            _binary(binary),
            Path(tmp) / "profile",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        )
        return _run(cmd, timeout).stdout


def screenshot(
    html_path: str | Path,
    png_path: str | Path,
    *,
    width: int = 1100,
    height: int = 2400,
    binary: str | None = None,
    timeout: float = 60.0,
) -> Path:
    """Write a PNG screenshot of ``html_path`` (the top ``width`` x ``height`` pixels)."""
    out = Path(png_path).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ldp-audit-chromium-") as tmp:
        cmd = chromium_command(
            _binary(binary),
            Path(tmp) / "profile",
            f"--window-size={int(width)},{int(height)}",
            f"--screenshot={out}",
            Path(html_path).resolve().as_uri(),
        )
        res = _run(cmd, timeout)
    if not out.is_file():
        raise InvalidParameterError(
            f"chromium wrote no screenshot for {html_path} (exit {res.returncode}): "
            f"{res.stderr[-500:]}"
        )
    return out
