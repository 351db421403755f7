"""Real partitions between cluster nodes (cluster-scenarios S9, S12, S25): three nodes in
network namespaces, their cluster links cut with blackhole routes while the test still reaches
every node on a separate client net (``tests/support/netns.py``).

- Symmetric: node 3 alone is the minority (/health 503); the majority keeps serving and
  takes node 3's client ids, and after the heal node 3's stale connection is ended and
  every node agrees again. (The minority's refusals with the options off are tested in
  ``test_cluster_membership``; this module runs with ``allow_register_during_netsplit``
  on.)
- One-way: node 3's packets are lost but it still hears the others: both sides end up
  seeing the other down; the same answers.
- Asymmetric: nodes 1 and 3 cannot talk, node 2 talks to both. Every node keeps a
  majority and serves; a client id taken over across the cut ends with one live
  connection once the cut heals.
- With ``allow_register_during_netsplit = on`` the minority registers tentatively; after
  the heal the majority's owner wins.

One namespace cluster serves the module; each test heals what it cut.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.clients import Client
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
    sets = {"allow_register_during_netsplit": "on"}
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


def test_the_cluster_is_whole_at_the_end(net: NsCluster) -> None:
    assert _all_up(net)
