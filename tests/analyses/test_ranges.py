"""The NVTX range summary (``ranges``): against nsys's nvtxsum on every fixture, the GPU
columns on real exports, module ranges as a tree, ``--instances`` against nsys's nvtxgpuproj,
and ``--by device|process``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nsys_parsers.errors import MissingData
from reports.pipeline.ask import ask
from tests.conftest import CS336, KNOWN
from tests.nsys_stats import close, nsys_answer, nsys_stats


@pytest.mark.parametrize("name", KNOWN)
def test_ranges_match_nvtxsum(name, fx, nsys_bin, tmp_path):
    export = fx(name)
    ref = nsys_stats(nsys_bin, export, "nvtxsum", tmp_path)
    if ref is None:
        with pytest.raises(MissingData, match="--trace=nvtx"):
            ask("ranges", [export])
        return
    theirs = {(row["Range"], row["Style"]): row for row in ref}
    ours = {(r["range"], r["style"]): r for r in ask("ranges", [export]).rows}
    assert set(ours) == set(theirs)
    for key, row in theirs.items():
        o = ours[key]
        assert o["instances"] == int(row["Instances"]), key
        assert o["total_ns"] == int(row["Total Time (ns)"]), key
        assert (o["min_ns"], o["max_ns"]) == (int(row["Min (ns)"]), int(row["Max (ns)"])), key
        assert close(o["avg_ns"], row["Avg (ns)"]) and close(o["med_ns"], row["Med (ns)"]), key
        assert close(o["stddev_ns"], row["StdDev (ns)"]), key


def test_saxpy_domains_and_counts(fx):
    export = fx("pipit_saxpy_mpi_a100_nsys2022.2.sqlite")
    ranges = {r["range"]: r for r in ask("ranges", [export]).rows}
    assert set(ranges) == {"MPI:MPI_Init", "MPI:MPI_Send", "MPI:MPI_Recv", "MPI:MPI_Finalize",
                           "saxpy"}
    assert ranges["MPI:MPI_Send"]["instances"] == 10
    assert ranges["saxpy"]["kernel_instances"] == 5
    assert ranges["saxpy"]["gpu_inclusive_ns"] == 88573480


def test_centerformer_ranges_without_kernels(fx):
    rep = ask("ranges", [fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite")])
    top = rep.rows[0]
    assert (top["range"], top["instances"], top["total_ns"]) == ("find_centers", 304, 20566757184)
    assert all(r["kernel_instances"] == 0 for r in rep.rows)
    assert any("--trace=cuda" in n for n in rep.notes)


def test_module_ranges_in_tree_order_match_nvtxsum(nsys_bin, tmp_path, cli, monkeypatch):
    """Module ranges (``--nvtx modules``, synthetic GPU run) come as the module tree, each
    with its depth and parent, and their numbers are still nsys's; the table indents them."""
    from tests.synth import module_run

    export = module_run(tmp_path / "modules.sqlite")
    rows = ask("ranges", [export]).rows
    assert [(r["range"], r["depth"]) for r in rows[:6]] == [
        ("TinyLM", 1), ("TinyLM backward", 1), ("layers.0 (Block)", 3),
        ("layers.0 (Block) backward", 3), ("layers.0.attn (Attention)", 4),
        ("layers.0.attn (Attention) backward", 4)]
    assert [r["range"] for r in rows[-4:]] == ["embed (Embedding)", "embed (Embedding) backward",
                                               "step", "optimizer (AdamW)"]
    theirs = {(row["Range"], row["Style"]): row for row in
              nsys_stats(nsys_bin, export, "nvtxsum", tmp_path) or []}
    ours = {(r["range"], r["style"]): r for r in rows}
    assert set(ours) == set(theirs) and len(ours) == 28
    for key, row in theirs.items():
        assert ours[key]["instances"] == int(row["Instances"]), key
        assert ours[key]["total_ns"] == int(row["Total Time (ns)"]), key
    monkeypatch.setenv("COLUMNS", "120")
    out = [line.rstrip() for line in cli("ranges", export, "--top", "4").stdout.splitlines()]
    assert out[3].endswith("PushPop   TinyLM") and out[4].endswith("StartEnd  TinyLM backward")
    assert out[5].endswith("PushPop       layers.0 (Block)")
    assert "4 of 28 ranges" in out[7]


