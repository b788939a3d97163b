"""A cache of the columns read from an export, so that the next question reads no SQLite.

Reading millions of rows out of SQLite takes seconds; the same arrays come back from ``.npy``
files in milliseconds, mapped rather than read. Each export gets one entry: a folder in the
user cache (``$NSYS_MINE_CACHE_DIR``, default ``<user cache dir>/nsys-mine/columns``), never
next to the export (CI artifacts may be read-only). An entry holds *items* (a column as read,
the names resolved so far, attribution pairs): each one ``.npy`` file, with its distinct
strings in a ``.json`` file when it codes names. ``manifest.json`` names the export the entry
belongs to (path, size, mtime, inode, SQLite header, schema) and, for each item, its files,
dtype, shape and a checksum of its bytes (the sum and the XOR of its 64-bit words: numpy
computes both at memory speed). An item is used only when all of that matches; anything else
(a truncated, corrupt or foreign file, another export at that path, an older format) is
ignored and read again, never trusted.

Files are written under new names and the manifest is replaced by rename, so a reader sees
the old item or the new one, and a mapped file keeps its bytes while it is used. A folder that
cannot be written only means no caching. The cache is bounded (``$NSYS_MINE_CACHE_MAX_MB``,
default 4096): after each write the least recently used entries are removed until it fits,
but never the entry being written (an export larger than the bound keeps its columns while it
is used).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nsys_parsers.arrays import ROWS, concatenate_into, let_go
from nsys_parsers.nsys_tool import user_cache_dir
from nsys_parsers.schema import Schema

CACHE_DIR_ENV = "NSYS_MINE_CACHE_DIR"
CACHE_MAX_ENV = "NSYS_MINE_CACHE_MAX_MB"
DEFAULT_MAX_MB = 4096
# Bump when what an item holds, or how it is computed, changes: older entries are ignored.
FORMAT_VERSION = 5
MANIFEST = "manifest.json"


def cache_root() -> Path:
    """Where cache entries live: ``$NSYS_MINE_CACHE_DIR`` or ``<user cache>/columns``."""
    env = os.environ.get(CACHE_DIR_ENV)
    return Path(env).expanduser() if env else user_cache_dir() / "columns"


def cache_limit_bytes() -> int:
    try:
        mb = float(os.environ.get(CACHE_MAX_ENV, DEFAULT_MAX_MB))
    except ValueError:
        mb = DEFAULT_MAX_MB
    return max(0, int(mb * 2**20))


# A value per row derived for a question and larger than this is held in a scratch file
# (``held``), not in the process's memory.
SCRATCH_BYTES = 8 << 20


def scratch(n: int, dtype: Any, folder: Path | None = None) -> np.ndarray | None:
    """An array of ``n`` values of ``dtype`` mapped (shared, writable) from a file in
    ``folder`` (default: the cache's root, on disk) that is already unlinked: nothing is
    left behind, and its pages, once written and let go (``arrays.let_go``), are the
    file's, not the process's memory. None where no such file can be made."""
    try:
        folder = cache_root() if folder is None else folder
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder, prefix="nsys-mine-scratch-") as f:
            f.truncate(max(n, 1) * np.dtype(dtype).itemsize)
            return np.memmap(f, dtype=dtype, mode="r+", shape=(n,))
    except (OSError, ValueError):
        return None


def held(n: int, dtype: Any) -> np.ndarray:
    """An empty array for ``n`` values derived for a question: a ``scratch`` file's mapping
    when it would take ``SCRATCH_BYTES`` or more (held as the cache's columns are: pages let
    go once written or read), else memory (also where no scratch file can be made)."""
    out = scratch(n, dtype) if n * np.dtype(dtype).itemsize >= SCRATCH_BYTES else None
    return np.empty(n, dtype=dtype) if out is None else out


def joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts one after the other (``np.concatenate``'s dtype), in ``held``."""
    n = sum(p.size for p in parts)
    return concatenate_into(held(n, np.result_type(*parts)), parts)


def held_where(column: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``column[keep]`` (``keep``: a mask of its rows) in ``held``, a block (``ROWS``) of
    rows at a time, the mapped pages of ``column`` and of the result let go as they pass."""
    out, at = held(int(np.count_nonzero(keep)), column.dtype), 0
    for a in range(0, column.size, ROWS):
        part = column[a:a + ROWS][keep[a:a + ROWS]]
        dst = out[at:at + part.size]
        dst[...] = part
        let_go(dst)
        let_go(column[a:a + ROWS])
        at += part.size
    return out


def export_key(path: Path, schema: Schema) -> dict[str, Any]:
    """What identifies the export an entry was built from. The SQLite header carries the
    file change counter and the page count: a rewritten file differs there even when its
    size and mtime do not."""
    st = path.stat()
    with open(path, "rb") as fh:
        header = fh.read(100)
    tables = json.dumps(sorted((t, sorted(c)) for t, c in schema.tables.items()))
    return {
        "path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
        "inode": st.st_ino, "sqlite_header": hashlib.sha256(header).hexdigest()[:32],
        "schema": hashlib.sha256(tables.encode()).hexdigest()[:32], "format": FORMAT_VERSION,
    }


@dataclass
class Item:
    """One cached item: an array (read-only when loaded), the strings its codes index (or
    None) and JSON-able metadata."""

    array: np.ndarray
    strings: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


DIGEST_WORDS = 1 << 21  # 16 MB of an item summed at a time (its pages let go after)


def digest(data: np.ndarray | bytes) -> list[int]:
    """The checksum of some bytes: [sum mod 2**64, XOR] of their little-endian 64-bit words
    (a partial last word padded with zeros). A change confined to one word changes the XOR,
    a truncation the length that is stored beside it. Summed ``DIGEST_WORDS`` at a time (a
    sum mod 2**64 and a XOR add up across parts); the pages of a mapped item are let go as
    they pass, so checking an item maps 16 MB of it at a time, not all of it."""
    return _digest_of(_byte_parts(data))


def _byte_parts(data: np.ndarray | bytes) -> Iterator[np.ndarray]:
    """The bytes of ``data`` ``DIGEST_WORDS`` words at a time (every part whole words but
    the last); a mapped array's pages let go after each part."""
    if isinstance(data, np.memmap) and data.flags.c_contiguous:
        flat: Any = data.reshape(-1).view(np.uint8)  # still the mapping: let_go works on it
    else:
        raw: Any = data if isinstance(data, bytes) else np.ascontiguousarray(data)
        flat = np.frombuffer(memoryview(raw).cast("B"), dtype=np.uint8)
    for a in range(0, flat.size, DIGEST_WORDS * 8):
        part = flat[a:a + DIGEST_WORDS * 8]
        yield part
        let_go(part)


def _digest_of(parts: Iterable[np.ndarray]) -> list[int]:
    """``digest`` of the bytes given in parts (``_byte_parts``)."""
    total = xor = 0
    for part in parts:
        whole = part.size // 8 * 8
        words = np.frombuffer(part[:whole], dtype="<u8")
        total, xor = total + int(words.sum(dtype=np.uint64)), xor ^ int(
            np.bitwise_xor.reduce(words))
        if whole < part.size:  # the last part's partial word
            last = int.from_bytes(bytes(part[whole:]), "little")
            total, xor = total + last, xor ^ last
    return [total % 2**64, xor]


def _save(path: Path, array: np.ndarray) -> list[int]:
    """Write a C-contiguous ``array`` as ``np.save`` does and give its ``digest``: one pass
    over its bytes, ``DIGEST_WORDS`` words at a time, a mapped array's (a scratch file's:
    ``held``) pages let go as they pass (``np.save`` mapped all of it: the kernels' name
    codes, 132 MB at 16.5 M kernels, resident through the next steps)."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))

        def written() -> Iterator[np.ndarray]:
            for part in _byte_parts(array):
                f.write(part.data)
                yield part
        return _digest_of(written())


class ColumnCache:
    """The cache entry of one export: ``get`` an item (None: missing, stale or corrupt),
    ``put`` items."""

    def __init__(self, key: dict[str, Any], root: Path | None = None,
                 limit_bytes: int | None = None):
        self.key = key
        self.root = root if root is not None else cache_root()
        self.limit = cache_limit_bytes() if limit_bytes is None else limit_bytes
        name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        self.dir = self.root / name
        self._writer: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []

    @classmethod
    def for_export(cls, export: Any) -> ColumnCache | None:
        """The entry of an open ``Export`` (None when its file cannot be identified)."""
        try:
            return cls(export_key(Path(export.path), export))
        except OSError:
            return None

    def _manifest(self) -> dict[str, Any]:
        try:
            data = json.loads((self.dir / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("key") != self.key:
            return {}
        items = data.get("items")
        return items if isinstance(items, dict) else {}

    def get(self, name: str) -> Item | None:
        entry = self._manifest().get(name)
        if not isinstance(entry, dict):
            return None
        try:
            array = np.load(self.dir / entry["file"], mmap_mode="r", allow_pickle=False)
            if (array.dtype.str != entry["dtype"] or list(array.shape) != entry["shape"]
                    or digest(array) != entry["digest"]):  # lets its pages go as it reads
                return None
            strings = None
            if entry.get("strings") is not None:
                raw = (self.dir / entry["strings"]).read_bytes()
                if digest(raw) != entry["strings_digest"]:
                    return None
                strings = json.loads(raw)
        except Exception:  # a damaged .npy header fails numpy's parser in many ways
            return None
        self._touch()
        return Item(array=array, strings=strings, meta=entry.get("meta") or {})

    def put(self, items: dict[str, Item], background: bool = False) -> None:
        """Store items (under new file names), then the manifest that names them;
        ``background``: on the entry's writer thread while the caller goes on (one write at
        a time, in order; ``flush()`` waits for them)."""
        if not items:
            return
        if not background:
            self.flush()
            self._write(items)
            return
        self._on_writer(self._write_quietly, items)

    def keep(self, items: dict[str, Item]) -> dict[str, np.ndarray]:
        """Store items now (after the writes before) and give each one written mapped from
        its file, as ``get`` would, without reading the bytes just written through again to
        check them (none: the folder cannot be written, or an item is larger than the
        cache)."""
        if not items:
            return {}
        self.flush()
        mapped = {}
        for name, entry in self._write(items).items():
            try:
                mapped[name] = np.load(self.dir / entry["file"], mmap_mode="r",
                                       allow_pickle=False)
            except (OSError, ValueError):  # evicted, with its entry, to fit the bound
                continue
        return mapped

    def _on_writer(self, job: Any, *args: Any) -> None:
        """Run ``job(*args)`` on the entry's writer thread, after the jobs before it."""
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="nsys-mine-cache")
        self._pending.append(self._writer.submit(job, *args))

    def _write_quietly(self, items: dict[str, Item]) -> None:
        try:
            self._write(items)
        except Exception:  # a failed write means no caching, never a traceback
            pass

    def flush(self) -> None:
        """Wait until every ``put`` is written."""
        for future in self._pending:
            future.result()
        self._pending.clear()
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    def _write(self, items: dict[str, Item]) -> dict[str, dict[str, Any]]:
        """Write items and name them in the manifest: their entries (none on failure)."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            token = f"{os.getpid()}-{time.monotonic_ns()}"
            written: dict[str, dict[str, Any]] = {}
            for name, item in items.items():
                array = item.array  # a mapping stays one (its pages let go as they pass)
                if not (isinstance(array, np.memmap) and array.flags.c_contiguous):
                    array = np.ascontiguousarray(array)
                if array.nbytes > self.limit:
                    continue
                file = f"{name}.{token}.npy"
                entry: dict[str, Any] = {"file": file, "dtype": array.dtype.str,
                                         "shape": list(array.shape),
                                         "digest": _save(self.dir / file, array),
                                         "meta": item.meta}
                if item.strings is not None:
                    raw = json.dumps(item.strings, ensure_ascii=False).encode()
                    entry["strings"] = f"{name}.{token}.json"
                    entry["strings_digest"] = digest(raw)
                    (self.dir / entry["strings"]).write_bytes(raw)
                written[name] = entry
            self._commit(written, token)
        except OSError:
            return {}  # an unwritable cache folder means no caching, never a failed report
        return written

    def _commit(self, written: dict[str, dict[str, Any]], token: str) -> None:
        """Name the ``written`` items' files in the manifest (replaced by rename), remove the
        files of the items they replace, and keep the cache within its bound."""
        manifest = self._manifest()
        replaced = [manifest[n] for n in written if isinstance(manifest.get(n), dict)]
        manifest.update(written)
        tmp = self.dir / f".{MANIFEST}.{token}.tmp"
        tmp.write_text(json.dumps({"key": self.key, "items": manifest}), encoding="utf-8")
        os.replace(tmp, self.dir / MANIFEST)
        for old in replaced:  # files no manifest names any more
            for f in (old.get("file"), old.get("strings")):
                if isinstance(f, str):
                    (self.dir / f).unlink(missing_ok=True)
        self._touch()
        evict(self.root, self.limit, keep=self.dir)

    def stream(self, names: list[str]) -> Stream:
        """Items written a chunk at a time (``Stream.add``), for columns read in a stream
        and never held whole; they are items once ``Stream.commit`` names them."""
        return Stream(self, names)

    def column_file(self, name: str, rows: int) -> ColumnFile | None:
        """A file a raw column of at most ``rows`` values is read straight into (chunk by
        chunk, ``ColumnFile.write``), mapped once read and an item once named: the column
        is never held in the process's memory (None: it would not fit the cache, or the
        folder cannot be written; read it into memory then)."""
        if rows * 8 > self.limit:
            return None
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            return ColumnFile(self, name, rows)
        except OSError:
            return None

    def name_files(self, entries: dict[str, dict[str, Any]], token: str) -> None:
        """Name finished column files in the manifest, on the writer thread after the
        writes before (a failure only means those items are not kept)."""
        def commit() -> None:
            try:
                self._commit(entries, token)
            except OSError:
                for entry in entries.values():
                    (self.dir / entry["file"]).unlink(missing_ok=True)
        self._on_writer(commit)

    def _touch(self) -> None:
        try:
            os.utime(self.dir)
        except OSError:
            pass


class Stream:
    """1-D int64 items written as their chunks pass: each file begins with room for its
    ``.npy`` header, filled in by ``commit`` once the length is known, and its checksum is
    summed chunk by chunk (a sum and a XOR of 64-bit words add up across chunks). Nothing is
    an item until ``commit`` (a stream given up, or one that failed to write, leaves none):
    ``abort`` removes the files. A folder that cannot be written only means no caching."""

    def __init__(self, cache: ColumnCache, names: list[str]):
        self.cache, self.names = cache, list(names)
        self.token = f"{os.getpid()}-{time.monotonic_ns()}"
        self.rows = 0
        self.sums = {n: [0, 0] for n in self.names}
        self._files: dict[str, Any] = {}
        self._header = _npy_header(0)
        try:
            cache.dir.mkdir(parents=True, exist_ok=True)
            for name in self.names:
                fh = self._files[name] = open(cache.dir / self._file(name), "wb")
                fh.write(self._header)
        except OSError:
            self.abort()

    def _file(self, name: str) -> str:
        return f"{name}.{self.token}.npy"

    def add(self, arrays: dict[str, np.ndarray]) -> None:
        """Append one chunk: an array per name, all of one length."""
        if not self._files:
            return
        try:
            for name in self.names:
                chunk = np.ascontiguousarray(arrays[name], dtype="<i8")
                _add_digest(self.sums[name], digest(chunk))
                self._files[name].write(chunk.tobytes())
            self.rows += int(arrays[self.names[0]].size)
        except OSError:
            self.abort()

    def commit(self) -> None:
        """Make the streamed columns items of the cache (nothing when the stream failed)."""
        if not self._files:
            return
        header = _npy_header(self.rows)
        try:
            if len(header) != len(self._header):  # pragma: no cover - numpy pads to 64
                raise OSError("the .npy header does not fit its room")
            for fh in self._files.values():
                fh.seek(0)
                fh.write(header)
                fh.close()
            if self.rows * 8 > self.cache.limit:
                raise OSError("larger than the cache")
            self.cache.flush()  # one manifest writer at a time
            self.cache._commit({n: _int_entry(self._file(n), self.rows, self.sums[n])
                                for n in self.names}, self.token)
            self._files = {}
        except OSError:
            self.abort()

    def abort(self) -> None:
        for name, fh in self._files.items():
            fh.close()
            (self.cache.dir / self._file(name)).unlink(missing_ok=True)
        self._files = {}


class ColumnFile:
    """A raw int64 column written where it belongs in its ``.npy`` file as its chunks are
    read (``write``, from the reader threads: ``os.pwrite`` at the chunk's row; the space
    reserved first, so that a full disk fails here, not later), its checksum summed chunk
    by chunk (sums and XORs of 64-bit words do not depend on their order), then ``finish``ed:
    the header says how many rows it holds, and the file is mapped read-only. The pages it
    was written through stay in the page cache, never in the process's memory (issue 52).
    A failed write marks it ``failed``: the reader then reads the column into memory."""

    def __init__(self, cache: ColumnCache, name: str, rows: int):
        self.cache, self.name, self.rows = cache, name, rows
        self.token = f"{os.getpid()}-{time.monotonic_ns()}"
        self.file = f"{name}.{self.token}.npy"
        self.failed = False
        self._sums = [0, 0]
        self._lock = threading.Lock()
        self._header = len(_npy_header(rows))
        self._fd = os.open(cache.dir / self.file, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            if rows and hasattr(os, "posix_fallocate"):
                os.posix_fallocate(self._fd, 0, self._header + rows * 8)
        except OSError:
            self.discard()
            raise

    def write(self, at: int, part: np.ndarray, *, moved: bool = False) -> None:
        """Rows ``at``... of the column (``moved``: rows already counted, moved down)."""
        if self.failed:
            return
        data = np.ascontiguousarray(part, dtype="<i8")
        try:
            os.pwrite(self._fd, data.tobytes(), self._header + at * 8)
        except OSError:
            self.failed = True
            return
        if not moved:
            summed = digest(data)  # on the reader thread; only the adding is locked
            with self._lock:
                _add_digest(self._sums, summed)

    def read(self, at: int, n: int) -> np.ndarray:
        data = os.pread(self._fd, n * 8, self._header + at * 8)
        return np.frombuffer(data, dtype="<i8")

    def finish(self, rows: int) -> tuple[np.ndarray, dict[str, Any]] | None:
        """The column of its first ``rows`` rows, mapped, and its manifest entry (None: a
        write failed; the file is gone)."""
        try:
            if self.failed:
                raise OSError("a write failed")
            header = _npy_header(rows)
            if len(header) != self._header:  # pragma: no cover - numpy pads to 64
                raise OSError("the .npy header does not fit its room")
            os.pwrite(self._fd, header, 0)
            os.ftruncate(self._fd, self._header + rows * 8)
            os.close(self._fd)
            self._fd = -1
            array = np.load(self.cache.dir / self.file, mmap_mode="r", allow_pickle=False)
        except OSError:
            self.discard()
            return None
        return array, _int_entry(self.file, rows, self._sums)

    def discard(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        (self.cache.dir / self.file).unlink(missing_ok=True)


def _add_digest(sums: list[int], part: list[int]) -> None:
    """Add the ``digest`` of one part of a column written in parts to the column's checksum
    (its sum and XOR do not depend on the order of the words)."""
    sums[0], sums[1] = (sums[0] + part[0]) % 2**64, sums[1] ^ part[1]


def _int_entry(file: str, rows: int, sums: list[int]) -> dict[str, Any]:
    """The manifest entry of a 1-D int64 item written in parts."""
    return {"file": file, "dtype": "<i8", "shape": [rows], "digest": list(sums), "meta": {}}


def _npy_header(rows: int) -> bytes:
    """The ``.npy`` header of a 1-D little-endian int64 array of ``rows`` values."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<i8", "fortran_order": False, "shape": (rows,)})
    return buf.getvalue()


def _entry_size(entry: Path) -> int:
    total = 0
    for p in entry.iterdir():
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def evict(root: Path, limit_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used entries under ``root`` until the total size fits
    ``limit_bytes``, never ``keep`` (the entry in use: an export whose columns alone exceed
    the bound keeps them while it is used, and they go first when another export's are
    written). Returns what was removed."""
    try:
        entries = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []
    sized = []
    for p in entries:
        try:
            sized.append((p.stat().st_mtime, _entry_size(p), p))
        except OSError:
            continue
    total = sum(s for _, s, _ in sized)
    removed = []
    for _, size, p in sorted((x for x in sized if x[2] != keep), key=lambda x: x[0]):
        if total <= limit_bytes:
            break
        shutil.rmtree(p, ignore_errors=True)
        total -= size
        removed.append(p)
    return removed
