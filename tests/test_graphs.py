"""CUDA graphs in the loaded trace: whole-graph launches as kernel rows, kernels recorded as
graph nodes, and where their graph or node was captured (``nsys_parsers.graphs``,
``Trace.capture_kernels``).

Verified on a real export: the whole-graph trace of the compile fixture (10 launches of graph 4,
creation records with negative timestamps, no NVTX). Node-level traces and capture-time
attribution are verified on exports built with the columns of NVIDIA's schema reference
(``tests.synth.compiled_run``): no shared fixture has them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nsys_parsers.graphs import creation_points, not_recorded_as_nodes
from reports.pipeline.ask import ask
from reports.pipeline.session import Session
from tests.synth import Synth, compiled_run, gpid, gtid

COMPILE = "cs336_zx3xyy_result_2_7B_compile_ro.sqlite"


def test_graph_launches_are_kernel_rows_of_the_compile_fixture(fx):
    """10 launches of graph 4 (7.81 s of GPU time) follow the 30 kernels of the kernel
    table, each with its cudaGraphLaunch call (same correlationId and process)."""
    with Session(fx(COMPILE)) as s:
        s.load("kernels", "kernel_ids", "launches")
        k = s.kernels
        assert k is not None and k.graph_launch is not None
        assert len(k) == 40 and int(k.graph_launch.sum()) == 10
        assert not k.graph_launch[:30].any() and k.graph_launch[30:].all()
        rows = np.flatnonzero(k.graph_launch)
        assert {k.names[c] for c in k.name_code[rows]} == {"CUDA graph 4"}
        assert int(k.duration[rows].sum()) == 7_811_141_695
        assert k.graph[rows].tolist() == [4] * 10 and (k.graph_node[rows] == -1).all()
        assert k.correlation[rows].tolist() == list(range(33, 322, 32))
        assert k.launch_start[rows][0] == 33_972_651 and k.launch_end[rows][0] == 34_168_093
        assert (k.launch_tid[rows] == 322_757_516_954_583).all()
        assert s.notes[0].startswith("10 CUDA graph launches (1 graph, 7.811 s of GPU time) "
                                     "count as kernels named `CUDA graph <id>`")


def test_capture_points_of_the_compile_fixture_precede_the_session(fx):
    """Graph 4 was created 2.97 s before the profiling session started (a negative
    timestamp in CUDA_GRAPH_EVENTS); its exec creation record is not its capture."""
    with Session(fx(COMPILE)) as s:
        view = s.trace.capture_kernels()
        assert view.graph_launch is not None and view.launch_start is not None
        rows = np.flatnonzero(view.graph_launch)
        assert (view.launch_start[rows] == -2_972_273_735).all()
        assert view.launch_start[0] == 33_792_016  # an eager kernel keeps its launch


def test_creation_points_follow_clones_to_their_original():
    rec = {"id": np.array([1, 2, 11, 12, 13, 21]), "original": np.array([-1, -1, 1, 2, 99, 11]),
           "tid": np.array([gtid(1, 1), gtid(1, 1), gtid(1, 2), gtid(1, 2), gtid(1, 2),
                            gtid(1, 3)]),
           "start": np.array([100, 200, 900, 901, 902, 950]),
           "end": np.array([110, 210, 900, 901, 902, 950])}
    pid = np.full(6, gpid(1))
    tid, start, end = creation_points(pid, np.array([11, 12, 13, 21, 7, -1]), rec)
    assert start.tolist() == [100, 200, -1, 100, -1, -1]  # 13: original 99 missing
    assert end.tolist() == [110, 210, -1, 110, -1, -1]
    assert tid.tolist()[:2] == [gtid(1, 1)] * 2
    # another process's node 11 is another node
    tid, start, _ = creation_points(np.array([gpid(2)]), np.array([11]), rec)
    assert start.tolist() == [-1]
    # a cycle of clones ends without a point
    cyc = {"id": np.array([1, 2]), "original": np.array([2, 1]), "tid": np.array([1, 1]),
           "start": np.array([5, 6]), "end": np.array([5, 6])}
    assert creation_points(np.array([0]), np.array([1]), cyc)[1].tolist() == [-1]


def test_a_launch_recorded_as_nodes_is_not_counted_twice():
    keep = not_recorded_as_nodes(np.array([5, 5, 6]), np.array([10, 11, 10]),
                                 np.array([5, 5, 7]), np.array([11, 11, 3]))
    assert keep.tolist() == [True, False, True]


def _rows(report):
    return {r["name"]: r for r in report.rows}


@pytest.mark.parametrize("graphs", ["node", "graph"])
def test_cache_gives_the_same_answers(tmp_path, graphs):
    export = compiled_run(tmp_path / f"{graphs}.sqlite", graphs=graphs)
    first = [ask(n, [export], graph_attribution=g).rows for n in ("dominant", "nvtx-kernels")
             for g in ("launch", "capture")]
    again = [ask(n, [export], graph_attribution=g).rows for n in ("dominant", "nvtx-kernels")
             for g in ("launch", "capture")]
    cold = [ask(n, [export], graph_attribution=g, cache=False).rows
            for n in ("dominant", "nvtx-kernels") for g in ("launch", "capture")]
    assert first == again == cold


def test_a_trace_of_graph_launches_only(tmp_path):
    """No kernel table at all: the graph launches are the kernels."""
    s = Synth(kernel_table=False)
    s.range("step", 0, 1_000)
    s.graph_launch(3, 500, 2_500, launch=(10, 20))
    s.graph_launch(3, 2_600, 4_600, launch=(1_100, 1_120))
    export = s.write(tmp_path / "graphs_only.sqlite")
    (row,) = ask("kernels", [export]).rows
    assert (row["name"], row["category"], row["instances"], row["total_ns"]) == (
        "CUDA graph 3", "cuda graph", 2, 4_000)
    dom = ask("dominant", [export]).rows
    assert [(r["range"], r["kernel"], r["instances"]) for r in dom] == [
        (None, "CUDA graph 3", 2), ("step", "CUDA graph 3", 1)]


def test_empty_graph_tables_change_nothing(tmp_path):
    """Graph tables present but empty (a real 2022.2 export has an empty CUDA_GRAPH_EVENTS):
    every answer is that of the same export without them."""
    def build(tables: bool) -> Path:
        s = Synth(graph_tables=tables)
        s.range("step", 0, 1_000)
        s.kernel("ampere_sgemm_128x64_tn", 100, 900, launch=(10, 20))
        return s.write(tmp_path / f"t{int(tables)}.sqlite")
    plain, empty = build(False), build(True)
    for name in ("kernels", "dominant", "ranges", "nvtx-kernels"):
        for mode in ("launch", "capture"):
            a = ask(name, [plain], graph_attribution=mode)
            b = ask(name, [empty], graph_attribution=mode)
            assert a.rows == b.rows and a.notes == b.notes, (name, mode)
            assert [n for n in b.notes if "graph" in n] == (
                ["--graph-attribution capture: this export has no kernels of CUDA graphs; "
                 "every kernel counts where it was launched."] if mode == "capture" else [])


def test_old_schema_node_records_give_the_same_capture_answer(tmp_path):
    """Before nsys 2023 the node creation records were in CUDA_GRAPH_EVENTS."""
    new = compiled_run(tmp_path / "new.sqlite")
    old = tmp_path / "old.sqlite"
    import sqlite3

    conn = sqlite3.connect(old)
    src = sqlite3.connect(new)
    src.backup(conn)
    src.close()
    with conn:
        conn.execute("DROP TABLE CUDA_GRAPH_EVENTS")
        conn.execute("ALTER TABLE CUDA_GRAPH_NODE_EVENTS RENAME TO CUDA_GRAPH_EVENTS")
    conn.close()
    a = ask("nvtx-kernels", [new], graph_attribution="capture").rows
    b = ask("nvtx-kernels", [old], graph_attribution="capture").rows
    assert a == b and any(r["range"] == "attention" for r in a)


def test_later_questions_of_one_session_see_the_columns_they_load(fx):
    """The report page asks one session `kernels` first, then per-device questions: the
    kernels (graph launches included) are built again with the id columns loaded later."""
    from reports.pipeline.ask import answer
    from reports.pipeline.session import Session

    with Session(fx(COMPILE)) as s:
        assert answer(s, "kernels").rows == ask("kernels", [fx(COMPILE)]).rows
        assert answer(s, "gpus").rows == ask("gpus", [fx(COMPILE)]).rows
        assert s.kernels is not None and s.kernels.stream is not None
