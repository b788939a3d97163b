"""The column cache (nsys_parsers.cache): same answers cold and warm, a later question reads
what an earlier one stored, nothing written beside the export, and a damaged, stale or
foreign item ignored and read again, never trusted."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from nsys_parsers import cache
from nsys_parsers.cache import MANIFEST, ColumnCache, Item, cache_root, digest, evict
from nsys_parsers.export import open_export
from nsys_parsers.reads import Reader
from reports.pipeline.ask import answer
from reports.pipeline.session import Session

FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(d))
    return d


@pytest.fixture
def export_copy(tmp_path, fx) -> Path:
    src = fx(FASTVIDEO)
    folder = tmp_path / "artifacts"
    folder.mkdir()
    dst = folder / src.name
    shutil.copyfile(src, dst)
    return dst


def answers(path: Path, **options) -> dict[str, list[dict]]:
    with Session(path, **options) as s:
        return {"kernels": answer(s, "kernels").rows, "ranges": answer(s, "ranges").rows,
                "nvtx_kernels": answer(s, "nvtx-kernels").rows,
                "innermost": answer(s, "nvtx-kernels", attribution="innermost").rows,
                "dominant": answer(s, "dominant").rows, "memops": answer(s, "memops").rows}


def items(cache_dir: Path) -> dict[str, dict]:
    """The items of the one entry under ``cache_dir``, from its manifest."""
    (manifest,) = cache_dir.glob(f"*/{MANIFEST}")
    return json.loads(manifest.read_text())["items"]


def entry_of(path: Path) -> ColumnCache:
    with open_export(path) as export:
        entry = ColumnCache.for_export(export)
    assert entry is not None
    return entry


@pytest.fixture
def no_export_reads(monkeypatch):
    """Fail any chunked read of the export from here on."""
    def refuse(*args, **kwargs):
        raise AssertionError("read the export")

    def arm() -> None:
        monkeypatch.setattr(Reader, "int_columns", refuse)
        monkeypatch.setattr(Reader, "int_chunks", refuse)
        monkeypatch.setattr(Reader, "text_column", refuse)
    return arm


def test_warm_answers_equal_cold_ones_and_come_from_the_cache(cache_dir, export_copy,
                                                              no_export_reads):
    cold = answers(export_copy, cache=False)
    assert not cache_dir.exists()  # --no-cache writes nothing
    first = answers(export_copy)
    stored = items(cache_dir)
    assert {"kernel.start", "kernel.end", "kernel.name_code.demangledName", "kernel.pid",
            "kernel.launch_tid", "nvtx.start", "nvtx.flags", "nvtx.names", "pairs.all.range",
            "pairs.innermost.kernel", "memcpy.bytes"} <= set(stored)
    no_export_reads()
    warm = answers(export_copy)
    assert first == cold and warm == cold
    assert len(cold["nvtx_kernels"]) == 2677 and len(cold["ranges"]) == 16582


def test_questions_in_any_order_and_one_at_a_time(cache_dir, export_copy):
    """Each question in its own session, as on the command line: names resolved for one
    report (only the ranges with kernels) are completed by the next that needs them all."""
    cold = answers(export_copy, cache=False)
    for _ in range(2):
        with Session(export_copy) as s:
            assert answer(s, "nvtx-kernels").rows == cold["nvtx_kernels"]
        stored = items(cache_dir)  # all names once `ranges` read them, else those sought
        assert min(stored.get("nvtx.names", stored.get("nvtx.names.sought"))["shape"]) > 0
        with Session(export_copy) as s:
            assert answer(s, "ranges").rows == cold["ranges"]
        with Session(export_copy, within="aten::linear, op_id = 314300") as s:
            answer(s, "ranges")
        with Session(export_copy) as s:
            assert answer(s, "dominant").rows == cold["dominant"]
            assert answer(s, "kernels").rows == cold["kernels"]


def test_the_kernel_summary_reads_only_its_own_columns(cache_dir, export_copy,
                                                       no_export_reads):
    """The kernel summary alone reads start, end and name of the kernels; after an NVTX
    question it reads nothing from the export."""
    with Session(export_copy) as s:
        first = answer(s, "kernels").rows
    # (and the extents every answer checks the trace's completeness with: four small scans)
    assert set(items(cache_dir)) == {"kernel.start", "kernel.end",
                                     "kernel.name_code.demangledName", "trace_extent"}
    with Session(export_copy) as s:
        answer(s, "nvtx-kernels")
    no_export_reads()
    with Session(export_copy) as s:
        assert answer(s, "kernels").rows == first and len(first) == 41


@pytest.mark.parametrize("name_kind", ["short", "mangled"])
def test_each_name_kind_has_its_own_names(cache_dir, export_copy, name_kind):
    with Session(export_copy, cache=False, name_kind=name_kind) as s:
        fresh = answer(s, "kernels")
    with Session(export_copy) as s:
        answer(s, "nvtx-kernels")
    with Session(export_copy, name_kind=name_kind) as s:
        after = answer(s, "kernels")
    assert (after.rows, after.notes) == (fresh.rows, fresh.notes)
    assert len(after.rows) == {"mangled": 41, "short": 15}[name_kind]
    column = {"short": "shortName", "mangled": "mangledName"}[name_kind]
    assert f"kernel.name_code.{column}" in items(cache_dir)


def test_nothing_is_written_beside_a_read_only_export(cache_dir, export_copy):
    folder = export_copy.parent
    before = sorted(p.name for p in folder.iterdir())
    export_copy.chmod(0o444)
    folder.chmod(0o555)
    try:
        cold = answers(export_copy)
        warm = answers(export_copy)
    finally:
        folder.chmod(0o755)
    assert sorted(p.name for p in folder.iterdir()) == before
    assert warm == cold and items(cache_dir)
    assert all(cache_dir in p.parents for p in cache_dir.rglob("*.npy"))


@pytest.mark.parametrize("damage", ["flip a data byte", "truncate", "zero the header",
                                    "empty file", "another item's file", "strings"])
def test_a_damaged_item_is_ignored_and_read_again(cache_dir, export_copy, damage):
    cold = answers(export_copy, cache=False)
    answers(export_copy)
    stored = items(cache_dir)
    entry = entry_of(export_copy)
    name = "nvtx.names" if damage == "strings" else "nvtx.start"
    path = entry.dir / stored[name]["strings" if damage == "strings" else "file"]
    data = bytearray(path.read_bytes())
    if damage in ("flip a data byte", "strings"):
        data[-100] ^= 0x40
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "zero the header":
        data[:64] = bytes(64)
    elif damage == "empty file":
        data = bytearray()
    else:
        data = bytearray((entry.dir / stored["nvtx.end"]["file"]).read_bytes())
    path.write_bytes(bytes(data))
    assert entry.get(name) is None  # never trusted
    assert answers(export_copy) == cold
    assert entry.get(name) is not None  # stored again by the run that could not use it
    assert answers(export_copy) == cold


def test_a_changed_export_gets_a_new_entry(cache_dir, export_copy, fx):
    answers(export_copy)
    old = set(cache_dir.iterdir())
    # another export at the same path, with the same modification time
    stat = export_copy.stat()
    shutil.copyfile(fx(DLPROF), export_copy)
    os.utime(export_copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    fresh = answers(fx(DLPROF), cache=False)
    assert answers(export_copy) == fresh
    assert len(set(cache_dir.iterdir()) - old) == 1


def test_the_items_of_another_export_are_not_used(cache_dir, export_copy, fx):
    """A manifest copied into another export's entry names its own export: ignored."""
    answers(export_copy)
    other = cache_dir.parent / "dlprof.sqlite"
    shutil.copyfile(fx(DLPROF), other)
    fresh = answers(other, cache=False)
    answers(other)
    mine, theirs = entry_of(export_copy), entry_of(other)
    for f in mine.dir.iterdir():
        shutil.copyfile(f, theirs.dir / f.name)
    assert theirs.get("kernel.start") is None
    assert answers(other) == fresh


