"""The cluster shell's pure parts: the address book, the wire forms, the registry's view."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from services.common.cluster_view import ClusterView
from services.common.peer.identity import Identity
from services.gossip.cluster import address_book as ab
from services.gossip.cluster import wire
from services.gossip.cluster.node import ClusterNode
from services.gossip.membership import members as ml
from services.gossip.membership.messages import (
    Ack,
    Alive,
    Dead,
    Gossip,
    Nack,
    Ping,
    PingReq,
    Suspect,
)
from services.pb import cluster_pb2

entries = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.builds(ab.Entry, st.sampled_from(["h:1", "h:2", "h:3"]), st.integers(0, 3)),
)


@given(entries, entries, entries)
def test_the_address_book_merges_as_a_semilattice(
    x: dict[str, ab.Entry], y: dict[str, ab.Entry], z: dict[str, ab.Entry]
) -> None:
    assert ab.merge(x, y) == ab.merge(y, x)
    assert ab.merge(ab.merge(x, y), z) == ab.merge(x, ab.merge(y, z))
    assert ab.merge(x, x) == x


def test_a_new_incarnation_moves_a_node_to_its_new_address() -> None:
    book = ab.put({}, "n1", ab.Entry("h:1", 5))
    assert ab.put(book, "n1", ab.Entry("h:9", 4))["n1"].address == "h:1"  # older: ignored
    assert ab.put(book, "n1", ab.Entry("h:9", 6))["n1"].address == "h:9"


def test_every_detector_message_survives_the_wire() -> None:
    rumours = (Alive("a", 1), Suspect("b", 2, "a"), Dead("c", 3, "b"))
    for m in (
        Ping("a", 7, 1, "b", rumours),
        Ack("b", 8, 1, rumours),
        Nack("c", 9, 2, ()),
        PingReq("a", 7, 3, "c", rumours),
        Gossip("a", 7, rumours),
    ):
        pb = cluster_pb2.DetectorMessage.FromString(wire.message_to_pb(m).SerializeToString())
        assert wire.message_from_pb(pb) == m


def test_bad_messages_from_a_peer_are_refused_not_passed_on() -> None:
    for pb in (
        cluster_pb2.DetectorMessage(kind=9, src="a"),
        cluster_pb2.DetectorMessage(kind=1, src=""),
        cluster_pb2.DetectorMessage(kind=5, src="a", rumours=[cluster_pb2.Rumour(state=7)]),
    ):
        try:
            wire.message_from_pb(pb)
        except wire.WireError:
            continue
        raise AssertionError(f"accepted {pb}")
    bad = cluster_pb2.MemberState(records=[cluster_pb2.MemberRecord(node="a", version=0)])
    try:
        wire.state_from_pb(bad)
    except wire.WireError:
        return
    raise AssertionError("accepted a member record with version 0")


def test_a_member_state_survives_the_wire() -> None:
    m = ml.leave(ml.join(ml.join(ml.empty(), "b"), "a"), "b")
    book = {"a": ab.Entry("h:1", 3), "b": ab.Entry("h:2", 4)}
    assert wire.state_from_pb(wire.state_to_pb(m, book)) == (m, book)


def test_the_registry_serves_only_joined_and_in_the_majority() -> None:
    alone = ClusterView.alone("n1")
    assert alone.serving
    split = ClusterView(frozenset({"n1", "n2", "n3"}), frozenset({"n1"}), False, True)
    assert not split.serving
    assert split.refusal() == "netsplit: 1 of 3 members reachable (n2, n3 down)"
    joining = ClusterView(frozenset({"n1"}), frozenset({"n1"}), True, False)
    assert not joining.serving and joining.refusal() == "not joined to the cluster yet"


def test_discovery_joins_what_it_finds_or_starts_the_cluster(tmp_path: Path) -> None:
    first = ClusterNode(Identity("a", 1), "c", (), tmp_path / "a", discovering=True)
    assert not first.joined  # it has not looked yet
    first.discovered({"a": "127.0.0.1:1"})  # nobody else registered: it starts the cluster
    assert first.joined
    second = ClusterNode(Identity("b", 2), "c", (), tmp_path / "b", discovering=True)
    second.discovered({"a": "127.0.0.1:1", "b": "127.0.0.1:2"})
    assert not second.joined and second.seeds == ("127.0.0.1:1",)  # joins a, through seeds
    static = ClusterNode(Identity("s", 3), "c", (), tmp_path / "s")
    assert static.joined  # no seeds and no discovery: alone from the start
