"""Real partitions between cluster nodes (cluster-scenarios S9, S10, S12, S13, S24, S25): three
nodes in network namespaces, their cluster links cut with blackhole routes while the test
still reaches every node on a separate client net (``tests/support/netns.py``).

- Symmetric: node 3 alone is the minority (/health 503); the majority keeps serving and
  takes node 3's client ids, and after the heal node 3's stale connection is ended and
  every node agrees again. (The minority's refusals with the options off are tested in
  ``test_cluster_membership``; this module runs with every ``allow_*_during_netsplit``
  on.)
- One-way: node 3's packets are lost but it still hears the others: both sides end up
  seeing the other down; the same answers.
- Asymmetric: nodes 1 and 3 cannot talk, node 2 talks to both. Every node keeps a
  majority and serves; a client id taken over across the cut ends with one live
  connection once the cut heals.
- With ``allow_register_during_netsplit = on`` the minority registers tentatively; after
  the heal the majority's owner wins, and (S10) the queue the tentative session filled
  is merged into the owner's.
- S12, S13 (b), (c): subscriptions made and deleted, and retained messages set and
  cleared, on both sides of one split {n1, n2} | {n3}; after the heal every node holds
  the same routes and retained messages, and what was deleted stays deleted. The session
  the majority kept keeps its subscriptions whichever side wrote last.
- S24: the forwarding link n1 -> n2 is reset (its TCP connection killed), then n1 <-> n2
  is stalled for 10 s while n3 sees both (the failure detector keeps both up): 1,000
  QoS 1 messages all arrive after the recovery, in order, with no duplicate.
- S25: n1 <-> n3 cut, n2 seeing both, for 30 s while one client id moves between n1 and
  n3 and every node publishes QoS 1 to a persistent subscriber on n2: never two live
  sessions of the id, no acknowledged message lost, and after the heal every node
  agrees on members, routes and the id's owner.

One namespace cluster serves the module; each test heals what it cut.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import grpc
import pytest

from services.common.config import load
from services.common.grpcutil import service_address
from services.node.schema import schema
from services.pb import gossip_pb2, gossip_pb2_grpc
from tests.integration.test_cluster_membership import Acks
from tests.support.clients import Client, Received
from tests.support.netns import MQTT_PORT, NsCluster, NsNode, available, ns_cluster
from tests.support.node import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(bool(available()), reason=available() or "ok"),
]

BOUND = 30.0


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NsCluster]:
    sets = {
        "allow_register_during_netsplit": "on",
        "allow_subscribe_during_netsplit": "on",
        "allow_unsubscribe_during_netsplit": "on",
        "allow_publish_during_netsplit": "on",
        # S24 stalls a link for 10 s: its copies must wait it out, not be given up
        "cluster.forward_timeout": "60s",
    }
    with ns_cluster(tmp_path_factory.mktemp("netns"), sets) as cluster:
        yield cluster


def _client(node: NsNode, cid: str, **kw: object) -> Client:
    return Client(cid, MQTT_PORT, host=node.client_ip, **kw)  # type: ignore[arg-type]


def _live(c: Client) -> bool:
    return c.connack.is_set() and not c.reason_code.is_failure and not c.disconnected.is_set()


def _all_up(net: NsCluster) -> bool:
    names = {n.name for n in net.nodes}
    return all(
        net.health(n) == 200 and net.states(n) == dict.fromkeys(names, "up") for n in net.nodes
    )


def _split(net: NsCluster, lone: NsNode) -> None:
    n1 = net.nodes[0]
    wait_for(lambda: net.states(n1).get(lone.name) == "down", BOUND, 0.2, "the lone node down")
    wait_for(lambda: net.health(lone) == 503, BOUND, 0.2, "the lone node in the minority")


def _heal(net: NsCluster) -> None:
    net.heal()
    wait_for(lambda: _all_up(net), 60, 0.5, "every node up and healthy after the heal")


def test_the_majority_serves_a_symmetric_partition_and_takes_the_minoritys_ids(
    net: NsCluster,
) -> None:
    n1, n2, n3 = net.nodes
    stale = _client(n3, "p-sym", version=5, reconnect=False).connect()
    net.isolate(n3)
    try:
        _split(net, n3)
        taken = _client(n1, "p-sym", version=5, reconnect=False).connect()
        sub = _client(n2, "p-sym-sub").connect()
        sub.subscribe("p/sym", 1)
        pub = _client(n1, "p-sym-pub").connect()

        def routed() -> bool:
            pub.publish("p/sym", b"x", qos=1)
            return not sub.messages.empty()

        wait_for(routed, BOUND, 0.2, "the majority routes between its nodes")
        assert _live(stale), "the minority cannot know yet"
    finally:
        _heal(net)
    assert stale.disconnected.wait(BOUND), "the stale connection on node 3 was not ended"
    assert stale.disconnect_reason.value == 0x8E, stale.disconnect_reason
    assert _live(taken)
    for c in (taken, sub, pub):
        c.disconnect()


def test_a_one_way_partition_splits_both_views_and_heals(net: NsCluster) -> None:
    n1, _n2, n3 = net.nodes
    net.isolate(n3, outgoing_only=True)
    try:
        _split(net, n3)
        wait_for(
            lambda: net.states(n3).get(n1.name) == "down", BOUND, 0.2, "node 3 sees node 1 down"
        )
    finally:
        _heal(net)


def test_an_asymmetric_partition_keeps_every_node_serving(net: NsCluster) -> None:
    n1, n2, n3 = net.nodes
    first = _client(n1, "p-asym", version=5, reconnect=False).connect()
    net.cut(n1, n3)
    try:
        for node in (n1, n2, n3):
            assert net.health(node) == 200, node.name
        second = _client(n3, "p-asym", version=5, reconnect=False).connect()
        fresh = _client(n2, "p-asym-other", version=5).connect()
        for node in (n1, n2, n3):
            wait_for(lambda n=node: net.health(n) == 200, BOUND, 0.2, f"{node.name} serves")
        fresh.disconnect()
    finally:
        _heal(net)
    wait_for(lambda: sum(map(_live, (first, second))) == 1, BOUND, 0.2, "one live connection")
    assert _live(second), "the later CONNECT owns the id"
    second.disconnect()
    first.paho.loop_stop()


def test_a_tentative_minority_registration_loses_to_the_majority_after_the_heal(
    net: NsCluster,
) -> None:
    n1, _n2, n3 = net.nodes
    net.isolate(n3)
    try:
        _split(net, n3)
        tentative = _client(n3, "p-tent", version=5, reconnect=False).connect()
        winner = _client(n1, "p-tent", version=5, reconnect=False).connect()
        assert _live(tentative) and _live(winner)
    finally:
        _heal(net)
    assert tentative.disconnected.wait(BOUND), "the tentative session was not ended"
    assert tentative.disconnect_reason.value == 0x8E, tentative.disconnect_reason
    assert _live(winner)
    winner.disconnect()


def test_s10_the_queues_of_both_sides_are_kept_after_the_heal(net: NsCluster) -> None:
    """S10: a persistent session on n1 and a tentative one of the same id on n3 (the
    minority) each queue messages during the split. After the heal the majority's
    session is the one left, and it holds both queues: n3 merges its copy into n1's
    (``session.merged``) before deleting it, so nothing either side acknowledged is lost."""
    n1, _n2, n3 = net.nodes
    cid = "s10-both"
    first = _persistent(n1, cid).connect()
    first.subscribe("s10/#", 1)
    pub1 = Publisher(_client(n1, "s10-p1", version=5).connect())
    for node in net.nodes:
        wait_for(lambda n=node: _record(n, cid) == (n1.name, ("s10/#",)), BOUND, 0.2, "route")
    first.paho.disconnect()
    first.paho.loop_stop()
    wait_for(lambda: _owner(net, n1, cid) == [n1.name], BOUND, 0.2, "offline on n1")
    net.isolate(n3)
    try:
        _split(net, n3)
        tentative = _persistent(n3, cid).connect()
        assert not tentative.session_present, "n3 could not know the session"
        tentative.subscribe("s10/#", 1)
        tentative.paho.disconnect()
        tentative.paho.loop_stop()
        pub3 = Publisher(_client(n3, "s10-p3", version=5).connect())
        for i in range(3):
            assert pub1.send("s10/t", f"s10-p1:{i}") == [0]
            assert pub3.send("s10/t", f"s10-p3:{i}") == [0]
    finally:
        _heal(net)
    wait_for(lambda: _owner(net, n3, cid) == [n1.name], BOUND, 0.2, "one session, on n1")
    wait_for(
        lambda: any(e.get("client_id") == cid for e in net.events(n1, "session.merged")),
        BOUND,
        0.2,
        "n3's queue merged into n1's",
    )
    back = _persistent(n1, cid).connect()
    try:
        assert back.session_present
        got = [m.payload.decode() for m in _drain_n(back, 6)]
        for p in ("s10-p1", "s10-p3"):  # each publisher's messages once, in order
            assert [g for g in got if g.startswith(p)] == [f"{p}:{i}" for i in range(3)], got
        assert len(got) == 6, got
    finally:
        back.paho.disconnect()
        back.paho.loop_stop()
        for c in (pub1.client, pub3.client):
            c.paho.disconnect()
            c.paho.loop_stop()


# -- S12 and S13 (b), (c): one split, writes on both sides --------------------------------


def _record(node: NsNode, client_id: str) -> tuple[str, tuple[str, ...]] | None:
    """``client_id``'s subscription record in ``node``'s gossip: (node named, filters)."""
    address = service_address(load(schema(), str(node.dir / "ternmq.conf"), {}), "gossip")
    with grpc.insecure_channel(address) as ch:
        reply = gossip_pb2_grpc.GossipStub(ch).Get(
            gossip_pb2.GetRequest(prefix="subs", key=b"\0" + client_id.encode()), timeout=5
        )
    if not reply.found:
        return None
    rec = gossip_pb2.SubscriberRecord.FromString(reply.value)
    return rec.node, tuple(sorted(s.filter for s in rec.subs))


def _retained(net: NsCluster, node: NsNode) -> dict[str, str] | None:
    status, rows = net.get(node, "/api/v1/retain/show?topic=s13/%23&payload=1")
    return {r["topic"]: r["payload"] for r in rows} if status == 200 else None


def _owner(net: NsCluster, node: NsNode, client_id: str) -> list[str]:
    status, rows = net.get(node, f"/api/v1/session/show?client_id={client_id}")
    return [r["node"] for r in rows if r["client_id"] == client_id] if status == 200 else []


def _unsubscribe(c: Client, topic: str) -> None:
    done = threading.Event()
    c.paho.on_unsubscribe = lambda *_a: done.set()
    c.paho.unsubscribe(topic)
    assert done.wait(BOUND), f"{c.client_id}: no UNSUBACK for {topic}"


def _persistent(node: NsNode, cid: str) -> Client:
    return _client(node, cid, version=5, clean=False, session_expiry=600, reconnect=False)


@dataclass
class Publisher:
    client: Client
    acks: Acks = field(init=False)

    def __post_init__(self) -> None:
        self.acks = Acks(self.client)

    def send(self, topic: str, payload: str, retain: bool = False) -> list[int]:
        """PUBACK's reason codes for one QoS 1 publish."""
        return self.acks.wait(self.client.paho.publish(topic, payload, 1, retain).mid)


