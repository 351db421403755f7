"""12 overlapping subscriptions: one copy per client, whatever number of its filters match.

Runs on ``mqtt5_node`` (shared with the 06 modules). When a publish matches several
subscriptions of one client the server may send one copy [MQTT-3.3.4-2]; ternmq always
does, and that copy has to stand for every matching subscription:

- its QoS is the highest they granted [MQTT-3.3.4-2] (capped by the publish's QoS);
- it carries the Subscription Identifier of each of them that has one [MQTT-3.3.4-3];
- a subscription with No Local set does not count for its own client's messages
  [MQTT-3.8.3-3], the client's other matching subscriptions still do;
- RETAIN is kept when any of them asked for Retain As Published (see
  ``routing.model.Match``), and cleared when none did [MQTT-3.3.1-12] [MQTT-3.3.1-13];
- one SUBSCRIBE naming overlapping filters sends each matching retained message once
  too, at the highest QoS those filters granted [MQTT-3.3.1-9].

Shared subscriptions are separate deliveries by design (4.8.2): a client in a group
and subscribed normally receives both copies.
"""

from __future__ import annotations

import pytest

from services.listener.mqtt.types import (
    Properties,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
)
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import publishes, unique, v5_client
from tests.support.node import Node

pytestmark = pytest.mark.integration

KEEP = Properties(session_expiry_interval=300)


@pytest.fixture
def node(mqtt5_node: Node) -> Node:
    return mqtt5_node


def _subscribe(client: RawClient, *subs: Subscription, sub_id: int | None = None) -> None:
    """One SUBSCRIBE with ``subs`` (and ``sub_id``); every filter granted as asked."""
    props = Properties(subscription_identifiers=(sub_id,) if sub_id else ())
    pid = client.packet_id()
    client.send(Subscribe(pid, subs, props))
    suback = client.expect(Suback)
    assert suback.packet_id == pid
    assert suback.reason_codes == tuple(s.qos for s in subs)


def test_one_copy_at_the_highest_qos(node: Node) -> None:
    """[MQTT-3.3.4-2] one copy, at the highest QoS of the matching subscriptions, capped
    by the QoS of the publish."""
    r = unique("t")
    sub, _ = v5_client(node)
    _subscribe(sub, Subscription(f"{r}/+", 0))
    _subscribe(sub, Subscription(f"{r}/#", 2))
    _subscribe(sub, Subscription(f"{r}/a", 1))
    pub, _ = v5_client(node)
    pub.publish(f"{r}/a", b"q2", qos=2)
    got = sub.collect(0.5)
    assert [(p.payload, p.qos) for p in got if isinstance(p, Publish)] == [(b"q2", 2)], got
    pub.publish(f"{r}/a", b"q1", qos=1)
    assert [(p.payload, p.qos) for p in publishes(sub, 0.5)] == [(b"q1", 1)]
    sub.disconnect()
    pub.disconnect()


def test_one_copy_carries_every_subscription_identifier(node: Node) -> None:
    """[MQTT-3.3.4-3] the single copy carries the identifiers of all matching
    subscriptions that have one; one without an identifier adds none."""
    r = unique("t")
    sub, _ = v5_client(node)
    _subscribe(sub, Subscription(f"{r}/+", 1), sub_id=11)
    _subscribe(sub, Subscription(f"{r}/#", 0), sub_id=12)
    _subscribe(sub, Subscription(f"{r}/a", 1))
    pub, _ = v5_client(node)
    pub.publish(f"{r}/a", b"x", qos=1)
    (got,) = publishes(sub)
    assert got.qos == 1
    assert sorted(got.properties.subscription_identifiers) == [11, 12]
    pub.publish(f"{r}/b/c", b"y", qos=1)
    (got,) = publishes(sub)
    assert (got.qos, got.properties.subscription_identifiers) == (0, (12,))
    sub.disconnect()
    pub.disconnect()


def test_no_local_counts_per_subscription(node: Node) -> None:
    """[MQTT-3.8.3-3] the client's own message is not forwarded through its No Local
    subscription (QoS 2, identifier 21), but it is through an overlapping one without
    No Local (QoS 0, identifier 22): one copy at QoS 0 with only that identifier.
    Another client's message comes once through both: QoS 2, identifiers 21 and 22."""
    r = unique("t")
    c, _ = v5_client(node)
    _subscribe(c, Subscription(f"{r}/#", 2, no_local=True), sub_id=21)
    _subscribe(c, Subscription(f"{r}/a", 0), sub_id=22)
    c.send(Publish(f"{r}/a", b"own", 1, packet_id=c.packet_id()))
    got = c.collect(0.5)
    assert sum(isinstance(p, Puback) for p in got) == 1
    own = [
        (p.payload, p.qos, p.properties.subscription_identifiers)
        for p in got
        if isinstance(p, Publish)
    ]
    assert own == [(b"own", 0, (22,))]
    c.publish(f"{r}/b", b"own, only No Local matches", qos=1)
    c.no_packet()
    other, _ = v5_client(node)
    other.publish(f"{r}/a", b"theirs", qos=2)
    got = _received(c)
    assert [(p.payload, p.qos) for p in got] == [(b"theirs", 2)]
    assert sorted(got[0].properties.subscription_identifiers) == [21, 22]
    c.disconnect()
    other.disconnect()


