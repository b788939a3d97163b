#!/usr/bin/env bash
# Run the GPU suite (pytest -m gpu, tests/gpu/) on a machine with a CUDA build of torch and
# no network, and write its summary. Installs nothing from the network: the project's
# dependencies that such a machine lacks come from a folder of wheels made beforehand by
# scripts/gpu_wheels.sh (default gpu_wheels/), installed with pip into a temporary folder;
# the project runs from this checkout (both first on PYTHONPATH). Before the GPU suite, a
# preflight (scripts/gpu_preflight.py) imports every module of nsys-mine, runs the CLI's
# --help and collects the WHOLE test suite with that PYTHONPATH. See docs/GPU.md.
#
# Usage: scripts/gpu_check.sh [OUT_DIR] [--wheels DIR] [--require-cuda] [--run-without-cuda]
#                             [--time-limit SECONDS] [-- PYTEST_ARGS...]
#   OUT_DIR             where gpu_check.json, gpu_check.md, preflight.json, pytest.log and the
#                       JUnit XML go (default: $OUT when set, else gpu_check_out/)
#   --wheels DIR        the wheel folder (default: $NSYS_MINE_GPU_WHEELS, else gpu_wheels/)
#   --require-cuda      no CUDA device is an error (exit 1), for a CI job on a GPU runner
#   --run-without-cuda  run the suite anyway (every test skips): checks this script itself
#   --time-limit S      interrupt the GPU suite after S seconds (SIGINT: pytest stops and
#                       records what ran); the summary is written either way
# Environment: PYTHON (default python3), the interpreter that has the CUDA build of torch.
# Exit status: pytest's (0: every test passed or skipped for a stated reason; 2: interrupted);
# 0 with the line "no CUDA device: nothing checked" when there is no CUDA device; 2 for a
# usage error, a missing dependency, wheels that cannot be installed, or nsys-mine failing to
# import; 3 when the GPU suite passed but the whole suite did not collect.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

out="" wheels="${NSYS_MINE_GPU_WHEELS:-$here/gpu_wheels}" require=0 force=0 limit=""
pytest_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) [ $# -ge 2 ] || { echo "gpu_check.sh: --wheels needs a folder" >&2; exit 2; }
                  wheels="$2"; shift 2 ;;
        --require-cuda) require=1; shift ;;
        --run-without-cuda) force=1; shift ;;
        --time-limit) [[ $# -ge 2 && "$2" =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
                          { echo "gpu_check.sh: --time-limit needs seconds" >&2; exit 2; }
                      limit="$2"; shift 2 ;;
        --) shift; pytest_args=("$@"); break ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu_check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) [ -z "$out" ] || { echo "gpu_check.sh: one OUT_DIR only" >&2; exit 2; }
           out="$1"; shift ;;
    esac
done
out="${out:-${OUT:-$here/gpu_check_out}}"
python="${PYTHON:-python3}"

# 1. Is there a CUDA device? (torch may be missing, a CPU build, or see no device)
why="$("$python" - <<'EOF' 2>/dev/null || true
import warnings
try:
    import torch
except ImportError:
    print("torch is not installed for this python")
else:
    with warnings.catch_warnings(record=True) as said:  # e.g. a driver too old for this torch
        warnings.simplefilter("always")
        available = torch.version.cuda is not None and torch.cuda.is_available()
    if torch.version.cuda is None:
        print(f"torch {torch.__version__} is a CPU build")
    elif not available:
        told = f": {str(said[0].message).splitlines()[0]}" if said else ""
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device{told}")
    else:
        print("ok")
EOF
)"
why="$(printf '%s\n' "$why" | tail -n 1)"
if [ "$why" != "ok" ]; then
    if [ "$force" = 0 ]; then
        echo "no CUDA device: nothing checked"
        exe="$("$python" -c 'import sys; print(sys.executable)' 2>/dev/null || echo "$python")"
        echo "($exe: ${why:-python did not run})" >&2
        [ "$require" = 0 ] || { echo "--require-cuda: failing" >&2; exit 1; }
        exit 0
    fi
    echo "no CUDA device ($why): running the suite anyway (--run-without-cuda)," \
         "every test skips" >&2
fi

