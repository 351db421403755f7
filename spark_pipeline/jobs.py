"""The ETL job: extract the logs once, build every table, write Parquet, summarise.

``run_etl`` is the entry point for the CLI and for tests (the broker's end-to-end test
calls it with its own SparkSession). Each table is written with mode ``overwrite``, so
running twice over the same logs leaves the same tables. The JSON is parsed once, into
a typed columnar cache (memory, spilling to disk) that every table reads; no table scans
the text again. The audit summary is computed from the audit table just written rather
than recomputing the audit. The shuffle partitions follow the input's size.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Row, SparkSession

from spark_pipeline import DEFAULT_MASTER, extract
from spark_pipeline.expect import Expectation, load_expectations
from spark_pipeline.schemas import used_columns
from spark_pipeline.session import build_spark
from spark_pipeline.tables import TABLES, TableSpec
from spark_pipeline.transforms import audit, flow, ops
from spark_pipeline.transforms.sessions import sessions

Progress = Callable[[str], None]
Builders = dict[str, Callable[[], DataFrame]]
# Tables whose jobs take longest; started first so that the small ones fill idle cores.
HEAVY: Final = frozenset({"delivery_audit", "sessions"})
# Two writers measured no faster at 5M events on 2 cores (147.6 s with one, 159.8 s with
# two: the audit's stages already keep both cores busy), and hold more memory at once.
WRITERS: Final = 1
SHUFFLE_PARTITIONS: Final = "spark.sql.shuffle.partitions"
BYTES_PER_PARTITION: Final = 256 * 2**20
MAX_PARTITIONS: Final = 2000


def expectations_frame(spark: SparkSession, expectations: Sequence[Expectation]) -> DataFrame:
    """The expect entries as ``audit.EXPECT_SCHEMA`` rows (regex already translated)."""
    rows = [(e.subscriber, e.regex, e.since) for e in expectations]
    return spark.createDataFrame(rows, audit.EXPECT_SCHEMA)


def table_builders(
    events: DataFrame, expectations: DataFrame | None, cache: Callable[[DataFrame], DataFrame]
) -> Builders:
    """Every derived table as a lazy builder (``ingest`` and ``audit_summary`` aside).

    ``cache`` persists a frame that a table reads several times, and must unpersist it
    when the job ends.
    """
    return {
        "sessions": lambda: sessions(events),
        "message_flow": lambda: flow.message_flow(events),
        "delivery_latency": lambda: flow.delivery_latency(events),
        "latency_by_minute": lambda: flow.latency_by_minute(events),
        "latency_overall": lambda: flow.latency_overall(events),
        "delivery_audit": lambda: audit.delivery_audit(
            cache(audit.publisher_order(events)),
            cache(audit.delivery_pairs(events)),
            audit.acks(events),
            audit.refusals(events),
            expectations,
        ),
        "drops": lambda: ops.drops(events),
        "node_load": lambda: ops.node_load(events),
        "netsplits": lambda: ops.netsplits(events),
    }


def shuffle_partitions(input_bytes: int, cores: int) -> int:
    """Shuffle partitions for ``input_bytes`` of logs: a multiple of ``cores``, at least one each.

    A shuffle here carries a few narrow columns of a fraction of the lines (the audit's
    pairs, per-minute groups), about a tenth of the raw JSON, so one partition per
    ``BYTES_PER_PARTITION`` of input keeps each near 25 MB. More only adds tiny tasks:
    each costs a scheduling round and a shuffle file per map task.
    """
    cores = max(1, cores)
    wanted = max(1, math.ceil(input_bytes / BYTES_PER_PARTITION))
    return min(MAX_PARTITIONS, math.ceil(wanted / cores) * cores)


def write_table(df: DataFrame, path: Path, partition_by: Sequence[str]) -> None:
    """Overwrite ``path`` with ``df``: one file per partition value, or one file.

    A partitioned table with no rows is written unpartitioned, as one empty file that
    carries the schema: partitioned, Spark writes no data file at all, and the table could
    not be read back (``etl query``, the audit summary). A real cluster's run with no
    QoS >= 1 traffic has such tables.
    """
    if partition_by:
        out = df.repartition(*partition_by).write.mode("overwrite").partitionBy(*partition_by)
        out.parquet(str(path))
        if not any(path.rglob("*.parquet")):
            df.limit(0).coalesce(1).write.mode("overwrite").parquet(str(path))
        return
    df.coalesce(1).write.mode("overwrite").parquet(str(path))


def write_tables(
    builders: Builders, specs: Sequence[TableSpec], out: Path, say: Progress, writers: int
) -> None:
    """Write ``specs`` with up to ``writers`` Spark jobs at once, the costliest first.

    Some stages of these jobs have fewer tasks than there are cores (a window over one
    partition, the write of a table with one date); jobs started from several threads can
    fill the idle cores on a bigger machine. The tables do not depend on each other, and
    each is written to its own directory.
    """
    order = sorted(specs, key=lambda t: t.name not in HEAVY)
    done = 0
    lock = threading.Lock()

    def one(spec: TableSpec) -> None:
        nonlocal done
        t0 = time.monotonic()
        write_table(builders[spec.name](), out / spec.name, spec.partition_by)
        with lock:
            done += 1
            say(f"[{done}/{len(specs)}] {spec.name} written in {time.monotonic() - t0:.1f} s")

    with ThreadPoolExecutor(max_workers=max(1, writers)) as pool:
        for future in [pool.submit(one, spec) for spec in order]:
            future.result()


def _resolve_expect(
    expect: Path | str | Sequence[Expectation] | None,
) -> list[Expectation] | None:
    if expect is None:
        return None
    if isinstance(expect, (str, Path)):
        return load_expectations(Path(expect))
    return list(expect)


def _one_row(spark: SparkSession, path: Path) -> Row:
    row = spark.read.parquet(str(path)).first()
    if row is None:
        raise RuntimeError(f"{path} is empty; a one-row table was expected")
    return row


def run_etl(
    logs_dir: Path | str,
    out_dir: Path | str,
    spark: SparkSession | None = None,
    expect: Path | str | Sequence[Expectation] | None = None,
    master: str = DEFAULT_MASTER,
    progress: Progress | None = None,
    writers: int = WRITERS,
) -> dict[str, Any]:
    """Run the whole ETL; return the audit summary plus the ingest counts as a dict.

    ``spark`` is used as given (and left running; its session time zone is set to UTC,
    which every minute bucket assumes); without it a session for ``master`` is built
    and stopped at the end. ``expect`` is an expect file or parsed entries. ``writers``
    tables are written at once (see ``write_tables``).
    """
    say = progress or (lambda _msg: None)
    started = time.monotonic()
    expectations = _resolve_expect(expect)
    files = extract.find_log_files(Path(logs_dir))
    out = Path(out_dir)
    own = spark is None
    session = spark if spark is not None else build_spark(master)
    session.conf.set("spark.sql.session.timeZone", "UTC")
    size = sum(f.stat().st_size for f in files)
    cores = session.sparkContext.defaultParallelism
    partitions_before = session.conf.get(SHUFFLE_PARTITIONS)
    session.conf.set(SHUFFLE_PARTITIONS, str(shuffle_partitions(size, cores)))
    kept: list[DataFrame] = []

    def _keep(df: DataFrame) -> DataFrame:
        kept.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        return df

    try:
        raw = _keep(extract.read_raw(session, files, used_columns()))
        say(f"reading {len(files)} log files ({size / 1e6:.1f} MB)")
        ingest = extract.ingest_stats(raw, len(files))
        write_table(ingest, out / "ingest", ())
        stats = _one_row(session, out / "ingest")
        say(f"parsed {stats['events']} events, {stats['corrupt_lines']} corrupt lines")
        events = extract.valid_events(raw)
        exp_df = None if expectations is None else expectations_frame(session, expectations)
        builders = table_builders(events, exp_df, _keep)
        specs = [t for t in TABLES if t.name in builders]
        write_tables(builders, specs, out, say, writers)
        summary_df = audit.audit_summary(session.read.parquet(str(out / "delivery_audit")))
        write_table(summary_df, out / "audit_summary", ())
        row = _one_row(session, out / "audit_summary")
    finally:
        for df in kept:
            df.unpersist()
        if partitions_before is not None:
            session.conf.set(SHUFFLE_PARTITIONS, partitions_before)
        if own:
            session.stop()
    result: dict[str, Any] = {k: int(row[k]) for k in audit.SUMMARY_COLUMNS}
    for key in ("files", "lines", "events", "corrupt_lines", "unknown_events"):
        result[key] = int(stats[key])
    result["expect_mode"] = "deliveries" if expectations is None else "filters"
    say(f"done in {time.monotonic() - started:.1f} s")
    return result