@dataclass
class Split:
    """The clients of the S12/S13 split, and when it healed (``time.monotonic``)."""

    clients: dict[str, Client]
    pubs: list[Publisher]
    healed: float = 0.0


S12_IDS = ("s12-x", "s12-y", "s12-a", "s12-b", "s12-d1", "s12-d3")


@pytest.fixture(scope="module")
def split(net: NsCluster) -> Iterator[Split]:
    """{n1, n2} | {n3}, and on both sides, in this order:

    - s12-x (persistent, on n1 before the split, subscribed to s12/x/kept and s12/x/f)
      subscribes to s12/x/g on n1; then connects on n3 (a tentative registration, the
      n1 connection still live) and unsubscribes s12/x/f there: the minority writes last;
    - s12-y the same, the other way round: on n3 first, then s12/y/g on n1;
    - s12-a subscribes to s12/a on n1, s12-b to s12/b on n3;
    - s12-d1 unsubscribes s12/d1 on n1, s12-d3 unsubscribes s12/d3 on n3 (both made
      before the split: each side still holds the other's deleted filter);
    - s13/b, set to s13-p1:0 before the split, is set to s13-p1:1 on n1, then to
      s13-p3:1 on n3; s13/c1 is cleared on n3 and s13/c2 on n1."""
    n1, _n2, n3 = net.nodes
    c: dict[str, Client] = {}
    for cid, node, filters in (
        ("s12-x", n1, ("s12/x/kept", "s12/x/f")),
        ("s12-y", n1, ("s12/y/kept", "s12/y/f")),
        ("s12-d1", n1, ("s12/d1",)),
        ("s12-d3", n3, ("s12/d3",)),
    ):
        c[cid] = _persistent(node, cid).connect()
        for f in filters:
            c[cid].subscribe(f, 1)
    pubs = [Publisher(_client(n, f"s13-p{n.k}", version=5).connect()) for n in net.nodes]
    for topic in ("s13/b", "s13/c1", "s13/c2"):
        assert pubs[0].send(topic, "s13-p1:0", retain=True) in ([0], [0x10])
    before = {
        "s12-x": (n1.name, ("s12/x/f", "s12/x/kept")),
        "s12-y": (n1.name, ("s12/y/f", "s12/y/kept")),
        "s12-d1": (n1.name, ("s12/d1",)),
        "s12-d3": (n3.name, ("s12/d3",)),
    }
    for node in net.nodes:
        for cid, rec in before.items():
            wait_for(lambda n=node, c=cid, r=rec: _record(n, c) == r, BOUND, 0.2, cid)
        wait_for(lambda n=node: len(_retained(net, n) or {}) == 3, BOUND, 0.2, "retained")
    net.isolate(n3)
    try:
        _split(net, n3)
        c["s12-x"].subscribe("s12/x/g", 1)
        c["s12-x@n3"] = _persistent(n3, "s12-x").connect()
        _unsubscribe(c["s12-x@n3"], "s12/x/f")
        c["s12-y@n3"] = _persistent(n3, "s12-y").connect()
        _unsubscribe(c["s12-y@n3"], "s12/y/f")
        c["s12-y"].subscribe("s12/y/g", 1)
        c["s12-a"] = _persistent(n1, "s12-a").connect()
        c["s12-a"].subscribe("s12/a", 1)
        c["s12-b"] = _persistent(n3, "s12-b").connect()
        c["s12-b"].subscribe("s12/b", 1)
        _unsubscribe(c["s12-d1"], "s12/d1")
        _unsubscribe(c["s12-d3"], "s12/d3")
        assert pubs[0].send("s13/b", "s13-p1:1", retain=True) in ([0], [0x10])
        assert pubs[2].send("s13/b", "s13-p3:1", retain=True) in ([0], [0x10])
        assert pubs[2].send("s13/c1", "", retain=True) in ([0], [0x10])
        assert pubs[0].send("s13/c2", "", retain=True) in ([0], [0x10])
        # each side holds its own writes before the heal
        wait_for(lambda: _retained(net, n3) == {"s13/b": "s13-p3:1", "s13/c2": "s13-p1:0"}, BOUND)
        wait_for(lambda: _retained(net, n1) == {"s13/b": "s13-p1:1", "s13/c1": "s13-p1:0"}, BOUND)
    finally:
        _heal(net)
    done = Split(c, pubs, time.monotonic())
    yield done
    for client in [*c.values(), *(p.client for p in pubs)]:
        client.paho.disconnect()
        client.paho.loop_stop()


