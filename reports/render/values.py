"""Cells as people read them: durations, bytes and FLOPs in human units, shares with one
decimal, counts with separators; and column headers (units dropped: the cells carry them).
Column names keep their units (``_ns``, ``_pct``, ``_bytes``); machines get raw values."""

from __future__ import annotations

from typing import Any

from nsys_parsers.plain import is_missing
from reports.render.names import MAX_NAME_CHARS, is_signature, shorten

NAME_COLUMNS = {"name", "kernel", "range", "runner_up", "operation", "key", "export"}
PATH_COLUMNS = {"export"}  # people see a path's file name (machines the whole path)
# Integer columns shown with thousands separators (others are ids or sizes: pid, context).
COUNT_SUFFIXES = ("instances", "count", "calls", "rows")

__all__ = ["MAX_NAME_CHARS"]


def human_ns(value: Any) -> str:
    if is_missing(value):
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
    if is_missing(value):
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
    if is_missing(value):
        return ""
    v = float(value)
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {prefix}"
    return f"{v:.0f}"


def cell(column: str, value: Any, *, human: bool) -> str:
    if is_missing(value):
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
        if human and column in PATH_COLUMNS:
            value = value.replace("\\", "/").rsplit("/", 1)[-1]
        if human and (column in NAME_COLUMNS or is_signature(column)):
            return str(shorten(value, signature=is_signature(column)))
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


def header(column: str, labels: dict[str, str] | None = None) -> str:
    """A column's header for people: its name (or the view's label for it: ``TTFT_s``, ``gpu
    incl``) without the unit, which the cells carry."""
    column = (labels or {}).get(column, column)
    for suffix, label in (("_pct", " %"), ("_ns", ""), ("_bytes", ""), ("_s", "")):
        if column.endswith(suffix) and len(column) > len(suffix):
            return column[: -len(suffix)].replace("_", " ") + label
    return column.replace("_", " ")


def numeric(rows: list[dict[str, Any]], column: str) -> bool:
    """Whether a column holds numbers (right-aligned for people)."""
    for r in rows:
        v = r.get(column)
        if is_missing(v):
            continue
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    return False
