"""PROXY protocol on a real node: the header's source is the client's peer; no header, no MQTT."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.clients import connect_frame
from tests.support.node import Node, make_node, wait_for
from tests.unit.test_proxy_protocol import V2_TCP6

pytestmark = pytest.mark.integration

CONNACK_OK = b"\x20\x02\x00\x00"


def exchange(port: int, *chunks: bytes) -> bytes:
    """Send ``chunks`` (a short pause between them) and return what comes back first."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for chunk in chunks:
            s.sendall(chunk)
            time.sleep(0.05)
        try:
            return s.recv(4)
        except ConnectionResetError:
            return b""


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = make_node(tmp_path_factory.mktemp("proxy"), **{"listener.tcp.proxy_protocol": "on"})
    node.start()
    yield node
    assert node.stop() == 0, node.output()


def _peer_of(node: Node, client_id: str) -> str | None:
    for event in node.events("client.connected"):
        if event.get("client_id") == client_id:
            return str(event["peer"])
    return None


def test_v1_header_names_the_client(proxied: Node) -> None:
    header = b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 1883\r\n"
    # the header split over two writes, the CONNECT right behind it
    got = exchange(proxied.mqtt_port, header[:9], header[9:] + connect_frame("px-v1"))
    assert got == CONNACK_OK
    wait_for(lambda: _peer_of(proxied, "px-v1") is not None, 10, what="client.connected")
    assert _peer_of(proxied, "px-v1") == "203.0.113.7:51000"


def test_v2_header_names_the_client(proxied: Node) -> None:
    assert exchange(proxied.mqtt_port, V2_TCP6 + connect_frame("px-v2")) == CONNACK_OK
    wait_for(lambda: _peer_of(proxied, "px-v2") is not None, 10, what="client.connected")
    assert _peer_of(proxied, "px-v2") == "2001:db8::7:51001"


def test_mqtt_without_a_header_is_closed_and_logged(proxied: Node) -> None:
    assert exchange(proxied.mqtt_port, connect_frame("px-none")) == b""

    def refused() -> list[dict[str, object]]:  # logged as any malformed stream before CONNECT
        return [
            e for e in proxied.events("client.rejected") if e.get("reason") == "no PROXY header"
        ]

    wait_for(lambda: refused(), 10, what="client.rejected for the missing header")
    assert _peer_of(proxied, "px-none") is None


def test_without_the_option_a_header_is_a_protocol_error(tmp_path: Path) -> None:
    node = make_node(tmp_path / "plain")
    node.start()
    try:
        header = b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 1883\r\n"
        assert exchange(node.mqtt_port, header + connect_frame("px-plain")) == b""
        assert exchange(node.mqtt_port, connect_frame("px-plain2")) == CONNACK_OK
    finally:
        assert node.stop() == 0, node.output()
