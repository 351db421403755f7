"""10 subscribe on read: a SUBSCRIBE or UNSUBSCRIBE changes routing when the node reads it.

Runs on the package's shared default node. The spec lets the server send matching
PUBLISHes before the SUBACK (3.8.4: "The Server is permitted to start sending PUBLISH
packets matching the Subscription before the Server sends the SUBACK packet"), and
requires it to stop adding messages for a filter once it has read the UNSUBSCRIBE
[MQTT-3.10.4-2]. So a publish the node handles after a SUBSCRIBE reaches the new
subscriber, and one it handles after an UNSUBSCRIBE does not, whatever the SUBACK or
UNSUBACK (which wait for the subscription's replication) are doing meanwhile.

The order the node handles two packets in is only certain on one connection: the
packets of two clients sent one right after the other can be read in either order
(the event loop may report the second socket first), and a publish read before the
SUBSCRIBE rightly misses it. So the client subscribes and publishes to itself, both
packets in one write, which the node reads in one go: a subscription that took effect
later than its packet was read shows as a missing (or extra) message.
"""

from __future__ import annotations

import time

import pytest

from services.listener.mqtt import encode
from services.listener.mqtt.types import (
    Packet,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
)
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import unique
from tests.support.node import Node

pytestmark = pytest.mark.integration

ROUNDS = 20


def _drain(client: RawClient, want: int, timeout: float = 5.0) -> list[Packet]:
    """Read until ``want`` packets arrived or ``timeout`` passed; QoS 1 PUBLISHes are
    acknowledged as they come."""
    out: list[Packet] = []
    deadline = time.monotonic() + timeout
    while len(out) < want and (left := deadline - time.monotonic()) > 0:
        try:
            pkt = client.recv(left)
        except AssertionError:
            break
        if isinstance(pkt, Publish) and pkt.qos == 1:
            assert pkt.packet_id is not None
            client.send(Puback(pkt.packet_id))
        out.append(pkt)
    return out


def _then_publish(client: RawClient, first: Packet, topic: str, payload: bytes) -> None:
    """``first`` and a QoS 1 PUBLISH of ``payload`` to ``topic`` in one write."""
    publish = Publish(topic, payload, 1, packet_id=client.packet_id())
    client.send_raw(encode(first, client.version) + encode(publish, client.version))


@pytest.mark.parametrize("version", [4, 5])
def test_publish_after_subscribe_is_delivered(node: Node, version: int) -> None:
    """3.8.4: a PUBLISH the node routes after reading a SUBSCRIBE reaches the subscriber,
    before or after the SUBACK [MQTT-3.8.4-1] (every SUBSCRIBE is still answered)."""
    root = unique("t")
    c, _ = connected(node.mqtt_port, unique(), version)
    for i in range(ROUNDS):
        subscribe = Subscribe(c.packet_id(), (Subscription(f"{root}/{i}", 1),))
        _then_publish(c, subscribe, f"{root}/{i}", b"%d" % i)
    got = _drain(c, 3 * ROUNDS)  # per round: SUBACK, PUBACK, the message
    received = sorted(int(p.payload) for p in got if isinstance(p, Publish))
    missed = sorted(set(range(ROUNDS)) - set(received))
    assert not missed, f"published after the SUBSCRIBE was read, never delivered: {missed}"
    assert received == list(range(ROUNDS))
    assert sum(isinstance(p, Suback) for p in got) == ROUNDS
    assert sum(isinstance(p, Puback) for p in got) == ROUNDS
    c.disconnect()


@pytest.mark.parametrize("version", [4, 5])
def test_publish_after_unsubscribe_is_not_delivered(node: Node, version: int) -> None:
    """[MQTT-3.10.4-2] once the node has read an UNSUBSCRIBE it adds no new message for
    that filter, even before the UNSUBACK [MQTT-3.10.4-4] leaves."""
    root = unique("t")
    c, _ = connected(node.mqtt_port, unique(), version)
    for i in range(ROUNDS):
        c.subscribe(f"{root}/{i}", 1)
    for i in range(ROUNDS):
        unsubscribe = Unsubscribe(c.packet_id(), (f"{root}/{i}",))
        _then_publish(c, unsubscribe, f"{root}/{i}", b"%d" % i)
    got = _drain(c, 2 * ROUNDS) + c.collect(0.3)  # per round: UNSUBACK, PUBACK
    leaked = sorted(int(p.payload) for p in got if isinstance(p, Publish))
    assert not leaked, f"published after the UNSUBSCRIBE was read, still delivered: {leaked}"
    assert sum(isinstance(p, Unsuback) for p in got) == ROUNDS
    assert sum(isinstance(p, Puback) for p in got) == ROUNDS
    c.disconnect()
