"""Tables for people: which rows (``View``: ranking, top N, pinned rows), which columns (those
that say something), and a layout that fits the terminal, drawn by rich.

``fit_columns`` lays a table out for a width: numbers and labels keep their full width;
headers wrap at spaces; kernel signatures get their "useful" width first (template and
parameter lists collapsed), other names and text a comfortable width; then the view's drop
list leaves columns out (named in a note); only then do names go down to 16 characters.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reports.render.names import cell_width, is_signature, shorten_columns, structure
from reports.render.values import NAME_COLUMNS, cell, header, numeric


@dataclass
class View:
    """How people see a report: the columns in display order (names last, as nsys stats
    does), which columns give way first when the width is short, and how rows rank for the
    top-N cut (descending on the first ``rank_by`` column that has a non-zero value; rows keep
    their order when no such column exists). ``pinned`` leading rows (e.g. the whole-export
    row) are always shown and not counted. ``noun`` names the rows in the footer."""

    columns: list[str]
    drop: tuple[str | tuple[str, ...], ...] = ()
    rank_by: tuple[str, ...] = ()
    noun: str = "rows"
    null_labels: dict[str, str] = field(default_factory=dict)
    pinned: int = 0
    hide_if_zero: tuple[str, ...] = ()  # left out when 0 or empty in every row shown
    hide_if_constant: tuple[str, ...] = ()  # left out (and said once) when all rows agree
    headers: dict[str, str] = field(default_factory=dict)  # short labels: column -> name
    # rows of a tree, in tree order: this column is indented by each row's ``depth``
    tree: str | None = None


    def header(self, column: str) -> str:
        return header(column, self.headers)


DEFAULT_TOP = 20
# Columns that give way first when a table is too wide, least important first.
DEFAULT_DROP = ("stddev_ns", "max_ns", "min_ns", "med_ns")
TABLE_GAP = 2  # rich SIMPLE_HEAD with collapsed padding: two spaces between columns
MIN_NAME = 16
MIN_TEXT = 20


def _kind(column: str, rows: list[dict[str, Any]], cells: list[str]) -> str:
    if numeric(rows, column):
        return "num"
    if column in NAME_COLUMNS or is_signature(column):
        return "name"
    if max((cell_width(c) for c in cells), default=0) <= 16:
        return "label"  # short text (a status, a size, a preformatted number): never wraps
    return "text"


def _header_lines(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width=max(width, 1), break_long_words=False)) or text


@dataclass
class Layout:
    columns: list[str]
    widths: dict[str, int]
    headers: dict[str, str]
    dropped: list[str]


# Flexible columns: a width they keep while other columns can still be left out, and the
# least they can be shown at.
COMFORT = {"name": 30, "text": 24}
WHOLE_NAME = 40
MINIMUM = {"name": MIN_NAME, "text": MIN_TEXT}


def fit_columns(columns: list[str], headers: dict[str, str], cells: dict[str, list[str]],
                kinds: dict[str, str], width: int | None,
                drop: tuple[str | tuple[str, ...], ...]) -> Layout:
    """Column widths that fit ``width`` (None: natural widths). Numbers and labels never
    shrink; headers wrap at spaces; names and text give way down to a comfortable width, then
    the columns of ``drop`` are left out (in order; a tuple goes together), then names and
    text give way down to their minimum."""
    content = {c: max((cell_width(v) for v in cells[c]), default=0) for c in columns}
    longest_word = {c: max((len(w) for w in headers[c].split()), default=0) for c in columns}
    cols = list(columns)
    if width is None:
        natural = {c: max(content[c], len(headers[c]), 1) for c in cols}
        return Layout(cols, natural, dict(headers), [])
    dropped: list[str] = []
    groups = [g if isinstance(g, tuple) else (g,) for g in drop]

    # first the width that reads well: a signature collapsed, other names and text comfortable
    # (a range name up to WHOLE_NAME characters: it says which row this is)
    useful = {c: max((cell_width(structure(v)) for v in cells[c]), default=0)
              if is_signature(c) else max(COMFORT["name"], min(content[c], WHOLE_NAME))
              if kinds[c] == "name" else COMFORT.get(kinds[c], 10**9) for c in columns}

    def attempt(floor: dict[str, int], wrap: bool) -> Layout | None:
        head_w = {c: longest_word[c] if wrap else len(headers[c]) for c in cols}
        natural = {c: max(content[c], head_w[c], 1) for c in cols}
        flex = [c for c in cols if kinds[c] in floor]
        fixed = sum(natural[c] for c in cols if c not in flex)
        avail = width - fixed - TABLE_GAP * (len(cols) - 1)
        least = {c: min(natural[c], max(head_w[c], floor[kinds[c]])) for c in flex}
        if avail < sum(least.values()):
            return None
        widths = dict(natural)
        if avail < sum(natural[c] for c in flex):
            widths.update(_share(flex, natural, least, useful, avail))
        heads = {c: _header_lines(headers[c], widths[c]) if wrap else headers[c] for c in cols}
        return Layout(list(cols), widths, heads, list(dropped))

    for floor in ({k: 10**6 for k in COMFORT}, COMFORT):  # natural widths, then comfortable
        for wrap in (False, True):  # one-line headers first
            layout = attempt(floor, wrap)
            if layout:
                return layout
    while True:
        for wrap in (False, True):
            layout = attempt(COMFORT, wrap)
            if layout:
                return layout
        group = next((g for g in groups if any(c in cols for c in g)), None)
        if group is None:
            break
        for c in group:
            if c in cols:
                cols.remove(c)
                dropped.append(c)
    layout = attempt(MINIMUM, True)
    if layout:
        return layout
    # still too wide: leave out columns from the right (the first column and names stay),
    # rather than let the terminal cut or wrap them
    while len(cols) > 1:
        victim = next((c for c in reversed(cols[1:]) if kinds[c] != "name"), None)
        if victim is None:
            break
        cols.remove(victim)
        dropped.append(victim)
        layout = attempt(MINIMUM, True)
        if layout:
            return layout
    head_w = {c: longest_word[c] for c in cols}  # nothing left to give: minimum, rich folds
    widths = {c: max(content[c], head_w[c], 1) for c in cols}
    widths.update({c: min(widths[c], max(head_w[c], MINIMUM[kinds[c]])) for c in cols
                   if kinds[c] in MINIMUM})
    return Layout(cols, widths, {c: _header_lines(headers[c], widths[c]) for c in cols},
                  dropped)


def _share(flex: list[str], natural: dict[str, int], least: dict[str, int],
           useful: dict[str, int], avail: int) -> dict[str, int]:
    """Split ``avail`` among flexible columns: each its least width; then up to its
    ``useful`` width (a kernel signature with its template and parameter lists collapsed:
    more adds little), in proportion to what it lacks; then what is left up to the natural
    widths."""
    out = dict(least)
    spare = avail - sum(least.values())
    for cap in (useful, natural):
        want = {c: max(0, min(cap[c], natural[c]) - out[c]) for c in flex}
        total_want = sum(want.values())
        if total_want <= 0 or spare <= 0:
            continue
        give = min(spare, total_want)
        given = 0
        for c in flex:
            extra = give * want[c] // total_want
            out[c] += extra
            given += extra
        for c in flex:  # rounding leftovers, first columns first
            if given >= give:
                break
            if out[c] < min(cap[c], natural[c]):
                out[c] += 1
                given += 1
        spare -= given
    return out


def rich_table(rows: list[dict[str, Any]], columns: list[str], title: str | None = None,
               width: int | None = None, drop: tuple[str | tuple[str, ...], ...] = (),
               labels: dict[str, str] | None = None) -> tuple[Any, list[str]]:
    """A rich Table of the rows that fits ``width`` (None: natural width), and the columns
    left out. Cells are plain text: a name like ``step[layer]`` or ``[/]`` is shown as it is,
    never read as rich markup."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cells = {c: [cell(c, r.get(c), human=True) for r in rows] for c in columns}
    kinds = {c: _kind(c, rows, cells[c]) for c in columns}
    headers = {c: header(c, labels) for c in columns}
    layout = fit_columns(columns, headers, cells, kinds, width, drop)
    shown = {c: cells[c] for c in layout.columns}
    names = [c for c in layout.columns if kinds[c] == "name"]
    shown.update(shorten_columns({c: cells[c] for c in names}, layout.widths,
                                 {c: [r.get(c) for r in rows] for c in names}))
    table = Table(title=Text(title) if title is not None else None, title_justify="left",
                  title_style="bold", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True, header_style="bold")
    for c in layout.columns:
        w = layout.widths[c]
        head = Text(layout.headers[c])
        if kinds[c] == "num":
            table.add_column(head, justify="right", no_wrap=True, min_width=w)
        elif kinds[c] == "name":
            table.add_column(head, no_wrap=True, min_width=min(w, 1), max_width=w)
        elif kinds[c] == "label":
            table.add_column(head, no_wrap=True, min_width=w)
        else:
            table.add_column(head, overflow="fold", max_width=w)
    for i in range(len(rows)):
        table.add_row(*[Text(shown[c][i]) for c in layout.columns])
    return table, layout.dropped


