"""The analysis framework: the registry of declared analyses, one Session per export (each
column read once, views as new values), and the Python API (``reports.pipeline.ask``,
``Report.to_pandas``)."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_parsers.errors import BadOption
from nsys_parsers.reads import Reader
from reports.pipeline.ask import answer, ask
from reports.pipeline.registry import all_analyses, get
from reports.pipeline.session import Session

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"


def test_every_analysis_declares_itself_completely():
    """Each module of reports/analyses declares a name, help with a one-line summary,
    columns with units in their names, a view of those columns, and help for its
    parameters; names are unique."""
    names = [a.name for a in all_analyses()]
    assert len(names) == len(set(names))
    assert {"info", "kernels", "ranges", "nvtx-kernels", "dominant", "memops", "categories",
            "attention", "compare", "diff", "check"} <= set(names)
    for a in all_analyses():
        assert a.summary and len(a.summary) < 100, a.name
        assert a.columns and len(set(a.columns)) == len(a.columns), a.name
        if a.view is not None:
            assert set(a.view.columns) <= set(a.columns), a.name
        for p in a.params:
            assert p.help and p.flags, (a.name, p.name)
        for column in a.columns:
            assert not column.endswith(("_ms", "_us", "_sec")), (a.name, column)


@pytest.mark.parametrize("name", ["kernels", "ranges", "nvtx-kernels", "dominant", "memops",
                                  "info"])
def test_answers_have_the_declared_columns(name, fx):
    report = ask(name, [fx(DLPROF)])
    if report.obj is not None:
        assert list(report.obj) == get(name).columns
    else:
        assert report.columns == get(name).columns and report.rows
        assert all(list(r) == report.columns for r in report.rows)


def test_a_session_reads_each_column_once(fx, monkeypatch):
    """Five questions of one export: the kernels, launches, ranges and names are read from
    it once (here without a cache), then every answer comes from what the session holds."""
    reads: list[str] = []
    int_columns, text_column = Reader.int_columns, Reader.text_column
    monkeypatch.setattr(Reader, "int_columns", lambda self, sql, cols, chunks, files=None: (
        reads.append(sql.split("FROM ")[1].split()[0]),
        int_columns(self, sql, cols, chunks, files))[1])
    monkeypatch.setattr(Reader, "text_column", lambda self, sql, col, chunks: (
        reads.append("names"), text_column(self, sql, col, chunks))[1])
    with Session(fx(DLPROF), cache=False) as s:
        first = [answer(s, n).rows for n in ("ranges", "dominant", "nvtx-kernels", "kernels")]
        again = [answer(s, n).rows for n in ("ranges", "dominant", "nvtx-kernels", "kernels")]
    assert first == again
    assert sorted(reads) == sorted(['"NVTX_EVENTS"', "names", '"CUPTI_ACTIVITY_KIND_KERNEL"',
                                    '"CUPTI_ACTIVITY_KIND_RUNTIME"'])


def test_views_are_new_values(fx):
    """``within`` and merged operator names make new arrays: the trace's loaded columns are
    never changed, and another session of the same export answers as before."""
    export = fx(FASTVIDEO)
    plain = ask("ranges", [export]).rows
    with Session(export, within="aten::linear, op_id = 314300", merge_op_ids="on") as s:
        s.load("kernels", "launches", "ranges", "names")
        raw = s.trace.ranges
        assert raw is not None
        before = {f: getattr(raw, f).copy() for f in ("start", "end", "tid")}
        view = s.ranges
        assert view is not None and 0 < len(view) < len(raw)
        assert all(np.array_equal(getattr(raw, f), v) for f, v in before.items())
        names = s.trace.range_names()
        merged = s.names()
        assert len(merged.names) < len(names.names)
        assert len(s.trace.range_names().names) == len(names.names)
    assert ask("ranges", [export]).rows == plain


def test_the_python_api(fx):
    """One call for one answer (the analysis's own defaults: dominant merges operator calls
    when the names look like emit_nvtx); DataFrames with the report's columns."""
    export = fx(FASTVIDEO)
    dom = ask("dominant", [export])
    assert dom.rows[1]["range"] == "aten::linear"  # merged per operator, as the command does
    calls = ask("dominant", [export], merge_op_ids="off")
    assert "op_id" in (calls.rows[1]["range"] or "")
    df = ask("kernels", [export]).to_pandas()
    assert list(df.columns) == get("kernels").columns and len(df) == 41
    assert df["total_ns"].dtype.kind == "i" and df.attrs["title"] == "CUDA kernels"
    info = ask("info", [export]).to_pandas()
    assert info.loc[0, "kernel_count"] == 3442
    with pytest.raises(BadOption, match="closest: 'kernels'"):
        ask("kernel", [export])
    with pytest.raises(TypeError, match="no parameter"):
        ask("kernels", [export], range_names=["x"])
    with Session(export) as s:  # an analysis that reads no export ignores the session
        assert answer(s, "categories").rows == ask("categories", []).rows


