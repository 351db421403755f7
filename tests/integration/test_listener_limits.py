"""Listener options on real sockets: ``max_connections`` and ``listener.tcp.buffer_sizes``
(on the plain TCP listeners and on the TLS ones)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import uvloop

from services.listener.config import TcpListener, TlsOptions
from services.listener.server import _start_tcp
from services.listener.tls import TlsServer, build_context
from tests.support.certs import make_certs
from tests.support.clients import Client
from tests.support.node import Node, make_node, wait_for

pytestmark = pytest.mark.integration

CONNECT_311 = bytes([0x10, 0x10]) + b"\x00\x04MQTT\x04\x02\x00\x3c" + b"\x00\x04full"


def _closed_without_connack(port: int, timeout: float = 10) -> bool:
    """Connect, send a CONNECT and see the broker close the socket without answering."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(CONNECT_311)
        except OSError:
            return True  # closed before we could even write
        try:
            return s.recv(16) == b""
        except ConnectionResetError:
            return True


def _metric(node: Node, line_start: str) -> float:
    for line in node.get_text("/metrics").splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_max_connections_closes_the_extra_connection_and_frees_a_slot(tmp_path: Path) -> None:
    node = make_node(tmp_path / "n", **{"listener.max_connections": "3"})
    node.start()
    try:
        clients = [Client(f"lim-{i}", node.mqtt_port).connect() for i in range(3)]
        assert _closed_without_connack(node.mqtt_port)
        refused = 'ternmq_connections_refused_total{reason="max_connections"'
        wait_for(lambda: _metric(node, refused) >= 1, 10, what="refused counter")

        def rejected() -> list[dict[str, object]]:
            return [
                e for e in node.events("client.rejected") if e.get("reason") == "max_connections"
            ]

        wait_for(lambda: rejected(), 10, what="client.rejected for max_connections")
        assert rejected()[0]["client_id"] == ""

        clients[0].disconnect()  # a slot frees up when a connection ends
        wait_for(lambda: _metric(node, "ternmq_connections{") == 2, 10, what="2 connections")
        late = Client("lim-late", node.mqtt_port).connect()
        late.subscribe("lim/t", qos=1)
        late.disconnect()
        for c in clients[1:]:
            c.disconnect()
    finally:
        assert node.stop() == 0, node.output()


class _Probe(asyncio.Protocol):
    """Notes an accepted socket's (SO_SNDBUF, SO_RCVBUF), then closes it."""

    def __init__(self, seen: list[tuple[int, int]]) -> None:
        self.seen = seen

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        self.seen.append(
            (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            )
        )
        transport.close()


def test_buffer_sizes_reach_accepted_sockets() -> None:
    size = 200 * 1024  # Linux reports twice what was set (bookkeeping overhead)
    seen: list[tuple[int, int]] = []

    async def main() -> None:
        listener = TcpListener("t", "127.0.0.1", 0, "", frozenset({4}), 0, size)
        server = await _start_tcp(listener, lambda: _Probe(seen), reuse_port=False)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):  # bounded: 1 s
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        await server.wait_closed()

    uvloop.run(main())
    assert seen and seen[0][0] >= 2 * size and seen[0][1] >= 2 * size


def test_buffer_sizes_reach_sockets_accepted_by_a_tls_listener(tmp_path: Path) -> None:
    """TLS listeners accept on a socket of their own (``tls.TlsServer``): the sizes
    reach what it accepts too."""
    import ssl

    size = 200 * 1024
    certs = make_certs(tmp_path / "certs")
    opts = TlsOptions(str(certs.server.cert), str(certs.server.key), str(certs.ca))
    listener = TcpListener("t", "127.0.0.1", 0, "", frozenset({4}), 0, size, tls=opts)
    seen: list[tuple[int, int]] = []

    async def main() -> None:
        server = TlsServer(
            listener,
            build_context("t", opts),
            lambda _peer, _who: _Probe(seen),
            lambda _peer, why: seen.append((-1, -1)),
            reuse_port=False,
        )
        server.start()
        client = ssl.create_default_context(cafile=str(certs.ca))
        _, writer = await asyncio.open_connection(
            "127.0.0.1", server.port, ssl=client, server_hostname="localhost"
        )
        for _ in range(200):  # bounded: 2 s
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        await server.close()

    uvloop.run(main())
    assert seen and seen[0][0] >= 2 * size and seen[0][1] >= 2 * size, seen
