"""The ``nsys-mine`` command line.

Each command parses options, calls one library function that returns data, and hands the data
to ``reports.render``. ``main()`` is the one place where library errors become
``Error: ...`` on stderr and exit code 1. Heavy libraries (pandas, numpy, torch) are imported
inside the commands, so that ``--help`` and small jobs start fast.

The commands live in modules of their own (``COMMAND_MODULES``). ``main()`` imports only the
module of the command it runs (a mining command does not import the profiler, the model
configs or the inference suite), and registers that command alone (Typer builds the options
of that one only). ``--help``, no command or an unknown one get ``index_app()``: every
command listed from ``COMMAND_HELP``, with no command module imported. ``app``, the whole
application, is built on first use.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Any, Iterator

import typer

from nsys_parsers.errors import NsysMineError

# Modules with a ``register(app)`` function, in the order of `nsys-mine --help`.
COMMAND_MODULES = ("profile_cli.commands.mine", "profile_cli.commands.gates",
                   "profile_cli.commands.bench", "profile_cli.commands.profile",
                   "profile_cli.commands.infer")
# Which module defines each command, so that main() imports that one only
# (tests/test_cli.py checks it against the registered commands).
MODULE_OF = {
    **dict.fromkeys(("info", "kernels", "ranges", "nvtx-kernels", "dominant", "memops",
                     "categories", "attention", "report"), "profile_cli.commands.mine"),
    **dict.fromkeys(("compare", "diff", "check"), "profile_cli.commands.gates"),
    **dict.fromkeys(("bench", "memory"), "profile_cli.commands.bench"),
    **dict.fromkeys(("profile", "sweep"), "profile_cli.commands.profile"),
    **dict.fromkeys(("infer", "micro"), "profile_cli.commands.infer"),
}
# What `nsys-mine --help` lists for each command: the first paragraph of its help, in the
# order of MODULE_OF. The list (and the command line with no command, or an unknown one) is
# built from here, without importing the command modules or building their options (`--help`
# 0.33 -> 0.24 s); tests/test_cli.py checks it against the commands' own help.
COMMAND_HELP = {
    "info": "Export metadata: nsys and schema version, GPUs, capture command, table row counts.",
    "kernels": "CUDA kernel summary by name (as nsys cuda_gpu_kern_sum / gpukernsum).",
    "ranges": "NVTX range summary: CPU durations (as nsys nvtx_sum) plus the GPU time of their "
              "kernels.",
    "nvtx-kernels": "Kernels grouped by the NVTX range that launched them (as nsys "
                    "nvtx_kern_sum).",
    "dominant": "Which kernel dominates: for the whole export and for each NVTX range.",
    "memops": "Memory operations: memcpy by kind and memset, count, bytes, time and "
              "throughput.",
    "categories": "The kernel-category rule table (first match wins; rules of --rules come "
                  "first).",
    "attention": "Attention runtime vs FLOPs: scores, softmax and final matmul of the naive "
                 "attention.",
    "report": "The page people open: headline answers, plots and tables of an export or a "
              "sweep.",
    "compare": "How the kernel mix changes: two ranges of one export, or two exports, side by "
               "side.",
    "diff": "Run-to-run: per range and per kernel, time per instance, change, and a verdict.",
    "check": "CI gate: assert rules on an export; exit 0 (all pass), 3 (a rule failed), 1 "
             "(error).",
    "bench": "Time forward, forward-backward and training steps of the Transformer LM.",
    "memory": "Peak memory of forward or training steps, with an estimated breakdown.",
    "profile": "Profile one config of the Transformer, or your own program, under nsys and "
               "show what dominates each range.",
    "sweep": "Profile sizes x contexts x modes x precisions x attention, or your command "
             "over a --grid, one nsys run per config.",
    "infer": "Inference latency over a grid of batch sizes x input lengths.",
    "micro": "Micro-benchmarks: matmul time vs dimension, MLP time vs steps, layers, batch "
             "and width, with fitted scaling exponents.",
}


def _help_folds_long_words() -> None:
    """``--help`` tables fold a word longer than its column instead of cutting it: at 80
    columns Typer's tables showed ``--slurm-gpus-per-t…``, ``--d-model/--d-ff/--layers/-…``
    and ``~/.cache/nsys-mine/col…``. ``format_help`` is wrapped so that, while help is
    rendered (and only then: Typer's help renderer and the rich Markdown it imports take
    0.1 s to load), the tables of Typer's help and of rich's ``Columns`` inside it fold."""
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


def new_app(modules: tuple[str, ...] = COMMAND_MODULES, only: str | None = None
            ) -> typer.Typer:
    """The application with the commands of ``modules`` (an optional one that is not
    installed is left out); ``only``: with just that command of them (Typer builds the
    options of every registered command before it runs one: 15-30 ms for the 9 commands of
    the mining module)."""
    app = _typer_app()
    for module in modules:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        mod.register(app)
    if only is not None:
        app.registered_commands = [c for c in app.registered_commands if c.name == only]
        app.registered_groups = [g for g in app.registered_groups if g.name == only]
        # a callback keeps the application a group: `nsys-mine kernels X` (Typer runs a lone
        # command without its name)
        app.callback()(_no_options)
    return app


def _no_options() -> None:
    """The group's callback when it holds one command: no options of its own."""


