"""The machine formats written a chunk at a time (``csv_chunks``, ``json_chunks``) give the
text of the whole-list writers, where a later chunk needs values made plain too."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reports.render.writers import csv_chunks, json_chunks, to_csv, to_json
from reports.report import ColumnRows


def column_rows(rows: list[dict], columns: list[str]) -> ColumnRows:
    return ColumnRows(len(rows), {c: (lambda sl, c=c: [r.get(c) for r in rows[sl]])
                                  for c in columns})


@pytest.mark.parametrize("n", [0, 1, 7, 8, 23])
def test_chunks_write_the_text_of_the_whole_list(n, monkeypatch):
    monkeypatch.setattr(ColumnRows, "CHUNK", 4)
    columns = ["name", "total_ns", "share"]
    rows = [{"name": f"k{i}, \"quoted\" é", "total_ns": np.int64(i * 10**9),
             "share": float("nan") if i == 6 else i / 3, "extra": i} for i in range(n)]
    want_json = to_json([{c: r.get(c) for c in columns} for r in rows])
    for given in (rows, column_rows(rows, columns)):
        assert "".join(json_chunks(given, columns)) == want_json
        assert "".join(csv_chunks(given, columns)) == to_csv(rows, columns)
    back = json.loads(want_json)
    assert len(back) == n and all(isinstance(r["total_ns"], int) for r in back)
    if n > 6:  # NaN (in the second chunk) is null, numpy integers are numbers
        assert back[6]["share"] is None and back[5]["total_ns"] == 5 * 10**9
    if n == 0:
        assert want_json == "[\n]\n"
