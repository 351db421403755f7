"""04 retain: set, replace, clear, delivery on subscribe, retain flag rules, v5 options.

Runs on the package's shared default node; every test retains under its own topic root.
"""

from __future__ import annotations

import pytest

from services.listener.mqtt.types import Puback, Publish
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import unique
from tests.support.node import Node

pytestmark = pytest.mark.integration


def _client(node: Node, version: int = 4) -> RawClient:
    client, _ = connected(node.mqtt_port, unique(), version)
    return client


def _retained_on_subscribe(node: Node, topic_filter: str, qos: int = 1) -> list[Publish]:
    """What a new subscriber to ``topic_filter`` receives at subscribe time."""
    sub = _client(node)
    sub.subscribe(topic_filter, qos)
    got = [p for p in sub.collect(0.7) if isinstance(p, Publish)]
    sub.disconnect()
    return got


def test_retained_delivered_on_subscribe(node: Node) -> None:
    """[MQTT-3.3.1-5] a retained PUBLISH is stored; [MQTT-3.3.1-6] a new subscription gets
    it, with RETAIN set [MQTT-3.3.1-8]."""
    t = unique("r") + "/set"
    pub = _client(node)
    pub.publish(t, b"kept", qos=1, retain=True)
    pub.disconnect()
    got = _retained_on_subscribe(node, t)
    assert [(p.topic, p.payload, p.retain) for p in got] == [(t, b"kept", True)]


def test_retained_replaced(node: Node) -> None:
    """[MQTT-3.3.1-5] a new retained message replaces the previous one on its topic."""
    t = unique("r") + "/replace"
    pub = _client(node)
    pub.publish(t, b"old", qos=1, retain=True)
    pub.publish(t, b"new", qos=1, retain=True)
    pub.disconnect()
    assert [p.payload for p in _retained_on_subscribe(node, t)] == [b"new"]


def test_retained_cleared_by_empty_payload(node: Node) -> None:
    """[MQTT-3.3.1-10] a retained PUBLISH with an empty payload removes the retained
    message and [MQTT-3.3.1-11] is not stored itself; current subscribers still get it
    as a normal message."""
    t = unique("r") + "/clear"
    pub = _client(node)
    pub.publish(t, b"soon gone", qos=1, retain=True)
    live = _client(node)
    live.subscribe(t, 1)
    assert live.receive().payload == b"soon gone"
    pub.publish(t, b"", qos=1, retain=True)
    cleared = live.receive()
    assert (cleared.payload, cleared.retain) == (b"", False)
    pub.disconnect()
    live.disconnect()
    assert _retained_on_subscribe(node, t) == []


def test_live_messages_have_retain_0_v311(node: Node) -> None:
    """[MQTT-3.3.1-9] a retained PUBLISH forwarded to an existing subscription has
    RETAIN 0 (3.1.1)."""
    t = unique("r") + "/live"
    sub = _client(node)
    sub.subscribe(t, 1)
    pub = _client(node)
    pub.publish(t, b"live", qos=1, retain=True)
    got = sub.receive()
    assert (got.payload, got.retain) == (b"live", False)
    sub.disconnect()
    pub.disconnect()


def test_non_retained_publish_keeps_retained(node: Node) -> None:
    """[MQTT-3.3.1-12] (3.1.1) a PUBLISH with RETAIN 0 neither stores nor replaces the
    retained message of its topic."""
    t = unique("r") + "/keep"
    pub = _client(node)
    pub.publish(t, b"retained", qos=1, retain=True)
    pub.publish(t, b"plain", qos=1)
    pub.disconnect()
    assert [p.payload for p in _retained_on_subscribe(node, t)] == [b"retained"]


def test_retained_qos_is_min_of_stored_and_granted(node: Node) -> None:
    """[MQTT-3.8.4-6] a retained message is delivered at min(its QoS, granted QoS)."""
    t = unique("r") + "/qos"
    pub = _client(node)
    pub.publish(t, b"q1", qos=1, retain=True)
    pub.disconnect()
    assert [p.qos for p in _retained_on_subscribe(node, t, qos=0)] == [0]
    assert [p.qos for p in _retained_on_subscribe(node, t, qos=2)] == [1]


def test_wildcard_subscription_gets_every_match(node: Node) -> None:
    """[MQTT-3.3.1-6] the last retained message of *each* matching topic is sent."""
    r = unique("r")
    pub = _client(node)
    for leaf in ("a", "b", "c/d"):
        pub.publish(f"{r}/{leaf}", leaf.encode(), qos=1, retain=True)
    pub.disconnect()
    got = _retained_on_subscribe(node, f"{r}/+")
    assert sorted(p.topic for p in got) == [f"{r}/a", f"{r}/b"]
    assert all(p.retain for p in got)
    assert len(_retained_on_subscribe(node, f"{r}/#")) == 3


def test_resubscribe_resends_retained_v311(node: Node) -> None:
    """[MQTT-3.8.4-3] a SUBSCRIBE replacing an identical subscription re-sends the
    matching retained messages."""
    t = unique("r") + "/again"
    pub = _client(node)
    pub.publish(t, b"r", qos=1, retain=True)
    pub.disconnect()
    sub = _client(node)
    sub.subscribe(t, 1)
    assert sub.receive().retain
    sub.subscribe(t, 1)
    again = sub.receive()
    assert (again.payload, again.retain) == (b"r", True)
    sub.disconnect()


# -- MQTT 5 subscription options -----------------------------------------------------------


@pytest.mark.parametrize(
    ("handling", "first", "second"),
    [(0, True, True), (1, True, False), (2, False, False)],
)
def test_v5_retain_handling(node: Node, handling: int, first: bool, second: bool) -> None:
    """Retain Handling: 0 sends retained messages at every subscribe [MQTT-3.3.1-9],
    1 only when the subscription did not exist [MQTT-3.3.1-10], 2 never [MQTT-3.3.1-11]."""
    t = unique("r") + "/rh"
    pub = _client(node)
    pub.publish(t, b"r", qos=1, retain=True)
    pub.disconnect()
    sub = _client(node, 5)
    for expected in (first, second):
        sub.subscribe(t, 1, retain_handling=handling)
        got = [p for p in sub.collect(0.7) if isinstance(p, Publish)]
        assert len(got) == int(expected), got
        for p in got:
            assert p.retain and p.packet_id is not None
            sub.send(Puback(p.packet_id))
    sub.disconnect()


@pytest.mark.parametrize("rap", [False, True])
def test_v5_retain_as_published(node: Node, rap: bool) -> None:
    """Retain As Published: 0 forwards live messages with RETAIN 0 [MQTT-3.3.1-12], 1 with
    the RETAIN flag they were published with [MQTT-3.3.1-13]. Messages sent because of
    the subscription itself always have RETAIN 1."""
    t = unique("r") + "/rap"
    pub = _client(node)
    pub.publish(t, b"stored", qos=1, retain=True)
    sub = _client(node, 5)
    sub.subscribe(t, 1, retain_as_published=rap)
    assert sub.receive().retain
    pub.publish(t, b"live-retained", qos=1, retain=True)
    pub.publish(t, b"live-plain", qos=1)
    a, b = sub.receive(), sub.receive()
    assert (a.payload, a.retain) == (b"live-retained", rap)
    assert (b.payload, b.retain) == (b"live-plain", False)
    pub.disconnect()
    sub.disconnect()
