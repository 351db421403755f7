"""Building the SparkSession the ETL runs on.

Local masters are pinned to loopback (driver host, bind address and ``SPARK_LOCAL_IP``)
so a local run opens no port on another interface; the web UI is off unless asked for.
The session time zone is UTC because every minute bucket and date partition is UTC.

Quiet start-up (``quiet_log``): the driver JVM is started with a log4j configuration that
logs errors only and never the native-hadoop warning, and with its stderr sent to a log
file rather than the terminal (the JVM prints its own warnings, such as the incubator
module one, before any logging is set up, so only the file descriptor catches them).
The JVM keeps that stderr for its whole life: later Spark errors land in the same file.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession

from spark_pipeline import DEFAULT_MASTER

BASE_CONF: Final[dict[str, str]] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
}
LOCAL_CONF: Final[dict[str, str]] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}
# In local mode the driver JVM is the only executor. The throughput collector spends less
# CPU on a batch job's short-lived rows than G1, the JVM's default, whose concurrent work
# competes with the tasks for the cores (5M events on 2 cores: 66-72 s and 123-134 s of
# CPU against 75-76 s and 142-144 s, docs/benchmarks.md). Left out when the options
# given already name a collector.
LOCAL_GC: Final = "-XX:+UseParallelGC"
_GC_OPTION: Final = re.compile(r"-XX:\+Use\w*GC\b")


QUIET_LOG4J: Final = """\
status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativeio.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativeio.level = off
"""


@contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` (appending) while the block runs.

    Child processes started meanwhile (the driver JVM) keep it after the block.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def quiet_conf(log: Path) -> dict[str, str]:
    """Driver options that keep log4j to errors, written next to ``log``."""
    props = log.with_suffix(".log4j2.properties")
    props.write_text(QUIET_LOG4J, encoding="utf-8")
    return {"spark.driver.extraJavaOptions": f"-Dlog4j.configurationFile=file:{props}"}


def driver_java_options(options: str, local: bool) -> str:
    """The driver JVM's options: ``options``, and for a local driver :data:`LOCAL_GC`
    first unless ``options`` choose a collector (two would stop the JVM at start)."""
    options = options.strip()
    if local and not _GC_OPTION.search(options):
        return f"{LOCAL_GC} {options}".strip()
    return options


def build_spark(
    master: str = DEFAULT_MASTER,
    app_name: str = "ternmq-etl",
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
    quiet_log: Path | None = None,
    java_options: str = "",
) -> SparkSession:
    """A session for ``master``; ``conf`` overrides the defaults above.

    With ``quiet_log`` the JVM's start-up output and later log lines go to that file.
    ``java_options`` are added to the driver JVM's (``class_cache.java_options``); a
    local driver also gets :data:`LOCAL_GC` unless they choose a collector.
    """
    settings = dict(BASE_CONF)
    # Launched by spark-submit (the JVM started us and passed its gateway): the master and
    # resources come from spark-submit's own options unless --master was given explicitly.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ and master == DEFAULT_MASTER
    if master.startswith("local") and not submitted:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update(LOCAL_CONF)
    if quiet_log is not None:
        settings.update(quiet_conf(quiet_log))
    settings.update(conf or {})
    key = "spark.driver.extraJavaOptions"
    local = master.startswith("local") and not submitted
    options = driver_java_options(f"{settings.get(key, '')} {java_options}", local)
    if options:
        settings[key] = options
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if quiet_log is None:
        spark = builder.getOrCreate()
    else:
        with stderr_to(quiet_log):
            spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
