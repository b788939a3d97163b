"""The one renderer: rich tables, markdown, CSV, JSON and LaTeX from a DataFrame or a dict.

Library functions return data; commands pick a format here. Column names keep their units
(``_ns``, ``_pct``); ``table``/``md``/``latex`` show durations in human units, ``csv``/``json``
keep raw nanoseconds so that machines can parse them.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import operator
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from nsys_parsers.errors import BadOption
from nsys_parsers.plain import is_missing as _is_missing
from nsys_parsers.plain import jsonable

FORMATS = ("table", "md", "csv", "json", "latex", "text")
HUMAN_FORMATS = ("table", "md", "latex", "text")
NAME_COLUMNS = {"name", "kernel", "range", "runner_up", "operation", "key"}
# Name columns that hold C++ kernel signatures (shortened by structure, see shorten_name).
SIGNATURE_COLUMNS = {"name", "kernel", "runner_up", "key"}
# Integer columns shown with thousands separators (others are ids or sizes: pid, context).
COUNT_SUFFIXES = ("instances", "count", "calls", "rows")

# Long kernel names (templated C++ can be hundreds of KiB) are shortened only here.
MAX_NAME_CHARS = 100


@dataclass
class Rendered:
    """Output of a report ready for the terminal or a file."""

    text: str | None = None  # plain text for md/csv/json/latex
    rich: list[Any] = field(default_factory=list)  # rich renderables for table
    width: int | None = None  # the width the rich parts were laid out for


@dataclass
class Note:
    """A paragraph of a table output (a caption, a note) with an optional rich style. Rich
    prints it in a terminal (``__rich__``); elsewhere ``plain_output`` writes it, wrapped at
    the width as rich wraps it, without importing rich."""

    text: str
    style: str | None = None

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.text, style=self.style or "")


def cell_width(text: str) -> int:
    """How many terminal cells ``text`` takes: its length when ASCII, else as rich measures
    it (a CJK character or most emoji take two cells, a combining accent none)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def shorten(value: Any, width: int = MAX_NAME_CHARS, *, signature: bool = False) -> Any:
    """Strings wider than ``width`` cells shortened with ``shorten_name``; other values as
    given."""
    if isinstance(value, str) and cell_width(value) > width:
        return shorten_name(value, width, signature=signature)
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


def human_flop(value: Any) -> str:
    """A FLOP count with an SI prefix: ``524.3 k``, ``1.07 G``, ``3.4 T``."""
    if _is_missing(value):
        return ""
    v = float(value)
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}"
    return f"{v:.0f}"


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
    if human and (column == "flop" or column.endswith("_flop")) and isinstance(
            value, (int, float)):
        return human_flop(value)
    if column.endswith("_pct"):
        return _fmt_num(value, 1)
    if column == "p_value" and isinstance(value, float):
        return f"{value:.2g}"
    if isinstance(value, float):
        if value.is_integer():
            return _fmt_num(value, 0)
        return f"{value:,.2f}".rstrip("0").rstrip(".")  # 0.38, 1.5, 12.25
    if isinstance(value, str):
        if human and (column in NAME_COLUMNS or _is_signature(column)):
            return str(shorten(value, signature=_is_signature(column)))
        return value
    if human and isinstance(value, int) and not isinstance(value, bool) and column.endswith(
            COUNT_SUFFIXES):
        return f"{value:,}"
    return str(value)


def _fmt_num(value: Any, digits: int) -> str:
    v = float(value)
    if digits == 0 or v.is_integer() and digits == 0:
        return f"{int(v):,}"
    return f"{v:,.{digits}f}"


# Header labels where the generic rule (units dropped: the cells carry them) reads badly.
HEADERS = {
    "per_range_instance": "calls per range", "gpu_inclusive_ns": "gpu incl",
    "gpu_exclusive_ns": "gpu excl", "gpu_span_ns": "gpu span", "kernel_instances": "kernels",
    "range_instances": "ranges", "runner_up": "runner-up", "runner_up_share_pct": "runner-up %",
    "throughput_gbps": "GB/s", "total_bytes": "bytes", "range_kernel_ns": "range gpu",
    "a_instance_ns": "a per inst", "b_instance_ns": "b per inst",
    "a_per_instance": "a calls/inst", "b_per_instance": "b calls/inst",
    "base_per_instance_ns": "base per inst", "cand_per_instance_ns": "cand per inst",
    "base_instances": "base inst", "cand_instances": "cand inst",
    "params_bytes": "params mem", "grads_bytes": "grads mem", "optimizer_bytes": "optimizer mem",
    "flop": "FLOP", "achieved_gflops": "GFLOP/s", "flop_pct": "FLOP %",
    "flop_ratio": "FLOP vs scores", "time_ratio": "time vs scores",
}


