"""Parameters that several analyses take (their command-line options are alike
everywhere)."""

from __future__ import annotations

from nsys_parsers.schema import ATTRIBUTIONS
from reports.analysis import Param

ATTRIBUTION = Param(
    "attribution", ("--attribution",), "all: a kernel counts in every range that encloses its "
    "launch (as nsys nvtx_kern_sum); innermost: only in its deepest range.", default="all",
    choices=ATTRIBUTIONS)
