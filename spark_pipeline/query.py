"""``etl query``: Spark SQL over the output tables, printed as text, JSON or CSV.

Every table directory under ``--out`` is registered as a temporary view named after
it. Only the first ``limit`` rows are collected, so a careless ``SELECT *`` over a big
table prints a page, not the table.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

from pyspark.sql import Row, SparkSession

from spark_pipeline.tables import TABLE_NAMES


def register_tables(spark: SparkSession, out_dir: Path) -> list[str]:
    """Register each table found under ``out_dir``; return their names."""
    if not out_dir.is_dir():
        raise FileNotFoundError(f"no tables at {out_dir}: run `etl run` first")
    found = []
    for name in TABLE_NAMES:
        path = out_dir / name
        if path.is_dir():
            spark.read.parquet(str(path)).createOrReplaceTempView(name)
            found.append(name)
    if not found:
        raise FileNotFoundError(f"no tables at {out_dir}: run `etl run` first")
    return found


def plain(value: object) -> object:
    """A JSON-friendly version of a value Spark returns."""
    if isinstance(value, datetime):
        # PySpark hands timestamps back naive, in the local time zone; print them in UTC.
        return (value if value.tzinfo else value.astimezone()).astimezone(UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, Row):
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def run_query(
    spark: SparkSession, sql: str, limit: int
) -> tuple[list[str], list[list[object]], bool]:
    """(columns, rows as plain values, whether more rows existed than ``limit``)."""
    df = spark.sql(sql)
    rows = df.limit(limit + 1).collect()
    return df.columns, [[plain(v) for v in r] for r in rows[:limit]], len(rows) > limit


def _cell(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """An aligned text table, numbers right-aligned."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(r[i], int | float) or r[i] is None for r in rows)
        for i in range(len(columns))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return " | ".join(parts).rstrip()

    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([line(list(columns)), sep, *(line(r) for r in cells)])


def format_json(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """One JSON object per line."""
    return "\n".join(json.dumps(dict(zip(columns, r, strict=True))) for r in rows)


def format_csv(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """RFC 4180 CSV with a header row; lists and maps as JSON."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in rows:
        writer.writerow(["" if v is None else _cell(v) for v in r])
    return buf.getvalue().rstrip("\n")
