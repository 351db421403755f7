"""10 subscribe on read: a SUBSCRIBE or UNSUBSCRIBE changes routing when the node reads it.

Runs on the package's shared default node. The spec lets the server send matching
PUBLISHes before the SUBACK (3.8.4: "The Server is permitted to start sending PUBLISH
packets matching the Subscription before the Server sends the SUBACK packet"), and
requires it to stop adding messages for a filter once it has read the UNSUBSCRIBE
[MQTT-3.10.4-2]. So a publish the node handles after a SUBSCRIBE reaches the new
subscriber, and one it handles after an UNSUBSCRIBE does not, whatever the SUBACK or
UNSUBACK (which wait for the subscription's replication) are doing meanwhile.

Each test races the two clients ``ROUNDS`` times: the subscriber sends its (UN)SUBSCRIBE
without waiting for the answer, the publisher sends a QoS 1 PUBLISH at once and waits
for its PUBACK, which the node sends only after routing the message. A subscription
that took effect later than its packet was read shows as a missing (or extra) message.
"""

from __future__ import annotations

import time

import pytest

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

ROUNDS = 50


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


@pytest.mark.parametrize("version", [4, 5])
def test_publish_after_subscribe_is_delivered(node: Node, version: int) -> None:
    """3.8.4: a PUBLISH the node routes after reading a SUBSCRIBE reaches the subscriber,
    before or after the SUBACK [MQTT-3.8.4-1] (every SUBSCRIBE is still answered)."""
    root = unique("t")
    sub, _ = connected(node.mqtt_port, unique(), version)
    pub, _ = connected(node.mqtt_port, unique(), version)
    for i in range(ROUNDS):
        sub.send(Subscribe(sub.packet_id(), (Subscription(f"{root}/{i}", 1),)))
        pub.publish(f"{root}/{i}", b"%d" % i, qos=1)
    got = _drain(sub, 2 * ROUNDS)
    subacks = [p for p in got if isinstance(p, Suback)]
    received = sorted(int(p.payload) for p in got if isinstance(p, Publish))
    missed = sorted(set(range(ROUNDS)) - set(received))
    assert not missed, f"published after the SUBSCRIBE was read, never delivered: {missed}"
    assert received == list(range(ROUNDS))
    assert len(subacks) == ROUNDS
    sub.disconnect()
    pub.disconnect()


@pytest.mark.parametrize("version", [4, 5])
def test_publish_after_unsubscribe_is_not_delivered(node: Node, version: int) -> None:
    """[MQTT-3.10.4-2] once the node has read an UNSUBSCRIBE it adds no new message for
    that filter, even before the UNSUBACK [MQTT-3.10.4-4] leaves."""
    root = unique("t")
    sub, _ = connected(node.mqtt_port, unique(), version)
    pub, _ = connected(node.mqtt_port, unique(), version)
    for i in range(ROUNDS):
        sub.subscribe(f"{root}/{i}", 1)
    for i in range(ROUNDS):
        sub.send(Unsubscribe(sub.packet_id(), (f"{root}/{i}",)))
        pub.publish(f"{root}/{i}", b"%d" % i, qos=1)
    got = _drain(sub, ROUNDS, timeout=5.0) + sub.collect(0.3)
    leaked = sorted(int(p.payload) for p in got if isinstance(p, Publish))
    assert not leaked, f"published after the UNSUBSCRIBE was read, still delivered: {leaked}"
    assert len([p for p in got if isinstance(p, Unsuback)]) == ROUNDS
    sub.disconnect()
    pub.disconnect()
