"""06 mqtt5: what MQTT 5 added to connections: CONNACK limits, flow control, sizes,
topic aliases.

Runs on ``mqtt5_node``, which announces small limits so they can be hit: Receive
Maximum 5 (``receive_max_broker``), Topic Alias Maximum 4 (``topic_alias_max_client``)
and Maximum Packet Size 4 KB (``max_packet_size``). Subscription options, identifiers,
properties and shared subscriptions are in ``test_06_mqtt5_routing``; the server's
DISCONNECT 0x8E on takeover is checked in 09 takeover.
"""

from __future__ import annotations

import time

import pytest

from services.listener.mqtt.types import (
    Connack,
    Connect,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
)
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import (
    ALIAS_MAX,
    PACKET_MAX,
    RECEIVE_MAX,
    check_serving,
    connect_bytes,
    expect_disconnect,
    prop,
    publish_bytes,
    publishes,
    u16,
    unique,
    v5_client,
)
from tests.support.node import Node

pytestmark = pytest.mark.integration


@pytest.fixture
def node(mqtt5_node: Node) -> Node:
    return mqtt5_node


# -- CONNECT / CONNACK ---------------------------------------------------------------------


def test_connack_announces_limits(node: Node) -> None:
    """3.2.2.3: the CONNACK tells the client the server's Receive Maximum, Topic Alias
    Maximum and Maximum Packet Size."""
    c, ack = v5_client(node)
    assert ack.properties.receive_maximum == RECEIVE_MAX
    assert ack.properties.topic_alias_maximum == ALIAS_MAX
    assert ack.properties.maximum_packet_size == PACKET_MAX
    c.disconnect()


def test_receive_maximum_zero_is_protocol_error(node: Node) -> None:
    """3.1.2.11.3: a Receive Maximum of 0 is a Protocol Error: CONNACK 0x82, close."""
    c = RawClient.connect(node.mqtt_port, 5)
    c.send_raw(connect_bytes(unique(), version=5, props=prop(0x21, u16(0))))
    assert c.expect(Connack).reason_code == 0x82
    c.expect_closed()


def test_unsupported_authentication_method(node: Node) -> None:
    """[MQTT-4.12.0-1] an authentication method the server does not support: CONNACK
    0x8C (or 0x87), then close."""
    c = RawClient.connect(node.mqtt_port, 5)
    props = Properties(authentication_method="SCRAM-SHA-1")
    c.send(Connect("MQTT", 5, True, 60, unique(), properties=props))
    assert c.expect(Connack).reason_code in (0x8C, 0x87)
    c.expect_closed()


def test_session_expiry(node: Node) -> None:
    """3.1.2.11.2: a session whose expiry interval (1 s) has passed is gone: session
    present 0 on the next CONNECT with clean start 0."""
    cid = unique()
    c, _ = connected(
        node.mqtt_port, cid, 5, clean=False, properties=Properties(session_expiry_interval=1)
    )
    c.disconnect()
    time.sleep(2.5)
    c, ack = connected(node.mqtt_port, cid, 5, clean=False)
    assert not ack.session_present
    c.disconnect()


def test_no_reason_string_without_problem_information(node: Node) -> None:
    """[MQTT-3.1.2-29] with Request Problem Information 0 the server sends no Reason
    String or User Property on packets other than PUBLISH, CONNACK and DISCONNECT: here a
    PUBCOMP 0x92 for an unknown packet id."""
    c, _ = v5_client(node, request_problem_information=0)
    c.send(Pubrel(4321))
    comp = c.expect(Pubcomp)
    assert (comp.packet_id, comp.reason_code) == (4321, 0x92)
    assert comp.properties.reason_string is None
    assert comp.properties.user_properties == ()
    c.disconnect()


# -- flow control and sizes ----------------------------------------------------------------


def test_receive_maximum_exceeded(node: Node) -> None:
    """3.3.4 [MQTT-3.3.4-7]: a client with more unacknowledged QoS 2 PUBLISHes than the
    server's Receive Maximum is disconnected with 0x93."""
    c, ack = v5_client(node)
    limit = ack.properties.receive_maximum
    assert limit == RECEIVE_MAX
    t = unique("t")
    for pid in range(1, limit + 1):
        c.send(Publish(t, b"held", 2, packet_id=pid))
        assert c.expect(Pubrec).packet_id == pid
    c.send(Publish(t, b"one too many", 2, packet_id=limit + 1))
    expect_disconnect(c, 0x93)
    check_serving(node, 5)


def test_client_receive_maximum_respected(node: Node) -> None:
    """[MQTT-3.3.4-9] the server sends no more unacknowledged QoS 1 PUBLISHes than the
    client's Receive Maximum (1)."""
    t = unique("t")
    sub, _ = v5_client(node, receive_maximum=1)
    sub.subscribe(t, 1)
    pub, _ = v5_client(node)
    for i in range(3):
        pub.publish(t, b"%d" % i, qos=1)
    for i in range(3):
        got = sub.expect(Publish)
        assert got.payload == b"%d" % i
        sub.no_packet(0.4)
        assert got.packet_id is not None
        sub.send(Puback(got.packet_id))
    sub.disconnect()
    pub.disconnect()


def test_server_maximum_packet_size(node: Node) -> None:
    """3.1.2.11.4 / 3.2.2.3.6: a packet above the server's Maximum Packet Size gets
    DISCONNECT 0x95 as soon as its length is known; one just below passes."""
    t = unique("t")
    ok, _ = v5_client(node)
    ok.subscribe(t, 0)
    ok.publish(t, b"x" * (PACKET_MAX - 100))
    assert len(ok.expect(Publish).payload) == PACKET_MAX - 100
    ok.disconnect()
    c, _ = v5_client(node)
    big = publish_bytes(t, b"y" * (PACKET_MAX + 100), version=5)
    c.send_raw(big[:64])  # the header announces the size; the broker reads all we sent
    expect_disconnect(c, 0x95)
    check_serving(node, 5)


