"""The report page as ``nsys-mine report`` and the MCP ``report`` tool take it, declared once:
its target, the analysis options its sections are read with (``OPTIONS``, ``DEFAULTS``), the
attention shape (``attention``'s parameters) and its own parameters (``PARAMS``); and the one
writer of a page (``write_page``: one HTML file, or markdown with its PNGs beside it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.page.model import Page
from reports.pipeline.options import Param

HELP = """The page people open: headline answers, plots and tables of an export or a sweep.

    One export: the dominant kernel per range, kernel categories per range (plot), attention
    FLOPs vs runtime, top kernels, the forward vs step mix, memory operations, metadata. A
    sweep folder: heatmaps of step time and of the dominant category over size x context,
    forward/backward time vs context, dominant kernels per config, failed configs and why. A
    folder of exports without a sweep index: the `ranks` page of their GPU processes.

    Examples: `nsys-mine report run.sqlite -o run.html` ·
    `nsys-mine report sweep/ --format md -o sweep.md`
    """
FORMATS = ("html", "md")
# the analysis options the sections are read with, and the page's own defaults of them
OPTIONS = ("within", "merge_op_ids", "rules", "nsys", "graph_attribution")
DEFAULTS: dict[str, Any] = {"merge_op_ids": "auto"}
PARAMS = (
    Param("export", ("TARGET",), "An nsys export (.sqlite, .nsys-rep) or a sweep folder (sweep "
          "--out-dir).", type=Path, argument=True, required=True),
    Param("output", ("--output", "-o"), "The file to write (default: report.html, or report.md "
          "with --format md).", type=Path, metavar="FILE", panel="", writes=True),
    Param("format", ("--format", "-f"), "html: one self-contained file (plots inside, nothing "
          "fetched, no scripts); md: markdown with PNG files beside it. Default: from the "
          "--output suffix, else html.", choices=FORMATS, panel=""),
    Param("top", ("--top",), "Rows of the kernel and range tables (0: all).", type=int,
          default=20, minimum=0, metavar="N", panel=""),
)


def page_format(fmt: str | None, output: Path | None) -> str:
    """The format asked, else the one the output's suffix names, else html."""
    return fmt or ("md" if output is not None and output.suffix.lower() == ".md" else "html")


def write_page(page: Page, output: Path, fmt: str) -> list[Path]:
    """Write ``page`` to ``output`` (its folder made) as ``fmt`` (html, or md with PNG files
    beside it): the files written, ``output`` first. OSError when they cannot be written
    (the caller says which option to change)."""
    files = [output]
    output.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "html":
        from reports.page.html import page_html

        output.write_text(page_html(page), encoding="utf-8")
    else:
        from reports.page.model import page_markdown

        text, pngs = page_markdown(page, output.stem)
        output.write_text(text, encoding="utf-8")
        for name, data in pngs.items():
            (output.parent / name).write_bytes(data)
            files.append(output.parent / name)
    return files
