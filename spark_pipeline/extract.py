"""Extract: log files on disk -> one typed DataFrame of events.

Theory of operation: every ``*.jsonl`` and rotated ``*.jsonl.N`` file below the log
directory is read with the explicit ``LINE_SCHEMA`` in PERMISSIVE mode, so a corrupt or
truncated line becomes a row with ``_corrupt_record`` set instead of failing the job.
A line is *corrupt* when it is not JSON, has a value of the wrong type, or lacks a
parseable ``ts`` or an ``event``; corrupt lines are counted and dropped.

Ordering: ``ts`` (µs) decides; ties are broken by the line's position in its file
chain. ``_lk`` is that total order as one struct of fixed-width fields (ts, file rank,
split offset, row id). The file rank is the file's place when files are sorted by chain
(the live file's path), then rotation, oldest first: rotated files are older than the
live one and ``.2`` older than ``.1``. It is computed on the driver from the file list,
so the struct holds no string: every sort, window and shuffle that carries ``_lk``
moves and compares four numbers instead of two paths. Within one file, Spark's split
start offset orders splits and ``monotonically_increasing_id`` grows with the line
inside a split.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from services.common.events import EVENTS
from spark_pipeline.schemas import CORRUPT_COLUMN, LINE_SCHEMA

LOG_NAME: Final = re.compile(r"^(?P<base>.+\.jsonl)(?:\.(?P<rot>\d+))?$")
_ROT_SUFFIX: Final = r"\.jsonl\.(\d+)$"


def rotation_of(path: Path) -> tuple[str, int] | None:
    """(live file name, rotation number: 0 for the live file) or None if not a log."""
    m = LOG_NAME.match(path.name)
    if m is None:
        return None
    return m.group("base"), int(m.group("rot") or 0)


def find_log_files(root: Path) -> list[Path]:
    """Every log file below ``root``, each chain oldest first (``.N`` … ``.1``, live)."""
    if not root.is_dir():
        raise FileNotFoundError(f"log directory {root} does not exist")
    found: list[tuple[str, str, int, Path]] = []
    for path in root.rglob("*"):
        rot = rotation_of(path)
        if rot is not None and path.is_file():
            found.append((str(path.parent), rot[0], -rot[1], path))
    found.sort(key=lambda item: item[:3])
    return [item[3] for item in found]


def file_ranks(paths: Sequence[str]) -> dict[str, int]:
    """Each path's rank in log order: by chain (the path with ``.N`` dropped), oldest first.

    Ranks follow the order of the strings Spark would compare (its ``_metadata.file_path``),
    so ``(ts, rank)`` sorts lines exactly as ``(ts, chain, -rotation)`` did.
    """

    def key(path: str) -> tuple[str, int]:
        m = re.search(_ROT_SUFFIX, path)
        rot = int(m.group(1)) if m else 0
        return re.sub(_ROT_SUFFIX, ".jsonl", path), -rot

    return {p: i for i, p in enumerate(sorted(set(paths), key=key))}


def scan_path(uri: str) -> str:
    """A path as ``DataFrame.inputFiles()`` gives it, spelt as ``_metadata.file_path`` does.

    The two differ only for local files: ``file:///x`` there, ``file:/x`` here.
    """
    return "file:/" + uri.removeprefix("file:///") if uri.startswith("file:///") else uri


def _file_rank(path: Column, ranks: Mapping[str, int]) -> Column:
    """``ranks[path]``; a path missing from it fails the job rather than mis-ordering."""
    pairs = [F.lit(x) for p, r in sorted(ranks.items()) for x in (p, r)]
    found = F.create_map(*pairs)[path]
    return F.coalesce(found, F.raise_error(F.concat(F.lit("no rank for log file "), path)))


def read_raw(
    spark: SparkSession, files: Sequence[Path], columns: Sequence[str] | None = None
) -> DataFrame:
    """All lines, typed, with ``_corrupt`` and the ordering key ``_lk``; nothing dropped.

    ``columns`` (default: all) limits the fields kept; Spark then parses only those, so
    a type error in a field nobody reads does not make its line corrupt.
    """
    if not files:
        raise FileNotFoundError("no *.jsonl or *.jsonl.N log files to read")
    df = (
        spark.read.schema(LINE_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
        .json([str(f) for f in files])
    )
    # inputFiles() lists the paths as the scan names them in _metadata.file_path.
    ranks = file_ranks([scan_path(p) for p in df.inputFiles()])
    # monotonically_increasing_id must be taken straight off the scan, before any shuffle.
    keep = set(df.columns if columns is None else columns) | {"ts", "event", CORRUPT_COLUMN}
    df = df.select(
        *[F.col(c) for c in df.columns if c != "ts" and c in keep],
        F.try_to_timestamp(F.col("ts")).alias("ts"),
        _file_rank(F.col("_metadata.file_path"), ranks).alias("_rank"),
        F.col("_metadata.file_block_start").alias("_block"),
        F.monotonically_increasing_id().alias("_row"),
    )
    corrupt = F.col(CORRUPT_COLUMN).isNotNull() | F.col("ts").isNull() | F.col("event").isNull()
    return df.select(
        *[F.col(c) for c in df.columns if c not in {"_rank", "_block", "_row", CORRUPT_COLUMN}],
        corrupt.alias("_corrupt"),
        line_key(F.col("ts"), F.col("_rank"), F.col("_block"), F.col("_row")).alias("_lk"),
    )


def line_key(ts: Column, rank: Column, block: Column, row: Column) -> Column:
    """The ``_lk`` struct: (ts, file rank, split offset, row id), all fixed-width."""
    return F.struct(
        ts.alias("ts"),
        rank.cast("int").alias("file"),
        block.cast("long").alias("block"),
        row.cast("long").alias("row"),
    )


def valid_events(raw: DataFrame) -> DataFrame:
    """The lines that parsed; ``_corrupt`` is dropped with them."""
    return raw.where(~F.col("_corrupt")).drop("_corrupt")


def events_from_records(spark: SparkSession, records: Sequence[Mapping[str, object]]) -> DataFrame:
    """Build the frame ``valid_events`` returns from dicts, for tests and notebooks.

    Each record is one log line as decoded JSON (``ts`` an ISO string); its position in
    ``records`` is its line position, the tie-break after ``ts``.
    """
    fields = [f for f in LINE_SCHEMA.fields if f.name not in {"ts", CORRUPT_COLUMN}]
    schema = T.StructType(
        [
            *fields,
            T.StructField("ts", T.TimestampType(), True),
            T.StructField("_row", T.LongType(), False),
        ]
    )
    unknown = {k for r in records for k in r} - {f.name for f in LINE_SCHEMA.fields}
    if unknown:
        raise ValueError(f"fields not in the line schema: {sorted(unknown)}")
    rows = [
        (*[r.get(f.name) for f in fields], _parse_ts(r.get("ts")), i) for i, r in enumerate(records)
    ]
    df = spark.createDataFrame(rows, schema)
    return df.select(
        *[F.col(f.name) for f in fields],
        F.col("ts"),
        line_key(F.col("ts"), F.lit(0), F.lit(0), F.col("_row")).alias("_lk"),
    )


def _parse_ts(value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"ts must be an ISO string, got {value!r}")
    return datetime.fromisoformat(value).astimezone(UTC)


def ingest_stats(raw: DataFrame, files: int) -> DataFrame:
    """One row: how many lines were read, parsed, corrupt, of unknown event names."""
    ok = ~F.col("_corrupt")
    known = F.col("event").isin(*sorted(EVENTS))

    def count(cond: Column) -> Column:
        return F.coalesce(F.sum(cond.cast("long")), F.lit(0)).cast("long")

    return raw.agg(
        F.lit(files).cast("long").alias("files"),
        F.count(F.lit(1)).alias("lines"),
        count(ok).alias("events"),
        count(F.col("_corrupt")).alias("corrupt_lines"),
        count(ok & ~known).alias("unknown_events"),
        F.sort_array(F.collect_set(F.when(ok, F.col("schema")))).alias("schema_versions"),
        F.min(F.when(ok, F.col("ts"))).alias("first_ts"),
        F.max(F.when(ok, F.col("ts"))).alias("last_ts"),
    )
