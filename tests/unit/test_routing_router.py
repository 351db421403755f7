"""The routing seam: for each matched session, deliver now, append to its queue first, or
forward to the node it lives on."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from services.common.session_key import SessionKey
from services.listener.routing.model import SubOptions
from services.listener.routing.router import Router
from services.listener.routing.shared import SharedPolicy
from services.listener.session.messages import Message, OutboundMessage, Shared

NODE = "n1@127.0.0.1"
FAR = "n2@127.0.0.1"


@dataclass
class Target:
    persistent: bool = False
    got: list[OutboundMessage] = field(default_factory=list)

    def deliver(self, out: OutboundMessage) -> None:
        self.got.append(out)


@dataclass
class Sink:
    """Records the router's decisions in order."""

    calls: list[tuple[object, ...]] = field(default_factory=list)
    tickets: list[Shared | None] = field(default_factory=list)  # per deliver or forward

    def deliver(self, target: Target, out: OutboundMessage, ctx: str) -> None:
        self.calls.append(("deliver", target, out.qos, out.retain, out.sub_ids, ctx))
        self.tickets.append(out.shared)

    def append(
        self,
        key: SessionKey,
        target: Target | None,
        msg: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        ctx: str,
    ) -> None:
        self.calls.append(("append", key, target, qos, retain, sub_ids, ctx))

    def forward(
        self,
        node: str,
        key: SessionKey,
        msg: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        ctx: str,
        shared: Shared | None,
    ) -> None:
        self.calls.append(("forward", key, node, qos, retain, sub_ids, ctx))
        self.tickets.append(shared)

    def no_member(self, msg: Message, share_filter: str) -> None:
        self.calls.append(("no_member", share_filter))


def msg(topic: str = "a/b", qos: int = 1, retain: bool = False, payload: bytes = b"x") -> Message:
    return Message("m1", topic, payload, qos, retain, "pub", "", 0.0)


def router(
    policy: SharedPolicy = SharedPolicy.PREFER_LOCAL, upgrade: bool = False
) -> Router[Target]:
    return Router(NODE, policy, upgrade, random.Random(7))


def opts(qos: int, **kw: object) -> SubOptions:
    return SubOptions(qos, node=NODE, **kw)  # type: ignore[arg-type]


def test_online_clean_session_is_delivered_directly() -> None:
    r, sink, t = router(), Sink(), Target(persistent=False)
    r.targets[("", "c")] = t
    r.subscribe(("", "c"), "a/#", opts(1))
    assert r.route(msg(qos=1), sink, "ctx")
    assert sink.calls == [("deliver", t, 1, False, (), "ctx")]


def test_qos1_to_an_online_persistent_session_goes_through_its_queue() -> None:
    r, sink, t = router(), Sink(), Target(persistent=True)
    r.targets[("", "p")] = t
    r.subscribe(("", "p"), "a/b", opts(2))
    r.route(msg(qos=1), sink, "ctx")
    assert sink.calls == [("append", ("", "p"), t, 1, False, (), "ctx")]


def test_qos0_to_an_online_persistent_session_is_delivered_directly() -> None:
    r, sink, t = router(), Sink(), Target(persistent=True)
    r.targets[("", "p")] = t
    r.subscribe(("", "p"), "a/b", opts(1))
    r.route(msg(qos=0), sink, None)
    assert sink.calls == [("deliver", t, 0, False, (), None)]


def test_a_session_with_no_target_here_is_appended_whatever_the_qos() -> None:
    r, sink = router(), Sink()
    r.subscribe(("", "off"), "a/+", opts(0))
    r.route(msg(qos=0), sink, None)
    assert sink.calls == [("append", ("", "off"), None, 0, False, (), None)]


def test_qos_is_capped_by_the_subscription_unless_upgraded() -> None:
    for upgrade, expected in ((False, 1), (True, 2)):
        r, sink, t = router(upgrade=upgrade), Sink(), Target()
        r.targets[("", "c")] = t
        r.subscribe(("", "c"), "a/b", opts(2))
        r.route(msg(qos=1), sink, None)
        assert sink.calls[0][2] == expected


def test_retain_flag_kept_only_with_retain_as_published() -> None:
    r, sink, t, u = router(), Sink(), Target(), Target()
    r.targets[("", "rap")] = t
    r.targets[("", "plain")] = u
    r.subscribe(("", "rap"), "a/b", opts(1, retain_as_published=True))
    r.subscribe(("", "plain"), "a/b", opts(1))
    r.route(msg(retain=True), sink, None)
    flags = {call[1] is t: call[3] for call in sink.calls}
    assert flags == {True: True, False: False}


def test_nothing_matched_is_reported() -> None:
    r, sink = router(), Sink()
    assert not r.route(msg(), sink, None)
    assert sink.calls == []


def test_a_shared_group_gets_one_copy_and_prefers_online_members() -> None:
    r, sink, t = router(), Sink(), Target()
    r.targets[("", "on")] = t
    r.subscribe(("", "on"), "$share/g/a/b", opts(1, sub_id=4))
    r.subscribe(("", "off"), "$share/g/a/b", opts(1))
    for _ in range(20):
        r.route(msg(), sink, None)
    assert sink.calls == [("deliver", t, 1, False, (4,), None)] * 20


