#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv and install nsys-mine into it.
# Usage: scripts/setup.sh [EXTRAS]   e.g. scripts/setup.sh dev,torch   (default: none)
# constraints.txt pins torch to the CPU build on this machine's disk and nvtx to <= 0.2.11.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
extras="${1:-}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
stamp=".venv/.nsys-mine-installed-${extras:-core}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    spec="."
    [ -n "$extras" ] && spec=".[$extras]"
    .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
    log="$(mktemp)"  # pip's build warnings only matter when the install fails
    if ! .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt \
            -e "$spec" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
    touch "$stamp"
fi
