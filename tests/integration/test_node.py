"""A whole node as an operator meets it: start, health, metrics, admin, stop, bad config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from services.common.events import unknown_fields
from tests.support.clients import Client, mosquitto_pub
from tests.support.node import TERNMQ, VENV_BIN, Node, complete_lines, free_port, wait_for

pytestmark = pytest.mark.integration


def test_health_status_and_metrics(node: Node) -> None:
    assert node.health() == 200
    status = node.get_json("/status")
    assert isinstance(status, dict)
    assert status["ready"] is True
    assert set(status["children"]) == {"listener", "registry", "gossip", "msgstore"}
    pids = {c["pid"] for c in status["children"].values()}
    assert len(pids) == 4, "each service is its own process"
    c = Client("metrics-c", node.mqtt_port).connect()
    c.subscribe("m/t", 1)
    c.publish("m/t", b"x", qos=1)
    c.take(1)
    c.disconnect()
    text = node.get_text("/metrics")
    for name in (
        "ternmq_connections",
        "ternmq_packets_received_total",
        "ternmq_messages_published_total",
        "ternmq_messages_delivered_total",
        "ternmq_msgstore_fsync_seconds_sum",
        "ternmq_service_up",
    ):
        assert f"# TYPE {name} " in text, name
    assert 'ternmq_packets_received_total{service="listener",type="CONNECT"}' in text


def test_admin_cli_tables_and_json(node: Node) -> None:
    c = Client("admin-c", node.mqtt_port, clean=False).connect()
    c.subscribe("adm/#", 1)
    mosquitto_pub(node.mqtt_port, "adm/r", "kept", 1, "-r")
    admin = [str(VENV_BIN / "ternmq-admin"), "--node", f"127.0.0.1:{node.http_port}"]

    def run(*args: str) -> str:
        out = subprocess.run([*admin, *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout

    sessions = json.loads(run("--json", "session", "show"))
    mine = [s for s in sessions if s["client_id"] == "admin-c"]
    assert mine and mine[0]["online"] is True and mine[0]["persistent"] is True
    table = run("session", "show", "--client_id=admin-c")
    assert table.startswith("+") and "| admin-c " in table
    retained = json.loads(run("--json", "retain", "show", "--topic", "adm/#", "--payload"))
    assert [(r["topic"], r["payload"]) for r in retained] == [("adm/r", "kept")]
    assert "| mqtt " in run("listener", "show")
    assert "ternmq_connections" in run("metrics", "show")
    assert json.loads(run("--json", "show", "max_inflight_messages")) == {
        "max_inflight_messages": 20
    }
    c.disconnect()


def test_admin_cli_unreachable_node_exit_status() -> None:
    out = subprocess.run(
        [str(VENV_BIN / "ternmq-admin"), "--node", f"127.0.0.1:{free_port()}", "cluster", "show"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 3
    assert "unreachable" in out.stderr


def test_bad_config_stops_startup_naming_file_and_line(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("# ok\nmax_inflight_mesages = 5\nretry_interval = later\n")
    out = subprocess.run(
        [TERNMQ, "start", "--config", str(conf)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 2
    assert f"{conf}:2: unknown key 'max_inflight_mesages'" in out.stderr
    assert "did you mean 'max_inflight_messages'" in out.stderr
    assert f"{conf}:3: retry_interval:" in out.stderr


def test_sigterm_stops_every_process_within_10s(fresh_node: Node) -> None:
    fresh_node.start()
    status = fresh_node.get_json("/status")
    pids = [c["pid"] for c in status["children"].values()]  # type: ignore[index]
    c = Client("stopper", fresh_node.mqtt_port, version=5).connect()
    assert fresh_node.proc is not None
    started = time.monotonic()
    fresh_node.proc.send_signal(signal.SIGTERM)
    fresh_node.proc.wait(timeout=15)
    assert time.monotonic() - started < 10
    assert fresh_node.proc.returncode == 0
    for pid in pids:
        wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 5, what=f"pid {pid} gone")
    # a v5 client is told why: DISCONNECT 0x8B server shutting down
    assert c.disconnected.wait(5)
    assert c.disconnect_reason is not None and c.disconnect_reason.value == 0x8B


def test_ctrl_c_stops_the_node_in_order_within_10s(fresh_node: Node) -> None:
    """Ctrl-C signals the whole foreground process group: the services leave the stop to
    the supervisor, which stops the listener first and the msgstore last (exit 0)."""
    fresh_node.start()
    c = Client("ctrl-c", fresh_node.mqtt_port, version=5).connect()
    assert fresh_node.proc is not None
    started = time.monotonic()
    os.killpg(fresh_node.proc.pid, signal.SIGINT)
    assert fresh_node.proc.wait(timeout=15) == 0
    assert time.monotonic() - started < 10
    assert c.disconnected.wait(5)
    assert c.disconnect_reason is not None and c.disconnect_reason.value == 0x8B
    stopping = [
        (str(e["ts"]), str(e["service"]))
        for e in fresh_node.events("service.stopping")
        if e["service"] != "node"
    ]
    order = [service for _, service in sorted(stopping)]
    assert order == ["listener", "registry", "gossip", "msgstore"], order
    assert not list(fresh_node.events("service.crashed"))
    assert "Traceback" not in fresh_node.output()


def test_one_service_alone(tmp_path: Path) -> None:
    """`ternmq service NAME --config FILE` runs one service; SIGTERM stops it with 0."""
    conf = tmp_path / "svc.conf"
    conf.write_text(f"data_dir = {tmp_path}/data\nlog_dir = {tmp_path}/log\nlog.console = off\n")
    proc = subprocess.Popen([TERNMQ, "service", "msgstore", "--config", str(conf)])
    try:
        sock = tmp_path / "data" / "run" / "msgstore.sock"
        wait_for(sock.exists, 30, what="msgstore socket")
        wait_for(
            lambda: any(e["event"] == "service.started" for e in _events(tmp_path / "log")),
            30,
            what="service.started",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0


def _events(log_dir: Path) -> list[dict[str, object]]:
    out = []
    for path in log_dir.glob("*.jsonl*"):
        out += [json.loads(line) for line in complete_lines(path) if line.strip()]
    return out


def test_logged_events_follow_the_catalogue(node: Node) -> None:
    """Every line any service wrote is an event the catalogue knows, with known fields."""
    c = Client("catalogue-c", node.mqtt_port, version=5).connect()
    c.subscribe("cat/t", 2)
    c.publish("cat/t", b"x", qos=2)
    c.take(1)
    c.drop()
    wait_for(
        lambda: any(
            e.get("client_id") == "catalogue-c" for e in node.events("client.disconnected")
        ),
        10,
    )
    lines = list(node.events())
    assert len(lines) > 10
    for rec in lines:
        fields = {k: v for k, v in rec.items()}
        assert unknown_fields(str(rec["event"]), fields) == [], rec
    names = {rec["event"] for rec in lines}
    assert {
        "service.started",
        "client.connected",
        "message.published",
        "message.delivered",
        "message.acked",
    } <= names
