"""Columns taken as a stream (``Resolver.chunks``, ``Reader.int_chunks``, ``cache.Stream``,
``kernels.LaunchThreads``): what ``gaps`` reads every API call and NVTX range through, a few
chunks at a time. The stream gives exactly the columns a whole read gives, fills the cache
as it passes (and only when it passes to the end), comes from the cache the next time, and
finds each operation's launch thread as the whole launch join does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nsys_parsers.cache import MANIFEST, ColumnCache
from nsys_parsers.export import open_export
from nsys_parsers.ids import global_pid
from nsys_parsers.items import NVTX
from nsys_parsers.kernels import LaunchThreads, join_launches
from nsys_parsers.reads import Reader, rowid_chunks
from nsys_parsers.trace import Trace
from reports.pipeline.ask import answer
from reports.pipeline.session import Session

FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
GTLS = "gtls_rtx3060_nsys2023.1.sqlite"  # cuLaunchKernel and cudaLaunchKernel, 5,105 memcpys
KMEANS = "kmeans_openacc_rtx3080_hpcsdk21.2.sqlite"  # the oldest schema with API calls
SAXPY = "pipit_saxpy_mpi_a100_nsys2022.2.sqlite"  # every launch twice, one correlationId
COMPILE = "cs336_zx3xyy_result_2_7B_compile_ro.sqlite"  # whole-graph traces
DDP = "cs336_lizhieffe_ddp53_profile.sqlite"
API = ("api.start", "api.end", "api.tid", "api.correlation", "api.name_id")
NVTX_ITEMS = tuple(f"nvtx.{k}" for k in NVTX)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(d))
    return d


def whole(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The columns as one read of the export gives them (no cache)."""
    with open_export(path) as export:
        t = Trace(export, cache=False)
        try:
            t.resolver.get(*names)
            return {n: np.array(t.resolver.array(n)) for n in names}
        finally:
            t.close()


def streamed(path: Path, names: tuple[str, ...], rows: int, cache: bool = True
             ) -> dict[str, np.ndarray]:
    with open_export(path) as export:
        t = Trace(export, cache=cache)
        try:
            parts = list(t.resolver.chunks(names, rows))
        finally:
            t.close()
    assert all(p[names[0]].size <= rows for p in parts)
    return {n: np.concatenate([p[n] for p in parts]) if parts else np.zeros(0, np.int64)
            for n in names}


def manifest_items(cache_dir: Path) -> dict[str, dict]:
    found = list(cache_dir.glob(f"*/{MANIFEST}"))
    return json.loads(found[0].read_text())["items"] if found else {}


@pytest.mark.parametrize(("name", "names"), [(FASTVIDEO, NVTX_ITEMS), (GTLS, API),
                                             (KMEANS, API)])
def test_a_stream_gives_the_columns_of_a_whole_read_and_fills_the_cache(
        cache_dir, fx, monkeypatch, name, names):
    path = fx(name)
    expected = whole(path, names)
    assert expected[names[0]].size > 100
    got = streamed(path, names, rows=100)
    for n in names:
        np.testing.assert_array_equal(got[n], expected[n])
    stored = manifest_items(cache_dir)
    assert set(names) <= set(stored)
    assert {stored[n]["shape"][0] for n in names} == {expected[names[0]].size}

    # the next stream comes from the cache, in slices, with no read of the export
    def refuse(*args, **kwargs):
        raise AssertionError("read the export")
    monkeypatch.setattr(Reader, "int_chunks", refuse)
    again = streamed(path, names, rows=777)
    for n in names:
        np.testing.assert_array_equal(again[n], expected[n])
    # and a whole read of them too
    with open_export(path) as export:
        entry = ColumnCache.for_export(export)
        assert entry is not None
        for n in names:
            item = entry.get(n)
            assert item is not None
            np.testing.assert_array_equal(item.array, expected[n])


def test_a_stream_given_up_leaves_no_item_and_no_file(cache_dir, fx):
    path = fx(FASTVIDEO)
    with open_export(path) as export:
        t = Trace(export)
        try:
            stream = t.resolver.chunks(NVTX_ITEMS, 1000)
            next(stream)
            stream.close()
            t.resolver.get("kernel.start")  # an item written the usual way, for the entry
        finally:
            t.close()
    assert not set(NVTX_ITEMS) & set(manifest_items(cache_dir))
    assert not [f for f in cache_dir.glob("*/nvtx.*")]


