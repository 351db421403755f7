"""The ETL job: stage what is new in the logs, build every table, write Parquet, summarise.

``run_etl`` is the entry point for the CLI and for tests (the broker's end-to-end test
calls it with its own SparkSession). Runs are incremental (see ``manifest`` and
``staging``): only the bytes added to the logs since the last run are parsed, once, into
the typed columnar staging table that every table reads; no table scans the text.

Merging. Tables bucketed by minute (``TIME_TABLES``) depend only on the lines of their
own UTC date, so an incremental run recomputes just the dates that gained or lost lines
and keeps the other rows as they were. The others carry state across the whole history
(a publisher's order, a subscriber's delivery range, a session open across midnight,
a netsplit, distinct counts, an overall percentile) and are rebuilt from all staged
lines: cheap next to parsing, and a message published in one run and delivered in the
next is judged as one. Either way the tables equal those of a full run (``full=True``).
The audit summary is computed from the audit table just written. The shuffle partitions
follow the logs' size.
"""

from __future__ import annotations

import math
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from spark_pipeline import DEFAULT_MASTER, extract, manifest, staging
from spark_pipeline.expect import Expectation, load_expectations
from spark_pipeline.schemas import EVENT_SCHEMAS, used_columns
from spark_pipeline.session import build_spark
from spark_pipeline.tables import TABLES, TableSpec
from spark_pipeline.transforms import audit, flow, ops
from spark_pipeline.transforms.sessions import sessions

Progress = Callable[[str], None]
# Called as each step starts: (step, steps, name); steps are parse, each table, summary.
Steps = Callable[[int, int, str], None]
Builders = dict[str, Callable[[], DataFrame]]
# Tables whose jobs take longest; started first so that the small ones fill idle cores.
HEAVY: Final = frozenset({"delivery_audit", "sessions"})
# Tables too big to write from one task (see ``write_table``).
SPREAD: Final = frozenset({"delivery_audit"})
# Two tables are written at once: with the audit leaner, the small tables' jobs fill the
# cores its narrow stages and the driver's planning leave idle (5M events, 2 cores, two
# alternating pairs: 66.3 and 70.6 s against 73.2 and 84.8 s with one writer).
WRITERS: Final = 2
SHUFFLE_PARTITIONS: Final = "spark.sql.shuffle.partitions"
# Set for the run, restored after. The audit's inputs are all partitioned by message;
# a join on (message, subscriber) may keep that partitioning instead of shuffling both
# sides again by the two keys.
PLAN_CONF: Final = {"spark.sql.requireAllClusterKeysForCoPartition": "false"}
BYTES_PER_PARTITION: Final = 256 * 2**20
MAX_PARTITIONS: Final = 2000
# Events few enough to keep in memory, read by the tables that need no others.
RARE_EVENTS: Final = frozenset(
    {
        "client.connected",
        "client.disconnected",
        "message.dropped",
        "message.expired",
        "message.refused",
        "netsplit.detected",
        "netsplit.healed",
    }
)
# Rows of these tables depend only on the lines of their own UTC date.
TIME_TABLES: Final = frozenset(
    {"message_flow", "delivery_latency", "latency_by_minute", "latency_histogram", "node_load"}
)


def expectations_frame(spark: SparkSession, expectations: Sequence[Expectation]) -> DataFrame:
    """The expect entries as ``audit.EXPECT_SCHEMA`` rows (regex already translated)."""
    rows = [(e.subscriber, e.regex, e.since) for e in expectations]
    return spark.createDataFrame(rows, audit.EXPECT_SCHEMA)


