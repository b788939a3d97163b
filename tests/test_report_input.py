"""`.nsys-rep` input: exported with real nsys into the user cache, reused, never beside the
report."""

from __future__ import annotations

import os
from pathlib import Path

from reports.pipeline.ask import ask


def test_nsys_rep_is_exported_cached_and_reused(fx, nsys_bin, monkeypatch):
    rep = fx("dlprof_pytorch_rtx2070s_nsys2022.1.nsys-rep")
    before = sorted(p.name for p in rep.parent.iterdir())
    monkeypatch.setenv("NSYS", str(nsys_bin))
    from_rep = ask("kernels", [rep]).rows
    from_sqlite = ask("kernels", [fx("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite")]).rows
    assert [(r["name"], r["instances"], r["total_ns"]) for r in from_rep] == [
        (r["name"], r["instances"], r["total_ns"]) for r in from_sqlite]
    cached = list((Path(os.environ["XDG_CACHE_HOME"]) / "nsys-mine" / "exports").glob("*.sqlite"))
    assert len(cached) == 1
    # second run: the cached export is reused, nsys is not needed
    import nsys_parsers.nsys_tool as tool

    monkeypatch.setattr(tool, "find_nsys", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError("nsys should not run again")))
    assert ask("kernels", [rep]).rows == from_rep
    assert sorted(p.name for p in rep.parent.iterdir()) == before  # nothing written beside it
