#!/usr/bin/env bash
# The size tables of docs/GPU.md on a lent GPU machine, through the CLI itself:
# `memory` over every preset, context, mode and precision (the estimate beside the measured
# peak), then `bench` over every preset at context 128 (the bound column and its notes).
# Usage (device tool, carry gpu_wheels): bash benchmarks/gpu_sizes.sh "$OUT"
set -u
out="${1:?usage: gpu_sizes.sh OUT_DIR}"
PYTHON="${PYTHON:-/opt/torch/.venv/bin/python3}"; [ -x "$PYTHON" ] || PYTHON=python3
site="$(mktemp -d)"
"$PYTHON" -m pip install --quiet --no-index --no-deps --disable-pip-version-check \
    --target "$site" gpu_wheels/*.whl >"$out/log.txt" 2>&1
export PYTHONPATH="$PWD:$site"
sizes=small,medium,large,xl,2.7B
echo "memory start $(date -u +%T)" >>"$out/log.txt"
timeout -s INT "${MEMORY_LIMIT:-170}" "$PYTHON" -m profile_cli memory --size "$sizes" \
    --context 128,256,512,1024 --mode forward,train --precision fp32,bf16 --batch 4 \
    --device cuda -f csv -o "$out/memory.csv" --db "$out/results.db" >>"$out/log.txt" 2>&1
echo "memory rc $? $(date -u +%T)" >>"$out/log.txt"
timeout -s INT "${BENCH_LIMIT:-200}" "$PYTHON" -m profile_cli bench --size "$sizes" \
    --context 128 --mode forward,train --precision fp32,bf16 --batch 4 --warmup 5 \
    --steps 10 --device cuda --wide -f md -o "$out/bench.md" --db "$out/results.db" \
    >>"$out/log.txt" 2>&1
echo "bench rc $? $(date -u +%T)" >>"$out/log.txt"
