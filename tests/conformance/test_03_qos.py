"""03 qos: QoS 1 and 2 flows in both directions, packet ids, redelivery, inflight window.

The node has ``max_inflight_messages = 2`` and ``retry_interval = 1s``: the window is
small enough to count and a 3.1.1 retry comes quickly. Subscribers that must not see
retries (window tests) are MQTT 5, which never resends within a connection.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from services.listener.mqtt.types import (
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
)
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import started_node, unique
from tests.support.node import Node

pytestmark = pytest.mark.integration

INFLIGHT = 2
RETRY = 1.0
KEEP = Properties(session_expiry_interval=300)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from started_node(
        tmp_path_factory.mktemp("qos"),
        max_inflight_messages=str(INFLIGHT),
        retry_interval=f"{int(RETRY)}s",
    )


def _sub(node: Node, topic: str, qos: int, version: int = 4) -> RawClient:
    client, _ = connected(node.mqtt_port, unique(), version)
    client.subscribe(topic, qos)
    return client


# -- inbound (client -> server) ------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_qos1_inbound_puback(node: Node, version: int) -> None:
    """[MQTT-4.3.2-2] a QoS 1 PUBLISH is acknowledged by PUBACK with its packet id."""
    t = unique("t")
    sub = _sub(node, t, 1)
    pub, _ = connected(node.mqtt_port, unique(), version)
    pub.send(Publish(t, b"q1", 1, packet_id=77))
    ack = pub.expect(Puback)
    assert ack.packet_id == 77
    assert ack.reason_code in (0x00, 0x10)
    assert sub.receive().payload == b"q1"
    pub.disconnect()
    sub.disconnect()


@pytest.mark.parametrize("version", [4, 5])
def test_qos2_inbound_exactly_once(node: Node, version: int) -> None:
    """[MQTT-4.3.3-2] QoS 2 from a client: PUBREC, then PUBCOMP for the PUBREL. A
    resend of the PUBLISH (DUP) before PUBREL is acknowledged again but not delivered
    twice."""
    t = unique("t")
    sub = _sub(node, t, 2)
    pub, _ = connected(node.mqtt_port, unique(), version)
    pub.send(Publish(t, b"q2", 2, packet_id=9))
    assert pub.expect(Pubrec).packet_id == 9
    pub.send(Publish(t, b"q2", 2, dup=True, packet_id=9))
    assert pub.expect(Pubrec).packet_id == 9
    pub.send(Pubrel(9))
    comp = pub.expect(Pubcomp)
    assert (comp.packet_id, comp.reason_code) == (9, 0)
    got = sub.receive()
    assert (got.payload, got.qos) == (b"q2", 2)
    sub.no_packet()
    pub.disconnect()
    sub.disconnect()


def test_incoming_dup_not_propagated(node: Node) -> None:
    """[MQTT-3.3.1-3] the DUP flag a subscriber sees says whether *that* PUBLISH is a
    retransmission; a publisher's DUP is not passed on."""
    t = unique("t")
    sub = _sub(node, t, 1, 5)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.send(Publish(t, b"dup-in", 1, dup=True, packet_id=5))
    assert pub.expect(Puback).packet_id == 5
    got = sub.receive()
    assert (got.payload, got.dup) == (b"dup-in", False)
    pub.disconnect()
    sub.disconnect()


def test_pubrel_for_unknown_id(node: Node) -> None:
    """A PUBREL for a packet id with no QoS 2 state: 3.1.1 answers PUBCOMP (the flow
    may have completed before a reconnect), v5 PUBCOMP 0x92 (not found)."""
    c4, _ = connected(node.mqtt_port, unique(), 4)
    c4.send(Pubrel(555))
    assert c4.expect(Pubcomp).packet_id == 555
    c5, _ = connected(node.mqtt_port, unique(), 5)
    c5.send(Pubrel(556))
    comp = c5.expect(Pubcomp)
    assert (comp.packet_id, comp.reason_code) == (556, 0x92)
    c4.disconnect()
    c5.disconnect()


