#!/usr/bin/env bash
# The static checks .ci/run makes before the tests: lint, types, generated docs up to date.
# Fix what they report with: .venv/bin/ruff check --fix . ; .venv/bin/cog -r -I scripts
# README.md docs/MODEL.md docs/ARCHITECTURE.md ; .venv/bin/python scripts/gen_docs.py
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh dev,torch
echo "== ruff" >&2
.venv/bin/ruff check .
echo "== mypy" >&2
.venv/bin/mypy
echo "== generated docs" >&2
COLUMNS=100 .venv/bin/cog --check -I scripts README.md docs/MODEL.md docs/ARCHITECTURE.md
.venv/bin/python scripts/gen_docs.py --check
