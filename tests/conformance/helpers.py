"""Byte builders for packets the codec refuses to encode, and checks on a running node.

Theory of operation: the codec's ``encode`` only writes valid packets, so tests of the
broker's error handling build their frames here, byte by byte, with the spec's layout
spelled out (``frame(0x30, string(b"a/b") + b"payload")`` is a QoS 0 PUBLISH). The other
half are observations of a node from the outside: ``wait_event`` polls the JSON event
logs, ``check_serving`` proves the broker still routes messages after a test abused it,
and ``rss_kib`` reads a process's resident memory from ``/proc``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from services.listener.mqtt.types import Connack, Disconnect, Properties, Puback, Publish
from tests.conformance.client import RawClient, connected
from tests.support.node import Node, make_node

__all__ = [
    "ALIAS_MAX",
    "PACKET_MAX",
    "RECEIVE_MAX",
    "check_serving",
    "connect_bytes",
    "expect_disconnect",
    "frame",
    "prop",
    "publish_bytes",
    "publishes",
    "rss_kib",
    "started_node",
    "string",
    "u16",
    "u32",
    "unique",
    "v5_client",
    "varint",
    "wait_event",
]

_ids = itertools.count(1)

# Limits of the ``mqtt5_node`` fixture (conftest), small enough for tests to hit.
RECEIVE_MAX = 5
ALIAS_MAX = 4
PACKET_MAX = 4096


def started_node(base: Path, **settings: str) -> Iterator[Node]:
    """Start a node with ``settings``; stop it afterwards, and fail if it did not exit 0.
    Fixtures ``yield from`` it."""
    node = make_node(base, **settings)
    node.start()
    try:
        yield node
    finally:
        code = node.stop()
        assert code == 0, node.output()


def unique(prefix: str = "c") -> str:
    """A short id unique within this test process (client ids and topic roots)."""
    return f"{prefix}{next(_ids):04d}"


def varint(value: int) -> bytes:
    """Variable Byte Integer, minimally encoded [MQTT-1.5.5-1]."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def u16(value: int) -> bytes:
    return value.to_bytes(2, "big")


def u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


def string(raw: bytes | str) -> bytes:
    """A length-prefixed string; ``bytes`` are written as they are, valid UTF-8 or not."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    return u16(len(data)) + data


def frame(first: int, body: bytes) -> bytes:
    """Fixed header byte, Remaining Length of ``body``, ``body``."""
    return bytes((first,)) + varint(len(body)) + body


def prop(identifier: int, value: bytes) -> bytes:
    """One MQTT 5 property: identifier byte, already encoded value."""
    return bytes((identifier,)) + value


def publish_bytes(
    topic: bytes | str,
    payload: bytes = b"x",
    *,
    version: int = 4,
    qos: int = 0,
    flags: int | None = None,
    packet_id: int | None = None,
    props: bytes = b"",
) -> bytes:
    """A PUBLISH with any topic bytes, flags and (v5) raw property block content."""
    first = 0x30 | (qos << 1) if flags is None else 0x30 | flags
    pid = b""
    if packet_id is not None:
        pid = u16(packet_id)
    elif qos:
        pid = u16(1)
    head = string(topic) + pid
    if version == 5:
        head += varint(len(props)) + props
    return frame(first, head + payload)


def connect_bytes(
    client_id: str,
    *,
    version: int = 4,
    flags: int = 0x02,
    keepalive: int = 60,
    props: bytes = b"",
    protocol_name: str | None = None,
) -> bytes:
    """A CONNECT with raw connect flags (no will, user name or password fields)."""
    name = protocol_name or ("MQIsdp" if version == 3 else "MQTT")
    body = string(name) + bytes((version, flags)) + u16(keepalive)
    if version == 5:
        body += varint(len(props)) + props
    return frame(0x10, body + string(client_id))


def wait_event(
    node: Node,
    name: str,
    match: Callable[[dict[str, object]], bool],
    timeout: float = 10.0,
) -> dict[str, object]:
    """The first ``name`` event of the node's logs for which ``match`` holds; fails after
    ``timeout`` seconds (logs are written asynchronously by each service)."""
    deadline = time.monotonic() + timeout
    while True:
        for event in node.events(name):
            if match(event):
                return event
        if time.monotonic() > deadline:
            raise AssertionError(f"no {name} event matched within {timeout}s")
        time.sleep(0.1)


def check_serving(node: Node, version: int = 4) -> None:
    """The broker still accepts clients and routes a message between them: the test
    before did not make it crash, hang or stop accepting."""
    topic = unique("alive") + "/t"
    sub, _ = connected(node.mqtt_port, unique("alive"), version)
    pub, _ = connected(node.mqtt_port, unique("alive"), version)
    sub.subscribe(topic, qos=1)
    pub.publish(topic, b"still here", qos=1)
    got = sub.receive()
    assert (got.topic, got.payload) == (topic, b"still here")
    sub.disconnect()
    pub.disconnect()


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB (``VmRSS`` of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def v5_client(node: Node, **props: object) -> tuple[RawClient, Connack]:
    """A connected MQTT 5 client with a fresh id and the given CONNECT properties."""
    return connected(node.mqtt_port, unique(), 5, properties=Properties(**props))  # type: ignore[arg-type]


def publishes(client: RawClient, timeout: float = 1.0) -> list[Publish]:
    """Every PUBLISH arriving within ``timeout``, each QoS 1 one acknowledged at once."""
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


def expect_disconnect(client: RawClient, *codes: int) -> None:
    """A v5 DISCONNECT with one of ``codes``, then the close."""
    reason = client.expect(Disconnect).reason_code
    assert reason in codes, f"DISCONNECT 0x{reason:02X}, expected one of {codes}"
    client.expect_closed()
