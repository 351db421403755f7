"""The staged events: every parsed line kept as typed Parquet, so JSON is parsed once.

Theory of operation. A run parses only its new chunks (see ``manifest``) and appends
their valid lines to ``OUT/_staging/events``, partitioned by ``date``, with the line's
place in the logs as three numbers: ``_chunk`` (the manifest's chunk id), ``_block``
(the split's offset in what Spark read) and ``_row`` (grows with the line inside a
split). ``staged_events`` turns these into the ``_lk`` order key every transform sorts
by: the file rank is the chunk's place by (chain, chunk id), so the same lines order the
same whether they were read in one run or over several.

A chunk that is a whole rotated file is read in place; any other (the live file, which
may still grow, or the tail of a file read before) is first copied, byte range exact,
into ``OUT/_staging/incoming`` so that Spark reads exactly the planned bytes.

One pass over the text. The parsed lines go straight from the JSON scan to Parquet,
corrupt ones included: those get a null ``date``, so Spark files them under the
``date=__HIVE_DEFAULT_PARTITION__`` directory (``CORRUPT_DIR``). The chunks' counts and
the corrupt samples are then read from the Parquet just written (a few columns, cheap)
and that directory is removed. Caching the parsed lines in memory instead, to count them
and then write them, cost as much again as the parse (5M events: 55 s for the step).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from services.common.events import EVENTS
from spark_pipeline.extract import line_key, rotation_of, scan_path
from spark_pipeline.manifest import ChunkInfo
from spark_pipeline.schemas import CORRUPT_COLUMN, LINE_SCHEMA
from spark_pipeline.transforms.common import day

STAGING: Final = "_staging"
SAMPLES: Final = 5
# The staged lines are written uncompressed (dictionaries still apply): they are read back
# at once, and compressing them cost the 5M-event run 2-3 s (62.2 and 63.0 s
# against 64.3 and 66.7 s with snappy, Spark's default, which the tables keep).
STAGED_CODEC: Final = "uncompressed"
# Where Spark writes the rows whose partition value (``date``) is null: the corrupt lines.
CORRUPT_DIR: Final = "date=__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True, slots=True)
class BadLine:
    """A corrupt line: where it is (``line`` 0 when it cannot be found) and its start."""

    path: str
    line: int
    text: str


def events_dir(out: Path) -> Path:
    return out / STAGING / "events"


def _source(chunk: ChunkInfo, incoming: Path) -> Path:
    """The file Spark reads for ``chunk``: the log itself, or a copy of its byte range."""
    path = Path(chunk.path)
    rot = rotation_of(path)
    if chunk.start == 0 and rot is not None and rot[1] > 0 and path.stat().st_size == chunk.end:
        return path
    incoming.mkdir(parents=True, exist_ok=True)
    target = incoming / f"{chunk.id}.jsonl"
    with path.open("rb") as src, target.open("wb") as dst:
        src.seek(chunk.start)
        left = chunk.end - chunk.start
        while left > 0:
            buf = src.read(min(left, 1 << 20))
            if not buf:
                raise OSError(f"{path} shrank while it was read")
            dst.write(buf)
            left -= len(buf)
    return target


def _lookup(path: Column, ids: Mapping[str, int], what: str) -> Column:
    """``ids[path]``; a path missing from it fails the job rather than mislabelling rows."""
    pairs = [F.lit(x) for p, r in sorted(ids.items()) for x in (p, r)]
    return F.coalesce(
        F.create_map(*pairs)[path], F.raise_error(F.concat(F.lit(f"no {what} for "), path))
    )


def stage_chunks(
    spark: SparkSession, chunks: Sequence[ChunkInfo], out: Path, columns: Sequence[str]
) -> list[BadLine]:
    """Parse ``chunks``, append their valid lines to the staging table, fill their stats.

    Returns up to ``SAMPLES`` corrupt lines, located in their log file.
    """
    if not chunks:
        return []
    incoming = out / STAGING / "incoming"
    sources = {c.id: _source(c, incoming) for c in chunks}
    try:
        df = (
            spark.read.schema(LINE_SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
            .json([str(p) for p in sources.values()])
        )
        by_name = {str(p.resolve()): cid for cid, p in sources.items()}
        ids = {}
        for uri in df.inputFiles():
            local = str(Path(scan_path(uri).removeprefix("file:")).resolve())
            if local not in by_name:
                raise RuntimeError(f"Spark read {uri}, which is no chunk of this run")
            ids[scan_path(uri)] = by_name[local]
        keep = set(columns) | {"ts", "event"}
        raw = df.select(
            *[F.col(c) for c in df.columns if c != "ts" and c in keep],
            F.try_to_timestamp(F.col("ts")).alias("ts"),
            _lookup(F.col("_metadata.file_path"), ids, "chunk").cast("int").alias("_chunk"),
            F.col("_metadata.file_block_start").cast("long").alias("_block"),
            F.monotonically_increasing_id().alias("_row"),
            F.col(CORRUPT_COLUMN),
        )
        corrupt = F.col(CORRUPT_COLUMN).isNotNull() | F.col("ts").isNull() | F.col("event").isNull()
        where = events_dir(out)
        shutil.rmtree(where / CORRUPT_DIR, ignore_errors=True)
        (
            raw.withColumn("date", F.when(~corrupt, day(F.col("ts"))))
            .write.mode("append")
            .option("compression", STAGED_CODEC)
            .partitionBy("date")
            .parquet(str(where))
        )
        try:
            written = spark.read.parquet(str(where)).where(F.col("_chunk").isin(*sources))
            _fill_stats(written, chunks)
            samples = (
                written.where(F.col("date").isNull())
                .select("_chunk", CORRUPT_COLUMN)
                .limit(SAMPLES)
                .collect()
            )
        finally:
            shutil.rmtree(where / CORRUPT_DIR, ignore_errors=True)
        by_id = {c.id: c for c in chunks}
        return [_locate(by_id[r[0]], sources[r[0]], r[1]) for r in samples]
    finally:
        shutil.rmtree(incoming, ignore_errors=True)


def _fill_stats(written: DataFrame, chunks: Sequence[ChunkInfo]) -> None:
    """Each chunk's counts, from its staged rows (a corrupt line's ``date`` is null).

    Grouped by every value a count or a set depends on, then folded here: a handful of
    groups per chunk, and a hash aggregate (``collect_set`` would make Spark aggregate
    each of the lines through objects, several times slower).
    """
    ok = F.col("date").isNotNull()
    groups = (
        written.groupBy(
            "_chunk",
            F.col("date").cast("string").alias("date"),
            F.when(ok, F.col("schema")).alias("schema"),
            (ok & ~F.col("event").isin(*sorted(EVENTS))).alias("unknown"),
        )
        .agg(
            F.count(F.lit(1)).alias("lines"),
            F.unix_micros(F.min(F.when(ok, F.col("ts")))).alias("first_us"),
            F.unix_micros(F.max(F.when(ok, F.col("ts")))).alias("last_us"),
        )
        .collect()
    )
    by_id = {c.id: c for c in chunks}
    seen: set[int] = set()
    for g in groups:
        c = by_id[g["_chunk"]]
        if c.id not in seen:
            seen.add(c.id)
            c.lines = c.events = c.corrupt_lines = c.unknown_events = 0
            c.schema_versions, c.dates, c.first_us, c.last_us = [], [], None, None
        lines = int(g["lines"])
        c.lines += lines
        if g["date"] is None:
            c.corrupt_lines += lines
            continue
        c.events += lines
        c.unknown_events += lines if g["unknown"] else 0
        c.schema_versions = sorted({*c.schema_versions, g["schema"]} - {None})
        c.dates = sorted({*c.dates, g["date"]})
        c.first_us = _fold(min, c.first_us, g["first_us"])
        c.last_us = _fold(max, c.last_us, g["last_us"])


def _fold(pick: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else pick(a, b)


def _printable(text: str, limit: int = 120) -> str:
    """The start of a line as it can be shown on a terminal (control bytes escaped)."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text[:limit])


