"""The ranges a page leads with: this project's model ranges (``nvtx_model.nvtx_ranges``'s
contract: step > forward > ... > attention internals) when an export is of its model, else
the ranges with the most time."""

from __future__ import annotations

from nvtx_model.nvtx_ranges import HEADLINE_RANGES


def model_order(names: list[str]) -> dict[str, int] | None:
    """Positions of this project's model ranges when ``names`` come from its model (a
    ``step`` and a ``forward`` range), else None."""
    present = set(names)
    if not {"step", "forward"} <= present:
        return None
    return {n: i for i, n in enumerate(HEADLINE_RANGES) if n in present}


OTHER_RANGES = 10  # ranges in the headline of an export that is not this project's model


def headline_ranges(names: list[str], gpu_ns: dict[str, float]) -> list[str]:
    """The ranges a page leads with: this project's model ranges in nesting order (step >
    forward > ... > attention internals) when the export is of its model, else the
    OTHER_RANGES ranges with the most time."""
    order = model_order(names)
    if order:
        return sorted(order, key=order.__getitem__)
    return sorted(names, key=lambda n: (-gpu_ns.get(n, 0.0), n))[:OTHER_RANGES]
