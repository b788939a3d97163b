"""Kernel families: kernel names matched without what differs between builds and tile
choices, so that two runs (or two precisions) line up kernel by kernel (``compare``,
``diff``)."""

from __future__ import annotations

import re

_SHAPE_TOKEN = re.compile(r"^(?:[a-z]*\d+x\d+(?:x\d+)*|nn|nt|tn|tt|stage\d+|v\d+)$")


def kernel_family(name: str) -> str:
    """A kernel name without what differs between builds and tile choices: template
    arguments, the parameter list, the return type, and underscore-separated shape tokens
    (``128x64``, ``tilesize128x128x8``, ``nn``/``tn``, ``stage3``) and a trailing instance
    number (``triton_poi_fused_add_0``)."""
    text = re.sub(r"\((?:anonymous namespace|anonymous)\)::|<unnamed>::", "", name)
    while True:  # innermost template argument lists first
        stripped = re.sub(r"<[^<>]*>", "", text)
        if stripped == text:
            break
        text = stripped
    text = re.sub(r"\(.*\)\s*$", "", text).strip()
    text = re.sub(r"^(?:void|static|__global__)\s+", "", text)
    tokens = text.split("_")
    kept = [t for t in tokens if not _SHAPE_TOKEN.match(t)]
    while len(kept) > 1 and kept[-1].isdigit():
        kept.pop()
    return "_".join(kept) or name
