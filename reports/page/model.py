"""A report page as plain data (sections of sentences, tables, figures and facts), and its
markdown form. ``reports.page.html`` writes the same page as one self-contained HTML file.

Builders (``reports.page.export``, ``reports.page.sweep``) fill a ``Page``; renderers decide
how it looks. Text that came from an export (range and kernel names, command lines) is kept
as it is here and escaped by each renderer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Union
from urllib.parse import quote

from reports.render import View, cell, hard_indent, numeric, rows_for_people


@dataclass
class Text:
    """A paragraph."""

    text: str


@dataclass
class Sentences:
    """One-line answers, shown as a list."""

    items: list[str]


@dataclass
class Table:
    """Report rows shown through a ``View`` (its top ``top`` rows; 0 = all)."""

    rows: Sequence[dict[str, Any]]
    view: View
    title: str | None = None
    notes: list[str] = field(default_factory=list)
    top: int | None = None


@dataclass
class Figure:
    """A plot: PNG bytes, a file-name stem (``category-shares``) and a text alternative."""

    name: str
    png: bytes
    alt: str


@dataclass
class Facts:
    """Key/value pairs (metadata)."""

    items: list[tuple[str, str]]


Block = Union[Text, Sentences, Table, Figure, Facts]


@dataclass
class Section:
    title: str
    anchor: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Page:
    title: str
    lead: list[str] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    # what the command line says on stderr too (an export whose CUDA trace stopped early);
    # the page says it in its lead
    warnings: list[str] = field(default_factory=list)

    def figures(self) -> list[Figure]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, Figure)]


@dataclass
class ShownTable:
    """A table as people see it: headers, cell texts, full values and numeric columns."""

    columns: list[str]
    headers: list[str]
    cells: list[list[str]]
    values: list[list[Any]]
    numeric: list[bool]
    notes: list[str]


def shown_table(table: Table) -> ShownTable:
    """What a renderer shows of a ``Table`` (the same rows and columns as ``--format md``)."""
    shown = rows_for_people(table.rows, table.view, table.top)
    notes = ([shown.footer] if shown.footer else []) + shown.notes + list(table.notes)
    cols = shown.columns
    return ShownTable(columns=cols, headers=[table.view.header(c) for c in cols],
                      cells=[[cell(c, r.get(c), human=True) for c in cols] for r in shown.rows],
                      values=[[r.get(c) for c in cols] for r in shown.rows],
                      numeric=[numeric(shown.rows, c) for c in cols], notes=notes)


# --------------------------------------------------------------------------------------------
# markdown

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")


def md_escape(text: str) -> str:
    """Text from an export, safe in markdown: HTML characters as entities (a range named
    ``<img onerror=...>`` stays text), markdown characters backslash-escaped."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text).replace("\n", " ")


def figure_file(stem: str, figure: Figure) -> str:
    """The file name of a figure written beside the markdown file ``STEM.md``."""
    return f"{stem}-{figure.name}.png"


def page_markdown(page: Page, stem: str) -> tuple[str, dict[str, bytes]]:
    """The page as markdown, and the PNG files (name -> bytes) it links to, to be written
    beside it (``STEM-NAME.png``)."""
    out = [f"# {md_escape(page.title)}", ""]
    out += [md_escape(line) + "  " for line in page.lead]
    files: dict[str, bytes] = {}
    if page.sections:
        out += ["", " · ".join(f"[{md_escape(s.title)}](#{s.anchor})" for s in page.sections)]
    for section in page.sections:
        out += ["", f'<a id="{section.anchor}"></a>', "", f"## {md_escape(section.title)}", ""]
        for block in section.blocks:
            out += _md_block(block, stem, files) + [""]
    return "\n".join(out).rstrip() + "\n", files


def _md_block(block: Block, stem: str, files: dict[str, bytes]) -> list[str]:
    if isinstance(block, Text):
        return [md_escape(block.text)]
    if isinstance(block, Sentences):
        return [f"- {md_escape(s)}" for s in block.items]
    if isinstance(block, Facts):
        return [f"- **{md_escape(k)}**: {md_escape(v)}" for k, v in block.items]
    if isinstance(block, Figure):
        name = figure_file(stem, block)
        files[name] = block.png
        return [f"![{md_escape(block.alt)}]({quote(name)})"]
    t = shown_table(block)
    lines = [f"### {md_escape(block.title)}", ""] if block.title else []
    if t.columns:
        tree = t.columns.index(block.view.tree) if block.view.tree in t.columns else -1
        lines.append("| " + " | ".join(md_escape(h) for h in t.headers) + " |")
        lines.append("| " + " | ".join("---:" if n else "---" for n in t.numeric) + " |")
        lines += ["| " + " | ".join(md_escape(hard_indent(c) if i == tree else c)
                                    for i, c in enumerate(row)) + " |" for row in t.cells]
    lines += [f"\n> {md_escape(n)}" for n in t.notes]
    return lines
