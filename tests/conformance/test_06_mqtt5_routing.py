"""06 mqtt5 routing: subscription options and identifiers, properties carried with a
message, message expiry, shared subscriptions.

Runs on ``mqtt5_node`` (shared with ``test_06_mqtt5``), whose shared subscriptions are
``round_robin`` so a test can see both members of a group receive.
"""

from __future__ import annotations

import time

import pytest

from services.listener.mqtt.types import (
    Disconnect,
    Properties,
    Publish,
    Suback,
    Subscribe,
    Subscription,
)
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import (
    expect_disconnect,
    frame,
    prop,
    publishes,
    string,
    u16,
    unique,
    v5_client,
    varint,
)
from tests.support.node import Node

pytestmark = pytest.mark.integration


@pytest.fixture
def node(mqtt5_node: Node) -> Node:
    return mqtt5_node


# -- subscription options and identifiers --------------------------------------------------


def test_no_local(node: Node) -> None:
    """[MQTT-3.8.3-3] with No Local a client's own messages are not forwarded to it;
    others' are, and other subscribers still get its messages."""
    t = unique("t")
    a, _ = v5_client(node)
    a.subscribe(t, 1, no_local=True)
    b, _ = v5_client(node)
    b.subscribe(t, 1)
    a.publish(t, b"from a", qos=1)
    assert b.receive().payload == b"from a"
    a.no_packet()
    b.publish(t, b"from b")  # QoS 0: its own copy may come before any PUBACK
    assert a.expect(Publish).payload == b"from b"
    assert b.expect(Publish).payload == b"from b"  # b did not ask for No Local
    a.disconnect()
    b.disconnect()


def _subscribe_with_id(client: RawClient, topic_filter: str, sub_id: int | None) -> None:
    props = Properties(subscription_identifiers=(sub_id,) if sub_id else ())
    pid = client.packet_id()
    client.send(Subscribe(pid, (Subscription(topic_filter, 1),), props))
    assert client.expect(Suback).reason_codes == (1,)


def _ids_seen(pubs: list[Publish]) -> set[int]:
    return {i for p in pubs for i in p.properties.subscription_identifiers}


def test_subscription_identifiers(node: Node) -> None:
    """[MQTT-3.3.4-3] the PUBLISH carries the Subscription Identifiers of the matching
    subscriptions (one PUBLISH with all, or [MQTT-3.3.4-4] one per subscription); a
    subscription without one adds none, and re-subscribing without an id removes it."""
    r = unique("t")
    sub, _ = v5_client(node)
    _subscribe_with_id(sub, f"{r}/+", 7)
    _subscribe_with_id(sub, f"{r}/#", 9)
    _subscribe_with_id(sub, f"{r}/a/b", None)
    pub, _ = v5_client(node)
    pub.publish(f"{r}/a", b"1", qos=1)
    assert _ids_seen(publishes(sub)) == {7, 9}
    pub.publish(f"{r}/a/b", b"2", qos=1)
    got = publishes(sub)
    assert _ids_seen(got) == {9}
    _subscribe_with_id(sub, f"{r}/+", None)
    pub.publish(f"{r}/c", b"3", qos=1)
    assert _ids_seen(publishes(sub)) == {9}
    sub.disconnect()
    pub.disconnect()


def test_subscription_identifier_zero_is_protocol_error(node: Node) -> None:
    """3.8.2.1.2: a Subscription Identifier of 0 is a Protocol Error: DISCONNECT 0x82."""
    c, _ = v5_client(node)
    props = prop(0x0B, varint(0))
    body = u16(1) + varint(len(props)) + props + string(unique("t")) + b"\x01"
    c.send_raw(frame(0x82, body))
    expect_disconnect(c, 0x82)


def test_publish_with_subscription_identifier_is_protocol_error(node: Node) -> None:
    """[MQTT-3.3.4-6] a PUBLISH from a client must not carry a Subscription Identifier:
    Protocol Error 0x82."""
    c, _ = v5_client(node)
    c.send(Publish(unique("t"), b"x", properties=Properties(subscription_identifiers=(3,))))
    expect_disconnect(c, 0x82)


# -- properties forwarded, message expiry --------------------------------------------------