def test_an_unwritable_cache_folder_only_means_no_cache(tmp_path, monkeypatch, export_copy):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(blocker / "cache"))
    assert answers(export_copy) == answers(export_copy, cache=False)


def test_least_recently_used_entries_are_evicted(tmp_path):
    root = tmp_path / "cache"
    big = np.arange(100_000, dtype=np.int64)  # 800 kB
    entries = []
    for i in range(3):
        entry = ColumnCache({"export": i}, root=root, limit_bytes=10**9)
        entry.put({"x": Item(big)})
        entries.append(entry)
        os.utime(entry.dir, (1000 + i, 1000 + i))
    assert entries[0].get("x") is not None  # used now: the most recent
    removed = evict(root, 2 * big.nbytes + 10_000)
    assert removed == [entries[1].dir]
    assert entries[1].get("x") is None and entries[2].get("x") is not None
    # writing past the limit evicts on the way, never the entry being written
    small = ColumnCache({"export": 9}, root=root, limit_bytes=big.nbytes + 10_000)
    small.put({"x": Item(big)})
    assert sorted(p.name for p in root.iterdir()) == [small.dir.name]
    got = small.get("x")
    assert got is not None and np.array_equal(got.array, big)
    # an entry alone larger than the bound stays while it is used, and goes first after
    alone = ColumnCache({"export": 10}, root=root, limit_bytes=big.nbytes // 2)
    alone.put({"x": Item(big[: big.size // 3])})
    alone.put({"y": Item(big[: big.size // 3])})
    assert sorted(p.name for p in root.iterdir()) == [alone.dir.name]
    assert alone.get("x") is not None and alone.get("y") is not None
    os.utime(alone.dir, (2000, 2000))
    other = ColumnCache({"export": 11}, root=root, limit_bytes=big.nbytes // 2)
    other.put({"x": Item(big[:10])})
    assert sorted(p.name for p in root.iterdir()) == [other.dir.name]


def test_the_checksum_goes_a_part_at_a_time_with_the_same_result(tmp_path, monkeypatch):
    """The sum mod 2**64 and the XOR of the 64-bit words, summed a few words at a time over
    a mapped item (its pages let go after each part), equal those of the whole bytes
    computed in plain Python, a partial last word padded with zeros."""
    rng = np.random.default_rng(5)
    data = rng.integers(0, 2**63, size=1001, dtype=np.int64).tobytes() + b"\x07\x01\xff"
    path = tmp_path / "x.bin"
    path.write_bytes(data)
    padded = data + bytes(-len(data) % 8)
    words = [int.from_bytes(padded[i:i + 8], "little") for i in range(0, len(padded), 8)]
    xor = 0
    for w in words:
        xor ^= w
    expected = [sum(words) % 2**64, xor]
    monkeypatch.setattr(cache, "DIGEST_WORDS", 7)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    assert digest(mapped) == expected
    assert digest(data) == expected
    assert digest(np.frombuffer(data, dtype=np.uint8)) == expected


def test_merged_range_codes_go_to_a_scratch_file_and_leave_nothing(tmp_path, monkeypatch):
    """The merged names' code of every range, when large, is written a block at a time to
    an unlinked file in the cache folder (its pages the file's, let go): the same values as
    a gather in plain Python, -1 kept; no file is left behind."""
    import nsys_parsers.arrays as arrays
    import nsys_parsers.names as names

    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(cache, "SCRATCH_BYTES", 0)
    monkeypatch.setattr(names, "ROWS", 4)
    rng = np.random.default_rng(7)
    strings = [f"aten::mm, seq = {i % 5}" if i % 3 else f"step {i % 2}" for i in range(40)]
    code = rng.integers(-1, 40, 1003)
    merged = names.RangeNames(code=code, names=strings).merged_op_ids()
    assert isinstance(merged.code, np.memmap) and merged.code.dtype == np.int32
    plain = [strings[c].split(",")[0] if c >= 0 else None for c in code.tolist()]
    assert [merged.names[c] if c >= 0 else None for c in merged.code.tolist()] == plain
    assert list((tmp_path / "c").iterdir()) == []  # unlinked from the start
    arrays.let_go(merged.code)  # its pages go; the values stay in the file
    assert [merged.names[c] if c >= 0 else None for c in merged.code.tolist()] == plain


def test_scratch_items_are_written_in_parts_and_read_back_exactly(tmp_path, monkeypatch):
    """An item held in a scratch file (``held``) is written to the cache and checksummed in
    one pass, a few words at a time (its pages let go as they pass), as ``np.load`` reads
    it: dtype, shape, values."""
    import nsys_parsers.arrays as arrays

    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(cache, "SCRATCH_BYTES", 0)
    monkeypatch.setattr(cache, "DIGEST_WORDS", 3)
    entry = ColumnCache({"export": "s"}, root=tmp_path / "c")
    want = {"i32": np.arange(-5, 1_000, dtype=np.int32), "b": np.arange(77) % 3 == 0,
            "m": np.arange(60, dtype=np.int64).reshape(20, 3)}
    items = {}
    for k, v in want.items():
        h = cache.held(v.size, v.dtype).reshape(v.shape)
        h[...] = v
        assert isinstance(h, np.memmap)
        items[k] = Item(h, None, {})
    parts = []

    def let_go(view):
        parts.append((isinstance(view, np.memmap), view.nbytes))
        arrays.let_go(view)
    monkeypatch.setattr(cache, "let_go", let_go)
    kept = entry.keep(items)
    # the file and its checksum in one pass, 3 words of the mapping at a time
    assert all(mapped and n <= 24 for mapped, n in parts)
    assert len(parts) == sum(-(-v.nbytes // 24) for v in want.values())
    for k, v in want.items():
        got = entry.get(k)
        assert got is not None and got.array.dtype == v.dtype and got.array.shape == v.shape
        assert got.array.tolist() == v.tolist() and kept[k].tolist() == v.tolist()


def test_a_sort_into_a_scratch_file_goes_a_bucket_at_a_time(tmp_path, monkeypatch):
    """``sorted_blocks`` sorts values given a block at a time into a scratch file by
    buckets: equal to ``np.sort`` with blocks of 1 to 8 values, few or many sampled, runs of
    one value longer than a bucket, values near the int64 limits, one value. A bucket is
    sorted and let go on its own: about a block's values, not all of them."""
    import nsys_parsers.arrays as arrays

    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(cache, "SCRATCH_BYTES", 0)
    rng = np.random.default_rng(3)
    cases = [rng.integers(-50, 50, 200), np.r_[np.full(40, 7), rng.integers(0, 9, 30)],
             np.array([5]), rng.integers(-2**62, 2**62, 97)]
    real, sizes = arrays.let_go, []

    def let_go(view):
        sizes.append(view.size)
        real(view)
    monkeypatch.setattr(arrays, "let_go", let_go)
    for values in cases:
        for rows in (1, 3, 8):
            for sample in (rows + 1, 1 << 16):
                monkeypatch.setattr(arrays, "ROWS", rows)
                monkeypatch.setattr(arrays, "SAMPLE", sample)
                sizes.clear()
                got = arrays.sorted_blocks(
                    values.size, lambda a, v=values, r=rows: v[a:a + r].copy(), np.int64,
                    alloc=cache.held)
                assert isinstance(got, np.memmap)
                assert got.tolist() == np.sort(values).tolist(), (values.size, rows)
                buckets = sizes[-(len(sizes) - -(-values.size // rows)):]
                assert sum(buckets) == values.size
                if values is cases[0] and sample > rows == 8:  # all sampled: a few blocks
                    assert max(buckets) <= 4 * rows


def test_items_round_trip_exactly(tmp_path):
    entry = ColumnCache({"export": "k"}, root=tmp_path)
    arrays = {"i": np.array([-1, 0, 2**62], dtype=np.int64), "b": np.array([True, False]),
              "empty": np.zeros(0, dtype=np.int64), "m": np.arange(12).reshape(3, 4)}
    names = ["aten::mm, seq = 7", "", "d\u00e9j\u00e0 \x1f sep", "a" * 5000]
    entry.put({k: Item(v, names if k == "i" else None, {"n": 3}) for k, v in arrays.items()})
    for k, v in arrays.items():
        got = entry.get(k)
        assert got is not None and got.meta == {"n": 3}
        assert got.strings == (names if k == "i" else None)
        assert got.array.dtype == v.dtype and np.array_equal(got.array, v)
        assert not got.array.flags.writeable  # loaded data is never modified


def test_every_byte_of_an_item_is_checked(tmp_path):
    """A change to any byte of an item's file is seen: in the array data (its checksum,
    arrays whose length is not a multiple of 8 bytes included) or in the header (dtype and
    shape)."""
    entry = ColumnCache({"export": "x"}, root=tmp_path)
    for name, array in {"a": np.arange(3, dtype=np.int64), "b": np.arange(5, dtype=np.uint8),
                        "c": np.array([True, False, True])}.items():
        entry.put({name: Item(array)})
        path = entry.dir / json.loads((entry.dir / MANIFEST).read_text())["items"][name]["file"]
        data = path.read_bytes()
        assert np.array_equal(entry.get(name).array, array)
        for i in range(len(data)):
            damaged = bytearray(data)
            damaged[i] ^= 0x01 if i % 2 else 0x80
            path.write_bytes(bytes(damaged))
            got = entry.get(name)
            assert got is None or np.array_equal(got.array, array), f"byte {i} of {name}"
        path.write_bytes(data)


def test_loaded_arrays_outlive_a_rewrite_of_their_item(tmp_path):
    """Items are mapped, not copied: an item written again or evicted while its array is in
    use leaves that array as it was; an empty file is no item."""
    entry = ColumnCache({"export": "m"}, root=tmp_path)
    entry.put({"x": Item(np.arange(1000, dtype=np.int64))})
    old = entry.get("x")
    assert old is not None
    entry.put({"x": Item(np.full(1000, 7, dtype=np.int64))})
    assert np.array_equal(entry.get("x").array, np.full(1000, 7))
    assert len(list(entry.dir.glob("*.npy"))) == 1  # the old file went with its item
    evict(tmp_path, 0)
    assert entry.get("x") is None
    assert np.array_equal(old.array, np.arange(1000))


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x"
    monkeypatch.delenv("NSYS_MINE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "nsys-mine" / "columns"


def test_no_cache_on_the_command_line_writes_nothing(cli, cache_dir, export_copy):
    off = cli("nvtx-kernels", str(export_copy), "--no-cache", "-f", "csv")
    assert off.exit_code == 0 and not cache_dir.exists()
    on = cli("nvtx-kernels", str(export_copy), "-f", "csv")
    warm = cli("nvtx-kernels", str(export_copy), "-f", "csv")
    assert on.stdout == off.stdout == warm.stdout and items(cache_dir)


def _mapped_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
            inside = len(head) >= 6 and head[5] == str(path)
        elif inside and head and head[0] == "Rss:":
            total += int(head[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux /proc")
def test_a_mapped_item_passed_leaves_the_processs_memory(tmp_path):
    """``let_go``: the pages of a mapped item read past no longer count in the process's
    resident memory, its values read again are the same, and an array in memory is left
    alone (MADV_DONTNEED on anonymous memory would zero it)."""
    from nsys_parsers.arrays import let_go

    values = np.arange(4 << 20, dtype=np.int64)  # 32 MiB
    path = tmp_path / "item.npy"
    np.save(path, values)
    mapped = np.load(path, mmap_mode="r")
    expected = int(values.sum())
    assert int(mapped.sum()) == expected
    assert _mapped_kib(path) >= 30 * 1024
    let_go(mapped[: values.size // 2])  # the first half passed
    assert 14 * 1024 <= _mapped_kib(path) <= 18 * 1024 + 8
    let_go(mapped)
    assert _mapped_kib(path) <= 8  # at most the header's and an edge's page
    assert int(mapped.sum()) == expected  # mapped again from the page cache
    held = values.copy()
    let_go(held)
    assert int(held.sum()) == expected
    written = np.load(path, mmap_mode="c")  # copy-on-write: what was written stays
    written[:] = 7
    let_go(written)
    assert int(written.sum()) == 7 * values.size


SAXPY = "pipit_saxpy_mpi_a100_nsys2022.2.sqlite"  # an NVTX row the query leaves out (type 39)


@pytest.mark.parametrize("name", [FASTVIDEO, SAXPY])
def test_cold_columns_are_read_into_the_cache_not_into_memory(cache_dir, fx, name):
    """A cold question writes the columns it reads (those always cached) straight into
    their cache files, chunk by chunk, and answers from them mapped: the same values as
    plain SQL (rows the query leaves out closed up), items the next question finds, and
    the same answer as without a cache."""
    import sqlite3

    path = fx(name)
    with Session(path) as s:
        cold = answer(s, "ranges").rows
        arrays = {n: s.trace.resolver.array(f"nvtx.{n}") for n in ("start", "rowid")}
        assert all(isinstance(a, np.memmap) and Path(a.filename).parent.parent == cache_dir
                   for a in arrays.values())
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    want = db.execute("SELECT rowid, start FROM NVTX_EVENTS WHERE eventType IN "
                      "(59, 60, 70, 71, 75)").fetchall()
    db.close()
    got = sorted(zip(arrays["rowid"].tolist(), arrays["start"].tolist()))
    assert got == sorted(want)
    stored = json.loads(next(cache_dir.glob(f"*/{MANIFEST}")).read_text())["items"]
    assert {"nvtx.start", "nvtx.end", "nvtx.tid", "nvtx.flags", "nvtx.rowid"} <= set(stored)
    with Session(path, cache=False) as s:
        assert answer(s, "ranges").rows == cold
    with Session(path) as s:  # from the cache: the files' checksums hold
        assert answer(s, "ranges").rows == cold
        assert s.trace.resolver.cache.get("nvtx.start") is not None


@pytest.mark.parametrize("fail", ["reserve", "write"])
def test_a_column_file_that_fails_is_read_into_memory(cache_dir, export_copy, monkeypatch,
                                                       fail):
    """A full disk (the space cannot be reserved, or a write fails): the column is read into
    memory instead, the answer is the same, and no item is left of the failed file."""
    import nsys_parsers.cache as cache_module

    with Session(export_copy, cache=False) as s:
        expected = answer(s, "nvtx-kernels").rows

    def refuse(*args, **kwargs):
        raise OSError(28, "No space left on device")
    real_os = cache_module.os
    fake = type("FakeOs", (), {})()
    for attr in dir(real_os):
        if not attr.startswith("__"):
            setattr(fake, attr, getattr(real_os, attr))
    setattr(fake, "posix_fallocate" if fail == "reserve" else "pwrite", refuse)
    monkeypatch.setattr(cache_module, "os", fake)
    with Session(export_copy) as s:
        assert answer(s, "nvtx-kernels").rows == expected
        assert not isinstance(s.trace.resolver.array("nvtx.start"), np.memmap)
    monkeypatch.setattr(cache_module, "os", real_os)
    entry = next(cache_dir.glob("*/"))
    stored = json.loads((entry / MANIFEST).read_text())["items"]
    named = {e["file"] for e in stored.values()}
    assert {p.name for p in entry.glob("nvtx.start.*")} <= named  # no file left behind


def test_what_is_derived_is_held_mapped_and_inputs_go_after_their_last_use(
        cache_dir, export_copy, monkeypatch):
    """A cold question writes each large item it derives to the cache as soon as it is
    made and holds the mapped file instead (the process's memory goes); the API calls read
    only to find the kernels' launches are not held once those are found; answers and the
    items' values are those of a question without a cache."""
    import nsys_parsers.resolver as resolver_module

    with Session(export_copy, cache=False) as s:
        expected = answer(s, "nvtx-kernels").rows
        in_memory = {n: np.array(s.trace.resolver.array(n)) for n in
                     ("kernel.launch_tid", "pairs.all.range", "pairs.all.kernel")}
    monkeypatch.setattr(resolver_module, "MAPPED_BYTES", 1)
    with Session(export_copy) as s:
        assert answer(s, "nvtx-kernels").rows == expected
        r = s.trace.resolver
        for name, values in in_memory.items():
            held = r.array(name)
            assert isinstance(held, np.memmap), name
            assert Path(held.filename).parent.parent == cache_dir
            assert np.array_equal(held, values), name
        assert all(r.optional(f"api.{k}") is None for k in ("start", "end", "tid", "correlation"))
    with Session(export_copy) as s:  # the items written then are whole and checked
        assert answer(s, "nvtx-kernels").rows == expected
