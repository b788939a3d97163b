"""Every analysis by name: the modules of ``reports.analyses`` that declare one (``ANALYSIS``,
a ``reports.pipeline.analysis.Analysis``), found by importing them (no list to keep), in the
order of ``Analysis.order``. The pipeline and its callers look analyses up here; the
analyses themselves import nothing of each other."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path

from nsys_parsers.errors import BadOption, closest_hint
from reports.pipeline.analysis import Analysis

PACKAGE = "reports.analyses"


def _package_path() -> list[str]:
    return list(importlib.import_module(PACKAGE).__path__)


@functools.cache
def all_analyses() -> tuple[Analysis, ...]:
    """The analyses of ``reports.analyses``' modules, in command order."""
    found = []
    for info in pkgutil.iter_modules(_package_path()):
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        analysis = getattr(module, "ANALYSIS", None)
        if isinstance(analysis, Analysis):
            found.append(analysis)
    return tuple(sorted(found, key=lambda a: (a.order, a.name)))


def find(name: str) -> Analysis | None:
    """The analysis called ``name`` (None: none is): from its own module when it is named
    as its command (``nvtx-kernels`` in ``nvtx_kernels.py``), without importing the others;
    else from all of them."""
    module = name.replace("-", "_")
    if module.isidentifier() and any((Path(p) / f"{module}.py").exists()
                                     for p in _package_path()):
        analysis = getattr(importlib.import_module(f"{PACKAGE}.{module}"), "ANALYSIS", None)
        if isinstance(analysis, Analysis) and analysis.name == name:
            return analysis
    return next((a for a in all_analyses() if a.name == name), None)


def get(name: str) -> Analysis:
    """The analysis called ``name`` (BadOption naming the closest ones if none is)."""
    analysis = find(name)
    if analysis is None:
        names = [a.name for a in all_analyses()]
        raise BadOption(f"no analysis named {name!r}{closest_hint(name, names)}; the "
                        f"analyses are {', '.join(names)}.")
    return analysis
