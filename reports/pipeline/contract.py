"""The JSON contract: what ``nsys-mine CMD --format json`` writes, written down as JSON Schema
(docs/schema/CMD.json, generated from the declarations by ``scripts/gen_docs.py``), and the
answer an agent gets (``envelope``: the same rows, the top N, with their notes and units).

A column's type comes from its name (``COLUMN_TYPES``, then ``SUFFIX_TYPES``: units are in the
names, ``_ns``, ``_pct``, ``_bytes``), or from the analysis's own ``column_types`` (a column no
convention covers, or columns only some answers carry, such as a module tree's ``depth`` and
``parent``). Every value may be null: the JSON writer writes a missing value or a NaN as null.
An answer's shape depends on its parameters (``Analysis.shape``: ``--by``, ``ranges
--instances``): the schema accepts each shape the declaration can give, keys exact (no others);
several exports add ``config`` first. An analysis without a view (``info``) answers one object
whose keys are its columns.

Each schema carries ``version``: a hash of its keys and their types, so that a key change
changes it (tests/test_json_contract.py checks the files are current and that every command's
JSON on every shared fixture validates).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nsys_parsers.errors import BadOption
from reports.pipeline.analysis import Analysis
from reports.pipeline.report import MULTI_COLUMN, Report

JSON_SCHEMA = "https://json-schema.org/draft/2020-12/schema"
TYPES = ("string", "integer", "number", "boolean", "object", "array", "any")
DEFAULT_TOP = 20  # rows an agent gets unless it asks for more (top=0: all)

_STRING = ("name", "kernel", "category", "range", "style", "api", "cause", "kind", "operation",
           "pattern", "source", "level", "key", "verdict", "reason", "rule", "status", "message",
           "expected", "config", "only_in", "runner_up", "parent", "time_source",
           "nsys_version", "schema_version", "capture_command", "capture_time",
           "version_source")
_INTEGER = ("pid", "tid", "device", "stream", "instances", "count", "calls", "kernels",
            "memops", "streams", "windows", "order", "depth", "gpu_ops")
_NUMBER = ("flop", "ratio", "p_value", "per_range_instance")
# Column name -> JSON type (checked before the suffixes).
COLUMN_TYPES: dict[str, str] = {
    **dict.fromkeys(_STRING, "string"), **dict.fromkeys(_INTEGER, "integer"),
    **dict.fromkeys(_NUMBER, "number"),
    "category_shares": "object", "tables": "object", "gpus": "array", "observed": "any",
}
# Name endings -> JSON type, first match wins: statistics of durations are fractional.
SUFFIX_TYPES: tuple[tuple[str, str], ...] = (
    ("per_instance_ns", "number"), ("instance_ns", "number"), ("_per_instance", "number"),
    ("avg_ns", "number"), ("med_ns", "number"), ("stddev_ns", "number"), ("_ns", "integer"),
    ("avg_bytes", "number"), ("_bytes", "integer"), ("_pct", "number"), ("_gbps", "number"),
    ("_gflops", "number"), ("_ratio", "number"), ("_count", "integer"),
    ("_instances", "integer"), ("_name", "string"), ("_kernel", "string"),
)
# Name endings -> unit (what an agent is told in ``units``).
UNITS: tuple[tuple[str, str], ...] = (
    ("_ns", "ns"), ("_pct", "%"), ("_bytes", "bytes"), ("_gbps", "GB/s"),
    ("_gflops", "GFLOP/s"),
)
_SHAPE_COMBINATIONS = 256  # parameter combinations tried for shapes, at most


class UnknownColumn(ValueError):
    """A column no convention types and the analysis does not declare (``column_types``)."""


def column_type(a: Analysis, column: str) -> str:
    """The JSON type of ``column`` of ``a``'s answer (one of TYPES)."""
    declared = a.column_types.get(column) or COLUMN_TYPES.get(column)
    if declared is None:
        declared = next((t for end, t in SUFFIX_TYPES if column.endswith(end)), None)
    if declared is None or declared not in TYPES:
        raise UnknownColumn(
            f"{a.name}: no JSON type for column {column!r}: name it by the conventions of "
            f"reports/pipeline/contract.py (units in the name: _ns, _pct, _bytes...) or declare "
            f"column_types={{{column!r}: 'number'}} (one of {', '.join(TYPES)}) in its "
            f"Analysis.")
    return declared


def column_unit(column: str) -> str | None:
    """The unit of a column, from its name (None: a count, a name or a plain number)."""
    return next((u for end, u in UNITS if column.endswith(end)), None)


def answers_object(a: Analysis) -> bool:
    """Whether ``a`` answers one object (``Report.obj``, e.g. ``info``) rather than rows: an
    analysis without a view for people."""
    return a.view is None and a.shape is None


