"""``AnalysisOptions``: how to look at an export (no heavy imports: the CLI declares these)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from nsys_parsers.errors import BadOption
from nsys_parsers.schema import GRAPH_ATTRIBUTIONS

MERGE_MODES = ("off", "on", "auto")


@dataclass(frozen=True)
class AnalysisOptions:
    """``within``: only what ran inside instances of this range. ``merge_op_ids``: off, on or
    auto (on when the names look like a PyTorch ``emit_nvtx`` capture): one name per operator.
    ``name_kind``: kernel names short, demangled or mangled. ``rules``: a TOML file of extra
    kernel-category rules. ``nsys``: the nsys binary that exports ``.nsys-rep`` reports.
    ``depth``: only range instances at nesting depth <= N (1 = outermost on its thread; module
    ranges: their module level, the model 1).
    ``match``: only ranges whose name matches one of these glob patterns. ``cache``: keep
    the columns read in the user cache dir and reuse them (``nsys_parsers.cache``).
    ``graph_attribution``: the kernels of CUDA graphs count in the NVTX ranges around the
    graph's launch (``launch``, as nsys) or in those open when they were captured
    (``capture``)."""

    within: str | None = None
    merge_op_ids: str = "off"
    name_kind: str = "demangled"
    rules: str | os.PathLike[str] | None = None
    nsys: str | None = None
    depth: int | None = None
    match: tuple[str, ...] = ()
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

    def loads_names(self, need_names: bool) -> bool:
        """Whether the activity is loaded with every range name, for a question that needs
        them (``need_names``) or not: ``within`` and ``match`` need them all."""
        return need_names or self.within is not None or bool(self.match)

    @property
    def filtered(self) -> bool:
        return self.depth is not None or bool(self.match)
