"""The local lanes between a node's services (``services.common.lane``) across a SIGKILL
of the service at the other end: the registry's ``Connections`` and the msgstore's
``Stream`` (the listener's two hot streams), and the msgstore's and gossip's call lanes
(the registry's queue and directory calls on a persistent CONNECT). The supervisor
restarts the killed service; its callers must reopen the lanes on their own, report the
break as ``rpc.failed``, and lose nothing a publisher was told is stored."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

from services.common.framed import HELLO
from tests.support.clients import Client, connect_until_accepted
from tests.support.node import Node, make_node, wait_for


def _pid(node: Node, service: str) -> int:
    status = node.get_json("/status")
    return int(status["children"][service]["pid"])  # type: ignore[index]


def _kill_and_wait(node: Node, service: str) -> None:
    old = _pid(node, service)
    os.kill(old, signal.SIGKILL)

    def back() -> bool:
        try:
            return _pid(node, service) != old and node.health() == 200
        except (OSError, KeyError, ValueError):
            return False

    wait_for(back, 60, 0.1, f"{service} restarted and the node healthy")


def _queue_one(node: Node, client_id: str, topic: str, payload: bytes) -> None:
    """A persistent session of ``client_id`` subscribed to ``topic`` and gone offline, and
    one QoS 1 message for it, acknowledged: queued in the msgstore."""
    sub = Client(client_id, node.mqtt_port, clean=False, reconnect=False).connect()
    sub.subscribe(topic, 1)
    sub.disconnect()
    pub = Client(f"{client_id}-pub", node.mqtt_port, reconnect=False).connect()
    pub.publish(topic, payload, qos=1, tag=1)
    wait_for(lambda: pub.acked == [1], 15, what="the PUBACK")
    pub.disconnect()


def _connect_until_accepted(node: Node, client_id: str) -> Client:
    return connect_until_accepted(
        lambda: Client(client_id, node.mqtt_port, clean=False, reconnect=False), 30, 0.2
    )


def _publish_until_stored(node: Node, topic: str) -> bytes:
    """Publish QoS 1 (MQTT 5, so a write the store could not take is answered 0x80)
    until one is acknowledged; its payload."""
    pub = Client("lane-pub2", node.mqtt_port, version=5, reconnect=False).connect()
    try:
        for attempt in range(60):
            pub.publish(topic, f"after-{attempt}".encode(), qos=1, tag=attempt)
            wait_for(lambda: pub.unanswered() == 0, 15, what=f"an answer to publish {attempt}")
            if attempt in pub.acked:
                return f"after-{attempt}".encode()
            time.sleep(0.5)
        raise AssertionError(f"no publish stored in 60 tries: refused {pub.refused}")
    finally:
        pub.disconnect()


def test_the_listener_reopens_its_lanes_after_their_service_is_killed(fresh_node: Node) -> None:
    node = fresh_node
    node.start()
    run = node.data_dir / "run"
    lanes = ("registry.conn.sock", "msgstore.stream.sock", "msgstore.call.sock", "gossip.call.sock")
    assert all((run / lane).exists() for lane in lanes), sorted(p.name for p in run.iterdir())

    _queue_one(node, "lane-sub", "lane/t", b"before")

    _kill_and_wait(node, "msgstore")
    # The store stream broke with the process; writes go over a new one once it is back.
    stored = _publish_until_stored(node, "lane/t")

    _kill_and_wait(node, "registry")
    # A CONNECT needs the registry: it succeeds over the reopened Connections lane.
    # Until the listener's lane is back (its backoff is at most 1 s), a CONNECT is
    # refused with "server unavailable", as a client would see it; it tries again.
    sub = _connect_until_accepted(node, "lane-sub")
    assert sub.session_present
    got = [m.payload for m in sub.drain(2.0)]
    assert got and got[0] == b"before" and stored in got, got
    sub.disconnect()

    node.settle_logs()
    failed = {(e["target"], e["method"]) for e in node.events("rpc.failed")}
    assert ("msgstore", "Stream") in failed and ("registry", "Connections") in failed, failed


def test_a_broken_frame_on_the_store_lane_ends_that_stream_only(fresh_node: Node) -> None:
    node = fresh_node
    node.start()
    path = str(node.data_dir / "run" / "msgstore.stream.sock")
    for data in (b"\xff\xff\xff\xff", b"\x00\x00\x01\x00cut short"):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(15)
            sock.connect(path)
            assert sock.recv(4) == HELLO
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(100) == b""  # the msgstore closed it, answering nothing
    # The listener's own stream is untouched: a persistent session's write is stored.
    _queue_one(node, "lane-keep", "keep/t", b"kept")
    node.settle_logs()
    reasons = [str(e["reason"]) for e in node.events("rpc.failed") if e["target"] == "msgstore"]
    assert any("over" in r for r in reasons) and any("inside a frame" in r for r in reasons)


def test_with_lanes_off_every_call_goes_over_grpc(tmp_path: Path) -> None:
    """``service_lanes = off``: no lane socket is made, and a persistent session still
    connects, queues, resumes and gets what it missed."""
    node = make_node(tmp_path / "node", service_lanes="off")
    node.start()
    try:
        run = node.data_dir / "run"
        assert not [p.name for p in run.iterdir() if p.name.count(".") > 1]
        _queue_one(node, "nolane-sub", "nolane/t", b"queued")
        sub = Client("nolane-sub", node.mqtt_port, clean=False, reconnect=False).connect()
        assert sub.session_present
        assert [m.payload for m in sub.take(1)] == [b"queued"]
        sub.disconnect()
    finally:
        assert node.stop() == 0, node.output()
