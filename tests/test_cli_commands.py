"""How commands are built: from declarations, with Typer's public API, nothing rewritten or
patched (profile_cli.commands.groups, profile_cli.commands.mine)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from profile_cli.commands.groups import OptionGroup, grouped
from profile_cli.commands.mine import analysis_command, mine
from reports.pipeline.analysis import Analysis, Param
from reports.pipeline.report import Report

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("profile_cli", "reports", "nvtx_model", "nsys_parsers")


def _modules(root: Path) -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def _root(node: ast.AST) -> str | None:
    """The name an attribute or subscript chain starts from (``a`` of ``a.b[c].d``), or of
    ``vars(a)``."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args \
            and node.func.id == "vars":
        return _root(node.args[0])
    return node.id if isinstance(node, ast.Name) else None


def _library_names(tree: ast.Module) -> set[str]:
    """The names a module binds to rich or typer (their modules, classes and functions), also
    through a tuple of them or a loop over one (``for cls in (core.TyperCommand, ...)``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.split(".")[0] in ("rich", "typer")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                "rich", "typer"):
            names |= {a.asname or a.name for a in node.names}

    def of_library(value: ast.AST) -> bool:
        items = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
        return bool(items) and all(_root(i) in names for i in items)

    for _ in range(3):  # names bound to names bound to the libraries
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and of_library(node.value):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                    and of_library(node.iter):
                names.add(node.target.id)
    return names


def rewritten_or_patched(root: Path) -> list[str]:
    """``file:line: what`` for each assignment of ``__signature__`` or ``__annotations__``,
    deletion of ``__wrapped__`` and replacement of something rich or typer hold (an attribute
    of their modules or classes, through assignment, ``setattr`` or ``vars()``) in the four
    packages under ``root``."""
    found = []
    for path in _modules(root):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        library = _library_names(tree)
        where = path.relative_to(root)
        for node in ast.walk(tree):
            targets: list[ast.AST] = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            elif isinstance(node, ast.Delete):
                targets = node.targets
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr in (
                        "__signature__", "__annotations__", "__wrapped__"):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(t)}")
                elif isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in library:
                    found.append(f"{where}:{node.lineno}: {ast.unparse(t)} replaced")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("setattr", "delattr") and node.args:
                if _root(node.args[0]) in library or (
                        isinstance(node.args[1], ast.Constant) and node.args[1].value in (
                            "__signature__", "__annotations__", "__wrapped__")):
                    found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_signature_rewriting_and_no_library_patching():
    """Commands come from declarations through Typer's public API: no signature is rewritten
    for Typer to read, and nothing of rich or typer is replaced (the help renderer's tables
    were once swapped for folding ones)."""
    found = rewritten_or_patched(ROOT)
    assert not found, found


def test_the_check_finds_what_it_forbids(tmp_path):
    """The check above is not blind: each pattern it forbids is found."""
    bad = tmp_path / "profile_cli" / "bad.py"
    bad.parent.mkdir()
    bad.write_text("import typer.core\nfrom rich import table\n\n"
                   "def f(fn):\n    fn.__signature__ = None\n    del fn.__wrapped__\n"
                   "    vars(table)['Table'] = object\n"
                   "    typer.core.TyperCommand.format_help = f\n"
                   "    setattr(table, 'Table', object)\n"
                   "    for m in (table, typer.core):\n        vars(m)['Table'] = object\n")
    found = rewritten_or_patched(tmp_path)
    assert [f.split(":")[1] for f in found] == ["5", "6", "7", "8", "9", "11"], found


def _job_analysis(seen: list) -> Analysis:
    """An analysis of one export or of a job's exports, which it opens itself (``inputs="job"``,
    as ``ranks`` on Dask workers): ``run_job(paths, options, **params)``."""
    def run_job(paths, options, count=2):
        seen.append((paths, options, count))
        return Report(rows=[{"exports": len(paths), "count": count}],
                      columns=["exports", "count"])

    return Analysis(name="per-path", help="One row about the paths.\n\nExample: `x`",
                    run=lambda s, count=2: Report(rows=[], columns=["exports", "count"]),
                    run_job=run_job, columns=["exports", "count"], inputs="job",
                    options=("within", "cache"),
                    params=(Param("count", ("--count",), "How many.", type=int, default=2,
                                  minimum=1, metavar="N"),))


def test_a_job_analysis_gets_its_exports_and_options(tmp_path):
    """An analysis declared with ``inputs="job"`` gets EXPORT... (one or several, as an
    ``exports`` analysis), the analysis options it declares, its own parameters and the
    output options; a job's paths reach ``run_job`` as given, unopened."""
    seen: list = []
    a = _job_analysis(seen)
    app = typer.Typer(add_completion=False)
    app.command(a.name, cls=analysis_command(a), help=a.help)(mine)
    app.command("other")(lambda: None)  # a group, as in nsys-mine
    cmd = typer.main.get_command(app).commands["per-path"]  # type: ignore[attr-defined]
    (arg,) = [p for p in cmd.params if p.param_type_name == "argument"]
    assert (arg.name, arg.nargs, arg.required) == ("exports", -1, True)
    options = [o for p in cmd.params for o in p.opts if p.param_type_name == "option"]
    assert {"--within", "--cache", "--count", "--format", "--top"} <= set(options)
    assert "--depth" not in options  # not declared
    a_path, b_path = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    res = CliRunner().invoke(app, ["per-path", str(a_path), str(b_path), "--within", "measure",
                                   "--no-cache", "--count", "3", "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"exports": 2, "count": 3}]
    paths, opts, count = seen[0]
    assert paths == [a_path, b_path] and count == 3
    assert opts.within == "measure" and opts.cache is False
    assert CliRunner().invoke(app, ["per-path"]).exit_code == 2  # EXPORT is required
    assert CliRunner().invoke(app, ["per-path", "a", "--count", "0"]).exit_code == 2


def test_option_groups_per_command_defaults_and_values():
    """A group's options come first, with the command's own defaults; the function reads the
    built value from the context; names that are not fields are refused when declared."""
    from dataclasses import dataclass
    from typing import Annotated, List, Optional

    @dataclass(frozen=True)
    class Spec:
        steps: int = 3
        tags: tuple = ()
        hidden_size: str = "small"

    group = OptionGroup("spec", Spec, {
        "steps": Annotated[int, typer.Option("--steps", min=1, help="Steps.")],
        "tags": Annotated[Optional[List[str]], typer.Option("--tag", help="Tags.")],
    }, {"steps": 3, "tags": None}, convert={"tags": lambda v: tuple(v or ())},
        hidden=("hidden_size",))
    with pytest.raises(TypeError, match="not Spec options: nope"):
        group(nope=1)
    seen = []
    app = typer.Typer(add_completion=False)

    @app.command("run", cls=grouped(group(steps=5, hidden_size="tiny")))
    def run(ctx: typer.Context, name: str = "x") -> None:
        seen.append((group.of(ctx), name))

    app.command("other")(lambda: None)
    cmd = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    assert [p.name for p in cmd.params][:3] == ["steps", "tags", "name"]
    assert CliRunner().invoke(app, ["run", "--tag", "a", "--tag", "b"]).exit_code == 0
    assert CliRunner().invoke(app, ["run", "--steps", "7", "--name", "y"]).exit_code == 0
    assert seen == [(Spec(5, ("a", "b"), "tiny"), "x"), (Spec(7, (), "tiny"), "y")]
    assert CliRunner().invoke(app, ["run", "--steps", "0"]).exit_code == 2


def test_a_command_line_builds_its_own_command_only(fx):
    """``nsys-mine kernels EXPORT`` imports the kernels analysis and not the others, and the
    answer is the one the whole application gives (one command is still a group: the
    command's name is not taken for an export)."""
    import json
    import subprocess
    import sys

    from profile_cli.app import app_for
    from reports.pipeline.ask import ask

    export = fx("vecadd_t4_nsys2022.4.sqlite")
    code = ("import sys, json; from profile_cli.app import main\n"
            f"try: main(['kernels', {str(export)!r}, '--format', 'json'])\n"
            "except SystemExit: pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('reports.analyses.'))),"
            " file=sys.stderr)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert json.loads(res.stdout) == ask("kernels", [export]).rows
    assert json.loads(res.stderr.strip().splitlines()[-1]) == ["reports.analyses.kernels"]
    assert [c.name for c in app_for(["kernels"]).registered_commands] == ["kernels"]
    everything = [c.name for c in app_for(["--help"]).registered_commands]
    assert "kernels" in everything and "gaps" in everything and "bench" in everything
    assert len(app_for(["kernel"]).registered_commands) == len(everything)  # a typo: all
