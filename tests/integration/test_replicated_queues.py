"""Replicated offline queues on a 3-node dev cluster (msgstore.replication_factor = 3,
write_quorum = 2): the seed report's sequence, with the real mosquitto clients.

1. A persistent subscriber on n3 receives A and goes away; B and C are published and
   acknowledged; n3 is SIGKILLed. The subscriber reconnects to n2 before n3 ever
   returns and receives B C and then D E, in order, nothing lost
   (``../shared/seeds/001_*.txt``: VerneMQ delivered A D E and lost B C).
2. n3 comes back: it learns that the session moved and never delivers its stale copy.
3. The owner of an offline persistent session dies and the client stays away: a copy's
   holder takes the session over, publishes made meanwhile are acknowledged and kept,
   and the client gets every message in order when it returns.

The steps share one cluster and run in order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_cluster_membership import (
    HTTP,
    N1,
    N2,
    N3,
    _restart_n3,
    get,
    health,
    pid_of,
    states,
)
from tests.support.clients import mosquitto_pub
from tests.support.cluster import dev_cluster
from tests.support.node import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MQTT = {N1: 10053, N2: 10103, N3: 10153}
BOUND = 30.0
TOPIC = "resume-test"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("devcluster-replicated")
    with dev_cluster(base, "msgstore.replication_factor=3") as base:
        yield base


def _events(base: Path, node: str, service: str, name: str) -> list[dict[str, object]]:
    path = base / node.split("@")[0] / "log" / f"{service}.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == name]


def _replication() -> str:
    """Every node's replicated queues, for a failure's message."""
    out = []
    for node in (N1, N2, N3):
        status, body = get(HTTP[node], "/status")
        if status == 200:
            out.append(f"{node}: {body['services']['msgstore'].get('replication')}")
    return "\n".join(out)


def _publish(node: str, payload: str) -> None:
    try:
        mosquitto_pub(MQTT[node], TOPIC, payload)
    except subprocess.CalledProcessError as exc:
        raise AssertionError(f"{payload} not acknowledged on {node}:\n{_replication()}") from exc


def _online(node: str, client_id: str) -> bool:
    status, rows = get(HTTP[node], f"/api/v1/session/show?client_id={client_id}&local=1")
    return status == 200 and any(r.get("client_id") == client_id and r.get("online") for r in rows)


def test_the_seed_sequence_survives_the_queue_nodes_death(cluster: Path) -> None:
    client = "resume-test"
    # 5-6: the subscriber connects to n3 (persistent), A reaches it.
    sub = subprocess.Popen(
        ["mosquitto_sub", "-p", str(MQTT[N3]), "-t", TOPIC, "-q", "1", "-i", client, "-c",
         "-C", "1", "-W", "30"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: _online(N3, client), BOUND, 0.2, "the subscriber online on n3")
        mosquitto_pub(MQTT[N1], TOPIC, "A")
        out, _ = sub.communicate(timeout=BOUND)
    finally:
        if sub.poll() is None:
            sub.kill()
    assert out.split() == ["A"]
    # 7-8: it is gone (its session stays); B and C are acknowledged to the publisher.
    wait_for(lambda: not _online(N3, client), BOUND, 0.2, "the subscriber offline")
    mosquitto_pub(MQTT[N1], TOPIC, "B")
    mosquitto_pub(MQTT[N1], TOPIC, "C")
    # 9: the node holding the session and its queue's primary dies.
    os.killpg(pid_of(cluster, N3), signal.SIGKILL)
    wait_for(lambda: states(N2).get(N3) == "down", BOUND, 0.2, "n3 down on n2")
    # 10-11: the subscriber comes back on n2; D and E follow.
    sub = subprocess.Popen(
        ["mosquitto_sub", "-p", str(MQTT[N2]), "-t", TOPIC, "-q", "1", "-i", client, "-c",
         "-C", "4", "-W", "60", "-d"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: _online(N2, client), BOUND, 0.2, "the subscriber online on n2")
        mosquitto_pub(MQTT[N1], TOPIC, "D")
        mosquitto_pub(MQTT[N1], TOPIC, "E")
        out, _ = sub.communicate(timeout=60)
    finally:
        if sub.poll() is None:
            sub.kill()
    lines = out.splitlines()
    payloads = [line for line in lines if not line.startswith(("Client ", "Subscribed "))]
    assert payloads == ["B", "C", "D", "E"], out
    done = _events(cluster, N2, "msgstore", "queue.failover")
    assert any(e["state"] == "done" for e in done), done


def _sub(node: str, client: str, count: int, wait: int = 60) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["mosquitto_sub", "-p", str(MQTT[node]), "-t", TOPIC, "-q", "1", "-i", client, "-c",
         "-C", str(count), "-W", str(wait)],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _received(sub: subprocess.Popen[str], timeout: float = 60) -> list[str]:
    try:
        out, _ = sub.communicate(timeout=timeout)
    finally:
        if sub.poll() is None:
            sub.kill()
    return out.split()


def test_the_dead_node_returns_and_never_delivers_its_stale_copy(cluster: Path) -> None:
    _restart_n3(cluster)
    wait_for(lambda: health(N3) == 200, 90, 0.5, "n3 healthy again")
    wait_for(
        lambda: all(states(n).get(N3) == "up" for n in (N1, N2, N3)), BOUND, 0.2, "n3 up"
    )  # fmt: skip
    # The session lives on n2 now; resumed on n3, it brings nothing stale (B and C were
    # acknowledged on n2) and the next message is the first to arrive.
    sub = _sub(N3, "resume-test", 1)
    wait_for(lambda: _online(N3, "resume-test"), BOUND, 0.2, "the subscriber online on n3")
    mosquitto_pub(MQTT[N1], TOPIC, "F")
    assert _received(sub) == ["F"]


def test_publishes_while_the_owner_is_dead_and_the_client_away_are_kept(cluster: Path) -> None:
    client = "away-test"
    sub = _sub(N1, client, 1)
    wait_for(lambda: _online(N1, client), BOUND, 0.2, "the subscriber online on n1")
    _publish(N2, "P1")
    # resume-test (still subscribed, on n3) gets these too: its session is not the one here
    assert _received(sub) == ["P1"]
    wait_for(lambda: not _online(N1, client), BOUND, 0.2, "the subscriber offline")
    _publish(N2, "P2")
    os.killpg(pid_of(cluster, N1), signal.SIGKILL)
    wait_for(lambda: states(N2).get(N1) == "down", BOUND, 0.2, "n1 down on n2")

    def failed_over() -> bool:
        return any(
            e["state"] == "done" and e["client_id"] == client
            for n in (N2, N3)
            for e in _events(cluster, n, "msgstore", "queue.failover")
        )

    wait_for(failed_over, BOUND, 0.2, "the offline session failed over")
    _publish(N2, "P3")  # acknowledged, or mosquitto_pub fails
    _publish(N3, "P4")
    sub = _sub(N3, client, 3)
    assert _received(sub) == ["P2", "P3", "P4"]
