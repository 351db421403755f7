"""The delivery audit on small inline frames: faults injected by hand are caught."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_pipeline.expect import Expectation
from spark_pipeline.extract import events_from_records
from spark_pipeline.jobs import expectations_frame
from spark_pipeline.transforms.audit import audit_events, audit_summary

pytestmark = pytest.mark.spark


def pub(i: int, sec: float, publisher: str = "P", topic: str = "t", qos: int = 1) -> dict[str, Any]:
    return {
        "ts": f"2026-11-22T07:05:{sec:09.6f}Z",
        "event": "message.published",
        "node": "dev1",
        "msg_id": f"m{i}",
        "client_id": publisher,
        "topic": topic,
        "qos": qos,
        "size": 8,
    }


def dl(i: int, sec: float, sub: str = "S", dup: bool = False, topic: str = "t") -> dict[str, Any]:
    return {
        "ts": f"2026-11-22T07:06:{sec:09.6f}Z",
        "event": "message.delivered",
        "node": "dev2",
        "msg_id": f"m{i}",
        "client_id": sub,
        "topic": topic,
        "qos": 1,
        "dup": dup,
        "latency_us": 10,
        "publisher": "P",
    }


def ack(i: int, sec: float, sub: str = "S") -> dict[str, Any]:
    return {
        "ts": f"2026-11-22T07:06:{sec:09.6f}Z",
        "event": "message.acked",
        "node": "dev2",
        "msg_id": f"m{i}",
        "client_id": sub,
        "qos": 1,
    }


def refused(i: int, sec: float, code: int = 0x80) -> dict[str, Any]:
    return {
        "ts": f"2026-11-22T07:05:{sec:09.6f}Z",
        "event": "message.refused",
        "node": "dev1",
        "msg_id": f"m{i}",
        "client_id": "P",
        "topic": "t",
        "qos": 1,
        "reason_code": code,
        "reason": "store_error",
    }


def rows(df: DataFrame) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["msg_id"], r["subscriber"]): r.asDict() for r in df.collect()}


def summary(df: DataFrame) -> dict[str, Any]:
    row = audit_summary(df).first()
    assert row is not None
    return row.asDict()


def flagged(audit: dict[tuple[str, str], dict[str, Any]], verdict: str) -> set[str]:
    return {m for (m, _s), r in audit.items() if r[verdict]}


def test_worked_example_lost_duplicated_reordered(spark: SparkSession) -> None:
    recs = [pub(i, i) for i in range(1, 6)]
    recs += [dl(1, 1), dl(3, 2), dl(2, 3), dl(5, 4), dl(5, 5, dup=True)]
    recs += [ack(i, 10 + i) for i in (1, 2, 3, 5)]
    audit = rows(audit_events(events_from_records(spark, recs)))
    assert set(audit) == {(f"m{i}", "S") for i in range(1, 6)}
    assert flagged(audit, "lost") == {"m4"}
    assert flagged(audit, "duplicated") == {"m5"}
    assert flagged(audit, "out_of_order") == {"m2"}
    assert flagged(audit, "unacked") == set()
    assert [audit[(f"m{i}", "S")]["pub_seq"] for i in range(1, 6)] == [1, 2, 3, 4, 5]
    assert audit[("m5", "S")]["deliveries"] == 2 and audit[("m5", "S")]["dup_deliveries"] == 1
    assert audit[("m1", "S")]["acked"] and not audit[("m4", "S")]["delivered"]


def test_clean_stream_has_no_verdicts(spark: SparkSession) -> None:
    recs = [pub(i, i) for i in range(1, 5)] + [dl(i, i) for i in range(1, 5)]
    s = summary(audit_events(events_from_records(spark, recs)))
    assert (s["pairs"], s["lost"], s["duplicated"], s["out_of_order"]) == (4, 0, 0, 0)
    assert s["unacked"] == 4


def test_equal_timestamps_fall_back_to_line_order(spark: SparkSession) -> None:
    # m2 and m1 share a timestamp; m2's line comes first, so m2 precedes m1.
    recs = [pub(2, 1.0), pub(1, 1.0), dl(2, 1), dl(1, 2)]
    audit = rows(audit_events(events_from_records(spark, recs)))
    assert audit[("m2", "S")]["pub_seq"] == 1
    assert flagged(audit, "out_of_order") == set()
    swapped = rows(audit_events(events_from_records(spark, [recs[1], recs[0], *recs[2:]])))
    assert flagged(swapped, "out_of_order") == {"m1"}


def test_order_is_per_publisher_and_subscriber(spark: SparkSession) -> None:
    recs = [pub(1, 1, "P"), pub(2, 2, "Q"), pub(3, 3, "P")]
    recs += [dl(3, 1, "S"), dl(2, 2, "S"), dl(1, 3, "S")]  # P's m1 after P's m3
    recs += [dl(1, 1, "T"), dl(3, 2, "T")]
    audit = rows(audit_events(events_from_records(spark, recs)))
    assert {k for k, r in audit.items() if r["out_of_order"]} == {("m1", "S")}


def test_qos0_is_not_audited_and_gaps_are_per_topic(spark: SparkSession) -> None:
    recs = [pub(1, 1), pub(2, 2, qos=0), pub(3, 3, topic="u"), pub(4, 4), pub(5, 5)]
    recs += [dl(1, 1), dl(5, 2)]
    audit = rows(audit_events(events_from_records(spark, recs)))
    assert set(audit) == {("m1", "S"), ("m4", "S"), ("m5", "S")}
    assert flagged(audit, "lost") == {"m4"}


def test_orphan_delivery_is_kept_but_never_out_of_order(spark: SparkSession) -> None:
    recs = [pub(1, 1), dl(9, 1), dl(1, 2)]
    df = audit_events(events_from_records(spark, recs)).cache()
    audit = rows(df)
    orphan = audit[("m9", "S")]
    assert not orphan["published"] and orphan["publisher"] == "P"
    assert summary(df)["orphans"] == 1
    assert flagged(audit, "out_of_order") == set()
    df.unpersist()


def test_expect_filters_catch_edge_losses_and_unexpected(spark: SparkSession) -> None:
    recs = [
        pub(1, 1, topic="a/x"),
        pub(2, 2, topic="a/y/z"),
        pub(3, 3, topic="b/x"),
        pub(4, 4, topic="$SYS/x"),
        pub(5, 5, topic="a/x"),
    ]
    recs += [dl(2, 1, topic="a/y/z"), dl(3, 2, topic="b/x"), dl(1, 3, "U", topic="a/x")]
    since = datetime(2026, 11, 22, 7, 5, 1, 500_000, tzinfo=UTC)
    exp = expectations_frame(
        spark,
        [
            Expectation("S", "a/#", since),
            Expectation("S", "#", None),
            Expectation("V", "+/x", None),
        ],
    )
    audit = rows(audit_events(events_from_records(spark, recs), exp))
    # S: "#" covers everything but $SYS; V: +/x; U is not listed, so its deliveries rule.
    assert flagged(audit, "lost") == {"m1", "m5"} | {"m3"}  # S lost m1, m5; V lost m1, m3, m5
    assert {k for k, r in audit.items() if r["lost"]} == {
        ("m1", "S"),
        ("m5", "S"),
        ("m1", "V"),
        ("m3", "V"),
        ("m5", "V"),
    }
    assert ("m4", "S") not in audit
    assert audit[("m1", "U")]["expected"] and not audit[("m1", "U")]["lost"]


def test_expect_marks_deliveries_outside_filters_unexpected(spark: SparkSession) -> None:
    recs = [pub(1, 1, topic="a"), pub(2, 2, topic="b"), dl(1, 1, topic="a"), dl(2, 2, topic="b")]
    exp = expectations_frame(spark, [Expectation("S", "a", None)])
    audit = rows(audit_events(events_from_records(spark, recs), exp))
    assert {k for k, r in audit.items() if r["unexpected"]} == {("m2", "S")}


def test_a_refused_message_never_delivered_is_not_lost(spark: SparkSession) -> None:
    """P was refused m2 (and m4, after the last delivery): nothing was promised for them."""
    recs = [pub(i, i) for i in range(1, 5)]
    recs += [refused(2, 2.5), refused(4, 4.5, code=0x83), refused(4, 4.6)]
    recs += [dl(1, 1), dl(3, 2)]
    exp = expectations_frame(spark, [Expectation("S", "t", None)])
    df = audit_events(events_from_records(spark, recs), exp).cache()
    audit = rows(df)
    assert set(audit) == {(f"m{i}", "S") for i in range(1, 5)}
    assert flagged(audit, "refused") == {"m2", "m4"}
    assert flagged(audit, "lost") == set()
    assert audit[("m2", "S")]["expected"] and not audit[("m2", "S")]["delivered"]
    s = summary(df)
    assert (s["pairs"], s["expected"], s["lost"], s["refused"]) == (4, 4, 0, 2)
    df.unpersist()


def test_a_refused_message_that_is_delivered_is_judged_as_any_delivery(
    spark: SparkSession,
) -> None:
    """m2 was refused, yet S got it (late, twice): not lost, not unexpected, but still out
    of order and duplicated; m4, not refused, is lost as before."""
    recs = [pub(i, i) for i in range(1, 6)] + [refused(2, 2.5)]
    recs += [dl(1, 1), dl(3, 2), dl(2, 3), dl(2, 4, dup=True), dl(5, 5)]
    recs += [ack(i, 10 + i) for i in (1, 3, 5)]
    df = audit_events(events_from_records(spark, recs)).cache()
    audit = rows(df)
    m2 = audit[("m2", "S")]
    assert m2["refused"] and m2["delivered"] and m2["expected"]
    assert not m2["lost"] and not m2["unexpected"]
    assert m2["out_of_order"] and m2["duplicated"] and m2["unacked"]
    assert flagged(audit, "lost") == {"m4"}
    assert flagged(audit, "refused") == {"m2"}
    s = summary(df)
    assert (s["lost"], s["refused"], s["duplicated"], s["out_of_order"]) == (1, 1, 1, 1)
    assert s["unexpected"] == 0
    df.unpersist()


def test_refusal_of_a_message_to_several_subscribers_counts_each_pair(
    spark: SparkSession,
) -> None:
    recs = [pub(1, 1), pub(2, 2), refused(2, 2.5), dl(1, 1, "S"), dl(1, 1, "T"), dl(2, 2, "T")]
    exp = expectations_frame(spark, [Expectation("S", "t", None), Expectation("T", "#", None)])
    s = summary(audit_events(events_from_records(spark, recs), exp))
    assert (s["pairs"], s["lost"], s["refused"], s["unexpected"]) == (4, 0, 2, 0)