def test_a_damaged_streamed_item_is_read_again(cache_dir, fx):
    path = fx(FASTVIDEO)
    expected = whole(path, NVTX_ITEMS)
    streamed(path, NVTX_ITEMS, rows=4096)
    (f,) = cache_dir.glob("*/nvtx.start.*.npy")
    data = bytearray(f.read_bytes())
    data[-3] ^= 0x10
    f.write_bytes(bytes(data))
    got = streamed(path, NVTX_ITEMS, rows=4096)
    np.testing.assert_array_equal(got["nvtx.start"], expected["nvtx.start"])


def test_a_stream_reads_few_chunks_ahead(fx, monkeypatch):
    """Memory holds the chunk handed out and at most two read ahead, never the table."""
    path = fx(FASTVIDEO)
    submitted = []
    real = Reader.submit
    monkeypatch.setattr(Reader, "submit",
                        lambda self, job: submitted.append(1) or real(self, job))
    with open_export(path) as export:
        t = Trace(export, cache=False)
        submitted.clear()  # the trace's extents job (nsys_parsers.completeness): not a chunk
        try:
            chunks = len(rowid_chunks(export.db, "NVTX_EVENTS", 256))
            handed = 0
            for _ in t.resolver.chunks(NVTX_ITEMS, 256):
                handed += 1
                assert len(submitted) - handed <= 2
        finally:
            t.close()
    assert handed == chunks > 10


def _narrowest_call_threads(pid: list, corr: list, api) -> list[int]:
    """Per operation, the thread of the narrowest call with its (process, correlationId),
    the first of equally narrow ones; -1: none (a dictionary, not the library's sort)."""
    best: dict[tuple[int, int], tuple[int, int, int]] = {}
    for row, (start, end, tid, c) in enumerate(zip(api.start.tolist(), api.end.tolist(),
                                                   api.tid.tolist(),
                                                   api.correlation.tolist())):
        key = (int(global_pid(np.array([tid]))[0]), c)
        if key not in best or (end - start, row) < best[key][:2]:
            best[key] = (end - start, row, tid)
    return [best[(p, c)][2] if c >= 0 and (p, c) in best else -1
            for p, c in zip(np.concatenate(pid).tolist(), np.concatenate(corr).tolist())]


@pytest.mark.parametrize("name", [SAXPY, FASTVIDEO, GTLS, COMPILE, DDP])
@pytest.mark.parametrize("rows", [7, 100_000])
def test_launch_threads_of_a_stream_equal_the_narrowest_calls(fx, name, rows, monkeypatch):
    """For every operation (kernels, graph launches, memcpy, memset), the narrowest call with
    its correlationId in its process, the first of equally narrow ones (SAXPY records each
    launch twice with one id), whatever the chunks and the blocks its keys are built in: the
    stream, the whole launch join (kernels' and memory operations' launch columns) and a
    dictionary of the calls agree."""
    monkeypatch.setattr("nsys_parsers.kernels.ROWS", rows)
    path = fx(name)
    with Session(path, cache=False) as s:
        s.load("kernels", "launch_ids", "launches", "memops", "api")
        k, m, api = s.trace.kernels, s.trace.memops, s.trace.api
        assert api is not None
        pid, corr, joined = [], [], []
        if k is not None:
            pid.append(k.pid)
            corr.append(k.correlation)
            joined.append(k.launch_tid)
        if m is not None:
            pid.append(m.pid)
            corr.append(m.correlation)
            joined.append(join_launches(m.pid, m.correlation, api.start, api.end,
                                        api.tid, api.correlation)[0])
        threads = LaunchThreads(pid, corr)
        for a in range(0, len(api.start), rows):
            part = slice(a, a + rows)
            threads.add(api.start[part], api.end[part], api.tid[part], api.correlation[part])
        want = _narrowest_call_threads(pid, corr, api)
    assert threads.found.tolist() == want
    assert np.concatenate(joined).tolist() == want
    assert any(t >= 0 for t in want)


def test_gaps_leave_the_columns_the_next_question_reads_in_the_cache(cache_dir, fx,
                                                                     monkeypatch):
    path = fx(DDP)
    with Session(path) as s:
        first = answer(s, "gaps").rows
    stored = manifest_items(cache_dir)
    assert set(NVTX_ITEMS) | set(API) <= set(stored)

    def refuse(*args, **kwargs):
        raise AssertionError("read the export")
    for method in ("int_chunks", "int_columns"):
        monkeypatch.setattr(Reader, method, refuse)
    with Session(path) as s:
        assert answer(s, "gaps").rows == first
