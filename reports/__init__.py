"""Analyses of nsys exports, for Python: ``ask`` (one question of one export, several, or a
job's), ``answer`` (a question of an open ``Session``), ``Memo`` (a resident caller's exports
and answers kept between questions); each returns a ``Report`` (``to_pandas()``).

    from reports import Memo, Session, answer, ask

The package: ``pipeline`` (the declaration, options, session, the path of a question, the
memo, the JSON contract), ``analyses`` (one module per question), ``render`` (tables, CSV,
JSON, markdown, LaTeX), ``page`` (the report page), ``ranks`` (the cross-rank engine), and
the knowledge analyses share (kernel categories, families, module trees, GPU time...)."""

from __future__ import annotations

from typing import Any

_API = {"ask": "reports.pipeline.ask", "answer": "reports.pipeline.ask",
        "Session": "reports.pipeline.session", "Memo": "reports.pipeline.memo",
        "Report": "reports.pipeline.report"}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    """The Python API, imported when first used (the command line imports none of it)."""
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
