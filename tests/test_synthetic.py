"""Reader semantics on synthetic exports: each trap of real exports, with exact numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reports.pipeline.ask import answer, ask
from tests.synth import Synth


def rows_by(report, *keys):
    return {tuple(r[k] for k in keys): r for r in report.rows}


@pytest.fixture
def nested(tmp_path):
    """step > forward > attention, two steps; one kernel outside any range; one kernel
    without a launch row."""
    s = Synth()
    for t0 in (0, 10_000):
        s.range("step", t0, t0 + 9_000)
        s.range("forward", t0 + 100, t0 + 5_000)
        s.range("attention", t0 + 1_000, t0 + 2_000)
        s.kernel("gemm_a", t0 + 1_100, t0 + 1_600, launch=(t0 + 1_050, t0 + 1_080))
        s.kernel("softmax_k", t0 + 1_700, t0 + 1_800, launch=(t0 + 1_500, t0 + 1_520))
        s.kernel("gemm_a", t0 + 3_000, t0 + 3_900, launch=(t0 + 2_500, t0 + 2_550))
        s.kernel("adam_k", t0 + 6_000, t0 + 6_400, launch=(t0 + 5_500, t0 + 5_550))
    s.kernel("stray", 30_000, 30_050, launch=(29_000, 29_010))  # outside every range
    s.kernel("orphan", 31_000, 31_070, launch=None)  # trimmed: no launch row
    return s.write(tmp_path / "nested.sqlite")


def test_all_attribution_counts_every_enclosing_range(nested):
    rows = rows_by(ask("nvtx-kernels", [nested], attribution="all"), "range", "kernel")
    assert rows[("step", "gemm_a")]["kernel_instances"] == 4
    assert rows[("step", "gemm_a")]["total_ns"] == 2 * (500 + 900)
    assert rows[("forward", "gemm_a")]["range_instances"] == 2
    assert rows[("attention", "gemm_a")]["total_ns"] == 2 * 500
    assert rows[("attention", "softmax_k")]["total_ns"] == 200
    assert ("attention", "adam_k") not in rows
    assert rows[(None, "stray")]["pid"] == 1 and rows[(None, "stray")]["tid"] == 1
    assert rows[(None, "orphan")]["pid"] is None and rows[(None, "orphan")]["tid"] is None


def test_innermost_partitions_total_kernel_time(nested):
    inner = ask("nvtx-kernels", [nested], attribution="innermost")
    total = sum(r["total_ns"] for r in ask("kernels", [nested]).rows)
    assert sum(r["total_ns"] for r in inner.rows) == total == 2 * (500 + 100 + 900 + 400) + 50 + 70
    rows = rows_by(inner, "range", "kernel")
    assert rows[("attention", "gemm_a")]["total_ns"] == 1000
    assert rows[("forward", "gemm_a")]["total_ns"] == 1800
    assert rows[("step", "adam_k")]["total_ns"] == 800
    assert ("step", "gemm_a") not in rows


def test_range_summary_gpu_columns(nested):
    rows = rows_by(ask("ranges", [nested]), "range")
    step, fwd, attn = rows[("step",)], rows[("forward",)], rows[("attention",)]
    assert (step["instances"], step["total_ns"], step["min_ns"]) == (2, 18_000, 9_000)
    assert step["kernel_instances"] == 8
    assert step["gpu_inclusive_ns"] == 2 * (500 + 100 + 900 + 400)
    assert step["gpu_exclusive_ns"] == 800
    assert fwd["gpu_exclusive_ns"] == 1800 and attn["gpu_exclusive_ns"] == 1200
    # span: first kernel start to last kernel end in each instance
    assert step["gpu_span_ns"] == 2 * (6_400 - 1_100)
    assert attn["gpu_span_ns"] == 2 * (1_800 - 1_100)
    total = 2 * (500 + 100 + 900 + 400) + 50 + 70
    assert sum(r["gpu_exclusive_ns"] for r in rows.values()) + 50 + 70 == total


def test_kernels_in_range_and_dominant(nested):
    rows = rows_by(ask("kernels", [nested], range_name="forward"), "name")
    assert set(rows) == {("gemm_a",), ("softmax_k",)}
    assert rows[("gemm_a",)]["instances"] == 4 and rows[("gemm_a",)]["time_pct"] == 93.3
    dom = ask("dominant", [nested], merge_op_ids="off", range_names=["forward", "attention"])
    assert [r["range"] for r in dom.rows] == [None, "forward", "attention"]
    fwd = dom.rows[1]
    assert (fwd["kernel"], fwd["instances"], fwd["range_instances"]) == ("gemm_a", 4, 2)
    assert fwd["per_range_instance"] == 2.0 and fwd["share_pct"] == 93.3
    assert fwd["runner_up"] == "softmax_k" and fwd["runner_up_share_pct"] == 6.7
    assert dom.sentences[1] == "forward: gemm_a (gemm), 93.3% of GPU time, 2 calls per forward"
    inner = ask("dominant", [nested], merge_op_ids="off", range_names=["step"],
                attribution="innermost")
    assert inner.rows[1]["kernel"] == "adam_k" and inner.rows[1]["share_pct"] == 100.0


def test_duplicate_launch_rows_count_once(tmp_path):
    s = Synth()
    s.range("r", 0, 1_000)
    s.kernel("k", 100, 200, launch=(10, 50), duplicate=True)
    p = s.write(tmp_path / "dup.sqlite")
    row = ask("nvtx-kernels", [p]).rows[0]
    assert (row["range"], row["kernel_instances"], row["total_ns"]) == ("r", 1, 100)


def test_correlation_ids_repeat_across_processes(tmp_path):
    s = Synth()
    s.range("p1_range", 0, 1_000, pid=1, tid=1)
    s.range("p2_range", 0, 1_000, pid=2, tid=5)
    s.kernel("k1", 100, 200, launch=(10, 20), pid=1, tid=1, corr=7)
    s.kernel("k2", 100, 400, launch=(30, 40), pid=2, tid=5, corr=7)
    rows = rows_by(ask("nvtx-kernels", [s.write(tmp_path / "procs.sqlite")]),
                   "range", "kernel")
    assert set(rows) == {("p1_range", "k1"), ("p2_range", "k2")}
    assert rows[("p2_range", "k2")]["pid"] == 2 and rows[("p2_range", "k2")]["tid"] == 5


def test_launch_must_lie_inside_range_on_same_thread(tmp_path):
    s = Synth()
    s.range("r", 100, 200, tid=1)
    s.kernel("other_thread", 150, 160, launch=(120, 130), tid=2)
    s.kernel("straddles_end", 150, 160, launch=(190, 210), tid=1)
    s.kernel("inside", 500, 900, launch=(150, 160), tid=1)  # runs after the range: still in
    rows = rows_by(ask("nvtx-kernels", [s.write(tmp_path / "t.sqlite")]), "range", "kernel")
    assert ("r", "inside") in rows
    assert (None, "other_thread") in rows and (None, "straddles_end") in rows


def test_unclosed_range_ends_at_end_of_capture(tmp_path):
    """Deliberate difference: nsys ends an unclosed range at the last NVTX timestamp; we end it
    at the end of the capture (last kernel/launch/NVTX timestamp), so a launch after the last
    NVTX event still belongs to it."""
    s = Synth()
    s.range("open", 100, None)
    s.range("closed", 200, 300)
    s.kernel("late", 5_000, 6_000, launch=(4_000, 4_100))
    p = s.write(tmp_path / "open.sqlite")
    ranges = rows_by(ask("ranges", [p]), "range")
    assert ranges[("open",)]["total_ns"] == 6_000 - 100
    kernels = rows_by(ask("nvtx-kernels", [p]), "range", "kernel")
    assert kernels[("open", "late")]["total_ns"] == 1000
    assert any("never closed" in n for n in ask("ranges", [p]).notes)


def test_cross_thread_start_end_range_listed_not_attributed(tmp_path):
    s = Synth()
    s.range("async", 0, 1_000, etype=60, tid=1, end_tid=2)
    s.range("sync", 0, 1_000, etype=60, tid=1)
    s.kernel("k", 100, 200, launch=(10, 20), tid=1)
    p = s.write(tmp_path / "x.sqlite")
    ranges = rows_by(ask("ranges", [p]), "range")
    assert ranges[("async",)]["style"] == "StartEnd" and ranges[("async",)]["instances"] == 1
    assert ranges[("async",)]["kernel_instances"] == 0
    assert ranges[("sync",)]["kernel_instances"] == 1
    assert set(rows_by(ask("nvtx-kernels", [p]), "range")) == {("sync",)}


def test_domains_text_and_textid_names(tmp_path):
    s = Synth()
    s.domain(3, "MPI")
    s.range("MPI_Send", 0, 100, domain=3)
    s.range("plain", 0, 100, domain=0)
    s.range("same", 200, 300)
    s.range("same", 400, 500, inline=True)  # same name once via textId, once inline
    rows = rows_by(ask("ranges", [s.write(tmp_path / "d.sqlite")]), "range")
    assert set(rows) == {("MPI:MPI_Send",), ("plain",), ("same",)}
    assert rows[("same",)]["instances"] == 2


def test_domain_names_a_few_rows_at_a_time_equal_plain_sql(tmp_path, monkeypatch):
    """Range names in domains of two processes (one domain id in both, one created twice),
    by textId and inline, resolved a few ranges, text rows and sought rowids at a time (the
    text chunks' distinct names merged in chunk order as they come), equal a lookup in
    plain SQL: of every range (``ranges``), and of the ranges with kernels only, sought by
    rowid (``nvtx-kernels``)."""
    import sqlite3
    from collections import Counter

    import nsys_parsers.cache as cache_mod
    import nsys_parsers.names as names_mod
    import nsys_parsers.reads as reads_mod
    import nsys_parsers.trace as trace_mod

    s = Synth()
    s.domain(3, "MPI", pid=1, start=0)
    s.domain(3, "MPI again", pid=1, start=5)  # nsys takes the first creation
    s.domain(3, "NCCL", pid=2, start=1)  # the same id in another process
    s.domain(5, "io", pid=2, start=2)
    rng = np.random.default_rng(52)
    for i in range(90):
        pid = int(rng.integers(1, 3))
        domain = [0, 3, 3 if pid == 1 else 5][int(rng.integers(0, 3))]
        s.range(f"op{i % 7}", 100 * i, 100 * i + 90, pid=pid, domain=domain or None,
                inline=bool(i % 2))
        if i % 4 == 0:
            s.kernel(f"k{i % 3}", 100 * i + 10, 100 * i + 20,
                     launch=(100 * i + 1, 100 * i + 2), pid=pid)
    p = s.write(tmp_path / "dom.sqlite")
    with sqlite3.connect(p) as db:
        first = {}
        for did, pid, name in db.execute(
                "SELECT domainId, globalTid >> 24, text FROM NVTX_EVENTS WHERE eventType = 75 "
                "ORDER BY start"):
            first.setdefault((did, pid), name)
        named = {rowid: (f"{first[(did, pid)]}:{name}" if did else name, start)
                 for rowid, name, did, pid, start in db.execute(
                     "SELECT n.rowid, coalesce(t.value, n.text), coalesce(n.domainId, 0), "
                     "n.globalTid >> 24, n.start FROM NVTX_EVENTS AS n LEFT JOIN StringIds "
                     "AS t ON t.id = n.textId WHERE n.eventType = 59")}
        kernel_at = [a for (a,) in db.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    want = Counter(name for name, _ in named.values())
    with_kernels = {name for name, start in named.values()
                    if any(start <= t < start + 90 for t in kernel_at)}
    assert len(with_kernels) < len(want)  # some names sought, not all
    monkeypatch.setattr(names_mod, "ROWS", 4)
    monkeypatch.setattr(reads_mod, "TEXT_CHUNK_ROWS", 3)
    monkeypatch.setattr(trace_mod, "ROWID_CHUNK", 2)
    monkeypatch.setattr(cache_mod, "SCRATCH_BYTES", 0)  # the codes in scratch files
    seeks = []
    by_rowid = trace_mod.Trace._keys_by_rowid
    monkeypatch.setattr(trace_mod.Trace, "_keys_by_rowid", lambda self, rowids, found: (
        seeks.append(rowids.size), by_rowid(self, rowids, found))[1])
    got = Counter()
    for r in ask("ranges", [p], cache=False).rows:
        got[r["range"]] += r["instances"]
    assert got == want and seeks == []
    assert {r["range"] for r in ask("nvtx-kernels", [p], cache=False).rows} == with_kernels
    assert seeks == [23 + 4]  # the ranges with kernels and the domains, by rowid


def test_invalid_utf8_and_huge_names(tmp_path, cli):
    huge = "void k<" + "x" * 300_000 + ">()"
    s = Synth()
    s.range(b"r\xff\xfeange".decode("latin-1"), 0, 1_000)
    s.kernel(b"bad\xff\xfename", 100, 200, launch=(10, 20))
    s.kernel(huge, 300, 500, launch=(30, 40))
    p = s.write(tmp_path / "u.sqlite")
    names = {r["name"] for r in ask("kernels", [p]).rows}
    assert "bad\ufffd\ufffdname" in names and huge in names  # full name kept in data
    res = cli("kernels", p, "--format", "json")
    assert res.exit_code == 0
    assert {r["name"] for r in json.loads(res.stdout)} == names
    table = cli("kernels", p)
    assert table.exit_code == 0 and "void k<…>()" in table.stdout and len(table.stdout) < 5_000


def test_nested_same_name_ranges_follow_nsys_and_dedupe_elsewhere(tmp_path):
    s = Synth()
    s.range("block", 0, 1_000)
    s.range("block", 10, 900)
    s.kernel("k", 100, 300, launch=(50, 60))
    p = s.write(tmp_path / "same.sqlite")
    row = ask("nvtx-kernels", [p]).rows[0]
    # as nsys: one kernel, two range instances, its time counted in both
    assert (row["range_instances"], row["kernel_instances"], row["total_ns"]) == (2, 1, 400)
    assert ask("kernels", [p], range_name="block").rows[0]["total_ns"] == 200
    assert rows_by(ask("ranges", [p]), "range")[("block",)]["gpu_inclusive_ns"] == 200
    # the kernel counts once in the range name too
    dominant = ask("dominant", [p], merge_op_ids="off").rows[1]
    assert (dominant["range"], dominant["total_ns"], dominant["instances"]) == ("block", 200, 1)


def test_within_measure_leaves_warmup_out(tmp_path, cli):
    s = Synth()
    s.range("warmup", 0, 1_000)
    s.range("step", 10, 900)
    s.kernel("warm_k", 100, 150, launch=(20, 30))
    s.range("measure", 2_000, 5_000)
    for t0 in (2_000, 3_000):
        s.range("step", t0 + 10, t0 + 900)
        s.kernel("gemm", t0 + 100, t0 + 400, launch=(t0 + 20, t0 + 30))
    p = s.write(tmp_path / "w.sqlite")
    ranges = rows_by(ask("ranges", [p], within="measure"), "range")
    assert set(ranges) == {("measure",), ("step",)} and ranges[("step",)]["instances"] == 2
    assert [r["name"] for r in ask("kernels", [p], within="measure").rows] == ["gemm"]
    dom = ask("dominant", [p], within="measure", merge_op_ids="off", range_names=["step"])
    assert dom.rows[1]["per_range_instance"] == 1.0 and dom.rows[0]["instances"] == 2
    assert {r["range"] for r in ask("nvtx-kernels", [p], within="measure").rows} == {
        "measure", "step"}
    res = cli("ranges", p, "--within", "mesure")
    assert res.exit_code == 1 and "closest: 'measure'" in res.stderr


def test_merge_op_ids_aggregates_pytorch_calls(tmp_path, cli):
    s = Synth()
    s.range("aten::mm, seq = 1", 0, 100, inline=True)
    s.range("aten::mm, seq = 2, sizes = [[4, 8], [8, 8]]", 200, 300, inline=True)
    s.range("aten::mm, op_id = 77", 400, 500, inline=True)
    s.range("aten::add_, seq = 3", 600, 700, inline=True)
    for t in (0, 200, 400):
        s.kernel("gemm_k", t + 50, t + 90, launch=(t + 10, t + 20))
    s.kernel("add_k", 650, 660, launch=(610, 620))
    p = s.write(tmp_path / "ops.sqlite")
    ranges = rows_by(ask("ranges", [p], merge_op_ids=True), "range")
    assert set(ranges) == {("aten::mm",), ("aten::add_",)}
    mm = ranges[("aten::mm",)]
    assert mm["instances"] == 3 and mm["kernel_instances"] == 3
    dom = ask("dominant", [p], merge_op_ids=True, range_names=["aten::mm"])
    assert dom.rows[1]["per_range_instance"] == 1.0 and dom.rows[1]["instances"] == 3
    rows = rows_by(ask("nvtx-kernels", [p], merge_op_ids=True), "range", "kernel")
    assert rows[("aten::mm", "gemm_k")]["range_instances"] == 3
    assert len(ask("ranges", [p]).rows) == 4  # without the option, one row per call
    res = cli("dominant", p, "--merge-op-ids", "on", "--range", "aten::add_", "--format", "text")
    assert res.exit_code == 0 and "aten::add_: add_k" in res.stdout


def test_inline_names_with_any_character(tmp_path, monkeypatch):
    """Range names are read as JSON arrays of strings: a name may hold the old separator
    (\\x1f), quotes, backslashes, newlines, a control character or invalid UTF-8, whether
    every name is read (ranges) or only those of ranges with kernels (nvtx-kernels)."""
    import sqlite3

    odd = ["a\x1fb", 'say "hi"', "back\\slash", "two\nlines\ttab", "bell\x07", "été ∑ 注意",
           "plain"]
    s = Synth()
    for i, name in enumerate(odd):
        t = 1_000 * i
        s.range(name, t, t + 500, inline=True)
        if i % 2 == 0:
            s.kernel(f"k{i}", t + 200, t + 300, launch=(t + 10, t + 20))
    s.range("bad utf8 here", 20_000, 20_500, inline=True)
    s.kernel("kb", 20_200, 20_300, launch=(20_010, 20_020))
    idle = [f"idle {i}" for i in range(20)]  # ranges without kernels: nvtx-kernels then
    for i, name in enumerate(idle):  # seeks the names of the 5 ranges with kernels only
        s.range(name, 30_000 + 10 * i, 30_005 + 10 * i, inline=True)
    p = s.write(tmp_path / "odd.sqlite")
    with sqlite3.connect(p) as db:  # our own file: bytes no UTF-8 decoder accepts
        db.execute("UPDATE NVTX_EVENTS SET text = CAST(x'6261642075746638fffe' AS TEXT) "
                   "WHERE text = 'bad utf8 here'")
    bad = "bad utf8\ufffd\ufffd"
    from nsys_parsers.trace import Trace
    from reports.pipeline.session import Session

    seeks = []
    by_rowid = Trace._keys_by_rowid
    monkeypatch.setattr(Trace, "_keys_by_rowid", lambda self, rowids, found: (
        seeks.append(rowids.size), by_rowid(self, rowids, found))[1])
    with Session(p, cache=False) as a:
        got = {r["range"]: r["total_ns"] for r in answer(a, "nvtx-kernels").rows}
        assert got == {**{odd[i]: 100 for i in range(0, len(odd), 2)}, bad: 100}
        assert seeks == [5]  # only the names of the 5 ranges with kernels were read
        assert {r["range"] for r in answer(a, "ranges").rows} == {*odd, bad, *idle}