def _tables(net: NsCluster) -> list[tuple[object, ...]]:
    return [tuple(_record(n, cid) for cid in S12_IDS) for n in net.nodes]


def test_s12_routes_made_and_deleted_on_both_sides_converge(
    net: NsCluster, split: Split, record_property: Callable[[str, object], None]
) -> None:
    """S12: after the heal every node holds one routing table (the time it took is
    recorded as ``s12_convergence_s``): the subscriptions made on either side are there,
    naming their sessions' nodes, and routed from every node; the ones deleted on either
    side stay deleted (every node answers a publish to them with 0x10, no subscribers)."""
    n1, _n2, n3 = net.nodes
    wait_for(lambda: len(set(_tables(net))) == 1, 2 * BOUND, 0.2, "one routing table")
    record_property("s12_convergence_s", round(time.monotonic() - split.healed, 2))
    table = dict(zip(S12_IDS, _tables(net)[0], strict=True))
    assert table["s12-a"] == (n1.name, ("s12/a",))
    assert table["s12-b"] == (n3.name, ("s12/b",))
    for cid in ("s12-d1", "s12-d3"):
        assert table[cid] is None or not table[cid][1], (cid, table[cid])  # type: ignore[index]
    for k, pub in enumerate(split.pubs):
        for cid, topic in (("s12-a", "s12/a"), ("s12-b", "s12/b")):
            got = split.clients[cid]
            probe = f"{pub.client.client_id}:{k}"
            wait_for(lambda p=pub, t=topic, m=probe: p.send(t, m) == [0], BOUND, 0.5, topic)
            assert got.drain(1.0) != []
        for topic in ("s12/d1", "s12/d3"):
            assert pub.send(topic, f"{pub.client.client_id}:{k}") == [0x10], (k, topic)
    assert split.clients["s12-d1"].drain(1.0) == []
    assert split.clients["s12-d3"].drain(0.1) == []