def test_local_only_group_without_a_local_member_reports_no_member() -> None:
    r, sink = router(SharedPolicy.LOCAL_ONLY), Sink()
    r.subscribe(("", "far"), "$share/g/a/b", SubOptions(1, node="n2@127.0.0.1"))
    r.route(msg(), sink, None)
    assert sink.calls == [("no_member", "$share/g/a/b")]


def test_a_session_on_another_node_is_forwarded_there_not_queued_here() -> None:
    r, sink = router(), Sink()
    r.replicate(("", "far"), {"a/#": SubOptions(1, node=FAR, sub_id=3)})
    r.replicate(("", "old"), {"a/b": SubOptions(0)})  # written before nodes were named
    r.route(msg(qos=1), sink, "ctx")
    assert sorted(sink.calls, key=str) == [
        ("append", ("", "old"), None, 0, False, (), "ctx"),
        ("forward", ("", "far"), FAR, 1, False, (3,), "ctx"),
    ]


def test_a_remote_shared_member_counts_as_reachable() -> None:
    r, sink = router(SharedPolicy.RANDOM), Sink()
    r.replicate(("", "far"), {"$share/g/a/b": SubOptions(1, node=FAR)})
    r.subscribe(("", "off"), "$share/g/a/b", opts(1))  # here, but offline
    for _ in range(20):
        r.route(msg(), sink, None)
    assert {c[0] for c in sink.calls} == {"forward"}


def test_a_shared_copy_of_qos_1_carries_its_group_and_a_qos_0_one_does_not() -> None:
    r, sink, t = router(), Sink(), Target()
    r.targets[("", "on")] = t
    r.subscribe(("", "on"), "$share/g/a/b", opts(1))
    r.subscribe(("", "plain"), "a/b", opts(1))
    r.targets[("", "plain")] = Target()
    r.route(msg(qos=1), sink, None)
    r.route(msg(qos=0), sink, None)
    shared = [(c[1], tk) for c, tk in zip(sink.calls, sink.tickets, strict=True) if c[1] is t]
    assert [tk.share if tk else None for _t, tk in shared] == ["$share/g/a/b", None]
    plain = [tk for c, tk in zip(sink.calls, sink.tickets, strict=True) if c[1] is not t]
    assert plain == [None, None]  # not a group's copy


def test_a_lost_shared_copy_goes_to_a_member_that_did_not_lose_it_or_to_none() -> None:
    r, sink = router(SharedPolicy.RANDOM), Sink()
    members = {("", c): Target() for c in ("m1", "m2", "m3")}
    for key, t in members.items():
        r.targets[key] = t
        r.subscribe(key, "$share/g/a/#", opts(1))
    excluded: frozenset[SessionKey] = frozenset()
    chosen = []
    for _ in members:
        to = r.reroute(msg(), "$share/g/a/#", excluded, sink, None)
        assert to is not None and to not in excluded
        ticket = sink.tickets[-1]
        assert ticket is not None and ticket.excluded == excluded  # carried on
        chosen.append(to)
        excluded |= {to}
    assert set(chosen) == set(members)
    assert r.reroute(msg(), "$share/g/a/#", excluded, sink, None) is None
    assert r.reroute(msg(), "$share/other/a/#", frozenset(), sink, None) is None
    assert sink.calls[-2:] == [("no_member", "$share/g/a/#"), ("no_member", "$share/other/a/#")]


@given(st.sets(st.sampled_from(["n2@h", "n3@h", "n3@h/1"]), max_size=3))
def test_members_on_nodes_seen_down_are_picked_only_when_no_other_is_left(
    down_routes: set[str],
) -> None:
    r, sink = router(SharedPolicy.RANDOM), Sink()
    routes = ["n2@h", "n3@h", "n3@h/1"]
    for k, route in enumerate(routes):
        r.replicate(("", f"m{k}"), {"$share/g/t": SubOptions(1, node=route)})
    r.down = frozenset(route.split("/")[0] for route in down_routes)
    for _ in range(30):
        r.route(msg("t"), sink, None)
    picked = {c[2] for c in sink.calls}
    up = {route for route in routes if route.split("/")[0] not in r.down}
    assert picked <= (up or set(routes))


def test_replica_updates_are_ignored_for_a_session_online_here() -> None:
    r = router()
    r.targets[("", "c")] = Target()
    r.subscribe(("", "c"), "mine", opts(1))
    r.replicate(("", "c"), None)  # a stale echo saying it has none
    assert set(r.trie.subscriptions_of(("", "c"))) == {"mine"}
    r.replicate(("", "other"), {"x/#": opts(1)})
    assert set(r.trie.subscriptions_of(("", "other"))) == {"x/#"}
    r.replicate(("", "other"), None)
    assert r.trie.subscriptions_of(("", "other")) == {}


