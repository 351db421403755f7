"""The ``sessions`` table: one row per client connection.

Theory of operation: connects and disconnects of one (node, mountpoint, client id) are
merged in log order. A connect followed by a disconnect is a complete session. A
connect followed by another connect (the node died, or the disconnect was never
logged) is an open session with no end. A disconnect whose connect is not in the logs
(rotated away) still yields a row: its start is derived from ``duration_s``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_pipeline.transforms.common import day, of_event, seconds_between

_KEY = ("node", "mountpoint", "client_id")


def sessions(events: DataFrame) -> DataFrame:
    """client_id, node, connect/disconnect times, duration, protocol, clean flag, reason."""
    conn = of_event(events, "client.connected").select(
        *_KEY,
        F.lit("c").alias("kind"),
        "_lk",
        F.col("ts").alias("connected_at"),
        "peer",
        "username",
        "listener",
        F.col("proto_ver").cast("int").alias("proto_ver"),
        "clean_start",
        "session_present",
        "keepalive",
        "session_expiry",
    )
    disc = of_event(events, "client.disconnected").select(
        *_KEY,
        F.lit("d").alias("kind"),
        "_lk",
        F.col("ts").alias("disconnected_at"),
        F.col("reason").alias("disconnect_reason"),
        "reason_code",
        "duration_s",
    )
    merged = conn.unionByName(disc, allowMissingColumns=True)
    w = Window.partitionBy(*_KEY).orderBy("_lk")
    nxt, prev = F.lead("kind").over(w), F.lag("kind").over(w)
    merged = merged.select(
        "*",
        F.lead("disconnected_at").over(w).alias("_n_at"),
        F.lead("disconnect_reason").over(w).alias("_n_reason"),
        F.lead("reason_code").over(w).alias("_n_code"),
        F.lead("duration_s").over(w).alias("_n_dur"),
        nxt.alias("_next"),
        prev.alias("_prev"),
    )
    closed = F.col("_next") == "d"
    from_connect = merged.where(F.col("kind") == "c").select(
        *_KEY,
        "peer",
        "username",
        "listener",
        "proto_ver",
        "clean_start",
        "session_present",
        "keepalive",
        "session_expiry",
        "connected_at",
        F.when(closed, F.col("_n_at")).alias("disconnected_at"),
        F.when(closed, F.col("_n_reason")).alias("disconnect_reason"),
        F.when(closed, F.col("_n_code")).alias("reason_code"),
        F.when(closed, seconds_between(F.col("connected_at"), F.col("_n_at"))).alias("duration_s"),
        F.coalesce(closed, F.lit(False)).alias("complete"),
    )
    orphan = merged.where((F.col("kind") == "d") & F.coalesce(F.col("_prev") != "c", F.lit(True)))
    from_orphan = orphan.select(
        *_KEY,
        *[
            F.lit(None).cast(t).alias(c)
            for c, t in (
                ("peer", "string"),
                ("username", "string"),
                ("listener", "string"),
                ("proto_ver", "int"),
                ("clean_start", "boolean"),
                ("session_present", "boolean"),
                ("keepalive", "bigint"),
                ("session_expiry", "bigint"),
            )
        ],
        (
            F.timestamp_micros(
                F.unix_micros("disconnected_at") - (F.col("duration_s") * 1e6).cast("long")
            )
        ).alias("connected_at"),
        "disconnected_at",
        "disconnect_reason",
        "reason_code",
        "duration_s",
        F.lit(False).alias("complete"),
    )
    out = from_connect.unionByName(from_orphan)
    return out.withColumn("date", day(F.coalesce(F.col("connected_at"), F.col("disconnected_at"))))
