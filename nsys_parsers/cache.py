"""A cache of the columns read from an export, so that the second question is instant.

Reading millions of rows out of SQLite costs seconds; the arrays it gives take tenths of a
second to read back from a plain file. Each export gets one cache entry: a folder in the user
cache dir (``$NSYS_MINE_CACHE_DIR``, default ``~/.cache/nsys-mine/columns``), never next to
the export (CI artifacts may be read-only). An entry holds named *parts* (the kernels and
ranges as loaded, the names resolved so far, attribution pairs), each one file:

    MAGIC | u32 header length | u32 CRC-32 of the header | header (JSON) | body

The header names the export it belongs to (path, size, mtime, inode, SQLite header bytes,
schema digest) and the arrays of the body (dtype, shape, offset) with the body's checksum
(the sum and the XOR of its 64-bit words).
A part is used only when all of that matches; anything else (a truncated, corrupt or foreign
file, another export at that path, an older format) is ignored and rebuilt, never trusted.
Loaded arrays are read-only views of the file, which is mapped (mmap), not copied.

Writes go to a temporary file in the entry and are renamed into place (readers see the old
part or the new one, never half of one); a folder that cannot be written only means no
caching. The cache is bounded (``$NSYS_MINE_CACHE_MAX_MB``, default 4096): after each write
the least recently used entries are removed until the total fits.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import shutil
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsys_parsers.nsys_tool import user_cache_dir
from nsys_parsers.schema import Schema

if TYPE_CHECKING:
    import numpy as np

CACHE_DIR_ENV = "NSYS_MINE_CACHE_DIR"
CACHE_MAX_ENV = "NSYS_MINE_CACHE_MAX_MB"
DEFAULT_MAX_MB = 4096
# Bump when what a part holds, or how it is computed, changes: older entries are then ignored.
FORMAT_VERSION = 2
MAGIC = b"NSYSMINE\x01COLS\n"
_PREFIX = struct.Struct("<II")  # header length, header CRC-32
_ALIGN = 64
_USED = "last-used"  # touched on every use: the LRU clock of an entry


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


def export_key(path: Path, schema: Schema) -> dict[str, Any]:
    """What identifies the export a cache entry was built from. The SQLite header bytes
    carry the file change counter and the page count: a rewritten file differs there even
    when its size and mtime do not."""
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
class Part:
    """What one part holds: arrays (read-only when loaded), lists of strings (names) and
    JSON-able metadata."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    strings: dict[str, list[str]] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)


class ExportCache:
    """The cache entry of one export. ``get`` returns a part or None (missing, stale or
    corrupt); ``put`` stores one (in a background thread: call ``flush`` before exiting)."""

    def __init__(self, key: dict[str, Any], root: Path | None = None,
                 limit_bytes: int | None = None):
        self.key = key
        self.root = root if root is not None else cache_root()
        self.limit = cache_limit_bytes() if limit_bytes is None else limit_bytes
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
        self.dir = self.root / digest
        self._writers: list[threading.Thread] = []

    @classmethod
    def for_export(cls, export: Any) -> ExportCache | None:
        """The entry of an open ``Export`` (None when its file cannot be identified)."""
        try:
            return cls(export_key(Path(export.path), export))
        except OSError:
            return None

    # -- reading -------------------------------------------------------------------------
    def get(self, name: str) -> Part | None:
        path = self.dir / f"{name}.part"
        try:
            with open(path, "rb") as fh:
                # mapped, not read: the checksum pass is then the only pass over the bytes
                # (read() copied them first: 60-80 ms of a warm question on nested x100).
                # Parts are replaced by rename, never rewritten in place, so a mapped file
                # keeps its bytes while it is used.
                data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # ValueError: an empty file cannot be mapped
            return None
        part = _decode(data, self.key, name)
        if part is not None:
            self._touch()
        return part

    def has(self, name: str) -> bool:
        """Whether a part of this export is stored under ``name``, by its header alone
        (``get`` still checks the whole part): a cheap look, without numpy, before deciding
        to read the export."""
        try:
            with open(self.dir / f"{name}.part", "rb") as fh:
                start = fh.read(len(MAGIC) + _PREFIX.size)
                head_len = _PREFIX.unpack_from(start, len(MAGIC))[0]
                return _header(start + fh.read(head_len), self.key, name) is not None
        except (OSError, ValueError, TypeError, KeyError, struct.error):
            return False

    # -- writing -------------------------------------------------------------------------
    def put(self, name: str, part: Part, *, background: bool = True) -> None:
        """Store a part. Arrays must not change afterwards (loaded data never does)."""
        if background:
            t = threading.Thread(target=self._write, args=(name, part), daemon=False)
            t.start()
            self._writers.append(t)
        else:
            self._write(name, part)

    def flush(self) -> None:
        """Wait for the writes in flight."""
        while self._writers:
            self._writers.pop().join()

    def _write(self, name: str, part: Part) -> None:
        try:
            chunks, header = _encode(part, self.key, name)
            size = sum(len(c) for c in chunks)
            if size > self.limit:
                return
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "wb") as fh:
                for c in chunks:
                    fh.write(c)
            os.replace(tmp, self.dir / f"{name}.part")
            self._touch()
            evict(self.root, self.limit, keep=self.dir)
        except OSError:
            return  # an unwritable cache folder means no caching, never a failed report

    def _touch(self) -> None:
        try:
            os.utime(self.dir / _USED)
        except FileNotFoundError:
            try:
                (self.dir / _USED).write_bytes(b"")
            except OSError:
                pass
        except OSError:
            pass


