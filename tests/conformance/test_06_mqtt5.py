"""06 mqtt5: the features MQTT 5 added on top of 3.1.1.

The node announces small limits so they can be hit: Receive Maximum 5
(``receive_max_broker``), Topic Alias Maximum 4 (``topic_alias_max_client``) and
Maximum Packet Size 4 KB (``max_packet_size``); shared subscriptions are
``round_robin`` so a test can see both members of a group receive. The server's
DISCONNECT 0x8E on takeover is checked in 09 takeover.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from services.listener.mqtt.types import (
    Connack,
    Connect,
    Disconnect,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
)
from tests.conformance.client import RawClient, connected
from tests.conformance.conftest import started_node
from tests.conformance.helpers import (
    check_serving,
    connect_bytes,
    frame,
    prop,
    publish_bytes,
    string,
    u16,
    unique,
    varint,
)
from tests.support.node import Node

pytestmark = pytest.mark.integration

RECEIVE_MAX = 5
ALIAS_MAX = 4
PACKET_MAX = 4096


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from started_node(
        tmp_path_factory.mktemp("mqtt5"),
        receive_max_broker=str(RECEIVE_MAX),
        topic_alias_max_client=str(ALIAS_MAX),
        max_packet_size=str(PACKET_MAX),
        shared_subscription_policy="round_robin",
    )


def _v5(node: Node, **props: object) -> tuple[RawClient, Connack]:
    return connected(node.mqtt_port, unique(), 5, properties=Properties(**props))  # type: ignore[arg-type]


def _publishes(client: RawClient, timeout: float = 1.0) -> list[Publish]:
    """Every PUBLISH arriving within ``timeout``, each acknowledged at once (QoS 1)."""
    out: list[Publish] = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            pkt = client.recv(left)
        except AssertionError:
            break
        assert isinstance(pkt, Publish), pkt
        if pkt.qos == 1:
            assert pkt.packet_id is not None
            client.send(Puback(pkt.packet_id))
        out.append(pkt)
    return out


def _expect_disconnect(client: RawClient, *codes: int) -> None:
    reason = client.expect(Disconnect).reason_code
    assert reason in codes, f"DISCONNECT 0x{reason:02X}, expected one of {codes}"
    client.expect_closed()


# -- CONNECT / CONNACK ---------------------------------------------------------------------


def test_connack_announces_limits(node: Node) -> None:
    """3.2.2.3: the CONNACK tells the client the server's Receive Maximum, Topic Alias
    Maximum and Maximum Packet Size."""
    c, ack = _v5(node)
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
    c, _ = _v5(node, request_problem_information=0)
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
    c, ack = _v5(node)
    limit = ack.properties.receive_maximum
    assert limit == RECEIVE_MAX
    t = unique("t")
    for pid in range(1, limit + 1):
        c.send(Publish(t, b"held", 2, packet_id=pid))
        assert c.expect(Pubrec).packet_id == pid
    c.send(Publish(t, b"one too many", 2, packet_id=limit + 1))
    _expect_disconnect(c, 0x93)
    check_serving(node, 5)


def test_client_receive_maximum_respected(node: Node) -> None:
    """[MQTT-3.3.4-9] the server sends no more unacknowledged QoS 1 PUBLISHes than the
    client's Receive Maximum (1)."""
    t = unique("t")
    sub, _ = _v5(node, receive_maximum=1)
    sub.subscribe(t, 1)
    pub, _ = _v5(node)
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
    ok, _ = _v5(node)
    ok.subscribe(t, 0)
    ok.publish(t, b"x" * (PACKET_MAX - 100))
    assert len(ok.expect(Publish).payload) == PACKET_MAX - 100
    ok.disconnect()
    c, _ = _v5(node)
    big = publish_bytes(t, b"y" * (PACKET_MAX + 100), version=5)
    c.send_raw(big[:64])  # the header announces the size; the broker reads all we sent
    _expect_disconnect(c, 0x95)
    check_serving(node, 5)


