"""``ternmq-admin listener stop|restart|start|delete``, as ``vmq-admin listener``, on a
node with two listener processes (each must follow): a listener started at run time
takes clients, a stopped one refuses new connections and keeps its clients unless
``-k`` ends them (MQTT 5: DISCONNECT 0x98), a restarted one takes them again, and a
port already in use is refused with the reason."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.support.admin import admin
from tests.support.clients import Client, connect_frame
from tests.support.node import Node, free_port, make_node, wait_for

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = make_node(tmp_path_factory.mktemp("listeners"), **{"listener.processes": "2"})
    n.start()
    yield n
    assert n.stop() == 0, n.output()


def refused(port: int) -> bool:
    """Whether nothing accepts on ``port`` (every listener process checked: with
    SO_REUSEPORT each connection lands on one of them)."""
    for _ in range(8):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except ConnectionRefusedError:
            continue
        return False
    return True


def shown(node: Node, port: int) -> str | None:
    rows = node.get_json("/api/v1/listener/show")
    assert isinstance(rows, list)
    states = [r["status"] for r in rows if r["port"] == port]
    return states[0] if states else None


def test_a_listener_started_stopped_restarted_and_deleted_at_run_time(node: Node) -> None:
    port = free_port()
    done = admin(node.http_port, "listener", "start", "address=127.0.0.1", f"port={port}")
    assert done.returncode == 0 and "Done" in done.stdout, done.stderr
    assert shown(node, port) == "running"
    clients = [Client(f"rt-{i}", port, version=5).connect() for i in range(4)]
    try:
        assert (
            admin(
                node.http_port, "listener", "stop", "address=127.0.0.1", f"port={port}"
            ).returncode
            == 0
        )
        assert shown(node, port) == "stopped"
        assert refused(port)
        for c in clients:  # a stop keeps the connections it had accepted
            c.subscribe(f"rt/{c.client_id}", 1)
        done = admin(node.http_port, "listener", "stop", "address=127.0.0.1", f"port={port}", "-k")
        assert done.returncode == 0, done.stderr
        for c in clients:
            assert c.disconnected.wait(15), c.client_id
            assert getattr(c.disconnect_reason, "value", None) == 0x98, c.disconnect_reason
    finally:
        for c in clients:
            c.paho.loop_stop()
    ended = [e for e in node.events("listener.changed") if e.get("sessions")]
    assert sum(int(e["sessions"]) for e in ended) == 4  # each process ended its own
    assert "in use" not in str(ended)
    assert (
        admin(node.http_port, "listener", "restart", "address=127.0.0.1", f"port={port}").returncode
        == 0
    )
    Client("rt-again", port).connect().disconnect()
    busy = admin(node.http_port, "listener", "delete", "address=127.0.0.1", f"port={port}")
    assert busy.returncode == 1 and "stop it first" in busy.stderr
    assert (
        admin(node.http_port, "listener", "stop", "address=127.0.0.1", f"port={port}").returncode
        == 0
    )
    assert (
        admin(node.http_port, "listener", "delete", "address=127.0.0.1", f"port={port}").returncode
        == 0
    )
    assert shown(node, port) is None and refused(port)


def _unread(port: int) -> list[int]:
    """The bytes waiting in each server-side socket of ``port`` (``ss``): 0 once a
    listener has read what its client sent."""
    out = subprocess.run(
        ["ss", "-tnH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [int(line.split()[0]) for line in out.splitlines() if line.strip()]


def _online(node: Node, prefix: str) -> list[object]:
    rows = node.get_json("/api/v1/session/show")
    assert isinstance(rows, list)
    return [r for r in rows if str(r.get("client_id", "")).startswith(prefix) and r.get("online")]


def test_a_kill_ends_the_connections_still_waiting_for_their_connack(node: Node) -> None:
    """``-k`` ends every connection the listener accepted, one whose CONNECT the registry
    has not answered yet included (the registry is paused with SIGSTOP): it closes
    without a CONNACK, and once the registry answers, none of them is left online.
    Before, only registered sessions were ended, and these got their CONNACK later."""
    port = free_port()
    done = admin(node.http_port, "listener", "start", "address=127.0.0.1", f"port={port}")
    assert done.returncode == 0, done.stderr
    status = node.get_json("/status")
    registry = int(status["children"]["registry"]["pid"])  # type: ignore[index]
    socks: list[socket.socket] = []
    os.kill(registry, signal.SIGSTOP)
    try:
        for i in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(connect_frame(f"waiting-{i}"))
            socks.append(s)
        wait_for(
            lambda: _unread(port) == [0, 0, 0, 0], 15, what="the listeners to read each CONNECT"
        )
        done = admin(node.http_port, "listener", "stop", "address=127.0.0.1", f"port={port}", "-k")
        assert done.returncode == 0, done.stderr
        for s in socks:
            s.settimeout(15)
            try:
                got = s.recv(4)
            except ConnectionResetError:
                got = b""
            assert got == b"", f"a CONNACK or more on a killed connection: {got!r}"
    finally:
        os.kill(registry, signal.SIGCONT)
        for s in socks:
            s.close()
    wait_for(lambda: not _online(node, "waiting-"), 30, what="no waiting-* session online")

    def ended() -> int:  # each process counts what it ended
        changed = node.events("listener.changed")
        return sum(
            int(str(e.get("sessions") or 0))
            for e in changed
            if str(e.get("address", "")).endswith(f":{port}")
        )

    wait_for(lambda: ended() == 4, 15, what="listener.changed counting the 4 connections")
    admin(node.http_port, "listener", "delete", "address=127.0.0.1", f"port={port}")
    assert shown(node, port) is None


def test_the_configured_listener_stops_and_restarts(node: Node) -> None:
    c = Client("cfg-online", node.mqtt_port).connect()
    try:
        stop = admin(
            node.http_port, "listener", "stop", "address=127.0.0.1", f"port={node.mqtt_port}"
        )
        assert stop.returncode == 0, stop.stderr
        assert refused(node.mqtt_port)
        c.publish("cfg/t", b"still here", qos=1, tag=1)  # its connection stays
        wait_for(lambda: bool(c.acked), 10, what="the PUBACK on a stopped listener")
        table = admin(node.http_port, "listener", "show").stdout
        assert "stopped" in table and str(node.mqtt_port) in table
    finally:
        admin(node.http_port, "listener", "restart", "address=127.0.0.1", f"port={node.mqtt_port}")
        c.disconnect()
    Client("cfg-again", node.mqtt_port).connect().disconnect()


def test_a_port_in_use_is_refused_with_the_reason(node: Node) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        done = admin(node.http_port, "listener", "start", "address=127.0.0.1", f"port={port}")
        assert done.returncode == 1 and f"not listening on 127.0.0.1:{port}" in done.stderr
        assert shown(node, port) == "failed"
        failed = [e for e in node.events("listener.changed") if e.get("state") == "failed"]
        wait_for(
            lambda: any(
                str(port) in str(e.get("address"))
                for e in node.events("listener.changed")
                if e.get("state") == "failed"
            ),
            10,
            what=f"listener.changed failed: {failed}",
        )
    finally:
        holder.close()
        admin(node.http_port, "listener", "stop", "address=127.0.0.1", f"port={port}")
        admin(node.http_port, "listener", "delete", "address=127.0.0.1", f"port={port}")
    usage = admin(node.http_port, "listener", "stop", "port=1")
    assert usage.returncode == 2 and "address=IP port=PORT" in usage.stderr


def test_a_listener_started_after_a_set_takes_the_settings_of_that_moment(node: Node) -> None:
    port = free_port()
    assert admin(node.http_port, "set", "max_client_id_size=6").returncode == 0
    try:
        done = admin(node.http_port, "listener", "start", "address=127.0.0.1", f"port={port}")
        assert done.returncode == 0, done.stderr
        for _ in range(4):  # both listener processes
            long = Client("seven77", port)
            long.connect(expect_ok=False)
            assert long.reason_code.is_failure
            long.disconnect()
        Client("six666", port).connect().disconnect()
    finally:
        assert admin(node.http_port, "set", "max_client_id_size=100").returncode == 0
        admin(node.http_port, "listener", "stop", "address=127.0.0.1", f"port={port}")
        admin(node.http_port, "listener", "delete", "address=127.0.0.1", f"port={port}")
