"""The ``nsys-mine`` command line.

Each command parses options, calls one library function that returns data, and hands the data
to ``reports.render``. ``main()`` is the one place where library errors become
``Error: ...`` on stderr and exit code 1. The mining commands come from the analyses'
declarations (``profile_cli.commands.mine``); heavy libraries (torch, matplotlib, pandas)
are imported inside the commands that use them.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from nsys_parsers.errors import NsysMineError

if TYPE_CHECKING:
    import typer

# Modules with a ``register(app)`` function, in the order of `nsys-mine --help`.
COMMAND_MODULES = ("profile_cli.commands.mine", "profile_cli.commands.bench",
                   "profile_cli.commands.profile", "profile_cli.commands.infer",
                   "profile_cli.commands.mcp")


# The hand-written commands' modules (every other command is an analysis: commands.mine).
MODULE_OF = {"report": "profile_cli.commands.mine", "bench": "profile_cli.commands.bench",
             "memory": "profile_cli.commands.bench", "profile": "profile_cli.commands.profile",
             "sweep": "profile_cli.commands.profile", "infer": "profile_cli.commands.infer",
             "micro": "profile_cli.commands.infer", "mcp": "profile_cli.commands.mcp"}


def _root() -> None:
    """Mine Nsight Systems exports of PyTorch models: which CUDA kernel dominates, and where."""


def new_app(modules: tuple[str, ...] = COMMAND_MODULES, command: str | None = None
            ) -> typer.Typer:
    """The application with the commands of ``modules`` (an optional one that is not
    installed is left out); ``command``: with that command only (what a run of it needs:
    its module alone is imported, and of the analyses, its own)."""
    import typer

    app = typer.Typer(
        name="nsys-mine",
        help="Mine Nsight Systems exports of PyTorch models: which CUDA kernel dominates, "
             "and where.\n\nAn answer whose memory estimate is over `NSYS_MINE_MEMORY_MB` "
             "(default: the memory available; 0: no check) stops before reading the export "
             "and says how much it needs.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
    )
    app.callback()(_root)  # a group, also with one command (Typer makes one command its app)
    if command is not None:
        modules = (MODULE_OF.get(command, "profile_cli.commands.mine"),)
    for module in modules:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        if module == "profile_cli.commands.mine":
            mod.register(app, command)
        else:
            mod.register(app)
    return app


def app_for(args: list[str]) -> typer.Typer:
    """The application a command line runs: with only its command when the first argument
    names one (else, for --help, a misspelt command or none: with every command)."""
    if args and not args[0].startswith("-"):
        app = new_app(command=args[0])
        if any(c.name == args[0] for c in app.registered_commands) or any(
                g.name == args[0] for g in app.registered_groups):
            return app
    return new_app()


def __getattr__(name: str) -> Any:
    """``app``: the whole application, built on first use."""
    if name == "app":
        app = globals()["app"] = new_app()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: runs the command line (``argv``, default ``sys.argv``), exits with the
    command's code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is None:
        one_malloc_arena()
    sys.exit(run_args(args))


def one_malloc_arena() -> None:
    """With glibc, one malloc arena for this process (``mallopt(M_ARENA_MAX, 1)``), before
    any thread starts: the reader threads' chunks of text and numbers otherwise go to arenas
    of their own, whose freed memory the process keeps (10-15% of a cold question's peak at
    x100, no time lost: docs/ARCHITECTURE.md). The command line's process only, not a
    program that imports the library; elsewhere (macOS, musl) nothing."""
    from nsys_parsers.heap import glibc_call

    glibc_call("mallopt", -8, 1)  # M_ARENA_MAX (malloc.h)


def run_args(args: list[str]) -> int:
    """Run one command line in this process: its exit code. The one place where a
    NsysMineError becomes ``Error: ...`` on stderr and exit code 1."""
    try:
        app_for(args)(args=args, standalone_mode=True, prog_name="nsys-mine")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except NsysMineError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    except (ValueError, OSError) as exc:  # a path no check foresaw (nsys_parsers.paths)
        from nsys_parsers.paths import unusable_path

        said = unusable_path(exc)
        if said is None:
            raise
        sys.stderr.write(f"Error: {said}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        return 130
    return 0