def _header(column: str) -> str:
    if column in HEADERS:
        return HEADERS[column]
    for suffix, label in (("_pct", " %"), ("_ns", ""), ("_bytes", ""), ("_s", "")):
        if column.endswith(suffix) and len(column) > len(suffix):
            return column[: -len(suffix)].replace("_", " ") + label
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
    """CSV as ``csv.writer(lineterminator="\\n")`` writes it (a missing value, None or NaN is
    an empty field; a dict or a list its human text), column by column: each column's values
    become their fields by one C call per value of its type, and a name is checked for
    quoting once per distinct name. The same bytes as ``writerows``, which copies every
    character of every field one by one: faster where names are long (5,384 rows of nested
    x30's ``nvtx-kernels``: 0.049 -> 0.030 s), as fast on short rows (16,582 range rows:
    0.104 s, most of it formatting 215 k numbers)."""
    table = _row_table(rows, columns)
    if len(columns) < 2:  # a lone empty field is quoted: the csv module knows the rules
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([tuple(_csv_value(columns[i], v) for i, v in enumerate(row))
                          for row in table])
        return buf.getvalue()
    fields = [_csv_column(columns[i], list(map(operator.itemgetter(i), table)))
              for i in range(len(columns))] if table else [[] for _ in columns]
    lines = [",".join(_csv_column("", list(columns)))]
    lines += map(",".join, zip(*fields))
    return "\n".join(lines) + "\n"


def _csv_column(column: str, values: list[Any]) -> list[str]:
    """Each value as the field ``csv.writer`` writes for it."""
    kinds = set(map(type, values))
    if kinds == {int}:
        return list(map(int.__repr__, values))
    if kinds == {float} and all(map(math.isfinite, values)):
        return list(map(repr, values))
    if kinds == {str}:
        distinct = set(values)
        if _csv_specials() == ('\n",', ""):  # what the csv module of 3.11 quotes
            fixed = {s: _csv_quote(s) for s in distinct
                     if "," in s or '"' in s or "\n" in s}  # 15x faster than _csv_quoted
        else:
            fixed = {s: _csv_str(s) for s in distinct if _csv_quoted(s)}
        return list(map(fixed.get, values, values)) if fixed else values
    out = []
    for v in values:
        t = type(v)
        if t is int:
            out.append(int.__repr__(v))
        elif t is float and math.isfinite(v):
            out.append(repr(v))
        elif v is None:
            out.append("")
        elif t is str:
            out.append(_csv_str(v) if _csv_quoted(v) else v)
        else:
            out.append(_csv_field(_csv_value(column, v)))
    return out


def _csv_quoted(s: str) -> bool:
    """Whether the csv module writes ``s`` other than as it is (quoted, mostly)."""
    return any(map(s.__contains__, _csv_specials()[0]))


def _csv_str(s: str) -> str:
    """The field of a string that ``_csv_quoted``."""
    if any(map(s.__contains__, _csv_specials()[1])):
        return _csv_field(s)
    return _csv_quote(s)


def _csv_quote(s: str) -> str:
    """``s`` quoted as the csv module quotes it (its quote characters doubled)."""
    return '"' + s.replace('"', '""') + '"'


@functools.lru_cache(maxsize=1)
def _csv_specials() -> tuple[str, str]:
    """(the characters that make the csv module write a field other than as it is, those of
    them it does not simply quote), asked of the csv module itself (Python versions differ:
    3.11 leaves a lone \\r as it is)."""
    quoted, other = "", ""
    for c in map(chr, range(128)):
        text = f"a{c}b"
        try:
            got = _csv_field(text)
        except csv.Error:
            got = None
        if got == _csv_quote(text):
            quoted += c
        elif got != text:
            other += c
    return quoted + other, other


