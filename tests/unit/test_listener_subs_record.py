"""A session's subscription record in gossip: what another node's router learns of it."""

from __future__ import annotations

from services.listener import convert
from services.listener.routing.model import SubOptions
from services.listener.routing.trie import SubscriptionTrie


def test_the_record_carries_node_and_persistence_to_every_filter() -> None:
    subs = {
        "a/#": SubOptions(1, sub_id=7, node="n1", persistent=True),
        "$share/g/b": SubOptions(2, no_local=True, retain_handling=2, node="n1", persistent=True),
    }
    back = convert.subs_from_pb(convert.subs_to_pb("n1", subs))
    assert back == subs
    clean = {"c": SubOptions(0, node="n1")}
    assert convert.subs_from_pb(convert.subs_to_pb("n1", clean)) == clean


def test_options_of_a_session_without_copying_its_filters() -> None:
    trie = SubscriptionTrie()
    assert trie.options_of(("", "s")) is None
    trie.add(("", "s"), "x/+", SubOptions(1, node="n2", persistent=True))
    opts = trie.options_of(("", "s"))
    assert opts is not None and (opts.node, opts.persistent) == ("n2", True)
    trie.remove_all(("", "s"))
    assert trie.options_of(("", "s")) is None