def test_packet_id_reuse_after_ack(node: Node) -> None:
    """[MQTT-2.3.1-3] a packet id is free again once its flow completes."""
    t = unique("t")
    sub = _sub(node, t, 2, 5)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    for i in range(3):
        pub.send(Publish(t, b"%d" % i, 1, packet_id=1))
        assert pub.expect(Puback).packet_id == 1
        pub.send(Publish(t, b"q2-%d" % i, 2, packet_id=1))
        assert pub.expect(Pubrec).packet_id == 1
        pub.send(Pubrel(1))
        assert pub.expect(Pubcomp).packet_id == 1
    assert [sub.receive().payload for _ in range(6)] == [
        b"0",
        b"q2-0",
        b"1",
        b"q2-1",
        b"2",
        b"q2-2",
    ]
    pub.disconnect()
    sub.disconnect()


# -- outbound (server -> client) -----------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_qos2_outbound_flow(node: Node, version: int) -> None:
    """[MQTT-4.3.3-1] QoS 2 to a client: PUBLISH, PUBREC from the client, PUBREL (same id,
    flags 0010) from the server, PUBCOMP from the client."""
    t = unique("t")
    sub = _sub(node, t, 2, version)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"two", qos=2)
    got = sub.expect(Publish)
    assert (got.qos, got.dup, got.payload) == (2, False, b"two")
    assert got.packet_id
    sub.send(Pubrec(got.packet_id))
    assert sub.expect(Pubrel).packet_id == got.packet_id
    sub.send(Pubcomp(got.packet_id))
    sub.no_packet()
    pub.disconnect()
    sub.disconnect()


def test_order_preserved(node: Node) -> None:
    """4.6 [MQTT-4.6.0-6]: each topic is an ordered topic; QoS 1 messages from one
    publisher arrive at a subscriber in publish order."""
    t = unique("t")
    sub = _sub(node, t, 1, 5)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    for i in range(30):
        pub.publish(t, b"%d" % i, qos=1)
    assert [int(sub.receive().payload) for _ in range(30)] == list(range(30))
    pub.disconnect()
    sub.disconnect()


def test_inflight_window(node: Node) -> None:
    """max_inflight_messages = 2: at most 2 unacknowledged QoS 1 PUBLISHes are in flight
    to a client, with distinct packet ids [MQTT-2.3.1-2]; each PUBACK lets the next one
    go, in order."""
    t = unique("t")
    sub = _sub(node, t, 1, 5)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    for i in range(5):
        pub.publish(t, b"%d" % i, qos=1)
    window = [sub.expect(Publish) for _ in range(INFLIGHT)]
    sub.no_packet(1.0)
    assert len({p.packet_id for p in window}) == INFLIGHT
    got = [p.payload for p in window]
    for _ in range(5 - INFLIGHT):
        first = window.pop(0)
        assert first.packet_id is not None
        sub.send(Puback(first.packet_id))
        nxt = sub.expect(Publish)
        window.append(nxt)
        got.append(nxt.payload)
        sub.no_packet(0.2)
    assert got == [b"%d" % i for i in range(5)]
    for p in window:
        assert p.packet_id is not None
        sub.send(Puback(p.packet_id))
    sub.no_packet()
    pub.disconnect()
    sub.disconnect()


def test_retry_after_retry_interval_v311(node: Node) -> None:
    """3.1.1: an unacknowledged QoS 1 PUBLISH is resent after retry_interval with DUP set
    [MQTT-3.3.1-1] and its original packet id; the PUBACK ends the retries."""
    t = unique("t")
    sub = _sub(node, t, 1, 4)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"retry", qos=1)
    first = sub.expect(Publish)
    assert not first.dup
    start = time.monotonic()
    again = sub.expect(Publish, RETRY + 4)
    assert time.monotonic() - start >= RETRY * 0.5
    assert (again.dup, again.packet_id, again.payload) == (True, first.packet_id, b"retry")
    assert first.packet_id is not None
    sub.send(Puback(first.packet_id))
    sub.no_packet(RETRY + 1)
    pub.disconnect()
    sub.disconnect()


def test_pubrel_retry_v311(node: Node) -> None:
    """3.1.1: a PUBREL left without PUBCOMP is resent after retry_interval too."""
    t = unique("t")
    sub = _sub(node, t, 2, 4)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"rel", qos=2)
    got = sub.expect(Publish)
    assert got.packet_id is not None
    sub.send(Pubrec(got.packet_id))
    assert sub.expect(Pubrel).packet_id == got.packet_id
    assert sub.expect(Pubrel, RETRY + 4).packet_id == got.packet_id
    sub.send(Pubcomp(got.packet_id))
    sub.no_packet(RETRY + 1)
    pub.disconnect()
    sub.disconnect()


