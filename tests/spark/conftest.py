"""One local SparkSession for the whole test session (starting Spark costs seconds).

Spark is configured here rather than by silencing warnings: two local cores, four
shuffle partitions, no web UI, no console progress bar, loopback only, log level ERROR.
The frames are tiny, so per-query overhead dominates: whole-stage code generation
(a compile per query) and adaptive execution (a job per query stage) are switched off.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.session import build_spark

TEST_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_spark("local[2]", app_name="ternmq-tests", conf=TEST_CONF)
    yield session
    session.stop()