def _locate(chunk: ChunkInfo, source: Path, text: str | None) -> BadLine:
    """The corrupt line's number in its log file, found by its text in the chunk."""
    if not text:
        return BadLine(chunk.path, 0, "(valid JSON without a parseable ts or event)")
    data = source.read_bytes()  # exactly the chunk's bytes: a whole file or a copy
    at = data.find(text.encode("utf-8"))
    if at < 0:
        return BadLine(chunk.path, 0, _printable(text))
    with Path(chunk.path).open("rb") as fh:
        before = fh.read(chunk.start).count(b"\n")
    return BadLine(chunk.path, before + data.count(b"\n", 0, at) + 1, _printable(text))


def _read_staged(spark: SparkSession, out: Path, columns: Sequence[str]) -> DataFrame:
    """The staging table, or an empty frame of its schema when no line was ever staged."""
    where = events_dir(out)
    if where.is_dir() and any(where.rglob("*.parquet")):
        return spark.read.parquet(str(where))
    fields = [f for f in LINE_SCHEMA.fields if f.name in set(columns) - {"ts"}]
    schema = T.StructType(
        [
            *fields,
            T.StructField("ts", T.TimestampType()),
            T.StructField("_chunk", T.IntegerType()),
            T.StructField("_block", T.LongType()),
            T.StructField("_row", T.LongType()),
            T.StructField(CORRUPT_COLUMN, T.StringType()),
            T.StructField("date", T.DateType()),
        ]
    )
    return spark.createDataFrame([], schema)


