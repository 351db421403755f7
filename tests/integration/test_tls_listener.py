"""TLS listeners on a real node (``listener.ssl.*``): certificates the test makes, paho and
the mosquitto clients over TLS, refusals logged as ``client.rejected``, PROXY before TLS,
and start-up stopped by a bad file."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.certs import Certs, Issued, make_certs
from tests.support.clients import Client, connect_frame
from tests.support.node import TERNMQ, Node, free_port, make_node, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[Node]:
    """Five TLS listeners: ``open`` (server certificate only), ``mutual`` (client
    certificates required, CN as username, CRL), ``proxied`` (PROXY header first), and
    ``hasty`` and ``hasty_proxied``, which allow a handshake one second."""
    ports = {name: free_port() for name in ("open", "mutual", "proxied", "hasty", "hasty_proxied")}
    n = make_node(
        tmp_path_factory.mktemp("tls"),
        **{
            "listener.ssl.certfile": str(certs.server.cert),
            "listener.ssl.keyfile": str(certs.server.key),
            "listener.ssl.cafile": str(certs.ca),
            "listener.ssl.open": f"127.0.0.1:{ports['open']}",
            "listener.ssl.mutual": f"127.0.0.1:{ports['mutual']}",
            "listener.ssl.mutual.require_certificate": "on",
            "listener.ssl.mutual.use_identity_as_username": "on",
            "listener.ssl.mutual.crlfile": str(certs.crl),
            "listener.ssl.mutual.tls_version": "tlsv1.3",
            "listener.ssl.proxied": f"127.0.0.1:{ports['proxied']}",
            "listener.ssl.proxied.proxy_protocol": "on",
            "listener.ssl.hasty": f"127.0.0.1:{ports['hasty']}",
            "listener.ssl.hasty.handshake_timeout": "1s",
            "listener.ssl.hasty_proxied": f"127.0.0.1:{ports['hasty_proxied']}",
            "listener.ssl.hasty_proxied.handshake_timeout": "1s",
            "listener.ssl.hasty_proxied.proxy_protocol": "on",
        },
    )
    n.ports.update(ports)
    n.start()
    yield n
    assert n.stop() == 0, n.output()


def rejected(node: Node, peer_port: int | None = None) -> list[str]:
    return [
        str(e["reason"])
        for e in node.events("client.rejected")
        if peer_port is None or str(e.get("peer", "")).endswith(f":{peer_port}")
    ]


def connected(node: Node, client_id: str) -> dict[str, object] | None:
    for event in node.events("client.connected"):
        if event.get("client_id") == client_id:
            return event
    return None


def mosquitto_pub(node: Node, certs: Certs, client: Issued, client_id: str) -> int:
    args = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(node.ports["mutual"])]
    args += ["--cafile", str(certs.ca), "--cert", str(client.cert), "--key", str(client.key)]
    args += ["-i", client_id, "-t", "tls/mutual", "-m", "over mutual tls", "-q", "1"]
    return subprocess.run(args, capture_output=True, timeout=30).returncode


@pytest.mark.parametrize("version", [3, 4, 5])
def test_paho_publishes_and_receives_over_tls_with_every_protocol_version(
    node: Node, certs: Certs, version: int
) -> None:
    tls = (str(certs.ca), None, None)
    sub = Client(f"tls-sub-{version}", node.ports["open"], version, tls=tls).connect()
    pub = Client(f"tls-pub-{version}", node.ports["open"], version, tls=tls).connect()
    try:
        sub.subscribe(f"tls/{version}", qos=1)
        pub.publish(f"tls/{version}", b"secret", qos=1)
        got = sub.take(1)
        assert [(m.topic, m.payload) for m in got] == [(f"tls/{version}", b"secret")]
    finally:
        pub.disconnect()
        sub.disconnect()


def test_a_trusted_client_certificate_connects_and_its_cn_is_the_username(
    node: Node, certs: Certs
) -> None:
    tls = (str(certs.ca), None, None)
    sub = Client("tls-watch", node.ports["open"], 5, tls=tls).connect()
    try:
        sub.subscribe("tls/mutual", qos=1)
        assert mosquitto_pub(node, certs, certs.client, "tls-device-1") == 0
        assert [m.payload for m in sub.take(1)] == [b"over mutual tls"]
    finally:
        sub.disconnect()
    wait_for(lambda: connected(node, "tls-device-1"), 10, what="client.connected")
    event = connected(node, "tls-device-1")
    assert event is not None and event.get("username") == "device-1"


@pytest.mark.parametrize(
    ("which", "reason"),
    [
        ("other_ca_client", "unable to get local issuer certificate"),
        ("expired", "certificate has expired"),
        ("revoked", "certificate revoked"),
    ],
)
def test_an_untrusted_expired_or_revoked_certificate_is_refused_and_logged(
    node: Node, certs: Certs, which: str, reason: str
) -> None:
    before = len(rejected(node))
    assert mosquitto_pub(node, certs, getattr(certs, which), f"tls-{which}") != 0
    wait_for(lambda: len(rejected(node)) > before, 10, what="client.rejected")
    assert any(reason in r for r in rejected(node)[before:]), rejected(node)[before:]
    assert connected(node, f"tls-{which}") is None


def test_a_client_without_a_certificate_is_refused_where_one_is_required(
    node: Node, certs: Certs
) -> None:
    tls = (str(certs.ca), None, None)
    client = Client("tls-nocert", node.ports["mutual"], 4, tls=tls, reconnect=False)
    with pytest.raises((ssl.SSLError, OSError, AssertionError)):
        client.connect(timeout=5)
    client.paho.loop_stop()
    assert connected(node, "tls-nocert") is None


def test_tls_below_the_listeners_version_is_refused(node: Node, certs: Certs) -> None:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(certs.client.cert), str(certs.client.key))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # the mutual listener wants 1.3
    with (
        socket.create_connection(("127.0.0.1", node.ports["mutual"]), timeout=10) as raw,
        pytest.raises(ssl.SSLError),
    ):
        ctx.wrap_socket(raw, server_hostname="localhost")


def test_plain_mqtt_on_a_tls_port_is_refused_and_the_node_keeps_serving(
    node: Node, certs: Certs
) -> None:
    with socket.create_connection(("127.0.0.1", node.ports["open"]), timeout=10) as s:
        local = s.getsockname()[1]
        s.sendall(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")
        s.settimeout(10)
        assert s.recv(4) == b""  # closed, nothing answered
    wait_for(lambda: rejected(node, local), 10, what="client.rejected for plain MQTT")
    assert rejected(node, local)[0].startswith("tls: ")
    tls = (str(certs.ca), None, None)
    Client("tls-after-plain", node.ports["open"], 4, tls=tls).connect().disconnect()


@pytest.mark.parametrize(
    ("listener", "sent"),
    [
        ("hasty", b""),  # connects and says nothing
        ("hasty", b"\x16\x03\x01\x00\xc8\x01"),  # the start of a ClientHello, then nothing
        ("hasty_proxied", b"PROXY TCP4 203.0.113.9"),  # half a PROXY header
        ("hasty_proxied", b"PROXY TCP4 203.0.113.9 10.0.0.1 52000 8883\r\n"),  # no TLS after
    ],
)
def test_a_handshake_that_stalls_is_closed_at_the_timeout_and_logged(
    node: Node, certs: Certs, listener: str, sent: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", node.ports[listener]), timeout=10) as s:
        # the peer it is logged as: the PROXY header's source once the header is whole
        peer = 52000 if sent.endswith(b"\r\n") else s.getsockname()[1]
        if sent:
            s.sendall(sent)
        s.settimeout(10)
        # closed by the listener, well before the client's 10 s; with bytes it never read
        # (half a PROXY header) the close is a reset
        with contextlib.suppress(ConnectionResetError):
            assert s.recv(4) == b""
    wait_for(lambda: rejected(node, peer), 10, what="client.rejected for a stalled handshake")
    assert rejected(node, peer) == ["tls: handshake timed out"]
    tls = (str(certs.ca), None, None)
    Client(f"tls-after-{listener}", node.ports["hasty"], 4, tls=tls).connect().disconnect()


def test_the_proxy_header_before_the_handshake_names_the_client(node: Node, certs: Certs) -> None:
    header = b"PROXY TCP4 203.0.113.9 10.0.0.1 52000 8883\r\n"
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    with socket.create_connection(("127.0.0.1", node.ports["proxied"]), timeout=10) as raw:
        raw.sendall(header)
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(connect_frame("tls-proxied"))
            assert s.recv(4) == b"\x20\x02\x00\x00"
    wait_for(lambda: connected(node, "tls-proxied"), 10, what="client.connected")
    event = connected(node, "tls-proxied")
    assert event is not None and event.get("peer") == "203.0.113.9:52000"


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"listener.ssl.certfile": "/nonexistent/server.crt"}, "/nonexistent/server.crt"),
        ({"listener.ssl.keyfile": "CERT"}, "keyfile"),  # a certificate where the key goes
        ({"listener.ssl.require_certificate": "on", "listener.ssl.cafile": ""}, "cafile"),
    ],
)
def test_a_bad_certificate_setting_stops_start_up_naming_it(
    tmp_path: Path, certs: Certs, settings: dict[str, str], says: str
) -> None:
    conf = {
        "listener.ssl.default": f"127.0.0.1:{free_port()}",
        "listener.ssl.certfile": str(certs.server.cert),
        "listener.ssl.keyfile": str(certs.server.key),
        **settings,
    }
    conf = {k: str(certs.server.cert) if v == "CERT" else v for k, v in conf.items()}
    n = make_node(tmp_path, **conf)
    n.write_conf()
    done = subprocess.run(
        [TERNMQ, "start", "--config", str(n.conf)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    text = done.stdout + done.stderr + n.output()
    for log in (tmp_path / "log").glob("*.jsonl"):
        text += log.read_text(errors="replace")
    assert says in text, text[-3000:]
