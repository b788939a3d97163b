"""Typed errors. Every message says what happened and what to do next.

The CLI (``profile_cli.app.main``) is the one place that turns these into ``Error: ...`` on
stderr and exit code 1; library code raises them and never prints.
"""

from __future__ import annotations


class NsysMineError(Exception):
    """Base class of every error the user can cause or fix."""


class ExportNotFound(NsysMineError):
    """The path does not exist or is not a regular file."""


class NotAnExport(NsysMineError):
    """The file is not an SQLite database, or an SQLite database that nsys did not write."""


class PartialExport(NsysMineError):
    """nsys started writing this export but did not finish (a failed ``nsys export``)."""


class NsysNotFound(NsysMineError):
    """A report (.nsys-rep/.qdrep) needs the nsys binary to be exported, and none was found."""


class ExportFailed(NsysMineError):
    """``nsys export`` ran but did not produce a usable SQLite file."""


class MissingData(NsysMineError):
    """The export lacks the tables a report needs (that kind of activity was not traced)."""


class RangeNotFound(NsysMineError):
    """A range name given by the user does not exist in the export."""


class BadOption(NsysMineError):
    """An option value is invalid (unknown format, bad TOML rules file, ...)."""


class OverBudget(NsysMineError):
    """An answer would need more memory than the budget (``nsys_parsers.budget``)."""


def closest_names(name: str, choices: list[str] | tuple[str, ...], n: int = 5) -> list[str]:
    """The choices closest to ``name`` (difflib), else those containing it: for hints."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=n, cutoff=0.5)
    if not close:
        low = name.lower()
        close = [c for c in choices if low and low in c.lower()][:n]
    return close


def closest_hint(name: str, choices: list[str] | tuple[str, ...], n: int = 5) -> str:
    """``"; closest: 'a', 'b'"`` for an error message, or ``""`` when nothing is close."""
    close = closest_names(name, choices, n)
    return f"; closest: {', '.join(repr(c) for c in close)}" if close else ""
