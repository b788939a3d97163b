#!/usr/bin/env bash
# Download the wheels that scripts/gpu_check.sh installs on an offline CUDA machine: the
# project's Python dependencies that a CUDA torch image lacks, for CPython 3.12 on x86-64 (all
# pure py3-none-any wheels but pydantic-core's). Needs only PyPI.
#
# Usage: scripts/gpu_wheels.sh [DIR]     (default: gpu_wheels/, which git ignores)
#
# The GPU machine's python3 holds torch (CUDA), numpy, pandas, matplotlib, rich, pytest (and
# so pluggy), python-dateutil, pyyaml, click, typer... but not sqlite-utils, platformdirs or
# pydantic. Carried:
#   sqlite-utils (results database, sweep index) and what it needs beyond that list:
#     sqlite-fts4, click-default-group, tabulate, and click (sqlite-utils wants >= 8.3.1);
#   platformdirs (the user cache folder);
#   typer (the machine's may be any version) with shellingham, annotated-doc and, for typer
#     0.29 on, pydantic (pydantic-core is compiled: its cp312 manylinux wheel).
# Each is pinned to the version in .venv when .venv has it (what the tests here ran with).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
dest="${1:-gpu_wheels}"
packages=(sqlite-utils sqlite-fts4 click-default-group tabulate click platformdirs typer
          shellingham annotated-doc pydantic pydantic-core annotated-types typing-inspection)
python="${PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
specs=()
for package in "${packages[@]}"; do
    name="${package%%[<>=]*}"
    version=""
    if [ -x .venv/bin/python ]; then
        version="$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('$name'))" \
                   2>/dev/null || true)"
    fi
    if [ -n "$version" ]; then specs+=("$name==$version"); else specs+=("$package"); fi
done
staging="$dest.partial"
rm -rf "$staging"
mkdir -p "$staging"
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 \
    -d "$staging" "${specs[@]}"
impure="$(find "$staging" -name '*.whl' ! -name '*-none-any.whl')"
if [ -n "$impure" ]; then
    echo "gpu_wheels.sh: not pure-Python wheels (gpu_check.sh unpacks only those): $impure" >&2
    exit 1
fi
(
    cd "$staging"
    echo "# made by scripts/gpu_wheels.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) from: ${specs[*]}"
    sha256sum -- *.whl
) >"$staging/SHA256SUMS"
rm -rf "$dest"
mv "$staging" "$dest"
ls "$dest"/*.whl
