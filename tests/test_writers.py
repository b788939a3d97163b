"""The machine formats written a chunk at a time (``csv_chunks``, ``json_chunks``) give the
text of the whole-list writers, where a later chunk needs values made plain too."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reports.render.rows import ColumnRows
from reports.render.writers import csv_chunks, json_chunks, to_csv, to_json


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


def test_csv_is_what_the_csv_module_writes_whatever_the_columns_hold(monkeypatch):
    """CSV chunks of ints, strings and None are joined without ``csv.writer`` (the long
    answers' columns); every other chunk goes through it. Either way the text is the csv
    module's, byte for byte: quoting (commas, quotes, newlines, a lone empty field), None
    as an empty field, bools, floats, NaN, one column, chunks of both kinds in one table."""
    import csv
    import io
    import random

    from reports.render import writers

    monkeypatch.setattr(ColumnRows, "CHUNK", 5)
    joined = []
    real = writers._joined
    monkeypatch.setattr(writers, "_joined",
                        lambda v, q: joined.append(real(v, q) is not None) or real(v, q))
    strings = ["a", "", None, " x ", "a,b", 'q"q', "l\nm", "a\rb", "\t", "é", "forward pass",
               "100% %d %s"]
    draw = {"int": lambda r: r.randint(-10**15, 10**15),
            "int or none": lambda r: r.choice([None, r.randint(0, 99)]),
            "str": lambda r: r.choice(strings),
            "mixed": lambda r: r.choice([*strings, 1, 2.5]),
            "bool": lambda r: r.choice([True, False, None]),
            "float": lambda r: r.choice([1.5, float("nan"), None, 3])}
    rnd = random.Random(7)
    for _ in range(200):
        kinds = [rnd.choice(list(draw)) for _ in range(rnd.randint(1, 4))]
        columns = [f"c{i}" for i in range(len(kinds))]
        rows = [{c: draw[k](rnd) for c, k in zip(columns, kinds)}
                for _ in range(rnd.randint(0, 17))]
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([[None if isinstance(v, float) and v != v else v
                           for v in (r[c] for c in columns)] for r in rows])
        for given in (rows, column_rows(rows, columns)):
            assert "".join(csv_chunks(given, columns)) == buf.getvalue(), kinds
    assert True in joined and False in joined  # both ways were taken
