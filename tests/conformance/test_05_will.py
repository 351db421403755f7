"""05 will: when the server publishes a will message, and when it must not.

Runs on the package's shared default node. Each test watches its own will topic with a
subscriber connected before the will's owner goes away.
"""

from __future__ import annotations

import time

import pytest

from services.listener.mqtt.types import Disconnect, Properties, Publish, Will
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import publish_bytes, unique
from tests.support.node import Node

pytestmark = pytest.mark.integration


def _watch(node: Node, topic: str, qos: int = 1) -> RawClient:
    sub, _ = connected(node.mqtt_port, unique(), 5)
    sub.subscribe(topic, qos)
    return sub


def _will(topic: str, qos: int = 1, retain: bool = False, **props: object) -> Will:
    return Will(topic, b"gone:" + topic.encode(), qos, retain, Properties(**props))  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [3, 4, 5])
def test_will_on_abnormal_close(node: Node, version: int) -> None:
    """[MQTT-3.1.2-8] the will is published when the connection closes without a
    DISCONNECT, at the will's QoS."""
    t = unique("w") + "/abnormal"
    sub = _watch(node, t)
    c, _ = connected(node.mqtt_port, unique(), version, will=_will(t))
    c.close()
    got = sub.receive()
    assert (got.topic, got.payload, got.qos) == (t, b"gone:" + t.encode(), 1)
    sub.disconnect()


@pytest.mark.parametrize("version", [4, 5])
def test_no_will_on_disconnect(node: Node, version: int) -> None:
    """[MQTT-3.1.2-10] [MQTT-3.14.4-3] a DISCONNECT (v5 reason 0x00) deletes the will
    without publishing it."""
    t = unique("w") + "/clean"
    sub = _watch(node, t)
    c, _ = connected(node.mqtt_port, unique(), version, will=_will(t))
    c.disconnect()
    sub.no_packet(1.0)
    sub.disconnect()


def test_will_on_protocol_error(node: Node) -> None:
    """3.1.2.5: a connection the server closes for a protocol error (here a QoS 3
    PUBLISH [MQTT-3.3.1-4]) publishes the will."""
    t = unique("w") + "/error"
    sub = _watch(node, t)
    c, _ = connected(node.mqtt_port, unique(), 4, will=_will(t))
    c.send_raw(publish_bytes("x/y", flags=0x06))
    c.expect_closed()
    assert sub.receive().topic == t
    sub.disconnect()


def test_will_on_keepalive_timeout(node: Node) -> None:
    """3.1.2.5: a client closed for missing its keepalive [MQTT-3.1.2-24] has its will
    published."""
    t = unique("w") + "/keepalive"
    sub = _watch(node, t)
    c, _ = connected(node.mqtt_port, unique(), 4, keepalive=1, will=_will(t))
    c.expect_closed(5.0)
    assert sub.receive().topic == t
    sub.disconnect()


def test_will_retained(node: Node) -> None:
    """[MQTT-3.1.2-17] a will with Will Retain 1 is published as a retained message."""
    t = unique("w") + "/retained"
    c, _ = connected(node.mqtt_port, unique(), 4, will=_will(t, retain=True))
    c.close()
    time.sleep(0.5)
    late, _ = connected(node.mqtt_port, unique(), 4)
    late.subscribe(t, 1)
    got = late.receive()
    assert (got.topic, got.retain) == (t, True)
    late.disconnect()


def test_v5_disconnect_with_will_message(node: Node) -> None:
    """3.14.2.1: DISCONNECT reason 0x04 (Disconnect with Will Message) publishes the
    will."""
    t = unique("w") + "/0x04"
    sub = _watch(node, t)
    c, _ = connected(node.mqtt_port, unique(), 5, will=_will(t))
    c.send(Disconnect(0x04))
    c.expect_closed()
    assert sub.receive().topic == t
    sub.disconnect()


def test_v5_will_properties_forwarded(node: Node) -> None:
    """[MQTT-3.3.2-17] [MQTT-3.3.2-20] [MQTT-3.3.2-15] the will's properties travel with it
    unaltered, like a PUBLISH's."""
    t = unique("w") + "/props"
    sub = _watch(node, t)
    will = _will(
        t,
        content_type="text/plain",
        response_topic=f"{t}/reply",
        correlation_data=b"\x00\x01",
        user_properties=(("k", "v1"), ("k", "v2")),
    )
    c, _ = connected(node.mqtt_port, unique(), 5, will=will)
    c.close()
    props = sub.receive().properties
    assert props.content_type == "text/plain"
    assert props.response_topic == f"{t}/reply"
    assert props.correlation_data == b"\x00\x01"
    assert props.user_properties == (("k", "v1"), ("k", "v2"))
    sub.disconnect()


def test_v5_will_delay(node: Node) -> None:
    """3.1.3.2.2: the will is held back for the Will Delay Interval (2 s) after the
    connection is lost, then published."""
    t = unique("w") + "/delay"
    sub = _watch(node, t)
    c, _ = connected(
        node.mqtt_port,
        unique(),
        5,
        clean=False,
        will=_will(t, will_delay_interval=2),
        properties=Properties(session_expiry_interval=60),
    )
    c.close()
    start = time.monotonic()
    sub.no_packet(1.2)
    got = sub.receive(6.0)
    assert got.topic == t
    assert time.monotonic() - start >= 1.5
    sub.disconnect()


def test_v5_will_delay_cancelled_by_reconnect(node: Node) -> None:
    """[MQTT-3.1.3-9] a new connection to the session before the Will Delay Interval has
    passed cancels the will."""
    t = unique("w") + "/cancel"
    cid = unique()
    sub = _watch(node, t)
    keep = Properties(session_expiry_interval=60)
    c, _ = connected(
        node.mqtt_port, cid, 5, clean=False, will=_will(t, will_delay_interval=2), properties=keep
    )
    c.close()
    time.sleep(0.5)
    back, ack = connected(node.mqtt_port, cid, 5, clean=False, properties=keep)
    assert ack.session_present
    sub.no_packet(3.0)
    back.disconnect()
    sub.no_packet(0.5)
    sub.disconnect()


def test_v5_will_sent_when_session_ends_before_delay(node: Node) -> None:
    """3.1.3.2.2: the will goes out when the Will Delay Interval passes *or the session
    ends*, whichever is first: session expiry 1 s beats a will delay of 30 s."""
    t = unique("w") + "/expiry"
    sub = _watch(node, t)
    c, _ = connected(
        node.mqtt_port,
        unique(),
        5,
        clean=False,
        will=_will(t, will_delay_interval=30),
        properties=Properties(session_expiry_interval=1),
    )
    c.close()
    got = sub.receive(8.0)
    assert isinstance(got, Publish) and got.topic == t
    sub.disconnect()
