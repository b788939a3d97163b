"""Each option is declared once (a ``Param``), and everything else is made from it: the
command line's options, the MCP tools' arguments (tests/test_mcp.py checks those), docs/CLI.md
and the README's table; and nothing in the packages changes a module's globals once it runs."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from reports.pipeline.options import OPTIONS, AnalysisOptions

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nsys_parsers", "nvtx_model", "reports", "profile_cli")
# Flags of a ``Param`` that another declaration carries too, because they mean another thing
# on other commands: each with its meanings.
TWO_MEANINGS = {
    "--rules": "check's rules file of assertions; the kernel-category rules of the others",
    "--within": "profile's window of the run it mines, `measure` by default",
    "--nsys": "profile's nsys records the run; the others' nsys exports a .nsys-rep",
    "--range": "one range of kernels, several of dominant, side a of compare",
    "--format": "report's page format (html, md); the answer formats of the others",
    "--output": "report's page file; the answer file of the others",
    "--top": "rows of report's tables; rows of the answer of the others",
    **dict.fromkeys(("--size", "--d-model", "--heads", "--context", "--batch"),
                    "the shape of a run made (attention, default: its sidecar); of runs to "
                    "make (the workload options of bench, profile...)"),
    **dict.fromkeys(("--slurm-partition", "--slurm-time", "--slurm-mem", "--slurm-arg"),
                    "the Dask workers' jobs (ranks); the profiling jobs (sweep)"),
}


def _declared_flags() -> tuple[dict[str, list[str]], set[str]]:
    """Each flag given to a declaration (``Param(...)``, ``typer.Option(...)``,
    ``typer.Argument(...)``) in the packages, and where; and the flags of ``Param``s."""
    found: dict[str, list[str]] = {}
    params: set[str] = set()
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name not in ("Param", "Option", "Argument"):
                    continue
                for arg in ast.walk(node):
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        for flag in arg.value.split("/"):
                            if flag.startswith("--") and " " not in flag and len(flag) > 2:
                                found.setdefault(flag, []).append(
                                    f"{path.relative_to(ROOT)}:{node.lineno}")
                                if name == "Param":
                                    params.add(flag)
    return found, params


def test_the_analysis_options_are_their_declarations():
    """``AnalysisOptions`` has one field per declaration of ``OPTIONS``, same name, same
    default: the values the command line and the MCP server build from them."""
    assert [f.name for f in fields(AnalysisOptions)] == [p.name for p in OPTIONS]
    defaults = AnalysisOptions()
    for p in OPTIONS:
        assert getattr(defaults, p.name) == (tuple(p.default or ()) if p.multiple
                                             else p.default), p.name


def test_a_person_who_greps_for_an_option_finds_its_one_declaration():
    """Every flag of a ``Param`` (the analysis options, the output options, the analyses' and
    the page's own) is declared in one place: the command line and the MCP server make their
    options and arguments from it (the server declares none by hand); but for the few that
    mean one thing on some commands and another on others, each named here."""
    found, params = _declared_flags()
    twice = {f: found[f] for f in params if len(found[f]) > 1}
    assert set(twice) <= set(TWO_MEANINGS), {f: twice[f] for f in set(twice) - set(TWO_MEANINGS)}
    assert all(len(found[f]) > 1 for f in TWO_MEANINGS), {f: found.get(f) for f in TWO_MEANINGS}
    assert not [w for where in found.values() for w in where if "mcp_server" in w]
    assert {"--within", "--merge-op-ids", "--cache", "--alpha", "--by", "--top"} <= params


def test_no_module_global_is_set_at_run_time():
    """State lives in values that callers hold (a ``Session``, a ``Memo``, a server), not in
    module globals a function rebinds (``global``) or another module assigns
    (``module.NAME = ...``; ``sys.argv`` of the program the launcher runs as Python would is
    Python's, not ours). One exception: the model's NVTX instrumentation switch
    (``nvtx_model.nvtx_ranges.activated``), which the autograd engine's own threads must see
    too (a context variable would not reach them)."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            imported = {a.asname or a.name for n in ast.walk(tree)
                        if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
            for node in ast.walk(tree):
                where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Global):
                    found.append(f"{where} global {', '.join(node.names)}")
                elif isinstance(node, (ast.Assign, ast.AugAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                                and t.value.id in imported and t.value.id != "sys":
                            found.append(f"{where} {t.value.id}.{t.attr} =")
    assert [f for f in found if "global _current" not in f
            or not f.startswith("nvtx_model/nvtx_ranges.py")] == [], found
