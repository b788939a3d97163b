"""The one renderer: rich tables, markdown, CSV, JSON and LaTeX from a DataFrame or a dict.

Library functions return data; commands pick a format here. Column names keep their units
(``_ns``, ``_pct``); ``table``/``md``/``latex`` show durations in human units, ``csv``/``json``
keep raw nanoseconds so that machines can parse them.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from nsys_parsers.errors import BadOption
from nsys_parsers.plain import is_missing as _is_missing
from nsys_parsers.plain import jsonable

FORMATS = ("table", "md", "csv", "json", "latex")
NAME_COLUMNS = {"name", "kernel", "range", "runner_up", "operation"}

# Long kernel names (templated C++ can be hundreds of KiB) are shortened only here.
MAX_NAME_CHARS = 100


@dataclass
class Rendered:
    """Output of a report ready for the terminal or a file."""

    text: str | None = None  # plain text for md/csv/json/latex
    rich: list[Any] = field(default_factory=list)  # rich renderables for table


def shorten(value: Any, width: int = MAX_NAME_CHARS) -> Any:
    if isinstance(value, str) and len(value) > width:
        keep = width - 1
        return value[: keep // 2 + keep % 2] + "…" + value[-(keep // 2):]
    return value


def human_ns(value: Any) -> str:
    if _is_missing(value):
        return ""
    v = float(value)
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:.3f} s"
    if a >= 1e6:
        return f"{v / 1e6:.3f} ms"
    if a >= 1e3:
        return f"{v / 1e3:.3f} µs"
    return f"{v:.0f} ns" if v == int(v) else f"{v:.1f} ns"


def human_bytes(value: Any) -> str:
    if _is_missing(value):
        return ""
    v = float(value)
    if v == 0:
        return "0"
    if abs(v) >= 1024**3:
        return f"{v / 1024**3:.2f} GiB"
    if abs(v) >= 1024**2:
        return f"{v / 1024**2:.1f} MiB"
    if abs(v) >= 1024:
        return f"{v / 1024:.1f} KiB"
    return f"{v:.0f} B"


def _cell(column: str, value: Any, *, human: bool) -> str:
    if _is_missing(value):
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt_num(v, 1)}%" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(str(shorten(v)) for v in value)
    if human and column.endswith("_ns") and not isinstance(value, str):
        return human_ns(value)
    if human and column.endswith("_per_s") and isinstance(value, (int, float)):
        return _fmt_num(value, 1)  # a rate (tokens_per_s), not seconds
    if human and column.endswith("_s") and isinstance(value, (int, float)):
        return human_ns(float(value) * 1e9)
    if human and column.endswith("_bytes") and isinstance(value, (int, float)):
        return human_bytes(value)
    if column.endswith("_pct"):
        return _fmt_num(value, 1)
    if isinstance(value, float):
        return _fmt_num(value, 1 if not value.is_integer() else 0)
    if isinstance(value, str):
        return str(shorten(value)) if human else value
    return str(value)


def _fmt_num(value: Any, digits: int) -> str:
    v = float(value)
    if digits == 0 or v.is_integer() and digits == 0:
        return f"{int(v):,}"
    return f"{v:,.{digits}f}"


def _header(column: str) -> str:
    return column.replace("_", " ")


def _rows_text(rows: list[dict[str, Any]], columns: list[str], *, human: bool) -> list[list[str]]:
    return [[_cell(c, r.get(c), human=human) for c in columns] for r in rows]


def to_markdown(rows: list[dict[str, Any]], columns: list[str]) -> str:
    body = _rows_text(rows, columns, human=True)
    esc = [[v.replace("|", "\\|") for v in r] for r in body]
    line = "| " + " | ".join(columns) + " |"
    sep = "| " + " | ".join("---:" if _numeric(rows, c) else "---" for c in columns) + " |"
    out = [line, sep] + ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(out) + "\n"


def _numeric(rows: list[dict[str, Any]], column: str) -> bool:
    for r in rows:
        v = r.get(column)
        if _is_missing(v):
            continue
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return False


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
    "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(rows: list[dict[str, Any]], columns: list[str], caption: str | None = None) -> str:
    body = _rows_text(rows, columns, human=True)
    align = "".join("r" if _numeric(rows, c) else "l" for c in columns)
    out = [r"\begin{table}[ht]", r"\centering"]
    if caption:
        out.append(r"\caption{" + latex_escape(caption) + "}")
    out += [r"\begin{tabular}{" + align + "}", r"\toprule",
            " & ".join(latex_escape(c) for c in columns) + r" \\", r"\midrule"]
    out += [" & ".join(latex_escape(v) for v in r) + r" \\" for r in body]
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out) + "\n"


def to_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow([_cell(c, r.get(c), human=False) if isinstance(r.get(c), (dict, list)) else
                         ("" if _is_missing(r.get(c)) else r.get(c)) for c in columns])
    return buf.getvalue()


def to_json(data: Any) -> str:
    return json.dumps(jsonable(data), indent=2, ensure_ascii=False) + "\n"


def rich_table(rows: list[dict[str, Any]], columns: list[str], title: str | None = None):
    from rich.table import Table

    table = Table(title=title, show_lines=False, header_style="bold")
    for c in columns:
        if _numeric(rows, c):
            table.add_column(_header(c), justify="right", no_wrap=True)
        elif c in ("style", "category", "status", "scope"):
            table.add_column(_header(c), no_wrap=True)
        elif c in NAME_COLUMNS:
            table.add_column(_header(c), overflow="ellipsis", no_wrap=True, max_width=60,
                             ratio=1)
        else:
            table.add_column(_header(c), overflow="fold")
    for r in _rows_text(rows, columns, human=True):
        table.add_row(*r)
    return table


def render_rows(
    rows: list[dict[str, Any]],
    columns: list[str],
    fmt: str,
    *,
    title: str | None = None,
    notes: Iterable[str] = (),
    sentences: Iterable[str] = (),
    human_columns: list[str] | None = None,
    null_labels: dict[str, str] | None = None,
) -> Rendered:
    """Render row dicts in one of FORMATS. ``notes`` are explanations shown with human formats
    (table, md); ``human_columns`` is a narrower column list for table/md/latex, and
    ``null_labels`` names what an empty cell means there (e.g. range None = whole export)."""
    check_format(fmt)
    notes = list(notes)
    sentences = list(sentences)
    if fmt == "json":
        return Rendered(text=to_json([{c: r.get(c) for c in columns} for r in rows]))
    if fmt == "csv":
        return Rendered(text=to_csv(rows, columns))
    if human_columns:
        columns = human_columns
    if null_labels:
        rows = [{k: (null_labels[k] if k in null_labels and v is None else v)
                 for k, v in r.items()} for r in rows]
    if fmt == "md":
        text = ""
        if title:
            text += f"### {title}\n\n"
        text += "".join(f"- {s}\n" for s in sentences) + ("\n" if sentences else "")
        text += to_markdown(rows, columns)
        text += "".join(f"\n> {n}\n" for n in notes)
        return Rendered(text=text)
    if fmt == "latex":
        return Rendered(text=to_latex(rows, columns, caption=title))
    parts: list[Any] = []
    for s in sentences:
        parts.append(s)
    if rows or not notes:
        parts.append(rich_table(rows, columns, title=title))
    for n in notes:
        parts.append(f"[yellow]{n}[/yellow]")
    return Rendered(rich=parts)


def render_object(obj: dict[str, Any], fmt: str, *, title: str | None = None) -> Rendered:
    """Render one object (e.g. ``info``): JSON as an object, others as a key/value table."""
    check_format(fmt)
    if fmt == "json":
        return Rendered(text=to_json(obj))
    rows = []
    for k, v in obj.items():
        if isinstance(v, dict):
            v = ", ".join(f"{kk}={vv}" for kk, vv in v.items())
        elif isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        rows.append({"key": k, "value": v})
    return render_rows(rows, ["key", "value"], fmt, title=title)


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise BadOption(f"unknown format {fmt!r}; use one of: {', '.join(FORMATS)}")