def test_a_notebook_shows_a_report_as_a_table(fx):
    html = ask("memops", [fx("gtls_rtx3060_nsys2023.1.sqlite")])._repr_html_()
    assert html.startswith("<div>") and "memcpy Device-to-Device" in html


def test_every_caller_runs_every_hook(fx, tmp_path):
    """``ask`` runs the whole declaration for Python as the command line does: ``validate``
    before any export is read (check's rules file), ``outputs`` (the JUnit file) and the
    gate's ``exit_code``; several exports answer in one table with a ``config`` column."""
    from reports.analyses.check import BadRules

    bad = tmp_path / "bad.toml"
    bad.write_text("[[rule]]\nrange = 'forward'\n")  # no assertion
    with pytest.raises(BadRules, match="rule 1"):  # before the missing export is opened
        ask("check", [tmp_path / "missing.sqlite"], rules=bad)
    rules = tmp_path / "rules.toml"
    rules.write_text("[[rule]]\nname = 'gemm'\ndominant_category = 'gemm'\n\n"
                     "[[rule]]\nname = 'no such range'\nrange = 'nope'\nmin_instances = 1\n")
    junit = tmp_path / "check.xml"
    report = ask("check", [fx(FASTVIDEO)], rules=rules, junit=junit)
    assert [r["status"] for r in report.rows] == ["pass", "fail"]
    assert report.exit_code == 3 and junit.read_text().count("<testcase") == 2
    assert ask("kernels", [fx(FASTVIDEO)]).exit_code == 0
    both = ask("kernels", [fx(FASTVIDEO), fx(DLPROF)])
    one, other = ask("kernels", [fx(FASTVIDEO)]), ask("kernels", [fx(DLPROF)])
    assert both.columns == ["config", *one.columns]
    assert len(both.rows) == len(one.rows) + len(other.rows)
    assert {r["config"] for r in both.rows} == {FASTVIDEO[:-7], DLPROF[:-7]}
    assert both.title == "CUDA kernels, 2 exports"
    with pytest.raises(BadOption, match="is a folder"):
        ask("kernels", [tmp_path])


