#!/usr/bin/env bash
# Rehearse the first run on a lent GPU machine here, where there is no GPU: scripts/gpu_check.sh
# --run-without-cuda with a Python 3.12 venv that holds what the GPU machine's python holds
# (scripts/gpu_image.txt: torch 2.11.0+cu130, numpy, pandas, matplotlib, pytest, an older
# typer, click, rich...) and nothing else, and a wheel folder made by scripts/gpu_wheels.sh,
# installed by gpu_check.sh exactly as there (pip install --no-index --no-deps --target, the
# checkout and that folder first on PYTHONPATH). It passes when the wheels install, every
# module of nsys-mine imports, the CLI's --help runs, the WHOLE suite collects, every GPU test
# skips naming CUDA, the carried typer/click/rich win over the image's, and the summary is
# written. .ci/run runs it before the tests. See docs/GPU.md.
#
# Usage: scripts/gpu_rehearsal.sh [OUT_DIR]        (default: .cache/gpu_rehearsal/out)
# Environment: PYTHON312, a CPython 3.12 (default: python3.12 if it runs, else pyenv's newest
# 3.12). Cache (git-ignored): .cache/gpu_rehearsal/wheels (the image's wheels, ~2.6 GB,
# downloaded once) and .cache/gpu_rehearsal/image-HASH (its venv, ~4.6 GB, made again only
# when gpu_image.txt changes).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
cache="$here/.cache/gpu_rehearsal"
out="${1:-$cache/out}"
t0=$SECONDS
say() { echo "gpu_rehearsal: $*" >&2; }

# 1. A CPython 3.12
py312="${PYTHON312:-}"
if [ -z "$py312" ]; then
    if python3.12 -c '' 2>/dev/null; then
        py312=python3.12
    else
        root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
        py312="$(ls -d "$root"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -n 1)"
    fi
fi
if [ -z "$py312" ] || ! "$py312" -c 'import sys; assert sys.version_info[:2] == (3, 12)' \
        2>/dev/null; then
    say "no CPython 3.12 found (set PYTHON312, or: pyenv install 3.12)"
    exit 1
fi

# 2. The image: a venv with scripts/gpu_image.txt, made again only when its requirements change
key="$( (sed -e 's/#.*//' -e '/^[[:space:]]*$/d' scripts/gpu_image.txt; "$py312" -VV) |
       sha256sum | cut -c1-12)"
image="$cache/image-$key"
if [ ! -f "$image/.complete" ]; then
    rm -rf "$cache"/image-*
    mkdir -p "$cache/wheels"
    log="$(mktemp)"
    t1=$SECONDS
    "$py312" -m venv "$image"
    # The image's wheels are kept in the cache; pip finds those it has and fetches the rest.
    if ! { "$image/bin/python" -m pip download -q --disable-pip-version-check \
               -d "$cache/wheels" -r scripts/gpu_image.txt &&
           "$image/bin/python" -m pip install -q --disable-pip-version-check --no-index \
               --find-links "$cache/wheels" -r scripts/gpu_image.txt; } >"$log" 2>&1; then
        grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
        rm -f "$log"
        say "could not make the image venv in $image"
        exit 1
    fi
    rm -f "$log"
    touch "$image/.complete"
    say "image venv made in $((SECONDS - t1)) s ($(du -sh "$cache/wheels" | cut -f1) of" \
        "wheels in $cache/wheels, $(du -sh "$image" | cut -f1) venv)"
fi
# Nothing the wheels bring may be there already (or the rehearsal proves nothing).
if ! (cd / && "$image/bin/python" - <<'EOF'); then
import importlib.util, sys
there = [m for m in ("sqlite_utils", "platformdirs", "pydantic", "pydantic_core",
                     "annotated_doc", "profile_cli", "nsys_parsers")
         if importlib.util.find_spec(m) is not None]
if there:
    sys.exit(f"the image venv holds {', '.join(there)}, which the GPU machine's does not")
EOF
    say "$image is not a faithful image; remove it and run again"
    exit 1
fi

