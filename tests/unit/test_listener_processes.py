"""Names of a node's listener processes (``listener.processes``): routes, admin addresses,
supervised children; and what treats a node's processes as one (shared groups, $SYS)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from services.common.metrics import SampleValue
from services.listener import systree
from services.listener.processes import (
    admin_address,
    child_name,
    forward_address,
    node_of,
    on_node,
    route_name,
)
from services.listener.routing.model import SubOptions
from services.listener.routing.shared import SharedPicker, SharedPolicy
from services.listener.routing.trie import SubscriptionTrie
from services.node.start import children


def test_process_zero_is_the_node_and_the_others_are_named_after_it() -> None:
    assert route_name("a@h", 0) == "a@h"
    assert route_name("a@h", 2) == "a@h/2"
    assert node_of("a@h/2") == "a@h" and node_of("a@h") == "a@h"
    assert on_node("a@h", "a@h") and on_node("a@h/1", "a@h")
    assert not on_node("a@h2", "a@h") and not on_node("a@h2/1", "a@h")
    assert not on_node("b@h/1", "a@h")


def test_admin_and_forward_addresses_differ_per_process_and_keep_process_zeros() -> None:
    sock = "unix:/var/lib/ternmq/run/listener.sock"
    assert admin_address(sock, 0) == sock
    assert admin_address(sock, 1) == "unix:/var/lib/ternmq/run/listener-1.sock"
    assert admin_address("unix:/run/t.d/listener", 3) == "unix:/run/t.d/listener-3"
    assert admin_address("127.0.0.1:9100", 2) == "127.0.0.1:9102"
    assert admin_address("[::1]:9100", 1) == "[::1]:9101"
    assert forward_address("127.0.0.1:0", 1) == "127.0.0.1:0"  # each takes a free port
    assert forward_address("10.0.0.1:7000", 1) == "10.0.0.1:7001"


def test_the_supervisor_starts_one_child_per_listener_process() -> None:
    specs = children(Path("node.conf"), 3)
    names = [s.name for s in specs]
    assert names == ["msgstore", "gossip", "registry", "listener", "listener-1", "listener-2"]
    assert [child_name(k) for k in range(3)] == names[3:]
    assert list(specs[5].argv[-2:]) == ["--process", "2"]
    assert [s.name for s in children(Path("node.conf"))] == names[:4]  # one: as before


def _group(nodes: list[str]) -> SubscriptionTrie:
    trie = SubscriptionTrie()
    for i, node in enumerate(nodes):
        opts = SubOptions(1, False, False, 0, 0, node, False)
        trie.add(("", f"c{i}"), "$share/g/t", opts)
    return trie


def test_prefer_local_counts_the_nodes_other_processes_as_local() -> None:
    trie = _group(["a@h/1", "b@h", "a@h2"])
    group = trie.match("", "t", ("", "pub")).shared[0]
    for policy, expected in ((SharedPolicy.PREFER_LOCAL, "c0"), (SharedPolicy.LOCAL_ONLY, "c0")):
        picker = SharedPicker(policy, "a@h", random.Random(1))
        for _ in range(20):
            member = picker.pick(group, lambda m: True)
            assert member is not None and member.sid == ("", expected)


def test_local_only_without_a_member_on_any_process_of_the_node_picks_none() -> None:
    trie = _group(["b@h", "b@h/1"])
    group = trie.match("", "t", ("", "pub")).shared[0]
    assert (
        SharedPicker(SharedPolicy.LOCAL_ONLY, "a@h", random.Random(1)).pick(group, lambda m: True)
        is None
    )


def test_sys_counts_of_several_processes_are_added_up() -> None:
    def source(value: float, extra: float) -> systree.Source:
        async def samples() -> list[SampleValue]:
            return [
                SampleValue("ternmq_sessions", {}, value, "gauge", "sessions"),
                SampleValue("ternmq_published_total", {"qos": "1"}, extra, "counter", "p"),
            ]

        return samples

    merged = asyncio.run(systree.summed([source(2, 10), source(3, 5)])())
    assert {(s.name, s.value) for s in merged} == {
        ("ternmq_sessions", 5.0),
        ("ternmq_published_total", 15.0),
    }
