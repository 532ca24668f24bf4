"""Row-for-row comparison of two projection stores (to check a rebuild)."""

from pathlib import Path

import duckdb

from projections.schema import TABLES, VIEWS

__all__ = ["differences"]


def _quoted(path: str | Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def differences(a: str | Path, b: str | Path) -> dict[str, int]:
    """Tables whose rows differ between the closed stores ``a`` and ``b``: how many rows.

    Rows are compared as multisets (order does not matter, duplicates do). An empty
    answer means the two stores hold exactly the same rows.
    """
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {_quoted(a)} AS a (READ_ONLY)")
        con.execute(f"ATTACH {_quoted(b)} AS b (READ_ONLY)")
        out: dict[str, int] = {}
        for table in (*TABLES, *VIEWS, "meta"):
            row = con.execute(
                f"SELECT (SELECT count(*) FROM (FROM a.{table} EXCEPT ALL FROM b.{table}))"
                f" + (SELECT count(*) FROM (FROM b.{table} EXCEPT ALL FROM a.{table}))"
            ).fetchone()
            if row is not None and row[0]:
                out[table] = int(row[0])
        return out
    finally:
        con.close()
