"""Leadership: rendezvous rings, majority rule, netsplit option, replica placement."""

from __future__ import annotations

import itertools

from services.registry.leadership import View, decide, replica_set, replicas, ring

MEMBERS = frozenset({"a@h", "b@h", "c@h"})
KEYS = [("", f"client-{i}") for i in range(3000)]


def view(self_node: str, live: set[str]) -> View:
    return View(self_node, MEMBERS, frozenset(live))


def test_ring_is_a_total_order_independent_of_input_order() -> None:
    key = ("mp", "c1")
    orders = {tuple(ring(key, perm)) for perm in itertools.permutations(sorted(MEMBERS))}
    assert len(orders) == 1
    assert sorted(orders.pop()) == sorted(MEMBERS)


def test_mountpoint_is_part_of_the_key() -> None:
    differs = sum(ring(("", f"c{i}"), MEMBERS) != ring(("m", f"c{i}"), MEMBERS) for i in range(50))
    assert differs > 10


def test_single_node_always_leads() -> None:
    v = View.single("n@h")
    assert v.has_majority
    for key in KEYS[:100]:
        d = decide(v, key)
        assert d.act and d.leader == "n@h"


def test_each_key_has_exactly_one_acting_member_when_all_are_live() -> None:
    for key in KEYS[:300]:
        acting = [m for m in MEMBERS if decide(view(m, set(MEMBERS)), key).act]
        assert acting == [ring(key, MEMBERS)[0]]


def test_leadership_is_spread_evenly() -> None:
    counts = {m: 0 for m in MEMBERS}
    for key in KEYS:
        counts[ring(key, MEMBERS)[0]] += 1
    for m, n in counts.items():
        assert 0.27 * len(KEYS) < n < 0.40 * len(KEYS), (m, counts)


def test_a_dead_leader_moves_only_its_own_keys() -> None:
    dead = "b@h"
    live = set(MEMBERS) - {dead}
    for key in KEYS[:500]:
        before = ring(key, MEMBERS)[0]
        after = decide(view("a@h", live), key).leader
        if before != dead:
            assert after == before
        else:
            assert after == ring(key, MEMBERS)[1]


def test_minority_refuses_unless_netsplit_registration_is_allowed() -> None:
    alone = view("c@h", {"c@h"})
    assert not alone.has_majority
    for key in KEYS[:50]:
        d = decide(alone, key)
        assert not d.act and d.leader is None and "majority" in d.reason
        allowed = decide(alone, key, allow_netsplit=True)
        assert allowed.act and allowed.leader == "c@h"


def test_follower_is_told_who_leads() -> None:
    key = KEYS[0]
    leader = ring(key, MEMBERS)[0]
    follower = next(m for m in sorted(MEMBERS) if m != leader)
    d = decide(view(follower, set(MEMBERS)), key)
    assert not d.act and d.leader == leader and leader in d.reason


def test_replicas_start_with_the_owner_and_follow_the_ring() -> None:
    key = KEYS[7]
    order = ring(key, MEMBERS)
    owner = order[2]
    assert replicas(key, owner, MEMBERS, 1) == [owner]
    assert replicas(key, owner, MEMBERS, 2) == [owner, order[0]]
    assert replicas(key, owner, MEMBERS, 5) == [owner, order[0], order[1]]


def test_a_replica_set_takes_members_that_are_up_and_never_shrinks_to_the_owner() -> None:
    five = MEMBERS | {"d@h", "e@h"}
    for key in KEYS[:200]:
        order = ring(key, five)
        owner = order[0]
        others = order[1:]
        assert replica_set(key, owner, five, five, 3) == [owner, *others[:2]]
        # the next on the ring is down: the one after it, which is up, takes its place
        up = five - {others[0]}
        assert replica_set(key, owner, five, up, 3) == [owner, others[1], others[2]]
        # one member up besides the owner: a set of two, healed later
        assert replica_set(key, owner, five, {owner, others[3]}, 3) == [owner, others[3]]
        # the owner alone is up (a one-way cut hid the rest): the set still names the
        # first of the ring, down, so the queue stays replicated and commits nothing alone
        assert replica_set(key, owner, five, {owner}, 3) == [owner, others[0]]
        # a cluster of one member, and R = 1: the owner alone
        assert replica_set(key, owner, {owner}, {owner}, 3) == [owner]
        assert replica_set(key, owner, five, five, 1) == [owner]
