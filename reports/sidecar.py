"""The ``NAME.json`` sidecar that ``nsys-mine profile`` writes beside ``NAME.sqlite``: the run's
config (size, d_model, layers, heads, context, batch, mode, precision, attention, ...), nsys
version and command. Reports read it to know what an export of this project's model is."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from nvtx_model import nvtx_ranges as nv
from reports.pipeline.options import AnalysisOptions


def read_sidecar(export: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The sidecar beside ``NAME.sqlite`` (or ``NAME.nsys-rep``) when there is one with a
    ``config``; else None."""
    path = Path(export)
    side = path.with_name(path.name.rsplit(".", 1)[0] + ".json")
    try:
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("config"), dict) else None


def measured_steps(options: AnalysisOptions, sidecar: dict[str, Any] | None
                   ) -> tuple[AnalysisOptions, list[str]]:
    """For a ``profile`` export (it has a sidecar) and no ``within`` given: only the measured
    steps (``measure``), as ``profile`` and ``sweep`` mine them; and the note that says so."""
    if sidecar is None or options.within is not None:
        return options, []
    return replace(options, within=nv.MEASURE), [
        f"a `nsys-mine profile` export: only the measured steps count (the {nv.MEASURE!r} "
        f"range; warmup steps are left out, as `profile` and `sweep` do); --within RANGE "
        f"chooses another range."]


def config_line(config: dict[str, Any]) -> str:
    """One line for people: ``tiny (d_model 64, 2 layers, 4 heads), context 32, batch 4,
    train, fp32, naive attention, NVTX fine, cpu, 1 warmup + 2 measured steps``."""
    c = config
    return (f"{c.get('size')} (d_model {c.get('d_model')}, {c.get('layers')} layers, "
            f"{c.get('heads')} heads), context {c.get('context')}, batch {c.get('batch')}, "
            f"{c.get('mode')}, {c.get('precision')}, {c.get('attention')} attention, "
            f"NVTX {c.get('nvtx')}, {c.get('device')}, {c.get('warmup')} warmup + "
            f"{c.get('steps')} measured steps")
