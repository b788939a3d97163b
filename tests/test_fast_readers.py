"""The fast paths of the readers give the same answers as the plain ones: NVTX rows read
without their rowids (implied when a chunk has no gaps), grouping by several code columns,
factorizing names without pandas."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from nsys_parsers.arrays import factorize
from reports.analysis import ExportAnalysis
from reports.grouping import group_ids

FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"


def test_nvtx_rows_with_rowid_gaps_read_as_without(fx, tmp_path):
    gaps = tmp_path / "gaps.sqlite"
    shutil.copyfile(fx(FASTVIDEO), gaps)
    with sqlite3.connect(gaps) as db:  # our own copy: the fixture is never written
        db.execute("DELETE FROM NVTX_EVENTS WHERE rowid % 7 = 3")
    dense = tmp_path / "dense.sqlite"
    shutil.copyfile(gaps, dense)
    with sqlite3.connect(dense) as db:
        db.execute("VACUUM")  # renumbers the rowids: no gaps
        count, lo, hi = db.execute(
            "SELECT count(*), min(rowid), max(rowid) FROM NVTX_EVENTS").fetchone()
    assert hi - lo + 1 == count
    with ExportAnalysis(gaps, cache=False) as a, ExportAnalysis(dense, cache=False) as b:
        assert len(a.activity.ranges) == len(b.activity.ranges) == count
        assert a.nvtx_kernels().rows == b.nvtx_kernels().rows
        assert a.ranges().rows == b.ranges().rows
        assert len(a.ranges().rows) > 10_000


def test_group_ids_orders_groups_by_the_key_columns():
    rng = np.random.default_rng(1)
    cols = [rng.integers(-1, n, 50_000) for n in (3, 40_000, 7, 90)]  # 7.6e8 key space
    gid, values = group_ids(*cols)
    keys = np.stack(cols, axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    assert values[0].size == len(uniq)
    assert np.array_equal(gid, inv.ravel())  # the same ids as a lexicographic unique
    assert np.array_equal(np.stack(values, axis=1), uniq)  # each group's key values


def test_group_ids_dense_and_column_by_column_keys_agree_with_unique():
    """A small key space (ranked with a table), and one too large for one integer (> 2**62:
    the columns are combined one at a time), give the ids of a lexicographic unique."""
    rng = np.random.default_rng(3)
    for highs in ((5, 3, 4, 12), (2**40, 2**30, 5)):
        cols = [rng.integers(-1, n, 20_000) for n in highs]
        gid, values = group_ids(*cols)
        keys = np.stack(cols, axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        assert np.array_equal(gid, inv.ravel()), highs
        assert np.array_equal(np.stack(values, axis=1), uniq), highs


def test_group_ids_of_used_codes_constant_columns_and_gaps():
    """One column of codes 0..n-1, all used, is its own id (the column itself, no copy); a
    constant column keeps its value in every group; codes with gaps are ranked densely."""
    rng = np.random.default_rng(7)
    codes = rng.permutation(np.arange(50_000) % 700)
    same = np.full(codes.size, 1, dtype=np.int64)
    gid, (values, ones) = group_ids(codes, same)
    assert gid is codes and np.array_equal(values, np.arange(700))
    assert np.array_equal(ones, np.ones(700, dtype=np.int64))
    gid, (values,) = group_ids(codes * 3)  # gaps: 0, 3, 6, ...
    assert np.array_equal(values, np.arange(700) * 3) and np.array_equal(gid, codes)
    gid, (values, ones) = group_ids(np.full(10, -1), same[:10])  # all constant, one -1 group
    assert gid.tolist() == [0] * 10 and values.tolist() == [-1] and ones.tolist() == [1]


def test_sorted_unique_of_sorted_and_unsorted_values():
    from nsys_parsers.arrays import is_sorted, sorted_unique

    rng = np.random.default_rng(4)
    x = rng.integers(0, 1000, 10_000)
    ordered = np.sort(x)
    assert is_sorted(ordered) and not is_sorted(x) and is_sorted(x[:1])
    assert np.array_equal(sorted_unique(x), np.unique(x))
    assert np.array_equal(sorted_unique(ordered), np.unique(x))
    assert sorted_unique(ordered) is not ordered  # never a view the caller could change


def test_factorize_keeps_first_appearance_order():
    codes, uniq = factorize(["b", "a", "b", "", "a", "c"])
    assert uniq == ["b", "a", "", "c"]
    assert codes.tolist() == [0, 1, 0, 2, 1, 3]
    codes, uniq = factorize([])
    assert codes.size == 0 and uniq == []


def test_distinct_count_with_members_in_order_or_not():
    from reports.grouping import distinct_count

    rng = np.random.default_rng(2)
    member = np.sort(rng.integers(0, 5_000, 40_000))
    gid = rng.integers(0, 300, member.size)
    expected = np.zeros(300, dtype=np.int64)
    for g, _m in set(zip(gid.tolist(), member.tolist(), strict=True)):
        expected[g] += 1
    assert np.array_equal(distinct_count(gid, member, 300), expected)  # in order
    shuffle = rng.permutation(member.size)
    assert np.array_equal(distinct_count(gid[shuffle], member[shuffle], 300), expected)


def test_distinct_pairs_with_32_and_64_bit_keys():
    """Keys that fit 32 bits (members x groups < 2**32) and keys that do not give the same
    distinct pairs as a set, in member order, as int64."""
    from reports.grouping import distinct_pairs

    rng = np.random.default_rng(5)
    for members, groups in ((5_000, 300), (3_000_000, 2_000)):  # 1.5e6 and 6e9 keys
        member = rng.integers(0, members, 30_000)
        member[0] = members - 1  # the largest member sets the key width
        gid = rng.integers(0, groups, member.size)
        g, m = distinct_pairs(gid, member, groups)
        expected = sorted(set(zip(member.tolist(), gid.tolist(), strict=True)))
        assert list(zip(m.tolist(), g.tolist(), strict=True)) == expected
        assert g.dtype == m.dtype == np.int64


def test_distinct_pairs_in_any_order_are_the_same_set():
    """``ordered=False`` gives the same distinct pairs, as a multiset: with duplicates (split
    back from the sorted keys) and without (the input arrays, untouched)."""
    from reports.grouping import distinct_pairs

    rng = np.random.default_rng(6)
    for members, size in ((5_000, 30_000), (10**9, 1_000)):  # duplicates; every pair distinct
        member = rng.integers(0, members, size)
        gid = rng.integers(0, 300, size)
        g, m = distinct_pairs(gid, member, 300, ordered=False)
        expected = sorted(set(zip(member.tolist(), gid.tolist(), strict=True)))
        assert sorted(zip(m.tolist(), g.tolist(), strict=True)) == expected
        assert g.dtype == m.dtype == np.int64
    assert len(expected) == 1_000 and g is gid and m is member  # no copy when all distinct


def test_in_parallel_keeps_order_and_raises_the_first_error(monkeypatch):
    import reports.grouping as grouping

    for cpus in (1, 2):
        monkeypatch.setattr(grouping, "_cpus", lambda n=cpus: n)
        assert grouping.in_parallel(lambda: 1, lambda: np.arange(3).sum(), lambda: "c") == [
            1, 3, "c"]
        assert grouping.in_parallel() == []

        def bad() -> None:
            raise ValueError("second")

        with pytest.raises(ValueError, match="second"):
            grouping.in_parallel(lambda: 1, bad, lambda: 3)


def test_nvtx_flags_shortcut_equals_the_full_expression():
    """``f`` skips the cross-thread and domain terms on rows that have neither: every mix of
    endGlobalTid (NULL, same thread, other thread) and domainId (NULL, 0, 5, 2**39) gives the
    same value as the whole expression, with and without each optional column."""
    from nsys_parsers.activity_reads import nvtx_flags_sql
    from nsys_parsers.schema import NVTX_TABLE, Schema

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE NVTX_EVENTS (eventType INTEGER, globalTid INTEGER, "
               "endGlobalTid INTEGER, domainId INTEGER)")
    rows = [(et, 7, end_tid, dom) for et in (33, 59, 60, 75) for end_tid in (None, 7, 8)
            for dom in (None, 0, 5, 2**39)]
    db.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?)", rows)
    for cols in (("endGlobalTid", "domainId"), ("endGlobalTid",), ("domainId",), ()):
        schema = Schema(tables={NVTX_TABLE: ("eventType", "globalTid", *cols)})
        cross = ("e.endGlobalTid IS NOT NULL AND e.endGlobalTid != e.globalTid"
                 if "endGlobalTid" in cols else "0")
        domain = "ifnull(e.domainId, 0)" if "domainId" in cols else "0"
        full = f"e.eventType + 256 * ({cross}) + 512 * ({domain} & 1099511627775)"
        got = db.execute(f"SELECT {nvtx_flags_sql(schema)}, {full} "
                         "FROM NVTX_EVENTS AS e").fetchall()
        assert [a for a, _ in got] == [b for _, b in got], cols
        crossed = [a for a, _ in got if a & 256]
        assert len(crossed) == (4 * 4 if "endGlobalTid" in cols else 0), cols
        assert {a >> 9 for a, _ in got} == ({0, 5, 2**39} if "domainId" in cols else {0}), cols


def test_integer_columns_read_as_json_arrays_keep_every_value():
    """``int_columns`` reads each column as one JSON array: int64 extremes, the -1 sentinel
    and an empty chunk come back exactly, in row order."""
    from nsys_parsers.fetch import int_columns

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    values = [(2**63 - 1, -1), (-(2**63), 0), (1_700_000_000_123_456_789, None), (7, 2**40)]
    db.executemany("INSERT INTO t VALUES (?, ?)", values)
    sql = "SELECT a, ifnull(b, -1) AS b FROM t WHERE rowid >= :lo AND rowid < :hi"
    a, b = int_columns(db, sql, ["a", "b"], {"lo": 1, "hi": 5})
    assert a.dtype == np.int64 and a.tolist() == [v for v, _ in values]
    assert b.tolist() == [-1, 0, -1, 2**40]
    empty = int_columns(db, sql, ["a", "b"], {"lo": 9, "hi": 12})
    assert [x.size for x in empty] == [0, 0] and empty[0].dtype == np.int64


DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"


@pytest.mark.parametrize("fixture", [FASTVIDEO, DLPROF])
@pytest.mark.parametrize("attribution", ["all", "innermost"])
def test_names_read_while_the_pairs_are_computed(fixture, attribution, fx, tmp_path,
                                                 monkeypatch):
    """nvtx-kernels starts the one scan of every name key before the attribution when most
    ranges launch kernels (a share estimated on a sample); the rows equal those of reading
    only the names of the ranges with kernels, afterwards, with and without the cache, and
    the cache then holds every name (a later `ranges` reads none)."""
    import reports.analysis as analysis
    from nsys_parsers.attribution import launching_share

    with ExportAnalysis(fx(fixture), cache=False) as a:
        expected = a.nvtx_kernels(attribution=attribution).rows
        share = launching_share(a.activity.kernels, a.activity.ranges)
        exact = np.unique(a.pairs("all").range_idx).size / len(a.activity.ranges)
        assert abs(share - exact) < 0.05
    started = []
    real = analysis.PendingKeys

    def spy(export):
        started.append(export)
        return real(export)

    monkeypatch.setattr(analysis, "FULL_SCAN_SHARE", 0.0)  # every export: read meanwhile
    monkeypatch.setattr(analysis, "PendingKeys", spy)
    with ExportAnalysis(fx(fixture), cache=False) as a:
        assert a.nvtx_kernels(attribution=attribution).rows == expected
    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(tmp_path / "cache"))
    with ExportAnalysis(fx(fixture)) as a:
        assert a.nvtx_kernels(attribution=attribution).rows == expected
    assert len(started) == 2
    with ExportAnalysis(fx(fixture)) as a:  # warm: names and pairs from the cache
        assert a.nvtx_kernels(attribution=attribution).rows == expected
        assert a.ranges().rows
    assert len(started) == 2


def test_names_not_asked_for_stop_the_scan(fx, monkeypatch):
    """A scan started for names that are then not asked for is stopped and its threads
    joined when the analysis closes."""
    import reports.analysis as analysis

    monkeypatch.setattr(analysis, "FULL_SCAN_SHARE", 0.0)
    a = ExportAnalysis(fx(FASTVIDEO), cache=False)
    a.pairs("all", names_next=True)
    keys = a._keys
    assert keys is not None
    a.close()
    assert a._keys is None
    assert all(f.done() for f in keys._futures)


def test_reader_runs_jobs_returns_errors_and_cancels(fx):
    """The reader's own small pool (no concurrent.futures): every job runs once on a
    connection of its thread, an error comes back from result(), a job no thread has taken
    can be cancelled, and close() reads what is queued, then ends the threads."""
    import threading

    from nsys_parsers.reader import Reader

    gate = threading.Event()
    seen: list[int] = []

    def job(i):
        def run(conn: sqlite3.Connection) -> int:
            if i == 0:
                gate.wait(10)
            seen.append(i)
            return conn.execute("SELECT ?", (i,)).fetchone()[0]
        return run

    def boom(conn: sqlite3.Connection) -> None:
        raise ValueError("bad chunk")

    rd = Reader(fx(DLPROF), workers=1)
    jobs = [rd.submit(job(i)) for i in range(4)]
    failing = rd.submit(boom)
    assert jobs[2].cancel() and jobs[2].done()
    gate.set()
    assert [jobs[i].result() for i in (0, 1, 3)] == [0, 1, 3]
    with pytest.raises(ValueError, match="bad chunk"):
        failing.result()
    with pytest.raises(RuntimeError, match="cancelled"):
        jobs[2].result()
    assert not jobs[0].cancel()
    late = rd.submit(job(5))
    rd.close()
    assert late.done() and late.result() == 5 and seen == [0, 1, 3, 5]
    assert not any(t.is_alive() for t in rd._threads)


def _reference_innermost(range_idx, kernel_idx, start, end):
    """Per kernel, the range that starts last, then ends first, then has the highest index
    (plain Python, in kernel order)."""
    best: dict[int, tuple] = {}
    for r, k in zip(range_idx.tolist(), kernel_idx.tolist()):
        key = (start[r], -end[r], r)
        if k not in best or key > best[k]:
            best[k] = key
    kernels = sorted(best)
    return [best[k][2] for k in kernels], kernels


@pytest.mark.parametrize("seed", range(6))
def test_innermost_picks_the_deepest_range_with_every_tie_broken(seed):
    """innermost (three passes of ufunc.at) against a plain reference on random pairs whose
    ranges often share a start, or a start and an end (a range pushed inside another at the
    same timestamp): the latest start wins, then the earliest end, then the highest index."""
    from nsys_parsers.attribution import Pairs, innermost
    from nsys_parsers.ranges import RangeData

    rng = np.random.default_rng(seed)
    n_ranges, n_kernels, n_pairs = 300, 200, 2000
    start = rng.integers(0, 20, n_ranges) * 10  # few distinct starts: many ties
    end = start + rng.integers(1, 4, n_ranges) * 5  # few distinct lengths: ties in end too
    zeros = np.zeros(n_ranges, dtype=np.int64)
    ranges = RangeData(start=start, end=end, tid=zeros, pushpop=zeros.astype(bool),
                       cross_thread=zeros.astype(bool), unclosed=zeros.astype(bool),
                       rowid=np.arange(n_ranges), domain=zeros,
                       domains=np.zeros((0, 4), dtype=np.int64),
                       all_is_domain=zeros.astype(bool))
    pairs = np.unique(np.stack([rng.integers(0, n_ranges, n_pairs),
                                rng.integers(0, n_kernels, n_pairs)], axis=1), axis=0)
    order = np.lexsort((pairs[:, 1], pairs[:, 0]))  # range by range, as attribution gives
    p = Pairs(range_idx=pairs[order, 0], kernel_idx=pairs[order, 1])
    got = innermost(p, ranges)
    want_r, want_k = _reference_innermost(p.range_idx, p.kernel_idx, start.tolist(),
                                          end.tolist())
    assert got.kernel_idx.tolist() == want_k
    assert got.range_idx.tolist() == want_r
    assert innermost(Pairs(range_idx=p.range_idx[:0], kernel_idx=p.kernel_idx[:0]),
                     ranges).range_idx.size == 0
