"""Plain Python values for JSON and SQLite: numpy/pandas scalars unwrapped, NaN -> None."""

from __future__ import annotations

import math
from typing import Any


def is_missing(value: Any) -> bool:
    """None or a float NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def jsonable(value: Any) -> Any:
    """``value`` with numpy/pandas scalars as Python numbers, NaN as None, tuples as lists
    and dict keys as strings (recursively)."""
    if is_missing(value):
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            return jsonable(value.item())
        except (ValueError, AttributeError):
            pass
    return value