def test_properties_forwarded_unaltered(node: Node) -> None:
    """[MQTT-3.3.2-4] payload format, [MQTT-3.3.2-15] response topic, [MQTT-3.3.2-16]
    correlation data, [MQTT-3.3.2-17] [MQTT-3.3.2-18] user properties in order and
    [MQTT-3.3.2-20] content type reach the subscriber unaltered; a 3.1.1 subscriber gets
    the same message without them."""
    t = unique("t")
    sub5, _ = v5_client(node)
    sub5.subscribe(t, 1)
    sub4, _ = connected(node.mqtt_port, unique(), 4)
    sub4.subscribe(t, 1)
    pub, _ = v5_client(node)
    sent = Properties(
        payload_format_indicator=1,
        content_type="application/json",
        response_topic=f"{t}/reply",
        correlation_data=b"\x00\xffid",
        user_properties=(("b", "2"), ("a", "1"), ("b", "3")),
    )
    pub.publish(t, b'{"v": 1}', qos=1, properties=sent)
    got = sub5.receive()
    assert got.payload == b'{"v": 1}'
    assert got.properties == sent
    assert sub4.receive().payload == b'{"v": 1}'
    for c in (sub5, sub4, pub):
        c.disconnect()


def test_message_expiry(node: Node) -> None:
    """[MQTT-3.3.2-5] a message whose expiry interval passed while queued for an offline
    session, or while retained, is not delivered; [MQTT-3.3.2-6] one still alive is
    delivered with its interval reduced by the time it waited."""
    t = unique("t")
    cid = unique()
    keep = Properties(session_expiry_interval=300)
    sub, _ = connected(node.mqtt_port, cid, 5, clean=False, properties=keep)
    sub.subscribe(t, 1)
    sub.disconnect()
    pub, _ = v5_client(node)
    pub.publish(t, b"short", qos=1, properties=Properties(message_expiry_interval=1))
    pub.publish(t, b"long", qos=1, properties=Properties(message_expiry_interval=60))
    pub.publish(
        f"{t}/r", b"retained", qos=1, retain=True, properties=Properties(message_expiry_interval=1)
    )
    time.sleep(2.5)
    sub, ack = connected(node.mqtt_port, cid, 5, clean=False, properties=keep)
    assert ack.session_present
    got = publishes(sub)
    assert [p.payload for p in got] == [b"long"]
    expiry = got[0].properties.message_expiry_interval
    assert expiry is not None and expiry <= 58
    sub.subscribe(f"{t}/r", 1)
    sub.no_packet(0.7)
    sub.disconnect()
    pub.disconnect()


# -- shared subscriptions ------------------------------------------------------------------


def test_shared_subscription_distributes(node: Node) -> None:
    """4.8.2: each message to a shared subscription goes to exactly one member of the
    group (both members get some under round_robin); a plain subscriber gets all;
    a member that unsubscribes gets no more."""
    r = unique("t")
    members = [v5_client(node)[0] for _ in range(2)]
    for m in members:
        assert m.subscribe(f"$share/g/{r}/+", 1).reason_codes == (1,)
    plain, _ = v5_client(node)
    plain.subscribe(f"{r}/+", 1)
    pub, _ = v5_client(node)
    sent = [b"%d" % i for i in range(10)]
    for payload in sent:
        pub.publish(f"{r}/x", payload, qos=1)
    shares = [[p.payload for p in publishes(m)] for m in members]
    assert sorted(shares[0] + shares[1]) == sorted(sent)
    assert all(shares), shares
    assert [p.payload for p in publishes(plain)] == sent
    members[0].unsubscribe(f"$share/g/{r}/+")
    pub.publish(f"{r}/x", b"after", qos=1)
    assert [p.payload for p in publishes(members[1])] == [b"after"]
    assert [p.payload for p in publishes(plain)] == [b"after"]
    members[0].no_packet(0.1)
    for c in (*members, plain, pub):
        c.disconnect()


@pytest.mark.parametrize("topic_filter", ["$share/g", "$share/g+/x", "$share//x"])
def test_shared_subscription_invalid_filter(node: Node, topic_filter: str) -> None:
    """[MQTT-4.8.2-1] a ShareName is one level without wildcards, [MQTT-4.8.2-2] followed
    by ``/`` and a filter: otherwise the filter is refused (SUBACK or DISCONNECT 0x8F;
    0x81/0x82 for a malformed packet)."""
    c, _ = v5_client(node)
    c.send(Subscribe(1, (Subscription(topic_filter, 0),)))
    pkt = c.recv()
    if isinstance(pkt, Suback):
        assert pkt.reason_codes == (0x8F,)
        c.disconnect()
    else:
        assert isinstance(pkt, Disconnect) and pkt.reason_code in (0x8F, 0x81, 0x82), pkt
        c.expect_closed()


def test_shared_subscription_no_local_is_protocol_error(node: Node) -> None:
    """[MQTT-3.8.3-4] No Local on a shared subscription is a Protocol Error."""
    c, _ = v5_client(node)
    c.send_raw(frame(0x82, u16(1) + b"\x00" + string(f"$share/g/{unique('t')}") + b"\x05"))
    expect_disconnect(c, 0x82)
