"""CUDA kernels and the API calls that launched them.

One row per CUPTI kernel record. Its launch is the CUDA runtime or driver API row with the
same ``correlationId`` in the same process (correlationIds repeat across processes; the
kernel's ``globalPid`` equals the launch's ``globalTid`` with the low 24 bits cleared).
nsys 2022.2 writes some launches twice (``cudaLaunchKernel`` and the nested
``cudaLaunchKernel_v7000``, one correlationId): the kernel keeps ONE launch, the narrowest
call, so it counts once; every range that contains either call contains the narrowest.
Kernels without a launch row (trimmed exports) are kept, with ``launch_tid == -1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.activity_reads import ints_job
from nsys_parsers.arrays import sorted_unique
from nsys_parsers.cache import ExportCache, Part
from nsys_parsers.fetch import gather_ints
from nsys_parsers.kernel_groups import kernel_name_column
from nsys_parsers.names import kernel_names
from nsys_parsers.reader import Reader, rowid_chunks
from nsys_parsers.schema import KERNEL_TABLE, LOW24


@dataclass(frozen=True)
class KernelData:
    start: np.ndarray
    end: np.ndarray
    name_code: np.ndarray  # index into names
    names: list[str]
    global_pid: np.ndarray
    launch_tid: np.ndarray  # globalTid of the launch call, -1 if none
    launch_start: np.ndarray
    launch_end: np.ndarray
    name_kind: str
    notes: list[str] = field(default_factory=list)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def __len__(self) -> int:
        return int(self.start.size)

    def take(self, keep: np.ndarray) -> KernelData:
        """The kernels at indices ``keep`` (same name table)."""
        return KernelData(start=self.start[keep], end=self.end[keep],
                          name_code=self.name_code[keep], names=self.names,
                          global_pid=self.global_pid[keep], launch_tid=self.launch_tid[keep],
                          launch_start=self.launch_start[keep],
                          launch_end=self.launch_end[keep], name_kind=self.name_kind,
                          notes=self.notes)


def join_launches(k_pid: np.ndarray, k_corr: np.ndarray, r_start: np.ndarray,
                  r_end: np.ndarray, r_tid: np.ndarray, r_corr: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each kernel, the narrowest launch call with its correlationId in its process:
    (launch globalTid, call start, call end), -1 where there is none."""
    n = k_pid.size
    l_tid = np.full(n, -1, dtype=np.int64)
    l_start = np.full(n, -1, dtype=np.int64)
    l_end = np.full(n, -1, dtype=np.int64)
    if n == 0 or r_corr.size == 0:
        return l_tid, l_start, l_end
    r_pid = r_tid & ~np.int64(LOW24)
    # Small integer codes for processes, so that (process, correlationId) packs in one int64.
    pids = sorted_unique(np.concatenate([sorted_unique(r_pid), sorted_unique(k_pid)]))
    r_code, k_code = np.searchsorted(pids, r_pid), np.searchsorted(pids, k_pid)
    corr_max = int(max(r_corr.max(initial=0), k_corr.max(initial=0))) + 1
    min_corr = min(int(r_corr.min(initial=0)), int(k_corr.min(initial=0)))
    if corr_max * len(pids) < 2**62 and min_corr >= -1:
        r_key = r_code * corr_max + r_corr
        k_key = k_code * corr_max + k_corr
    else:  # pragma: no cover - astronomically large ids
        both = np.unique(np.stack([np.concatenate([r_code, k_code]),
                                   np.concatenate([r_corr, k_corr])], axis=1), axis=0,
                         return_inverse=True)[1].ravel()
        r_key, k_key = both[: r_code.size], both[r_code.size:]
    order = np.argsort(r_key, kind="stable")
    sk = r_key[order]
    if sk.size > 1 and bool((sk[1:] == sk[:-1]).any()):  # a launch recorded twice
        order = np.lexsort((r_end - r_start, r_key))  # by key, narrowest call first
    sorted_key = r_key[order]
    pos = np.searchsorted(sorted_key, k_key, side="left")
    pos_c = np.minimum(pos, sorted_key.size - 1)
    hit = (sorted_key[pos_c] == k_key) & (k_corr >= 0)
    src = order[pos_c[hit]]
    l_tid[hit] = r_tid[src]
    l_start[hit] = r_start[src]
    l_end[hit] = r_end[src]
    return l_tid, l_start, l_end


def build_kernels(export, kernel_cols: list[np.ndarray], launch_cols: list[np.ndarray] | None,
                  name_kind: str, notes: list[str]) -> KernelData:
    """KernelData from the raw columns of KERNELS and LAUNCHES reads."""
    s, e, n, p, c = kernel_cols
    names, codes = kernel_names(export, n)
    if launch_cols is not None:
        rs, re_, rt, rc = launch_cols
        lt, ls, le = join_launches(p, c, rs, re_, rt, rc)
    else:
        lt = ls = le = np.full(s.size, -1, dtype=np.int64)
    return KernelData(start=s, end=e, name_code=codes, names=names, global_pid=p,
                      launch_tid=lt, launch_start=ls, launch_end=le, name_kind=name_kind,
                      notes=list(notes))


def _read_durations(export, name_kind: str, workers: int
                    ) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    name_col, notes = kernel_name_column(export, name_kind)
    sql = Q.KERNEL_DURATIONS.sql(export, name_col=name_col)
    with Reader(export.path, workers=workers) as rd:
        d, n = gather_ints([rd.submit(ints_job(sql, ["d", "n"], b))
                            for b in rowid_chunks(export.db, KERNEL_TABLE)], 2)
    names, codes = kernel_names(export, n)
    return names, codes, d, notes


def kernel_names_by_kind(export, name_kind: str, workers: int = 2
                         ) -> tuple[np.ndarray, list[str], list[str]]:
    """(name code per kernel, names, notes) for ``name_kind``, in table order."""
    names, codes, _, notes = _read_durations(export, name_kind, workers)
    return codes, names, notes


def kernel_durations_part(name_kind: str) -> str:
    """The cache part of the plain kernel summary's columns for ``name_kind``."""
    return f"kernel_durations.{name_kind}"


def load_kernel_durations(export, *, name_kind: str = "demangled", workers: int = 2,
                          cache: ExportCache | None = None
                          ) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    """Just what a plain kernel summary needs: (names, name code per kernel, durations, notes),
    from ``cache`` when it has them (stored there when read)."""
    part_name = kernel_durations_part(name_kind)
    if cache is not None:
        part = cache.get(part_name)
        if part is not None:
            return (part.strings["names"], part.arrays["code"], part.arrays["duration"],
                    list(part.meta.get("notes", [])))
    names, codes, d, notes = _read_durations(export, name_kind, workers)
    if cache is not None:
        cache.put(part_name, Part(arrays={"code": codes, "duration": d},
                                  strings={"names": names}, meta={"notes": notes}))
    return names, codes, d, notes