@pytest.mark.parametrize("qos", [0, 1])
def test_client_maximum_packet_size(node: Node, qos: int) -> None:
    """[MQTT-3.1.2-24] the server sends nothing larger than the client's Maximum Packet
    Size; [MQTT-3.1.2-25] it drops such a message as if it had been sent, so later ones
    still flow."""
    t = unique("t")
    sub, _ = v5_client(node, maximum_packet_size=256)
    sub.subscribe(t, qos)
    pub, _ = v5_client(node)
    pub.publish(t, b"B" * 1000, qos=qos)
    pub.publish(t, b"small", qos=qos)
    got = publishes(sub)
    assert [p.payload for p in got] == [b"small"]
    sub.disconnect()
    pub.disconnect()


# -- topic aliases -------------------------------------------------------------------------


def test_topic_alias_from_client(node: Node) -> None:
    """3.3.2.3.4: a Topic Alias set with a topic name stands for it in later PUBLISHes
    with an empty topic; a new topic name remaps the alias [MQTT-3.3.2-12]."""
    r = unique("t")
    sub, _ = connected(node.mqtt_port, unique(), 4)
    sub.subscribe(f"{r}/#", 1)
    pub, _ = v5_client(node)
    sends = [(f"{r}/x", 1), ("", 1), (f"{r}/y", 1), ("", 1), ("", 1)]
    for i, (topic, alias) in enumerate(sends):
        pub.send(
            Publish(topic, b"%d" % i, 1, packet_id=i + 1, properties=Properties(topic_alias=alias))
        )
        assert pub.expect(Puback).packet_id == i + 1
    got = [sub.receive() for _ in sends]
    assert [p.topic for p in got] == [f"{r}/x", f"{r}/x", f"{r}/y", f"{r}/y", f"{r}/y"]
    sub.disconnect()
    pub.disconnect()


@pytest.mark.parametrize("alias", [0, ALIAS_MAX + 1])
def test_topic_alias_out_of_range(node: Node, alias: int) -> None:
    """3.3.2.3.4: a Topic Alias of 0 [MQTT-3.3.2-8] or above the server's Topic Alias
    Maximum [MQTT-3.3.2-9] is answered with DISCONNECT 0x94."""
    c, _ = v5_client(node)
    c.send_raw(publish_bytes(unique("t"), b"a", version=5, props=prop(0x23, u16(alias))))
    expect_disconnect(c, 0x94)
    check_serving(node, 5)


def test_topic_alias_unknown(node: Node) -> None:
    """3.3.2.3.4: an empty topic with an alias that was never mapped cannot be resolved:
    the connection is closed (Protocol Error 0x82 or Topic Alias invalid 0x94)."""
    c, _ = v5_client(node)
    c.send(Publish("", b"a", properties=Properties(topic_alias=2)))
    expect_disconnect(c, 0x82, 0x94)


def test_topic_alias_not_carried_across_connections(node: Node) -> None:
    """[MQTT-3.3.2-7] alias mappings end with their network connection."""
    cid = unique()
    keep = Properties(session_expiry_interval=60)
    c, _ = connected(node.mqtt_port, cid, 5, clean=False, properties=keep)
    c.publish(unique("t"), b"map", qos=1, properties=Properties(topic_alias=1))
    c.disconnect()
    c, _ = connected(node.mqtt_port, cid, 5, clean=False, properties=keep)
    c.send(Publish("", b"stale", properties=Properties(topic_alias=1)))
    expect_disconnect(c, 0x82, 0x94)


def _resolve(pubs: list[Publish], alias_max: int) -> list[str]:
    """Client side of server-to-client topic aliases, checking every rule on the way."""
    aliases: dict[int, str] = {}
    topics = []
    for p in pubs:
        alias = p.properties.topic_alias
        if alias is not None:
            assert 1 <= alias <= alias_max, f"alias {alias} [MQTT-3.3.2-11]"
            if p.topic:
                aliases[alias] = p.topic
            else:
                assert alias in aliases, f"alias {alias} used before it was set"
        else:
            assert p.topic, "empty topic without alias"
        topics.append(p.topic or aliases[alias])  # type: ignore[index]
    return topics


def test_topic_alias_to_client(node: Node) -> None:
    """[MQTT-3.1.2-26] [MQTT-3.3.2-11] aliases the server uses towards a client are within
    the client's Topic Alias Maximum (2) and always resolvable."""
    r = unique("t")
    sub, _ = v5_client(node, topic_alias_maximum=2)
    sub.subscribe(f"{r}/#", 1)
    pub, _ = v5_client(node)
    expected = [f"{r}/{leaf}" for leaf in "abcabcaab"]
    for topic in expected:
        pub.publish(topic, b"m", qos=1)
    assert _resolve([sub.receive() for _ in expected], 2) == expected
    sub.disconnect()
    pub.disconnect()


def test_no_topic_alias_without_client_maximum(node: Node) -> None:
    """[MQTT-3.1.2-27] a client that announced no Topic Alias Maximum gets no aliases."""
    r = unique("t")
    sub, _ = v5_client(node)
    sub.subscribe(f"{r}/#", 0)
    pub, _ = v5_client(node)
    for _ in range(3):
        pub.publish(f"{r}/same", b"m", qos=1)
    for _ in range(3):
        got = sub.expect(Publish)
        assert (got.topic, got.properties.topic_alias) == (f"{r}/same", None)
    sub.disconnect()
    pub.disconnect()
