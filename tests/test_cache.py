"""The column cache (nsys_parsers.cache): same answers cold and warm, nothing written beside
the export, and a damaged, stale or foreign cache entry ignored and rebuilt, never trusted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from nsys_parsers.cache import ExportCache, Part, cache_root, evict
from nsys_parsers.export import open_export
from reports.analysis import ExportAnalysis

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
    with ExportAnalysis(path, **options) as a:
        return {"kernels": a.kernels().rows, "ranges": a.ranges().rows,
                "nvtx_kernels": a.nvtx_kernels().rows,
                "innermost": a.nvtx_kernels(attribution="innermost").rows,
                "dominant": a.dominant().rows}


def parts(cache_dir: Path) -> dict[str, Path]:
    return {p.stem: p for p in cache_dir.glob("*/*.part")}


def test_warm_answers_equal_cold_ones_and_come_from_the_cache(cache_dir, export_copy):
    cold = answers(export_copy, cache=False)
    assert not cache_dir.exists()  # --no-cache writes nothing
    first = answers(export_copy)
    stored = parts(cache_dir)
    assert {"activity", "activity.kernels", "range_names", "pairs.all", "pairs.innermost",
            "kernel_names.demangled"} <= set(stored)
    # the kernel summary of a small export (41 kernel names here) reads without numpy and
    # stores nothing; a large export's is stored (test_large_kernel_summary_is_cached)
    assert "kernel_durations.demangled" not in stored
    warm = answers(export_copy)
    assert first == cold and warm == cold
    assert len(cold["nvtx_kernels"]) == 2677 and len(cold["ranges"]) == 16582


def test_questions_in_any_order_and_one_at_a_time(cache_dir, export_copy):
    """Each question in its own analysis, as on the command line: names resolved for one
    report (only the ranges with kernels) are completed by the next that needs them all."""
    cold = answers(export_copy, cache=False)
    for _ in range(2):
        with ExportAnalysis(export_copy) as a:
            assert a.nvtx_kernels().rows == cold["nvtx_kernels"]
        with ExportAnalysis(export_copy) as a:
            assert a.ranges().rows == cold["ranges"]
        with ExportAnalysis(export_copy, within="aten::linear, op_id = 314300") as a:
            a.ranges()
        with ExportAnalysis(export_copy) as a:
            assert a.dominant().rows == cold["dominant"]
            assert a.kernels().rows == cold["kernels"]


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
    assert warm == cold and parts(cache_dir)
    assert all(cache_dir in p.parents for p in parts(cache_dir).values())


@pytest.mark.parametrize("damage", ["flip a body byte", "truncate", "zero the header",
                                    "empty file", "another part's file"])
def test_a_damaged_part_is_ignored_and_rebuilt(cache_dir, export_copy, damage):
    cold = answers(export_copy, cache=False)
    answers(export_copy)
    stored = parts(cache_dir)
    path = stored["activity"]
    data = bytearray(path.read_bytes())
    if damage == "flip a body byte":
        data[-100] ^= 0x40
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "zero the header":
        data[:64] = bytes(64)
    elif damage == "empty file":
        data = bytearray()
    else:
        data = bytearray(stored["range_names"].read_bytes())
    path.write_bytes(bytes(data))
    entry = ExportCache.for_export(open_export(export_copy))
    assert entry is not None and entry.get("activity") is None  # never trusted
    assert answers(export_copy) == cold
    assert entry.get("activity") is not None  # rebuilt by the run that could not use it
    assert answers(export_copy) == cold


def test_the_two_activity_parts_of_different_loads_are_not_combined(
        cache_dir, export_copy, tmp_path, monkeypatch):
    """Ranges and kernels are stored in two parts, each whole and valid on its own; a pair
    that two loads wrote (a failed write of one, a race between two runs) is read again from
    the export, never combined."""
    cold = answers(export_copy, cache=False)
    answers(export_copy)
    other = tmp_path / "other"
    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(other))
    answers(export_copy)  # the same export, loaded again into another cache folder
    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(cache_dir))
    shutil.copyfile(parts(other)["activity.kernels"], parts(cache_dir)["activity.kernels"])
    entry = ExportCache.for_export(open_export(export_copy))
    assert entry is not None and entry.get("activity.kernels") is not None  # valid alone
    from nsys_parsers.activity import _from_cache

    assert _from_cache(open_export(export_copy), entry, "demangled") is None
    assert answers(export_copy) == cold  # read again, and stored as one load
    assert _from_cache(open_export(export_copy), entry, "demangled") is not None


def test_the_kernel_summary_after_another_question_maps_only_the_kernels(
        cache_dir, export_copy, monkeypatch):
    """A large export's kernel summary after another question reads the kernels' part of
    that question's activity, not the ranges' part (at x1200 a GB mapped and checksummed)."""
    import nsys_parsers.kernel_groups as kg

    monkeypatch.setattr(kg, "SMALL_KERNELS", -1)
    with ExportAnalysis(export_copy, cache=False) as a:
        fresh = a.kernels().rows
    with ExportAnalysis(export_copy) as a:
        a.nvtx_kernels()
    got: list[str] = []
    real_get = ExportCache.get

    def get(self, name):
        got.append(name)
        return real_get(self, name)

    monkeypatch.setattr(ExportCache, "get", get)
    with ExportAnalysis(export_copy) as a:
        rows = a.kernels().rows
    assert rows == fresh and len(rows) == 41
    assert "activity.kernels" in got and "activity" not in got


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


def test_a_part_of_another_export_is_not_used(cache_dir, export_copy, fx):
    """A part file copied into another export's entry names its own export: ignored."""
    answers(export_copy)
    other = cache_dir.parent / "dlprof.sqlite"
    shutil.copyfile(fx(DLPROF), other)
    fresh = answers(other, cache=False)
    answers(other)
    entries = {p.parent for p in cache_dir.glob("*/*.part")}
    assert len(entries) == 2
    mine = ExportCache.for_export(open_export(export_copy))
    assert mine is not None
    theirs = next(e for e in entries if e != mine.dir)
    shutil.copyfile(mine.dir / "activity.part", theirs / "activity.part")
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
        entry = ExportCache({"export": i}, root=root, limit_bytes=10**9)
        entry.put("p", Part(arrays={"x": big}), background=False)
        entries.append(entry)
        os.utime(entry.dir / "last-used", (1000 + i, 1000 + i))
    assert entries[0].get("p") is not None  # used now: the most recent
    removed = evict(root, 2 * big.nbytes + 10_000)
    assert removed == [entries[1].dir]
    assert entries[1].get("p") is None and entries[2].get("p") is not None
    # writing past the limit evicts on the way, never the entry being written
    small = ExportCache({"export": 9}, root=root, limit_bytes=big.nbytes + 10_000)
    small.put("p", Part(arrays={"x": big}), background=False)
    assert sorted(p.name for p in root.iterdir()) == [small.dir.name]
    assert np.array_equal(small.get("p").arrays["x"], big)


