"""``StringIds`` lookups: the text of name ids (kernel names, NVTX ``textId``s). No numpy."""

from __future__ import annotations

import json
import sqlite3

from nsys_parsers import queries as Q
from nsys_parsers.schema import STRINGS_TABLE, Schema

STRING_CHUNK = 100_000


def strings_by_id(conn: sqlite3.Connection, export: Schema, ids) -> dict[int, str]:
    """``StringIds`` values of the given ids (others are absent from the result)."""
    ids = [int(i) for i in ids if int(i) >= 0]
    if not ids or not export.has_table(STRINGS_TABLE):
        return {}
    out: dict[int, str] = {}
    for start in range(0, len(ids), STRING_CHUNK):
        chunk = json.dumps(ids[start:start + STRING_CHUNK])
        for k, v in conn.execute(Q.STRINGS_BY_ID.sql(export), (chunk,)):
            out[int(k)] = v if isinstance(v, str) else str(v)
    return out
