"""``AttentionShape``: what the FLOPs of attention depend on (light: the CLI declares it)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from nsys_parsers.errors import BadOption

SHAPE_FIELDS = ("d_model", "heads", "context", "batch")


@dataclass(frozen=True)
class AttentionShape:
    """What the FLOPs of attention depend on: d_model, heads, context and batch (``size``:
    a preset that gives d_model and heads)."""

    size: str | None = None
    d_model: int | None = None
    heads: int | None = None
    context: int | None = None
    batch: int | None = None

    def resolved(self) -> AttentionShape:
        """d_model and heads from the preset where not given."""
        if self.size is None:
            return self
        from nvtx_model.config import PRESETS, preset_name  # only when a preset is given

        name = preset_name(self.size)
        if name is None:
            raise BadOption(f"--size {self.size!r} is not a preset; use one of "
                            f"{', '.join(PRESETS)} or give --d-model and --heads")
        shape = PRESETS[name]
        return replace(self, d_model=self.d_model or shape.d_model,
                       heads=self.heads or shape.num_heads)

    def over(self, config: dict[str, Any] | None) -> AttentionShape:
        """These values, else the sidecar ``config``'s (same keys)."""
        mine, config = self.resolved(), config or {}
        values: dict[str, Any] = {n: _int(config.get(n)) for n in SHAPE_FIELDS
                                  if getattr(mine, n) is None}
        return replace(mine, **values)

    @property
    def missing(self) -> list[str]:
        return [f"--{n.replace('_', '-')}" for n in SHAPE_FIELDS if getattr(self, n) is None]

    def describe(self) -> str:
        return (f"d_model {self.d_model}, {self.heads} heads, context {self.context}, "
                f"batch {self.batch}")


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