@pytest.mark.parametrize(
    "cid",
    [
        pytest.param("s12-y", id="majority-writes-last"),
        pytest.param("s12-x", id="minority-writes-last"),
    ],
)
def test_s12_every_node_holds_the_subscriptions_of_the_session_the_majority_kept(
    net: NsCluster, split: Split, cid: str
) -> None:
    """S12's concurrent subscribe and unsubscribe: one client subscribes on n1 and,
    connected again on n3 during the split, unsubscribes another filter there. The heal
    ends the n3 connection with 0x8E (the majority's registration wins, DESIGN §4); what
    that session did goes with it: every node's record of the id names n1 and holds n1's
    filters, whichever side wrote last: n1's listener, holding the session online,
    writes its record again when it hears another node's (``Broker._reassert``)."""
    n1 = net.nodes[0]
    tentative = split.clients[f"{cid}@n3"]
    assert tentative.disconnected.wait(BOUND), "the tentative session was not ended"
    assert tentative.disconnect_reason.value == 0x8E, tentative.disconnect_reason
    assert _live(split.clients[cid])
    topic = cid.replace("-", "/")
    want = (n1.name, (f"{topic}/f", f"{topic}/g", f"{topic}/kept"))
    for node in net.nodes:
        wait_for(lambda n=node: _owner(net, n, cid) == [n1.name], BOUND, 0.2, "owner n1")
        wait_for(lambda n=node: _record(n, cid) == want, BOUND, 0.2, f"{cid} on {node.name}")


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("cid", ["s12-y", "s12-x"])
def test_s12_every_node_routes_to_the_session_the_majority_kept(
    net: NsCluster, split: Split, cid: str, k: int
) -> None:
    """S12, as routes: a publish from node ``k`` to each of the kept session's filters is
    PUBACKed with success and reaches its connection on n1, once. n3 routes by n1's
    record even if it arrived while n3's tentative session was still online there (held
    back until that session ended: ``Router.released``)."""
    live = split.clients[cid]
    live.drain(0.5)
    topic = cid.replace("-", "/")
    pub = split.pubs[k - 1]
    for f in ("kept", "f", "g"):
        assert pub.send(f"{topic}/{f}", f"{pub.client.client_id}:{f}") == [0], f
    got = sorted(m.payload.decode() for m in _drain_n(live, 3))
    assert got == sorted(f"{pub.client.client_id}:{f}" for f in ("kept", "f", "g"))


