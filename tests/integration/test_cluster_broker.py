"""A 3-node dev cluster serves as one broker: a client on any node reaches subscribers on
every node (QoS 0, 1 and 2, shared groups, persistent sessions offline on another node),
subscriptions and retained messages written on one node reach every node, a deletion
stays deleted, and a node that was down while they changed catches up on its own when
it returns (scenarios S2, S13 (a) and S14 of cluster-scenarios.md).

One cluster serves the module; the steps run in order. Every wait polls with generous
bounds; convergence times are measured in bench/, not asserted here.
"""

from __future__ import annotations

import json
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
from tests.support.admin import admin
from tests.support.clients import Client, mosquitto_pub, until_routed
from tests.support.cluster import dev_cluster
from tests.support.node import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = Path(sys.executable).parent
MQTT = {N1: 10053, N2: 10103, N3: 10153}
BOUND = 30.0
FORWARD_TIMEOUT = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with dev_cluster(
        tmp_path_factory.mktemp("devcluster-meta"), f"cluster.forward_timeout={FORWARD_TIMEOUT}s"
    ) as base:
        yield base


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


def _connected(cid: str, node: str, **kw: object) -> Client:
    return Client(cid, MQTT[node], **kw).connect()  # type: ignore[arg-type]


def test_publishes_from_every_node_reach_subscribers_on_every_node_in_order(
    cluster: Path,
) -> None:
    """S2: one QoS 1 subscriber per node plus five more on n1; publishes from each node
    reach every subscriber exactly once, in per-publisher order."""
    subs = [_connected(f"s2-{n[:4]}", n) for n in (N1, N2, N3)]
    subs += [_connected(f"s2-extra-{i}", N1) for i in range(5)]
    pubs = {n: _connected(f"s2-pub-{n[:4]}", n) for n in (N1, N2, N3)}
    try:
        for s in subs:
            s.subscribe("s2/#", 1)
        for n, p in pubs.items():
            until_routed(p, f"s2/probe/{n[:4]}", subs)
        for n, p in pubs.items():
            for i in range(20):
                p.publish(f"s2/{n[:4]}", f"{n[:4]}-{i}".encode(), qos=1)
        for s in subs:
            got = s.take(60, timeout=30)
            assert not s.drain(1.0), f"{s.client_id}: more than one copy"
            for n in pubs:
                mine = [g.payload.decode() for g in got if g.topic == f"s2/{n[:4]}"]
                assert mine == [f"{n[:4]}-{i}" for i in range(20)], (s.client_id, n)
    finally:
        for c in [*subs, *pubs.values()]:
            c.disconnect()


def test_qos2_crosses_nodes_exactly_once(cluster: Path) -> None:
    sub = _connected("q2-sub", N3)
    pub = _connected("q2-pub", N1)
    try:
        sub.subscribe("q2/t", 2)
        until_routed(pub, "q2/t", [sub])
        for i in range(10):
            pub.publish("q2/t", str(i).encode(), qos=2).wait_for_publish(10)
        got = sub.take(10)
        assert [(g.payload, g.qos) for g in got] == [(str(i).encode(), 2) for i in range(10)]
        assert not sub.drain(1.0)
    finally:
        sub.disconnect()
        pub.disconnect()


def test_a_persistent_session_offline_on_another_node_gets_what_was_published_meanwhile(
    cluster: Path,
) -> None:
    sub = _connected("off-sub", N2, clean=False)
    sub.subscribe("off/t", 1)
    probe = _connected("off-probe", N1)
    until_routed(probe, "off/t", [sub])
    probe.disconnect()
    sub.disconnect()
    for i in range(10):  # each PUBACKed only once n2 has it on disk
        mosquitto_pub(MQTT[N1], "off/t", f"m{i}", 1)
    back = Client("off-sub", MQTT[N2], clean=False).connect()
    try:
        got = back.take(10)
        assert [g.payload for g in got] == [f"m{i}".encode() for i in range(10)]
    finally:
        back.disconnect()