def test_parts_round_trip_exactly(tmp_path):
    entry = ExportCache({"export": "k"}, root=tmp_path)
    arrays = {"i": np.array([-1, 0, 2**62], dtype=np.int64), "b": np.array([True, False]),
              "empty": np.zeros(0, dtype=np.int64), "m": np.arange(12).reshape(3, 4)}
    strings = {"names": ["aten::mm, seq = 7", "", "d\u00e9j\u00e0 \x1f sep", "a" * 5000]}
    entry.put("p", Part(arrays=arrays, strings=strings, meta={"n": 3}))
    entry.flush()
    got = entry.get("p")
    assert got is not None and got.strings == strings and got.meta == {"n": 3}
    for k, v in arrays.items():
        assert got.arrays[k].dtype == v.dtype and np.array_equal(got.arrays[k], v)
        assert not got.arrays[k].flags.writeable  # loaded data is never modified


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
    assert on.stdout == off.stdout == warm.stdout and parts(cache_dir)


def test_every_byte_of_a_body_is_checked(tmp_path):
    """The body checksum (sum and XOR of 64-bit words) sees a change to any byte, in arrays
    whose lengths are not multiples of 8 and in the padding between them, and the body
    starts 64-byte aligned in the file."""
    from nsys_parsers.cache import _PREFIX, MAGIC

    entry = ExportCache({"export": "x"}, root=tmp_path)
    part = Part(arrays={"a": np.arange(3, dtype=np.int64), "b": np.arange(5, dtype=np.uint8),
                        "c": np.array([True, False, True])},
                strings={"names": ["aten::mm", "第0层"]}, meta={"n": 3})
    entry.put("p", part, background=False)
    path = tmp_path / entry.dir.name / "p.part"
    data = path.read_bytes()
    head_len, _ = _PREFIX.unpack_from(data, len(MAGIC))
    body = len(MAGIC) + _PREFIX.size + head_len
    assert body % 64 == 0
    back = entry.get("p")
    assert back is not None and back.strings == part.strings and back.meta == {"n": 3}
    assert all(np.array_equal(back.arrays[k], v) for k, v in part.arrays.items())
    for i in range(body, len(data)):
        for bit in (0x01, 0x80):
            damaged = bytearray(data)
            damaged[i] ^= bit
            path.write_bytes(bytes(damaged))
            assert entry.get("p") is None, f"a change at body byte {i - body} went unseen"


