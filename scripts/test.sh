#!/usr/bin/env bash
# Run the whole test suite from a fresh clone: set up .venv (with torch's CPU build and the
# test tools), install real nsys 2022.4 into .cache/nsys (Debian/Ubuntu x86-64), then pytest.
# With NSYS_MINE_REQUIRE_NSYS=1 (set by .ci/run) a failed nsys install fails the run; on a
# developer machine the nsys comparison tests are skipped instead.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh dev,torch
log="$(mktemp)"
if nsys_bin="$(bash scripts/install_nsys.sh 2>"$log" | tail -n 1)" && [ -x "$nsys_bin" ]; then
    export NSYS="$nsys_bin"
    echo "using nsys at $NSYS" >&2
else
    cat "$log" >&2 || true
    if [ "${NSYS_MINE_REQUIRE_NSYS:-0}" != "0" ]; then
        echo "nsys install failed and NSYS_MINE_REQUIRE_NSYS is set" >&2
        rm -f "$log"
        exit 1
    fi
    echo "nsys not installed: tests that need it will be skipped" >&2
fi
rm -f "$log"
# two workers (pytest-xdist): the suite's subprocesses (nsys, Slurm, a browser, torch) wait
# as much as they compute; NSYS_MINE_TEST_WORKERS=0 runs it in one process
exec .venv/bin/python -m pytest -q -n "${NSYS_MINE_TEST_WORKERS:-2}" "$@"
