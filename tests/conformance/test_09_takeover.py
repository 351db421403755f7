"""09 takeover: a second CONNECT with a client id already connected takes the session over.

Runs on the package's shared default node. The old connection is closed (v5: after a
DISCONNECT 0x8E Session taken over); the new one resumes a persistent session with its
subscriptions and unacknowledged messages; the node logs what happened.
"""

from __future__ import annotations

import pytest

from services.listener.mqtt.types import Disconnect, Pingreq, Pingresp, Properties, Publish
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import unique, wait_event
from tests.support.node import Node

pytestmark = pytest.mark.integration

KEEP = Properties(session_expiry_interval=300)


def _props(version: int, persistent: bool) -> Properties:
    return KEEP if version == 5 and persistent else Properties()


def _expect_taken_over(old: RawClient) -> None:
    if old.version == 5:
        assert old.expect(Disconnect).reason_code == 0x8E  # [MQTT-3.1.4-3]
    old.expect_closed()


@pytest.mark.parametrize(("old_version", "new_version"), [(4, 4), (5, 5), (4, 5), (5, 3)])
def test_takeover_closes_old_connection(node: Node, old_version: int, new_version: int) -> None:
    """[MQTT-3.1.4-2] (3.1.1) the server disconnects the existing client; [MQTT-3.1.4-3]
    (v5) it first sends it DISCONNECT 0x8E. The new connection works; both the takeover
    and the old connection's end are logged."""
    cid = unique()
    old, _ = connected(node.mqtt_port, cid, old_version)
    new, ack = connected(node.mqtt_port, cid, new_version)
    assert not ack.session_present
    _expect_taken_over(old)
    new.send(Pingreq())
    new.expect(Pingresp)
    wait_event(node, "session.takeover", lambda e: e.get("client_id") == cid)
    wait_event(node, "client.disconnected", lambda e: e.get("client_id") == cid)
    new.disconnect()


@pytest.mark.parametrize("version", [4, 5])
def test_takeover_resumes_persistent_session(node: Node, version: int) -> None:
    """[MQTT-3.2.2-2] a takeover of a persistent session reports session present 1 and
    keeps its subscriptions: messages go to the new connection only."""
    cid, t = unique(), unique("t")
    props = _props(version, True)
    old, _ = connected(node.mqtt_port, cid, version, clean=False, properties=props)
    old.subscribe(t, 1)
    new, ack = connected(node.mqtt_port, cid, version, clean=False, properties=props)
    assert ack.session_present
    _expect_taken_over(old)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"to the new one", qos=1)
    assert new.receive().payload == b"to the new one"
    new.disconnect()
    pub.disconnect()


def test_takeover_with_clean_session_discards(node: Node) -> None:
    """[MQTT-3.1.2-6] a takeover with clean session 1 starts afresh: session present 0
    and the old subscriptions are gone."""
    cid, t = unique(), unique("t")
    old, _ = connected(node.mqtt_port, cid, 4, clean=False)
    old.subscribe(t, 1)
    new, ack = connected(node.mqtt_port, cid, 4, clean=True)
    assert not ack.session_present
    _expect_taken_over(old)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"nobody", qos=1)
    new.no_packet()
    new.disconnect()
    pub.disconnect()


@pytest.mark.parametrize("version", [4, 5])
def test_takeover_redelivers_unacknowledged(node: Node, version: int) -> None:
    """[MQTT-4.4.0-1] a QoS 1 message the old connection did not acknowledge is resent to
    the new one with DUP set and the same packet id."""
    cid, t = unique(), unique("t")
    props = _props(version, True)
    old, _ = connected(node.mqtt_port, cid, version, clean=False, properties=props)
    old.subscribe(t, 1)
    pub, _ = connected(node.mqtt_port, unique(), 4)
    pub.publish(t, b"unacked", qos=1)
    first = old.expect(Publish)
    new, ack = connected(node.mqtt_port, cid, version, clean=False, properties=props)
    assert ack.session_present
    _expect_taken_over(old)
    again = new.receive()
    assert (again.payload, again.dup, again.packet_id) == (b"unacked", True, first.packet_id)
    new.no_packet()
    new.disconnect()
    pub.disconnect()


def test_repeated_takeovers_leave_one_connection(node: Node) -> None:
    """[MQTT-3.1.4-2] five CONNECTs in a row with one client id: each takes over the one
    before; only the last stays connected."""
    cid = unique()
    clients = [connected(node.mqtt_port, cid, 4)[0] for _ in range(5)]
    for old in clients[:-1]:
        old.expect_closed()
    last = clients[-1]
    last.send(Pingreq())
    last.expect(Pingresp)
    last.disconnect()