def drop_chunks(spark: SparkSession, out: Path, removed: Sequence[ChunkInfo]) -> None:
    """Take the lines of ``removed`` (files no longer present) out of the staging table.

    Only the dates they had lines on are rewritten: into a side directory first, then
    each date directory is swapped in.
    """
    dates = sorted({d for c in removed for d in c.dates})
    where = events_dir(out)
    if not dates or not where.is_dir():
        return
    gone = [c.id for c in removed]
    side = out / STAGING / "rewrite"
    shutil.rmtree(side, ignore_errors=True)
    kept = spark.read.parquet(str(where)).where(
        F.col("date").cast("string").isin(*dates) & ~F.col("_chunk").isin(*gone)
    )
    kept.write.mode("overwrite").partitionBy("date").parquet(str(side))
    for d in dates:
        shutil.rmtree(where / f"date={d}", ignore_errors=True)
        if (side / f"date={d}").is_dir():
            (side / f"date={d}").rename(where / f"date={d}")
    shutil.rmtree(side, ignore_errors=True)


def staged_events(
    spark: SparkSession, out: Path, chunks: Mapping[int, ChunkInfo], columns: Sequence[str]
) -> DataFrame:
    """The staged lines of ``chunks`` with ``_lk``, in the shape ``valid_events`` gives,
    plus ``_date`` (the line's UTC date as text) for picking partitions."""
    ranked = sorted(chunks.values(), key=lambda c: (c.chain, c.id))
    rank = {c.id: i for i, c in enumerate(ranked)}
    df = _read_staged(spark, out, columns)
    pairs = [F.lit(x) for cid, r in sorted(rank.items()) for x in (cid, r)]
    file_rank = F.create_map(*pairs)[F.col("_chunk")] if pairs else F.lit(None)
    df = df.where(F.col("_chunk").isin(*rank) & F.col("date").isNotNull()) if rank else df.limit(0)
    internal = {"_chunk", "_block", "_row", "date", CORRUPT_COLUMN}
    fields = [c for c in df.columns if c not in internal]
    return df.select(
        *[F.col(c) for c in fields],
        line_key(F.col("ts"), file_rank, F.col("_block"), F.col("_row")).alias("_lk"),
        F.col("date").cast("string").alias("_date"),
    )
