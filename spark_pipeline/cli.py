"""The ``etl`` click group: ``run``, ``query``, ``report``, ``events-doc``.

``ternmq etl …`` (the top-level CLI adds this group) and ``python -m spark_pipeline …``
run the same commands. Spark is imported lazily by each command (not at import time)
so ``ternmq --help`` stays fast; progress and Spark's own output go to stderr, results
to stdout.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from spark_pipeline import DEFAULT_MASTER, class_cache

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_QUIET_CONF = {"spark.ui.showConsoleProgress": "false"}
_VERBOSE = click.option(
    "--verbose", is_flag=True, help="Show Spark's own output: JVM warnings, log4j, stage bars."
)


@contextmanager
def _spark(
    master: str, driver_memory: str | None, verbose: bool, conf: dict[str, str] | None = None
) -> Iterator[SparkSession]:
    """The active session if there is one (embedding, tests), else a new one, stopped after.

    Unless ``verbose``, Spark's start-up noise and log lines go to a temporary log file,
    removed after a clean run and named when the command fails.
    """
    from pyspark.errors import AnalysisException
    from pyspark.sql import SparkSession

    from spark_pipeline.session import build_spark

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    settings = dict(_QUIET_CONF) if not verbose else {"spark.ui.showConsoleProgress": "true"}
    if driver_memory:
        settings["spark.driver.memory"] = driver_memory
    settings.update(conf or {})
    log = None
    if not verbose:
        fd, name = tempfile.mkstemp(prefix="ternmq-etl-spark-", suffix=".log")
        os.close(fd)
        log = Path(name)
    spark = build_spark(
        master,
        conf=settings,
        log_level="WARN" if verbose else "ERROR",
        quiet_log=log,
        java_options=class_cache.java_options(class_cache.archive_path()),
    )
    ok = False
    try:
        yield spark
        ok = True
    except (click.ClickException, FileNotFoundError, AnalysisException):
        raise  # the command words these itself
    except Exception as exc:
        raise click.ClickException(_spark_error(exc, log)) from exc
    finally:
        spark.stop()
        if log is not None and ok:
            log.unlink(missing_ok=True)
            log.with_suffix(".log4j2.properties").unlink(missing_ok=True)


def _spark_error(exc: Exception, log: Path | None) -> str:
    """One readable line for an error raised in a Spark job, and where the rest is."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    text = next(
        (x for x in lines if "Exception" in x or "Error" in x),
        lines[0] if lines else type(exc).__name__,
    )
    return text + (f" (Spark's log: {log})" if log is not None else "")


def _conf_pairs(values: tuple[str, ...]) -> dict[str, str]:
    pairs = {}
    for v in values:
        key, sep, value = v.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{v!r} is not KEY=VALUE", param_hint="--conf")
        pairs[key] = value
    return pairs


@click.group(name="etl")
def etl() -> None:
    """Spark ETL over ternmq's JSON-lines event logs (see docs/analytics.md)."""


@etl.command("run")
@click.option(
    "--logs",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Directory searched recursively for *.jsonl and *.jsonl.N files.",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the Parquet tables (each table is overwritten).",
)
@click.option("--master", default=DEFAULT_MASTER, show_default=True, help="Spark master URL.")
@click.option(
    "--expect",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='JSON list of {"subscriber", "topic_filter", "from"} the audit holds to.',
)
@click.option("--driver-memory", default="4g", show_default=True, help="Local mode heap.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option(
    "--full", is_flag=True, help="Forget earlier runs: read every log file from the start."
)
@click.option(
    "--conf",
    "confs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting (repeatable), e.g. spark.executor.memory=1g.",
)
@_VERBOSE
def run(
    logs: Path,
    out: Path,
    master: str,
    expect: Path | None,
    driver_memory: str,
    as_json: bool,
    quiet: bool,
    full: bool,
    confs: tuple[str, ...],
    verbose: bool,
) -> None:
    """Read what is new in the logs and bring every table under --out up to date.

    Only files that are new or grew since the last run into --out are read (see
    docs/analytics.md, "Incremental runs"); the tables are those a full run would write.
    """
    from spark_pipeline.expect import ExpectError, load_expectations
    from spark_pipeline.extract import find_log_files

    try:
        expectations = None if expect is None else load_expectations(expect)
    except ExpectError as exc:
        raise click.ClickException(f"--expect {expect}: {exc}") from exc
    if not find_log_files(logs):  # fail before paying for a JVM
        raise click.ClickException(f"no *.jsonl or *.jsonl.N log files below {logs}")
    conf = _conf_pairs(confs)
    try:
        with _spark(master, driver_memory, verbose, conf) as spark:
            summary = _run_with_progress(spark, logs, out, expectations, full, quiet, verbose)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(summary, indent=1))
    else:
        for key, value in summary.items():
            click.echo(f"{key:<16}{value}")
    _cache_classes(quiet)