def shapes(a: Analysis) -> list[list[str]]:
    """Every column list ``a``'s answers can have (one per shape its parameters give: each
    combination of the values of its choice and yes/no parameters)."""
    if a.shape is None:
        return [list(a.columns)]
    axes: list[tuple[str, list[Any]]] = []
    for p in a.params:
        if p.argument or p.multiple:
            continue
        if p.choices:
            axes.append((p.name, ([None] if p.default is None else []) + list(p.choices)))
        elif p.type is bool:
            axes.append((p.name, [False, True]))
    found: list[list[str]] = []
    for values in itertools.islice(itertools.product(*(v for _, v in axes)),
                                   _SHAPE_COMBINATIONS):
        columns, _ = a.shaped(dict(zip((n for n, _ in axes), values)))
        if columns not in found:
            found.append(columns)
    return found


def _value_schema(a: Analysis, column: str) -> dict[str, Any]:
    kind = column_type(a, column)
    out: dict[str, Any] = {} if kind == "any" else {"type": [kind, "null"]}
    unit = column_unit(column)
    if unit:
        out["description"] = f"unit: {unit}"
    return out


def _row_schema(a: Analysis, columns: list[str], optional: list[str]) -> dict[str, Any]:
    props = {c: _value_schema(a, c) for c in [*columns, *optional] if c}
    return {"type": "object", "properties": props, "required": list(columns),
            "additionalProperties": False}


def answer_schema(a: Analysis) -> dict[str, Any]:
    """The JSON Schema of ``nsys-mine NAME --format json`` (without ``$schema``/version: see
    ``schema_document``)."""
    if answers_object(a):
        return _row_schema(a, list(a.columns), [])
    variants: list[dict[str, Any]] = []
    for columns in shapes(a):
        optional = [c for c in a.column_types if c not in columns]
        variants.append(_row_schema(a, columns, optional))
        if a.inputs == "exports":  # several exports: `config` first
            variants.append(_row_schema(a, [MULTI_COLUMN, *columns], optional))
    items = variants[0] if len(variants) == 1 else {"anyOf": variants}
    return {"type": "array", "items": items}


def _keys_hash(schema: dict[str, Any]) -> str:
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def schema_version(a: Analysis) -> str:
    """The version of ``a``'s JSON contract: a hash of its keys and their types (it changes
    when a key or a type changes)."""
    return _keys_hash(answer_schema(a))


def schema_document(a: Analysis) -> dict[str, Any]:
    """docs/schema/NAME.json: the schema with its title, description and version."""
    return {"$schema": JSON_SCHEMA, "title": f"nsys-mine {a.name} --format json",
            "description": a.summary, "version": schema_version(a), **answer_schema(a)}


def schema_documents(analyses: tuple[Analysis, ...] | None = None) -> dict[str, str]:
    """File name -> text of every schema file of docs/schema (one per command, and
    index.json: every command's version and the contract's)."""
    if analyses is None:
        from reports.pipeline.registry import all_analyses

        analyses = all_analyses()
    files = {f"{a.name}.json": _dump(schema_document(a)) for a in analyses}
    versions = {a.name: schema_version(a) for a in analyses}
    index = {"description": "JSON Schemas of `nsys-mine CMD --format json`, generated from the "
                            "analysis declarations (scripts/gen_docs.py); version: a hash of "
                            "each command's keys and types.",
             "version": _keys_hash(versions), "commands": versions}
    files["index.json"] = _dump(index)
    return files