def test_the_memo_answers_the_next_question_from_what_it_loaded(fx, tmp_path):
    """Memo (what the MCP server and a notebook keep between questions): the next question
    about an export, whatever its options, answers from what is still loaded, with the answer
    of a fresh session; a changed file, a failed question, another name kind and a full pool
    load it again; the same export twice in one question leaks nothing."""
    import shutil

    from nsys_parsers.errors import NsysMineError
    from reports import Memo

    export = tmp_path / "run.sqlite"
    shutil.copyfile(fx(DLPROF), export)
    memo = Memo(exports=2, answers=0)
    for name in ("nvtx-kernels", "dominant", "ranges", "kernels", "nvtx-kernels"):
        assert memo.ask(name, [export]).rows == ask(name, [export]).rows, name
    merged = memo.ask("ranges", [export], merge_op_ids="on", depth=1)
    assert merged.rows == ask("ranges", [export], merge_op_ids="on", depth=1).rows != []
    assert memo.opened == 1 and memo.recalled == 0  # one load; no answer kept
    other = memo.ask("kernels", [export], name_kind="mangled")  # another load
    assert other.rows == ask("kernels", [export], name_kind="mangled").rows and memo.opened == 2
    # the file replaced by another capture: opened again, its answer
    before = memo.ask("kernels", [export]).rows
    shutil.copyfile(fx(FASTVIDEO), export)
    after = memo.ask("kernels", [export]).rows
    assert after == ask("kernels", [export]).rows != before and memo.opened == 3
    assert len(memo._traces) == 1  # both loads of the old file were closed
    # a question that fails closes its load; the next one opens it again
    with pytest.raises(NsysMineError):
        memo.ask("dominant", [export], within="no such range")
    assert memo.ask("gpus", [export]).rows == ask("gpus", [export]).rows
    assert memo.opened == 4
    # two exports and room for one: each question opens its export
    second = tmp_path / "second.sqlite"
    shutil.copyfile(fx(DLPROF), second)
    one = Memo(exports=1, answers=0)
    for path in (export, second, export):
        assert one.ask("kernels", [path]).rows == ask("kernels", [path]).rows
    assert one.opened == 3 and len(one._traces) == 1
    # the same export as both sides of a comparison
    assert one.ask("diff", [second, second]).rows == ask("diff", [second, second]).rows
    assert len(one._traces) == 1
    memo.close()
    one.close()
    assert not memo._traces and not one._traces


def test_the_memo_keeps_answers_while_nothing_they_read_changed(fx, tmp_path):
    """Memo(answers=N): the same question again is its kept answer, equal to a fresh one;
    another option or parameter, a changed export or a changed rules file is answered afresh;
    a big answer is not kept; questions a key cannot name (a job's exports) are not kept."""
    import shutil

    from reports import Memo

    export = tmp_path / "run.sqlite"
    shutil.copyfile(fx(DLPROF), export)
    memo = Memo(exports=2, answers=8)
    for name in ("nvtx-kernels", "dominant", "ranges", "kernels", "gpus", "gaps"):
        first = memo.ask(name, [export])
        again = memo.ask(name, [export])
        fresh = ask(name, [export])
        assert (again.rows, again.notes, again.title) == (fresh.rows, fresh.notes, fresh.title)
        assert again.rows == first.rows and again is not first
    assert memo.recalled == 6 and memo.opened == 1
    # another option, another parameter: answered (then kept)
    assert memo.ask("ranges", [export], depth=1).rows == ask("ranges", [export], depth=1).rows
    assert memo.ask("gaps", [export], min_gap_ms=0.5).rows == ask(
        "gaps", [export], min_gap_ms=0.5).rows
    assert memo.recalled == 6
    # a rules file is keyed by its state: edited, the answer changes
    rules = tmp_path / "rules.toml"
    rules.write_text("[[rule]]\npattern = 'gemm'\ncategory = 'other'\n")
    before = memo.ask("kernels", [export], rules=str(rules)).rows
    rules.write_text("[[rule]]\npattern = 'gemm'\ncategory = 'elementwise'\n")
    after = memo.ask("kernels", [export], rules=str(rules)).rows
    assert after == ask("kernels", [export], rules=rules).rows != before
    # the export replaced: its answers are not found any more
    shutil.copyfile(fx(FASTVIDEO), export)
    recalled = memo.recalled
    assert memo.ask("kernels", [export]).rows == ask("kernels", [export]).rows
    assert memo.recalled == recalled and memo.opened == 2
    # at most `answers` kept, and none of more than ANSWER_ROWS rows
    small = Memo(exports=1, answers=1)
    small.ANSWER_ROWS = 3
    small.ask("kernels", [export])
    small.ask("kernels", [export])
    assert small.recalled == 0 and not small._answers  # 41 rows: not kept
    small.ANSWER_ROWS = 10_000
    for name in ("kernels", "gpus", "kernels"):
        small.ask(name, [export])
    assert small.recalled == 0 and len(small._answers) == 1
    memo.close()
    small.close()
    assert not memo._answers
