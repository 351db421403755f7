"""The delivery audit proves itself against a real broker (issue: "the audit proves itself").

A known workload runs through a real node: persistent QoS 1 subscribers, a publisher
whose PUBACKs the test records, the node killed with SIGKILL mid-run and started again.
The ETL then reads the node's own logs, and its lost / duplicated / out-of-order counts
must equal what the test clients actually saw. A second run makes the broker drop
messages on purpose (a tiny ``max_offline_messages``), so the audit is shown to catch
loss: a check that could only ever say "nothing lost" would be worth nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.jobs import run_etl
from tests.support.clients import Client
from tests.support.node import Node, make_node, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.fault]

TOPIC = "audit/t"
SUBSCRIBERS = ("audit-s1", "audit-s2")


@dataclass
class ClientCounts:
    lost: int
    duplicated: int
    out_of_order: int
    delivered_pairs: int


def _count(acked: set[int], received: dict[str, list[int]]) -> ClientCounts:
    """What the clients themselves observed, per (message, subscriber) pair."""
    lost = dup = ooo = pairs = 0
    for got in received.values():
        lost += len(acked - set(got))
        seen: set[int] = set()
        highest = -1
        for v in got:
            if v in seen:
                continue
            seen.add(v)
            if v < highest:
                ooo += 1
            highest = max(highest, v)
        dup += sum(1 for v in seen if got.count(v) > 1)
        pairs += len(seen)
    return ClientCounts(lost, dup, ooo, pairs)


def _publish(pub: Client, start: int, n: int) -> None:
    for i in range(start, start + n):
        pub.publish(TOPIC, str(i).encode(), qos=1, tag=i)
    wait_for(lambda: len(pub.acked) >= start + n, 30, what=f"PUBACKs up to {start + n}")


def _workload(node: Node, kill: bool) -> tuple[set[int], dict[str, list[int]]]:
    port = node.mqtt_port
    received: dict[str, list[int]] = {s: [] for s in SUBSCRIBERS}
    subs = {s: Client(s, port, clean=False).connect() for s in SUBSCRIBERS}
    for s in subs.values():
        s.subscribe(TOPIC, 1)
    pub = Client("audit-pub", port).connect()
    _publish(pub, 0, 60)  # delivered live
    for name, s in subs.items():
        received[name] += [int(m.payload) for m in s.take(60)]
        s.disconnect()
    for name in SUBSCRIBERS:  # offline (and under the offline queue limit) before we go on
        wait_for(lambda name=name: _offline(node, name), 15, what=f"{name} offline")
    _publish(pub, 60, 120)  # queued for the offline subscribers
    acked = set(pub.acked)
    pub.disconnect()
    if kill:
        node.kill()
        node.start()
    pub = Client("audit-pub", port).connect()
    pub.acked.extend(acked)
    _publish(pub, 180, 40)
    acked = set(pub.acked)
    pub.disconnect()
    for name in SUBSCRIBERS:
        again = Client(name, port, clean=False).connect()
        received[name] += [int(m.payload) for m in again.drain(quiet=2.0)]
        again.disconnect()
    return acked, received


def _offline(node: Node, client_id: str) -> bool:
    rows = node.get_json(f"/api/v1/session/show?client_id={client_id}")
    return isinstance(rows, list) and len(rows) == 1 and rows[0]["online"] is False


def _audit(spark: SparkSession, node: Node, out: Path) -> dict[str, int]:
    assert node.stop() == 0  # a clean stop flushes and closes every log
    node.proc = None
    expect = out.parent / f"{out.name}-expect.json"
    expect.write_text(
        json.dumps(
            [{"subscriber": s, "topic_filter": "audit/#", "from": None} for s in SUBSCRIBERS]
        )
    )
    return run_etl(node.log_dir, out, spark=spark, expect=expect)


def _stop(node: Node) -> None:
    if node.proc is not None and node.proc.poll() is None:
        node.stop()


def test_audit_matches_clients_across_a_node_kill(spark: SparkSession, tmp_path: Path) -> None:
    node = make_node(tmp_path / "n")
    node.start()
    try:
        acked, received = _workload(node, kill=True)
        seen = _count(acked, received)
        summary = _audit(spark, node, tmp_path / "out")
    finally:
        _stop(node)
    assert seen.lost == 0, "the broker lost acknowledged messages (I1)"
    assert seen.out_of_order == 0, "the broker reordered messages (I2)"
    assert summary["lost"] == seen.lost
    assert summary["duplicated"] == seen.duplicated
    assert summary["out_of_order"] == seen.out_of_order
    assert summary["delivered"] == seen.delivered_pairs == len(acked) * len(SUBSCRIBERS)
    assert summary["corrupt_lines"] == 0


def test_audit_catches_deliberate_loss(spark: SparkSession, tmp_path: Path) -> None:
    """Offline queues hold 50 messages; 160 arrive while the subscribers are away, so 110
    per subscriber are dropped (logged as message.dropped, queue_full) and the audit must
    count every one."""
    node = make_node(tmp_path / "n", max_offline_messages="50")
    node.start()
    try:
        acked, received = _workload(node, kill=False)
        seen = _count(acked, received)
        summary = _audit(spark, node, tmp_path / "out")
    finally:
        _stop(node)
    assert seen.lost == 110 * len(SUBSCRIBERS)
    assert summary["lost"] == seen.lost
    assert summary["duplicated"] == seen.duplicated
    assert summary["out_of_order"] == seen.out_of_order
