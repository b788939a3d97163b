"""Every analysis, one module each. A module of this package that defines ``ANALYSIS`` (a
``reports.analysis.Analysis``) is discovered here: it is a command of ``nsys-mine``, a method
of ``Session`` and a row of the docs, in the order of ``Analysis.order``."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from pathlib import Path

from nsys_parsers.errors import BadOption, closest_hint
from reports.analysis import Analysis


@functools.cache
def all_analyses() -> tuple[Analysis, ...]:
    """The analyses of this package's modules, in command order."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        analysis = getattr(module, "ANALYSIS", None)
        if isinstance(analysis, Analysis):
            found.append(analysis)
    return tuple(sorted(found, key=lambda a: (a.order, a.name)))


def find(name: str) -> Analysis | None:
    """The analysis called ``name`` (None: none is): from its own module when it is named
    as its command (``nvtx-kernels`` in ``nvtx_kernels.py``), without importing the others;
    else from all of them."""
    module = name.replace("-", "_")
    if module.isidentifier() and (Path(__file__).parent / f"{module}.py").exists():
        analysis = getattr(importlib.import_module(f"{__name__}.{module}"), "ANALYSIS", None)
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
