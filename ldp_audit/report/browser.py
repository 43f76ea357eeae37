"""Headless Chromium helpers: render a report, check it in a real browser, take a screenshot.

Used by the browser test and to refresh ``reports/demo/screenshot.png``. Chromium runs with a
fresh profile and every network-touching feature off, so rendering a report makes no network
request (the report needs none: it is self-contained).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ldp_audit.errors import InvalidParameterError

__all__ = [
    "find_chromium",
    "chromium_command",
    "dump_dom",
    "page_check",
    "screenshot",
    "CHECK_SCRIPT",
]

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
    errors: window.__errors, title: document.title,
    height: document.documentElement.scrollHeight});
  document.body.appendChild(out);
});
</script>"""


def find_chromium() -> str | None:
    """Path of a Chromium binary (``chromium`` or ``chromium-browser``), or None."""
    names = ("chromium", "chromium-browser", "google-chrome")
    return next((path for name in names if (path := shutil.which(name))), None)


def chromium_command(binary: str, user_data_dir: str | Path, *extra: str) -> list[str]:
    """The full Chromium command line with the project's flags and a fresh profile dir."""
    return [binary, *_FLAGS, f"--user-data-dir={user_data_dir}", *extra]


def page_check(
    html_path: str | Path, *, width: int = 1100, binary: str | None = None, timeout: float = 60.0
) -> dict:
    """Load the page in Chromium and return what :data:`CHECK_SCRIPT` saw.

    Returns:
        ``{"images": n, "decoded": n_ok, "errors": [...], "title": str, "height": px}``.

    Raises:
        InvalidParameterError: Chromium is missing or the page never finished loading.
    """
    dom = dump_dom(html_path, width=width, binary=binary, timeout=timeout)
    m = re.search(r'<pre id="ldp-audit-check">(.*?)</pre>', dom, re.S)
    if m is None:
        raise InvalidParameterError(
            f"{html_path} did not finish loading in Chromium; DOM tail: {dom[-300:]!r}"
        )
    return json.loads(html.unescape(m.group(1)))


def _chromium(
    binary: str | None, size: str, *args: str, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run Chromium headless with a fresh profile, a ``size`` ("W,H") window and ``args``."""
    binary = binary or find_chromium()
    if binary is None:
        raise InvalidParameterError(
            "chromium must be installed to render a report (run scripts/ensure_chromium.sh), "
            "found none on PATH"
        )
    with tempfile.TemporaryDirectory(prefix="ldp-audit-chromium-") as tmp:
        cmd = chromium_command(binary, Path(tmp) / "profile", f"--window-size={size}", *args)
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def dump_dom(
    html_path: str | Path, *, width: int = 1100, binary: str | None = None, timeout: float = 60.0
) -> str:
    """Load ``html_path`` (with :data:`CHECK_SCRIPT` injected) headless and return the DOM."""
    with tempfile.TemporaryDirectory(prefix="ldp-audit-page-") as tmp:
        page = Path(tmp) / "page.html"
        text = Path(html_path).read_text(encoding="utf-8")
        page.write_text(text.replace("</body>", CHECK_SCRIPT + "</body>", 1), encoding="utf-8")
        args = ("--virtual-time-budget=5000", "--dump-dom", page.as_uri())
        return _chromium(binary, f"{int(width)},800", *args, timeout=timeout).stdout


def screenshot(
    html_path: str | Path,
    png_path: str | Path,
    *,
    width: int = 1100,
    height: int | None = None,
    binary: str | None = None,
    timeout: float = 60.0,
) -> Path:
    """Write a PNG screenshot of ``html_path``, ``width`` x ``height`` pixels.

    ``height=None`` measures the page first and captures all of it.
    """
    if height is None:
        check = page_check(html_path, width=width, binary=binary, timeout=timeout)
        height = max(600, int(check["height"]) - 40)  # less the check's own <pre>
    out = Path(png_path).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    page = Path(html_path).resolve().as_uri()
    res = _chromium(
        binary, f"{int(width)},{int(height)}", f"--screenshot={out}", page, timeout=timeout
    )
    if not out.is_file():
        raise InvalidParameterError(
            f"chromium wrote no screenshot for {html_path} (exit {res.returncode}): "
            f"{res.stderr[-500:]}"
        )
    return out
