"""Overlapping subscriptions of one client: one Match per publish, and one retained copy
per SUBSCRIBE, with the merge rules of ``routing.model.Match``."""

from __future__ import annotations

import itertools

import pytest

from services.common.session_key import SessionKey
from services.listener.routing import Match, RetainedStore, SubOptions, SubscriptionTrie

A: SessionKey = ("", "a")
B: SessionKey = ("", "b")


def only(
    trie: SubscriptionTrie, topic: str, sid: SessionKey = A, publisher: SessionKey | None = None
) -> Match:
    """The one Match of ``sid`` for ``topic`` (fails if there are several)."""
    mine = [m for m in trie.match("", topic, publisher).normal if m.sid == sid]
    assert len(mine) == 1, mine
    return mine[0]


OVERLAP = [
    ("r/a", SubOptions(qos=0, sub_id=1)),
    ("r/+", SubOptions(qos=2)),
    ("r/#", SubOptions(qos=1, sub_id=3, retain_as_published=True)),
    ("#", SubOptions(qos=0, sub_id=1)),
]


@pytest.mark.parametrize("order", list(itertools.permutations(range(len(OVERLAP)))))
def test_merge_does_not_depend_on_subscription_order(order: tuple[int, ...]) -> None:
    """[MQTT-3.3.4-2] highest QoS, [MQTT-3.3.4-3] every identifier (each value once),
    Retain As Published if any asked, whatever the order the filters were added in."""
    trie = SubscriptionTrie()
    for i in order:
        trie.add(A, *OVERLAP[i])
    m = only(trie, "r/a")
    assert m.qos == 2
    assert sorted(m.sub_ids) == [1, 3]
    assert m.retain_as_published is True
    assert sorted(m.filters) == sorted(f for f, _ in OVERLAP)


def test_merge_into_a_wide_fan_out() -> None:
    """The overlapping subscriber is merged whichever table is copied first: here the
    wide one on ``r/a`` (the merge starts from the biggest table)."""
    trie = SubscriptionTrie()
    for i in range(50):
        trie.add(("", f"c{i}"), "r/a", SubOptions(qos=0))
    trie.add(A, "r/+", SubOptions(qos=1, sub_id=7))
    trie.add(A, "r/a", SubOptions(qos=0, sub_id=8))
    result = trie.match("", "r/a").normal
    assert len(result) == 51
    m = only(trie, "r/a")
    assert (m.qos, sorted(m.sub_ids)) == (1, [7, 8])


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ((None, None), []),
        ((None, 5), [5]),
        ((5, None), [5]),
        ((5, 5), [5]),
        ((5, 6), [5, 6]),
    ],
)
def test_sub_ids_of_every_subscription_that_has_one(
    ids: tuple[int | None, int | None], expected: list[int]
) -> None:
    """[MQTT-3.3.4-3]: a subscription without an identifier adds none, and does not hide
    the other's; the same value on two subscriptions appears once."""
    trie = SubscriptionTrie()
    trie.add(A, "r/+", SubOptions(qos=1, sub_id=ids[0]))
    trie.add(A, "r/#", SubOptions(qos=1, sub_id=ids[1]))
    assert sorted(only(trie, "r/x").sub_ids) == expected


@pytest.mark.parametrize("rap", list(itertools.product([False, True], repeat=2)))
def test_retain_as_published_if_any_asked(rap: tuple[bool, bool]) -> None:
    """[MQTT-3.3.1-12] [MQTT-3.3.1-13]: the rule ``Match`` documents (any)."""
    trie = SubscriptionTrie()
    trie.add(A, "r/+", SubOptions(qos=1, retain_as_published=rap[0]))
    trie.add(A, "r/#", SubOptions(qos=0, retain_as_published=rap[1]))
    assert only(trie, "r/x").retain_as_published is any(rap)


def test_no_local_drops_only_that_subscription_from_the_merge() -> None:
    """[MQTT-3.8.3-3]: the publisher's own copy is merged from its subscriptions without
    No Local only: their QoS, identifiers and Retain As Published, not the others'."""
    trie = SubscriptionTrie()
    trie.add(A, "r/#", SubOptions(qos=2, no_local=True, sub_id=1, retain_as_published=True))
    trie.add(A, "r/+", SubOptions(qos=0, sub_id=2))
    trie.add(A, "r/a", SubOptions(qos=1))
    own = only(trie, "r/a", publisher=A)
    assert (own.qos, own.sub_ids, own.retain_as_published) == (1, (2,), False)
    assert sorted(own.filters) == ["r/+", "r/a"]
    theirs = only(trie, "r/a", publisher=B)
    assert (theirs.qos, sorted(theirs.sub_ids), theirs.retain_as_published) == (2, [1, 2], True)


def test_no_local_on_every_matching_subscription_drops_the_publisher() -> None:
    trie = SubscriptionTrie()
    trie.add(A, "r/#", SubOptions(qos=2, no_local=True))
    trie.add(A, "r/+", SubOptions(qos=1, no_local=True))
    trie.add(B, "r/+", SubOptions(qos=1, no_local=True))
    assert [m.sid for m in trie.match("", "r/a", A).normal] == [B]
    assert only(trie, "r/a/b", A, publisher=B).qos == 2  # someone else publishes: A gets it


def test_shared_subscriptions_are_not_merged() -> None:
    """4.8.2: a shared subscription is its own delivery, beside the merged normal ones."""
    trie = SubscriptionTrie()
    trie.add(A, "$share/g/r/#", SubOptions(qos=2, sub_id=9))
    trie.add(A, "r/+", SubOptions(qos=0, sub_id=1))
    trie.add(A, "r/#", SubOptions(qos=1, sub_id=2))
    result = trie.match("", "r/a")
    (m,) = result.normal
    assert (m.qos, sorted(m.sub_ids)) == (1, [1, 2])
    (group,) = result.shared
    assert [(s.sid, s.opts.sub_id) for s in group.members] == [(A, 9)]


# -- retained messages of one SUBSCRIBE -----------------------------------------------------


@pytest.fixture
def store() -> RetainedStore[str]:
    s: RetainedStore[str] = RetainedStore()
    for topic in ("r/a", "r/a/b", "r/c", "$SYS/x", "other"):
        s.set("", topic, f"msg:{topic}")
    s.set("m", "r/a", "msg:m")
    return s


def test_match_many_sends_each_message_once_at_the_highest_qos(store: RetainedStore[str]) -> None:
    got = store.match_many("", [("r/+", 1), ("r/#", 0), ("r/a", 2)])
    assert sorted(got) == [("r/a", "msg:r/a", 2), ("r/a/b", "msg:r/a/b", 0), ("r/c", "msg:r/c", 1)]


def test_match_many_keeps_the_order_filters_find_messages_in(store: RetainedStore[str]) -> None:
    got = store.match_many("", [("r/c", 0), ("r/+", 1)])
    assert got[0] == ("r/c", "msg:r/c", 1)
    assert {t for t, _, _ in got} == {"r/a", "r/c"}


def test_match_many_applies_each_filters_rules(store: RetainedStore[str]) -> None:
    """No filter, no message; ``#`` skips ``$`` topics [MQTT-4.7.2-1]; mountpoints stay
    apart."""
    assert store.match_many("", []) == []
    assert {t for t, _, _ in store.match_many("", [("#", 0), ("+/x", 1)])} == {
        "r/a",
        "r/a/b",
        "r/c",
        "other",
    }
    assert store.match_many("m", [("r/#", 1), ("#", 2)]) == [("r/a", "msg:m", 2)]
