"""Cluster scenarios with replicated queues on (R = 3, W = 2), on a 3-node dev cluster
(``../shared/cluster-scenarios.md``; S1, the seed, is ``test_replicated_queues``).

- S6: a subscriber hops n1 → n2 → n3 → n1 (a takeover each time) while two publishers
  send QoS 1: no acknowledged message missing, per-publisher order, duplicates only
  with DUP. (Copies that reach the old node's queue after the new owner fenced it are
  refused, 0x80: their publishers send them again.)
- S7: a raw CONNECT for a persistent session's id on n2 that closes at once, then a
  real reconnect on n3 (retried after a 0x88: the abandoned CONNECT's claim may come
  last): the 10 queued messages once, in order; no queue left whose primary is n2.
- S8: 20 queued QoS 1 messages taken one per visit (receive maximum 1), each visit on a
  random node: all 20, in order, none taken twice.
- S20: with n2 and n3 SIGKILLed, n1 alone cannot put a copy on W = 2 nodes: a 5.0
  publisher gets a failure PUBACK, a 3.1.1 one no PUBACK, never a success; once n2 is
  back, publishing succeeds and no earlier acknowledged message is missing.

One cluster serves the module and the steps run in order (S20 last: it kills nodes).
Waits poll with bounds.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.listener.mqtt.types import Connect, Disconnect, Properties, Puback, Publish
from tests.conformance.client import RawClient, connected, protocol_name
from tests.integration.test_cluster_membership import (
    HTTP,
    N1,
    N2,
    N3,
    get,
    health,
    pid_of,
    states,
)
from tests.support.clients import Client, Received
from tests.support.cluster import dev_cluster, start_node
from tests.support.node import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MQTT = {N1: 10053, N2: 10103, N3: 10153}
NODES = (N1, N2, N3)
BOUND = 30.0
EXPIRY = 600


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("devcluster-replicated-scenarios")
    with dev_cluster(base, "msgstore.replication_factor=3") as base:
        yield base


def _sessions(node: str, client_id: str) -> list[dict[str, object]]:
    status, rows = get(HTTP[node], f"/api/v1/session/show?client_id={client_id}&local=1")
    assert status == 200, rows
    return [r for r in rows if r.get("client_id") == client_id]


def _payloads(msgs: list[Received]) -> list[str]:
    return [m.payload.decode() for m in msgs]


def _v5(client_id: str, port: int, receive_maximum: int | None = None) -> RawClient:
    props = Properties(session_expiry_interval=EXPIRY, receive_maximum=receive_maximum)
    client, _ = connected(port, client_id, 5, clean=False, properties=props)
    return client


def _queue(client_id: str, topic: str, count: int, node: str = N1) -> list[str]:
    """A persistent 5.0 subscriber on ``node`` subscribes and leaves; ``count`` QoS 1
    messages are published on the same node (its routes need no gossip) and
    acknowledged. Returns their payloads, in order."""
    sub = _v5(client_id, MQTT[node])
    sub.subscribe(topic, 1)
    sub.disconnect()
    wait_for(
        lambda: _sessions(node, client_id) and not _sessions(node, client_id)[0]["online"],
        BOUND,
        0.2,
        f"{client_id} offline on {node}",
    )
    pub, _ = connected(MQTT[node], f"{client_id}-pub", 4)
    sent = [f"m{i}" for i in range(count)]
    for payload in sent:
        pub.publish(topic, payload.encode(), 1)
    pub.disconnect()
    return sent


def _hop(node: str) -> Client:
    return Client(
        "s6-sub", MQTT[node], version=5, clean=False, session_expiry=EXPIRY, reconnect=False
    ).connect()


def test_s6_a_subscriber_hopping_nodes_under_load_misses_nothing(cluster: Path) -> None:
    topic = "s6/t"
    hops = [N1, N2, N3, N1]
    subs = [_hop(hops[0])]
    subs[0].subscribe(topic, 1)
    # 5.0 publishers: a copy that fails is answered 0x80 and not sent again (a 3.1.1
    # publisher's connection would be closed and paho would resend it, a new message
    # for the broker, which the subscriber may then get twice without DUP).
    pubs = [
        Client(f"s6-pub{k}", MQTT[node], version=5, reconnect=False).connect()
        for k, node in ((1, N1), (2, N3))
    ]
    for p in pubs:
        wait_for(lambda p=p: _routed(p, topic, subs[0]), BOUND, 0.2, f"{p.client_id}'s routes")
    stop = threading.Event()

    def publish(p: Client) -> None:
        seq = 0
        while not stop.is_set() and seq < 5000:
            seq += 1
            p.publish(topic, f"{p.client_id}:{seq}", qos=1, tag=seq)
            time.sleep(0.005)  # ~200 a second

    threads = [threading.Thread(target=publish, args=(p,)) for p in pubs]
    for t in threads:
        t.start()
    try:
        for node in hops[1:]:
            time.sleep(2.0)
            subs.append(_hop(node))
            assert subs[-1].session_present
            assert subs[-2].disconnected.wait(BOUND), "the old connection was not taken over"
        time.sleep(2.0)
    finally:
        stop.set()
        for t in threads:
            t.join(BOUND)
    for p in pubs:
        wait_for(lambda p=p: not p.unanswered(), BOUND, 0.2, "every PUBACK")
    received: list[Received] = []
    for s in subs[:-1]:
        s.paho.loop_stop()
        received += s.drain(0.2)
    received += subs[-1].drain(3.0)
    subs[-1].disconnect()
    for p in pubs:
        p.disconnect()
    for p in pubs:
        acked = set(p.acked)
        assert len(acked) > 100, f"{p.client_id}: only {len(acked)} acknowledged"
        seqs = [
            (int(m.payload.decode().split(":")[1]), m.dup)
            for m in received
            if m.payload.decode().startswith(f"{p.client_id}:")
        ]
        first: list[int] = []
        seen: set[int] = set()
        for seq, dup in seqs:
            if seq in seen:
                assert dup, f"{p.client_id}:{seq} came twice, the second time without DUP"
                continue
            seen.add(seq)
            first.append(seq)
        missing = sorted(acked - seen)
        assert not missing, f"{p.client_id}: acknowledged but never delivered: {missing[:20]}"
        in_order = [seq for seq in first if seq in acked]  # a refused one may come late
        assert in_order == sorted(in_order), f"{p.client_id}: out of publish order"


def _routed(pub: Client, topic: str, sub: Client) -> bool:
    """A QoS 0 probe from ``pub`` reaches ``sub`` (gossip brought the route)."""
    probe = f"probe:{pub.client_id}"
    pub.publish(topic, probe, qos=0)
    return probe in _payloads(sub.drain(0.3))


def test_s7_a_connect_that_closes_at_once_leaves_the_queue_whole(cluster: Path) -> None:
    topic, cid = "s7/t", "s7-sub"
    sent = _queue(cid, topic, 10)
    raw = RawClient.connect(MQTT[N2], 5)
    props = Properties(session_expiry_interval=EXPIRY)
    raw.send(Connect(protocol_name(5), 5, False, 60, cid, properties=props))
    raw.close()  # at once, whether or not the CONNACK came
    # Its registration goes on without it and may claim the id after the reconnect's
    # own claim, which then fails (0x88): the client tries again, as clients do.
    back = _until_accepted(lambda: _v5(cid, MQTT[N3]))
    got = [back.receive().payload.decode() for _ in sent]
    assert got == sent
    back.no_packet(1.0)
    back.disconnect()
    # no copy of the queue is left with n2 as its primary: n3 owns it
    wait_for(lambda: _sessions(N2, cid) == [], BOUND, 0.2, "n2 holds no session for it")
    wait_for(lambda: _leaders(cid) == [N3], BOUND, 0.2, "its queue led by n3 alone")


def _until_accepted(connect: Callable[[], RawClient]) -> RawClient:
    deadline = time.monotonic() + BOUND
    while True:
        try:
            return connect()
        except AssertionError as exc:
            if "reason_code=136" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def _leaders(client_id: str) -> list[str]:
    """The nodes whose msgstore leads (is the primary of) a copy of ``client_id``'s queue."""
    found = []
    for node in NODES:
        status, body = get(HTTP[node], "/status")
        if status != 200:
            continue
        repl = body["services"]["msgstore"].get("replication") or {}
        if any(q.get("client_id") == client_id for q in repl.get("primaries", [])):
            found.append(node)
    return found


