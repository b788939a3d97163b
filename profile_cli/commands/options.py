"""The analysis options every export command shares: how to read an export and what to show
(``reports.options.AnalysisOptions``), declared once for the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from nsys_parsers.schema import NAME_KINDS
from profile_cli.commands.output import choice, option_group
from reports.options import GRAPH_ATTRIBUTIONS, MERGE_MODES, AnalysisOptions

ANALYSIS_PANEL = "Reading the export"

RulesOpt = Annotated[Optional[Path], typer.Option(
    "--rules", dir_okay=False, metavar="FILE", rich_help_panel=ANALYSIS_PANEL,
    help="TOML file with extra kernel-category rules (tried before the built-in ones).")]
WithinOpt = Annotated[Optional[str], typer.Option(
    "--within", metavar="RANGE", rich_help_panel=ANALYSIS_PANEL,
    help="Only what ran inside instances of this NVTX range (e.g. `measure`, to leave warmup "
         "steps out).")]
MergeOpt = Annotated[str, typer.Option(
    "--merge-op-ids", rich_help_panel=ANALYSIS_PANEL, **choice(MERGE_MODES),
    help="One name per PyTorch operator: drop the per-call suffixes (`, seq = N`, "
         "`, op_id = N`, `, sizes = ...`) from range names. auto: when the names look like "
         "an emit_nvtx capture.")]
NameKindOpt = Annotated[str, typer.Option(
    "--name-kind", rich_help_panel=ANALYSIS_PANEL, **choice(NAME_KINDS, "KIND"),
    help="Kernel names: short, demangled (as nsys prints them) or mangled.")]
NsysOpt = Annotated[Optional[str], typer.Option(
    "--nsys", metavar="PATH", rich_help_panel=ANALYSIS_PANEL,
    help="The nsys binary that exports a .nsys-rep report to SQLite (default: $NSYS, PATH, "
         "CUDA/Nsight folders, cached installs).")]
DepthOpt = Annotated[Optional[int], typer.Option(
    "--depth", min=1, metavar="N", rich_help_panel=ANALYSIS_PANEL,
    help="Only range instances at nesting depth <= N (1 = outermost on its thread).")]
MatchOpt = Annotated[Optional[List[str]], typer.Option(
    "--match", metavar="GLOB", rich_help_panel=ANALYSIS_PANEL,
    help="Only ranges whose name matches this glob pattern (e.g. 'aten::*'; repeatable).")]
CacheOpt = Annotated[bool, typer.Option(
    "--cache/--no-cache", rich_help_panel=ANALYSIS_PANEL,
    help="Keep the columns read from the export in the user cache dir ($NSYS_MINE_CACHE_DIR, "
         "default ~/.cache/nsys-mine/columns; never next to the export) and answer the next "
         "questions from there. --no-cache reads the export and writes nothing.")]
# A panel of its own: its long name would narrow the help column of the others.
GraphAttributionOpt = Annotated[str, typer.Option(
    "--graph-attribution", rich_help_panel="CUDA graphs",
    **choice(GRAPH_ATTRIBUTIONS, "WHERE"),
    help="Where the kernels of CUDA graphs count: launch (in the NVTX ranges around the "
         "graph's launch, as nsys) or capture (in those open when the graph and its nodes "
         "were captured).")]
# Give a command the analysis options it names (``only=``); it receives ``analysis``.
analysis_options = option_group(AnalysisOptions, {
    "within": WithinOpt, "merge_op_ids": MergeOpt, "name_kind": NameKindOpt,
    "rules": RulesOpt, "depth": DepthOpt, "match": MatchOpt, "nsys": NsysOpt,
    "cache": CacheOpt, "graph_attribution": GraphAttributionOpt,
}, "analysis", convert={"match": lambda v: tuple(v or ()),
                        "rules": lambda v: v})


