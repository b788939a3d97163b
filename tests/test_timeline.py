"""The report's timeline picture costs what its pixels cost: each lane is binned to the
picture's resolution and drawn as one row of pixels, short NVTX ranges are merged, so a
window holding twenty times the operations draws the same artists, and the names that fit
are still written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.colors import to_rgba

from reports.page.plots import category_color
from reports.page.timeline import BINS, _bin_time, merge_runs, timeline_figure, timeline_panels
from reports.pipeline.session import Session
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
    return {"collections": len(ax.collections), "images": len(ax.images),
            "texts": len(ax.texts), "patches": len(ax.patches), "lines": len(ax.lines)}


def pixels(fig) -> dict[str, int]:
    """The lane image's pixels by colour (gemm, elementwise, none: transparent) and how
    many of the coloured ones are faint (a pixel idle for more than half its time)."""
    row = np.asarray(fig.axes[0].images[0].get_array())[0]
    colors = {"gemm": to_rgba(category_color("gemm")),
              "elementwise": to_rgba(category_color("elementwise"))}
    out = {name: int(np.all(np.isclose(row[:, :3], c[:3]), axis=1).sum())
           for name, c in colors.items()}
    out["none"] = int((row[:, 3] == 0).sum())
    out["faint"] = int(((row[:, 3] > 0) & (row[:, 3] < 1)).sum())
    return out


def test_timeline_artists_do_not_grow_with_the_window(tmp_path):
    small_panels, small = drawn(dense_export(tmp_path / "small.sqlite", 2_000))
    big_panels, big = drawn(dense_export(tmp_path / "big.sqlite", 40_000))
    # per panel: an image per lane, a collection per NVTX row (the long ranges; the short
    # ones, merged) and one for the gaps; the two long ranges' names and the idle gap's
    # length: the same for 2,000 and 40,000 kernels and ranges
    assert artists(small) == artists(big) == {
        "collections": 3, "images": 1, "texts": 3, "patches": 0, "lines": 0}
    assert [len(c.get_paths()) for c in big.axes[0].collections] == [2, 2, 1]
    assert [t.get_text() for t in small.axes[0].texts] == ["forward", "backward",
                                                          "idle 20.1 ms"]
    assert [t.get_text() for t in big.axes[0].texts] == ["forward", "backward", "idle 20 ms"]
    for panels, fig in ((small_panels, small), (big_panels, big)):
        p = panels[0]
        assert p.title == "pid 1, device 0: the whole span"
        # the lane: each category's time per bin, whatever the number of kernels: all of
        # their 240 ms (half the window, without the gap)
        [lane] = p.lanes
        assert (lane.label, lane.categories, lane.busy.shape) == (
            "stream 7", ["elementwise", "gemm"], (2, BINS))
        assert int(round(lane.busy.sum())) == 240_000_000
        # ... drawn as one row of the picture's pixels, in the categories' own colours (no
        # blends): as many gemm as elementwise (within 2%), none only in the idle gap (20 ms
        # of the window), pixels idle for more than half their time faint
        seen = pixels(fig)
        width = fig.axes[0].images[0].get_array().shape[1]
        assert 1_000 < width < 11 * 110
        assert seen["gemm"] + seen["elementwise"] + seen["none"] == width
        assert abs(seen["gemm"] - seen["elementwise"]) <= 0.02 * width
        assert abs(seen["none"] - 20_000_000 / (p.end - p.start) * width) <= 2
        assert 0 < seen["faint"] < width
        # the short ranges (under a bin wide, less than a bin apart): a run each side of
        # the gap; the long ones a bar each, with their names
        assert [(r.label, r.start.size, r.packed_start.size) for r in p.ranges] == [
            ("NVTX, main thread", 2, 0), ("", 0, 2)]
        assert [name for row in p.ranges for *_, name in row.names] == ["forward",
                                                                        "backward"]
    assert big_panels[0].gaps == [(240_997_000, 261_003_000)]


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


def test_bin_time_is_the_time_each_bin_is_covered():
    edges = np.array([0.0, 10.0, 20.0, 30.0])
    start = np.array([5, 12, 25], dtype=np.int64)
    end = np.array([15, 14, 40], dtype=np.int64)
    # [5,15] gives 5 to bin 0 and 5 to bin 1; [12,14] 2 to bin 1; [25,40] 5 to bin 2
    assert _bin_time(start, end, edges).tolist() == [5.0, 7.0, 5.0]


def test_busiest_second_is_the_window_whose_operations_start_the_most_time(monkeypatch):
    """``_busiest`` (a block of starts at a time) against a sweep over every start: the
    window of a second from the first start whose operations, by their start, take the most
    time (the earliest of equal ones), kept inside the span."""
    import reports.page.timeline as timeline

    rng = np.random.default_rng(7)
    start = rng.integers(0, 5_000_000_000, 400)
    end = start + rng.integers(0, 300_000_000, 400)
    start[:40] = start[40]  # equal starts, equal windows
    want_total, want_start = -1, None
    for s0 in sorted(start.tolist()):
        total = int((end - start)[(start >= s0) & (start < s0 + timeline.BUSIEST_NS)].sum())
        if total > want_total:
            want_total, want_start = total, s0
    w0 = min(want_start, int(end.max()) - timeline.BUSIEST_NS)
    for rows in (7, 1 << 20):
        monkeypatch.setattr(timeline, "ROWS", rows)
        assert timeline._busiest(start, end) == (w0, w0 + timeline.BUSIEST_NS)
