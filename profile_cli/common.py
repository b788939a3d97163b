"""Options shared by every command, and the one output writer."""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from reports.render import FORMATS, Rendered


def choice_enum(name: str, values: "tuple[str, ...] | list[str]") -> Any:
    """A str Enum for a Typer choice option, built from the tuple of values it mirrors
    (so a new value in the library cannot be missing from the CLI)."""
    return enum.Enum(name, {v: v for v in values}, type=str)


Format = choice_enum("Format", FORMATS)


FormatOpt = Annotated[
    Format,
    typer.Option("--format", "-f", help="Output format: table (rich), md, csv, json or latex."),
]
OutputOpt = Annotated[
    Optional[Path],
    typer.Option("--output", "-o", help="Write the output to this file instead of stdout.",
                 dir_okay=False, writable=True),
]
ExportArg = Annotated[
    Path,
    typer.Argument(help="An nsys export: .sqlite, or .nsys-rep/.qdrep (exported with nsys).",
                   show_default=False),
]


def emit(rendered: Rendered, output: Path | None, width: int | None = None) -> None:
    """Write rendered output to stdout or a file; the only place commands print results."""
    if rendered.text is not None:
        if output is not None:
            output.write_text(rendered.text, encoding="utf-8")
        else:
            sys.stdout.write(rendered.text)
        return
    from rich.console import Console

    if output is not None:
        with output.open("w", encoding="utf-8") as fh:
            console = Console(file=fh, width=width or 160, no_color=True, soft_wrap=False)
            for part in rendered.rich:
                console.print(part)
        return
    console = Console(width=width or (None if sys.stdout.isatty() else 200))
    for part in rendered.rich:
        console.print(part)