def _typer_app() -> typer.Typer:
    """The application with no command yet."""
    _help_folds_long_words()
    return typer.Typer(
        name="nsys-mine",
        help="Mine Nsight Systems exports of PyTorch models: which CUDA kernel dominates, "
             "and where.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
    )


def index_app() -> typer.Typer:
    """The application as ``--help`` lists it: every command by its name and COMMAND_HELP,
    with no options (none of them runs: ``_app_for`` gives a named command its module)."""
    app = _typer_app()
    for name, text in COMMAND_HELP.items():
        app.command(name, help=text)(_listed_only)
    return app


def _listed_only() -> None:  # pragma: no cover - the index app runs no command
    """A command of ``index_app``: listed by --help, never run."""
    raise RuntimeError("index_app() lists the commands; new_app() runs them")


def _app_for(args: list[str]) -> typer.Typer:
    """The application ``args`` needs: its command alone (with the module that defines it),
    else the list of every command (no command, ``--help``, an unknown one)."""
    command = _command_of(args)
    module = MODULE_OF.get(command)
    return new_app((module,), only=command) if module else index_app()


def _command_of(args: list[str]) -> str:
    """The command ``args`` name: the first word that is not an option ('' if none)."""
    return next((a for a in args if not a.startswith("-")), "")


def __getattr__(name: str) -> Any:
    """``app``: the whole application, built on first use (tests, docs generation)."""
    if name == "app":
        app = globals()["app"] = new_app()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Modules whose commands only read exports and write what they print or save themselves,
# through files they close: their process may end without the interpreter's teardown.
QUICK_EXIT_MODULES = ("profile_cli.commands.mine", "profile_cli.commands.gates")


def _exit_now(code: int | None) -> None:
    """End the process with ``code`` now: flush the standard streams, then ``os._exit``,
    which skips the interpreter's teardown (freeing every module and object: 30-45 ms with
    numpy loaded, a tenth of a small export's answer). Threads that are not daemons are
    waited for first, as at a normal exit (a cache write in flight ends). A closed pipe ends
    it with 1, as Click does."""
    import os
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = 1
    os._exit(code or 0)


def _no_cycle_collection() -> None:
    """Turn off Python's cyclic garbage collector for the rest of the process: a mining or
    gate command is short, makes few reference cycles (the process ends without teardown,
    ``_exit_now``), and builds many containers (a row dict per range name, tens of thousands
    of them), which set off full collections over everything imported: 10-40 ms of a warm
    answer at x100 (shallow ``ranges``: 0.68 -> 0.64 s)."""
    import gc

    gc.disable()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; NsysMineError -> ``Error: ...`` on stderr, exit code 1.
    As the process's entry (no ``argv``), a mining or gate command that ends normally ends
    the process at once (``_exit_now``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        quick = argv is None and MODULE_OF.get(_command_of(args)) in QUICK_EXIT_MODULES
        if quick:
            _no_cycle_collection()
        app = _app_for(args)
        try:
            app(args=args, standalone_mode=True, prog_name="nsys-mine")
        except SystemExit as exc:
            if quick and (exc.code is None or isinstance(exc.code, int)):
                _exit_now(exc.code)
            raise
    except NsysMineError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        sys.exit(130)
