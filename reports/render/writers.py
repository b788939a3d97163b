"""Rows as text for machines and documents: CSV and JSON (every row, raw values: nanoseconds,
whole names), markdown and LaTeX (the rows people see, in human units)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from nsys_parsers.plain import jsonable
from reports.render.rows import ColumnRows
from reports.render.values import cell, numeric


def _plain(column: str, value: Any) -> Any:
    """A value as CSV writes it: a missing value (None, NaN) empty, a dict or a list as its
    human text."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, (dict, list, tuple)):
        return cell(column, value, human=False)
    return value


def to_csv(rows: Sequence[dict[str, Any]], columns: list[str]) -> str:
    """CSV of the rows (``csv.writer``), column by column: raw values, a missing value empty;
    only a column that holds a NaN, a dict or a list is converted value by value."""
    return "".join(csv_chunks(rows, columns))


def csv_chunks(rows: Sequence[dict[str, Any]], columns: list[str]) -> Iterator[str]:
    """``to_csv`` a piece at a time: the header, then the CSV of each chunk of rows, made as
    it is written."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    quoted: dict[str, str] = {}
    for _, values in _column_chunks(rows, columns):
        text = _joined(values, quoted)
        if text is not None:
            yield buf.getvalue() + text
        else:
            writer.writerows(zip(*_csv_values(columns, values)))
            yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    yield buf.getvalue()


def _joined(values: list[list[Any]], quoted: dict[str, str]) -> str | None:
    """The CSV lines of a chunk's columns as ``csv.writer`` writes them, made here when
    every column holds only ints, strings and None (the columns of the long answers); None
    otherwise, and for one column (where ``csv.writer`` quotes an empty field). Each line is
    one ``%`` of a line format (``%d`` for a column of ints, ``%s`` for the fields of the
    others): formatting and joining in one C call a line, a third faster than ``str`` of
    every int and a join of every line (``ranges --instances``). ``quoted``: each string's
    field, as the writer quotes it, kept between chunks."""
    if len(values) < 2 or not values[0]:
        return None
    fields: list[list[Any]] = []
    spec: list[str] = []
    for col in values:
        types = set(map(type, col))
        if types <= {int}:
            fields.append(col)
            spec.append("%d")
            continue
        if types <= {int, type(None)}:
            fields.append(["" if v is None else str(v) for v in col])
        elif types <= {str, type(None)}:
            fields.append(["" if v is None else quoted.get(v) or _field(v, quoted)
                           for v in col])
        else:
            return None
        spec.append("%s")
    return "\n".join(map(",".join(spec).__mod__, zip(*fields))) + "\n"


def _field(value: str, quoted: dict[str, str]) -> str:
    """``value`` as ``csv.writer`` writes it in a row of several fields (kept in
    ``quoted``)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([value, ""])
    quoted[value] = field = buf.getvalue()[:-2]
    return field


def _column_chunks(rows: Sequence[dict[str, Any]], columns: list[str]
                   ) -> Iterator[tuple[int, list[list[Any]]]]:
    """(rows, the values of each of ``columns``) of each chunk of ``ColumnRows.CHUNK`` rows:
    what the machine formats write a chunk at a time (rows kept as columns, ``ColumnRows``,
    are read without a dict per row)."""
    for lo in range(0, len(rows), ColumnRows.CHUNK):
        hi = min(len(rows), lo + ColumnRows.CHUNK)
        if isinstance(rows, ColumnRows):
            yield hi - lo, [rows.values(c, lo, hi) for c in columns]
        else:
            part = rows[lo:hi]
            yield hi - lo, [[r.get(c) for r in part] for c in columns]


def _csv_values(columns: list[str], values: list[list[Any]]) -> list[list[Any]]:
    """The columns' values as CSV writes them (``_plain`` where a column needs it)."""
    for i, (column, col) in enumerate(zip(columns, values)):
        types = set(map(type, col))
        if types & {dict, list, tuple} or (float in types and any(
                type(v) is float and v != v for v in col)):
            values[i] = [_plain(column, v) for v in col]
    return values


def to_json(data: Any) -> str:
    """JSON text; a list of rows is written one row per line."""
    if isinstance(data, list):
        return "".join(_json_list([_json_lines(data)]))
    return json.dumps(jsonable(data), indent=2, ensure_ascii=False) + "\n"


def _json_lines(rows: list[Any]) -> list[str]:
    """One JSON text per row (numpy scalars or NaN made plain first, where there are any)."""
    try:
        return [json.dumps(row, ensure_ascii=False, allow_nan=False) for row in rows]
    except (TypeError, ValueError):
        return [json.dumps(jsonable(row), ensure_ascii=False) for row in rows]


def _json_list(chunks: Iterable[list[str]]) -> Iterator[str]:
    """A JSON list, one row per line, from its rows' JSON texts a chunk at a time."""
    yield "[\n"
    sep = ""
    for lines in chunks:
        if lines:
            yield sep + ",\n".join("  " + line for line in lines)
            sep = ",\n"
    yield "\n]\n" if sep else "]\n"


def rows_to_json(rows: Sequence[dict[str, Any]], columns: list[str]) -> str:
    """``to_json`` of the rows with exactly ``columns`` (a missing value is null)."""
    return "".join(json_chunks(rows, columns))


def json_chunks(rows: Sequence[dict[str, Any]], columns: list[str]) -> Iterator[str]:
    """``rows_to_json`` a piece at a time, as ``csv_chunks``: the rows of each chunk made
    (and written) only when it is its turn."""
    return _json_list(_json_lines([dict(zip(columns, row)) for row in zip(*values)]
                                  if columns else [{}] * n)
                      for n, values in _column_chunks(rows, columns))


def to_markdown(rows: list[dict[str, Any]], columns: list[str]) -> str:
    body = [[cell(c, r.get(c), human=True).replace("|", "\\|") for c in columns] for r in rows]
    out = ["| " + " | ".join(columns) + " |",
           "| " + " | ".join("---:" if numeric(rows, c) else "---" for c in columns) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(out) + "\n"


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
    "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in text)


def to_latex(rows: list[dict[str, Any]], columns: list[str], caption: str | None = None) -> str:
    body = [[cell(c, r.get(c), human=True) for c in columns] for r in rows]
    align = "".join("r" if numeric(rows, c) else "l" for c in columns)
    out = [r"\begin{table}[ht]", r"\centering"]
    if caption:
        out.append(r"\caption{" + latex_escape(caption) + "}")
    out += [r"\begin{tabular}{" + align + "}", r"\toprule",
            " & ".join(latex_escape(c) for c in columns) + r" \\", r"\midrule"]
    out += [" & ".join(latex_escape(v) for v in r) + r" \\" for r in body]
    out += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(out) + "\n"