def table_builders(
    events: DataFrame, expectations: DataFrame | None, cache: Callable[[DataFrame], DataFrame]
) -> Builders:
    """Every derived table as a lazy builder (``ingest`` and ``audit_summary`` aside).

    ``cache`` persists a frame that a table reads several times, and must unpersist it
    when the job ends. Tables that read only rare events (sessions, drops, netsplits, the
    refusals) share one scan of the staged lines, cached at first use, instead of
    scanning every line once or twice each; so do the tables of deliveries' latency.
    """
    rare = shared(lambda: cache(rare_lines(events)))
    latency = shared(lambda: cache(flow.latency_lines(events)))
    return {
        "sessions": lambda: sessions(rare()),
        "message_flow": lambda: flow.message_flow(events),
        "delivery_latency": lambda: flow.delivery_latency(latency()),
        "latency_by_minute": lambda: flow.latency_by_minute(latency()),
        "latency_overall": lambda: flow.latency_overall(latency()),
        "latency_histogram": lambda: flow.latency_histogram(latency()),
        "delivery_audit": lambda: audit_table(events, rare(), expectations, cache),
        "drops": lambda: ops.drops(rare()),
        "node_load": lambda: ops.node_load(events),
        "netsplits": lambda: ops.netsplits(rare()),
    }


def shared(make: Callable[[], DataFrame]) -> Callable[[], DataFrame]:
    """``make()`` once, for whichever writer thread asks first; the others wait for it
    rather than caching the same lines a second time."""
    lock = threading.Lock()
    made: list[DataFrame] = []

    def get() -> DataFrame:
        with lock:
            if not made:
                made.append(make())
            return made[0]

    return get


def rare_lines(events: DataFrame) -> DataFrame:
    """The lines of ``RARE_EVENTS``, with only the columns those events have."""
    fields = {f.name for name in RARE_EVENTS for f in EVENT_SCHEMAS[name].fields} | {"_lk"}
    wanted = F.col("event").isin(*sorted(RARE_EVENTS))
    return events.where(wanted).select(*[c for c in events.columns if c in fields])


def audit_table(
    events: DataFrame,
    rare: DataFrame,
    expectations: DataFrame | None,
    cache: Callable[[DataFrame], DataFrame],
) -> DataFrame:
    """``delivery_audit``, with the publish order cached; the deliveries rule only when it
    has pairs to derive (no expect file, or a subscriber the file does not list), and
    then the pairs cached too, since the rule reads them again."""
    pub = cache(audit.publisher_order(events))
    pairs = audit.delivery_pairs(events)
    derive = expectations is None or not audit.unlisted_subscribers(events, expectations).isEmpty()
    if derive:
        pairs = cache(pairs)
    return audit.delivery_audit(pub, pairs, audit.refusals(rare), expectations, derive)


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


def write_table(
    df: DataFrame, path: Path, partition_by: Sequence[str], spread: bool = False
) -> None:
    """Overwrite ``path`` with ``df``: one file per partition value, or one file.

    ``spread`` keeps ``df``'s own partitions instead (a file per task and value): one
    task writing a big table alone leaves the other cores idle.

    A partitioned table with no rows is written unpartitioned, as one empty file that
    carries the schema: partitioned, Spark writes no data file at all, and the table could
    not be read back (``etl query``, the audit summary). A real cluster's run with no
    QoS >= 1 traffic has such tables.
    """
    if partition_by:
        frame = df if spread else df.repartition(*partition_by)
        out = frame.write.mode("overwrite").partitionBy(*partition_by)
        out.parquet(str(path))
        if not any(path.rglob("*.parquet")):
            df.limit(0).coalesce(1).write.mode("overwrite").parquet(str(path))
        return
    df.coalesce(1).write.mode("overwrite").parquet(str(path))


def _row_date(df: DataFrame) -> Column:
    """A time table's UTC date as text: its ``date`` column, else its ``minute``'s."""
    col = F.col("date") if "date" in df.columns else F.to_date(F.col("minute"))
    return col.cast("string")


def merge_dates(
    spark: SparkSession, fresh: DataFrame, path: Path, dates: set[str], partition_by: Sequence[str]
) -> None:
    """Replace the rows of ``dates`` in the table at ``path`` with ``fresh``; keep the rest.

    Written to a side directory and swapped in, since Spark cannot overwrite what it reads.
    """
    old = spark.read.parquet(str(path))
    kept = old.where(~_row_date(old).isin(*sorted(dates))) if dates else old
    side = path.with_name(path.name + ".merge")
    shutil.rmtree(side, ignore_errors=True)
    write_table(kept.unionByName(fresh.select(*kept.columns)), side, partition_by)
    trash = path.with_name(path.name + ".old")
    shutil.rmtree(trash, ignore_errors=True)
    path.rename(trash)
    side.rename(path)
    shutil.rmtree(trash, ignore_errors=True)


