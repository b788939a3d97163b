"""Documentation generated from the command line itself, so that it cannot drift.

Used by cog blocks in README.md, docs/MODEL.md and docs/ARCHITECTURE.md (``cog -r -I scripts
README.md docs/MODEL.md docs/ARCHITECTURE.md``) and to write docs/CLI.md. ``.ci/run`` checks
both:

    .venv/bin/cog --check -I scripts README.md docs/MODEL.md docs/ARCHITECTURE.md
    .venv/bin/python scripts/gen_docs.py --check        # docs/CLI.md, docs/schema
    .venv/bin/python scripts/gen_docs.py                # rewrite docs/CLI.md, docs/schema
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CLI_MD = ROOT / "docs" / "CLI.md"
SCHEMA_DIR = ROOT / "docs" / "schema"


def _group():  # the click group behind the Typer app
    import typer.main

    from profile_cli.app import app

    return typer.main.get_command(app)


def _commands() -> list[tuple[str, object]]:
    group = _group()
    return [(name, group.commands[name]) for name in group.commands]


def _first_line(cmd: object) -> str:
    """The first paragraph of a command's help, on one line."""
    import inspect

    text = inspect.cleandoc(getattr(cmd, "help", None) or "")
    return " ".join(text.split("\n\n")[0].split())


def _opts(param: object) -> str:
    return ", ".join(f"`{o}`" for o in getattr(param, "opts", [])
                     + getattr(param, "secondary_opts", []))


def _default(param: object) -> str:
    show = getattr(param, "show_default", None)
    if isinstance(show, str):
        return f"`{show}`"
    value = getattr(param, "default", None)
    if value is None or value == () or value is False or callable(value):
        return ""
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def workload_table() -> str:
    """The workload options of ``bench`` (their defaults there) as a markdown table."""
    bench = dict(_commands())["bench"]
    out = ["| option | default (bench) | meaning |", "| --- | --- | --- |"]
    for p in bench.params:  # type: ignore[attr-defined]
        if getattr(p, "rich_help_panel", None) == "Workload":
            out.append(f"| {_opts(p)} | {_default(p)} | {_cell(p.help or '')} |")
    return "\n".join(out)


def command_defaults(name: str, options: tuple[str, ...]) -> str:
    """``--opt default`` pairs of one command, e.g. where profile differs from bench."""
    cmd = dict(_commands())[name]
    found = {p.opts[0]: _default(p) for p in cmd.params  # type: ignore[attr-defined]
             if p.opts and p.opts[0] in options}
    return ", ".join(f"`{o}` {found[o] or '(none)'}" for o in options if o in found)


def source(path: str) -> str:
    """A file of the project as a fenced code block (docs quote real, tested code)."""
    text = (ROOT / path).read_text(encoding="utf-8").rstrip("\n")
    lang = "python" if path.endswith(".py") else "text"
    return f"```{lang}\n{text}\n```"


def commands_table() -> str:
    """Every command with what it answers and its own options (shared groups named once)."""
    shared = {"Output", "Workload", "Nsight Systems"}
    out = ["| command | what it answers | options |", "| --- | --- | --- |"]
    for name, cmd in _commands():
        args = " ".join(  # an optional argument as its usage shows it: [-- COMMAND [ARGS]...]
            p.metavar if (p.metavar or "").startswith("[--") else p.name.upper()
            for p in cmd.params if p.param_type_name == "argument")  # type: ignore[attr-defined]
        opts = [p for p in cmd.params if p.param_type_name == "option"  # type: ignore[attr-defined]
                and getattr(p, "rich_help_panel", None) not in shared and p.name != "help"]
        panels = sorted({getattr(p, "rich_help_panel", None) for p in cmd.params  # type: ignore[attr-defined]
                         if getattr(p, "rich_help_panel", None) in shared})
        listed = ", ".join(f"`{p.opts[0]}`" for p in opts)
        if panels:
            listed += ("; " if listed else "") + ", ".join(f"{p.lower()} options" for p in panels)
        out.append(f"| `nsys-mine {name}{' ' + args if args else ''}` | "
                   f"{_cell(_first_line(cmd))} | {listed} |")
    return "\n".join(out)


def cli_reference() -> str:
    """docs/CLI.md: ``--help`` of every command, as a terminal of 100 columns shows it."""
    from typer.testing import CliRunner

    from profile_cli.app import app

    env = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    parts = ["# Command-line reference", "",
             "Generated from `--help` by `scripts/gen_docs.py` (checked in CI); do not edit.",
             ""]
    runner = CliRunner()
    for name, _ in [("", None), *_commands()]:
        args = [name, "--help"] if name else ["--help"]
        text = runner.invoke(app, args, env=env, prog_name="nsys-mine").output
        text = "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")
        parts += [f"## `nsys-mine {name}`" if name else "## `nsys-mine`", "", "```text", text,
                  "```", ""]
    return "\n".join(parts)


def main(argv: list[str]) -> int:
    from reports.pipeline.contract import stale_schemas, write_schemas

    os.environ["COLUMNS"] = "100"
    text = cli_reference()
    if "--check" in argv:
        stale = stale_schemas(SCHEMA_DIR)
        if stale:
            sys.stderr.write(f"docs/schema is out of date ({', '.join(stale)}): run "
                             f".venv/bin/python scripts/gen_docs.py\n")
        if not CLI_MD.exists() or CLI_MD.read_text() != text:
            sys.stderr.write("docs/CLI.md is out of date: run .venv/bin/python "
                             "scripts/gen_docs.py\n")
            return 1
        return 1 if stale else 0
    CLI_MD.write_text(text)
    write_schemas(SCHEMA_DIR)  # the JSON contract: docs/schema/CMD.json (reports.pipeline.contract)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
