#!/usr/bin/env bash
# Install Debian's headless-capable `chromium` when it is missing, so the browser test
# (tests/test_browser.py) can render the demo report. Never fails the caller: when chromium
# cannot be installed (not root, no apt-get, no package), it says so and exits 0, and the
# browser test then skips with a clear message.
set -u

have_chromium() {
    command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1
}

if have_chromium; then
    echo "ensure_chromium: chromium already installed ($(command -v chromium || command -v chromium-browser))"
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "ensure_chromium: chromium missing and not root; skipping install (browser test will skip)" >&2
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_chromium: chromium missing and no apt-get; skipping install (browser test will skip)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; then
    if have_chromium; then
        echo "ensure_chromium: installed $(command -v chromium || command -v chromium-browser)"
        exit 0
    fi
fi
echo "ensure_chromium: could not install chromium; browser test will skip" >&2
exit 0