def _drain_n(c: Client, n: int) -> list[Received]:
    out: list[Received] = []
    try:
        while len(out) < n:
            out.append(c.messages.get(timeout=BOUND))
    except queue.Empty:
        raise AssertionError(f"{c.client_id}: {len(out)} of {n} messages") from None
    return out + c.drain(1.0)


def test_s13b_a_retained_message_set_on_both_sides_is_one_value_after_the_heal(
    net: NsCluster, split: Split
) -> None:
    """S13 (b): s13/b was set to a different value on each side; after the heal every
    node holds the same one, the last published (a retained message is the last one
    published: last-writer-wins, services/gossip/crdt/lww.py), and a new subscriber on
    any node gets it once, with retain = 1."""
    for node in net.nodes:
        wait_for(lambda n=node: (_retained(net, n) or {}).get("s13/b") == "s13-p3:1", BOUND, 0.2)
    for node in net.nodes:
        sub = _client(node, f"s13-b-sub{node.k}").connect()
        try:
            sub.subscribe("s13/b", 1)
            got = _drain_n(sub, 1)
            assert [(m.payload, m.retain) for m in got] == [(b"s13-p3:1", True)], node.name
        finally:
            sub.disconnect()


def test_s13c_a_retained_message_cleared_on_one_side_stays_cleared(
    net: NsCluster, split: Split
) -> None:
    """S13 (c): s13/c1 was cleared on the minority, s13/c2 on the majority, the other
    side holding the old value through the split; after the heal neither is retained
    anywhere, and a new subscriber to s13/# on any node gets s13/b alone."""
    for node in net.nodes:
        wait_for(lambda n=node: set(_retained(net, n) or {}) == {"s13/b"}, BOUND, 0.2)
    for node in net.nodes:
        sub = _client(node, f"s13-c-sub{node.k}").connect()
        try:
            sub.subscribe("s13/#", 1)
            assert [m.topic for m in _drain_n(sub, 1)] == ["s13/b"], node.name
        finally:
            sub.disconnect()


# -- S24: the forwarding link reset, then stalled --------------------------------------


def _why_refused(net: NsCluster, refused: dict[int, int]) -> str:
    """What a failed S24 run needs to be understood: the refused seqs by reason code,
    and the nodes' events about dropped copies and failed writes on its topic."""
    by_code: dict[int, list[int]] = {}
    for seq, code in sorted(refused.items()):
        by_code.setdefault(code, []).append(seq)
    lines = [f"refused PUBACKs by reason code: {by_code}"]
    wanted = ("message.dropped", "store.error", "forward.", "internal.error", "node.")
    for node in net.nodes:
        for path in sorted((node.dir / "log").glob("*.jsonl")):
            events = [
                line.strip()
                for line in path.read_text(errors="replace").splitlines()
                if any(f'"event": "{w}' in line or f'"event":"{w}' in line for w in wanted)
            ]
            lines += [f"ns{node.k} {path.name}: {e}" for e in events[-15:]]
    return "\n".join(lines)


