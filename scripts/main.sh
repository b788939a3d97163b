#!/usr/bin/env bash
# The main job: set up .venv (torch's CPU build here, or your CUDA torch), make sure nsys is
# there (installing nsys 2022.4 into .cache/nsys if none is found), profile the tiny
# NVTX-instrumented Transformer under nsys (on the GPU when there is one, else on CPU) and show
# what dominates each range. Then mine a real GPU export: which CUDA kernel dominates, and where
# (a PyTorch capture from ../shared/fixtures/nsys when present, else a demo export built here).
# Pass an export to mine that one instead: scripts/main.sh path/to/run.sqlite
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh torch >&2
export PATH="$here/.venv/bin:$PATH"
nsys_args=()
if ! command -v nsys >/dev/null && [ -z "${NSYS:-}" ]; then
    nsys_bin="$(bash scripts/install_nsys.sh | tail -n 1)"
    nsys_args=(--nsys "$nsys_bin")
fi
echo "== nsys-mine profile --size tiny (NVTX fine, train, 2 warmup + 3 measured steps)" >&2
nsys-mine profile --size tiny --context 128 --mode train --nvtx fine --warmup 2 --steps 3 \
    --out-dir profiles --force "${nsys_args[@]}"
export_path="${1:-}"
if [ -z "$export_path" ]; then
    export_path="../shared/fixtures/nsys/dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
    if [ ! -f "$export_path" ]; then
        mkdir -p .cache
        export_path=".cache/demo_export.sqlite"
        .venv/bin/python -m tests.synth --demo "$export_path" >&2
    fi
fi
echo >&2
echo "== nsys-mine kernels and dominant $export_path: which kernel dominates, and where" >&2
nsys-mine kernels "$export_path" --top 8
nsys-mine dominant "$export_path" --attribution all
