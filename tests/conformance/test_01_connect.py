"""01 connect: CONNECT/CONNACK, versions, client identifiers, keepalive, session present.

The node has ``connect_timeout = 2s`` and a second TCP listener that accepts only
protocol levels 3 and 4, so a v5 client can be refused with 0x84.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from services.listener.mqtt.types import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Publish,
    Subscribe,
    Subscription,
)
from tests.conformance.client import RawClient, connected, protocol_name
from tests.conformance.helpers import (
    check_serving,
    connect_bytes,
    publish_bytes,
    started_node,
    unique,
)
from tests.support.node import Node, free_port

pytestmark = pytest.mark.integration

CONNECT_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    yield from started_node(
        tmp_path_factory.mktemp("connect"),
        connect_timeout=f"{int(CONNECT_TIMEOUT)}s",
        **{
            "listener.tcp.v34": f"127.0.0.1:{free_port()}",
            "listener.tcp.v34.allowed_protocol_versions": "3,4",
        },
    )


@pytest.fixture
def v34_port(node: Node) -> int:
    """The listener that accepts MQTT 3.1 and 3.1.1 only."""
    return int(node.settings["listener.tcp.v34"].rpartition(":")[2])


def _connect(client_id: str, version: int, clean: bool = True) -> Connect:
    return Connect(protocol_name(version), version, clean, 60, client_id)


# -- versions ------------------------------------------------------------------------------


def test_v31_mqisdp_accepted(node: Node) -> None:
    """MQTT 3.1 (``MQIsdp``, level 3) is accepted: CONNACK ``20 02 00 00``."""
    c = RawClient.connect(node.mqtt_port, 3)
    c.send(_connect(unique(), 3))
    c.expect_bytes(b"\x20\x02\x00\x00")
    c.send(Pingreq())
    c.expect(Pingresp)  # [MQTT-3.12.4-1]
    c.disconnect()


def test_v311_accepted(node: Node) -> None:
    """[MQTT-3.2.0-1] the first packet from the server is CONNACK; return code 0."""
    c = RawClient.connect(node.mqtt_port, 4)
    c.send(_connect(unique(), 4))
    c.expect_bytes(b"\x20\x02\x00\x00")
    c.disconnect()


def test_v5_accepted(node: Node) -> None:
    """[MQTT-3.1.4-5] a valid v5 CONNECT gets CONNACK 0x00, session present 0."""
    c = RawClient.connect(node.mqtt_port, 5)
    c.send(_connect(unique(), 5))
    connack = c.expect(Connack)
    assert connack.reason_code == 0x00
    assert not connack.session_present
    c.disconnect()


@pytest.mark.parametrize("level", [0, 2, 6, 255])
def test_unsupported_level_refused_with_rc_1(node: Node, level: int) -> None:
    """[MQTT-3.1.2-2] an unsupported protocol level: CONNACK return code 1, then close.
    [MQTT-3.2.2-4] session present is 0 in a refusal."""
    c = RawClient.connect(node.mqtt_port, 4)
    c.send_raw(connect_bytes(unique(), version=level, protocol_name="MQTT"))
    c.expect_bytes(b"\x20\x02\x00\x01")
    c.expect_closed()  # [MQTT-3.2.2-5]


def test_v5_refused_with_0x84_where_not_allowed(v34_port: int) -> None:
    """[MQTT-3.1.2-2] (v5) a listener without level 5 answers CONNACK 0x84 and closes."""
    port = v34_port
    c = RawClient.connect(port, 5)
    c.send(_connect(unique(), 5))
    connack = c.expect(Connack)
    assert connack.reason_code == 0x84
    assert not connack.session_present
    c.expect_closed()
    ok, _ = connected(port, unique(), 4)  # the same listener still speaks 3.1.1
    ok.disconnect()


@pytest.mark.parametrize(("name", "level"), [("MQTT", 3), ("MQIsdp", 4), ("MQTX", 4)])
def test_wrong_protocol_name_refused(node: Node, name: str, level: int) -> None:
    """[MQTT-3.1.2-1] a wrong protocol name for the level: the server may close at once
    or refuse with return code 1; it must not accept the connection."""
    c = RawClient.connect(node.mqtt_port, 4)
    c.send_raw(connect_bytes(unique(), version=level, protocol_name=name))
    packets = c.collect(2.0)
    assert all(isinstance(p, Connack) and p.reason_code == 1 for p in packets), packets
    c.expect_closed()


# -- packet order --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    [Pingreq(), Publish("a/b", b"x"), Subscribe(1, (Subscription("a/#", 0),))],
    ids=["pingreq", "publish", "subscribe"],
)
def test_first_packet_must_be_connect(node: Node, first: Packet) -> None:
    """[MQTT-3.1.0-1] a first packet other than CONNECT closes the connection, with no
    CONNACK (the client never asked to connect)."""
    c = RawClient.connect(node.mqtt_port, 4)
    c.send(first)
    c.expect_closed()


def test_second_connect_v311_closes(node: Node) -> None:
    """[MQTT-3.1.0-2] a second CONNECT is a protocol violation: disconnect."""
    c, _ = connected(node.mqtt_port, unique(), 4)
    c.send(_connect(unique(), 4))
    c.expect_closed()


def test_second_connect_v5_protocol_error(node: Node) -> None:
    """[MQTT-3.1.0-2] (v5) a second CONNECT is a Protocol Error: DISCONNECT 0x82, close."""
    c, _ = connected(node.mqtt_port, unique(), 5)
    c.send(_connect(unique(), 5))
    assert c.expect(Disconnect).reason_code == 0x82
    c.expect_closed()


# -- flags ---------------------------------------------------------------------------------


def test_reserved_flag_v311_closes(node: Node) -> None:
    """[MQTT-3.1.2-3] the reserved CONNECT flag must be 0, else disconnect (3.1.1 has no
    return code for it, so no CONNACK)."""
    c = RawClient.connect(node.mqtt_port, 4)
    c.send_raw(connect_bytes(unique(), version=4, flags=0x03))
    c.expect_closed()
    check_serving(node)


def test_reserved_flag_v5_malformed(node: Node) -> None:
    """[MQTT-3.1.2-3] (v5) a set reserved flag is a Malformed Packet: CONNACK 0x81, close."""
    c = RawClient.connect(node.mqtt_port, 5)
    c.send_raw(connect_bytes(unique(), version=5, flags=0x03))
    assert c.expect(Connack).reason_code == 0x81
    c.expect_closed()


def test_will_qos_without_will_flag_closes(node: Node) -> None:
    """[MQTT-3.1.2-13] will QoS must be 0 when the will flag is 0."""
    c = RawClient.connect(node.mqtt_port, 4)
    c.send_raw(connect_bytes(unique(), version=4, flags=0x02 | 0x08))
    c.expect_closed()


# -- client identifiers --------------------------------------------------------------------


def test_23_alphanumeric_characters_allowed(node: Node) -> None:
    """[MQTT-3.1.3-5] 1 to 23 characters of 0-9a-zA-Z are always allowed."""
    for version in (3, 4, 5):
        cid = "aZ9" + unique("x").rjust(20, "0")
        assert len(cid) == 23
        c, _ = connected(node.mqtt_port, cid, version)
        c.disconnect()


def test_empty_client_id_v311_clean_session_assigned(node: Node) -> None:
    """[MQTT-3.1.3-6] an empty client id with clean session 1 is given a unique id."""
    a, _ = connected(node.mqtt_port, "", 4)
    b, _ = connected(node.mqtt_port, "", 4)  # a second one does not take the first over
    topic = unique("t") + "/empty"
    a.subscribe(topic, 0)
    b.publish(topic, b"hi")
    assert a.expect(Publish).payload == b"hi"
    a.disconnect()
    b.disconnect()


def test_empty_client_id_v311_persistent_rejected(node: Node) -> None:
    """[MQTT-3.1.3-8] an empty client id with clean session 0: return code 2, close."""
    c = RawClient.connect(node.mqtt_port, 4)
    c.send(_connect("", 4, clean=False))
    c.expect_bytes(b"\x20\x02\x00\x02")
    c.expect_closed()


def test_empty_client_id_v31_rejected(node: Node) -> None:
    """MQTT 3.1 client ids are 1-23 characters: an empty one gets return code 2."""
    c = RawClient.connect(node.mqtt_port, 3)
    c.send(_connect("", 3))
    c.expect_bytes(b"\x20\x02\x00\x02")
    c.expect_closed()


def test_v5_assigned_client_identifier(node: Node) -> None:
    """[MQTT-3.1.3-6] [MQTT-3.1.3-7] a v5 empty client id is assigned one, returned in
    CONNACK; it names a real session that a later CONNECT can resume."""
    props = Properties(session_expiry_interval=60)
    a, ca = connected(node.mqtt_port, "", 5, clean=False, properties=props)
    b, cb = connected(node.mqtt_port, "", 5)
    assigned = ca.properties.assigned_client_identifier
    assert assigned
    assert cb.properties.assigned_client_identifier not in (None, "", assigned)
    a.disconnect()
    b.disconnect()
    again, c = connected(node.mqtt_port, assigned, 5, clean=False, properties=props)
    assert c.session_present  # [MQTT-3.2.2-3] (v5)
    assert c.properties.assigned_client_identifier is None
    again.disconnect()


def test_client_id_too_long_v311(node: Node) -> None:
    """[MQTT-3.1.3-9] a client id the server rejects (longer than max_client_id_size,
    100 by default): return code 2, then close; 100 bytes are still accepted."""
    ok, _ = connected(node.mqtt_port, unique().ljust(100, "k"), 4)
    ok.disconnect()
    c = RawClient.connect(node.mqtt_port, 4)
    c.send(_connect(unique().ljust(101, "k"), 4))
    c.expect_bytes(b"\x20\x02\x00\x02")
    c.expect_closed()


def test_client_id_too_long_v5(node: Node) -> None:
    """[MQTT-3.1.3-8] (v5) a rejected client id: CONNACK 0x85, then close."""
    c = RawClient.connect(node.mqtt_port, 5)
    c.send(_connect(unique().ljust(101, "k"), 5))
    connack = c.expect(Connack)
    assert connack.reason_code == 0x85
    assert not connack.session_present
    c.expect_closed()


def test_refused_connect_processes_nothing_after_it(node: Node) -> None:
    """[MQTT-3.1.4-5] after refusing a CONNECT the server processes no further data: a
    retained PUBLISH sent right behind it is not stored."""
    topic = unique("t") + "/refused"
    c = RawClient.connect(node.mqtt_port, 4)
    bad = connect_bytes(unique().ljust(101, "k"), version=4)
    c.send_raw(bad + publish_bytes(topic, b"x", flags=0x01))
    c.expect_bytes(b"\x20\x02\x00\x02")
    c.expect_closed()
    s, _ = connected(node.mqtt_port, unique(), 4)
    s.subscribe(topic, 0)
    s.no_packet(1.0)
    s.disconnect()


# -- keepalive and connect timeout ---------------------------------------------------------


def _time_to_close(c: RawClient, limit: float) -> float:
    start = time.monotonic()
    c.expect_closed(limit)
    return time.monotonic() - start


def test_keepalive_timeout_v311(node: Node) -> None:
    """[MQTT-3.1.2-24] no packet for 1.5 x keepalive (1 s): the server disconnects; a
    client that pings in time, and one with keepalive 0, stay connected."""
    idle = RawClient.connect(node.mqtt_port, 4)
    idle.send(Connect("MQTT", 4, True, 0, unique()))
    idle.expect(Connack)
    pinger, _ = connected(node.mqtt_port, unique(), 4, keepalive=1)
    silent, _ = connected(node.mqtt_port, unique(), 4, keepalive=1)
    start = time.monotonic()
    for _ in range(6):
        pinger.send(Pingreq())
        pinger.expect(Pingresp)
        time.sleep(0.5)
    silent.expect_closed(0.1)  # closed by now, 3 s after connecting
    assert time.monotonic() - start >= 1.4
    pinger.send(Pingreq())
    pinger.expect(Pingresp)
    idle.send(Pingreq())
    idle.expect(Pingresp)
    pinger.disconnect()
    idle.disconnect()


def test_keepalive_timeout_closes_in_time(node: Node) -> None:
    """[MQTT-3.1.2-24] the close comes at 1.5 x keepalive (2 s -> 3 s), not much earlier."""
    c, _ = connected(node.mqtt_port, unique(), 4, keepalive=2)
    elapsed = _time_to_close(c, 8.0)
    assert 2.5 <= elapsed <= 6.0, elapsed


def test_keepalive_timeout_v5_disconnect_0x8d(node: Node) -> None:
    """[MQTT-3.1.2-22] (v5) keepalive expiry: DISCONNECT 0x8D (Keep Alive timeout), close."""
    c, _ = connected(node.mqtt_port, unique(), 5, keepalive=1)
    assert c.expect(Disconnect, 5.0).reason_code == 0x8D
    c.expect_closed()


def test_silent_socket_closed_after_connect_timeout(node: Node) -> None:
    """A socket that never sends CONNECT is closed after ``connect_timeout`` (2 s), and so
    is one that sends half a CONNECT."""
    silent = RawClient.connect(node.mqtt_port, 4)
    half = RawClient.connect(node.mqtt_port, 4)
    half.send_raw(connect_bytes(unique(), version=4)[:7])
    elapsed = _time_to_close(silent, CONNECT_TIMEOUT + 6)
    assert CONNECT_TIMEOUT - 0.5 <= elapsed <= CONNECT_TIMEOUT + 4, elapsed
    half.expect_closed(2.0)


# -- session present -----------------------------------------------------------------------


def test_session_present_v311(node: Node) -> None:
    """[MQTT-3.2.2-3] no stored session: 0; [MQTT-3.2.2-2] resumed session: 1;
    [MQTT-3.2.2-1] clean session: 0, and [MQTT-3.1.2-6] the old session is discarded."""
    cid = unique()
    c, ack = connected(node.mqtt_port, cid, 4, clean=False)
    assert not ack.session_present
    c.disconnect()
    c, ack = connected(node.mqtt_port, cid, 4, clean=False)
    assert ack.session_present
    c.disconnect()
    c, ack = connected(node.mqtt_port, cid, 4, clean=True)
    assert not ack.session_present
    c.disconnect()
    c, ack = connected(node.mqtt_port, cid, 4, clean=False)
    assert not ack.session_present
    c.disconnect()


def test_session_present_v31_is_zero(node: Node) -> None:
    """MQTT 3.1 has no session present flag: the acknowledge flags byte is always 0."""
    cid = unique()
    for _ in range(2):
        c = RawClient.connect(node.mqtt_port, 3)
        c.send(_connect(cid, 3, clean=False))
        c.expect_bytes(b"\x20\x02\x00\x00")
        c.disconnect()


def test_session_present_v5_depends_on_expiry(node: Node) -> None:
    """[MQTT-3.2.2-2] (v5) clean start 0 with a session that outlived its connection
    (expiry 60 s) resumes it; with expiry 0 the session ended with the connection."""
    keep, gone = unique(), unique()
    props = Properties(session_expiry_interval=60)
    for cid, p in ((keep, props), (gone, Properties())):
        c, ack = connected(node.mqtt_port, cid, 5, clean=False, properties=p)
        assert not ack.session_present
        c.disconnect()
    c, ack = connected(node.mqtt_port, keep, 5, clean=False, properties=props)
    assert ack.session_present
    c.disconnect()
    c, ack = connected(node.mqtt_port, gone, 5, clean=False)
    assert not ack.session_present
    c.disconnect()
