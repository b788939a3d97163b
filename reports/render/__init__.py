"""The one renderer: a report's rows as a table for people (rich), markdown, CSV, JSON, LaTeX
or plain sentences.

Library functions return data; commands pick a format here. Column names keep their units
(``_ns``, ``_pct``); ``table``/``md``/``latex`` show durations in human units, ``csv``/``json``
keep raw nanoseconds so that machines can parse them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Iterable

from nsys_parsers.errors import BadOption
from reports.render.names import MAX_NAME_CHARS, shorten, shorten_columns, shorten_name
from reports.render.rows import ColumnRows
from reports.render.table import (
    DEFAULT_DROP,
    TREE_INDENT,
    View,
    hard_indent,
    rank_rows,
    rich_table,
    rows_for_people,
    top_rows,
)
from reports.render.values import cell, header, human_bytes, human_flop, human_ns, numeric
from reports.render.writers import (
    csv_chunks,
    json_chunks,
    rows_to_json,
    to_csv,
    to_json,
    to_latex,
    to_markdown,
)

FORMATS = ("table", "md", "csv", "json", "latex", "text")
HUMAN_FORMATS = ("table", "md", "latex", "text")

__all__ = [
    "FORMATS", "HUMAN_FORMATS", "MAX_NAME_CHARS", "Rendered", "TREE_INDENT", "View", "cell",
    "hard_indent", "header", "human_bytes", "human_flop", "human_ns", "numeric", "rank_rows",
    "render_object", "render_rows", "rows_for_people", "rows_to_json", "shorten", "shorten_columns",
    "shorten_name", "to_csv", "to_json", "top_rows",
]


@dataclass
class Rendered:
    """Output of a report ready for the terminal or a file: text (md, csv, json, latex,
    text), or rich renderables (a table and its notes) laid out for ``width``."""

    text: str | None = None
    rich: list[Any] = field(default_factory=list)
    width: int | None = None
    chunks: Iterable[str] | None = None  # text made piece by piece as it is written

    def as_text(self) -> str | None:
        """The text, whole (``chunks`` joined), or None for rich renderables."""
        return "".join(self.chunks) if self.chunks is not None else self.text


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise BadOption(f"unknown format {fmt!r}; use one of: {', '.join(FORMATS)}")


def render_rows(
    rows: list[dict[str, Any]],
    columns: list[str],
    fmt: str,
    *,
    title: str | None = None,
    notes: Iterable[str] = (),
    sentences: Iterable[str] = (),
    caption: Iterable[str] = (),
    view: View | None = None,
    top: int | None = None,
    width: int | None = None,
    wide: bool = False,
) -> Rendered:
    """Render row dicts in one of FORMATS.

    json/csv: every row (or the ``top`` ranked ones when ``top`` is given) with ``columns``
    in their order. table/md/latex/text: ``view`` decides the columns; the top ``top`` rows
    (default 20, 0 = all) with a footer saying how many there are; ``caption`` lines come
    first, ``notes`` explain the numbers; tables fit ``width`` columns (numbers are never
    cut; names give way, then the columns of ``view.drop``, named in a note); ``wide`` shows
    every column at its natural width. ``sentences`` (one-line answers, one per row) are shown
    in md and text, where text shows only them (text without sentences is the table without
    styling)."""
    check_format(fmt)
    notes = list(notes)
    sentences = list(sentences)
    caption = list(caption)
    view = view or View(columns=columns)
    if fmt in ("csv", "json") and isinstance(rows, ColumnRows) and not top:
        # millions of rows: streamed
        return Rendered(chunks=(csv_chunks if fmt == "csv" else json_chunks)(rows, columns))
    if fmt in ("json", "csv"):
        if top:
            rows, _ = top_rows(rows, view, top)
        return Rendered(text=rows_to_json(rows, columns) if fmt == "json"
                        else to_csv(rows, columns))
    people = rows_for_people(rows, view, top)
    rows, columns, footer = people.rows, people.columns, people.footer
    notes = ([footer] if footer else []) + people.notes + notes
    if fmt == "text" and sentences:
        shown = sentences[: len(rows)] if footer else sentences
        return Rendered(text="".join(f"{s}\n" for s in caption + shown + notes))
    if view.tree is not None and fmt in ("md", "latex"):  # keep the tree's indentation
        rows = [{**r, view.tree: hard_indent(r[view.tree])}
                if isinstance(r.get(view.tree), str) else r for r in rows]
        sentences = [hard_indent(s) for s in sentences]
    if fmt == "md":
        text = f"### {title}\n\n" if title else ""
        text += "".join(f"{c}\n\n" for c in caption)
        text += "".join(f"- {s}\n" for s in sentences) + ("\n" if sentences else "")
        text += to_markdown(rows, columns)
        text += "".join(f"\n> {n}\n" for n in notes)
        return Rendered(text=text)
    if fmt == "latex":
        return Rendered(text=to_latex(rows, columns, caption=title))
    from rich.text import Text  # for people only: CSV and JSON start without rich

    parts: list[Any] = [Text(c) for c in caption]
    if rows or not notes:
        drop = tuple(g for g in (view.drop or DEFAULT_DROP)
                     if any(c in columns for c in (g if isinstance(g, tuple) else (g,))))
        table, dropped = rich_table(rows, columns, title=title,
                                    width=None if wide else width, drop=drop,
                                    labels=view.headers)
        parts.append(table)
        if dropped:
            notes.append(f"left out to fit {width} columns: "
                         f"{', '.join(view.header(c) for c in dropped)}; --wide shows every "
                         f"column, --format csv or json gives everything")
    parts += [Text(n, style="yellow") for n in notes]
    if fmt == "text":
        return Rendered(text=plain_text(parts, None if wide else width))
    return Rendered(rich=parts, width=None if wide else width)


def plain_text(parts: list[Any], width: int | None) -> str:
    """rich renderables as plain text (no colour, no styles), laid out for ``width``."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width or 100_000, no_color=True, color_system=None,
                      soft_wrap=False)
    for part in parts:
        console.print(part)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


def render_object(obj: dict[str, Any], fmt: str, *, title: str | None = None,
                  width: int | None = None, human: dict[str, Any] | None = None,
                  notes: Iterable[str] = ()) -> Rendered:
    """Render one object (``info``): JSON as an object, other formats as a key/value table
    (of ``human``, a version for people, when given)."""
    check_format(fmt)
    if fmt == "json":
        return Rendered(text=to_json(obj))
    obj = human if human is not None else obj
    rows = []
    for k, v in obj.items():
        if isinstance(v, dict):
            v = ", ".join(f"{kk} {vv:,}" if isinstance(vv, int) else f"{kk} {vv}"
                          for kk, vv in v.items())
        elif isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        elif isinstance(v, int) and not isinstance(v, bool):
            v = f"{v:,}"
        rows.append({"key": k, "value": v})
    return render_rows(rows, ["key", "value"], fmt, title=title, top=0, width=width,
                       notes=notes)
