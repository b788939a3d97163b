"""The ``nsys-mine`` command line.

Each command parses options, calls one library function that returns data, and hands the data
to ``reports.render``. ``main()`` is the one place where library errors become
``Error: ...`` on stderr and exit code 1. The mining commands come from the analyses'
declarations (``profile_cli.commands.mine``); heavy libraries (torch, matplotlib, pandas)
are imported inside the commands that use them.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any, Iterator

import typer

from nsys_parsers.errors import NsysMineError

# Modules with a ``register(app)`` function, in the order of `nsys-mine --help`.
COMMAND_MODULES = ("profile_cli.commands.mine", "profile_cli.commands.bench",
                   "profile_cli.commands.profile", "profile_cli.commands.infer",
                   "profile_cli.commands.mcp")


def _help_folds_long_words() -> None:
    """``--help`` tables fold a word longer than its column instead of cutting it: at 80
    columns Typer's tables showed ``--slurm-gpus-per-t…``, ``--d-model/--d-ff/--layers/-…``
    and ``~/.cache/nsys-mine/col…``. ``format_help`` is wrapped so that, while help is
    rendered (and only then: Typer's help renderer and the rich Markdown it imports are slow
    to load), the tables of Typer's help and of rich's ``Columns`` inside it fold."""
    from typer import core

    for cls in (core.TyperCommand, core.TyperGroup):
        original = cls.__dict__["format_help"]
        if getattr(original, "folds_long_words", False):
            continue

        def format_help(self: Any, ctx: Any, formatter: Any, _original: Any = original) -> None:
            with _folding_tables():
                return _original(self, ctx, formatter)

        format_help.folds_long_words = True  # type: ignore[attr-defined]
        cls.format_help = format_help  # type: ignore[method-assign]


@contextlib.contextmanager
def _folding_tables() -> Iterator[None]:
    import rich.columns
    from rich.table import Table
    from typer import rich_utils

    class FoldingTable(Table):
        """rich's Table whose columns fold (its default, ``ellipsis``, cuts long words)."""

        def add_column(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("overflow", "fold")
            super().add_column(*args, **kwargs)

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            while len(self.columns) < len(renderables):  # columns made by the first row
                self.add_column()
            super().add_row(*renderables, **kwargs)

    modules = (rich_utils, rich.columns)
    saved = [vars(m)["Table"] for m in modules]
    for m in modules:
        vars(m)["Table"] = FoldingTable
    try:
        yield
    finally:
        for m, table in zip(modules, saved):
            vars(m)["Table"] = table


def new_app(modules: tuple[str, ...] = COMMAND_MODULES) -> typer.Typer:
    """The application with the commands of ``modules`` (an optional one that is not
    installed is left out)."""
    _help_folds_long_words()
    app = typer.Typer(
        name="nsys-mine",
        help="Mine Nsight Systems exports of PyTorch models: which CUDA kernel dominates, "
             "and where.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
    )
    for module in modules:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        mod.register(app)
    return app


def __getattr__(name: str) -> Any:
    """``app``: the whole application, built on first use."""
    if name == "app":
        app = globals()["app"] = new_app()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; NsysMineError -> ``Error: ...`` on stderr, exit code 1."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        new_app()(args=args, standalone_mode=True, prog_name="nsys-mine")
    except NsysMineError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        sys.exit(130)