# -- ranges --instances: nsys's nvtxgpuproj ---------------------------------------------------

# nvtxgpuproj finds a range's parent through an R-tree whose coordinates are 32-bit floats
# (about 16 us apart at this trimmed capture's timestamps, ~1.55e11 ns): it misses enclosing
# ranges that start or end that close, and gives those ranges a shallower level. Our depth is
# checked against the enclosing ranges themselves there.
COARSE_LEVELS = {"fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"}


def _projection(row: dict) -> tuple:
    return (row["Name"], int(row["PID"]), int(row["TID"]), int(row["Orig Start (ns)"]),
            int(row["Orig Duration (ns)"]), int(row["Projected Start (ns)"]),
            int(row["Projected Duration (ns)"]), int(row["NumGPUOps"]))


@pytest.mark.parametrize("name", KNOWN + CS336)
def test_instances_match_nvtxgpuproj(name, fx, nsys_bin, tmp_path):
    export = fx(name)
    ref, reason = nsys_answer(nsys_bin, export, ["stats", "--report", "nvtxgpuproj"],
                              "nvtxgpuproj", tmp_path)
    if ref is None:
        if "NV Tools Extension" in reason:  # no NVTX: we say which trace records it
            with pytest.raises(MissingData, match="--trace=nvtx"):
                ask("ranges", [export], instances=True)
            return
        # NVTX but no CUDA API calls: every instance, none with a GPU projection
        assert "does not contain CUDA API data" in reason
        report = ask("ranges", [export], instances=True)
        assert report.rows and all(r["gpu_ops"] == 0 and r["gpu_start_ns"] is None
                                   for r in report.rows)
        assert any("--trace=cuda,nvtx" in n for n in report.notes)
        return
    rows = ask("ranges", [export], instances=True).rows
    projected = [r for r in rows if r["gpu_ops"]]
    ours = {(r["range"], r["pid"], r["tid"], r["start_ns"], r["duration_ns"], r["gpu_start_ns"],
             r["gpu_duration_ns"], r["gpu_ops"]): r["depth"] for r in projected}
    theirs = {_projection(r): int(r["Lvl"]) + 1 for r in ref}
    assert len(ours) == len(projected) and len(theirs) == len(ref)
    assert set(ours) == set(theirs)
    if name not in COARSE_LEVELS:
        assert ours == theirs
        return
    differ = [k for k in theirs if theirs[k] != ours[k]]
    assert differ and all(theirs[k] < ours[k] for k in differ)
    thread = np.array([(r["pid"], r["tid"]) for r in rows], dtype=np.int64)
    begin = np.array([r["start_ns"] for r in rows], dtype=np.int64)
    end = begin + np.array([r["duration_ns"] for r in rows], dtype=np.int64)
    for key in differ:  # as many ranges of the thread enclose it as our depth says
        _, pid, tid, start, dur = key[:5]
        enclosing = ((thread[:, 0] == pid) & (thread[:, 1] == tid) & (begin <= start)
                     & (end >= start + dur))
        assert int(enclosing.sum()) == ours[key], key


def test_forward_pass_on_the_gpu(fx):
    """The GPU-side answer to "does the forward time match what Python's timer measured?":
    each rank's forward pass made 730 launch calls, and their GPU work spans 0.6 ms less
    than the CPU range."""
    rows = ask("ranges", [fx("cs336_lizhieffe_ddp53_profile.sqlite")], instances=True,
               match=("forward pass",)).rows
    assert [(r["pid"], r["gpu_ops"], r["duration_ns"], r["gpu_duration_ns"]) for r in rows] \
        == [(13096, 730, 300983425, 300392537), (13097, 730, 328688525, 328109482)]


