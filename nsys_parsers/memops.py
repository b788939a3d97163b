"""CUDA memory operations (memcpy and memset) as columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_parsers.arrays import Rows

# CUPTI memcpy kinds, for exports without ENUM_CUDA_MEMCPY_OPER (older nsys).
MEMCPY_KINDS = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device",
}


@dataclass(frozen=True)
class MemOps(Rows):
    """memcpy rows, then memset rows (``memset`` true), in table order."""

    start: np.ndarray
    end: np.ndarray
    bytes: np.ndarray
    kind: np.ndarray  # the memcpy kind (copyKind); 0 for memset
    memset: np.ndarray  # bool
    device: np.ndarray
    stream: np.ndarray
    pid: np.ndarray  # globalPid
    correlation: np.ndarray
    kind_labels: dict[int, str]


