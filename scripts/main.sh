#!/usr/bin/env bash
# The main job: set up .venv, then answer "which kernel dominates, and where" for a real export
# (a PyTorch capture from ../shared/fixtures/nsys when present, else a demo export the project
# builds itself). Pass another export to mine it instead: scripts/main.sh path/to/run.sqlite
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh >&2
export_path="${1:-}"
if [ -z "$export_path" ]; then
    export_path="../shared/fixtures/nsys/dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
    if [ ! -f "$export_path" ]; then
        mkdir -p .cache
        export_path=".cache/demo_export.sqlite"
        .venv/bin/python -m tests.synth --demo "$export_path" >&2
    fi
fi
echo "== nsys-mine info $export_path" >&2
.venv/bin/nsys-mine info "$export_path" --format md
echo
.venv/bin/nsys-mine kernels "$export_path" --top 10
.venv/bin/nsys-mine dominant "$export_path" --format md