def test_instances_under_within_and_json_keys(fx, cli):
    import json

    res = cli("ranges", fx("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"), "--instances",
              "--within", "aten::conv2d, seq = 0", "-f", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert rows and list(rows[0]) == ["range", "style", "pid", "tid", "start_ns",
                                      "duration_ns", "gpu_start_ns", "gpu_duration_ns",
                                      "gpu_ops", "depth"]
    assert cli("ranges", fx("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"), "--instances",
               "--by", "device").exit_code == 1



def test_instance_rows_are_kept_as_columns_and_streamed_as_csv(fx, cli, monkeypatch):
    """One row per instance (millions at scale) is kept as columns: read as row dicts, and
    written as CSV and JSON a chunk at a time, the same text as from a list of dicts."""
    from reports.render import render_rows
    from reports.render.rows import ColumnRows
    from reports.render.writers import to_csv, to_json

    export = fx("cs336_lizhieffe_ddp53_profile.sqlite")
    report = ask("ranges", [export], instances=True)
    rows = report.rows
    assert isinstance(rows, ColumnRows)
    as_list = list(rows)
    assert len(rows) == len(as_list) == 774 and rows == as_list
    assert rows[0] == as_list[0] and rows[-1] == as_list[-1] and rows[5:8] == as_list[5:8]
    assert sum(r["gpu_ops"] for r in rows) == sum(r["gpu_ops"] for r in as_list) > 0
    res = cli("ranges", export, "--instances", "-f", "csv")
    monkeypatch.setattr(ColumnRows, "CHUNK", 7)  # chunks that do not divide the rows
    rendered = render_rows(rows, report.columns, "csv")
    assert rendered.text is None and rendered.chunks is not None
    text = "".join(rendered.chunks)
    assert text == to_csv(as_list, report.columns)
    assert res.exit_code == 0 and res.stdout == text
    rendered = render_rows(rows, report.columns, "json")
    assert rendered.text is None and rendered.chunks is not None
    text = "".join(rendered.chunks)
    assert text == to_json([{c: r.get(c) for c in report.columns} for r in as_list])
    assert json.loads(text)[-1]["gpu_ops"] == as_list[-1]["gpu_ops"]
    assert text == cli("ranges", export, "--instances", "-f", "json").stdout


def test_instances_and_pairs_the_same_a_few_ranges_at_a_time(fx, monkeypatch):
    """The pair search runs a chunk of ranges at a time, and ``--instances`` reduces each
    chunk as it comes: chunks of 7 ranges (none dividing the 774 instances, ranges of one
    step split across chunks) give the same pairs and the same rows as one chunk."""
    from nsys_parsers import attribution
    from nsys_parsers.nesting import nesting_depth
    from reports.pipeline.session import Session

    export = fx("cs336_lizhieffe_ddp53_profile.sqlite")
    with Session(export) as s:
        s.load("kernels", "launches", "ranges")
        k, r = s.trace.kernels, s.trace.ranges
        whole = attribution.pairs(k, r, chunk=len(r))
        chunked = list(attribution.pair_chunks(k, r, chunk=7))
        monkeypatch.setattr(attribution, "PIECE", 50)  # the chunks joined in pieces first
        pieces = attribution.pairs(k, r, chunk=7)
        depth = nesting_depth(r)
    assert pieces.range_idx.tolist() == np.concatenate([p.range_idx for p in chunked]).tolist()
    assert pieces.kernel_idx.tolist() == np.concatenate([p.kernel_idx for p in chunked]).tolist()
    assert len(chunked) > 50 and len(whole) == sum(len(p) for p in chunked) > 700
    assert all((p.range_idx // 7 == p.range_idx[0] // 7).all() for p in chunked)
    got = sorted(zip(np.concatenate([p.range_idx for p in chunked]).tolist(),
                     np.concatenate([p.kernel_idx for p in chunked]).tolist()))
    assert got == sorted(zip(whole.range_idx.tolist(), whole.kernel_idx.tolist()))
    # nesting depth against its definition: 1 + the ranges of its thread open at its start
    for i in range(0, len(r), 37):
        same = (r.tid == r.tid[i]) & (np.arange(len(r)) != i)
        before = (r.start < r.start[i]) | ((r.start == r.start[i]) & (
            (r.end > r.end[i]) | ((r.end == r.end[i]) & (np.arange(len(r)) < i))))
        assert depth[i] == 1 + int((same & before & (r.end > r.start[i])).sum()), i
    rows = ask("ranges", [export], instances=True).rows
    monkeypatch.setattr(attribution, "CHUNK", 7)
    again = ask("ranges", [export], instances=True).rows
    assert list(again) == list(rows) and sum(x["gpu_ops"] for x in rows) > 700

# -- ranges --by ----------------------------------------------------------------------------

def test_ranges_by_process_and_device(fx):
    export = fx("cs336_lizhieffe_ddp53_profile.sqlite")
    whole = {r["range"]: r for r in ask("ranges", [export]).rows}
    by_pid = ask("ranges", [export], by="process").rows
    assert {r["pid"] for r in by_pid} == {13096, 13097}
    for name, row in whole.items():  # each process's instances add up to the export's
        mine = [r for r in by_pid if r["range"] == name]
        assert sum(r["instances"] for r in mine) == row["instances"], name
        assert sum(r["total_ns"] for r in mine) == row["total_ns"], name
        assert sum(r["gpu_exclusive_ns"] for r in mine) == row["gpu_exclusive_ns"], name
    by_dev = ask("ranges", [export], by="device").rows
    fwd = {r["device"]: r for r in by_dev if r["range"] == "forward pass"}
    assert set(fwd) == {0, 1} and fwd[0]["gpu_inclusive_ns"] + fwd[1]["gpu_inclusive_ns"] \
        == whole["forward pass"]["gpu_inclusive_ns"]
    # the kernels' time by device adds up too, and instances without kernels have no device
    assert sum(r["gpu_exclusive_ns"] for r in by_dev) == sum(
        r["gpu_exclusive_ns"] for r in whole.values())
    assert all(r["kernel_instances"] == 0 for r in by_dev if r["device"] is None)


def test_statistics_a_block_at_a_time_equal_those_at_once(fx, monkeypatch):
    """``group_stats`` (sorted values, deviations), ``group_ids``, ``duration``, the
    ranges' GPU span and the items of ``nvtx-kernels`` go a block of rows at a time: with
    blocks of a few rows the answers on a real export are the same, and ``group_stats``
    equals per-group statistics computed in plain Python."""
    import statistics

    import nsys_parsers.arrays as arrays
    import reports.pipeline.report as report

    path = fx("fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite")
    at_once = {c: ask(c, [path], cache=False).rows for c in ("ranges", "nvtx-kernels")}
    import reports.analyses.nvtx_kernels as nvtx_kernels
    import reports.analyses.ranges as ranges_analysis

    monkeypatch.setattr(arrays, "ROWS", 7)
    monkeypatch.setattr(nvtx_kernels, "ROWS", 4)  # items: pairs, then loose kernels
    import nsys_parsers.cache as cache_mod
    import nsys_parsers.names as names_mod

    monkeypatch.setattr(cache_mod, "SCRATCH_BYTES", 0)  # derived columns in scratch files
    monkeypatch.setattr(names_mod, "ROWS", 9)
    monkeypatch.setattr(report, "ROWS", 5)
    monkeypatch.setattr(ranges_analysis, "ROWS", 3)  # the span: instances over blocks too
    assert {c: ask(c, [path], cache=False).rows for c in at_once} == at_once

    rng = np.random.default_rng(52)
    groups = rng.integers(0, 40, 3000) ** 2 % 37  # uneven groups, some empty
    values = rng.integers(-10**9, 10**12, 3000)
    st = report.group_stats(groups, values, 40)
    for g in range(40):
        v = sorted(values[groups == g].tolist())
        assert st.count[g] == len(v)
        if not v:
            assert (st.total[g], st.med[g], st.stddev[g]) == (0, 0.0, 0.0)
            continue
        assert (st.total[g], st.min[g], st.max[g]) == (sum(v), v[0], v[-1])
        assert st.med[g] == statistics.median(v)
        assert st.stddev[g] == pytest.approx(statistics.stdev(v) if len(v) > 1 else 0.0,
                                             rel=1e-12)



    code = rng.integers(-1, 30, 5000)  # runs_by_code, counted a block at a time
    keep = rng.random(code.size) < 0.8
    for ncodes in (25, 3):  # codes 25..29: in no run, as -1; 3 codes: fewer than a block
        for mask in (None, keep):
            order, bounds = arrays.runs_by_code(code, ncodes, keep=mask)
            want = [[i for i, x in enumerate(code.tolist())
                     if x == c and (mask is None or mask[i])] for c in range(ncodes)]
            assert order.tolist() == sum(want, [])
            assert [order[bounds[c]:bounds[c + 1]].tolist() for c in range(ncodes)] == want


def _depth_by_definition(start: list[int], end: list[int], tid: list[int]) -> list[int]:
    """Depth as nesting.py defines it, in plain Python: 1 + the ranges of its thread before
    it in (start, longest first, row) order - the ranges of its thread that ended by its
    start."""
    out = []
    for i in range(len(start)):
        same = [j for j in range(len(start)) if tid[j] == tid[i]]
        before = [j for j in same if (start[j], -end[j], j) < (start[i], -end[i], i)]
        out.append(1 + len(before) - sum(1 for j in same if end[j] <= start[i]))
    return out


def test_depth_and_instance_order_a_few_rows_at_a_time(fx, monkeypatch):
    """Nesting depth and the order of ``--instances`` (by start, ties by depth, then row) go
    a block of rows at a time, never sorting every row by two keys: with blocks of 1, 3 and
    7 rows, on built ranges full of ties (same starts, zero-length ranges, three threads),
    they equal the definition and ``np.lexsort``; on a real capture, blocks of 5 rows give
    the rows of one block."""
    from nsys_parsers import arrays, nesting
    from reports.analyses import ranges as ranges_mod

    class Spans:
        def __init__(self, start, end, tid):
            self.start, self.end, self.tid = (np.asarray(x, dtype=np.int64)
                                              for x in (start, end, tid))

        def __len__(self):
            return self.start.size

    rng = np.random.default_rng(7)
    for trial in range(60):
        n = int(rng.integers(1, 40))
        start = rng.integers(0, 10, n)
        end = start + rng.integers(0, 5, n)
        tid = rng.integers(1, 4, n) * 1000
        want = _depth_by_definition(start.tolist(), end.tolist(), tid.tolist())
        keep = rng.random(n) < 0.6
        rows = np.flatnonzero(keep)
        for block in (1, 3, 7):
            monkeypatch.setattr(nesting, "ROWS", block)
            monkeypatch.setattr(ranges_mod, "ROWS", block)
            monkeypatch.setattr(arrays, "ROWS", block)  # the buckets of the sorts
            monkeypatch.setattr(arrays, "SAMPLE", block + 1)
            depth = nesting.nesting_depth(Spans(start, end, tid))
            assert np.asarray(depth).tolist() == want, (trial, block)
            assert ranges_mod.by_start_then_depth(start, depth, None).tolist() == \
                np.lexsort((depth, start)).tolist()
            assert ranges_mod.by_start_then_depth(start, depth, keep).tolist() == \
                rows[np.lexsort((depth[rows], start[rows]))].tolist()
    monkeypatch.undo()
    for name in ("cs336_lizhieffe_ddp53_profile.sqlite",
                 "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"):
        whole = ask("ranges", [fx(name)], instances=True).rows
        as_list = list(whole)
        with monkeypatch.context() as mp:
            mp.setattr(nesting, "ROWS", 5)
            mp.setattr(ranges_mod, "ROWS", 5)
            mp.setattr(arrays, "ROWS", 5)
            again = list(ask("ranges", [fx(name)], instances=True).rows)
        assert again == as_list and sum(x["gpu_ops"] for x in as_list) > 700
        assert [x["start_ns"] for x in as_list] == sorted(x["start_ns"] for x in as_list)