# 3. The wheel folder, as a user makes it on a fresh clone
bash scripts/setup.sh dev,torch
wheels="$cache/gpu_wheels"
t1=$SECONDS
bash scripts/gpu_wheels.sh "$wheels" >/dev/null
say "wheel folder made in $((SECONDS - t1)) s:" \
    "$(find "$wheels" -name '*.whl' | wc -l) wheels, $(du -sh "$wheels" | cut -f1)"

# 4. gpu_check.sh, as the GPU machine runs it (but for --run-without-cuda)
rm -rf "$out"
t1=$SECONDS
set +e
env -u PYTHONPATH -u OUT PYTHON="$image/bin/python" \
    bash scripts/gpu_check.sh "$out" --wheels "$wheels" --run-without-cuda \
    >"$cache/gpu_check.log" 2>&1
rc=$?
set -e
say "gpu_check.sh exited $rc in $((SECONDS - t1)) s (its output: $cache/gpu_check.log)"
if [ "$rc" != 0 ]; then
    tail -n 60 "$cache/gpu_check.log" >&2
    exit 1
fi

# 5. What it must have shown
"$image/bin/python" - "$out" "$wheels" <<'EOF'
import json, re, sys
from pathlib import Path

out = Path(sys.argv[1])
# Every wheel in the folder, by its normalized name (whatever typer's pin pulls in: pydantic
# and its compiled core under typer 0.29, neither under 0.28).
wheeled = {re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower()
           for w in Path(sys.argv[2]).glob("*.whl")}
summary = json.loads((out / "gpu_check.json").read_text())
pre, tests = summary["preflight"], summary["tests"]
problems = []
if summary["pytest_exit"] != 0:
    problems.append(f"pytest exit status {summary['pytest_exit']}")
if len(tests) < 20 or summary["counts"]["skipped"] != len(tests):
    problems.append(f"expected every GPU test (20+) skipped: {summary['counts']}")
problems += [f"{t['test']} skipped without naming CUDA: {t['message']}" for t in tests
             if "CUDA" not in (t["message"] or "")]
if not pre["imports"]["ok"] or pre["imports"]["imported"] < 50:
    problems.append(f"imports: {pre['imports']}")
if not pre["cli"]["ok"]:
    problems.append(f"python -m profile_cli --help: {pre['cli']}")
collect = pre["collect"]
if not collect["ok"] or collect["collected"] < 500:
    problems.append(f"the whole suite does not collect: {collect}")
origin = {p["name"]: p for p in pre["packages"]}
for name in sorted({"typer", "click", "rich", "sqlite-utils", "platformdirs"} | wheeled):
    if origin.get(name, {}).get("origin") != "carried":
        problems.append(f"{name} does not come from the wheels: {origin.get(name)}")
for name in ("numpy", "pandas", "matplotlib"):
    if origin.get(name, {}).get("origin") != "image":
        problems.append(f"{name} does not come from the image: {origin.get(name)}")
image = pre["image"]
if image.get("typer") in (None, origin.get("typer", {}).get("version")):
    problems.append(f"the image's typer ({image.get('typer')}) should be an older one, shadowed")
md = (out / "gpu_check.md").read_text()
if not md.startswith("### GPU check ") or "whole suite collects" not in md:
    problems.append("gpu_check.md lacks its heading or the preflight")
reasons = sorted({t["message"] for t in tests})
print(f"gpu_rehearsal: Python {pre['python']}, torch {summary['environment']['torch']} "
      f"(CUDA {summary['environment']['cuda']}); {len(tests)} GPU tests, all skipped:",
      *[f"  {r}" for r in reasons], sep="\n", file=sys.stderr)
print(f"gpu_rehearsal: whole suite: {collect['collected']} tests collected, "
      f"{collect['errors']} errors, skipped modules: {collect['skipped_modules'] or 'none'}; "
      f"{pre['imports']['imported']} modules imported; carried typer "
      f"{origin['typer']['version']} over the image's {image.get('typer')}", file=sys.stderr)
if problems:
    print("gpu_rehearsal: FAILED:", *problems, sep="\n  ", file=sys.stderr)
    sys.exit(1)
EOF
say "passed in $((SECONDS - t0)) s; summary: $out/gpu_check.md"
