"""SharedPicker: VerneMQ's shared_subscription_policy values plus round robin."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from services.common.session_key import SessionKey
from services.listener.routing import (
    SharedGroupMatch,
    SharedMember,
    SharedPicker,
    SharedPolicy,
    SubOptions,
    SubscriptionTrie,
)

LOCAL = "n1"


def member(name: str, node: str) -> SharedMember:
    return SharedMember(("", name), SubOptions(qos=1, node=node))


L1, L2 = member("l1", LOCAL), member("l2", LOCAL)
R1, R2 = member("r1", "n2"), member("r2", "n3")
ALL = (L1, R1, L2, R2)


def group(*members: SharedMember) -> SharedGroupMatch:
    return SharedGroupMatch("g", "t/#", members)


def online(*members: SharedMember) -> Callable[[SharedMember], bool]:
    sids = {m.sid for m in members}
    return lambda m: m.sid in sids


def everyone(m: SharedMember) -> bool:
    return True


def nobody(m: SharedMember) -> bool:
    return False


def picker(policy: SharedPolicy, seed: int = 1) -> SharedPicker:
    return SharedPicker(policy, LOCAL, random.Random(seed))


def picks(
    p: SharedPicker, g: SharedGroupMatch, is_online: Callable[[SharedMember], bool], n: int = 400
) -> Counter[str]:
    out: Counter[str] = Counter()
    for _ in range(n):
        m = p.pick(g, is_online)
        out["-" if m is None else m.sid[1]] += 1
    return out


def test_policy_values_are_the_config_strings() -> None:
    assert [p.value for p in SharedPolicy] == [
        "prefer_local",
        "local_only",
        "random",
        "round_robin",
    ]
    assert SharedPolicy("prefer_local") is SharedPolicy.PREFER_LOCAL


def test_prefer_local_uses_local_members_when_any() -> None:
    p = picker(SharedPolicy.PREFER_LOCAL)
    assert set(picks(p, group(*ALL), everyone)) == {"l1", "l2"}


def test_prefer_local_falls_back_to_remote_members() -> None:
    p = picker(SharedPolicy.PREFER_LOCAL)
    assert set(picks(p, group(R1, R2), everyone)) == {"r1", "r2"}


def test_prefer_local_prefers_online_among_local_but_keeps_offline_local() -> None:
    p = picker(SharedPolicy.PREFER_LOCAL)
    assert set(picks(p, group(*ALL), online(L2, R1))) == {"l2"}
    # VerneMQ semantics: an offline local member beats an online remote one.
    assert set(picks(p, group(*ALL), online(R1, R2))) == {"l1", "l2"}


def test_local_only_never_leaves_the_node() -> None:
    p = picker(SharedPolicy.LOCAL_ONLY)
    assert set(picks(p, group(*ALL), online(R1))) == {"l1", "l2"}
    assert picks(p, group(R1, R2), everyone) == Counter({"-": 400})


def test_random_is_spread_over_online_members_and_reproducible() -> None:
    g = group(*ALL)
    counts = picks(picker(SharedPolicy.RANDOM, seed=7), g, online(L1, R1, R2))
    assert set(counts) == {"l1", "r1", "r2"}
    assert min(counts.values()) > 80  # ~133 each
    assert counts == picks(picker(SharedPolicy.RANDOM, seed=7), g, online(L1, R1, R2))


def test_offline_members_get_messages_when_nobody_is_online() -> None:
    for policy in SharedPolicy:
        assert picker(policy).pick(group(L1, R1), nobody) in (L1, R1)


def test_empty_group_gives_none() -> None:
    for policy in SharedPolicy:
        assert picker(policy).pick(group(), everyone) is None


def test_round_robin_cycles_in_join_order_skipping_offline() -> None:
    p = picker(SharedPolicy.ROUND_ROBIN)
    g = group(*ALL)
    seq = [p.pick(g, everyone) for _ in range(8)]
    assert seq == [L1, R1, L2, R2, L1, R1, L2, R2]
    seq = [p.pick(g, online(R1, R2)) for _ in range(4)]
    assert seq == [R1, R2, R1, R2]
    seq = [p.pick(g, nobody) for _ in range(4)]  # plain rotation when all are offline
    assert len(set(map(id, seq))) == 4


def test_round_robin_state_is_per_group_and_survives_member_changes() -> None:
    trie = SubscriptionTrie()
    for m in (L1, R1, L2):
        trie.add(m.sid, "$share/g/t", m.opts)
    trie.add(L1.sid, "$share/h/t", L1.opts)
    p = picker(SharedPolicy.ROUND_ROBIN)

    def pick(group_name: str) -> str:
        (g,) = (g for g in trie.match("", "t").shared if g.group == group_name)
        m = p.pick(g, everyone)
        assert m is not None
        return m.sid[1]

    assert [pick("g"), pick("h"), pick("g")] == ["l1", "l1", "r1"]
    trie.add(R2.sid, "$share/g/t", R2.opts)  # joins at the end; cursor continues
    assert [pick("g") for _ in range(4)] == ["l2", "r2", "l1", "r1"]


def test_round_robin_state_dies_with_the_group() -> None:
    trie = SubscriptionTrie()
    trie.add(L1.sid, "$share/g/t", L1.opts)
    trie.add(R1.sid, "$share/g/t", R1.opts)
    p = picker(SharedPolicy.ROUND_ROBIN)
    first = p.pick(trie.match("", "t").shared[0], everyone)
    assert first is not None and first.sid == L1.sid
    old = trie.match("", "t").shared[0].token
    assert old.cursor == 1
    trie.remove(L1.sid, "$share/g/t")
    trie.remove(R1.sid, "$share/g/t")
    trie.add(L1.sid, "$share/g/t", L1.opts)
    trie.add(R1.sid, "$share/g/t", R1.opts)
    group_again = trie.match("", "t").shared[0]
    assert group_again.token is not old
    again = p.pick(group_again, everyone)  # a new group starts at its first member
    assert again is not None and again.sid == L1.sid


@pytest.mark.parametrize("policy", list(SharedPolicy))
def test_exclude_removes_failed_members(policy: SharedPolicy) -> None:
    p = picker(policy)
    g = group(*ALL)
    tried: set[SessionKey] = set()
    for _ in range(len(ALL)):
        m = p.pick(g, everyone, exclude=tried)
        if m is None:
            break
        assert m.sid not in tried
        tried.add(m.sid)
    assert p.pick(g, everyone, exclude=tried) is None
    expected = 4 if policy in (SharedPolicy.RANDOM, SharedPolicy.ROUND_ROBIN) else 2
    if policy is SharedPolicy.PREFER_LOCAL:
        expected = 4  # once the local members are excluded, remote ones remain
    assert len(tried) == expected