@pytest.mark.parametrize("qos", [0, 1])
def test_client_maximum_packet_size(node: Node, qos: int) -> None:
    """[MQTT-3.1.2-24] the server sends nothing larger than the client's Maximum Packet
    Size; [MQTT-3.1.2-25] it drops such a message as if it had been sent, so later ones
    still flow."""
    t = unique("t")
    sub, _ = _v5(node, maximum_packet_size=256)
    sub.subscribe(t, qos)
    pub, _ = _v5(node)
    pub.publish(t, b"B" * 1000, qos=qos)
    pub.publish(t, b"small", qos=qos)
    got = _publishes(sub)
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
    pub, _ = _v5(node)
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
    c, _ = _v5(node)
    c.send_raw(publish_bytes(unique("t"), b"a", version=5, props=prop(0x23, u16(alias))))
    _expect_disconnect(c, 0x94)
    check_serving(node, 5)


def test_topic_alias_unknown(node: Node) -> None:
    """3.3.2.3.4: an empty topic with an alias that was never mapped cannot be resolved:
    the connection is closed (Protocol Error 0x82 or Topic Alias invalid 0x94)."""
    c, _ = _v5(node)
    c.send(Publish("", b"a", properties=Properties(topic_alias=2)))
    _expect_disconnect(c, 0x82, 0x94)


def test_topic_alias_not_carried_across_connections(node: Node) -> None:
    """[MQTT-3.3.2-7] alias mappings end with their network connection."""
    cid = unique()
    keep = Properties(session_expiry_interval=60)
    c, _ = connected(node.mqtt_port, cid, 5, clean=False, properties=keep)
    c.publish(unique("t"), b"map", qos=1, properties=Properties(topic_alias=1))
    c.disconnect()
    c, _ = connected(node.mqtt_port, cid, 5, clean=False, properties=keep)
    c.send(Publish("", b"stale", properties=Properties(topic_alias=1)))
    _expect_disconnect(c, 0x82, 0x94)


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
    sub, _ = _v5(node, topic_alias_maximum=2)
    sub.subscribe(f"{r}/#", 1)
    pub, _ = _v5(node)
    expected = [f"{r}/{leaf}" for leaf in "abcabcaab"]
    for topic in expected:
        pub.publish(topic, b"m", qos=1)
    assert _resolve([sub.receive() for _ in expected], 2) == expected
    sub.disconnect()
    pub.disconnect()


def test_no_topic_alias_without_client_maximum(node: Node) -> None:
    """[MQTT-3.1.2-27] a client that announced no Topic Alias Maximum gets no aliases."""
    r = unique("t")
    sub, _ = _v5(node)
    sub.subscribe(f"{r}/#", 0)
    pub, _ = _v5(node)
    for _ in range(3):
        pub.publish(f"{r}/same", b"m", qos=1)
    for _ in range(3):
        got = sub.expect(Publish)
        assert (got.topic, got.properties.topic_alias) == (f"{r}/same", None)
    sub.disconnect()
    pub.disconnect()


# -- subscription options and identifiers --------------------------------------------------


def test_no_local(node: Node) -> None:
    """[MQTT-3.8.3-3] with No Local a client's own messages are not forwarded to it;
    others' are, and other subscribers still get its messages."""
    t = unique("t")
    a, _ = _v5(node)
    a.subscribe(t, 1, no_local=True)
    b, _ = _v5(node)
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
    sub, _ = _v5(node)
    _subscribe_with_id(sub, f"{r}/+", 7)
    _subscribe_with_id(sub, f"{r}/#", 9)
    _subscribe_with_id(sub, f"{r}/a/b", None)
    pub, _ = _v5(node)
    pub.publish(f"{r}/a", b"1", qos=1)
    assert _ids_seen(_publishes(sub)) == {7, 9}
    pub.publish(f"{r}/a/b", b"2", qos=1)
    got = _publishes(sub)
    assert _ids_seen(got) == {9}
    _subscribe_with_id(sub, f"{r}/+", None)
    pub.publish(f"{r}/c", b"3", qos=1)
    assert _ids_seen(_publishes(sub)) == {9}
    sub.disconnect()
    pub.disconnect()


