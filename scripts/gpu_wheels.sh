#!/usr/bin/env bash
# Make the wheel folder that scripts/gpu_check.sh installs on an offline CUDA machine: the
# project's core dependencies that the GPU machine's python lacks (and typer, click, rich, so
# the CLI runs with the versions tested here), with everything they need, for CPython 3.12 on
# manylinux x86-64, compiled wheels included (pydantic-core). Needs PyPI. See docs/GPU.md.
#
# Usage: scripts/gpu_wheels.sh [DIR]     (default: gpu_wheels/, which git ignores)
#        scripts/gpu_wheels.sh --list    (what it would resolve, and what it leaves to the image)
#
# The set is computed by scripts/gpu_wheels.py: pyproject.toml's core dependencies less the
# image's own (IMAGE there: torch, numpy, pandas, matplotlib, pytest and what they need),
# resolved with their dependencies by pip for cp312/manylinux, pinned to the versions in
# .venv; then every wheel of a project the image has is dropped. Writes DIR/SHA256SUMS.
# Environment: PYTHON, the python that runs pip (default .venv/bin/python, else python3;
# 3.11 or newer).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
python="${PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
exec "$python" scripts/gpu_wheels.py "$@"
