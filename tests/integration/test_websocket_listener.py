"""MQTT over WebSocket on a real node (``listener.ws.*``, ``listener.wss.*``): paho and
MQTT.js (Node) over ws and wss, every protocol version, the refusals of bad upgrades, and
the PROXY header before the HTTP request."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    RejectConnection,
    Request,
)

from tests.support.certs import Certs, make_certs
from tests.support.clients import Client, connect_frame
from tests.support.node import Node, free_port, make_node, wait_for

pytestmark = pytest.mark.integration
JS = Path(__file__).resolve().parents[1] / "js"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Node]:
    ports = {"ws": free_port(), "wss": free_port(), "proxied": free_port()}
    n = make_node(
        tmp_path_factory.mktemp("ws"),
        **{
            "listener.ws.default": f"127.0.0.1:{ports['ws']}",
            "listener.ws.proxied": f"127.0.0.1:{ports['proxied']}",
            "listener.ws.proxied.proxy_protocol": "on",
            "listener.wss.default": f"127.0.0.1:{ports['wss']}",
            "listener.wss.certfile": str(certs.server.cert),
            "listener.wss.keyfile": str(certs.server.key),
        },
    )
    n.ports.update(ports)
    n.start()
    yield n
    assert n.stop() == 0, n.output()


def connected(node: Node, client_id: str) -> dict[str, object] | None:
    for event in node.events("client.connected"):
        if event.get("client_id") == client_id:
            return event
    return None


class RawWs:
    """A WebSocket client over a plain socket, frame by frame (``wsproto``)."""

    def __init__(self, port: int, preface: bytes = b"") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.local_port = self.sock.getsockname()[1]
        if preface:
            self.sock.sendall(preface)
        self.ws = WSConnection(ConnectionType.CLIENT)

    def upgrade(self, target: str = "/mqtt", subprotocols: tuple[str, ...] = ("mqtt",)) -> object:
        req = Request(host="127.0.0.1", target=target, subprotocols=list(subprotocols))
        self.sock.sendall(self.ws.send(req))
        return self.next_event()

    def next_event(self) -> object:
        while True:
            for event in self.ws.events():
                return event
            data = self.sock.recv(65536)
            if not data:
                return None
            self.ws.receive_data(data)

    def send(self, *messages: bytes) -> None:
        for m in messages:
            self.sock.sendall(self.ws.send(Message(data=m)))

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("version", [3, 4, 5])
def test_paho_over_ws_with_every_protocol_version(node: Node, version: int) -> None:
    sub = Client(f"ws-sub-{version}", node.ports["ws"], version, websocket=True).connect()
    pub = Client(f"ws-pub-{version}", node.ports["ws"], version, websocket=True).connect()
    try:
        sub.subscribe(f"ws/{version}", qos=1)
        for qos in (0, 1, 2):
            pub.publish(f"ws/{version}", f"q{qos}".encode(), qos=qos)
        assert sorted(m.payload for m in sub.take(3)) == [b"q0", b"q1", b"q2"]
    finally:
        pub.disconnect()
        sub.disconnect()


def test_paho_over_wss(node: Node, certs: Certs) -> None:
    tls = (str(certs.ca), None, None)
    sub = Client("wss-sub", node.ports["wss"], 5, tls=tls, websocket=True).connect()
    tcp = Client("wss-tcp-pub", node.mqtt_port, 4).connect()
    try:
        sub.subscribe("wss/t", qos=1)
        tcp.publish("wss/t", b"from tcp to wss", qos=1)
        assert [m.payload for m in sub.take(1)] == [b"from tcp to wss"]
    finally:
        tcp.disconnect()
        sub.disconnect()


@pytest.mark.parametrize(("scheme", "version"), [("ws", 4), ("ws", 5), ("wss", 5)])
def test_mqttjs_over_websocket(node: Node, certs: Certs, scheme: str, version: int) -> None:
    assert shutil.which("node"), "node is required (installed by the project's CI setup)"
    assert (JS / "node_modules" / "mqtt").is_dir(), "run: npm ci --prefix tests/js"
    url = f"{scheme}://{'localhost' if scheme == 'wss' else '127.0.0.1'}:{node.ports[scheme]}/mqtt"
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": str(certs.ca)}
    out = subprocess.run(
        ["node", str(JS / "pubsub.mjs"), url, str(version)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])["got"]
    assert got[0]["payload"] == "R" and got[0]["retain"] is True
    live = [(m["payload"], m["qos"], m["retain"]) for m in got[1:]]
    assert live == [("q0", 0, False), ("q1", 1, False), ("q2", 2, False)]


def test_packets_split_across_messages_and_several_in_one(node: Node) -> None:
    ws = RawWs(node.ports["ws"])
    try:
        accepted = ws.upgrade()
        assert isinstance(accepted, AcceptConnection) and accepted.subprotocol == "mqtt"
        packet = connect_frame("ws-split")
        ws.send(packet[:5], packet[5:])  # the CONNECT in two messages
        got = ws.next_event()
        assert isinstance(got, BytesMessage) and bytes(got.data) == b"\x20\x02\x00\x00"
        ws.send(b"\xc0\x00\xc0\x00")  # two PINGREQs in one message
        answers = b""
        while len(answers) < 4:
            event = ws.next_event()
            assert isinstance(event, BytesMessage), event
            answers += bytes(event.data)
        assert answers == b"\xd0\x00\xd0\x00"
    finally:
        ws.close()


@pytest.mark.parametrize(
    ("target", "subprotocols", "status", "reason"),
    [
        ("/other", ("mqtt",), 404, "path"),
        ("/mqtt", ("chat",), 400, "subprotocols chat"),
    ],
)
def test_a_bad_upgrade_is_answered_with_an_http_error_and_logged(
    node: Node, target: str, subprotocols: tuple[str, ...], status: int, reason: str
) -> None:
    ws = RawWs(node.ports["ws"])
    try:
        answer = ws.upgrade(target, subprotocols)
        assert isinstance(answer, RejectConnection) and answer.status_code == status
    finally:
        ws.close()

    def logged() -> list[str]:
        return [
            str(e["reason"])
            for e in node.events("client.rejected")
            if str(e.get("peer", "")).endswith(f":{ws.local_port}")
        ]

    wait_for(logged, 10, what="client.rejected for the upgrade")
    assert reason in logged()[0]


def test_plain_http_on_the_ws_port_is_refused(node: Node) -> None:
    with socket.create_connection(("127.0.0.1", node.ports["ws"]), timeout=10) as s:
        s.sendall(b"GET /mqtt HTTP/1.1\r\nHost: x\r\n\r\n")  # no upgrade headers
        assert s.recv(64).startswith(b"HTTP/1.1 4")
    Client("ws-after-http", node.ports["ws"], 4, websocket=True).connect().disconnect()


def test_a_text_message_closes_the_connection(node: Node) -> None:
    ws = RawWs(node.ports["ws"])
    try:
        ws.upgrade()
        ws.sock.sendall(ws.ws.send(Message(data="not binary")))
        event = ws.next_event()
        assert isinstance(event, CloseConnection) and event.code == 1003
    finally:
        ws.close()


def test_the_proxy_header_before_the_request_names_the_client(node: Node) -> None:
    header = b"PROXY TCP4 198.51.100.4 10.0.0.1 53000 8080\r\n"
    ws = RawWs(node.ports["proxied"], preface=header)
    try:
        assert isinstance(ws.upgrade(), AcceptConnection)
        ws.send(connect_frame("ws-proxied"))
        got = ws.next_event()
        assert isinstance(got, BytesMessage) and bytes(got.data) == b"\x20\x02\x00\x00"
    finally:
        ws.close()
    wait_for(lambda: connected(node, "ws-proxied"), 10, what="client.connected")
    event = connected(node, "ws-proxied")
    assert event is not None and event.get("peer") == "198.51.100.4:53000"


def test_listener_show_lists_every_transport(node: Node) -> None:
    rows = node.get_json("/api/v1/listener/show")
    assert isinstance(rows, list)
    got = {(r["type"], r["name"], r["port"]) for r in rows}
    assert ("mqtt", "default", node.mqtt_port) in got
    assert ("mqttws", "default", node.ports["ws"]) in got
    assert ("mqttws", "proxied", node.ports["proxied"]) in got
    assert ("mqttwss", "default", node.ports["wss"]) in got