def _forward_connections(src: NsNode, dst: NsNode) -> list[tuple[str, str]]:
    """(local, peer) addresses of the TCP connections from ``src``'s listener process to
    ``dst``'s cluster address: its forwarding stream (the listener dials no other peer)."""
    pids = subprocess.run(
        ["pgrep", "-f", f"services.listener --config {src.dir}"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.split()
    listed = subprocess.run(
        ["ip", "netns", "exec", src.ns, "ss", "-tnpH", "state", "established"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    out = []
    for line in listed.splitlines():
        fields = line.split()
        found = re.search(r"pid=(\d+)", line)
        if found and found.group(1) in pids and f"{dst.cluster_ip}]:" in fields[3]:
            out.append((fields[2], fields[3]))
    return out


def _reset(src: NsNode, local: str, peer: str) -> None:
    """Kill one TCP connection in ``src``'s namespace (``ss -K``): its socket is closed
    with an error and the peer gets a RST, as when a middlebox drops the flow. Addresses
    as ``ss`` prints them (``[::ffff:10.77.0.1]:40000``; it cannot parse them unbracketed)."""
    lhost, lport = local.rsplit(":", 1)
    phost, pport = peer.rsplit(":", 1)
    args = ["src", lhost, "sport", "=", f":{lport}", "dst", phost, "dport", "=", f":{pport}"]
    done = subprocess.run(
        ["ip", "netns", "exec", src.ns, "ss", "-K", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert f":{lport} " in done.stdout, f"not killed: {done.stdout} {done.stderr}"


def test_s24_a_forwarding_link_reset_then_stalled_delivers_everything_once_in_order(
    net: NsCluster,
) -> None:
    """S24: two subscribers on n2 (a persistent v5 one and a clean 3.1.1 one), a
    publisher on n1 sending 1,000 QoS 1 messages at about 200 a second. After 200
    PUBACKs the forwarding stream's TCP connection is killed; after 400 the links between
    n1 and n2 are blackholed for 10 s while n3 still sees both (so the failure detector
    keeps them up), the publisher going on meanwhile. After the recovery every message is
    PUBACKed with success, and each subscriber has all 1,000 in order, each once (the
    link's resends are deduplicated before they reach a client)."""
    n1, n2, _n3 = net.nodes
    subs = [
        _persistent(n2, "s24-p").connect(),
        _client(n2, "s24-c", reconnect=False).connect(),
    ]
    pub = _client(n1, "s24-pub", version=5, reconnect=False).connect()
    codes: dict[int, int] = {}  # PUBACK reason code by message id
    seq_of: dict[int, int] = {}  # message id -> seq, filled as each is published
    pub.paho.on_publish = lambda _c, _u, mid, rc, _p: codes.__setitem__(mid, rc.value)
    try:
        for s in subs:
            s.subscribe("s24/t", 1)

        def routed() -> bool:
            pub.publish("s24/t", b"probe", qos=0)
            return all(not s.messages.empty() for s in subs)

        wait_for(routed, BOUND, 0.2, "probes reach both subscribers")
        for s in subs:
            s.drain(0.5)
        codes.clear()  # the probes'

        def publish_all() -> None:
            for seq in range(1000):
                seq_of[pub.paho.publish("s24/t", f"s24-pub:{seq}", 1).mid] = seq
                if seq % 20 == 19:
                    time.sleep(0.1)

        publisher = threading.Thread(target=publish_all, daemon=True)
        publisher.start()
        wait_for(lambda: len(codes) >= 200, 2 * BOUND, 0.02, "200 PUBACKs")
        links = _forward_connections(n1, n2)
        assert links, "no forwarding connection from n1 to n2"
        for local, peer in links:
            _reset(n1, local, peer)
        wait_for(
            lambda: (now := _forward_connections(n1, n2)) and not set(now) & set(links),
            BOUND,
            0.2,
            "a new forwarding connection",
        )
        wait_for(lambda: len(codes) >= 400, 2 * BOUND, 0.02, "400 PUBACKs")
        net.cut(n1, n2)
        try:
            time.sleep(10.0)  # the stall itself: a fault's length, not a wait for a result
            stalled = len(codes)
        finally:
            net.heal()
        assert stalled < 1000, "nothing was held up: the stall did not stall the link"
        publisher.join(2 * BOUND)
        wait_for(lambda: len(codes) == 1000, 4 * BOUND, 0.2, "1,000 PUBACKs")
        assert sorted(seq_of.values()) == list(range(1000))
        refused = {seq_of[mid]: code for mid, code in codes.items() if code != 0}
        assert not refused, _why_refused(net, refused)
        sent = [f"s24-pub:{seq}" for seq in range(1000)]
        for s in subs:
            got = [m for m in _drain_n(s, 1000) if m.payload != b"probe"]
            assert [m.payload.decode() for m in got] == sent, s.client_id
            assert not any(m.dup for m in got), s.client_id
    finally:
        for c in [*subs, pub]:
            c.paho.disconnect()
            c.paho.loop_stop()
    wait_for(lambda: _all_up(net), 60, 0.5, "every node up after the stall")


# -- S25: an asymmetric partition held while one id moves across the cut ---------------

S25_ID = "s25-id"
S25_HOLD = 30.0  # the cut's length: a fault's duration, not a wait for a result


@dataclass
class S25:
    """What the S25 run saw: the takeover client's connections in order, samples of two
    live sessions that did not resolve (own connections, or ``session show`` rows), what
    each publisher had PUBACKed with success, and what the subscriber received."""

    takers: list[tuple[NsNode, Client]]
    doubles: list[str]
    acked: dict[str, list[int]]
    got: list[Received]
    failures: list[str]


def _online(net: NsCluster, node: NsNode, cid: str) -> set[tuple[str, int]] | None:
    status, rows = net.get(node, f"/api/v1/session/show?client_id={cid}")
    if status != 200:
        return None
    return {(r["node"], r["epoch"]) for r in rows if r["client_id"] == cid and r["online"]}


def _s25_take(node: NsNode) -> tuple[NsNode, Client]:
    """A clean 5.0 CONNECT of S25's id on ``node`` (accepted or not), subscribed to
    s25/id when accepted."""
    c = _client(node, S25_ID, version=5, reconnect=False).connect(expect_ok=False)
    if _live(c):
        c.subscribe("s25/id", 1)
    return node, c


@pytest.fixture(scope="module")
def s25(net: NsCluster) -> Iterator[S25]:
    """n1 <-> n3 cut, n2 sees both, for 30 s. A persistent subscriber (3.1.1,
    clean_session 0) on n2 holds s25/t; a publisher on each node sends QoS 1 to it,
    ``publisher:seq``, one after another; the client id s25-id (5.0, clean start 1, each
    connection subscribing to s25/id) starts on n1 and connects on n3, n1, n3, ... every
    5 s, the new connection taking the old one over across the cut. (A clean start: a
    persistent session cannot move across the cut with R = 1, its queue's node being
    down for the other side: the CONNECT is refused with 0x88, cluster/claims.py:118-120,
    the documented behaviour.) Every 0.2 s the test counts
    its live s25-id connections and each node's online rows in ``session show``; at the
    end of the cut every sample of two is polled until one of them ended (a DISCONNECT
    in flight) and recorded if neither does within the bound. Healed at the end."""
    n1, n2, n3 = net.nodes
    sub = _client(n2, "s25-sub", clean=False, reconnect=False).connect()
    sub.subscribe("s25/t", 1)
    takers = [_s25_take(n1)]
    pubs = [Publisher(_client(n, f"s25-p{n.k}", version=5).connect()) for n in net.nodes]
    for node in net.nodes:
        wait_for(lambda n=node: _record(n, "s25-sub") == (n2.name, ("s25/t",)), BOUND, 0.2)
        wait_for(lambda n=node: _record(n, S25_ID) == (n1.name, ("s25/id",)), BOUND, 0.2)
    acked: dict[str, list[int]] = {p.client.client_id: [] for p in pubs}
    failures: list[str] = []
    doubles: list[str] = []
    stop = threading.Event()

    def publish(p: Publisher) -> None:
        name = p.client.client_id
        seq = 0
        while not stop.is_set():
            try:
                codes = p.send("s25/t", f"{name}:{seq}")
            except AssertionError as exc:  # no PUBACK within the bound
                failures.append(f"{name}:{seq}: {exc}")
                return
            if codes == [0]:
                acked[name].append(seq)
            seq += 1
            time.sleep(0.05)

    suspects: list[tuple[str, Callable[[], bool]]] = []  # (what, still two)

    threads = [threading.Thread(target=publish, args=(p,), daemon=True) for p in pubs]
    net.cut(n1, n3)
    try:
        # (indirect probes through n2 may keep each side seeing the other up)
        for node in net.nodes:
            assert net.health(node) == 200, node.name
        for t in threads:
            t.start()
        start = time.monotonic()
        nxt = start + 5.0
        while time.monotonic() < start + S25_HOLD:
            if time.monotonic() >= nxt and len(takers) < 6:
                takers.append(_s25_take(n3 if len(takers) % 2 else n1))
                nxt += 5.0
            live = [c for _, c in takers if _live(c)]
            if len(live) > 1:
                suspects.append(
                    (
                        f"{len(live)} live connections of {S25_ID}",
                        lambda live=live: sum(map(_live, live)) > 1,
                    )
                )
            for node in net.nodes:
                rows = _online(net, node, S25_ID)
                if rows and len(rows) > 1:
                    suspects.append(
                        (
                            f"{node.name} lists {sorted(rows)} online",
                            lambda r=rows, n=node: len(r & (_online(net, n, S25_ID) or r)) > 1,
                        )
                    )
            time.sleep(0.2)
        for what, still in suspects:  # still cut: only the takeovers can end them
            try:
                wait_for(lambda still=still: not still(), BOUND, 0.2)
            except AssertionError:
                doubles.append(what)
    finally:
        stop.set()
        for t in threads:
            if t.ident is not None:
                t.join(2 * BOUND)
        _heal(net)
    got: list[Received] = []
    total = sum(len(v) for v in acked.values())

    def all_in() -> bool:
        got.extend(sub.drain(0.5))
        have = {m.payload.decode() for m in got}
        return all(f"{n}:{q}" in have for n, qs in acked.items() for q in qs)

    try:
        wait_for(all_in, 4 * BOUND, 0.1, f"the {total} acknowledged messages")
    except AssertionError as exc:
        failures.append(str(exc))
    got.extend(sub.drain(1.0))
    yield S25(takers, doubles, acked, got, failures)
    for c in [sub, *(c for _, c in takers), *(p.client for p in pubs)]:
        c.paho.disconnect()
        c.paho.loop_stop()


def test_s25_an_asymmetric_partition_never_holds_two_live_sessions(
    net: NsCluster, s25: S25
) -> None:
    """S25: while n1 and n3 cannot talk, the id moves between them (each CONNECT's
    registration goes through n2, the majority both sides share): no sample holds two
    live sessions of the id that stay so; after the heal exactly the last connection is
    live."""
    accepted = [c for _, c in s25.takers if c.connack.is_set() and not c.reason_code.is_failure]
    assert s25.doubles == []
    assert len(accepted) >= 3, f"only {len(accepted)} CONNECTs accepted"
    wait_for(lambda: sum(map(_live, accepted)) == 1, BOUND, 0.2, "one live connection")
    assert _live(accepted[-1])


def test_s25_no_acknowledged_message_is_lost_across_an_asymmetric_partition(
    s25: S25,
) -> None:
    """S25: each node's publisher kept sending QoS 1 to the persistent subscriber on n2
    through the cut: every message PUBACKed with success reached it, each publisher's in
    order, a repeat only with DUP = 1."""
    assert s25.failures == []
    for name, seqs in s25.acked.items():
        assert seqs, f"{name}: nothing acknowledged"
        mine = [m for m in s25.got if m.payload.decode().startswith(f"{name}:")]
        order = [int(m.payload.decode().split(":")[1]) for m in mine]
        first = list(dict.fromkeys(order))
        assert first == sorted(first), f"{name}: out of order: {order}"
        seen: set[int] = set()
        for m, q in zip(mine, order, strict=True):
            assert q not in seen or m.dup, f"{name}:{q} again without DUP"
            seen.add(q)
        assert set(seqs) <= seen, f"{name}: lost {sorted(set(seqs) - seen)}"


def test_s25_every_node_agrees_on_members_routes_and_owner_after_the_heal(
    net: NsCluster, s25: S25
) -> None:
    """S25, after the heal: every node lists the same members, all up; the same routes
    (the subscriber's and the moved id's records); and one owner of the id, the node of
    its last connection, in ``session show``."""
    names = {n.name for n in net.nodes}
    for node in net.nodes:
        assert net.states(node) == dict.fromkeys(names, "up"), node.name
    owner = next(n.name for n, c in reversed(s25.takers) if _live(c))
    for node in net.nodes:
        wait_for(lambda n=node: _owner(net, n, S25_ID) == [owner], BOUND, 0.2, node.name)
        wait_for(lambda n=node: _record(n, S25_ID) == (owner, ("s25/id",)), BOUND, 0.2, node.name)
        assert _record(node, "s25-sub") == (net.nodes[1].name, ("s25/t",)), node.name


def test_the_cluster_is_whole_at_the_end(net: NsCluster) -> None:
    assert _all_up(net)