def test_loaded_arrays_outlive_a_rewrite_of_their_part(tmp_path):
    """Parts are mapped, not copied: a part written again (renamed into place) or evicted
    while its arrays are in use leaves those arrays as they were; an empty file is no part."""
    entry = ExportCache({"export": "m"}, root=tmp_path)
    entry.put("p", Part(arrays={"x": np.arange(1000, dtype=np.int64)}), background=False)
    old = entry.get("p")
    assert old is not None
    entry.put("p", Part(arrays={"x": np.full(1000, 7, dtype=np.int64)}), background=False)
    assert np.array_equal(entry.get("p").arrays["x"], np.full(1000, 7))
    evict(tmp_path, 0)
    assert entry.get("p") is None
    assert np.array_equal(old.arrays["x"], np.arange(1000))
    entry.dir.mkdir(parents=True)
    (entry.dir / "p.part").write_bytes(b"")
    assert entry.get("p") is None


def test_large_kernel_summary_is_cached(cache_dir, export_copy, monkeypatch):
    """Above SMALL_KERNELS kernels the summary goes through numpy and the cache: stored cold,
    read warm, the same rows as the small export's plain-Python summary."""
    import nsys_parsers.kernel_groups as kg

    with ExportAnalysis(export_copy) as a:
        small = a.kernels().rows
    assert not cache_dir.exists()
    monkeypatch.setattr(kg, "SMALL_KERNELS", -1)
    with ExportAnalysis(export_copy) as a:
        cold = a.kernels().rows
    assert "kernel_durations.demangled" in parts(cache_dir)
    with ExportAnalysis(export_copy) as a:
        warm = a.kernels().rows
    assert warm == cold == small and len(small) == 41


@pytest.mark.parametrize("name_kind", ["demangled", "short"])
def test_kernel_summary_after_another_question_reads_the_cached_activity(
        cache_dir, export_copy, monkeypatch, name_kind):
    """A large export's kernel summary asked after an NVTX question (which cached the
    kernels with their durations and names) comes from that cache, not from the export:
    the same rows and notes as read from the export, and no kernel read at all."""
    import nsys_parsers.kernel_groups as kg
    import nsys_parsers.kernels as kernels_mod

    monkeypatch.setattr(kg, "SMALL_KERNELS", -1)
    with ExportAnalysis(export_copy, cache=False, name_kind=name_kind) as a:
        fresh = a.kernels()
    with ExportAnalysis(export_copy, name_kind=name_kind) as a:
        a.nvtx_kernels()
    assert f"kernel_names.{name_kind}" in parts(cache_dir)

    def no_read(*args, **kwargs):
        raise AssertionError("the kernel summary read the export")

    monkeypatch.setattr(kernels_mod, "_read_durations", no_read)
    with ExportAnalysis(export_copy, name_kind=name_kind) as a:
        after = a.kernels()
    assert (after.rows, after.notes) == (fresh.rows, fresh.notes)
    assert len(after.rows) == {"demangled": 41, "short": 15}[name_kind]
    assert f"kernel_durations.{name_kind}" not in parts(cache_dir)  # nothing new to store
    # another name kind's names are not in the cache: that summary reads the export
    other = "mangled"
    with ExportAnalysis(export_copy, name_kind=other) as a:
        with pytest.raises(AssertionError, match="read the export"):
            a.kernels()