def _dump(data: Any) -> str:
    """JSON with two-space indents, a list of plain strings on one line."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    return re.sub(r'\[\s+((?:"[^"\n]*",?\s*)+)\]',
                  lambda m: json.dumps(json.loads(f"[{m.group(1)}]"), ensure_ascii=False),
                  text) + "\n"


def stale_schemas(folder: Path) -> list[str]:
    """The schema files of ``folder`` that differ from the declarations (missing, changed or
    left over)."""
    want = schema_documents()
    have = {p.name for p in folder.glob("*.json")} if folder.is_dir() else set()
    stale = [n for n, text in want.items()
             if not (folder / n).exists() or (folder / n).read_text(encoding="utf-8") != text]
    return sorted(stale + sorted(have - set(want)))


def write_schemas(folder: Path) -> None:
    """Write docs/schema (and remove files of commands that no longer exist)."""
    folder.mkdir(parents=True, exist_ok=True)
    want = schema_documents()
    for p in folder.glob("*.json"):
        if p.name not in want:
            p.unlink()
    for name, text in want.items():
        (folder / name).write_text(text, encoding="utf-8")


# -- the answer for agents and scripts ------------------------------------------------------

def default_top(a: Analysis) -> int:
    """Rows an agent gets by default: all for the analyses whose command shows all (``check``,
    ``categories``), else DEFAULT_TOP."""
    return 0 if a.default_top == 0 else DEFAULT_TOP


ENVELOPE_VERSION = 2  # the shape of ``envelope`` (docs/AGENTS.md: its changelog)
PAGE_BYTES = 1_000_000  # an answer's JSON twice (text and structured content), at most
_CHUNK = 512  # rows rendered at a time while a page fills


class PastTheEnd(BadOption):
    """An ``offset`` past the last row of an answer."""


def envelope(a: Analysis, report: Report, params: dict[str, Any], top: int, offset: int = 0,
             page_bytes: int = PAGE_BYTES) -> dict[str, Any]:
    """The answer as data: the rows ``nsys-mine NAME ... --format json --top TOP`` writes
    (``top`` 0: all, as without --top), in its order, a page at a time, with how many there
    are in all, the notes, the one-line answers of the rows shown, the units of the columns
    and the command's exit code (a gate's verdict: ``check``, ``diff --fail-on``).

    The rows every answer shows first whatever ``top`` (the whole export's row of
    ``dominant`` and ``diff``: ``View.pinned``) are ``total_rows``; ``rows`` are the others,
    the top ``top`` (of each export, for several). A page holds the rows from ``offset`` that
    fit ``page_bytes`` with the answer's JSON counted twice (as a tool result carries it);
    ``next_offset`` is where the next page starts (None: this is the last)."""
    from reports.render import render_object, render_rows

    out: dict[str, Any] = {"title": report.title or a.title or a.name,
                           "schema_version": schema_version(a),
                           "envelope_version": ENVELOPE_VERSION}
    # the warnings (what the command line says on stderr) first among the notes
    notes = list(dict.fromkeys([*report.warnings, *report.notes]))
    if report.obj is not None:
        out["object"] = json.loads(render_object(report.obj, "json").text or "{}")
        out.update(notes=notes, exit_code=report.exit_code)
        return out
    columns = list(report.columns)
    view = a.view_of(report, params)
    declared = a.shaped(params)[1]
    pinned = declared.pinned if declared is not None else 0
    shown, total, body = _cut(report, view, pinned, top)
    noun, per = ("rows", " of each export") if columns[:1] == [MULTI_COLUMN] else (
        getattr(view, "noun", None) or "rows", "")
    left = len(report.rows) - len(shown)
    if left:
        notes.insert(len(report.warnings),
                     f"{len(shown) - len(total):,} of {len(report.rows) - len(total):,} "
                     f"{noun} (the top {top}{per}); {left:,} left out: call again with top=0 "
                     f"for all of them, or top=N for N{per}.")
    if offset and offset >= len(body):
        raise PastTheEnd(f"offset {offset:,}: the answer has {len(body):,} rows (offsets "
                         f"0 to {max(len(body) - 1, 0):,}); give a smaller offset, or 0.")
    # one-line answers: those of the rows shown where there is one per row, else all of them
    # (with the first page)
    aligned = len(report.sentences) == len(report.rows)
    own = dict(zip(map(id, report.rows), report.sentences)) \
        if aligned and isinstance(report.rows, list) else {}
    by_index = aligned and not own and shown is report.rows and not isinstance(body, list)

    def said(i: int, row: dict[str, Any]) -> str | None:
        """The answer of ``row``, the ``i``-th of ``body``."""
        return own.get(id(row)) if own else report.sentences[i + pinned] if by_index else None

    def render(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return json.loads(render_rows(list(rows), columns, "json", view=view).as_text() or "[]")

    out.update(columns=columns, units={c: u for c in columns for u in [column_unit(c)] if u})
    if pinned:
        out["total_rows"] = render(total)
    first = [s for r in total for s in [own.get(id(r))] if s] if aligned else \
        [] if offset else list(report.sentences)[:len(shown) if left else None]
    out.update(rows=[], rows_total=len(report.rows) - len(total), rows_left_out=left,
               offset=offset, next_offset=None, notes=notes, answers=first,
               exit_code=report.exit_code)
    rows, answers = _page(body, offset, page_bytes - _cost(out) - 400, render, said)
    end = offset + len(rows)
    out["rows"] = rows
    out["answers"] = [*out["answers"], *answers]
    if end < len(body):
        out["next_offset"] = end
        out["notes"] = [*notes, f"rows {offset:,} to {end - 1:,} of {len(body):,} (one "
                                f"message holds at most about {page_bytes // 1000:,} kB): call "
                                f"again with offset={end} for the next rows."]
    return out


Rows = Sequence[dict[str, Any]]


def _cut(report: Report, view: Any, pinned: int, top: int
         ) -> tuple[Rows, list[dict[str, Any]], Rows]:
    """(the rows ``--top TOP`` shows, the first ``pinned`` of each export's, the others)."""
    from reports.render import top_rows

    if report.columns[:1] == [MULTI_COLUMN]:  # several exports: the top rows of each
        shown: Rows = _top_each(list(report.rows), pinned, top) if top else report.rows
        total, body = _split_each(shown, pinned)
        return shown, total, body
    shown = top_rows(report.rows, view, top)[0] if top and view is not None else report.rows
    return shown, list(shown[:pinned]), _Tail(shown, pinned)


def _page(body: Rows, offset: int, room: int, render: Callable[[Rows], list[dict[str, Any]]],
          said: Callable[[int, dict[str, Any]], str | None]
          ) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of ``body`` from ``offset`` (as JSON values) and their one-line answers that
    fit ``room`` bytes (``_cost``); at least one row."""
    rows: list[dict[str, Any]] = []
    answers: list[str] = []
    at = offset
    while at < len(body):
        chunk = body[at:at + _CHUNK]
        for i, (row, data) in enumerate(zip(chunk, render(chunk))):
            sentence = said(at + i, row)
            cost = _cost(data) + 2 + (_cost(sentence) + 2 if sentence else 0)
            if cost > room and rows:
                return rows, answers
            room -= cost
            rows.append(data)
            if sentence:
                answers.append(sentence)
        at += len(chunk)
    return rows, answers


class _Tail(Sequence[dict[str, Any]]):
    """``rows[start:]`` without copying them (rows kept as columns stay columns)."""

    def __init__(self, rows: Sequence[dict[str, Any]], start: int) -> None:
        self._rows, self._start = rows, min(start, len(rows))

    def __len__(self) -> int:
        return len(self._rows) - self._start

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            lo, hi, _ = i.indices(len(self))
            return self._rows[self._start + lo:self._start + hi]
        return self._rows[self._start + i]


def _split_each(rows: Sequence[dict[str, Any]], pinned: int
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the first ``pinned`` rows of each export's block, the others), in order."""
    head: list[dict[str, Any]] = []
    body: list[dict[str, Any]] = []
    for _, block in itertools.groupby(rows, key=lambda r: r.get(MULTI_COLUMN)):
        rows_of = list(block)
        head += rows_of[:pinned]
        body += rows_of[pinned:]
    return head, body


def _cost(value: Any) -> int:
    """Bytes of ``value`` in a tool result: its JSON (structured content) and the same JSON
    as a string in the text block (quoted again), non-ASCII escaped as the worst case."""
    text = json.dumps(value, separators=(",", ":"))
    return len(text) + len(json.dumps(text)) - 2


def _top_each(rows: list[dict[str, Any]], pinned: int, top: int) -> list[dict[str, Any]]:
    """The first ``pinned + top`` rows of each export's block (rows of several exports come
    ranked, export by export, each labelled in ``config``)."""
    out: list[dict[str, Any]] = []
    for _, block in itertools.groupby(rows, key=lambda r: r.get(MULTI_COLUMN)):
        out += list(block)[:pinned + top]
    return out


def envelope_schema(a: Analysis) -> dict[str, Any]:
    """The JSON Schema of ``envelope`` for ``a`` (an MCP tool's output schema): its rows (or
    object) are ``answer_schema(a)``."""
    strings = {"type": "array", "items": {"type": "string"}}
    props: dict[str, Any] = {"title": {"type": "string"},
                             "schema_version": {"type": "string", "const": schema_version(a)},
                             "envelope_version": {"type": "integer",
                                                  "const": ENVELOPE_VERSION},
                             "notes": strings,
                             "exit_code": {"type": "integer", "description": (
                                 "the command's exit code: 0, or 3 for a failed gate")}}
    if answers_object(a):
        props["object"] = answer_schema(a)
        required = ["object", "notes", "exit_code"]
    else:
        pinned = a.view.pinned if a.view is not None else 0
        props.update(columns=strings, units={
            "type": "object", "additionalProperties": {"type": "string"}},
            rows=answer_schema(a),
            rows_total={"type": "integer", "description": (
                "rows of the whole answer (top=0), the total rows not counted")},
            rows_left_out={"type": "integer", "description": "rows the top=N cut left out"},
            offset={"type": "integer", "description": "the first row of this page"},
            next_offset={"type": ["integer", "null"], "description": (
                "call again with offset=next_offset for the next page; null: the last")},
            answers=strings)
        if pinned:
            props["total_rows"] = {**answer_schema(a), "description": (
                "the whole export's row (one per export), shown whatever top is")}
        required = ["rows", "rows_total", "rows_left_out", "offset", "next_offset", "notes",
                    "exit_code"]
    return {"type": "object", "properties": props, "required": required}