def test_no_retry_within_connection_v5(node: Node) -> None:
    """[MQTT-4.4.0-1] (v5) a server resends only when a session is resumed, never while
    the connection lasts."""
    t = unique("t")
    sub = _sub(node, t, 1, 5)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"once", qos=1)
    got = sub.expect(Publish)
    sub.no_packet(RETRY * 2.5)
    assert got.packet_id is not None
    sub.send(Puback(got.packet_id))
    pub.disconnect()
    sub.disconnect()


# -- redelivery on session resumption ------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_dup_redelivery_after_reconnect(node: Node, version: int) -> None:
    """[MQTT-4.4.0-1] [MQTT-3.3.1-1] on resuming a persistent session the server resends
    unacknowledged PUBLISHes with DUP set and their original packet ids, before the
    messages queued while the client was away."""
    t = unique("t")
    cid = unique()
    props = KEEP if version == 5 else Properties()
    sub, _ = connected(node.mqtt_port, cid, version, clean=False, properties=props)
    sub.subscribe(t, 1)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"unacked", qos=1)
    first = sub.expect(Publish)
    sub.close()  # vanish without PUBACK or DISCONNECT
    time.sleep(0.3)
    pub.publish(t, b"queued", qos=1)
    sub, ack = connected(node.mqtt_port, cid, version, clean=False, properties=props)
    assert ack.session_present
    again = sub.expect(Publish)
    assert (again.dup, again.packet_id, again.payload) == (True, first.packet_id, b"unacked")
    assert again.packet_id is not None
    sub.send(Puback(again.packet_id))
    queued = sub.receive()
    assert (queued.payload, queued.dup) == (b"queued", False)
    sub.no_packet()
    sub.disconnect()
    pub.disconnect()


def test_pubrel_resent_after_reconnect(node: Node) -> None:
    """[MQTT-4.4.0-1] a PUBREL not yet completed is resent on session resumption, and
    the PUBLISH is not (it was already acknowledged by PUBREC)."""
    t = unique("t")
    cid = unique()
    sub, _ = connected(node.mqtt_port, cid, 5, clean=False, properties=KEEP)
    sub.subscribe(t, 2)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"half", qos=2)
    got = sub.expect(Publish)
    assert got.packet_id is not None
    sub.send(Pubrec(got.packet_id))
    assert sub.expect(Pubrel).packet_id == got.packet_id
    sub.close()
    sub, ack = connected(node.mqtt_port, cid, 5, clean=False, properties=KEEP)
    assert ack.session_present
    assert sub.expect(Pubrel).packet_id == got.packet_id
    sub.send(Pubcomp(got.packet_id))
    sub.no_packet()
    sub.disconnect()
    pub.disconnect()


def _resumed_after(node: Node, payloads: list[bytes]) -> RawClient:
    """A persistent session subscribed at QoS 1, offline while ``payloads`` are published
    to its topic, then resumed (its CONNACK says the session is present)."""
    t = unique("t")
    cid = unique()
    sub, _ = connected(node.mqtt_port, cid, 4, clean=False)
    sub.subscribe(t, 1)
    sub.disconnect()
    pub, _ = connected(node.mqtt_port, unique(), 4)
    for payload in payloads:
        pub.publish(t, payload, qos=1)
    pub.disconnect()
    sub, ack = connected(node.mqtt_port, cid, 4, clean=False)
    assert ack.session_present
    return sub


def test_offline_messages_delivered_in_order(node: Node) -> None:
    """[MQTT-3.1.2-4] a persistent session keeps its subscriptions and receives the QoS 1
    messages published while it was offline, in order (4.6)."""
    sub = _resumed_after(node, [b"%d" % i for i in range(10)])
    assert [sub.receive().payload for _ in range(10)] == [b"%d" % i for i in range(10)]
    sub.no_packet()
    sub.disconnect()


def test_an_offline_queue_larger_than_one_read_is_replayed_whole(node: Node) -> None:
    """A resume reads the queue in pages, and the store cuts a page at 16 MB whatever the
    entry count: 900 messages of 24 KB (21.6 MB) take two pages of fewer entries than
    asked for, and every message is replayed, in order."""
    filler = b"x" * 24_000
    sub = _resumed_after(node, [b"%05d" % i + filler for i in range(900)])
    got = [sub.receive().payload[:5] for _ in range(900)]
    assert got == [b"%05d" % i for i in range(900)]
    sub.no_packet()
    sub.disconnect()
