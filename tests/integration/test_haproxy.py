"""``deploy/haproxy.cfg``, as shipped, in front of a 3-node dev cluster: a real HAProxy
balances MQTT over the nodes with PROXY v2, and each node sees the client's own address."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.node import dev_cluster as dc
from tests.support.clients import Client, until_routed
from tests.support.cluster import dev_cluster
from tests.support.node import free_port, wait_for

pytestmark = pytest.mark.integration
CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg"


def haproxy() -> str:
    found = shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None
    )
    assert found, "haproxy is required (the project's CI setup installs it)"
    return found


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """The cluster, and HAProxy's frontend port."""
    base = tmp_path_factory.mktemp("haproxy")
    with dev_cluster(base / "cluster", "listener.tcp.proxy_protocol=on"):
        nodes = dc.existing(base / "cluster")
        port = free_port()
        env = {**os.environ, "TERNMQ_FRONTEND": f"127.0.0.1:{port}"}
        for k, n in enumerate(nodes, 1):
            env[f"TERNMQ_NODE{k}"] = f"127.0.0.1:{n.mqtt_port}"
            env[f"TERNMQ_NODE{k}_HEALTH"] = str(n.http_port)
        check = subprocess.run(
            [haproxy(), "-c", "-f", str(CONFIG)], env=env, capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
        proc = subprocess.Popen(
            [haproxy(), "-db", "-f", str(CONFIG)],
            env=env,
            stdout=open(base / "haproxy.log", "wb"),  # noqa: SIM115 - lives as long as it
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for(lambda: _accepts(port), 30, what="haproxy's frontend")
            yield port, base / "cluster"
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _peers(cluster: Path, client_id: str) -> list[str]:
    import json

    found = []
    for path in cluster.glob("dev*/log/listener*.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            if '"client.connected"' in line and f'"{client_id}"' in line:
                found.append(str(json.loads(line).get("peer", "")))
    return found


def test_clients_through_haproxy_reach_the_cluster_with_their_own_address(
    front: tuple[int, Path],
) -> None:
    port, cluster = front
    # paho retries until HAProxy's health checks have marked a node up
    sub = Client("ha-sub", port, 4)
    wait_for(lambda: _try_connect(sub), 30, what="a CONNACK through haproxy")
    pub = Client("ha-pub", port, 5).connect()
    try:
        sub.subscribe("ha/t", qos=1)
        # the two clients may sit on different nodes, and a subscription reaches the
        # others through gossip: probe until the publisher's node routes to it
        until_routed(pub, "ha/t", [sub])
        pub.publish("ha/t", b"through the balancer", qos=1)
        assert [m.payload for m in sub.take(1, timeout=30)] == [b"through the balancer"]
        local = sub.paho.socket().getsockname()[1]
    finally:
        pub.disconnect()
        sub.disconnect()
    wait_for(lambda: _peers(cluster, "ha-sub"), 20, what="client.connected for ha-sub")
    assert f"127.0.0.1:{local}" in _peers(cluster, "ha-sub")


def _try_connect(client: Client) -> bool:
    try:
        client.connect(timeout=3)
        return True
    except AssertionError:
        client.paho.loop_stop()
        client.connack.clear()
        return False
