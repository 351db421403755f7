"""Flow control: a QoS 1 publisher faster than the subscriber it feeds is held back
instead of the subscriber's queue overflowing (``max_online_messages`` drops).

A raw subscriber that acknowledges at its own, slower pace must get every message, in
order, with nothing dropped (without flow control most are: the online limit here is
40 + 20 in flight). A subscriber that stops reading altogether must not stall its
publisher for good: after the grace period its own queue limit applies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.listener.mqtt.types import Puback, Publish
from tests.conformance.client import connected
from tests.support.clients import Client
from tests.support.node import Node, make_node, wait_for

pytestmark = pytest.mark.integration

TOTAL = 600


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    # online limit 40 + 20 in flight: without flow control most of TOTAL would be dropped
    n = make_node(tmp_path / "n", max_online_messages="40")
    n.start()
    try:
        yield n
    finally:
        n.stop()


def test_a_fast_publisher_is_paced_to_a_slow_subscriber(node: Node) -> None:
    sub, _ = connected(node.mqtt_port, "flow-sub", clean=False)
    sub.subscribe("flow/t", 1)
    pub = Client("flow-pub", node.mqtt_port).connect()
    for i in range(TOTAL):
        pub.publish("flow/t", str(i).encode(), qos=1, tag=i)
    # The subscriber reads and acknowledges at its own pace (~20 every 40 ms): slower
    # than the publisher, but never stuck, so nothing may be dropped.
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < TOTAL and time.monotonic() < deadline:
        for _ in range(20):
            pkt = sub.expect(Publish, timeout=10)
            assert pkt.packet_id is not None
            sub.send(Puback(pkt.packet_id))
            got.append(int(pkt.payload))
            if len(got) == TOTAL:
                break
        time.sleep(0.04)
    assert got == list(range(TOTAL))
    wait_for(lambda: len(pub.acked) == TOTAL, 30, what="every PUBACK")
    node.settle_logs()
    dropped = [e for e in node.events("message.dropped") if e["client_id"] == "flow-sub"]
    assert dropped == []
    pub.disconnect()
    sub.close()


def test_a_stuck_subscriber_holds_the_publisher_back_only_for_a_while(node: Node) -> None:
    """A subscriber that stops reading does not stall its publisher for good: after the
    grace period the publisher goes on, and the stuck session's queue limit applies."""
    sub, _ = connected(node.mqtt_port, "stuck-sub", clean=False)
    sub.subscribe("stuck/t", 1)
    pub = Client("stuck-pub", node.mqtt_port).connect()
    for i in range(TOTAL):
        pub.publish("stuck/t", str(i).encode(), qos=1, tag=i)
    wait_for(lambda: len(pub.acked) == TOTAL, 30, what="every PUBACK despite the stuck reader")
    node.settle_logs()
    dropped = [e for e in node.events("message.dropped") if e["client_id"] == "stuck-sub"]
    assert dropped and all(e["reason"] == "queue_full" for e in dropped)
    pub.disconnect()
    sub.close()
