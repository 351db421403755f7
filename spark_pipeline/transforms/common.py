"""Helpers shared by transforms: per-event views and time buckets.

Every event row carries ``_lk``, the total order of log lines (see ``extract``);
transforms order by it instead of ``ts`` alone so that µs ties resolve the way the
lines were written.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_pipeline.schemas import EVENT_SCHEMAS


def of_event(events: DataFrame, name: str) -> DataFrame:
    """Rows of one event with that event's fields (those ``events`` kept) plus ``_lk``
    (when ``events`` has it)."""
    schema = EVENT_SCHEMAS[name]
    present = set(events.columns)
    cols = [F.col(f.name) for f in schema.fields if f.name in present]
    lk = [F.col("_lk")] if "_lk" in present else []
    return events.where(F.col("event") == name).select(*cols, *lk)


LK_FIELDS = ("ts", "file", "block", "row")


def in_line_order(key: str = "_lk") -> list[Column]:
    """Sort keys for a line-key struct column: its fields, one by one.

    Same order as sorting by the struct, but Spark sorts on a prefix of the first key
    (``ts``) and compares the rest only on ties; sorting by a struct compares whole structs.
    """
    return [F.col(f"{key}.{name}") for name in LK_FIELDS]


def minute(ts: Column) -> Column:
    """The UTC minute a timestamp falls in (the session time zone is UTC)."""
    return F.date_trunc("minute", ts)


def day(ts: Column) -> Column:
    """Partition column: the UTC date."""
    return F.to_date(ts)


def seconds_between(start: Column, end: Column) -> Column:
    """``end - start`` in seconds as a double, µs exact."""
    return (F.unix_micros(end) - F.unix_micros(start)) / F.lit(1_000_000.0)


def count_if(cond: Column) -> Column:
    """Rows where ``cond`` holds (0, never null, for an empty group)."""
    return F.coalesce(F.sum(cond.cast("long")), F.lit(0)).cast("long")
