"""The delivery audit: per QoS >= 1 message and subscriber, what happened to it.

Theory of operation.

*Publisher order.* ``message.published`` lines of one publisher client id, in log order
(``_lk``: ts, then line position), numbered 1, 2, 3 … give ``pub_seq``. QoS 0 messages
are numbered too (they hold places in the order) but are not audited.

*Expected pairs* (message, subscriber). For a subscriber listed in the expect file:
every audited message whose topic matches one of its filters, published at or after
that filter's ``from``. For any other subscriber (or with no expect file): every
message delivered to it at least once, plus, for each (publisher, topic) it received
from, every message of that publisher on that topic whose ``pub_seq`` lies between the
first and last one it received. A message lost before the first or after the last
delivery is therefore only caught with an expect file.

*Refused messages.* A message with a ``message.refused`` line (any node, by
``msg_id``) was answered to its publisher with a failure reason code: the publisher was
not acknowledged and keeps the message (what it sends again is another publish, logged
as such). The broker's promise is about acknowledged messages only, so such a message
is ``refused`` on every pair it has and never ``lost``, whether or not some copies of it
were delivered anyway. Refusal changes nothing else: the message keeps its place in
``pub_seq``, is expected as any other, and a delivery of it is judged as any delivery.

*Verdicts* per pair: ``lost`` = expected, never delivered, and not refused;
``duplicated`` = delivered more than once (DUP flag or not); ``out_of_order`` = its
first delivery came after the first delivery of a message with a higher ``pub_seq``
from the same publisher to the same subscriber; ``unacked`` = delivered at QoS >= 1 and
never acknowledged; ``unexpected`` = delivered to a subscriber whose filters do not
cover it; an orphan is a delivery whose ``message.published`` is not in the logs
(judged by the deliveries rule, never out of order).

Worked example: publisher P sends m1..m6 on t, and P is refused m5; subscriber S
receives m1, m3, m2, m6, m6. Expected = m1..m6; m4 lost; m5 refused, not lost; m6
duplicated; m2 out of order (m3 came first).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_pipeline.transforms.common import LK_FIELDS, count_if, day, in_line_order, of_event

PAIR = ["msg_id", "subscriber"]
# What a pair takes from its message (its first publish line).
_PER_MESSAGE = ("publisher", "topic", "qos", "published_at", "pub_seq")

EXPECT_SCHEMA = T.StructType(
    [
        T.StructField("subscriber", T.StringType(), False),
        T.StructField("regex", T.StringType(), False),
        T.StructField("since", T.TimestampType(), True),
    ]
)


def by_message(df: DataFrame) -> DataFrame:
    """``df`` hash-partitioned by ``msg_id``.

    Every audit input is, so that the groupings by message or by (message, subscriber)
    and the joins between them need no further shuffle (the job lets a join on
    (``msg_id``, ``subscriber``) reuse a partitioning by ``msg_id`` alone).
    """
    return df.repartition("msg_id")


def publisher_order(events: DataFrame) -> DataFrame:
    """Every published message once (its first line wins) with its ``pub_seq``."""
    lines = by_message(
        of_event(events, "message.published")
        .where(F.col("msg_id").isNotNull())
        .select("msg_id", "client_id", "topic", "qos", "ts", "_lk")
    )
    nth_line = F.row_number().over(Window.partitionBy("msg_id").orderBy(*in_line_order()))
    first = lines.withColumn("_n", nth_line).where(F.col("_n") == 1)
    order = Window.partitionBy("client_id").orderBy(*in_line_order())
    return by_message(
        first.select(
            "msg_id",
            F.col("client_id").alias("publisher"),
            "topic",
            "qos",
            F.col("ts").alias("published_at"),
            F.row_number().over(order).cast("long").alias("pub_seq"),
        )
    )


def delivery_pairs(events: DataFrame) -> DataFrame:
    """Per (message, subscriber) with a delivery or an acknowledgement: deliveries,
    DUP-flagged ones, first/last, max QoS, and the first acknowledgement (``acked_at``).

    Delivered and acknowledged lines are grouped in one aggregate: a separate one for the
    acknowledgements would be joined to every pair (a hash table of all of them, twice).
    A pair with only an acknowledgement has 0 ``deliveries``. The first delivery's line
    key comes out as four columns (``_first_ts`` …): a job caches this frame, and Spark
    caches a struct column far more slowly than flat ones.
    """
    delivered = (
        of_event(events, "message.delivered")
        .where(F.col("msg_id").isNotNull() & F.col("client_id").isNotNull())
        .select(
            "msg_id",
            "client_id",
            F.lit(True).alias("_del"),
            "dup",
            "ts",
            "_lk",
            "qos",
            "publisher",
            "topic",
        )
    )
    acked = of_event(events, "message.acked").select(
        "msg_id",
        "client_id",
        F.lit(False).alias("_del"),
        F.lit(None).cast("boolean").alias("dup"),
        "ts",
        F.lit(None).cast(events.schema["_lk"].dataType).alias("_lk"),
        F.lit(None).cast("bigint").alias("qos"),
        F.lit(None).cast("string").alias("publisher"),
        F.lit(None).cast("string").alias("topic"),
    )
    is_del = F.col("_del")

    def of_del(name: str) -> Column:
        return F.when(is_del, F.col(name))

    agg = (
        by_message(delivered.unionByName(acked))
        .groupBy("msg_id", F.col("client_id").alias("subscriber"))
        .agg(
            count_if(is_del).alias("deliveries"),
            count_if(is_del & F.col("dup")).alias("dup_deliveries"),
            F.min(of_del("_lk")).alias("_first"),
            F.max(of_del("ts")).alias("last_delivered_at"),
            F.max(of_del("qos")).alias("delivered_qos"),
            F.min(of_del("publisher")).alias("_d_publisher"),
            F.min(of_del("topic")).alias("_d_topic"),
            F.min(F.when(~is_del, F.col("ts"))).alias("acked_at"),
        )
    )
    first = [F.col(f"_first.{f}").alias(f"_first_{f}") for f in LK_FIELDS]
    return agg.select(*[c for c in agg.columns if c != "_first"], *first)


def refusals(events: DataFrame) -> DataFrame:
    """The ids of the messages whose publisher was refused, once each (``msg_id``).

    Few (a refusal is a failure answered to a publisher), so they are broadcast.
    """
    return (
        of_event(events, "message.refused")
        .where(F.col("msg_id").isNotNull())
        .select("msg_id")
        .distinct()
    )


def expected_from_deliveries(audited: DataFrame, pairs: DataFrame) -> DataFrame:
    """Pairs implied by deliveries: the (publisher, topic) ranges each subscriber saw."""
    seen = pairs.select(*PAIR).join(
        audited.select("msg_id", "publisher", "topic", "pub_seq"), "msg_id"
    )
    ranges = seen.groupBy("subscriber", "publisher", "topic").agg(
        F.min("pub_seq").alias("_lo"), F.max("pub_seq").alias("_hi")
    )
    in_range = (
        audited.select("msg_id", "publisher", "topic", "pub_seq")
        .join(ranges, ["publisher", "topic"])
        .where(F.col("pub_seq").between(F.col("_lo"), F.col("_hi")))
        .select(*PAIR)
    )
    return in_range.unionByName(pairs.select(*PAIR)).distinct()


def _filter_pairs(audited: DataFrame, expectations: DataFrame) -> DataFrame:
    """The expected pairs of the subscribers the expect file lists, with their message's
    columns (``audited``'s), each pair once.

    The expect entries matching a topic are folded per (topic, subscriber) first: a
    message is expected by a subscriber when any of its matching entries has no ``from``,
    or it was published at or after the earliest ``from``. ``audited`` has one row per
    message, so the join yields each pair once, and keeps ``audited``'s partitioning.
    """
    topics = audited.select("topic").distinct()
    matched = (
        topics.join(F.broadcast(expectations), F.expr("topic RLIKE regex"))
        .groupBy("topic", "subscriber")
        .agg(F.min("since").alias("since"), F.max(F.col("since").isNull()).alias("_always"))
    )
    since_ok = F.col("_always") | (F.col("published_at") >= F.col("since"))
    joined = audited.join(F.broadcast(matched), "topic").where(since_ok)
    return joined.select(*PAIR, *[c for c in audited.columns if c != "msg_id"])


def expected_from_filters(audited: DataFrame, expectations: DataFrame) -> DataFrame:
    """Pairs implied by the expect file's filters (``EXPECT_SCHEMA`` rows).

    Filters are matched against the distinct topics, not every message: a regex taken
    from a column is compiled per evaluation, and topics are far fewer than messages.
    """
    return _filter_pairs(audited, expectations).select(*PAIR).distinct()


def _unlisted(pairs: DataFrame, expectations: DataFrame) -> DataFrame:
    listed = expectations.select("subscriber").distinct()
    return pairs.join(F.broadcast(listed), "subscriber", "left_anti")


def expected_pairs(
    audited: DataFrame, pairs: DataFrame, expectations: DataFrame | None
) -> DataFrame:
    """Filters for the subscribers they name, the deliveries rule for everyone else.

    The listed subscribers' pairs are dropped before the deliveries rule runs, not after:
    every pair it derives has a subscriber of ``pairs``, so the result is the same, and
    when the expect file lists every subscriber (the usual case) the rule joins nothing.
    The two parts share no subscriber and each holds a pair once, so their union does too.
    """
    return expected_rows(audited, pairs, expectations).select(*PAIR)


def expected_rows(
    audited: DataFrame,
    pairs: DataFrame,
    expectations: DataFrame | None,
    derive: bool = True,
) -> DataFrame:
    """``expected_pairs`` with each pair's message columns (``audited``'s).

    ``derive=False`` skips the deliveries rule: the caller knows that the expect file
    lists every subscriber of ``pairs``, so that the rule would derive nothing (and
    still shuffle every message to find so).
    """
    columns = [c for c in audited.columns if c != "msg_id"]

    def derived(delivered: DataFrame) -> DataFrame:
        keys = by_message(expected_from_deliveries(audited, delivered).select(*PAIR))
        return keys.join(audited.hint("shuffle_hash"), "msg_id").select(*PAIR, *columns)

    if expectations is None:
        return derived(pairs)
    listed = _filter_pairs(audited, expectations)
    if not derive:
        return listed
    return derived(_unlisted(pairs, expectations)).unionByName(listed)


def unlisted_subscribers(events: DataFrame, expectations: DataFrame) -> DataFrame:
    """Subscribers delivered to that the expect file does not list: none means
    ``delivery_audit`` may skip the deliveries rule (``derive``)."""
    delivered = of_event(events, "message.delivered").where(
        F.col("msg_id").isNotNull() & F.col("client_id").isNotNull()
    )
    subscribers = delivered.select(F.col("client_id").alias("subscriber")).distinct()
    return _unlisted(subscribers, expectations)


def audit_events(events: DataFrame, expectations: DataFrame | None = None) -> DataFrame:
    """``delivery_audit`` straight from the events frame."""
    return delivery_audit(
        publisher_order(events), delivery_pairs(events), refusals(events), expectations
    )


def delivery_audit(
    pub: DataFrame,
    pairs: DataFrame,
    refused: DataFrame,
    expectations: DataFrame | None = None,
    derive: bool = True,
) -> DataFrame:
    """One row per audited (message, subscriber) pair with its verdicts.

    Inputs are ``publisher_order``, ``delivery_pairs`` and ``refusals`` of the same
    events; ``derive`` as in ``expected_rows``. ``pub`` and ``pairs`` are partitioned by
    ``msg_id``, and so is every join below (hash joins, no sort): the delivered (or
    acknowledged) pairs get their message's columns, the expected pairs come with them,
    and a full outer join brings the two together. Two hash tables in all: the messages
    and the expected pairs; the refusals are broadcast.
    """
    audited = pub.where(F.col("qos") >= 1)
    seen = pairs.join(pub.hint("shuffle_hash"), "msg_id", "left").where(
        F.col("qos").isNull() | (F.col("qos") >= 1)
    )
    delivered_pairs = pairs.where(F.col("deliveries") > 0).select(*PAIR)
    expected = expected_rows(audited, delivered_pairs, expectations, derive).select(
        *PAIR, F.lit(True).alias("_exp"), *[F.col(c).alias(f"_e{c}") for c in _PER_MESSAGE]
    )
    joined = seen.join(expected.hint("shuffle_hash"), PAIR, "full_outer").where(
        (F.col("deliveries") > 0) | F.col("_exp").isNotNull()
    )
    flags = F.broadcast(refused.select("msg_id", F.lit(True).alias("_refused")))
    rows = joined.join(flags, "msg_id", "left").select(
        *[c for c in seen.columns if c not in _PER_MESSAGE],
        "_exp",
        "_refused",
        *[F.coalesce(F.col(c), F.col(f"_e{c}")).alias(c) for c in _PER_MESSAGE],
    )
    delivered = F.coalesce(F.col("deliveries"), F.lit(0)) > 0
    published = F.col("pub_seq").isNotNull()
    first = [f"_first_{f}" for f in LK_FIELDS]
    rows = rows.select(
        "msg_id",
        "subscriber",
        F.coalesce(F.col("publisher"), F.col("_d_publisher")).alias("publisher"),
        F.coalesce(F.col("topic"), F.col("_d_topic")).alias("topic"),
        "qos",
        "pub_seq",
        published.alias("published"),
        "published_at",
        F.coalesce(F.col("_refused"), F.lit(False)).alias("refused"),
        F.coalesce(F.col("_exp"), F.lit(False)).alias("expected"),
        delivered.alias("delivered"),
        F.coalesce(F.col("deliveries"), F.lit(0)).cast("long").alias("deliveries"),
        F.coalesce(F.col("dup_deliveries"), F.lit(0)).cast("long").alias("dup_deliveries"),
        F.col("_first_ts").alias("first_delivered_at"),
        "last_delivered_at",
        "delivered_qos",
        F.col("acked_at").isNotNull().alias("acked"),
        "acked_at",
        *first,
    )
    w = Window.partitionBy("publisher", "subscriber").orderBy(*first)
    before = w.rowsBetween(Window.unboundedPreceding, -1)
    judged = F.col("delivered") & F.col("published")
    prior_max = F.max(F.when(judged, F.col("pub_seq"))).over(before)
    return rows.select(
        *[c for c in rows.columns if not c.startswith("_first_")],
        (F.col("expected") & ~F.col("delivered") & ~F.col("refused")).alias("lost"),
        (F.col("deliveries") > 1).alias("duplicated"),
        F.coalesce(judged & (prior_max > F.col("pub_seq")), F.lit(False)).alias("out_of_order"),
        (
            F.col("delivered")
            & (F.coalesce(F.col("delivered_qos"), F.lit(0)) >= 1)
            & ~F.col("acked")
        ).alias("unacked"),
        (F.col("delivered") & ~F.col("expected")).alias("unexpected"),
        day(F.coalesce(F.col("published_at"), F.col("first_delivered_at"))).alias("date"),
    )


SUMMARY_COLUMNS = (
    "messages",
    "publishers",
    "subscribers",
    "pairs",
    "expected",
    "delivered",
    "deliveries",
    "lost",
    "refused",
    "duplicated",
    "out_of_order",
    "unacked",
    "unexpected",
    "orphans",
    "redeliveries",
)


def audit_summary(audit: DataFrame) -> DataFrame:
    """One row of counts over the audit (pairs, except ``messages``/``deliveries``)."""
    return audit.agg(
        F.countDistinct(F.when(F.col("published"), F.col("msg_id"))).alias("messages"),
        F.countDistinct("publisher").alias("publishers"),
        F.countDistinct("subscriber").alias("subscribers"),
        F.count(F.lit(1)).alias("pairs"),
        count_if(F.col("expected")).alias("expected"),
        count_if(F.col("delivered")).alias("delivered"),
        F.coalesce(F.sum("deliveries"), F.lit(0)).cast("long").alias("deliveries"),
        count_if(F.col("lost")).alias("lost"),
        count_if(F.col("refused")).alias("refused"),
        count_if(F.col("duplicated")).alias("duplicated"),
        count_if(F.col("out_of_order")).alias("out_of_order"),
        count_if(F.col("unacked")).alias("unacked"),
        count_if(F.col("unexpected")).alias("unexpected"),
        count_if(F.col("delivered") & ~F.col("published")).alias("orphans"),
        F.coalesce(F.sum("dup_deliveries"), F.lit(0)).cast("long").alias("redeliveries"),
    )
