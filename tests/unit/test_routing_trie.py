"""SubscriptionTrie: MQTT matching rules, shared groups, overlap merging, pruning."""

from __future__ import annotations

import pytest

from services.common.session_key import SessionKey
from services.listener.routing import (
    Match,
    SharedMember,
    SubOptions,
    SubscriptionTrie,
)

Q0 = SubOptions(qos=0)
Q1 = SubOptions(qos=1)
Q2 = SubOptions(qos=2)
A: SessionKey = ("", "a")
B: SessionKey = ("", "b")


def node_count(trie: SubscriptionTrie) -> int:
    """Nodes reachable in the trie's internals, to observe pruning."""
    count = 0
    stack = list(trie._roots.values())
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.children.values())
        stack.extend(n for n in (node.plus, node.hash) if n is not None)
    return count


def matched(trie: SubscriptionTrie, topic: str, mountpoint: str = "") -> set[str]:
    """Client ids reached through normal subscriptions."""
    return {m.sid[1] for m in trie.match(mountpoint, topic).normal}


def hits(topic_filter: str, topic: str) -> bool:
    trie = SubscriptionTrie()
    trie.add(A, topic_filter, Q0)
    return bool(trie.match("", topic).normal)


# MQTT 3.1.1 section 4.7.1 and 4.7.2, and the same examples in MQTT 5.0 section 4.7.
@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("sport/tennis/player1/#", "sport/tennis/player1", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
        ("sport/tennis/player1/#", "sport/tennis/player2", False),
        ("sport/#", "sport", True),
        ("#", "sport", True),
        ("#", "sport/tennis/player1", True),
        ("sport/tennis/+", "sport/tennis/player1", True),
        ("sport/tennis/+", "sport/tennis/player2", True),
        ("sport/tennis/+", "sport/tennis/player1/ranking", False),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),
        ("+", "sport", True),
        ("+/tennis/#", "sport/tennis/player1", True),
        ("sport/+/player1", "sport/tennis/player1", True),
        ("sport/+/player1", "sport/tennis/player2", False),
        ("+/+", "/finance", True),
        ("/+", "/finance", True),
        ("+", "/finance", False),
        ("#", "/finance", True),
        ("a//b", "a//b", True),
        ("a/+/b", "a//b", True),
        ("a/b", "a//b", False),
        ("/", "/", True),
        ("+/+", "/", True),
        ("+", "/", False),
        ("sport", "Sport", False),  # case sensitive [MQTT-4.7.3-4]
        ("sport/tennis", "sport/tennis/", False),
        ("sport/tennis/#", "sport/tennis/", True),
        # '$' topics [MQTT-4.7.2-1]
        ("#", "$SYS/monitor/Clients", False),
        ("+/monitor/Clients", "$SYS/monitor/Clients", False),
        ("$SYS/#", "$SYS/monitor/Clients", True),
        ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
        ("$SYS/#", "$SYS", True),
        ("+", "$SYS", False),
        ("a/#", "a/$b", True),  # '$' only matters in the first level
        ("a/+", "a/$b", True),
        ("$share", "$share", True),  # no slash: a plain filter
    ],
)
def test_spec_matching(topic_filter: str, topic: str, expected: bool) -> None:
    assert hits(topic_filter, topic) is expected


def test_add_replace_remove_and_len() -> None:
    trie = SubscriptionTrie()
    assert trie.add(A, "x/y", Q0) is True
    assert trie.add(A, "x/y", Q2) is False  # replaced [MQTT-3.8.4-3]
    assert trie.add(B, "x/y", Q1) is True
    assert len(trie) == 2
    assert trie.subscriptions_of(A) == {"x/y": Q2}
    (m,) = (m for m in trie.match("", "x/y").normal if m.sid == A)
    assert m.qos == 2
    assert trie.remove(A, "x/y") is True
    assert trie.remove(A, "x/y") is False
    assert trie.remove(A, "nope") is False
    assert len(trie) == 1
    assert matched(trie, "x/y") == {"b"}
    assert trie.subscriptions_of(A) == {}


def test_subscriptions_of_is_a_copy_and_items_lists_everything() -> None:
    trie = SubscriptionTrie()
    trie.add(A, "x", Q0)
    trie.add(A, "$share/g/x", Q1)
    trie.add(B, "y/#", Q2)
    subs = trie.subscriptions_of(A)
    subs.clear()
    assert trie.subscriptions_of(A) == {"x": Q0, "$share/g/x": Q1}
    assert sorted(trie.items()) == sorted([(A, "x", Q0), (A, "$share/g/x", Q1), (B, "y/#", Q2)])


def test_remove_all() -> None:
    trie = SubscriptionTrie()
    for f in ("a", "a/#", "+/b", "$share/g/a/b"):
        trie.add(A, f, Q1)
    trie.add(B, "a/b", Q1)
    assert trie.remove_all(A) == 4
    assert trie.remove_all(A) == 0
    assert len(trie) == 1
    result = trie.match("", "a/b")
    assert [m.sid for m in result.normal] == [B]
    assert result.shared == []


