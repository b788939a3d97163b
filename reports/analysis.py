"""What an analysis is: one module of ``reports.analyses`` that declares itself (``ANALYSIS``).

An ``Analysis`` says what it needs of an export (column groups of ``nsys_parsers.trace``),
which of the shared options apply (``AnalysisOptions`` fields), its own parameters
(``Param``), its columns (units in the names: the JSON keys and CSV header), its view for
people, and computes its answer (``run``) from an open ``Session``. Everything else comes from
the declaration: the command ``nsys-mine NAME`` with its ``--help``, its row in the README
and docs/CLI.md, the rule keys ``check`` accepts (``checks``) and the report page's sections
(``page``). docs/ARCHITECTURE.md walks through adding one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from reports.options import AnalysisOptions
from reports.render import View
from reports.report import Report

if TYPE_CHECKING:
    from reports.session import Session

INPUTS = ("none", "export", "exports", "two", "paths")
# The help panels parameters are shown in.
READING = "Reading the export"
VERDICTS = "Verdicts"


@dataclass(frozen=True)
class Param:
    """A parameter of one analysis: a keyword of its ``run`` and a command-line option (or,
    with ``argument``, a positional argument)."""

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
    panel: str = READING
    argument: bool = False
    required: bool = False


@dataclass
class Rule:
    """One rule of a ``check`` rules file: its assertion (a ``CheckKey``'s key), the range it
    is about (None: the whole export), its name and its validated values."""

    index: int  # 1-based, in file order
    assertion: str
    range: str | None
    name: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """How an export fares against one rule."""

    ok: bool
    observed: Any
    expected: str
    message: str


@dataclass(frozen=True)
class CheckKey:
    """A rule key ``check`` accepts (``dominant_category = "gemm"``): how its value is
    validated (``kind``: count, category, regex, share or limit), whether the rule needs a
    range or a baseline, how it is described when it has no name (``describe(range,
    values)``) and how an export is judged by it (``evaluate(session, rule, baseline,
    alpha) -> Verdict``). ``order``: its place in check's messages."""

    key: str
    kind: str
    evaluate: Callable[..., Verdict]
    describe: Callable[[str, dict[str, Any]], str]
    order: int = 100
    needs_range: bool = False
    needs_baseline: bool = False


@dataclass(frozen=True)
class Analysis:
    """One question (see the module docstring). ``inputs``: ``none`` (no export),
    ``export`` (one), ``exports`` (one or several: one table with a ``config`` column) or
    ``two`` (``run(a, b, ...)``, b may be None) or ``paths`` (``run(paths, options, ...)``:
    the analysis opens its exports itself, e.g. on Dask workers). ``title`` (or
    ``Report.title``) heads the table; ``exit_code(report, params)`` and ``outputs(report,
    params, source)`` (files a CI gate writes) are for gates."""

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
    checks: tuple[CheckKey, ...] = ()
    page: Callable[..., list[Any]] | None = None
    page_order: int = 100
    exit_code: Callable[[Report, dict[str, Any]], int] | None = None
    outputs: Callable[[Report, dict[str, Any], Path], None] | None = None
    # the options an export is read with, from what lies beside it (the profile sidecar):
    # prepare(options, source) -> (options, notes)
    prepare: Callable[[AnalysisOptions, Path], tuple[AnalysisOptions, list[str]]] | None = None
    # parameters checked (and made ready) before any export is read:
    # validate(params, sources) -> params
    validate: Callable[[dict[str, Any], list[Path]], dict[str, Any]] | None = None
    # the columns and view of an answer whose shape depends on its parameters (``ranges
    # --instances``, ``--by``): shape(params) -> (columns, view)
    shape: Callable[[dict[str, Any]], tuple[list[str], View | None]] | None = None

    def __post_init__(self) -> None:
        if self.inputs not in INPUTS:
            raise ValueError(f"{self.name}: inputs must be one of {INPUTS}")

    @property
    def summary(self) -> str:
        """The first paragraph of the help: one line in the README and `--help`."""
        return " ".join(self.help.strip().split("\n\n")[0].split())

    def shaped(self, params: dict[str, Any]) -> tuple[list[str], View | None]:
        """The columns and view of the answer to ``params``."""
        if self.shape is None:
            return list(self.columns), self.view
        return self.shape(self.fill(params))

    def fill(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with the defaults of those not given (unknown ones refused)."""
        known = {p.name: p for p in self.params if not p.argument}
        unknown = set(params) - set(known)
        if unknown:
            raise TypeError(f"{self.name} has no parameter {', '.join(sorted(unknown))}")
        return {name: params.get(name, p.default) for name, p in known.items()}

    def answer(self, *sessions: Session | None, **params: Any) -> Report:
        """The answer for open sessions (none, one, or two for ``two``) and parameters."""
        for s in sessions:
            if s is not None and self.needs:
                s.load(*self.needs)
        params = self.fill(params)
        return self.finish(self.run(*sessions, **params), params)

    def finish(self, report: Report, params: dict[str, Any]) -> Report:
        """``report`` with the title, columns and view the declaration gives it."""
        params = self.fill(params)
        if report.title is None:
            report.title = self.title
        if report.obj is None and (not report.columns or report.view is None):
            columns, view = self.shaped(params)  # unless the answer has its own (a tree)
            report.columns = report.columns or columns
            report.view = report.view if report.view is not None else view
        return report
