"""Operational tables: ``drops``, ``node_load`` and ``netsplits``.

Netsplit windows, theory of operation: each node logs ``netsplit.detected`` (perhaps
several times as more peers vanish) and later one ``netsplit.healed``. Per node, a
window runs from its first detection after the previous heal to the next heal; a heal
whose detection was rotated away gets its start from ``duration_s``, and a detection
never healed stays open (no end). The cluster's view merges overlapping per-node
windows (gaps and islands over start time): one row per split, with every node that
reported it or was reported unreachable.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from spark_pipeline.transforms.common import count_if, day, minute, of_event, seconds_between


def drops(events: DataFrame) -> DataFrame:
    """Per reason, node and QoS: messages not delivered on purpose (expiry included)."""
    dropped = of_event(events, "message.dropped").select(
        "node", "reason", "qos", "msg_id", "client_id", "ts"
    )
    expired = of_event(events, "message.expired").select(
        "node",
        F.lit("expired").alias("reason"),
        F.lit(None).cast("bigint").alias("qos"),
        "msg_id",
        "client_id",
        "ts",
    )
    return (
        dropped.unionByName(expired)
        .groupBy(F.coalesce(F.col("reason"), F.lit("unknown")).alias("reason"), "node", "qos")
        .agg(
            F.count(F.lit(1)).alias("drops"),
            F.countDistinct("msg_id").alias("messages"),
            F.countDistinct("client_id").alias("clients"),
            F.min("ts").alias("first_at"),
            F.max("ts").alias("last_at"),
        )
    )


def _is(name: str) -> Column:
    return F.col("event") == name


def node_load(events: DataFrame) -> DataFrame:
    """Per node and minute: events by kind, bytes in, errors and warnings."""
    published = _is("message.published")
    return (
        events.groupBy("node", minute(F.col("ts")).alias("minute"))
        .agg(
            F.count(F.lit(1)).alias("events"),
            count_if(published).alias("published"),
            F.coalesce(F.sum(F.when(published, F.col("size"))), F.lit(0))
            .cast("long")
            .alias("bytes_in"),
            count_if(_is("message.delivered")).alias("delivered"),
            count_if(_is("message.acked")).alias("acked"),
            count_if(_is("message.queued")).alias("queued"),
            count_if(_is("message.dropped")).alias("dropped"),
            count_if(_is("client.connected")).alias("connects"),
            count_if(_is("client.disconnected")).alias("disconnects"),
            count_if(_is("auth.failed")).alias("auth_failures"),
            count_if(_is("rpc.failed")).alias("rpc_failures"),
            count_if(F.col("level").isin("error", "critical")).alias("errors"),
            count_if(F.col("level") == "warning").alias("warnings"),
        )
        .withColumn("date", day(F.col("minute")))
    )


def node_netsplits(events: DataFrame) -> DataFrame:
    """One row per node and split as that node saw it."""
    det = of_event(events, "netsplit.detected").select(
        "node", "ts", "_lk", "unreachable", "members", F.lit(False).alias("healed")
    )
    heal = of_event(events, "netsplit.healed").select(
        "node",
        "ts",
        "_lk",
        F.lit(None).cast("array<string>").alias("unreachable"),
        "members",
        F.lit(True).alias("healed"),
        "duration_s",
    )
    both = det.unionByName(heal, allowMissingColumns=True)
    w = Window.partitionBy("node").orderBy("_lk").rowsBetween(Window.unboundedPreceding, -1)
    both = both.withColumn(
        "_win", F.coalesce(F.sum(F.col("healed").cast("long")).over(w), F.lit(0))
    )
    grouped = both.groupBy("node", "_win").agg(
        F.min(F.when(~F.col("healed"), F.col("ts"))).alias("_detected"),
        F.max(F.when(F.col("healed"), F.col("ts"))).alias("ended_at"),
        F.max("duration_s").alias("_dur"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("unreachable")))).alias(
            "unreachable"
        ),
        F.max("members").alias("members"),
    )
    start = F.coalesce(
        F.col("_detected"),
        F.timestamp_micros(F.unix_micros("ended_at") - (F.col("_dur") * 1e6).cast("long")),
    )
    return grouped.select(
        "node",
        start.alias("started_at"),
        "ended_at",
        "unreachable",
        "members",
    ).where(F.col("started_at").isNotNull())


def netsplits(events: DataFrame) -> DataFrame:
    """Cluster-wide split windows: start, end, duration, nodes involved, healed."""
    per_node = node_netsplits(events)
    far = F.lit("9999-12-31 00:00:00").cast("timestamp")
    w = Window.orderBy("started_at", "node")
    prior = w.rowsBetween(Window.unboundedPreceding, -1)
    marked = per_node.select(
        "*",
        F.max(F.coalesce(F.col("ended_at"), far)).over(prior).alias("_reach"),
    ).select(
        "*",
        F.when(F.col("_reach").isNull() | (F.col("started_at") > F.col("_reach")), F.lit(1))
        .otherwise(F.lit(0))
        .alias("_new"),
    )
    islands = marked.withColumn(
        "split_id", F.sum("_new").over(w.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    )
    agg = islands.groupBy("split_id").agg(
        F.min("started_at").alias("started_at"),
        F.max(F.coalesce(F.col("ended_at"), far)).alias("_end"),
        F.array_sort(F.collect_set("node")).alias("observers"),
        F.array_sort(
            F.array_distinct(
                F.concat(F.collect_set("node"), F.flatten(F.collect_list("unreachable")))
            )
        ).alias("nodes"),
        F.count(F.lit(1)).alias("reports"),
    )
    healed = F.col("_end") < far
    ended = F.when(healed, F.col("_end"))
    return agg.select(
        "split_id",
        "started_at",
        ended.alias("ended_at"),
        F.when(healed, seconds_between(F.col("started_at"), F.col("_end"))).alias("duration_s"),
        "nodes",
        "observers",
        "reports",
        healed.alias("healed"),
    )
