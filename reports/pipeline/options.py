"""Options and parameters, each declared once: ``Param`` (name, flags, help, type, default,
choices, limits), from which the command line's options, the MCP tools' input schemas,
docs/CLI.md and the README's table are made; ``OPTIONS``, the analysis options an export is
read with (an analysis names those it honours: ``Analysis.options``), as ``AnalysisOptions``;
and the parameters several analyses share (``ATTRIBUTION``, ``ALPHA``, ``BY``). No heavy
imports: the command line declares its options from here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsys_parsers.errors import BadOption
from nsys_parsers.schema import ATTRIBUTIONS, GRAPH_ATTRIBUTIONS, NAME_KINDS

MERGE_MODES = ("off", "on", "auto")
# The help panels options are shown in.
READING_PANEL = "Reading the export"
VERDICTS_PANEL = "Verdicts"


@dataclass(frozen=True)
class Param:
    """One option or parameter: a keyword of an analysis's ``run`` (or an ``AnalysisOptions``
    field), a command-line option (or, with ``argument``, a positional argument) and an MCP
    tool argument (its long flag in snake case)."""

    name: str
    flags: tuple[str, ...]  # e.g. ("--range",); the metavar for an argument
    help: str
    type: Any = str  # str, int, float, bool or Path
    default: Any = None
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    multiple: bool = False  # repeatable: a list of values
    minimum: float | None = None
    maximum: float | None = None
    panel: str = READING_PANEL
    argument: bool = False
    required: bool = False
    writes: bool = False  # a file the analysis writes (check --junit): not for read-only callers
    executes: bool = False  # a program to run (--nsys): not for callers that may not run one
    # connects to another machine or submits jobs (ranks --scheduler, --slurm-*): only for
    # callers that may (an MCP server started with --allow-runs)
    reaches: bool = False
    export: bool = False  # an export the pipeline opens too: ``run`` gets its Session


OPTIONS: tuple[Param, ...] = (
    Param("within", ("--within",), "Only what ran inside instances of this NVTX range (e.g. "
          "`measure`, to leave warmup steps out).", metavar="RANGE"),
    Param("merge_op_ids", ("--merge-op-ids",), "One name per PyTorch operator: drop the "
          "per-call suffixes (`, seq = N`, `, op_id = N`, `, sizes = ...`) from range names. "
          "auto: when the names look like an emit_nvtx capture.", default="off",
          choices=MERGE_MODES),
    Param("name_kind", ("--name-kind",), "Kernel names: short, demangled (as nsys prints "
          "them) or mangled.", default="demangled", choices=NAME_KINDS, metavar="KIND"),
    Param("rules", ("--rules",), "TOML file with extra kernel-category rules (tried before the "
          "built-in ones).", type=Path, metavar="FILE"),
    Param("depth", ("--depth",), "Only range instances at nesting depth <= N (1 = outermost on "
          "its thread; module ranges of --nvtx modules: their level, the model 1).", type=int,
          minimum=1, metavar="N"),
    Param("match", ("--match",), "Only ranges whose name matches this glob pattern (e.g. "
          "'aten::*'; repeatable).", multiple=True, metavar="GLOB"),
    Param("nsys", ("--nsys",), "The nsys binary that exports a .nsys-rep report to SQLite "
          "(default: $NSYS, PATH, CUDA/Nsight folders, cached installs).", metavar="PATH",
          executes=True),
    Param("cache", ("--cache/--no-cache",), "Keep the columns read from the export in the user "
          "cache dir ($NSYS_MINE_CACHE_DIR, default ~/.cache/nsys-mine/columns; never next to "
          "the export) and answer the next questions from there. --no-cache reads the export "
          "and writes nothing.", type=bool, default=True),
    # a panel of its own: its long name would narrow the help column of the others
    Param("graph_attribution", ("--graph-attribution",), "Where the kernels of CUDA graphs "
          "count: launch (in the NVTX ranges around the graph's launch, as nsys) or capture "
          "(in those open when the graph and its nodes were captured).", default="launch",
          choices=GRAPH_ATTRIBUTIONS, metavar="WHERE", panel="CUDA graphs"),
)

# Parameters several analyses take (alike everywhere).
ATTRIBUTION = Param(
    "attribution", ("--attribution",), "all: a kernel counts in every range that encloses its "
    "launch (as nsys nvtx_kern_sum); innermost: only in its deepest range.", default="all",
    choices=ATTRIBUTIONS)
ALPHA = Param("alpha", ("--alpha",), "Significance level of the Mann-Whitney U test a regression "
              "must pass.", type=float, default=0.05, minimum=1e-6, maximum=0.5,
              panel=VERDICTS_PANEL)
BY_KEYS = ("device", "process", "stream")
BY = Param("by", ("--by",), "Split the rows by device, process or stream (one more key "
           "column: device; pid; device and stream).", choices=BY_KEYS, metavar="KEY")


@dataclass(frozen=True)
class AnalysisOptions:
    """The values of ``OPTIONS`` (one field each, same name and default): how to look at an
    export. ``within``: only what ran inside instances of this range. ``merge_op_ids``: off,
    on or auto: one name per operator. ``name_kind``: kernel names. ``rules``: a TOML file of
    extra kernel-category rules. ``nsys``: the nsys binary that exports ``.nsys-rep`` reports.
    ``depth``/``match``: which range instances are shown. ``cache``: keep the columns read in
    the user cache dir (``nsys_parsers.cache``). ``graph_attribution``: where the kernels of
    CUDA graphs count (``launch``, as nsys, or ``capture``)."""

    within: str | None = None
    merge_op_ids: str = "off"
    name_kind: str = "demangled"
    rules: str | os.PathLike[str] | None = None
    depth: int | None = None
    match: tuple[str, ...] = ()
    nsys: str | None = None
    cache: bool = True
    graph_attribution: str = "launch"

    def __post_init__(self) -> None:
        if isinstance(self.merge_op_ids, bool):
            object.__setattr__(self, "merge_op_ids", "on" if self.merge_op_ids else "off")
        if self.merge_op_ids not in MERGE_MODES:
            raise BadOption(f"--merge-op-ids {self.merge_op_ids!r}: use one of "
                            f"{', '.join(MERGE_MODES)}")
        if self.graph_attribution not in GRAPH_ATTRIBUTIONS:
            raise BadOption(f"--graph-attribution {self.graph_attribution!r}: use one of "
                            f"{', '.join(GRAPH_ATTRIBUTIONS)}")
        if self.depth is not None and self.depth < 1:
            raise BadOption(f"--depth {self.depth}: depths start at 1 (the outermost ranges)")
        object.__setattr__(self, "match", tuple(self.match or ()))

    @property
    def filtered(self) -> bool:
        return self.depth is not None or bool(self.match)


def option(name: str) -> Param:
    """The declaration of the analysis option ``name``."""
    return next(p for p in OPTIONS if p.name == name)

