"""Traffic tables: ``message_flow`` and the delivery latency percentiles.

Theory of operation: publishes and deliveries are bucketed by UTC minute of their own
``ts`` (a message published at 07:05:59 and delivered at 07:06:00 counts in both
minutes, once each). Latency is the ``latency_us`` the listener logged with each
delivery, redeliveries included: a crash that delays a message shows in p99 and max.
Percentiles are ``percentile_approx`` (relative error 1/10 000, always a value that
occurs in the data), so they are computed per bucket and never averaged across buckets;
that is why coarser views are separate tables, not sums of finer ones.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark_pipeline.transforms.common import count_if, day, minute, of_event

PERCENTILES: Final = (0.5, 0.95, 0.99)
_ACCURACY: Final = 10_000


def message_flow(events: DataFrame) -> DataFrame:
    """Per minute and topic: messages published, bytes, per QoS, retained, deliveries."""
    pub = (
        of_event(events, "message.published")
        .groupBy(minute(F.col("ts")).alias("minute"), "topic")
        .agg(
            F.count(F.lit(1)).alias("messages"),
            F.coalesce(F.sum("size"), F.lit(0)).cast("long").alias("bytes"),
            count_if(F.col("qos") == 0).alias("qos0"),
            count_if(F.col("qos") == 1).alias("qos1"),
            count_if(F.col("qos") == 2).alias("qos2"),
            count_if(F.col("retain")).alias("retained"),
        )
    )
    out = (
        of_event(events, "message.delivered")
        .groupBy(minute(F.col("ts")).alias("minute"), "topic")
        .agg(F.count(F.lit(1)).alias("deliveries"))
    )
    joined = pub.join(out, ["minute", "topic"], "full_outer")
    zero = ["messages", "bytes", "qos0", "qos1", "qos2", "retained", "deliveries"]
    return joined.select(
        "minute",
        "topic",
        *[F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in zero],
        day(F.col("minute")).alias("date"),
    )


def _latency_aggs() -> list[Column]:
    lat = F.col("latency_us")
    pct = F.percentile_approx(lat, list(PERCENTILES), _ACCURACY)
    return [
        F.count(lat).alias("deliveries"),
        pct.alias("_p"),
        F.max(lat).alias("max_us"),
        F.avg(lat).alias("mean_us"),
    ]


def _spread(df: DataFrame, keys: list[str]) -> DataFrame:
    return df.select(
        *keys,
        "deliveries",
        F.col("_p")[0].alias("p50_us"),
        F.col("_p")[1].alias("p95_us"),
        F.col("_p")[2].alias("p99_us"),
        "max_us",
        "mean_us",
    )


def _delivered(events: DataFrame) -> DataFrame:
    return of_event(events, "message.delivered").where(F.col("latency_us").isNotNull())


def latency_lines(events: DataFrame) -> DataFrame:
    """What the latency tables read of ``events``, and no more: a job caches it for all
    of them. Each table gives the same rows from it as from ``events``."""
    delivered = (F.col("event") == "message.delivered") & F.col("latency_us").isNotNull()
    return events.where(delivered).select("event", "ts", "topic", "latency_us")


def delivery_latency(events: DataFrame) -> DataFrame:
    """Per minute and topic: deliveries, p50/p95/p99/max/mean latency in µs."""
    agg = (
        _delivered(events)
        .groupBy(minute(F.col("ts")).alias("minute"), "topic")
        .agg(*_latency_aggs())
    )
    return _spread(agg, ["minute", "topic"]).withColumn("date", day(F.col("minute")))


def latency_by_minute(events: DataFrame) -> DataFrame:
    """Per minute, all topics together: the series the report charts."""
    agg = _delivered(events).groupBy(minute(F.col("ts")).alias("minute")).agg(*_latency_aggs())
    return _spread(agg, ["minute"])


def latency_overall(events: DataFrame) -> DataFrame:
    """One row: the whole run's latency percentiles (the report's headline p99)."""
    return _spread(_delivered(events).agg(*_latency_aggs()), [])


def latency_histogram(events: DataFrame) -> DataFrame:
    """Per minute and latency bucket: deliveries. Buckets double: [0, 1), [1, 2), [2, 4) …
    µs, each named by its lower bound, so minutes add up to any coarser histogram."""
    us = F.greatest(F.col("latency_us"), F.lit(0))
    bucket = F.when(us < 1, F.lit(0)).otherwise(
        F.pow(F.lit(2.0), F.floor(F.log2(us))).cast("long")  # exact: powers of two
    )
    return (
        _delivered(events)
        .groupBy(minute(F.col("ts")).alias("minute"), bucket.alias("bucket_us"))
        .agg(F.count(F.lit(1)).alias("deliveries"))
    )
