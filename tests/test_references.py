"""Every dotted reference to our modules in the code (``reports.page.model.Page`` in a
docstring, ``nsys_parsers.trace.GROUPS`` in a comment) and in docs/ARCHITECTURE.md names
something that exists: a module, or an attribute of one."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nsys_parsers", "reports", "profile_cli", "nvtx_model")
REFERENCE = re.compile(r"\b((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def resolves(ref: str) -> bool:
    """Whether the longest importable module prefix of ``ref`` has the rest as attributes
    (a torch-only module that cannot be imported here counts as resolved)."""
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name or (exc.name or "").startswith(name + "."):
                continue  # not a module of ours: a shorter prefix may be
            return True  # ours, but needs an optional library (torch) to import
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def references() -> list[tuple[str, str]]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    files.append(ROOT / "docs" / "ARCHITECTURE.md")
    found = []
    for path in files:
        for m in REFERENCE.finditer(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(ROOT)), m.group(1).rstrip(".")))
    return sorted(set(found))


def test_there_are_references_to_check():
    assert len(references()) > 100


def test_every_dotted_reference_to_our_modules_resolves():
    broken = [f"{path}: {ref}" for path, ref in references() if not resolves(ref)]
    assert not broken, broken
