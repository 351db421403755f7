"""11 server disconnect: the reason code of a server-initiated close reaches a client that
is still sending.

The node runs with Receive Maximum 5. The server sends a DISCONNECT (or a refusing
CONNACK) with a reason code and then closes the network connection [MQTT-3.14.4-2]
[MQTT-4.13.1-1] [MQTT-3.2.2-7]. Closed with the client's later bytes unread, the socket
answers them with a reset: the client's next send fails with ``Connection reset by
peer`` (or a broken pipe), and a client library treats that as a lost connection before
it reads the reason code (on a real network the reset can also overtake the DISCONNECT
itself). So each test floods the broker without reading, keeps sending for a while
after the error (every send must succeed), and only then reads: the code must be there,
followed by a clean end of stream. A client that never reads and never closes must not
keep its connection beyond a short bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from services.listener.mqtt import encode
from services.listener.mqtt.types import Connack, Disconnect, Properties, Publish
from tests.conformance.client import RawClient
from tests.conformance.helpers import (
    check_serving,
    connect_bytes,
    prop,
    started_node,
    u16,
    unique,
    v5_client,
)
from tests.support.node import Node, wait_for

pytestmark = pytest.mark.integration

RECEIVE_MAX = 5
KEEP_SENDING = 0.5
"""Seconds a client goes on sending after the broker decided to close."""
CLOSE_BOUND = 5.0
"""Seconds within which the broker drops a client that neither reads nor closes (its
linger bound plus slack for 2 shared cores)."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from started_node(
        tmp_path_factory.mktemp("disconnect"), receive_max_broker=str(RECEIVE_MAX)
    )


def _connections(node: Node) -> float:
    for line in node.get_text("/metrics").splitlines():
        if line.startswith("ternmq_connections{") or line.startswith("ternmq_connections "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no ternmq_connections in /metrics")


def _publishes(topic: str, first_id: int, count: int, qos: int, retain: bool) -> bytes:
    return b"".join(
        encode(Publish(topic, b"x" * 64, qos, retain, packet_id=first_id + i if qos else None), 5)
        for i in range(count)
    )


def _flood(client: RawClient, head: bytes, topic: str, qos: int, retain: bool) -> None:
    """Send ``head`` then a stream of PUBLISHes for ``KEEP_SENDING`` seconds, reading
    nothing. Every send must succeed: the broker may stop reading what we send, but it
    must not reset the connection under a client that has not read its answer yet."""
    client.send_raw(head)
    pid = 1000
    deadline = time.monotonic() + KEEP_SENDING
    while time.monotonic() < deadline:
        try:
            client.send_raw(_publishes(topic, pid, 20, qos, retain))
        except OSError as exc:
            raise AssertionError(f"broker reset the connection under a sender: {exc}") from None
        pid = pid % 60000 + 20
        time.sleep(0.005)


def _reason_then_eof(client: RawClient, packet: type[Disconnect] | type[Connack]) -> int:
    """Skip the acknowledgements sent before the close; return the closing packet's
    reason code after checking the stream then ends cleanly (EOF, not a reset)."""
    while True:
        pkt = client.recv()
        if isinstance(pkt, packet):
            break
    client.expect_closed()
    return pkt.reason_code


@pytest.mark.parametrize("qos", [1, 2])
def test_receive_maximum_exceeded_reaches_a_sending_client(node: Node, qos: int) -> None:
    """3.3.4 [MQTT-3.3.4-7]: one QoS > 0 PUBLISH over the broker's Receive
    Maximum is answered with DISCONNECT 0x93, which a client still sending can read.
    QoS 1 PUBLISHes are retained, so each PUBACK waits for the retained write; QoS 2
    ones wait for a PUBREL the client never sends."""
    c, ack = v5_client(node)
    assert ack.properties.receive_maximum == RECEIVE_MAX
    t = unique("t")
    _flood(c, _publishes(t, 1, 50, qos, qos == 1), t, qos, qos == 1)
    assert _reason_then_eof(c, Disconnect) == 0x93
    c.close()
    check_serving(node, 5)


def test_protocol_error_reaches_a_sending_client(node: Node) -> None:
    """[MQTT-3.3.4-6] a PUBLISH from a client carrying a Subscription Identifier is a
    Protocol Error: DISCONNECT 0x82 [MQTT-4.13.1-1], readable by a client still sending."""
    c, _ = v5_client(node)
    t = unique("t")
    bad = encode(Publish(t, b"x", properties=Properties(subscription_identifiers=(3,))), 5)
    _flood(c, bad, t, 0, False)
    assert _reason_then_eof(c, Disconnect) == 0x82
    c.close()


def test_connack_refusal_reaches_a_sending_client(node: Node) -> None:
    """3.1.2.11.3: a Receive Maximum of 0 is a Protocol Error, answered by CONNACK 0x82
    [MQTT-3.2.2-7] even when the client pipelines PUBLISHes behind its CONNECT."""
    c = RawClient.connect(node.mqtt_port, 5)
    head = connect_bytes(unique(), version=5, props=prop(0x21, u16(0)))
    _flood(c, head, unique("t"), 0, False)
    assert _reason_then_eof(c, Connack) == 0x82
    c.close()


def test_silent_client_is_dropped_within_bound(node: Node) -> None:
    """A client that floods past the Receive Maximum and then neither reads nor closes
    loses its connection within a few seconds all the same: the broker's connection
    count comes back to what it was."""
    wait_for(lambda: _connections(node) == 0, CLOSE_BOUND, what="no connections left")
    c, _ = v5_client(node)
    assert _connections(node) == 1
    t = unique("t")
    c.send_raw(_publishes(t, 1, 50, 2, False))
    start = time.monotonic()
    wait_for(lambda: _connections(node) == 0, CLOSE_BOUND, what="the silent client dropped")
    assert time.monotonic() - start < CLOSE_BOUND
    c.close()
    check_serving(node, 5)


def test_client_disconnect_is_not_delayed(node: Node) -> None:
    """A normal DISCONNECT from the client (3.14.4): the broker closes the
    connection at once, before the client closes its side."""
    c, _ = v5_client(node)
    c.send(Disconnect(0))
    c.expect_closed(timeout=1.0)
    wait_for(lambda: _connections(node) == 0, CLOSE_BOUND, what="connection accounted")
