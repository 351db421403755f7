"""$SYS topics on a real node: every service's metrics, every interval, never to ``#``."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.clients import Client, Received, mosquitto_sub_once
from tests.support.node import Node, make_node

pytestmark = pytest.mark.integration


def _sys_messages(client: Client, want: set[str], timeout: float) -> dict[str, bytes]:
    """$SYS messages received until every topic of ``want`` arrived (last payload wins)."""
    seen: dict[str, bytes] = {}
    deadline = time.monotonic() + timeout
    while not want <= seen.keys():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no $SYS message for {sorted(want - seen.keys())}")
        try:
            msg: Received = client.messages.get(timeout=left)
        except queue.Empty:
            continue
        seen[msg.topic] = msg.payload
    return seen


@pytest.fixture(scope="module")
def sys_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    node = make_node(tmp_path_factory.mktemp("systree"), systree_interval="1s")
    node.start()
    yield node
    assert node.stop() == 0, node.output()


def test_sys_topics_carry_every_services_metrics(sys_node: Node) -> None:
    name = f"test{sys_node.mqtt_port}@127.0.0.1"
    watcher = Client("sys-watcher", sys_node.mqtt_port).connect()
    watcher.subscribe("$SYS/#", qos=0)
    everything = Client("sys-hash", sys_node.mqtt_port).connect()
    everything.subscribe("#", qos=0)
    pub = Client("sys-pub", sys_node.mqtt_port).connect()
    pub.publish("sys/test", b"x", qos=1).wait_for_publish(10)

    prefix = f"$SYS/{name}/"
    published = prefix + "messages/published/total/qos/1"
    want = {
        published,  # the listener's own counter
        prefix + "connections",
        prefix + "msgstore/commits/total",  # the other services, through their Admin RPC
        prefix + "registry/sessions/online",
        prefix + "gossip/watchers",
    }
    seen = _sys_messages(watcher, want, timeout=20)
    assert int(seen[published]) >= 1
    assert int(seen[prefix + "connections"]) >= 3
    assert int(seen[prefix + "registry/sessions/online"]) >= 3

    # a later round carries the values of then: one more publish shows up
    pub.publish("sys/test", b"y", qos=1).wait_for_publish(10)
    deadline = time.monotonic() + 20
    while int(seen[published]) < 2 and time.monotonic() < deadline:
        seen.update(_sys_messages(watcher, {published}, timeout=20))
    assert int(seen[published]) >= 2

    # "#" got the application messages and no $SYS topic [MQTT-4.7.2-1]
    got = [m.topic for m in everything.drain(quiet=1.5)]
    assert "sys/test" in got
    assert not [t for t in got if t.startswith("$")]
    for c in (watcher, everything, pub):
        c.disconnect()


def test_mosquitto_sub_reads_one_metric(sys_node: Node) -> None:
    name = f"test{sys_node.mqtt_port}@127.0.0.1"
    lines = mosquitto_sub_once(
        sys_node.mqtt_port,
        f"$SYS/{name}/connections",
        1,
        "sys-cli",
        qos=0,
        persistent=False,
        timeout=15,
    )
    assert len(lines) == 1 and lines[0].isdigit()


def test_systree_off_publishes_nothing(tmp_path: Path) -> None:
    node = make_node(tmp_path / "n", systree_enabled="off", systree_interval="1s")
    node.start()
    try:
        watcher = Client("sys-off", node.mqtt_port).connect()
        watcher.subscribe("$SYS/#", qos=0)
        assert watcher.drain(quiet=3.5) == []
        watcher.disconnect()
    finally:
        assert node.stop() == 0, node.output()