def test_s8_one_message_per_visit_on_random_nodes(cluster: Path) -> None:
    topic, cid = "s8/t", "s8-sub"
    sent = _queue(cid, topic, 20)
    rng = random.Random(8)
    got = []
    for _ in sent:
        node = rng.choice(NODES)
        client = _v5(cid, MQTT[node], receive_maximum=1)
        pub = client.expect(Publish, BOUND)
        assert pub.packet_id is not None
        got.append(pub.payload.decode())
        client.send(Puback(pub.packet_id))
        # The next message may already be on its way (the window is free again): the
        # client leaves without reading it, and takes it on its next visit.
        client.send(Disconnect(0))
        client.close()
    assert got == sent, "not every message once, in order"
    last = _v5(cid, MQTT[rng.choice(NODES)], receive_maximum=1)
    last.no_packet(2.0)
    last.disconnect()


def test_s20_without_a_write_quorum_no_publish_is_acknowledged(cluster: Path) -> None:
    topic, cid = "s20/t", "s20-sub"
    sent = _queue(cid, topic, 3)
    pub5 = Client("s20-pub5", MQTT[N1], version=5, reconnect=False).connect()
    pub4 = Client("s20-pub4", MQTT[N1], version=4, reconnect=False).connect()
    for node in (N2, N3):
        os.killpg(pid_of(cluster, node), signal.SIGKILL)
    wait_for(
        lambda: states(N1).get(N2) == "down" and states(N1).get(N3) == "down",
        BOUND,
        0.2,
        "n2 and n3 down on n1",
    )
    pub5.publish(topic, "refused5", qos=1, tag=1)
    pub4.publish(topic, "refused4", qos=1, tag=1)
    wait_for(lambda: pub5.refused, BOUND, 0.2, "the 5.0 publisher's failure PUBACK")
    assert pub5.acked == [] and pub5.refused[0][1] >= 0x80
    time.sleep(3.0)  # a success would have come by now (the failure did)
    assert pub4.acked == [], "a 3.1.1 publish was acknowledged without W copies"
    pub5.disconnect()
    pub4.paho.loop_stop()
    # n2 returns: W = 2 copies are possible again, and publishing succeeds
    start_node(cluster, N2)
    wait_for(lambda: health(N2) == 200, 60, 0.5, "n2 healthy again")
    wait_for(lambda: states(N1).get(N2) == "up", BOUND, 0.2, "n2 up on n1")
    after = Client("s20-pub-after", MQTT[N1], version=5)
    wait_for(lambda: _publish_acked(after, topic), 60, 1.0, "a publish acknowledged again")
    sub = _v5(cid, MQTT[N1])
    got = []
    while True:
        try:
            got.append(sub.receive(timeout=3.0).payload.decode())
        except AssertionError:
            break
    sub.disconnect()
    acknowledged = [*sent, "after"]
    first = list(dict.fromkeys(p for p in got if p in acknowledged))  # "after" may repeat
    assert first == acknowledged, got
    start_node(cluster, N3)
    wait_for(lambda: health(N3) == 200, 60, 0.5, "n3 healthy again")


def _publish_acked(client: Client, topic: str) -> bool:
    """One QoS 1 publish of "after" on a fresh connection: True once it is acknowledged."""
    try:
        client.connect(expect_ok=False)
    except AssertionError:
        return False
    try:
        if client.reason_code.is_failure:
            return False
        client.publish(topic, "after", qos=1, tag=1)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (client.acked or client.refused):
            time.sleep(0.1)
        return bool(client.acked)
    finally:
        client.disconnect()
        client.connack.clear()
        client.refused.clear()
