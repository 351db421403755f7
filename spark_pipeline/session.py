"""Building the SparkSession the ETL runs on.

Local masters are pinned to loopback (driver host, bind address and ``SPARK_LOCAL_IP``)
so a local run opens no port on another interface; the web UI is off unless asked for.
The session time zone is UTC because every minute bucket and date partition is UTC.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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


def build_spark(
    master: str = DEFAULT_MASTER,
    app_name: str = "ternmq-etl",
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """A session for ``master``; ``conf`` overrides the defaults above."""
    settings = dict(BASE_CONF)
    # Launched by spark-submit (the JVM started us and passed its gateway): the master and
    # resources come from spark-submit's own options unless --master was given explicitly.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ and master == DEFAULT_MASTER
    if master.startswith("local") and not submitted:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.update(LOCAL_CONF)
    settings.update(conf or {})
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
