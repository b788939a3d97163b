"""The JSON contract (reports/pipeline/contract.py, docs/schema): every command's `--format json` on
every shared fixture validates against its schema; the schema files are what the declarations
give; a key change changes the version; the agents' answer (``envelope``) has exactly the
rows the command line writes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from nsys_parsers.errors import NsysMineError
from reports.pipeline import contract
from reports.pipeline.ask import ask
from reports.pipeline.registry import all_analyses, get
from reports.render import render_object, render_rows
from tests.conftest import ALL_SQLITE, FIXTURES, ROOT, fixture_path, run_cli

jsonschema = pytest.importorskip("jsonschema")

SCHEMA_DIR = ROOT / "docs" / "schema"
NAMES = [a.name for a in all_analyses()]
RULES = """
[[rule]]
range = "forward"
min_instances = 1

[[rule]]
dominant_category = "gemm"

[[rule]]
range = "step"
max_regression_pct = 10
"""
# The parameters each command is asked with (shapes: every --by, ranges --instances).
VARIANTS: dict[str, list[dict]] = {
    "kernels": [{}, {"by": "device"}, {"by": "process"}, {"by": "stream"}],
    "ranges": [{}, {"instances": True}, {"by": "device"}, {"by": "stream"}],
    "dominant": [{}, {"by": "device"}, {"by": "process"}, {"by": "stream"}],
    "nvtx-kernels": [{}, {"attribution": "innermost"}],
    "gaps": [{"min_gap_ms": 0.01}],
    "attention": [{"d_model": 64, "heads": 4, "context": 128, "batch": 2}],
}


def schema(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.json").read_text(encoding="utf-8"))


def cli_json(report) -> object:
    """The JSON `--format json` writes for a report (the command line's code path)."""
    if report.obj is not None:
        return json.loads(render_object(report.obj, "json").text)
    return json.loads(render_rows(report.rows, report.columns, "json").as_text())


def errors_of(data: object, doc: dict) -> list:
    """Where ``data`` breaks the schema ``doc``. Rows of one answer share their keys: the
    variant (``anyOf``) the first row matches is checked on every row (the same verdict as the
    whole schema, without trying every variant on each of 16,000 rows)."""
    variants = doc.get("items", {}).get("anyOf")
    if isinstance(data, list) and data and variants:
        match = [v for v in variants if jsonschema.Draft202012Validator(v).is_valid(data[0])]
        if match:
            doc = {**doc, "items": match[0]}
    return sorted(jsonschema.Draft202012Validator(doc).iter_errors(data),
                  key=lambda e: list(e.path))


def asks(name: str, export: Path, rules: Path) -> list[tuple[list[Path], dict]]:
    """(sources, params) of the questions asked of one export."""
    a = get(name)
    if a.inputs == "none":
        return [([], {})]
    if name == "diff":
        return [([export], {"cand": export})]
    if name == "compare":
        return [([export], {"other": export})]
    if name == "check":
        return [([export], {"rules": rules, "baseline": export})]
    return [([export], dict(v)) for v in VARIANTS.get(name, [{}])]


@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "perf.toml"
    path.write_text(RULES)
    return path


def test_schema_files_are_what_the_declarations_give():
    assert contract.stale_schemas(SCHEMA_DIR) == [], "run .venv/bin/python scripts/gen_docs.py"
    assert sorted(p.stem for p in SCHEMA_DIR.glob("*.json")) == sorted([*NAMES, "index"])


@pytest.mark.parametrize("name", NAMES)
def test_a_schema_is_a_valid_json_schema_whose_version_hashes_its_keys(name):
    doc = schema(name)
    jsonschema.Draft202012Validator.check_schema(doc)
    keys = {k: v for k, v in doc.items() if k not in ("$schema", "title", "description",
                                                      "version")}
    assert doc["version"] == contract._keys_hash(keys)  # a key edited by hand shows


def test_a_key_change_changes_the_version():
    a = get("longest")
    renamed = replace(a, columns=[*a.columns[:-1], "share_of_time_pct"])
    retyped = replace(a, column_types={"share_pct": "string"})
    versions = {contract.schema_version(x) for x in (a, renamed, retyped)}
    assert len(versions) == 3
    assert contract.schema_version(replace(a, help="other words")) == \
        contract.schema_version(a)


def test_a_column_without_a_type_is_an_error_that_says_what_to_declare():
    a = replace(get("longest"), columns=["kernel", "mystery"])
    with pytest.raises(contract.UnknownColumn, match=r"column_types=\{'mystery'"):
        contract.answer_schema(a)
    assert contract.answer_schema(replace(a, column_types={"mystery": "number"}))


def test_shapes_come_from_the_parameters():
    ranges = contract.shapes(get("ranges"))
    assert any("start_ns" in s for s in ranges)  # --instances
    assert any(s[:2] == ["device", "stream"] for s in ranges)  # --by stream
    assert contract.shapes(get("gaps")) == [get("gaps").columns]


@pytest.mark.parametrize("name", NAMES)
def test_every_command_json_on_every_fixture_validates(name, rules):
    if not ALL_SQLITE:
        pytest.skip(f"no shared fixtures in {FIXTURES}")
    a = get(name)
    doc = schema(name)
    answered = 0
    for fixture in ALL_SQLITE if a.inputs != "none" else ALL_SQLITE[:1]:
        for sources, params in asks(name, FIXTURES / fixture, rules):
            try:
                report = ask(a, sources, None, dict(params))
            except NsysMineError:
                continue  # not this export's kind of data (no kernels, no ranges...)
            assert (report.obj is not None) == contract.answers_object(a)
            data = cli_json(report)
            errors = errors_of(data, doc)
            assert not errors, f"{name} {params} on {fixture}: {errors[0].message} at " \
                               f"{list(errors[0].path)}"
            answered += 1
    assert answered, f"{name} answered on no fixture"


def test_several_exports_and_module_trees_validate(tmp_path):
    from tests import synth

    tree = synth.module_run(tmp_path / "modules.sqlite")
    a = fixture_path("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite")
    b = fixture_path("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite")
    for name in ("ranges", "dominant"):
        report = ask(name, [tree])
        assert "depth" in report.columns  # a tree: depth and parent added
        jsonschema.validate(cli_json(report), schema(name))
    for name in ("kernels", "dominant", "gpus"):
        report = ask(name, [a, b])
        assert report.columns[0] == "config"
        jsonschema.validate(cli_json(report), schema(name))


@pytest.mark.parametrize("args", [
    ("dominant", "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"),
    ("kernels", "vecadd_t4_nsys2022.4.sqlite", "--by", "stream"),
    ("info", "gtls_rtx3060_nsys2023.1.sqlite"),
    ("gaps", "cs336_lizhieffe_ddp53_profile.sqlite"),
])
def test_the_command_line_json_validates(args):
    name, fixture, *rest = args
    res = run_cli(name, fixture_path(fixture), *rest, "--format", "json")
    assert res.exit_code == 0, res.stderr
    jsonschema.validate(json.loads(res.stdout), schema(name))


def command_line_order(pages: list[dict]) -> list[dict]:
    """The rows of an answer's pages in the command line's order: each export's whole-export
    row (``total_rows``) before that export's other rows."""
    totals = pages[0].get("total_rows", [])
    rows = [r for page in pages for r in page["rows"]]
    if not totals:
        return rows
    if "config" not in totals[0]:
        return [*totals, *rows]
    out = []
    for total in totals:
        out += [total, *[r for r in rows if r["config"] == total["config"]]]
    return out


def all_pages(a, report, params, top, page_bytes=contract.PAGE_BYTES) -> list[dict]:
    pages = [contract.envelope(a, report, params, top, 0, page_bytes)]
    while pages[-1]["next_offset"] is not None:
        assert len(pages) < 1000
        pages.append(contract.envelope(a, report, params, top, pages[-1]["next_offset"],
                                       page_bytes))
    return pages


@pytest.mark.parametrize("top", [0, 3])
def test_the_envelope_has_the_rows_of_the_command_line(top):
    """Single and several exports, all rows and the top 3 (of each export); the whole
    export's row in its own field; in pages of at most 30 kB, rows kept as columns too."""
    one = [fixture_path("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite")]
    two = [*one, fixture_path("vecadd_t4_nsys2022.4.sqlite")]
    paged = 0
    for name, sources, flags in (("kernels", one, []), ("dominant", one, []),
                                 ("kernels", two, []), ("dominant", two, []),
                                 ("ranges", one, ["--instances"])):  # rows kept as columns
        a = get(name)
        params = a.fill({"instances": True} if flags else {})
        args = [name, *sources, *flags, "--format", "json"] + (["--top", str(top)] if top
                                                               else [])
        res = run_cli(*args)
        assert res.exit_code == 0, res.stderr
        cli = json.loads(res.stdout)
        report = ask(a, sources, None, params)
        out = contract.envelope(a, report, params, top)
        assert command_line_order([out]) == cli and out["rows"], name
        assert out["next_offset"] is None and out["offset"] == 0
        jsonschema.validate(out, contract.envelope_schema(a))
        everything = json.loads(run_cli(name, *sources, *flags, "-f", "json").stdout)
        totals = len(out.get("total_rows", []))
        assert totals == (len(sources) if name == "dominant" else 0)
        assert out["rows_total"] == len(everything) - totals
        if top:  # N rows (of each export), the whole-export rows besides
            assert len(out["rows"]) <= top * len(sources)
        assert out["rows_left_out"] == len(everything) - len(cli)
        if out["rows_left_out"]:
            assert "top=0" in out["notes"][0]
        assert set(out["units"]) <= set(out["columns"])
        pages = all_pages(a, report, params, top, page_bytes=20_000)
        paged += len(pages) > 1
        assert command_line_order(pages) == cli
        for page in pages:
            jsonschema.validate(page, contract.envelope_schema(a))
            text = json.dumps(page, separators=(",", ":"))
            assert len(text) + len(json.dumps(text)) <= 20_000 or len(page["rows"]) == 1
        if len(pages) > 1:
            assert f"offset={pages[1]['offset']}" in pages[0]["notes"][-1]
    assert paged >= (0 if top else 3)  # all rows: answers of several pages were tried


def test_an_offset_past_the_end_is_an_error_that_says_the_range():
    a = get("kernels")
    params = a.fill({})
    report = ask(a, [fixture_path("vecadd_t4_nsys2022.4.sqlite")], None, params)
    n = contract.envelope(a, report, params, 0)["rows_total"]
    with pytest.raises(contract.PastTheEnd, match=f"the answer has {n} rows"):
        contract.envelope(a, report, params, 0, n)
