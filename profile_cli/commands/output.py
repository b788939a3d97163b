"""Options shared by every command, and the one output writer."""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Iterator, List, Optional

import typer

from profile_cli.commands.groups import param_group
from reports.pipeline.options import Param
from reports.render import FORMATS, Rendered

if TYPE_CHECKING:
    from reports.pipeline.options import AnalysisOptions


OUTPUT_PANEL = "Output"
# The output options of every command that answers with rows (--format, --output, --top,
# --wide) -> ``OutputSpec``; the MCP tools take ``top`` of them.
OUTPUT_PARAMS = (
    Param("format", ("--format", "-f"), "table (for people), md, csv, json, latex, or text "
          "(plain: one sentence per row where the report has them).", default="table",
          choices=FORMATS, panel=OUTPUT_PANEL),
    Param("output", ("--output", "-o"), "Write the output to this file instead of stdout.",
          type=Path, metavar="FILE", panel=OUTPUT_PANEL, writes=True),
    Param("top", ("--top",), "Show the N first rows by GPU time (CPU time without kernels); 0 "
          "shows all. Default: 20 for table/md/latex/text, all rows for json/csv.", type=int,
          minimum=0, metavar="N", panel=OUTPUT_PANEL),
    Param("wide", ("--wide",), "Tables at their natural width: no column left out, names "
          "shortened only past 100 characters.", type=bool, default=False, panel=OUTPUT_PANEL),
)
ExportArg = Annotated[
    Path,
    typer.Argument(help="An nsys export: .sqlite, or .nsys-rep/.qdrep (exported with nsys).",
                   show_default=False, metavar="EXPORT"),
]
JobArg = Annotated[
    List[Path],
    typer.Argument(help="nsys exports (.sqlite, or .nsys-rep/.qdrep), globs or folders of them.",
                   show_default=False, metavar="EXPORT"),
]
ExportsArg = Annotated[
    List[Path],
    typer.Argument(help="An nsys export (.sqlite, or .nsys-rep/.qdrep); several, or a sweep "
                        "folder, give one table with a `config` column.",
                   show_default=False, metavar="EXPORT"),
]


PIPE_WIDTH = 120  # tables written to a pipe or file when COLUMNS is not set


def output_width(output: Path | None = None) -> int:
    """The width tables are laid out for: the terminal's (also when stdout is piped into
    `head` or `less` from a terminal: stderr or stdin still is one), else ``COLUMNS``, else
    PIPE_WIDTH; a table is never wider than its data needs, whatever this says. Files
    written with --output take ``COLUMNS`` or PIPE_WIDTH."""
    import os

    try:
        return max(20, int(os.environ["COLUMNS"]))
    except (KeyError, ValueError):
        pass
    if output is None:
        for stream in (sys.stdout, sys.stderr, sys.stdin):
            try:
                if stream is not None and stream.isatty():
                    return max(20, os.get_terminal_size(stream.fileno()).columns)
            except (OSError, ValueError, AttributeError):
                continue
    return PIPE_WIDTH


def output_folder(output: Path) -> Path:
    """Make the folder ``output`` goes in (``-o results/run1/kernels.csv``); BadOption when
    that cannot be done or ``output`` is a folder."""
    from nsys_parsers.errors import BadOption

    if output.is_dir():
        raise BadOption(f"--output {output} is a folder: give a file name inside it.")
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadOption(f"cannot create the folder of --output {output}: {exc.strerror}; "
                        f"choose a writable path.") from None
    return output


def emit(rendered: Rendered, output: Path | None) -> None:
    """Write rendered output to stdout or a file; the only place commands print results."""
    from nsys_parsers.errors import BadOption

    if output is None:
        _write(rendered, None)
        return
    try:
        _write(rendered, output_folder(output))
    except OSError as exc:
        raise BadOption(f"cannot write --output {output}: {exc.strerror}; choose a writable "
                        f"path.") from None


def write_bytes(path: Path, data: bytes) -> None:
    """Write a file beside the output (the PNGs of a markdown page)."""
    from nsys_parsers.errors import BadOption

    try:
        path.write_bytes(data)
    except OSError as exc:
        raise BadOption(f"cannot write {path}: {exc.strerror}; choose a writable path.") from None


def _write(rendered: Rendered, output: Path | None) -> None:
    if rendered.chunks is not None:  # written as it is made
        if output is not None:
            with output.open("w", encoding="utf-8") as fh:
                fh.writelines(rendered.chunks)
        else:
            sys.stdout.writelines(rendered.chunks)
        return
    if rendered.text is not None:
        if output is not None:
            output.write_text(rendered.text, encoding="utf-8")
        else:
            sys.stdout.write(rendered.text)
        return
    from rich.console import Console  # tables for people only: text formats need no rich

    # the parts were laid out for rendered.width (None: their natural width, --wide); the
    # console must not lay them out again
    width = max(rendered.width, output_width(output)) if rendered.width else 100_000
    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            console = Console(file=fh, width=width, no_color=True, soft_wrap=False)
            for part in rendered.rich:
                console.print(part)
        return
    tty_natural = sys.stdout.isatty() and rendered.width is not None
    console = Console(width=None if tty_natural else width, soft_wrap=False)
    for part in rendered.rich:
        console.print(part)


@dataclass(frozen=True)
class OutputSpec:
    """Where and how a command's answer goes (``--format``, ``--output``, ``--top``,
    ``--wide``)."""

    format: str = "table"
    output: Optional[Path] = None
    top: Optional[int] = None
    wide: bool = False

    def __post_init__(self) -> None:
        if self.output is not None:  # before the work, not after it
            output_folder(self.output)

    @property
    def width(self) -> int:
        return output_width(self.output)

    def emit(self, rendered: Rendered) -> None:
        emit(rendered, self.output)


# The output options as a group -> ``OutputSpec``; a command takes them with
# ``cls=grouped(OUTPUT())`` (``OUTPUT(top=0)``: its own --top default) and reads
# ``OUTPUT.of(ctx)``.
OUTPUT = param_group("out", OUTPUT_PARAMS, OutputSpec)


@contextlib.contextmanager
def open_session(export: Path, options: AnalysisOptions) -> Iterator[Any]:
    """The export opened for questions (``reports.pipeline.session.Session``), with a spinner
    on stderr while a long read runs: how every command that mines an export opens it."""
    from profile_cli.commands.progress import status
    from reports.pipeline.session import Session

    with status(f"reading {export.name}"), Session(export, options) as session:
        yield session


def emit_report(report: Any, columns: list[str], view: Any, out: OutputSpec, *,
                title: str | None = None, caption: list[str] | None = None) -> None:
    """Render a ``reports.pipeline.report.Report`` for ``out`` and write it."""
    from reports.render import render_rows

    out.emit(render_rows(report.rows, columns, out.format, title=title, notes=report.notes,
                         sentences=report.sentences, caption=caption or [], view=view,
                         top=out.top, width=out.width, wide=out.wide))


def join_rendered(parts: list[Rendered], fmt: str) -> Rendered:
    """Several rendered tables as one output (text formats joined by blank lines)."""
    if parts and not parts[0].rich:
        sep = "\n" if fmt in ("md", "latex") else "\n\n"
        return Rendered(text=sep.join(p.as_text() or "" for p in parts))
    widths = [p.width for p in parts]
    width = None if any(w is None for w in widths) else max(w or 0 for w in widths)
    return Rendered(rich=[x for p in parts for x in p.rich], width=width)