def test_a_shared_group_on_other_nodes_gets_each_message_once(cluster: Path) -> None:
    members = [_connected(f"sh-{n[:4]}", n) for n in (N2, N3)]
    pub = _connected("sh-pub", N1)
    try:
        for m in members:
            m.subscribe("$share/g/sh/t", 1)
        for m in members:  # each member's subscription known on n1
            wait_for(lambda c=m.client_id: subscriber_node(cluster, N1, c) is not None, BOUND)
        for i in range(40):
            pub.publish("sh/t", str(i).encode(), qos=1).wait_for_publish(10)
        got: list[bytes] = []
        for m in members:
            got += [g.payload for g in m.drain(2.0)]
        assert sorted(got, key=int) == [str(i).encode() for i in range(40)]
    finally:
        for c in [*members, pub]:
            c.disconnect()


def test_a_will_reaches_a_subscriber_on_another_node_once(cluster: Path) -> None:
    """S23 (b): the client's connection is cut; its node publishes the will, once."""
    sub = _connected("will-sub", N3)
    sub.subscribe("will/t", 1)
    wait_for(lambda: subscriber_node(cluster, N1, "will-sub") == N3, BOUND)
    client = Client("will-client", MQTT[N1], will=("will/t", b"gone", 1, False)).connect()
    try:
        client.drop()  # no DISCONNECT: an abnormal end
        (got,) = sub.take(1)
        assert (got.payload, got.qos) == (b"gone", 1)
        assert not sub.drain(1.0)
    finally:
        sub.disconnect()


def test_set_all_changes_a_setting_on_every_node(cluster: Path) -> None:
    """``ternmq-admin set ... --all``, as ``vmq-admin set ... --all``: the node asked
    sets it on every member (each found through gossip's ``admins`` records)."""

    def shown(node: str) -> object:
        status, body = get(HTTP[node], "/api/v1/show?key=max_client_id_size")
        return body.get("max_client_id_size") if status == 200 else None

    long_id = "set-all-client-id"  # 17 bytes
    try:
        done = admin(HTTP[N1], "set", "max_client_id_size=12", "--all")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{N2}: ok" in done.stdout and f"{N3}: ok" in done.stdout
        for node in (N1, N2, N3):
            assert shown(node) == 12, node
        rows = admin(HTTP[N2], "--json", "show", "max_client_id_size", "--all")
        assert rows.returncode == 0, rows.stderr
        assert sorted((r["node"], r["max_client_id_size"]) for r in json.loads(rows.stdout)) == [
            (N1, 12),
            (N2, 12),
            (N3, 12),
        ]
        refused = Client(long_id, MQTT[N3])
        refused.connect(expect_ok=False)
        assert refused.reason_code.is_failure
        refused.disconnect()
    finally:
        assert admin(HTTP[N1], "set", "max_client_id_size=100", "--all").returncode == 0
    assert shown(N2) == 100


def test_a_node_that_was_down_catches_up_when_it_returns(cluster: Path) -> None:
    """S14, and what a publisher hears meanwhile about subscribers on the dead node."""
    clean = _connected("down-clean", N3)
    clean.subscribe("down/clean", 1)
    durable = _connected("down-durable", N3, clean=False)
    durable.subscribe("down/durable", 1)
    for cid in ("down-clean", "down-durable"):
        wait_for(lambda c=cid: subscriber_node(cluster, N1, c) == N3, BOUND)
    pid = int((cluster / "dev3" / "node.pid").read_text())
    os.killpg(pid, signal.SIGKILL)
    for c in (clean, durable):
        c.drop()  # their node is gone; no reconnecting
    wait_for(lambda: states(N1).get(N3) == "down", BOUND)
    pub = _connected("down-pub", N1, version=5)
    codes: dict[int, int] = {}
    pub.paho.on_publish = lambda _c, _u, mid, rc, _p: codes.__setitem__(mid, rc.value)
    try:
        # a clean session's copy does not hold the publisher: PUBACK at once, success
        to_clean = pub.paho.publish("down/clean", b"x", 1)
        wait_for(lambda: to_clean.mid in codes, FORWARD_TIMEOUT / 2)
        assert codes[to_clean.mid] == 0
        # a persistent session's copy must be on its node's disk (I1): that node is
        # dead (R = 1), so after cluster.forward_timeout the publisher hears 0x80
        to_durable = pub.paho.publish("down/durable", b"y", 1)
        wait_for(lambda: to_durable.mid in codes, FORWARD_TIMEOUT + BOUND)
        assert codes[to_durable.mid] == 0x80
    finally:
        pub.disconnect()
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