def test_mountpoints_are_separate_namespaces() -> None:
    trie = SubscriptionTrie()
    m1: SessionKey = ("m1", "c")
    m2: SessionKey = ("m2", "c")
    trie.add(m1, "#", Q0)
    trie.add(m2, "t", Q0)
    trie.add(A, "t", Q0)
    assert [m.sid for m in trie.match("m1", "t").normal] == [m1]
    assert [m.sid for m in trie.match("m2", "t").normal] == [m2]
    assert [m.sid for m in trie.match("", "t").normal] == [A]
    assert trie.match("m3", "t").normal == []
    # same client id in two mountpoints: two subscribers
    assert trie.subscriptions_of(m1) == {"#": Q0}
    assert trie.remove_all(m2) == 1
    assert trie.match("m2", "t").normal == []
    assert [m.sid for m in trie.match("m1", "t").normal] == [m1]


def test_match_result_carries_options() -> None:
    trie = SubscriptionTrie()
    opts = SubOptions(qos=1, retain_as_published=True, sub_id=7, node="n2")
    trie.add(A, "a/+", opts)
    (m,) = trie.match("", "a/b").normal
    assert m == Match(A, 1, "n2", True, (7,), ("a/+",))


def test_overlapping_subscriptions_merge_into_one_match() -> None:
    # [MQTT-3.3.4-2..5]: one copy, max QoS, every subscription identifier.
    trie = SubscriptionTrie()
    trie.add(A, "a/b", SubOptions(qos=0, sub_id=1, node="n1"))
    trie.add(A, "a/+", SubOptions(qos=2, sub_id=2, node="n1"))
    trie.add(A, "#", SubOptions(qos=1, node="n1"))
    trie.add(A, "a/#", SubOptions(qos=1, sub_id=1, retain_as_published=True, node="n1"))
    trie.add(B, "a/b", Q1)
    result = trie.match("", "a/b")
    by_sid = {m.sid: m for m in result.normal}
    assert len(result.normal) == 2
    a = by_sid[A]
    assert a.qos == 2
    assert sorted(a.sub_ids) == [1, 2]  # distinct ids
    assert a.retain_as_published is True
    assert a.node == "n1"
    assert sorted(a.filters) == ["#", "a/#", "a/+", "a/b"]
    assert by_sid[B] == Match(B, 1, "", False, (), ("a/b",))


def test_overlap_without_sub_ids_and_rap() -> None:
    trie = SubscriptionTrie()
    trie.add(A, "a", Q1)
    trie.add(A, "a/#", Q0)
    (m,) = trie.match("", "a").normal
    assert (m.qos, m.sub_ids, m.retain_as_published) == (1, (), False)


def test_no_local_skips_only_the_publishers_flagged_subscriptions() -> None:
    # [MQTT-3.8.3-3]
    trie = SubscriptionTrie()
    trie.add(A, "t/#", SubOptions(qos=2, no_local=True, sub_id=1))
    trie.add(A, "t/x", SubOptions(qos=0, sub_id=2))
    trie.add(B, "t/#", SubOptions(qos=1, no_local=True))
    # B publishes: its only subscription has No Local, A still gets the merged copy.
    by_sid = {m.sid: m for m in trie.match("", "t/x", publisher=B).normal}
    assert set(by_sid) == {A}
    assert by_sid[A].qos == 2
    # A publishes: only its subscription without No Local counts.
    by_sid = {m.sid: m for m in trie.match("", "t/x", publisher=A).normal}
    assert by_sid[A] == Match(A, 0, "", False, (2,), ("t/x",))
    assert by_sid[B].qos == 1
    # A publishes where only its No Local subscription matches.
    assert {m.sid for m in trie.match("", "t/y", publisher=A).normal} == {B}
    # without a publisher nothing is filtered
    assert {m.sid for m in trie.match("", "t/y").normal} == {A, B}
    # a publisher from another mountpoint is someone else
    other: SessionKey = ("m", "a")
    assert {m.sid for m in trie.match("", "t/y", publisher=other).normal} == {A, B}


def test_shared_groups_match_once_with_all_members() -> None:
    trie = SubscriptionTrie()
    trie.add(A, "$share/g1/s/+", SubOptions(qos=1, node="n1"))
    trie.add(B, "$share/g1/s/+", SubOptions(qos=2, node="n2"))
    trie.add(A, "$share/g2/s/#", Q0)
    trie.add(B, "$share/g1/s/x", Q0)  # same group name, other filter: other subscription
    trie.add(("", "c"), "s/x", Q0)
    result = trie.match("", "s/x")
    assert [m.sid for m in result.normal] == [("", "c")]
    groups = {(g.group, g.filter): g for g in result.shared}
    assert set(groups) == {("g1", "s/+"), ("g2", "s/#"), ("g1", "s/x")}
    g1 = groups["g1", "s/+"]
    assert g1.members == (
        SharedMember(A, SubOptions(qos=1, node="n1")),
        SharedMember(B, SubOptions(qos=2, node="n2")),
    )
    assert g1.share_filter == "$share/g1/s/+"
    assert groups["g2", "s/#"].members == (SharedMember(A, Q0),)
    assert trie.match("", "s/x/y").shared[0].filter == "s/#"