def rank_rows(rows: Sequence[dict[str, Any]], view: View) -> list[dict[str, Any]]:
    """Rows after the pinned ones, highest first on the first ``rank_by`` column that has a
    non-zero value (stable: ties keep the report's order)."""
    head, rest = list(rows[:view.pinned]), list(rows[view.pinned:])
    for key in view.rank_by:
        if any(isinstance(r.get(key), (int, float)) and r.get(key) for r in rest):
            rest = sorted(rest, key=lambda r: -(r.get(key) or 0))
            break
    return head + rest


def top_rows(rows: Sequence[dict[str, Any]], view: View, top: int | None
             ) -> tuple[list[dict[str, Any]], str | None]:
    """The first ``top`` ranked rows (0 or None: all) and the footer saying what was cut."""
    ranked = rank_rows(rows, view)
    body = len(ranked) - view.pinned
    if not top or body <= top:
        return ranked, None
    footer = (f"{top:,} of {body:,} {view.noun}; --top 0 shows all, --top N shows N")
    return ranked[:view.pinned + top], footer


@dataclass
class Shown:
    """What people see of a report (``rows_for_people``)."""

    rows: list[dict[str, Any]]
    columns: list[str]
    footer: str | None  # what the top-N cut left out, if anything
    notes: list[str]  # columns said once ("every row: ...")


