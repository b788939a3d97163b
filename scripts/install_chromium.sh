#!/usr/bin/env bash
# Install headless Chromium (Debian/Ubuntu's `chromium` package) for the report's browser tests
# (tests/test_report_browser.py). Needs root or sudo; does nothing when chromium is there.
set -euo pipefail
for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then
        command -v "$name"
        exit 0
    fi
done
as_root=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "installing chromium needs root or sudo" >&2; exit 1; }
    as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq >&2
"${as_root[@]}" apt-get install -y -qq chromium >&2
command -v chromium