def test_shared_group_snapshot_is_reused_until_membership_changes() -> None:
    trie = SubscriptionTrie()
    trie.add(A, "$share/g/t", Q0)
    first = trie.match("", "t").shared[0]
    assert trie.match("", "t").shared[0] is first
    trie.add(B, "$share/g/t", Q1)
    second = trie.match("", "t").shared[0]
    assert second is not first
    assert [m.sid for m in second.members] == [A, B]
    assert second.token is first.token  # same live group
    trie.remove(A, "$share/g/t")
    assert [m.sid for m in trie.match("", "t").shared[0].members] == [B]
    trie.remove(B, "$share/g/t")
    assert trie.match("", "t").shared == []
    trie.add(A, "$share/g/t", Q0)
    assert trie.match("", "t").shared[0].token is not first.token  # a new group


def test_shared_subscriptions_obey_dollar_rule() -> None:
    trie = SubscriptionTrie()
    trie.add(A, "$share/g/#", Q0)
    trie.add(B, "$share/g/$SYS/#", Q0)
    assert [g.filter for g in trie.match("", "$SYS/x").shared] == ["$SYS/#"]
    assert [g.filter for g in trie.match("", "x").shared] == ["#"]


def test_shared_and_normal_subscriptions_of_one_client_are_independent() -> None:
    trie = SubscriptionTrie()
    trie.add(A, "t", Q0)
    trie.add(A, "$share/g/t", Q2)
    assert trie.subscriptions_of(A) == {"t": Q0, "$share/g/t": Q2}
    result = trie.match("", "t")
    assert [m.qos for m in result.normal] == [0]
    assert result.shared[0].members == (SharedMember(A, Q2),)
    assert trie.remove(A, "t") is True
    assert trie.match("", "t").normal == []
    assert len(trie.match("", "t").shared) == 1


def test_removal_prunes_every_empty_node() -> None:
    trie = SubscriptionTrie()
    filters = ["a/b/c", "a/+/c", "a/#", "+/+/#", "#", "/x//", "$share/g/a/b/c", "$SYS/+"]
    trie.add(B, "keep/me", Q0)
    baseline = node_count(trie)
    for f in filters:
        trie.add(A, f, Q1)
    assert node_count(trie) > baseline
    for f in reversed(filters):
        assert trie.remove(A, f)
    assert node_count(trie) == baseline
    trie.remove(B, "keep/me")
    assert node_count(trie) == 0
    assert trie._roots == {}
    assert trie._by_sid == {}


def test_partial_removal_keeps_shared_paths() -> None:
    trie = SubscriptionTrie()
    trie.add(A, "a/b/c", Q0)
    trie.add(B, "a/b", Q0)
    trie.add(B, "a/b/+", Q0)
    trie.remove(A, "a/b/c")
    assert matched(trie, "a/b") == {"b"}
    assert matched(trie, "a/b/c") == {"b"}
    trie.remove(B, "a/b")
    assert matched(trie, "a/b/c") == {"b"}
    assert node_count(trie) == 4  # root, a, b, +


def test_memory_does_not_grow_with_churn() -> None:
    trie = SubscriptionTrie()
    trie.add(B, "steady/#", Q0)
    sizes = []
    for round_ in range(3):
        for i in range(200):
            sid = ("", f"c{i}")
            trie.add(sid, f"r{round_}/{i}/+/#", Q1)
            trie.add(sid, f"$share/g{i % 3}/r/{i}", Q1)
        for i in range(200):
            assert trie.remove_all(("", f"c{i}")) == 2
        sizes.append(node_count(trie))
    assert sizes == [3, 3, 3]  # root, steady and its #
    assert len(trie) == 1


def test_many_subscriptions_match_exactly() -> None:
    trie = SubscriptionTrie()
    for i in range(10_000):
        trie.add(("", f"c{i}"), f"dev/{i}/temp", Q0)
    trie.add(A, "dev/+/temp", Q1)
    assert matched(trie, "dev/4242/temp") == {"c4242", "a"}
    assert matched(trie, "dev/4242/hum") == set()
    # wide fan-out on one node, plus an overlapping subscriber merged into it
    for i in range(1_000):
        trie.add(("", f"f{i}"), "all", Q0)
    trie.add(("", "f7"), "+", Q2)
    result = trie.match("", "all").normal
    assert len(result) == 1_000
    assert {m.sid[1]: m.qos for m in result}["f7"] == 2
