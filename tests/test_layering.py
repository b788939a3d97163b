"""The package layering holds: dependencies only point down, and no module cycles.

Layers, bottom to top: ``nsys_parsers`` (readers, errors) < ``nvtx_model`` (model, workload)
< ``reports`` (analyses) < ``profile_cli`` (the command line). Every import counts, including
those inside functions and under ``TYPE_CHECKING``: a lazy import does not make a cycle go away.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["nsys_parsers", "nvtx_model", "reports", "profile_cli"]


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in LAYERS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that ``path`` imports (anywhere in the file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name in modules:
                found.add(name)
    return found


GRAPH = {name: _imports(path, _modules()) for name, path in _modules().items()}


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[0])


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module):
    upward = sorted(m for m in GRAPH[module] if _layer(m) > _layer(module))
    assert not upward, f"{module} imports a higher layer: {upward}"


def test_no_import_cycles():
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(GRAPH[m]):
            if dep == m or (m in LAYERS and dep.startswith(m + ".")):
                continue  # a package's __init__ may re-export its own modules
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep):] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if state.get(dep) is None:
                visit(dep)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_the_cli_starts_without_heavy_libraries():
    """``nsys-mine --help`` (every command registered) does not pay for pandas, torch or
    matplotlib (numpy, which every analysis uses, it does)."""
    code = ("import sys, profile_cli.app; profile_cli.app.app; "
            "heavy = [m for m in ('pandas', 'torch', 'matplotlib') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "", f"imported at CLI start-up: {out}"


def test_the_model_package_does_not_need_typer_or_torch_to_plan():
    """Planning configs (nvtx_model.workload/config) works without Typer and torch."""
    code = ("import sys, nvtx_model.workload, nvtx_model.config; "
            "print(','.join(m for m in ('typer', 'torch', 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == ""


def test_one_definition_of_each_public_function():
    """Two different functions named alike (two `run_sweep`s) make readers guess: a public
    top-level function name is defined once across the packages."""
    seen: dict[str, str] = {}
    allowed = {"main", "register"}  # entry points by convention
    clashes = []
    for name, path in _modules().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") \
                    and node.name not in allowed:
                if node.name in seen:
                    clashes.append(f"{node.name}: {seen[node.name]} and {name}")
                seen.setdefault(node.name, name)
    assert not clashes, clashes


def test_analyses_import_no_analyses():
    """An analysis stands alone: what two analyses share lives in a ``reports`` module named
    for what it is (``gpu_time``, ``model_ranges``, ``params``, ``rules``, ...); an analysis
    that needs another's answer asks it through ``reports.pipeline.ask``."""
    crossing = sorted(f"{m} imports {d}" for m, deps in GRAPH.items()
                      if m.startswith("reports.analyses.")
                      for d in deps if d.startswith("reports.analyses.") and d != m)
    assert not crossing, crossing


def test_tests_import_no_tests():
    """A test file imports helpers (``tests/synth.py``, ``tests/pages.py``, ...), never
    another test file."""
    crossing = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.split(".")[-1].startswith("test_"):
                crossing.append(f"{path.relative_to(ROOT)} imports {node.module}")
    assert not crossing, crossing


def test_no_function_is_longer_than_80_lines():
    """A function a reader must hold in their head at once stays short: none of the four
    packages has one over 80 lines (its decorators and docstring included)."""
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno is not None and node.end_lineno - first + 1 > 80:
                    long.append(f"{name}.{node.name}: {node.end_lineno - first + 1} lines")
    assert not long, long


def _room(module: str) -> str:
    """The room of a ``reports`` module as a reader sees the folder: its subpackage
    (``reports/pipeline``) or its own file (``reports/by.py``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "reports/__init__.py"
    if (ROOT / "reports" / parts[1]).is_dir():
        return f"reports/{parts[1]}"
    return f"reports/{parts[1]}.py"


def test_inside_reports_no_import_runs_back_up():
    """``reports`` stands in floors: render at the bottom, the knowledge analyses share, the
    pipeline, the analyses, the cross-rank engine and the page (drawn from answers): no two
    of its folders or files import each other, directly or round a circle (the package's
    face, ``reports/__init__.py``, lazily hands on the Python API and is left out)."""
    rooms: dict[str, set[str]] = {}
    for m, deps in GRAPH.items():
        if m.split(".")[0] != "reports" or m == "reports":
            continue
        rooms.setdefault(_room(m), set()).update(
            _room(d) for d in deps if d.split(".")[0] == "reports" and d != "reports")
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(r: str) -> None:
        state[r] = 1
        stack.append(r)
        for dep in sorted(rooms.get(r, set()) - {r}):
            if state.get(dep) == 1:
                raise AssertionError("an import runs back up: "
                                     + " -> ".join(stack[stack.index(dep):] + [dep]))
            if state.get(dep) is None:
                visit(dep)
        stack.pop()
        state[r] = 2

    for r in sorted(rooms):
        if r not in state:
            visit(r)


def test_the_page_is_drawn_from_answers():
    """No analysis imports the page, and the page imports no analysis: it asks them through
    the pipeline (``reports.pipeline.ask``) and shows their answers."""
    crossing = sorted(f"{m} imports {d}" for m, deps in GRAPH.items() for d in deps
                      if (m.startswith("reports.analyses.") and d.startswith("reports.page"))
                      or (m.startswith(("reports.page", "reports.ranks.page"))
                          and d.startswith("reports.analyses.")))
    assert not crossing, crossing