# 2. The wheels, into a temporary folder that goes first on PYTHONPATH
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
site="$tmp/site"
mkdir -p "$site"
shopt -s nullglob
whl=("$wheels"/*.whl)
shopt -u nullglob
if [ ${#whl[@]} -gt 0 ]; then
    if ! PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --no-index --no-deps \
            --disable-pip-version-check --target "$site" "${whl[@]}" >"$tmp/pip.log" 2>&1; then
        cat "$tmp/pip.log" >&2
        # No pip (or a pip that refuses): a pure-Python wheel is a zip of its install, so
        # unpacking it is enough; a compiled one (pydantic-core) needs pip, never unzip.
        compiled=()
        for w in "${whl[@]}"; do
            case "$w" in *-none-any.whl) ;; *) compiled+=("$(basename "$w")") ;; esac
        done
        if [ ${#compiled[@]} -gt 0 ]; then
            echo "gpu_check.sh: pip could not install the wheels, and ${compiled[*]} is" \
                 "compiled (only pip installs it): is $python a CPython 3.12 with pip?" >&2
            exit 2
        fi
        echo "pip could not install the wheels; unpacking them (all pure Python) into" \
             "$site instead" >&2
        rm -rf "$site" && mkdir -p "$site"
        "$python" - "$site" "${whl[@]}" <<'EOF'
import sys, zipfile
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as z:
        z.extractall(sys.argv[1])
EOF
    fi
    echo "installed ${#whl[@]} wheels from $wheels into a temporary folder" >&2
else
    echo "no wheels in $wheels (scripts/gpu_wheels.sh makes them): using this python's packages" >&2
fi
export PYTHONPATH="$here:$site${PYTHONPATH:+:$PYTHONPATH}"
export MPLBACKEND=Agg MPLCONFIGDIR="$tmp/matplotlib"
missing="$("$python" - <<'EOF'
import importlib.util
need = ["pytest", "torch", "numpy", "pandas", "matplotlib", "rich", "typer", "sqlite_utils",
        "platformdirs"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
EOF
)"
if [ -n "$missing" ]; then
    echo "gpu_check.sh: $python lacks $missing; run scripts/gpu_wheels.sh where PyPI can be" \
         "reached and bring its folder (--wheels DIR), or install them" >&2
    exit 2
fi

# 3. The preflight: nsys-mine imports, its CLI runs, the whole suite collects
mkdir -p "$out"
set +e
"$python" scripts/gpu_preflight.py "$out" --carried "$site"
preflight="$?"
set -e
results="$out/gpu_results.json"
rm -f "$results"
if [ "$preflight" = 1 ]; then
    echo "gpu_check.sh: nsys-mine does not import or its CLI fails here (see above and" \
         "$out/preflight.json): the GPU suite would fail everywhere, so it is not run" >&2
    "$python" scripts/gpu_summary.py "$out" --results "$results"
    exit 2
fi

# 4. The GPU suite
required="$((1 - force))"
timed=()
if [ -n "$limit" ]; then
    if command -v timeout >/dev/null; then
        timed=(timeout --preserve-status --signal=INT --kill-after=30 "$limit")
    else
        echo "gpu_check.sh: no timeout command here: --time-limit $limit is not applied" >&2
    fi
fi
set +e
NSYS_MINE_REQUIRE_GPU="$required" NSYS_MINE_GPU_RESULTS="$results" \
    ${timed[@]+"${timed[@]}"} "$python" -m pytest tests/gpu -m gpu -p no:cacheprovider -v \
    -rfEs -o junit_family=xunit1 --junitxml "$out/gpu_check_junit.xml" \
    ${pytest_args[@]+"${pytest_args[@]}"} \
    2>&1 | tee "$out/pytest.log"
rc="${PIPESTATUS[0]}"
set -e

# 5. The summary
"$python" scripts/gpu_summary.py "$out" --results "$results" --pytest-exit "$rc"
echo "summary: $out/gpu_check.md and $out/gpu_check.json (pytest exit status $rc)"
if [ "$rc" = 0 ] && [ "$preflight" != 0 ]; then
    echo "gpu_check.sh: the GPU suite passed, but the whole suite does not collect here" \
         "(see $out/collect.log)" >&2
    exit 3
fi
exit "$rc"
