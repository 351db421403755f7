"""Metadata across a 3-node dev cluster: subscriptions and retained messages written on
one node reach every node, a deletion stays deleted, and a node that was down while they
changed catches up on its own when it returns (scenarios S13 (a) and S14 of
cluster-scenarios.md, for the metadata; routing between nodes is tested elsewhere).

One cluster serves the module; the steps run in order. Every wait polls with generous
bounds; convergence times are measured in bench/, not asserted here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from services.common.config import load
from services.common.grpcutil import service_address
from services.node.schema import schema
from services.pb import gossip_pb2, gossip_pb2_grpc
from tests.integration.test_cluster_membership import HTTP, N1, N2, N3, get, health, states
from tests.support.clients import Client, mosquitto_pub
from tests.support.node import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = Path(sys.executable).parent
MQTT = {N1: 10053, N2: 10103, N3: 10153}
BOUND = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("devcluster-meta")
    done = subprocess.run(
        [str(BIN / "ternmq"), "dev-cluster", "--nodes", "3", "--base-dir", str(base)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        yield base
    finally:
        subprocess.run(
            [str(BIN / "ternmq"), "dev-cluster", "stop", "--base-dir", str(base)],
            capture_output=True,
            timeout=60,
        )


def _conf(base: Path, node: str) -> Path:
    return base / node.split("@")[0] / "ternmq.conf"


def subscriber_node(base: Path, node: str, client_id: str) -> str | None:
    """The node named by ``client_id``'s subscription record in ``node``'s gossip."""
    address = service_address(load(schema(), str(_conf(base, node)), {}), "gossip")
    with grpc.insecure_channel(address) as ch:
        reply = gossip_pb2_grpc.GossipStub(ch).Get(
            gossip_pb2.GetRequest(prefix="subs", key=b"\0" + client_id.encode()), timeout=5
        )
    if not reply.found:
        return None
    return str(gossip_pb2.SubscriberRecord.FromString(reply.value).node)


def retained_topics(node: str) -> set[str]:
    status, rows = get(HTTP[node], "/api/v1/retain/show")
    return {r["topic"] for r in rows} if status == 200 else set()


def test_a_subscription_made_on_one_node_is_known_on_every_node(cluster: Path) -> None:
    c = Client("meta-sub", MQTT[N1], clean=False).connect()
    try:
        c.subscribe("meta/t/#", 1)
        for node in (N1, N2, N3):
            wait_for(lambda n=node: subscriber_node(cluster, n, "meta-sub") == N1, BOUND)
        c.paho.unsubscribe("meta/t/#")
        for node in (N1, N2, N3):
            wait_for(lambda n=node: subscriber_node(cluster, n, "meta-sub") is None, BOUND)
    finally:
        c.disconnect()


def test_a_retained_message_set_on_one_node_reaches_new_subscribers_on_every_node(
    cluster: Path,
) -> None:
    mosquitto_pub(MQTT[N1], "meta/retained", "kept", 1, "-r")
    for node in (N2, N3):
        wait_for(lambda n=node: "meta/retained" in retained_topics(n), BOUND)
        sub = Client(f"meta-ret-{node[:4]}", MQTT[node]).connect()
        try:
            sub.subscribe("meta/retained", 1)
            (got,) = sub.take(1)
            assert (got.payload, got.retain) == (b"kept", True)
        finally:
            sub.disconnect()
    mosquitto_pub(MQTT[N2], "meta/retained", "", 1, "-r")  # cleared on another node
    for node in (N1, N2, N3):
        wait_for(lambda n=node: "meta/retained" not in retained_topics(n), BOUND)


def test_a_node_that_was_down_catches_up_when_it_returns(cluster: Path) -> None:
    pid = int((cluster / "dev3" / "node.pid").read_text())
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: states(N1).get(N3) == "down", BOUND)
    topics = {f"meta/while-down/{i}" for i in range(10)}
    for topic in sorted(topics):
        mosquitto_pub(MQTT[N1 if topic[-1] in "02468" else N2], topic, "x", 1, "-r")
    subs = [f"meta-down-{i}" for i in range(5)]
    for cid in subs:
        c = Client(cid, MQTT[N2], clean=False).connect()
        c.subscribe(f"meta/down/{cid}", 1)
        c.disconnect()
    assert not retained_topics(N3)  # it is down: nothing answers
    restarted = subprocess.Popen(
        [str(BIN / "ternmq"), "start", "--config", str(_conf(cluster, N3))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    (cluster / "dev3" / "node.pid").write_text(str(restarted.pid))  # dev-cluster stop kills it
    wait_for(lambda: health(N3) == 200, 60)
    wait_for(lambda: topics <= retained_topics(N3), BOUND)
    for cid in subs:
        wait_for(lambda c=cid: subscriber_node(cluster, N3, c) == N2, BOUND)
    sub = Client("meta-late", MQTT[N3]).connect()
    try:
        sub.subscribe("meta/while-down/#", 1)
        got = sub.take(len(topics))
        assert {g.topic for g in got} == topics and all(g.retain for g in got)
    finally:
        sub.disconnect()