def write_tables(
    builders: Builders,
    specs: Sequence[TableSpec],
    out: Path,
    say: Progress,
    writers: int,
    merge: Callable[[TableSpec], bool] = lambda _spec: False,
    merger: Callable[[TableSpec], None] | None = None,
    begin: Callable[[str], None] = lambda _name: None,
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
        begin(spec.name)
        if merger is not None and merge(spec):
            merger(spec)
            verb = "merged"
        else:
            spread = spec.name in SPREAD
            write_table(builders[spec.name](), out / spec.name, spec.partition_by, spread)
            verb = "written"
        with lock:
            done += 1
            say(f"[{done}/{len(specs)}] {spec.name} {verb} in {time.monotonic() - t0:.1f} s")

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


def ingest_frame(
    spark: SparkSession, files: int, chunks: Sequence[manifest.ChunkInfo]
) -> DataFrame:
    """The one-row ``ingest`` table, summed from the chunks' counts in the manifest."""

    def total(name: str) -> Column:
        return F.lit(sum(getattr(c, name) for c in chunks)).cast("long").alias(name)

    def ts(us: int | None, name: str) -> Column:
        value = F.lit(None) if us is None else F.timestamp_micros(F.lit(us))
        return value.cast("timestamp").alias(name)

    versions = sorted({v for c in chunks for v in c.schema_versions})
    firsts = [c.first_us for c in chunks if c.first_us is not None]
    lasts = [c.last_us for c in chunks if c.last_us is not None]
    return spark.range(1).select(
        F.lit(files).cast("long").alias("files"),
        total("lines"),
        total("events"),
        total("corrupt_lines"),
        total("unknown_events"),
        F.array(*[F.lit(v) for v in versions]).cast("array<string>").alias("schema_versions"),
        ts(min(firsts, default=None), "first_ts"),
        ts(max(lasts, default=None), "last_ts"),
    )


def run_etl(
    logs_dir: Path | str,
    out_dir: Path | str,
    spark: SparkSession | None = None,
    expect: Path | str | Sequence[Expectation] | None = None,
    master: str = DEFAULT_MASTER,
    progress: Progress | None = None,
    writers: int = WRITERS,
    full: bool = False,
    steps: Steps | None = None,
) -> dict[str, Any]:
    """Run the ETL over what is new in the logs; return the audit summary, the ingest
    counts and how the run went (``mode``, ``read_bytes``) as a dict.

    ``spark`` is used as given (and left running; its session time zone is set to UTC,
    which every minute bucket assumes); without it a session for ``master`` is built
    and stopped at the end. ``expect`` is an expect file or parsed entries. ``writers``
    tables are written at once (see ``write_tables``). ``full`` forgets earlier runs.
    ``progress`` gets messages, ``steps`` each step as it starts (for a progress bar).
    """
    out = Path(out_dir)
    with manifest.locked(out):
        return _run(logs_dir, out, spark, expect, master, progress, writers, full, steps)


def _run(
    logs_dir: Path | str,
    out: Path,
    spark: SparkSession | None,
    expect: Path | str | Sequence[Expectation] | None,
    master: str,
    progress: Progress | None,
    writers: int,
    full: bool,
    steps: Steps | None,
) -> dict[str, Any]:
    say = progress or (lambda _msg: None)
    step = steps or (lambda _i, _n, _name: None)
    started = time.monotonic()
    expectations = _resolve_expect(expect)
    files = extract.find_log_files(Path(logs_dir))
    if not files:
        raise FileNotFoundError(f"no *.jsonl or *.jsonl.N log files below {logs_dir}")
    columns = used_columns()
    previous = None if full else manifest.load(out)
    plan = manifest.plan(files, previous, columns)
    if plan.full:
        shutil.rmtree(out / staging.STAGING, ignore_errors=True)
        if plan.full_reason:
            say(f"full run: {plan.full_reason}")
    state = manifest.next_manifest(previous, plan, columns)
    manifest.save(out, state)  # not complete: a crash from here on means a full run next
    own = spark is None
    session = spark if spark is not None else build_spark(master)
    session.conf.set("spark.sql.session.timeZone", "UTC")
    new_bytes = sum(c.end - c.start for c in plan.new)
    size = sum(c.end - c.start for c in state.chunks.values())
    cores = session.sparkContext.defaultParallelism
    run_conf = {**PLAN_CONF, SHUFFLE_PARTITIONS: str(shuffle_partitions(size, cores))}
    conf_before = {k: session.conf.get(k, None) for k in run_conf}
    for key, value in run_conf.items():
        session.conf.set(key, value)
    kept: list[DataFrame] = []

    def _keep(df: DataFrame) -> DataFrame:
        """Persist ``df`` and compute it now: a plan reading a cache not yet computed
        cannot see its partitioning, and would shuffle it again."""
        kept.append(df.persist(StorageLevel.MEMORY_AND_DISK))
        df.count()
        return df

    try:
        step(1, len(TABLES), "parse")
        say(
            f"reading {len(plan.new)} new or grown parts of {len(files)} log files "
            f"({new_bytes / 1e6:.1f} MB)"
        )
        bad = staging.stage_chunks(session, plan.new, out, columns)
        for b in bad:
            where = f"{b.path}:{b.line}" if b.line else b.path
            say(f"corrupt line skipped: {where}: {b.text}")
        if plan.removed and not plan.full:
            staging.drop_chunks(session, out, plan.removed)
            gone = sum(1 for c in plan.removed if not c.provisional)
            if gone:
                say(f"dropped {gone} parts of log files no longer present")
        present = list(state.chunks.values())
        write_table(ingest_frame(session, len(files), present), out / "ingest", ())
        stats = _one_row(session, out / "ingest")
        say(
            f"parsed {sum(c.events for c in plan.new)} new events, {stats['events']} in all, "
            f"{stats['corrupt_lines']} corrupt lines"
        )
        events = staging.staged_events(session, out, state.chunks, columns)
        exp_df = None if expectations is None else expectations_frame(session, expectations)
        builders = table_builders(events.drop("_date"), exp_df, _keep)
        dates = plan.affected_dates
        specs = [t for t in TABLES if t.name in builders]

        def merge(spec: TableSpec) -> bool:
            return not plan.full and spec.name in TIME_TABLES and (out / spec.name).is_dir()

        def merger(spec: TableSpec) -> None:
            if not dates:
                return
            part = events.where(F.col("_date").isin(*sorted(dates))).drop("_date")
            fresh = table_builders(part, exp_df, _keep)[spec.name]()
            merge_dates(session, fresh, out / spec.name, dates, spec.partition_by)

        done = iter(range(2, len(TABLES)))

        def begin(name: str) -> None:
            step(next(done, len(TABLES) - 1), len(TABLES), name)

        write_tables(builders, specs, out, say, writers, merge, merger, begin)
        step(len(TABLES), len(TABLES), "audit_summary")
        summary_df = audit.audit_summary(session.read.parquet(str(out / "delivery_audit")))
        write_table(summary_df, out / "audit_summary", ())
        row = _one_row(session, out / "audit_summary")
        state.complete = True
        manifest.save(out, state)
    finally:
        for df in kept:
            df.unpersist()
        for key, before in conf_before.items():
            if before is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, before)
        if own:
            session.stop()
    result: dict[str, Any] = {k: int(row[k]) for k in audit.SUMMARY_COLUMNS}
    for key in ("files", "lines", "events", "corrupt_lines", "unknown_events"):
        result[key] = int(stats[key])
    result["expect_mode"] = "deliveries" if expectations is None else "filters"
    result["mode"] = "full" if plan.full else "incremental"
    result["read_bytes"] = new_bytes
    say(f"done in {time.monotonic() - started:.1f} s")
    return result