def _csv_field(v: Any) -> str:
    """One field exactly as ``csv.writer`` writes it, in a row of more than one field."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow((v, None))
    return buf.getvalue()[:-2]


def _csv_value(column: str, v: Any) -> Any:
    if v.__class__ is float and v != v:
        return None
    if isinstance(v, (dict, list, tuple)):
        return _cell(column, v, human=False)
    return v


def _row_table(rows: list[dict[str, Any]], columns: list[str]) -> list[tuple]:
    """One tuple of ``columns`` values per row (a missing value is None): rows that have
    every column go through itemgetter, one C call per row."""
    try:
        table = list(map(operator.itemgetter(*columns), rows)) if columns else []
        if len(columns) == 1:
            table = [(v,) for v in table]
    except KeyError:
        table = [tuple(r.get(c) for c in columns) for r in rows]
    return table


def rows_to_json(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """``to_json`` of the rows with exactly ``columns`` (a missing value is null), column by
    column: each column's values are encoded by one C call per value of its type, and each
    line is filled in from a template that holds the encoded keys. The same bytes as
    ``json.dumps`` of every row, twice as fast: that encodes the 13 keys again on each of
    16,582 range rows (0.30 s, where this takes 0.15 s). A value of another type (a dict, a
    list) sends its column the general way; a NaN or a numpy scalar the whole table."""
    if rows and columns:
        encoded = [_json_column(list(v)) for v in zip(*_row_table(rows, columns))]
        if all(col is not None for col in encoded):
            template = "  {" + ", ".join(_encode_str(c).replace("%", "%%") + ": %s"
                                         for c in columns) + "}"
            return "[\n" + ",\n".join([template % line for line in zip(*encoded)]) + "\n]\n"
    return to_json([{c: r.get(c) for c in columns} for r in rows])


_encode_str = json.encoder.encode_basestring  # the C function json.dumps uses for str
_JSON_CONSTANTS = {None: "null", True: "true", False: "false"}


def _json_column(values: list[Any]) -> list[str] | None:
    """Each value as ``json.dumps(v, ensure_ascii=False)`` writes it; None when a float is
    not finite (``allow_nan=False`` refuses it: the caller's general path decides)."""
    kinds = set(map(type, values))
    if kinds == {str}:
        return list(map(_encode_str, values))
    if kinds == {int}:
        return list(map(int.__repr__, values))
    if kinds == {float}:
        return list(map(float.__repr__, values)) if all(map(math.isfinite, values)) else None
    if kinds <= {float, int, type(None), bool, str}:
        out = []
        for v in values:
            t = type(v)
            if t is str:
                out.append(_encode_str(v))
            elif t is int:
                out.append(int.__repr__(v))
            elif t is float:
                if not math.isfinite(v):
                    return None
                out.append(float.__repr__(v))
            else:
                out.append(_JSON_CONSTANTS[v])
        return out
    try:
        return [json.dumps(v, ensure_ascii=False, allow_nan=False) for v in values]
    except (TypeError, ValueError):
        return None


def to_json(data: Any) -> str:
    """JSON text; a list of rows is written one row per line (the C encoder: fast)."""
    if isinstance(data, list):
        try:
            lines = [json.dumps(row, ensure_ascii=False, allow_nan=False) for row in data]
        except (TypeError, ValueError):  # numpy scalars or NaN: make them plain first
            lines = [json.dumps(jsonable(row), ensure_ascii=False) for row in data]
        return "[\n" + ",\n".join("  " + line for line in lines) + ("\n]\n" if lines
                                                                    else "]\n")
    return json.dumps(jsonable(data), indent=2, ensure_ascii=False) + "\n"


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


DEFAULT_TOP = 20
# Columns that give way first when a table is too wide, least important first.
DEFAULT_DROP = ("stddev_ns", "max_ns", "min_ns", "med_ns")
TABLE_GAP = 2  # rich SIMPLE_HEAD with collapsed padding: two spaces between columns
MIN_NAME = 16
MIN_TEXT = 20


@functools.lru_cache(maxsize=8192)  # tables and sentences repeat kernel names, row after row
def shorten_name(name: str, width: int, *, signature: bool = True) -> str:
    """``name`` in at most ``width`` terminal cells (``cell_width``: characters, where a CJK
    character counts two), keeping its start and its end. For C++
    signatures the structure gives way first: template argument lists collapse (largest
    first: ``kernel<…>(int, T1)``), then the parameter list (``kernel<…>(…)``), then the return
    type and namespaces (``…::kernel<…>(…)``); only then the middle of what is left
    (``void at::native::vec…(int, T1)``). ``signature=False`` (range names, paths): a
    pyprof/DLProf marker (a Python dict literal) becomes its summary (``marker_summary``),
    then only the middle gives way."""
    if cell_width(name) <= width:
        return name
    if not signature:
        return _middle(marker_summary(name) or name, width)
    text = name
    groups = _template_groups(name)
    chosen: list[tuple[int, int]] = []
    for group in sorted(groups, key=lambda g: g[0] - g[1]):  # largest first
        if cell_width(text) <= width:
            return text
        chosen.append(group)
        text = _collapsed(name, chosen)
    for step in (_collapse_params, _drop_return_type, _drop_namespaces):
        if cell_width(text) <= width:
            return text
        text = step(text)
    return text if cell_width(text) <= width else _middle(text, width)


def shorten_columns(cells: dict[str, list[str]], widths: dict[str, int],
                    full: dict[str, list[Any]] | None = None) -> dict[str, list[str]]:
    """``shorten_name`` of every cell of the name columns ``cells`` (each to its column's
    width). Where different names would read the same, in one column or across them (a
    kernel and its runner-up), each of those shows instead its start and the part where the
    names differ: the names of the clash without their common start and end, the start of
    that part first (``sm80_xmma_gem…l__5x_cublas`` three times becomes
    ``sm80_x…64x256x8_sta…ecute…``, ``sm80_x…128x128x8_st…ecute…``,
    ``sm80_x…64x256x8_sta…plit_k…``). ``full``: the whole names, when the cells hold
    them shortened already (to ``MAX_NAME_CHARS``); pyprof markers are left as they are."""
    out = {c: [shorten_name(v, widths[c], signature=_is_signature(c)) for v in values]
           for c, values in cells.items()}
    whole = {c: [w if isinstance(w, str) and w else v
                 for v, w in zip(values, (full or {}).get(c, values))]
             for c, values in cells.items()}
    groups: dict[str, set[str]] = {}
    for c in cells:
        for name, short in zip(whole[c], out[c]):
            groups.setdefault(short, set()).add(name)
    clashes = {short: sorted(group) for short, group in groups.items()
               if len(group) > 1 and not any(n.startswith("{'") for n in group)}
    if not clashes:
        return out
    told: dict[tuple[str, int], dict[str, str] | None] = {}  # (short text, width) -> texts

    def shown(kept: set[str]) -> dict[str, list[str]]:
        """The cells with the clashes told apart, but those of ``kept`` (as shortened)."""
        res: dict[str, list[str]] = {}
        for c in cells:
            res[c] = []
            for name, short in zip(whole[c], out[c]):
                better = None
                if short in clashes and short not in kept:
                    key = (short, widths[c])
                    if key not in told:
                        told[key] = _told_apart(short, clashes[short], widths[c])
                    better = told[key]
                res[c].append(better[name] if better is not None else short)
        return res

    # A clash told apart must not read as another name (two cub kernels shortened apart,
    # DeviceReduceKernel<…>(…) and DeviceReduceSingleTileKernel<…>(…), whose clashes were
    # told apart by the same start): such a clash keeps its shortened names.
    kept: set[str] = set()
    while True:
        result = shown(kept)
        owners: dict[str, set[str]] = {}
        for c in cells:
            for name, text in zip(whole[c], result[c]):
                owners.setdefault(text, set()).add(name)
        worse = {short for c in cells
                 for name, short, text in zip(whole[c], out[c], result[c])
                 if text != short and len(owners[text]) > 1}
        if not worse:
            return result
        kept |= worse


def _told_apart(short: str, group: list[str], width: int) -> dict[str, str] | None:
    """Texts of at most ``width`` cells that tell the names of ``group`` (all shortened to
    ``short``) apart, or None when the width cannot."""
    start = len(os.path.commonprefix(group))
    end = len(os.path.commonprefix([g[::-1] for g in group]))
    end = min(end, min(len(g) for g in group) - start)  # the common end after the start
    if min(len(g) for g in group) - start - end < 3:  # a name is (almost) all common: its
        end = 0  # differing part is what follows the common start, to the end
    # the start: a signature's function name when it takes at most half the width (it tells
    # DeviceReduceKernel<…> from DeviceReduceSingleTileKernel<…>), else a quarter of it
    stem = re.split(r"[<(]", short, maxsplit=1)[0]
    if stem != short and 4 <= cell_width(stem) <= width // 2:
        head = stem
    else:
        head = _fit_cells(short, max(4, width // 4))
    if head.endswith("…"):
        head = head[:-1]
    room = width - cell_width(head) - 1 - (1 if end else 0)  # the ellipses around the part
    if room < 5:
        return None
    # the differing part: two thirds from its start (where the names first differ)
    told = {g: head + "…" + _middle(g[start:len(g) - end], room, tail_share=3)
            + ("…" if end else "") for g in group}
    return told if len(set(told.values())) == len(group) else None


# pyprof / DLProf write a Python dict per NVTX range: an operator call with its arguments, or
# the Python stack that made it. Their distinctive parts are the argument shapes and the
# innermost frame of the user's own code, hundreds of characters in.
_MARKER_MAX = 20_000


def marker_summary(name: str) -> str | None:
    """A pyprof/DLProf marker in a few words, else None: ``{'mod': 'torch.nn.functional',
    'op': 'conv2d', 'args': [{'shape': (1, 3, 32, 32), ...}, ...]}`` ->
    ``conv2d(1x3x32x32, 6x3x3x3, 6)``; ``{'traceMarker': [frames], 'funcStack':
    '/…/Conv2d::forward/conv2d'}`` -> ``conv2d @ dummy_network.py:25`` (the innermost frame
    outside site-packages)."""
    if not (name.startswith("{'") and name.endswith("}")) or len(name) > _MARKER_MAX:
        return None
    import ast

    try:
        marker = ast.literal_eval(name)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(marker, dict):
        return None
    if isinstance(marker.get("op"), str):
        args = marker.get("args")
        args = args if isinstance(args, list) else []
        return f"{marker['op']}({', '.join(_marker_arg(a) for a in args)})"
    frames = marker.get("traceMarker")
    if isinstance(frames, list) and all(isinstance(f, str) for f in frames):
        own = [f for f in frames if "site-packages" not in f and "dist-packages" not in f]
        stack = marker.get("funcStack")
        op = stack.rsplit("/", 1)[-1] if isinstance(stack, str) and stack else ""
        where = (own or frames or [""])[-1].rsplit("/", 1)[-1]
        return f"{op} @ {where}" if op and where else (op or where or None)
    return None


def _marker_arg(arg: Any) -> str:
    """One argument of a pyprof operator marker: a tensor's shape (``16x6x5x5``), else its
    value or type."""
    if not isinstance(arg, dict):
        return "?"
    shape = arg.get("shape")
    if isinstance(shape, (tuple, list)):
        return "x".join(map(str, shape)) if shape else "scalar"
    if "value" in arg:
        return str(arg["value"])
    return str(arg.get("type", "?"))


def _structure(name: str) -> str:
    """A signature with its template and parameter lists collapsed: its useful width."""
    groups = _template_groups(name)
    return _collapse_params(_collapsed(name, groups) if groups else name)


def _collapse_params(text: str) -> str:
    """``f<…>(int, T1 *, ...)`` -> ``f<…>(…)`` (the last top-level parameter list)."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text if i == len(text) - 2 else text[:i] + "(…)"
    return text


def _drop_return_type(text: str) -> str:
    """``void ns::f(…)`` -> ``ns::f(…)`` (only C++ return types, not words of a range name)."""
    for head in ("void ", "static ", "__global__ ", "__device__ "):
        if text.startswith(head):
            return text[len(head):]
    return text


def _drop_namespaces(text: str) -> str:
    """``at::native::f<…>(…)`` -> ``…::f<…>(…)``."""
    head = text.split("<", 1)[0].split("(", 1)[0]
    cut = head.rfind("::")
    return "…" + text[cut:] if cut > 0 else text


def _template_groups(name: str) -> list[tuple[int, int]]:
    """(start, end) of the content of each top-level ``<...>`` group, if brackets balance."""
    groups, depth, start = [], 0, 0
    for i, ch in enumerate(name):
        if ch == "<":
            if depth == 0:
                start = i + 1
            depth += 1
        elif ch == ">" and depth > 0:
            depth -= 1
            if depth == 0 and i > start:
                groups.append((start, i))
    return groups if depth == 0 else []


def _collapsed(name: str, groups: list[tuple[int, int]]) -> str:
    """``name`` with the content of each group replaced by an ellipsis."""
    out, pos = [], 0
    for a, b in sorted(groups):
        out += [name[pos:a], "…"]
        pos = b
    out.append(name[pos:])
    return "".join(out)


def _middle(text: str, width: int, *, tail_share: int = 2) -> str:
    """``text`` in ``width`` cells: its start, an ellipsis, its end (1 / ``tail_share`` of
    the cells kept)."""
    if cell_width(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    keep = width - 1
    head = _fit_cells(text, keep - keep // tail_share)
    tail = _fit_cells(text[::-1], keep - cell_width(head))[::-1]  # a cell head left over
    return head + "…" + tail


def _fit_cells(text: str, cells: int) -> str:
    """The longest start of ``text`` that takes at most ``cells`` terminal cells (a wide
    character that would straddle the limit is left out)."""
    if text.isascii():
        return text[:cells]
    from rich.cells import get_character_cell_size

    used = 0
    for i, ch in enumerate(text):
        used += get_character_cell_size(ch)
        if used > cells:
            return text[:i]
    return text


def _is_signature(column: str) -> bool:
    return column in SIGNATURE_COLUMNS or column.endswith("_kernel")


def _kind(column: str, rows: list[dict[str, Any]], cells: list[str]) -> str:
    if _numeric(rows, column):
        return "num"
    if column in NAME_COLUMNS or _is_signature(column):
        return "name"
    if max((cell_width(c) for c in cells), default=0) <= 16:
        return "label"  # short text (a status, a size, a preformatted number): never wraps
    return "text"


def _header_lines(header: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(header, width=max(width, 1), break_long_words=False)) or header


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
    useful = {c: max((cell_width(_structure(v)) for v in cells[c]), default=0)
              if _is_signature(c) else max(COMFORT["name"], min(content[c], WHOLE_NAME))
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
    """A rich renderable of the table that fits ``width`` (None: natural width), and the
    columns left out. Cells are plain text: a name like ``step[layer]`` or ``[/]`` is shown
    as it is, never read as rich markup. Tables (of more than ``FAST_ROWS`` rows) whose cells
    all fit their columns (nothing to wrap) are laid out here, line by line, as rich would
    lay them out (rich takes about 0.5 ms a row: 9 s for 16 k rows); rich is imported only
    for the others."""
    cells = {c: [_cell(c, r.get(c), human=True) for r in rows] for c in columns}
    kinds = {c: _kind(c, rows, cells[c]) for c in columns}
    headers = {c: _header((labels or {}).get(c, c)) for c in columns}
    layout = fit_columns(columns, headers, cells, kinds, width, drop)
    shown = {c: cells[c] for c in layout.columns}
    names = [c for c in layout.columns if kinds[c] == "name"]
    shown.update(shorten_columns({c: cells[c] for c in names}, layout.widths,
                                 {c: [r.get(c) for r in rows] for c in names}))
    if len(rows) > FAST_ROWS:
        text = table_text(layout, shown, kinds, title, width)
        if text is not None:
            return text, layout.dropped
    from rich import box
    from rich.table import Table
    from rich.text import Text

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


# Tables of more rows than this are laid out by table_text when it can: all of them (rich's
# Table took 0.05-0.1 s for the top 20 rows). Tests raise it to compare with rich's Table.
FAST_ROWS = 0


def table_text(layout: Layout, shown: dict[str, list[str]], kinds: dict[str, str],
               title: str | None, width: int | None) -> Any:
    """The table as ``TableLines`` (bold title and header, the rule, the rows), the same
    characters rich's Table gives for this layout; None when a header would need wrapping,
    a cell would need it other than by plain ASCII words (``_wrap_as_rich``), or the table
    would not fit ``width`` (then rich lays it out)."""
    size = cell_width  # terminal cells (µ is one, a CJK character two)
    cols = layout.columns
    head_lines = {c: layout.headers[c].split("\n") for c in cols}
    sizes = {c: [size(v) for v in shown[c]] for c in cols}
    widths = {}
    wraps = set()  # text columns whose long cells are cut into lines, as rich folds them
    for c in cols:
        need = max(sizes[c] + [size(h) for h in head_lines[c]] + [1])
        if kinds[c] in ("num", "label"):
            need = max(need, layout.widths[c])
        elif any("\n" in v for v in shown[c]):
            return None
        elif need > layout.widths[c]:
            w = layout.widths[c]
            if (kinds[c] != "text" or any(size(h) > w for h in head_lines[c])
                    or not all(v.isascii() and v.isprintable() for v in shown[c])):
                return None  # rich folds it
            wraps.add(c)
            need = w
        widths[c] = need
    total = sum(widths.values()) + TABLE_GAP * (len(cols) - 1)
    if (width is not None and total > width) or (title is not None and size(title) > total):
        return None
    gap = " " * TABLE_GAP
    right = [kinds[c] == "num" for c in cols]
    col_w = [widths[c] for c in cols]

    def line(values: Iterable[str], lens: Iterable[int]) -> str:
        return gap.join(" " * (w - n) + v if r else v + " " * (w - n)
                        for v, n, w, r in zip(values, lens, col_w, right))

    lines: list[tuple[str, bool]] = []  # (line, bold)
    if title is not None:
        lines.append((title + " " * (total - size(title)), True))
    height = max(len(head_lines[c]) for c in cols)
    for i in range(height):  # header cells sit on the rule, as rich puts them
        heads = [head_lines[c][i - height + len(head_lines[c])]
                 if i >= height - len(head_lines[c]) else "" for c in cols]
        lines.append((line(heads, map(size, heads)), True))
    lines.append(("\u2500" * total, False))
    rows = zip(zip(*[shown[c] for c in cols]), zip(*[sizes[c] for c in cols]))
    if not wraps:
        lines.extend((line(values, lens), False) for values, lens in rows)
        return TableLines(lines, total)
    folds = [c in wraps for c in cols]
    for values, lens in rows:
        if not any(f and n > w for f, n, w in zip(folds, lens, col_w)):
            lines.append((line(values, lens), False))
            continue
        cells = []
        for v, n, w, f in zip(values, lens, col_w, folds):
            cell = _wrap_as_rich(v, w) if f and n > w else [v]
            if cell is None:
                return None
            cells.append(cell)
        for i in range(max(map(len, cells))):
            parts = [cell[i] if i < len(cell) else "" for cell in cells]
            lines.append((line(parts, map(size, parts)), False))
    return TableLines(lines, total)


class TableLines:
    """Lines laid out already, for rich to write as they are (a ``Text`` would be joined
    with its neighbours by ``Console.print`` and word-wrapped line by line again)."""

    def __init__(self, lines: list[tuple[str, bool]], width: int):
        self.lines, self.width = lines, width

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.segment import Segment
        from rich.style import Style

        bold, newline = Style(bold=True), Segment.line()
        for text, strong in self.lines:
            yield Segment(text, bold if strong else None)
            yield newline

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        return Measurement(self.width, self.width)


def rank_rows(rows: list[dict[str, Any]], view: View) -> list[dict[str, Any]]:
    """Rows after the pinned ones, highest first on the first ``rank_by`` column that has a
    non-zero value (stable: ties keep the report's order)."""
    head, rest = rows[:view.pinned], rows[view.pinned:]
    for key in view.rank_by:
        if any(isinstance(r.get(key), (int, float)) and r.get(key) for r in rest):
            rest = sorted(rest, key=lambda r: -(r.get(key) or 0))
            break
    return head + rest


def top_rows(rows: list[dict[str, Any]], view: View, top: int | None
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


def rows_for_people(rows: list[dict[str, Any]], view: View, top: int | None) -> Shown:
    """The ranked top ``top`` rows (default 20, 0 = all; pinned rows first), the view's
    columns less those that are zero everywhere (``hide_if_zero``) or the same in every row
    (``hide_if_constant``: said once in a note), with the view's labels for empty cells.
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
            f"{_header(c)} {_cell(c, rows[0].get(c), human=True)}" for c in constant))
    if view.null_labels:
        rows = [{k: (view.null_labels[k] if k in view.null_labels and v is None else v)
                 for k, v in r.items()} for r in rows]
    return Shown(rows=rows, columns=columns, footer=footer, notes=notes)


def cell_text(column: str, value: Any) -> str:
    """One cell as people read it: durations, bytes and FLOPs in human units, names
    shortened (to MAX_NAME_CHARS), shares with one decimal."""
    return _cell(column, value, human=True)


def header_text(column: str) -> str:
    """A column's header for people (units dropped: the cells carry them)."""
    return _header(column)


def numeric_column(rows: list[dict[str, Any]], column: str) -> bool:
    """Whether a column holds numbers (right-aligned for people)."""
    return _numeric(rows, column)


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
    human_columns: list[str] | None = None,
    null_labels: dict[str, str] | None = None,
    top: int | None = None,
    width: int | None = None,
    wide: bool = False,
) -> Rendered:
    """Render row dicts in one of FORMATS.

    json/csv: every row (or the ``top`` ranked ones when ``top`` is given) with ``columns``
    in their order. table/md/latex/text: ``view`` (or ``human_columns``/``null_labels``)
    decides the columns; the top ``top`` rows (default 20, 0 = all) with a footer saying how
    many there are; ``caption`` lines come first, ``notes`` explain the numbers; tables fit
    ``width`` columns (numbers are never cut; names give way, then the columns of
    ``view.drop``, named in a note); ``wide`` shows every column at its natural width.
    ``sentences`` (one-line answers, one per row) are shown in md and text, where text shows
    only them (text without sentences is the table without styling)."""
    check_format(fmt)
    notes = list(notes)
    sentences = list(sentences)
    caption = list(caption)
    view = view or View(columns=human_columns or columns, null_labels=null_labels or {})
    if fmt in ("json", "csv"):
        if top:
            rows, _ = top_rows(rows, view, top)
        if fmt == "json":
            return Rendered(text=rows_to_json(rows, columns))
        return Rendered(text=to_csv(rows, columns))
    people = rows_for_people(rows, view, top)
    rows, columns, footer = people.rows, people.columns, people.footer
    notes = ([footer] if footer else []) + people.notes + notes
    if fmt == "text" and sentences:
        shown = sentences[: len(rows)] if footer else sentences
        return Rendered(text="".join(f"{s}\n" for s in caption + shown + notes))
    if fmt == "md":
        text = ""
        if title:
            text += f"### {title}\n\n"
        text += "".join(f"{c}\n\n" for c in caption)
        text += "".join(f"- {s}\n" for s in sentences) + ("\n" if sentences else "")
        text += to_markdown(rows, columns)
        text += "".join(f"\n> {n}\n" for n in notes)
        return Rendered(text=text)
    if fmt == "latex":
        return Rendered(text=to_latex(rows, columns, caption=title))
    parts: list[Any] = [Note(c) for c in caption]
    if rows or not notes:
        drop = tuple(g for g in (view.drop or DEFAULT_DROP)
                     if any(c in columns for c in (g if isinstance(g, tuple) else (g,))))
        table, dropped = rich_table(rows, columns, title=title,
                                    width=None if wide else width, drop=drop,
                                    labels=view.headers)
        parts.append(table)
        if dropped:
            notes.append(f"left out to fit {width} columns: "
                         f"{', '.join(_header(view.headers.get(c, c)) for c in dropped)}; "
                         f"--wide shows every "
                         f"column, --format csv or json gives everything")
    for n in notes:
        parts.append(Note(n, "yellow"))
    if fmt == "text":
        return Rendered(text=plain_text(parts, None if wide else width))
    return Rendered(rich=parts, width=None if wide else width)


def plain_text(parts: list[Any], width: int | None) -> str:
    """rich renderables as plain text (no colour, no styles), laid out for ``width``."""
    width = width or 100_000
    text = plain_output(parts, width)
    if text is None:
        text = rich_text(parts, width)
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def rich_text(parts: list[Any], width: int) -> str:
    """What rich's Console writes for ``parts`` on a console ``width`` cells wide that is not
    a terminal (no styles)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, no_color=True, color_system=None,
                      soft_wrap=False)
    for part in parts:
        console.print(part)
    return buffer.getvalue()


# Characters rich's Text drops or expands (control codes, tabs): such notes go through rich.
_NOT_PLAIN = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


def plain_output(parts: list[Any], width: int) -> str | None:
    """The characters rich's Console writes for ``parts`` on a console ``width`` cells wide
    that is not a terminal (so no styles), without rich: lines of tables laid out here
    (``TableLines``) as they are, ``Note`` paragraphs wrapped as rich wraps them. None when a
    part is anything else, or a line that rich would change: then rich writes the output.
    Importing rich and laying out a 20-row Table took 0.05-0.1 s of every answer written to
    a pipe or a file."""
    lines: list[str] = []
    for part in parts:
        if isinstance(part, TableLines):
            if any(cell_width(line) > width for line, _ in part.lines):
                return None  # rich would crop it
            lines.extend(line for line, _ in part.lines)
        elif isinstance(part, Note):
            if _NOT_PLAIN.search(part.text) or part.text.endswith("\n"):
                return None
            for line in part.text.split("\n"):
                if cell_width(line) <= width:
                    lines.append(line)
                    continue
                wrapped = _wrap_as_rich(line, width)
                if wrapped is None:
                    return None
                lines.extend(wrapped)
        else:
            return None
    return "".join(line + "\n" for line in lines)


def _wrap_as_rich(line: str, width: int) -> list[str] | None:
    """A line wider than ``width`` (a Note's, or a table cell's), cut into lines the way
    rich's ``Text.wrap`` cuts it (its own word breaking; whitespace beyond the width dropped,
    then cropped)."""
    try:
        from rich._wrap import divide_line
        from rich.cells import set_cell_size
    except ImportError:  # pragma: no cover - a rich without them: rich writes the note
        return None
    bounds = [0, *divide_line(line, width, fold=True), len(line)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        piece = line[a:b]
        excess = len(piece) - width
        if excess > 0:
            trailing = len(piece) - len(piece.rstrip())
            piece = piece[:len(piece) - min(trailing, excess)]
        if cell_width(piece) > width:
            piece = set_cell_size(piece, width)
        out.append(piece)
    return out


def render_object(obj: dict[str, Any], fmt: str, *, title: str | None = None,
                  width: int | None = None, human: dict[str, Any] | None = None,
                  notes: Iterable[str] = ()) -> Rendered:
    """Render one object (e.g. ``info``): JSON as an object, others as a key/value table
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


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise BadOption(f"unknown format {fmt!r}; use one of: {', '.join(FORMATS)}")