def _cache_classes(quiet: bool) -> None:
    """After the first run, the driver JVM's class archive (``class_cache``): later
    commands start a few seconds sooner."""
    from pyspark.sql import SparkSession

    path = class_cache.archive_path()
    if path is None or path.is_file() or SparkSession.getActiveSession() is not None:
        return  # off, made already, or embedded (the session is the caller's)
    if not quiet:
        click.echo(f"caching Spark's classes for faster starts (once): {path}", err=True)
    if not class_cache.build(path) and not quiet:
        click.echo(f"could not cache Spark's classes; set {class_cache.ENV}=off", err=True)


def _run_with_progress(
    spark: SparkSession,
    logs: Path,
    out: Path,
    expectations: list[Any] | None,
    full: bool,
    quiet: bool,
    verbose: bool,
) -> dict[str, Any]:
    """``run_etl`` with messages on stderr, and the progress bar unless verbose or quiet."""
    from spark_pipeline.jobs import run_etl
    from spark_pipeline.progress import ProgressBar

    if quiet:
        return run_etl(logs, out, spark=spark, expect=expectations, full=full)
    if verbose:
        t0 = time.monotonic()

        def say(msg: str) -> None:
            click.echo(f"[etl {time.monotonic() - t0:7.1f}s] {msg}", err=True)

        return run_etl(logs, out, spark=spark, expect=expectations, full=full, progress=say)
    with ProgressBar(spark.sparkContext, sys.stderr) as bar:
        return run_etl(
            logs,
            out,
            spark=spark,
            expect=expectations,
            full=full,
            progress=bar.message,
            steps=bar.begin,
        )


@etl.command("query")
@click.argument("sql")
@click.option(
    "--out",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Directory `etl run` wrote.",
)
@click.option("--json", "fmt", flag_value="json", help="One JSON object per row.")
@click.option("--csv", "fmt", flag_value="csv", help="CSV with a header row.")
@click.option("--limit", default=1000, show_default=True, type=click.IntRange(min=1))
@click.option("--master", default=DEFAULT_MASTER, show_default=True)
@_VERBOSE
def query(sql: str, out: Path, fmt: str | None, limit: int, master: str, verbose: bool) -> None:
    """Run Spark SQL over the tables (each is a view named after its directory)."""
    from pyspark.errors import AnalysisException

    from spark_pipeline.query import (
        format_csv,
        format_json,
        format_table,
        register_tables,
        run_query,
    )

    try:
        with _spark(master, None, verbose) as spark:
            register_tables(spark, out)
            columns, rows, more = run_query(spark, sql, limit)
    except AnalysisException as exc:
        raise click.ClickException(f"query failed: {str(exc).splitlines()[0]}") from exc
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from exc
    if fmt == "json":
        text = format_json(columns, rows)
    elif fmt == "csv":
        text = format_csv(columns, rows)
    else:
        text = format_table(columns, rows) + f"\n({len(rows)} rows)"
    if text:
        click.echo(text)
    if more:
        click.echo(f"(stopped at --limit {limit} rows)", err=True)


@etl.command("report")
@click.option(
    "--out",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Directory `etl run` wrote.",
)
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a one-page HTML report with charts here.",
)
@click.option("--master", default=DEFAULT_MASTER, show_default=True)
@_VERBOSE
def report(out: Path, html_file: Path | None, master: str, verbose: bool) -> None:
    """Print headline numbers; optionally write the HTML report."""
    from spark_pipeline.report import headline, load_report, render_html

    try:
        with _spark(master, None, verbose) as spark:
            data = load_report(spark, out)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(headline(data))
    if html_file is not None:
        html_file.write_text(render_html(data), encoding="utf-8")
        click.echo(f"wrote {html_file}", err=True)


@etl.command("events-doc")
@click.option(
    "--write",
    "target",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the Markdown here instead of printing it.",
)
def events_doc(target: Path | None) -> None:
    """Render docs/events.md from the event catalogue."""
    from spark_pipeline.docs import render_events_md

    text = render_events_md()
    if target is None:
        click.echo(text, nl=False)
    else:
        target.write_text(text, encoding="utf-8")
