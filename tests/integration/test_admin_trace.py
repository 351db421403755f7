"""``ternmq-admin trace client client-id=ID`` on a running node, as VerneMQ's ``vmq-admin
trace client``: a live transcript of what one client sends (MQTT RECV) and receives
(MQTT SEND), whether it connects after the trace started or was online before; its
password never shown; the trace ends after its duration, and a trace whose reader went
away stops in the listener too."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.admin import admin
from tests.support.clients import Client
from tests.support.node import Node, wait_for

pytestmark = [pytest.mark.integration]

BIN = Path(sys.executable).parent


class TraceReader:
    """``ternmq-admin trace client`` as a process; its lines gathered as they come."""

    def __init__(self, node: Node, client_id: str, *opts: str) -> None:
        self.proc = subprocess.Popen(
            [
                str(BIN / "ternmq-admin"),
                "--node",
                f"127.0.0.1:{node.http_port}",
                "trace",
                "client",
                f"client-id={client_id}",
                *opts,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 15) -> None:
        wait_for(lambda: needle in self.text(), timeout, what=f"{needle!r} in\n{self.text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)


def traces_running(node: Node) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/status", timeout=5) as r:
        return int(json.loads(r.read())["services"]["listener"].get("traces", -1))


def test_a_client_that_connects_during_the_trace_is_traced_in_full(node: Node) -> None:
    reader = TraceReader(node, "traced-1", "--duration", "20")
    try:
        reader.wait_for('Tracing client "traced-1"')
        wait_for(lambda: traces_running(node) == 1, 10, what="the listener's trace")
        c = Client("traced-1", node.mqtt_port, username="alice", password="s3cret-pw")
        c.connect()
        c.subscribe("trace/t", 1)
        c.publish("trace/t", b"hello trace", qos=1)
        assert [m.payload for m in c.take(1)] == [b"hello trace"]
        c.disconnect()
        reader.wait_for('MQTT RECV: CID: "traced-1" DISCONNECT')
        text = reader.text()
        for needle in (
            "New connection <127.0.0.1:",
            'MQTT RECV: CID: "traced-1" CONNECT(c: traced-1, v: 4, u: alice, p: ******',
            'MQTT SEND: CID: "traced-1" CONNACK(sp: 0, rc: 0)',
            'MQTT RECV: CID: "traced-1" SUBSCRIBE(m1) with topics:\n    q:1, t: "trace/t"',
            'MQTT SEND: CID: "traced-1" SUBACK(m1, qt[1])',
            'MQTT RECV: CID: "traced-1" PUBLISH(d0, q1, r0, m2, "trace/t") with payload:\n'
            "    hello trace",
            'MQTT SEND: CID: "traced-1" PUBACK(m2)',
            'MQTT SEND: CID: "traced-1" PUBLISH(d0, q1, r0, m1, "trace/t")',
            'MQTT RECV: CID: "traced-1" PUBACK(m1)',
        ):
            assert needle in text, f"{needle!r} not in\n{text}"
        assert "s3cret-pw" not in text
    finally:
        reader.stop()


def test_an_online_client_is_traced_from_its_next_packet_until_the_duration_ends(
    node: Node,
) -> None:
    c = Client("traced-2", node.mqtt_port).connect()
    other = Client("not-traced", node.mqtt_port).connect()
    try:
        started = time.monotonic()
        reader = TraceReader(node, "traced-2", "--duration", "4")
        reader.wait_for("Connection <127.0.0.1:")
        c.subscribe("trace/two", 0)
        other.subscribe("trace/other", 0)
        reader.wait_for('MQTT SEND: CID: "traced-2" SUBACK(m1, qt[0])')
        reader.proc.wait(30)  # ends by itself after its duration
        assert time.monotonic() - started >= 3.5
        assert reader.lines[-1] == 'Trace session for client "traced-2" stopped'
        assert "not-traced" not in reader.text()
        wait_for(lambda: traces_running(node) == 0, 10, what="the trace's end in the listener")
    finally:
        c.disconnect()
        other.disconnect()


def test_a_trace_whose_reader_goes_away_stops_in_the_listener(node: Node) -> None:
    reader = TraceReader(node, "traced-3")  # no duration: until interrupted
    try:
        reader.wait_for('Tracing client "traced-3"')
        wait_for(lambda: traces_running(node) == 1, 10, what="the listener's trace")
    finally:
        reader.stop()
    wait_for(lambda: traces_running(node) == 0, 15, what="the trace's end in the listener")


def test_a_trace_without_a_client_id_is_a_usage_error(node: Node) -> None:
    done = admin(node.http_port, "trace", "client")
    assert done.returncode == 2 and "client-id=ID" in done.stderr


def test_bad_trace_options_are_refused_with_the_reason(node: Node) -> None:
    done = admin(node.http_port, "trace", "client", "client-id=x", "--rate-max", "0")
    assert done.returncode == 1 and "bad trace option" in done.stderr, done.stderr