@pytest.mark.parametrize("rap", [(True, False), (False, True), (True, True), (False, False)])
def test_retain_as_published_in_one_copy(node: Node, rap: tuple[bool, bool]) -> None:
    """[MQTT-3.3.1-12] [MQTT-3.3.1-13] a retained publish reaches the client once; its
    RETAIN flag is kept if any matching subscription asked for Retain As Published,
    cleared if none did. A publish without RETAIN arrives without it either way."""
    r = unique("t")
    sub, _ = v5_client(node)
    _subscribe(sub, Subscription(f"{r}/+", 1, retain_as_published=rap[0], retain_handling=2))
    _subscribe(sub, Subscription(f"{r}/#", 1, retain_as_published=rap[1], retain_handling=2))
    pub, _ = v5_client(node)
    pub.publish(f"{r}/a", b"retained", qos=1, retain=True)
    assert [(p.payload, p.retain) for p in publishes(sub)] == [(b"retained", any(rap))]
    pub.publish(f"{r}/a", b"live", qos=1)
    assert [(p.payload, p.retain) for p in publishes(sub)] == [(b"live", False)]
    pub.publish(f"{r}/a", b"", qos=1, retain=True)  # clear it
    publishes(sub)
    sub.disconnect()
    pub.disconnect()


def test_retained_once_per_subscribe(node: Node) -> None:
    """[MQTT-3.3.1-9] a SUBSCRIBE naming two overlapping filters sends a retained message
    they both match once, at the higher QoS the filters granted, with RETAIN set; a
    message only one of them matches comes once at that filter's QoS."""
    r = unique("t")
    pub, _ = v5_client(node)
    pub.publish(f"{r}/a", b"both", qos=2, retain=True)
    pub.publish(f"{r}/a/b", b"deep", qos=2, retain=True)
    sub, _ = v5_client(node)
    _subscribe(sub, Subscription(f"{r}/+", 2), Subscription(f"{r}/#", 1), sub_id=31)
    got = sorted(
        (p.payload, p.qos, p.retain, p.properties.subscription_identifiers) for p in _received(sub)
    )
    assert got == [(b"both", 2, True, (31,)), (b"deep", 1, True, (31,))]
    sub.disconnect()
    for topic in (f"{r}/a", f"{r}/a/b"):
        pub.publish(topic, b"", qos=1, retain=True)
    pub.disconnect()


def _received(client: RawClient) -> list[Publish]:
    """Every PUBLISH within a second, each QoS 1/2 one acknowledged (QoS 2: full flow)."""
    out: list[Publish] = []
    while True:
        try:
            out.append(client.receive(1.0))
        except AssertionError:
            return out


def test_offline_session_queues_one_copy(node: Node) -> None:
    """[MQTT-3.3.4-2] [MQTT-3.3.4-3] a persistent session that is offline gets one copy
    queued, with the merged QoS and identifiers, delivered when it comes back."""
    r = unique("t")
    cid = unique()
    sub, _ = connected(node.mqtt_port, cid, 5, clean=False, properties=KEEP)
    _subscribe(sub, Subscription(f"{r}/+", 1), sub_id=41)
    _subscribe(sub, Subscription(f"{r}/#", 2), sub_id=42)
    sub.disconnect()
    pub, _ = v5_client(node)
    pub.publish(f"{r}/a", b"queued", qos=2)
    sub, ack = connected(node.mqtt_port, cid, 5, clean=False, properties=KEEP)
    assert ack.session_present
    got = _received(sub)
    assert [(p.payload, p.qos) for p in got] == [(b"queued", 2)]
    assert sorted(got[0].properties.subscription_identifiers) == [41, 42]
    sub.disconnect()
    pub.disconnect()


def test_shared_and_normal_subscriptions_are_separate_deliveries(node: Node) -> None:
    """4.8.2: a shared subscription is its own delivery; the client gets one copy
    through the group and one through its overlapping normal subscriptions."""
    r = unique("t")
    sub, _ = v5_client(node)
    _subscribe(sub, Subscription(f"$share/{unique('g')}/{r}/#", 1), sub_id=51)
    _subscribe(sub, Subscription(f"{r}/+", 0), sub_id=52)
    _subscribe(sub, Subscription(f"{r}/a", 1), sub_id=53)
    pub, _ = v5_client(node)
    pub.publish(f"{r}/a", b"x", qos=1)
    got = sorted(
        (p.qos, tuple(sorted(p.properties.subscription_identifiers))) for p in publishes(sub)
    )
    assert got == [(1, (51,)), (1, (52, 53))]
    sub.disconnect()
    pub.disconnect()