TREE_INDENT = "  "  # one level of a tree column


def hard_indent(text: str) -> str:
    """``text`` with its leading spaces as no-break spaces, which markdown, LaTeX and HTML
    keep (they drop leading spaces)."""
    body = text.lstrip(" ")
    return "\u00a0" * (len(text) - len(body)) + body


def _indented(rows: list[dict[str, Any]], column: str) -> list[dict[str, Any]]:
    """Rows with ``column`` indented by ``depth``, from the shallowest depth shown."""
    base = min((r["depth"] for r in rows if r.get("depth") is not None), default=None)
    if base is None:
        return rows
    return [{**r, column: TREE_INDENT * (r["depth"] - base) + str(r[column])}
            if r.get("depth") is not None and r.get(column) is not None else r for r in rows]


def rows_for_people(rows: Sequence[dict[str, Any]], view: View, top: int | None) -> Shown:
    """The ranked top ``top`` rows (default 20, 0 = all; pinned rows first), the view's
    columns less those that are zero everywhere (``hide_if_zero``) or the same in every row
    (``hide_if_constant``: said once in a note), with the view's labels for empty cells and
    its ``tree`` column indented by level.
    Every human format (and the HTML report) shows a report through this."""
    rows, footer = top_rows(rows, view, DEFAULT_TOP if top is None else top)
    columns = [c for c in view.columns if c not in view.hide_if_zero
               or any(r.get(c) not in (None, 0, "", 0.0) for r in rows)]
    constant = [c for c in view.hide_if_constant if c in columns and len(rows) > 1
                and len({repr(r.get(c)) for r in rows}) == 1]
    notes = []
    if constant:
        columns = [c for c in columns if c not in constant]
        notes.append("every row: " + ", ".join(
            f"{view.header(c)} {cell(c, rows[0].get(c), human=True)}" for c in constant))
    if view.null_labels:
        rows = [{k: (view.null_labels[k] if k in view.null_labels and v is None else v)
                 for k, v in r.items()} for r in rows]
    if view.tree is not None:
        rows = _indented(rows, view.tree)
    return Shown(rows=rows, columns=columns, footer=footer, notes=notes)
