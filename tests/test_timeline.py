"""The report's timeline picture costs what its pixels cost: kernels, NVTX ranges and gaps
are merged per lane and category at the picture's resolution, so a window holding ten times
the operations draws the same artists (and no more bars than there are bins), and the names
that fit are still written."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reports.page.timeline import BINS, merge_runs, timeline_figure, timeline_panels
from reports.session import Session
from tests.synth import Synth

GEMM = "ampere_sgemm_128x64_tn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
SPAN = 500_000_000  # ns: the whole span is the window (under a second)


def dense_export(path: Path, kernels: int) -> Path:
    """One process, one stream: ``kernels`` short kernels (gemm and elementwise in turn)
    spread over half a second, each launched inside its own short ``aten::`` range, under
    two long ranges (``forward``, ``backward``), with a 20 ms idle gap in the middle."""
    s = Synth()
    t0 = 1_000_000
    half = SPAN // 2
    s.range("forward", t0, t0 + half - 10_000_000)
    s.range("backward", t0 + half + 10_000_000, t0 + SPAN)
    every = (SPAN - 20_000_000) // kernels
    at = t0 + 1_000
    for i in range(kernels):
        if t0 + half - 10_000_000 <= at < t0 + half + 10_000_000:
            at = t0 + half + 10_000_000 + 1_000  # the gap: no kernel there
        s.range(f"aten::op{i % 7}", at, at + every // 2)
        s.kernel(GEMM if i % 2 else ELEMENTWISE, at + 2_000, at + 2_000 + every // 2,
                 launch=(at + 100, at + 500))
        at += every
    return s.write(path)


def drawn(path: Path) -> tuple[list, object]:
    with Session(path) as s:
        panels, left_out = timeline_panels(s)
    assert left_out == 0 and len(panels) == 1
    return panels, timeline_figure(panels)


def artists(fig) -> dict[str, int]:
    ax = fig.axes[0]
    return {"collections": len(ax.collections), "texts": len(ax.texts),
            "patches": len(ax.patches), "lines": len(ax.lines),
            "bars": sum(len(c.get_paths()) for c in ax.collections)}


def test_timeline_artists_do_not_grow_with_the_window(tmp_path):
    small_panels, small = drawn(dense_export(tmp_path / "small.sqlite", 2_000))
    big_panels, big = drawn(dense_export(tmp_path / "big.sqlite", 40_000))
    a, b = artists(small), artists(big)
    # a collection per NVTX row (the long ranges; the short ones, merged), per category of
    # the lane, and one for the gaps; the two long ranges' names and the idle gap's length
    assert {**a, "bars": 0} == {**b, "bars": 0} == {
        "collections": 5, "texts": 3, "patches": 0, "lines": 0, "bars": 0}
    # a bar per kernel where they lie at least a bin apart (2,000 kernels), a few merged
    # runs where they do not (40,000): never more than the bins
    assert a["bars"] == 2 + 2 + 2_000 + 1 and b["bars"] == 2 + 2 + 4 + 1
    assert [t.get_text() for t in small.axes[0].texts] == ["forward", "backward",
                                                          "idle 20.1 ms"]
    assert [t.get_text() for t in big.axes[0].texts] == ["forward", "backward", "idle 20 ms"]
    # what the panel holds: bounded by the bins, not by the 40,000 kernels and ranges
    p = big_panels[0]
    assert p.title == "pid 1, device 0: the whole span"
    assert [label for label, _ in p.lanes] == ["stream 7"]
    assert sorted(c for c, _, _ in p.lanes[0][1]) == ["elementwise", "gemm"]
    assert all(a.size == 2 for _, a, _ in p.lanes[0][1])  # one run each side of the gap
    # the short ranges (under a bin wide, less than a bin apart): a run each side of the gap
    assert [(r.label, r.start.size, r.packed_start.size) for r in p.ranges] == [
        ("NVTX, main thread", 2, 0), ("", 0, 2)]
    assert [name for row in p.ranges for *_, name in row.names] == ["forward", "backward"]
    assert p.gaps == [(240_997_000, 261_003_000)]
    assert sum(a.size for _, a, _ in small_panels[0].lanes[0][1]) == 2_000
    assert all(a.size <= BINS + 1 for _, a, _ in small_panels[0].lanes[0][1])


def test_merge_runs_merges_what_is_closer_than_the_gap_per_key():
    key = np.array([1, 0, 0, 0, 1, 0], dtype=np.int64)
    start = np.array([0, 0, 5, 30, 3, 12], dtype=np.int64)
    end = np.array([2, 4, 20, 31, 4, 13], dtype=np.int64)
    k, a, b = merge_runs(key, start, end, gap=2.0)
    # key 0: [0,4] and [5,20] (1 apart) and [12,13] inside -> [0,20]; [30,31] apart
    # key 1: [0,2] and [3,4] (1 apart) -> [0,4]
    assert k.tolist() == [0, 0, 1] and a.tolist() == [0, 30, 0] and b.tolist() == [20, 31, 4]
    k, a, b = merge_runs(key, start, end, gap=1.0)  # 1 apart is not closer than 1
    assert a.tolist() == [0, 5, 30, 0, 3] and b.tolist() == [4, 20, 31, 2, 4]