def test_retained_for_a_new_subscription_but_not_a_shared_one() -> None:
    r = router()
    r.retain(msg("a/b", qos=2, retain=True))
    r.retain(msg("a/c", qos=0, retain=True))
    got = r.retained_for(("", "s"), [("a/+", 1)], (9,))
    assert sorted((o.message.topic, o.qos, o.retain, o.sub_ids) for o in got) == [
        ("a/b", 1, True, (9,)),
        ("a/c", 0, True, (9,)),
    ]
    assert r.retained_for(("", "s"), [("$share/g/a/+", 1)], ()) == []
    # overlapping filters of one SUBSCRIBE: one copy each, at the highest QoS
    both = r.retained_for(("", "s"), [("a/b", 0), ("a/+", 2)], ())
    assert sorted((o.message.topic, o.qos) for o in both) == [("a/b", 2), ("a/c", 0)]
    r.retain(msg("a/b", payload=b"", retain=True))  # an empty payload clears it
    assert [o.message.topic for o in r.retained_for(("", "s"), [("a/+", 1)], ())] == ["a/c"]


def test_keep_only_forgets_what_the_replica_lost_but_not_online_sessions() -> None:
    r = router()
    r.targets[("", "on")] = Target()
    r.subscribe(("", "on"), "a", opts(0))
    r.subscribe(("", "gone"), "a", opts(0))
    r.subscribe(("", "kept"), "a", opts(0))
    r.retain(msg("t1", retain=True))
    r.retain(msg("t2", retain=True))
    r.keep_only([("", "kept")], [("", "t2")])
    assert {k for k, _f, _o in r.trie.items()} == {("", "on"), ("", "kept")}
    assert [t for _m, t, _x in r.retained] == ["t2"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "d"]),  # client
            st.sampled_from(["t/1", "t/+", "#", "t/#", "$share/g/t/1"]),
            st.integers(0, 2),  # subscription qos
        ),
        max_size=12,
    ),
    st.sets(st.sampled_from(["a", "b", "c", "d"])),  # online here
    st.sets(st.sampled_from(["a", "b", "c", "d"])),  # persistent
    st.sets(st.sampled_from(["a", "b", "c", "d"])),  # living on another node
    st.integers(0, 2),  # publish qos
)
def test_every_copy_is_delivered_appended_or_forwarded_by_the_rule(
    subs: list[tuple[str, str, int]],
    online: set[str],
    persistent: set[str],
    remote: set[str],
    qos: int,
) -> None:
    """Each session the publish reaches gets exactly one decision, and it is the rule:
    deliver iff it has a target here and (QoS 0 or not persistent); else forward iff it
    lives on another node; else append."""
    r, sink = router(), Sink()
    remote -= online  # a session online here lives here
    targets = {c: Target(persistent=c in persistent) for c in online}
    for c, t in targets.items():
        r.targets[("", c)] = t
    for c, f, q in subs:
        node = FAR if c in remote else NODE
        r.subscribe(("", c), f, SubOptions(q, node=node))
    r.route(msg("t/1", qos=qos), sink, None)
    seen: list[str] = []
    for call in sink.calls:
        if call[0] == "deliver":
            client = next(c for c, t in targets.items() if t is call[1])
            assert call[2] == 0 or not targets[client].persistent
        elif call[0] == "forward":
            key = call[1]
            assert isinstance(key, tuple)
            client = key[1]
            assert client in remote and call[2] == FAR
        else:
            assert call[0] == "append"
            key = call[1]
            assert isinstance(key, tuple)
            client = key[1]
            target = call[2]
            assert client not in remote
            assert target is targets.get(client)
            assert target is None or (call[3] > 0 and targets[client].persistent)
        seen.append(client)
    normal = {c for c, f, _q in subs if not f.startswith("$share/")}
    shared_members = {c for c, f, _q in subs if f.startswith("$share/")}
    expected_copies = len(normal) + (1 if shared_members else 0)
    assert len(seen) == expected_copies
    assert set(seen) >= normal


def test_another_nodes_record_of_an_online_session_is_held_back_and_reported() -> None:
    """Both sides of a healed partition registered the id: the listener holding it
    online hears of the other side's record (True: write ours again) and keeps it
    aside, to route by once the session has left here."""
    r, key = router(), ("", "c")
    r.targets[key] = Target(persistent=True)
    r.subscribe(key, "a/#", opts(1))
    assert not r.replicate(key, {"a/#": opts(1)}), "our own record echoed back"
    theirs = {"b/#": SubOptions(1, node="other@h")}
    assert r.replicate(key, theirs)
    assert r.trie.subscriptions_of(key) == {"a/#": opts(1)}, "online here: ours stand"
    assert r.replicate(key, None), "a deletion of what is here"
    assert not r.replicate(key, {"a/#": opts(1)}) and key not in r.held_back
    assert r.replicate(key, theirs)
    del r.targets[key]
    r.released(key)
    assert r.trie.subscriptions_of(key) == theirs, "gone from here: the replica routes"
    r.released(key)  # nothing held back any more
    assert r.trie.subscriptions_of(key) == theirs