def _digest(buf: Any, state: tuple[int, int] = (0, 0)) -> tuple[int, int]:
    """The body's checksum: the sum (mod 2**64) and the XOR of its little-endian 64-bit
    words, a partial last word padded with zeros; ``state`` continues one over several
    pieces that each start at a multiple of 8 bytes (the body's arrays are 64-aligned, and
    zero padding adds nothing to either). Any change confined to one word changes the XOR, and
    a truncation the body's length; numpy computes it at memory speed (0.2 ms per MB, where
    CRC-32 took 0.5 ms: 30-40 ms of a warm question on nested x100)."""
    import numpy as np  # here: ``has`` and the cache key need no numpy

    view = memoryview(buf).cast("B")
    whole = len(view) // 8 * 8
    total, xor = state
    if whole:
        words = np.frombuffer(view[:whole], dtype="<u8")
        total += int(words.sum(dtype=np.uint64))
        xor ^= int(np.bitwise_xor.reduce(words))
    if whole < len(view):
        last = int.from_bytes(bytes(view[whole:]), "little")
        total += last
        xor ^= last
    return total % 2**64, xor


def _encode(part: Part, key: dict[str, Any], name: str) -> tuple[list[Any], dict[str, Any]]:
    import numpy as np

    arrays = []
    offset = 0
    bodies: list[Any] = []
    digest = (0, 0)
    blobs = {f"strings:{k}": np.frombuffer(json.dumps(v, ensure_ascii=False).encode(), np.uint8)
             for k, v in part.strings.items()}
    for col, arr in {**part.arrays, **blobs}.items():
        arr = np.ascontiguousarray(arr)
        pad = (-offset) % _ALIGN
        if pad:
            bodies.append(b"\0" * pad)
            offset += pad
        view = arr.data.cast("B") if arr.size else b""
        arrays.append([col, arr.dtype.str, list(arr.shape), offset, arr.nbytes])
        bodies.append(view)
        digest = _digest(view, digest)
        offset += arr.nbytes
    header = {"key": key, "part": name, "arrays": arrays, "meta": part.meta,
              "body_bytes": offset, "body_digest": list(digest), "written": time.time()}
    head = json.dumps(header, ensure_ascii=True).encode()
    # spaces after the JSON put the body at a multiple of 64 bytes in the file (the digest
    # and the arrays then read aligned words)
    head += b" " * ((-(len(MAGIC) + _PREFIX.size + len(head))) % _ALIGN)
    return [MAGIC, _PREFIX.pack(len(head), zlib.crc32(head)), head, *bodies], header


def _header(data: Any, key: dict[str, Any], name: str) -> tuple[dict[str, Any], int] | None:
    """The header at the start of ``data`` and where the body starts, if the header is
    whole, uncorrupted and of this export's part ``name``; else None. Raises ValueError
    (bad JSON) or struct.error (too short for the prefix)."""
    if data[:len(MAGIC)] != MAGIC:
        return None
    pos = len(MAGIC)
    head_len, head_crc = _PREFIX.unpack_from(data, pos)
    pos += _PREFIX.size
    head = bytes(data[pos:pos + head_len])
    if len(head) != head_len or zlib.crc32(head) != head_crc:
        return None
    header = json.loads(head)
    if header.get("key") != key or header.get("part") != name:
        return None
    return header, pos + head_len


def _decode(data: Any, key: dict[str, Any], name: str) -> Part | None:
    """The part in ``data`` (bytes or a read-only mapping of the file) if it is whole,
    uncorrupted and of this export; else None. Its arrays are views of ``data``."""
    import numpy as np

    try:
        found = _header(data, key, name)
        if found is None:
            return None
        header, body_at = found
        body = memoryview(data)[body_at:]
        if (len(body) != header["body_bytes"]
                or list(_digest(body)) != header["body_digest"]):
            return None
        arrays: dict[str, np.ndarray] = {}
        strings: dict[str, list[str]] = {}
        for col, dtype, shape, offset, nbytes in header["arrays"]:
            dt = np.dtype(dtype)
            count = int(np.prod(shape)) if shape else 1
            if count * dt.itemsize != nbytes or offset + nbytes > len(body):
                return None
            arr = np.frombuffer(body, dtype=dt, count=count, offset=offset)
            if col.startswith("strings:"):
                strings[col[len("strings:"):]] = json.loads(arr.tobytes().decode())
            else:
                arrays[col] = arr.reshape(shape)
        return Part(arrays=arrays, strings=strings, meta=header.get("meta") or {})
    except (ValueError, TypeError, KeyError, struct.error, UnicodeDecodeError):
        return None


def _entry_size(entry: Path) -> int:
    total = 0
    for p in entry.iterdir():
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def _last_used(entry: Path) -> float:
    try:
        return (entry / _USED).stat().st_mtime
    except OSError:
        try:
            return entry.stat().st_mtime
        except OSError:
            return 0.0


def evict(root: Path, limit_bytes: int, keep: Path | None = None) -> list[Path]:
    """Remove the least recently used entries under ``root`` until the total size fits
    ``limit_bytes`` (``keep``, the entry in use, goes last). Returns what was removed."""
    try:
        entries = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []
    sized = [(_last_used(p), _entry_size(p), p) for p in entries]
    total = sum(s for _, s, _ in sized)
    removed = []
    for _, size, p in sorted(sized, key=lambda x: (x[2] == keep, x[0])):
        if total <= limit_bytes:
            break
        shutil.rmtree(p, ignore_errors=True)
        total -= size
        removed.append(p)
    return removed
