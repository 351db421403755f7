"""Sessions, traffic, latency, drops, node load and netsplit windows on inline frames."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.extract import events_from_records
from spark_pipeline.transforms import flow, ops
from spark_pipeline.transforms.sessions import sessions

pytestmark = pytest.mark.spark


def ev(event: str, ts: str, node: str = "dev1", **fields: Any) -> dict[str, Any]:
    return {"ts": f"2026-11-22T{ts}Z", "event": event, "node": node, "level": "info", **fields}


def at(hms: str) -> datetime:
    """A UTC time as PySpark returns timestamps: naive, in the local time zone."""
    h, m, s = (float(x) for x in hms.split(":"))
    utc = datetime(2026, 11, 22, int(h), int(m), int(s), round(s % 1 * 1e6), tzinfo=UTC)
    return datetime.fromtimestamp(utc.timestamp())


def test_sessions_pair_connects_with_disconnects(spark: SparkSession) -> None:
    c: dict[str, Any] = {"mountpoint": "", "proto_ver": 5, "clean_start": True, "peer": "p"}
    recs = [
        ev("client.connected", "07:00:00", client_id="a", **c),
        ev("client.disconnected", "07:00:10.5", client_id="a", mountpoint="", reason="normal"),
        ev("client.connected", "07:01:00", client_id="a", **c),  # node died: never closed
        ev("client.connected", "07:02:00", client_id="a", **c),
        ev("client.disconnected", "07:02:01", client_id="a", mountpoint="", reason="takeover"),
        ev("client.connected", "07:00:00", node="dev2", client_id="a", **c),  # other node
        ev(
            "client.disconnected",
            "07:05:00",
            client_id="b",
            mountpoint="",
            reason="x",
            duration_s=60.0,
        ),  # its connect was rotated away
    ]
    got = sorted(
        (
            r["client_id"],
            r["node"],
            r["connected_at"],
            r["disconnected_at"],
            r["duration_s"],
            r["disconnect_reason"],
            r["complete"],
            r["proto_ver"],
        )
        for r in sessions(events_from_records(spark, recs)).collect()
    )
    assert got == [
        ("a", "dev1", at("07:00:00"), at("07:00:10.5"), 10.5, "normal", True, 5),
        ("a", "dev1", at("07:01:00"), None, None, None, False, 5),
        ("a", "dev1", at("07:02:00"), at("07:02:01"), 1.0, "takeover", True, 5),
        ("a", "dev2", at("07:00:00"), None, None, None, False, 5),
        ("b", "dev1", at("07:04:00"), at("07:05:00"), 60.0, "x", False, None),
    ]


def test_flow_latency_drops_and_node_load(spark: SparkSession) -> None:
    recs = [
        ev("message.published", "07:00:01", msg_id="m1", topic="t", qos=0, size=10),
        ev("message.published", "07:00:02", msg_id="m2", topic="t", qos=1, size=20, retain=True),
        ev("message.published", "07:00:03", node="dev2", msg_id="m3", topic="u", qos=2, size=5),
        ev("message.published", "07:01:00", msg_id="m4", topic="t", qos=1, size=1),
        ev("message.dropped", "07:01:01", msg_id="m1", client_id="s", qos=0, reason="queue_full"),
        ev("message.dropped", "07:01:02", msg_id="m1", client_id="s2", qos=0, reason="queue_full"),
        ev("message.expired", "07:01:03", msg_id="m2", client_id="s"),
        ev("auth.failed", "07:01:04", level="warning", client_id="x"),
    ]
    recs += [
        ev(
            "message.delivered",
            f"07:00:{10 + i * 0.4:09.6f}",
            node="dev2",
            msg_id="m2",
            topic="t",
            client_id=f"s{i}",
            latency_us=i,
        )
        for i in range(1, 101)
    ]
    events = events_from_records(spark, recs)
    mf = {(r["minute"].minute, r["topic"]): r for r in flow.message_flow(events).collect()}
    t0 = mf[(0, "t")]
    assert (t0["messages"], t0["bytes"], t0["qos0"], t0["qos1"], t0["retained"]) == (2, 30, 1, 1, 1)
    assert t0["deliveries"] == 100 and mf[(1, "t")]["deliveries"] == 0
    assert (mf[(0, "u")]["qos2"], mf[(0, "u")]["deliveries"]) == (1, 0)
    lat = flow.delivery_latency(events).collect()
    assert [
        (r["topic"], r["deliveries"], r["p50_us"], r["p95_us"], r["p99_us"], r["max_us"])
        for r in lat
    ] == [("t", 100, 50, 95, 99, 100)]
    overall = flow.latency_overall(events).first()
    assert overall is not None and overall["p99_us"] == 99
    dr = sorted(
        (r["reason"], r["drops"], r["messages"], r["clients"]) for r in ops.drops(events).collect()
    )
    assert dr == [("expired", 1, 1, 1), ("queue_full", 2, 1, 2)]
    load = {(r["node"], r["minute"].minute): r for r in ops.node_load(events).collect()}
    assert (load[("dev1", 0)]["published"], load[("dev1", 0)]["bytes_in"]) == (2, 30)
    assert load[("dev2", 0)]["delivered"] == 100
    assert (load[("dev1", 1)]["dropped"], load[("dev1", 1)]["warnings"]) == (2, 1)
    assert load[("dev1", 1)]["auth_failures"] == 1


def test_netsplit_windows_merge_across_nodes(spark: SparkSession) -> None:
    def det(ts: str, node: str, *unreachable: str) -> dict[str, Any]:
        return ev("netsplit.detected", ts, node=node, unreachable=list(unreachable), members=3)

    def heal(ts: str, node: str, dur: float = 1.0) -> dict[str, Any]:
        return ev("netsplit.healed", ts, node=node, duration_s=dur, members=3)

    recs = [
        det("07:00:00", "dev1", "dev3"),
        det("07:00:02", "dev1", "dev2"),
        det("07:00:01", "dev3", "dev1", "dev2"),
        heal("07:00:10", "dev1"),
        heal("07:00:12", "dev3"),
        heal("07:05:00", "dev2", dur=30.0),  # its detection was rotated away
        det("07:10:00", "dev2", "dev1"),  # never healed
    ]
    got = [
        (r["started_at"], r["ended_at"], r["duration_s"], r["nodes"], r["observers"], r["healed"])
        for r in ops.netsplits(events_from_records(spark, recs)).orderBy("started_at").collect()
    ]
    assert got == [
        (at("07:00:00"), at("07:00:12"), 12.0, ["dev1", "dev2", "dev3"], ["dev1", "dev3"], True),
        (at("07:04:30"), at("07:05:00"), 30.0, ["dev2"], ["dev2"], True),
        (at("07:10:00"), None, None, ["dev1", "dev2"], ["dev2"], False),
    ]
