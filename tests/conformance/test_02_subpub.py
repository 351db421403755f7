"""02 subpub: topic matching, overlapping subscriptions, SUBACK, UNSUBSCRIBE, QoS downgrade.

Runs on the package's shared default node; every test works under its own topic root.
"""

from __future__ import annotations

import pytest

from services.listener.mqtt import encode
from services.listener.mqtt.types import (
    Pingreq,
    Pingresp,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
)
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import unique
from tests.support.node import Node

pytestmark = pytest.mark.integration


def _pair(node: Node, version: int = 4) -> tuple[RawClient, RawClient]:
    sub, _ = connected(node.mqtt_port, unique(), version)
    pub, _ = connected(node.mqtt_port, unique(), version)
    return sub, pub


def _delivered(node: Node, topic_filter: str, topics: list[str]) -> list[str]:
    """Publish each of ``topics`` (QoS 1, so each is routed before the next) and return
    the topics a subscriber to ``topic_filter`` received, in order."""
    sub, pub = _pair(node)
    marker = unique("marker")
    sub.subscribe(marker, 0)
    assert sub.subscribe(topic_filter, 0).reason_codes == (0,)
    for i, topic in enumerate(topics):
        pub.publish(topic, str(i).encode(), qos=1)
    pub.publish(marker, b"end", qos=1)
    got: list[str] = []
    while (p := sub.expect(Publish)).topic != marker:
        got.append(p.topic)
    sub.disconnect()
    pub.disconnect()
    return got


def test_single_level_wildcard(node: Node) -> None:
    """4.7.1.3: ``+`` matches exactly one level, an empty one included."""
    r = unique("t")
    topics = [f"{r}/b/c", f"{r}/b/x/c", f"{r}/c", f"{r}//c", f"{r}/b/c/"]
    assert _delivered(node, f"{r}/+/c", topics) == [f"{r}/b/c", f"{r}//c"]


def test_multi_level_wildcard(node: Node) -> None:
    """4.7.1.2: ``#`` matches its parent level and any number of child levels."""
    r = unique("t")
    topics = [r, f"{r}/a", f"{r}/a/b/c", f"{r}x/a", f"{r}/"]
    assert _delivered(node, f"{r}/#", topics) == [r, f"{r}/a", f"{r}/a/b/c", f"{r}/"]


def test_leading_slash_and_case(node: Node) -> None:
    """4.7.3: topics are case sensitive and a leading ``/`` makes an empty first level."""
    r = unique("t")
    topics = [f"/{r}", f"{r.upper()}", r, f"/{r}/x"]
    assert _delivered(node, f"+/{r}", topics) == [f"/{r}"]


def test_topic_name_not_filter_in_delivery(node: Node) -> None:
    """[MQTT-3.3.2-3] the PUBLISH sent to a subscriber carries the topic name it was
    published to, not the subscriber's filter."""
    r = unique("t")
    assert _delivered(node, f"{r}/+/#", [f"{r}/a/b/c"]) == [f"{r}/a/b/c"]


def test_dollar_topics_not_matched_by_leading_wildcards(node: Node) -> None:
    """[MQTT-4.7.2-1] filters starting with a wildcard do not match topics starting with
    ``$``; a filter starting with ``$`` does."""
    r = unique("t")
    hash_sub, _ = connected(node.mqtt_port, unique(), 5)
    # retain handling 2: no retained messages of other tests at subscribe time
    hash_sub.subscribe("#", 0, retain_handling=2)
    plus, _ = connected(node.mqtt_port, unique(), 5)
    plus.subscribe(f"+/{r}", 0, retain_handling=2)
    dollar, _ = connected(node.mqtt_port, unique(), 4)
    dollar.subscribe(f"${r}/#", 0)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(f"${r}/{r}", b"dollar", qos=1)
    pub.publish(f"x/{r}", b"plain", qos=1)
    for client in (hash_sub, plus):
        got = client.expect(Publish)  # not $SYS/... either: [MQTT-4.7.2-1]
        assert (got.topic, got.payload) == (f"x/{r}", b"plain")
    got = dollar.expect(Publish)
    assert (got.topic, got.payload) == (f"${r}/{r}", b"dollar")
    dollar.no_packet(0.3)
    for c in (hash_sub, plus, dollar, pub):
        c.disconnect()


def test_overlapping_subscriptions_max_qos(node: Node) -> None:
    """[MQTT-3.3.5-1] with overlapping subscriptions the message is delivered respecting
    the maximum QoS of all matching ones (further copies are allowed)."""
    r = unique("t")
    sub, pub = _pair(node)
    sub.subscribe(f"{r}/#", 0)
    sub.subscribe(f"{r}/+", 1)
    pub.publish(f"{r}/a", b"both", qos=1)
    pubs = [p for p in sub.collect(1.0) if isinstance(p, Publish)]
    assert pubs and all(p.payload == b"both" for p in pubs), pubs
    assert max(p.qos for p in pubs) == 1
    for p in pubs:
        if p.qos:
            assert p.packet_id is not None
            sub.send(Puback(p.packet_id))
    sub.disconnect()
    pub.disconnect()