def test_subscription_identifier_zero_is_protocol_error(node: Node) -> None:
    """3.8.2.1.2: a Subscription Identifier of 0 is a Protocol Error: DISCONNECT 0x82."""
    c, _ = _v5(node)
    props = prop(0x0B, varint(0))
    body = u16(1) + varint(len(props)) + props + string(unique("t")) + b"\x01"
    c.send_raw(frame(0x82, body))
    _expect_disconnect(c, 0x82)


def test_publish_with_subscription_identifier_is_protocol_error(node: Node) -> None:
    """[MQTT-3.3.4-6] a PUBLISH from a client must not carry a Subscription Identifier:
    Protocol Error 0x82."""
    c, _ = _v5(node)
    c.send(Publish(unique("t"), b"x", properties=Properties(subscription_identifiers=(3,))))
    _expect_disconnect(c, 0x82)


# -- properties forwarded, message expiry --------------------------------------------------


def test_properties_forwarded_unaltered(node: Node) -> None:
    """[MQTT-3.3.2-4] payload format, [MQTT-3.3.2-15] response topic, [MQTT-3.3.2-16]
    correlation data, [MQTT-3.3.2-17] [MQTT-3.3.2-18] user properties in order and
    [MQTT-3.3.2-20] content type reach the subscriber unaltered; a 3.1.1 subscriber gets
    the same message without them."""
    t = unique("t")
    sub5, _ = _v5(node)
    sub5.subscribe(t, 1)
    sub4, _ = connected(node.mqtt_port, unique(), 4)
    sub4.subscribe(t, 1)
    pub, _ = _v5(node)
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
    pub, _ = _v5(node)
    pub.publish(t, b"short", qos=1, properties=Properties(message_expiry_interval=1))
    pub.publish(t, b"long", qos=1, properties=Properties(message_expiry_interval=60))
    pub.publish(
        f"{t}/r", b"retained", qos=1, retain=True, properties=Properties(message_expiry_interval=1)
    )
    time.sleep(2.5)
    sub, ack = connected(node.mqtt_port, cid, 5, clean=False, properties=keep)
    assert ack.session_present
    got = _publishes(sub)
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
    members = [_v5(node)[0] for _ in range(2)]
    for m in members:
        assert m.subscribe(f"$share/g/{r}/+", 1).reason_codes == (1,)
    plain, _ = _v5(node)
    plain.subscribe(f"{r}/+", 1)
    pub, _ = _v5(node)
    sent = [b"%d" % i for i in range(10)]
    for payload in sent:
        pub.publish(f"{r}/x", payload, qos=1)
    shares = [[p.payload for p in _publishes(m)] for m in members]
    assert sorted(shares[0] + shares[1]) == sorted(sent)
    assert all(shares), shares
    assert [p.payload for p in _publishes(plain)] == sent
    members[0].unsubscribe(f"$share/g/{r}/+")
    pub.publish(f"{r}/x", b"after", qos=1)
    assert [p.payload for p in _publishes(members[1])] == [b"after"]
    members[0].no_packet(0.1)
    for c in (*members, plain, pub):
        c.disconnect()


@pytest.mark.parametrize("topic_filter", ["$share/g", "$share/g+/x", "$share//x"])
def test_shared_subscription_invalid_filter(node: Node, topic_filter: str) -> None:
    """[MQTT-4.8.2-1] a ShareName is one level without wildcards, [MQTT-4.8.2-2] followed
    by ``/`` and a filter: otherwise the filter is refused (SUBACK or DISCONNECT 0x8F;
    0x81/0x82 for a malformed packet)."""
    c, _ = _v5(node)
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
    c, _ = _v5(node)
    c.send_raw(frame(0x82, u16(1) + b"\x00" + string(f"$share/g/{unique('t')}") + b"\x05"))
    _expect_disconnect(c, 0x82)
