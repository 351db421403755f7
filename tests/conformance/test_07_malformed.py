"""07 malformed: packets that break the protocol, after a successful CONNECT.

Each case sends one bad frame (whole, so the broker has read everything we sent when it
closes, and a v5 DISCONNECT cannot be lost to a TCP reset) and checks the answer:
3.1.1 has no way to say why, so the connection is just closed [MQTT-4.8.0-1]; MQTT 5
gets a DISCONNECT with the reason code the spec names (0x81 Malformed Packet, 0x82
Protocol Error, 0x8F/0x90 topic filter/name invalid, 0x95 Packet too large), then the
close [MQTT-4.13.1-1]. After every case another client must still be served, and the
error must be logged as ``protocol.error``. Runs on the package's shared default node.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from services.listener.mqtt.types import Disconnect, Suback
from tests.conformance.client import RawClient, connected
from tests.conformance.helpers import (
    check_serving,
    frame,
    prop,
    publish_bytes,
    string,
    u16,
    u32,
    unique,
    varint,
    wait_event,
)
from tests.support.node import Node

pytestmark = pytest.mark.integration

MALFORMED, PROTOCOL, FILTER, NAME, TOO_LARGE = 0x81, 0x82, 0x8F, 0x90, 0x95


def _props(version: int, raw: bytes = b"") -> bytes:
    return varint(len(raw)) + raw if version == 5 else b""


def _subscribe(version: int, *entries: tuple[bytes | str, int], flags: int = 0x02) -> bytes:
    body = u16(1) + _props(version) + b"".join(string(f) + bytes((o,)) for f, o in entries)
    return frame(0x80 | flags, body)


def _unsubscribe(version: int, *filters: bytes | str) -> bytes:
    return frame(0xA2, u16(1) + _props(version) + b"".join(string(f) for f in filters))


@dataclass(frozen=True)
class Case:
    """One malformed input: ``build(version)`` gives the bytes; ``v5`` the reason codes
    a v5 DISCONNECT may carry (several where the spec lets the server choose);
    ``versions`` where the case applies."""

    name: str
    build: Callable[[int], bytes]
    v5: tuple[int, ...]
    versions: tuple[int, ...] = (4, 5)


CASES = [
    # -- fixed header and Remaining Length ------------------------------------------------
    Case(
        "remaining-length-too-short",  # topic length 5, one byte left in the frame
        lambda v: b"\x30\x03\x00\x05a",
        (MALFORMED,),
    ),
    Case("remaining-length-five-bytes", lambda v: b"\x30\xff\xff\xff\xff\x01", (MALFORMED,)),
    Case(
        "remaining-length-not-minimal [MQTT-1.5.5-1]", lambda v: b"\xc0\x80\x00", (MALFORMED,), (5,)
    ),
    Case("pingreq-with-body", lambda v: b"\xc0\x01\x00", (MALFORMED,)),
    Case("puback-too-short", lambda v: b"\x40\x01\x00", (MALFORMED,)),
    Case("oversize-frame", lambda v: b"\x30\xff\xff\xff\x7f", (TOO_LARGE, MALFORMED)),
    Case("reserved-type-0", lambda v: b"\x00\x00", (MALFORMED, PROTOCOL)),
    Case("auth-in-3.1.1", lambda v: b"\xf0\x00", (), (4,)),
    # -- reserved flag bits [MQTT-2.2.2-2] / [MQTT-2.1.3-1] ----------------------------------
    Case("pubrel-flags-0000", lambda v: b"\x60\x02\x00\x01", (MALFORMED,)),
    Case("subscribe-flags-0000", lambda v: _subscribe(v, ("a/b", 0), flags=0), (MALFORMED,)),
    Case("unsubscribe-flags-0000", lambda v: b"\xa0" + _unsubscribe(v, "a/b")[1:], (MALFORMED,)),
    Case("pingreq-flags-0001", lambda v: b"\xc1\x00", (MALFORMED,)),
    Case("puback-flags-0001", lambda v: b"\x41\x02\x00\x01", (MALFORMED,)),
    Case("disconnect-flags-0001", lambda v: b"\xe1\x00", (MALFORMED,)),
    # -- PUBLISH ---------------------------------------------------------------------------
    Case(
        "qos-3 [MQTT-3.3.1-4]",
        lambda v: publish_bytes("a/b", version=v, flags=0x06, packet_id=1),
        (MALFORMED,),
    ),
    Case(
        "dup-on-qos-0 [MQTT-3.3.1-2]",
        lambda v: publish_bytes("a/b", version=v, flags=0x08),
        (MALFORMED, PROTOCOL),
    ),
    Case(
        "packet-id-0 [MQTT-2.3.1-1]",
        lambda v: publish_bytes("a/b", version=v, qos=1, packet_id=0),
        (MALFORMED, PROTOCOL),
    ),
    Case(
        "invalid-utf8-topic [MQTT-1.5.4-1]",
        lambda v: publish_bytes(b"a/\xff\xfe", version=v),
        (MALFORMED,),
    ),
    Case(
        "utf16-surrogate-topic [MQTT-1.5.4-1]",
        lambda v: publish_bytes(b"a/\xed\xa0\x80", version=v),
        (MALFORMED,),
    ),
    Case(
        "nul-in-topic [MQTT-1.5.4-2]", lambda v: publish_bytes(b"a/\x00b", version=v), (MALFORMED,)
    ),
    Case("plus-in-topic [MQTT-3.3.2-2]", lambda v: publish_bytes("a/+", version=v), (NAME,)),
    Case("hash-in-topic [MQTT-3.3.2-2]", lambda v: publish_bytes("a/#", version=v), (NAME,)),
    Case("empty-topic [MQTT-4.7.3-1]", lambda v: publish_bytes("", version=v), (PROTOCOL, NAME)),
    # -- properties (MQTT 5) ---------------------------------------------------------------
    Case(
        "unknown-property-id",
        lambda v: publish_bytes("a/b", version=v, props=prop(0x7F, b"\x00")),
        (MALFORMED,),
        (5,),
    ),
    Case(
        "property-not-for-publish",
        lambda v: publish_bytes("a/b", version=v, props=prop(0x11, u32(10))),
        (MALFORMED,),
        (5,),
    ),
    Case(
        "duplicate-property",
        lambda v: publish_bytes("a/b", version=v, props=prop(0x01, b"\x01") * 2),
        (PROTOCOL,),
        (5,),
    ),
    Case(
        "property-length-overruns",
        lambda v: frame(0x30, string("a/b") + b"\x20\x01\x01"),
        (MALFORMED,),
        (5,),
    ),
    Case(
        "payload-format-indicator-2",
        lambda v: publish_bytes("a/b", version=v, props=prop(0x01, b"\x02")),
        (PROTOCOL, MALFORMED),
        (5,),
    ),
    # -- SUBSCRIBE / UNSUBSCRIBE -----------------------------------------------------------
    Case("subscribe-no-filters [MQTT-3.8.3-3]", lambda v: _subscribe(v), (PROTOCOL, MALFORMED)),
    Case("subscribe-qos-3 [MQTT-3.8.3-4]", lambda v: _subscribe(v, ("a/b", 3)), (MALFORMED,)),
    Case(
        "subscribe-reserved-bits [MQTT-3.8.3-5]",
        lambda v: _subscribe(v, ("a/b", 0xC0)),
        (MALFORMED,),
    ),
    Case(
        "subscribe-v5-bits-in-3.1.1 [MQTT-3.8.3-4]",
        lambda v: _subscribe(v, ("a/b", 0x04)),
        (),
        (4,),
    ),
    Case(
        "subscribe-retain-handling-3",
        lambda v: _subscribe(v, ("a/b", 0x30)),
        (PROTOCOL, MALFORMED),
        (5,),
    ),
    Case(
        "subscribe-packet-id-0",
        lambda v: frame(0x82, u16(0) + _props(v) + string("a/b") + b"\x00"),
        (MALFORMED,),
    ),
    Case(
        "subscribe-invalid-utf8 [MQTT-1.5.4-1]",
        lambda v: _subscribe(v, (b"\xc3\x28", 0)),
        (MALFORMED,),
    ),
    Case(
        "unsubscribe-no-filters [MQTT-3.10.3-2]", lambda v: _unsubscribe(v), (PROTOCOL, MALFORMED)
    ),
    # -- packets only a server sends -------------------------------------------------------
    Case("connack-from-client", lambda v: b"\x20\x02\x00\x00", (PROTOCOL, MALFORMED)),
    Case("suback-from-client", lambda v: b"\x90\x03\x00\x01\x00", (PROTOCOL, MALFORMED), (4,)),
    Case("pingresp-from-client", lambda v: b"\xd0\x00", (PROTOCOL, MALFORMED)),
]

INVALID_FILTERS = ["", "a/#/b", "a/b#", "a+/b", "a/\x00"]


def _params() -> list[object]:
    out: list[object] = []
    for case in CASES:
        short = case.name.split(" ")[0]
        for version in case.versions:
            out.append(pytest.param(case, version, id=f"v{version}-{short}"))
    return out


def _errors(node: Node) -> int:
    return sum(1 for _ in node.events("protocol.error"))


@pytest.mark.parametrize(("case", "version"), _params())
def test_malformed(node: Node, case: Case, version: int) -> None:
    """The case's packet closes the connection (v5: after a DISCONNECT with a reason code
    the spec names), the broker serves others, and ``protocol.error`` is logged."""
    cid = unique("bad")
    before = _errors(node)
    c, _ = connected(node.mqtt_port, cid, version)
    c.send_raw(case.build(version))
    if version == 5:
        reason = c.expect(Disconnect).reason_code
        assert reason in case.v5, f"DISCONNECT 0x{reason:02X}, expected {case.v5}"
    c.expect_closed()
    check_serving(node, version)
    event = wait_event(node, "protocol.error", lambda e: e.get("client_id") == cid, 3.0)
    if version == 5:
        assert event["reason_code"] == reason
    assert _errors(node) > before


@pytest.mark.parametrize("topic_filter", INVALID_FILTERS)
def test_invalid_topic_filter_v311(node: Node, topic_filter: str) -> None:
    """[MQTT-4.7.1-1] [MQTT-4.7.1-2] [MQTT-4.7.1-3] wildcards must fill a whole level and
    ``#`` must come last; [MQTT-4.7.3-1] filters are not empty; [MQTT-4.7.3-2] no U+0000.
    3.1.1 closes the connection (or, at most, refuses the filter with SUBACK 0x80)."""
    c, _ = connected(node.mqtt_port, unique(), 4)
    c.send_raw(_subscribe(4, (topic_filter, 0)))
    packets = c.collect(1.0)
    # a SUBACK 0x80 (failure) is tolerable, a grant is not
    assert all(isinstance(p, Suback) and p.reason_codes == (0x80,) for p in packets), packets
    if not packets:
        c.expect_closed()
    check_serving(node)


@pytest.mark.parametrize("topic_filter", INVALID_FILTERS)
def test_invalid_topic_filter_v5(node: Node, topic_filter: str) -> None:
    """As above for MQTT 5: SUBACK 0x8F (Topic Filter invalid), or DISCONNECT 0x8F / 0x81
    (malformed) and close."""
    c, _ = connected(node.mqtt_port, unique(), 5)
    c.send_raw(_subscribe(5, (topic_filter, 0)))
    pkt = c.recv()
    if isinstance(pkt, Suback):
        assert pkt.reason_codes == (FILTER,)
        c.disconnect()
    else:
        assert isinstance(pkt, Disconnect) and pkt.reason_code in (FILTER, MALFORMED), pkt
        c.expect_closed()
    check_serving(node, 5)


def test_truncated_frame_then_half_close(node: Node) -> None:
    """A frame cut short by the client's end of stream: the server closes the connection
    (it cannot be completed) and publishes the will, as for any abnormal close."""
    cid = unique()
    c, _ = connected(node.mqtt_port, cid, 4)
    c.send_raw(publish_bytes("a/b", b"x" * 100)[:20])
    c.sock.shutdown(socket.SHUT_WR)
    c.expect_closed()
    check_serving(node)


def test_truncated_frame_closed_by_keepalive(node: Node) -> None:
    """A frame that never completes is not a Control Packet: the keepalive (1 s) still
    expires and the server disconnects [MQTT-3.1.2-24]."""
    c, _ = connected(node.mqtt_port, unique(), 4, keepalive=1)
    c.send_raw(publish_bytes("a/b", b"x" * 100)[:20])
    c.expect_closed(5.0)
    check_serving(node)


def test_garbage_before_connect(node: Node) -> None:
    """[MQTT-3.1.0-1] [MQTT-4.8.0-1] bytes that are no CONNECT: closed, no CONNACK."""
    for garbage in (b"\xde\xad\xbe\xef", b"GET / HTTP/1.1\r\n\r\n", b"\x10\xff\xff\xff\xff\x0f"):
        c = RawClient.connect(node.mqtt_port, 4)
        c.send_raw(garbage)
        c.expect_closed()
    check_serving(node)