def test_identical_filter_replaces_subscription(node: Node) -> None:
    """[MQTT-3.8.4-3] a SUBSCRIBE with a filter identical to an existing one replaces it:
    one copy, at the new QoS."""
    r = unique("t")
    sub, pub = _pair(node)
    sub.subscribe(f"{r}/x", 0)
    sub.subscribe(f"{r}/x", 1)
    pub.publish(f"{r}/x", b"once", qos=1)
    got = sub.receive()
    assert (got.payload, got.qos) == (b"once", 1)
    sub.no_packet()
    sub.subscribe(f"{r}/x", 0)
    pub.publish(f"{r}/x", b"downgraded", qos=1)
    assert sub.expect(Publish).qos == 0
    sub.disconnect()
    pub.disconnect()


@pytest.mark.parametrize("version", [4, 5])
def test_suback_codes_in_order(node: Node, version: int) -> None:
    """[MQTT-3.8.4-4] [MQTT-3.8.4-5] [MQTT-3.9.3-1] several filters in one SUBSCRIBE get one
    SUBACK with a granted QoS per filter, in order, and the same packet id [MQTT-3.8.4-2]."""
    r = unique("t")
    c, _ = connected(node.mqtt_port, unique(), version)
    subs = tuple(Subscription(f"{r}/{q}", q) for q in (2, 0, 1))
    c.send(Subscribe(4242, subs))
    suback = c.expect(Suback)
    assert suback.packet_id == 4242
    assert suback.reason_codes == (2, 0, 1)
    c.disconnect()


@pytest.mark.parametrize("version", [4, 5])
def test_unsubscribe_stops_delivery(node: Node, version: int) -> None:
    """[MQTT-3.10.4-1] [MQTT-3.10.4-2] an UNSUBSCRIBE with an identical filter deletes the
    subscription; [MQTT-3.10.4-4] [MQTT-3.10.4-5] UNSUBACK is sent even when nothing
    matched. v5 UNSUBACK says 0x00 (success) and 0x11 (no subscription existed)."""
    r = unique("t")
    sub, pub = _pair(node, version)
    sub.subscribe(f"{r}/a", 1)
    pub.publish(f"{r}/a", b"before", qos=1)
    assert sub.receive().payload == b"before"
    unsuback = sub.unsubscribe(f"{r}/a", f"{r}/never")
    if version == 5:
        assert unsuback.reason_codes == (0x00, 0x11)
    pub.publish(f"{r}/a", b"after", qos=1)
    sub.no_packet()
    sub.disconnect()
    pub.disconnect()


def test_unsubscribe_compares_filters_not_topics(node: Node) -> None:
    """[MQTT-3.10.4-1] filters are compared character by character: unsubscribing from
    ``r/a`` leaves the subscription ``r/+`` in place."""
    r = unique("t")
    sub, pub = _pair(node)
    sub.subscribe(f"{r}/+", 0)
    sub.unsubscribe(f"{r}/a")
    pub.publish(f"{r}/a", b"still", qos=1)
    assert sub.expect(Publish).payload == b"still"
    sub.disconnect()
    pub.disconnect()


@pytest.mark.parametrize("pub_qos", [0, 1, 2])
@pytest.mark.parametrize("sub_qos", [0, 1, 2])
def test_delivery_qos_is_min_of_publish_and_granted(node: Node, pub_qos: int, sub_qos: int) -> None:
    """[MQTT-3.8.4-6] messages are delivered at min(publish QoS, granted QoS)."""
    r = unique("t")
    sub, pub = _pair(node)
    assert sub.subscribe(f"{r}/q", sub_qos).reason_codes == (sub_qos,)
    pub.publish(f"{r}/q", b"m", qos=pub_qos)
    got = sub.receive()
    assert got.qos == min(pub_qos, sub_qos)
    assert (got.packet_id is None) == (got.qos == 0)  # [MQTT-2.3.1-5]
    assert not got.dup
    sub.disconnect()
    pub.disconnect()


def test_publisher_receives_own_message_v311(node: Node) -> None:
    """3.1.1 has no No Local option: a client subscribed to its own topic gets its own
    messages."""
    r = unique("t")
    c, _ = connected(node.mqtt_port, unique(), 4)
    c.subscribe(f"{r}/self", 0)
    c.publish(f"{r}/self", b"echo")
    assert c.expect(Publish).payload == b"echo"
    c.disconnect()


def test_pingreq_pingresp(node: Node) -> None:
    """[MQTT-3.12.4-1] the server answers PINGREQ with PINGRESP."""
    c, _ = connected(node.mqtt_port, unique(), 4)
    for _ in range(3):
        c.send(Pingreq())
        c.expect(Pingresp)
    c.disconnect()


def test_a_burst_of_many_packets_in_one_read_is_all_answered(node: Node) -> None:
    """More packets in one read than a connection handles per loop turn (200), several
    times over: the rest is handled on later turns, each of which may leave a backlog
    of its own, and every PINGREQ is answered."""
    c, _ = connected(node.mqtt_port, unique(), 4)
    count = 1_000
    c.send_raw(encode(Pingreq(), 4) * count)
    for _ in range(count):
        c.expect(Pingresp)
    c.disconnect()
    # every turn but the last left a backlog: none of them may fail on it (the compiled
    # ``_continue`` once did, logged each time, and let the next turn carry on)
    out = (node.base / "node.out").read_text(errors="replace")
    assert "Connection._continue" not in out, out[-2000:]
