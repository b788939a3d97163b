"""What an analysis is: one module of ``reports.analyses`` that declares itself (``ANALYSIS``).

An ``Analysis`` says what it needs of an export (column groups of ``nsys_parsers.trace``),
which of the shared options apply (``AnalysisOptions`` fields), its own parameters
(``Param``), its columns (units in the names: the JSON keys and CSV header), its view for
people, and computes its answer (``run``) from an open ``Session``. Everything else comes from
the declaration: the command ``nsys-mine NAME`` with its ``--help``, its MCP tool, its row in
the README and docs/CLI.md, its JSON Schema and the rule keys ``check`` accepts (``checks``).
docs/ARCHITECTURE.md walks through adding one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

from reports.module_tree import TREE_COLUMNS, is_tree
from reports.pipeline.options import READING_PANEL, VERDICTS_PANEL, AnalysisOptions, Param
from reports.pipeline.report import MULTI_COLUMN, Report
from reports.pipeline.rules import CheckKey
from reports.render import View

__all__ = ["INPUTS", "READING_PANEL", "VERDICTS_PANEL", "Analysis", "Param", "first_paragraph"]

INPUTS = ("none", "export", "exports", "job")


def first_paragraph(text: str) -> str:
    """The first paragraph of a help text, on one line."""
    return " ".join(text.strip().split("\n\n")[0].split())


@dataclass(frozen=True)
class Analysis:
    """One question (see the module docstring). ``inputs``: ``none`` (no export),
    ``export`` (one: ``run(session, ...)``), ``exports`` (one or several, or sweep folders:
    each answered as one, one table with a ``config`` column) or ``job`` (one export:
    ``run(session, ...)``; the exports of one job, several or a folder of them:
    ``run_job(paths, options, ...)``, which opens them itself, e.g. on Dask workers). Every
    parameter with ``export`` set is opened beside the first with the same options, and
    ``run`` gets its session (None when it is not given). ``title`` (or ``Report.title``)
    heads the table; ``exit_code(report, params)`` and ``outputs(report, params, source)``
    (files a CI gate writes) are for gates."""

    name: str
    help: str
    run: Callable[..., Report]
    columns: list[str]
    view: View | None = None
    inputs: str = "export"
    input_name: str = "export"  # the first export's argument (its metavar in --help docs)
    needs: tuple[str, ...] = ()
    options: tuple[str, ...] = ("nsys",)
    defaults: dict[str, Any] = field(default_factory=dict)
    params: tuple[Param, ...] = ()
    title: str = ""
    order: int = 100
    default_top: Optional[int] = None  # the --top default of the command (None: 20 rows)
    # the answer's peak memory above budget.BASE_BYTES (cold or warm, the larger, with the
    # column cache) per row of the tables of its first load, the most of the benchmark's
    # shallow x300, x1200 and x4800 files (compare and diff: two files; docs/PERFORMANCE.md):
    # checked against the memory budget before anything is read (nsys_parsers.budget; times
    # its IN_MEMORY without a cache); 0: not checked
    bytes_per_row: int = 100
    checks: tuple[CheckKey, ...] = ()
    exit_code: Callable[[Report, dict[str, Any]], int] | None = None
    outputs: Callable[[Report, dict[str, Any], Path], None] | None = None
    # the exports of one job (``inputs`` job): run_job(paths, options, **params)
    run_job: Callable[..., Report] | None = None
    # the options an export is read with, from what lies beside it (the profile sidecar):
    # prepare(options, source) -> (options, notes)
    prepare: Callable[[AnalysisOptions, Path], tuple[AnalysisOptions, list[str]]] | None = None
    # parameters checked (and made ready) before any export is read:
    # validate(params, sources) -> params
    validate: Callable[[dict[str, Any], list[Path]], dict[str, Any]] | None = None
    # the columns and view of an answer whose shape depends on its parameters (``ranges
    # --instances``, ``--by``): shape(params) -> (columns, view)
    shape: Callable[[dict[str, Any]], tuple[list[str], View | None]] | None = None
    # the view of an answer whose rows are a module tree (``reports.module_tree.as_tree``)
    tree_view: View | None = None
    # an answer that is one object (``Report.obj``, ``info``): what a table of it shows
    people: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # JSON types of columns the naming conventions of ``reports.pipeline.contract`` do not
    # cover, or that only some answers carry (a module tree's ``depth``): column ->
    # "string", "integer", "number", "boolean", "object", "array" or "any"
    column_types: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.inputs not in INPUTS:
            raise ValueError(f"{self.name}: inputs must be one of {INPUTS}")
        if (self.inputs == "job") != (self.run_job is not None):
            raise ValueError(f"{self.name}: run_job is for (and needed by) inputs 'job'")

    @property
    def summary(self) -> str:
        """The first paragraph of the help: one line in the README and `--help`."""
        return first_paragraph(self.help)

    def shaped(self, params: dict[str, Any]) -> tuple[list[str], View | None]:
        """The columns and view of the answer to ``params``."""
        if self.shape is None:
            return list(self.columns), self.view
        return self.shape(self.fill(params))

    def view_of(self, report: Report, params: dict[str, Any]) -> View | None:
        """How people see ``report`` (the answer to ``params``): the declared view, that of
        a module tree when its rows are one, and for the rows of several exports the same
        with their ``config`` first, in export order (each export's rows ranked already)."""
        view = self.shaped(params)[1]
        if self.tree_view is not None and set(TREE_COLUMNS) <= set(report.columns) \
                and is_tree(list(report.rows)):
            view = self.tree_view
        if view is not None and report.columns[:1] == [MULTI_COLUMN]:
            view = replace(view, columns=[MULTI_COLUMN, *view.columns], pinned=0, rank_by=())
        return view

    def fill(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with the defaults of those not given (unknown ones refused)."""
        known = {p.name: p for p in self.params}
        unknown = set(params) - set(known)
        if unknown:
            raise TypeError(f"{self.name} has no parameter {', '.join(sorted(unknown))}")
        return {name: params.get(name, p.default) for name, p in known.items()}

    def finish(self, report: Report, params: dict[str, Any]) -> Report:
        """``report`` with the title and columns the declaration gives it."""
        if report.title is None:
            report.title = self.title
        if report.obj is None and not report.columns:
            report.columns = self.shaped(params)[0]
        return report
