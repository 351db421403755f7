"""Property tests: the routing structures agree with brute-force references.

The reference matcher translates a filter into a regular expression, an approach
unrelated to the level-by-level walks under test, so a shared misunderstanding of the
rules is unlikely to hide.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.session_key import SessionKey
from services.listener.mqtt.topics import parse_shared
from services.listener.routing import (
    RetainedStore,
    SubOptions,
    SubscriptionTrie,
    topic_matches,
)

ROUTING_DIR = Path(__file__).resolve().parents[2] / "services" / "listener" / "routing"


def ref_match(topic_filter: str, topic: str) -> bool:
    if topic.startswith("$") and topic_filter[0] in "+#":
        return False
    levels = topic_filter.split("/")
    tail = ""
    if levels[-1] == "#":
        levels.pop()
        tail = "(?:/.*)?" if levels else ".*"
    body = "/".join("[^/]*" if lv == "+" else re.escape(lv) for lv in levels)
    return re.fullmatch(body + tail, topic, re.DOTALL) is not None


def nonempty(s: str) -> bool:
    return s != ""


topics = st.lists(st.sampled_from(["a", "b", "", "$s"]), min_size=1, max_size=4).map("/".join)
topics = topics.filter(nonempty)
# Few distinct levels and subscribers, so that overlaps are frequent.
filters = st.tuples(
    st.lists(st.sampled_from(["a", "a", "b", "", "+", "+", "$s"]), max_size=3), st.booleans()
).map(lambda t: "/".join(t[0] + ["#"] if t[1] else t[0]))
filters = filters.filter(nonempty)
sids = st.sampled_from([("", "c1"), ("", "c2"), ("m", "c1")])
opts = st.builds(
    SubOptions,
    qos=st.integers(0, 2),
    no_local=st.booleans(),
    retain_as_published=st.booleans(),
    sub_id=st.sampled_from([None, 1, 2]),
    node=st.just("n"),
)


@dataclass(frozen=True)
class Add:
    sid: SessionKey
    filter: str
    opts: SubOptions


@dataclass(frozen=True)
class Remove:
    index: int  # of an earlier subscription, modulo the live ones


@dataclass(frozen=True)
class RemoveAll:
    sid: SessionKey


groups = st.sampled_from([None, None, None, "g", "h"])
adds = st.builds(
    lambda sid, f, g, o: Add(sid, f if g is None else f"$share/{g}/{f}", o),
    sids,
    filters,
    groups,
    opts,
)
removes = st.builds(Remove, st.integers(0, 50))
remove_alls = st.builds(RemoveAll, sids)
# Mostly adds (one_of would weigh the three kinds equally and keep the trie near empty).
op = st.sampled_from([adds] * 6 + [removes] * 2 + [remove_alls]).flatmap(lambda s: s)
ops = st.lists(op, min_size=6, max_size=40)

Model = dict[tuple[SessionKey, str], SubOptions]


def apply(trie: SubscriptionTrie, model: Model, op: Add | Remove | RemoveAll) -> None:
    if isinstance(op, Add):
        assert trie.add(op.sid, op.filter, op.opts) == ((op.sid, op.filter) not in model)
        model[op.sid, op.filter] = op.opts
    elif isinstance(op, Remove):
        if model:
            sid, f = list(model)[op.index % len(model)]
            del model[sid, f]
            assert trie.remove(sid, f) is True
            assert trie.remove(sid, f) is False
    else:
        mine = [k for k in model if k[0] == op.sid]
        for k in mine:
            del model[k]
        assert trie.remove_all(op.sid) == len(mine)


def expected_match(
    model: Model, mountpoint: str, topic: str, publisher: SessionKey | None
) -> tuple[dict[SessionKey, tuple[int, frozenset[int], bool, frozenset[str]]], set[object]]:
    normal: dict[SessionKey, tuple[int, frozenset[int], bool, frozenset[str]]] = {}
    shared: dict[tuple[str, str], set[tuple[SessionKey, SubOptions]]] = {}
    for (sid, full), o in model.items():
        group, f = parse_shared(full)
        if sid[0] != mountpoint or not ref_match(f, topic):
            continue
        if group is not None:
            shared.setdefault((group, f), set()).add((sid, o))
            continue
        if sid == publisher and o.no_local:
            continue
        ids = frozenset(() if o.sub_id is None else (o.sub_id,))
        qos, prev_ids, rap, fs = normal.get(sid, (0, frozenset(), False, frozenset()))
        normal[sid] = (
            max(qos, o.qos),
            prev_ids | ids,
            rap or o.retain_as_published,
            fs | {full},
        )
    return normal, {(g, f, frozenset(ms)) for (g, f), ms in shared.items()}


def node_count(trie: SubscriptionTrie) -> int:
    count = 0
    stack = list(trie._roots.values())
    while stack:
        node = stack.pop()
        count += 1
        stack.extend(node.children.values())
        stack.extend(n for n in (node.plus, node.hash) if n is not None)
    return count


def instantiate(topic_filter: str, data: st.DataObject) -> str:
    """A topic the filter probably matches, so overlaps and No Local get exercised."""
    out: list[str] = []
    for level in parse_shared(topic_filter)[1].split("/"):
        if level == "+":
            out.append(data.draw(st.sampled_from(["a", "b", ""])))
        elif level == "#":
            out.extend(data.draw(st.lists(st.sampled_from(["a", "b", ""]), max_size=2)))
        else:
            out.append(level)
    return "/".join(out) or "a"


@settings(max_examples=200, deadline=None)
@given(ops, st.lists(topics, max_size=3), st.data())
def test_trie_matches_brute_force(
    operations: list[Add | Remove | RemoveAll], published: list[str], data: st.DataObject
) -> None:
    trie = SubscriptionTrie()
    model: Model = {}
    for op in operations:
        apply(trie, model, op)
    assert len(trie) == len(model)
    live = sorted(model)
    if live:
        targets = data.draw(st.lists(st.sampled_from(live), max_size=4))
        published = published + [instantiate(f, data) for _, f in targets]
    # often a subscriber publishes, so No Local matters
    subscribers: list[SessionKey | None] = [sid for sid, _ in live]
    publisher = data.draw(st.one_of(st.none(), sids, st.sampled_from(subscribers or [None])))
    for mountpoint in ("", "m"):
        for topic in published:
            result = trie.match(mountpoint, topic, publisher=publisher)
            got = {
                m.sid: (m.qos, frozenset(m.sub_ids), m.retain_as_published, frozenset(m.filters))
                for m in result.normal
            }
            assert len(got) == len(result.normal), "one Match per subscriber"
            for m in result.normal:
                assert len(m.sub_ids) == len(set(m.sub_ids))
                assert len(m.filters) == len(set(m.filters))
            got_shared = {(g.group, g.filter, frozenset(g.members)) for g in result.shared}
            assert len(got_shared) == len(result.shared)
            assert (got, got_shared) == expected_match(model, mountpoint, topic, publisher)
    # the per-subscriber index agrees, and pruning leaves exactly the nodes still needed
    for sid in {k[0] for k in model} | {("", "c1")}:
        assert trie.subscriptions_of(sid) == {f: o for (s, f), o in model.items() if s == sid}
    fresh = SubscriptionTrie()
    for (sid, f), o in model.items():
        fresh.add(sid, f, o)
    assert node_count(trie) == node_count(fresh)


@settings(max_examples=200, deadline=None)
@given(filters, topics)
def test_topic_matches_agrees_with_reference(topic_filter: str, topic: str) -> None:
    assert topic_matches(topic_filter, topic) is ref_match(topic_filter, topic)


retained_ops = st.lists(
    st.tuples(st.booleans(), st.sampled_from(["", "m"]), topics, st.integers()), max_size=40
)


@settings(max_examples=200, deadline=None)
@given(retained_ops, st.lists(filters, min_size=1, max_size=6))
def test_retained_matches_brute_force(
    operations: list[tuple[bool, str, str, int]], queries: list[str]
) -> None:
    store: RetainedStore[int] = RetainedStore()
    model: dict[tuple[str, str], int] = {}
    for is_set, mountpoint, topic, value in operations:
        if is_set:
            store.set(mountpoint, topic, value)
            model[mountpoint, topic] = value
        else:
            assert store.clear(mountpoint, topic) is ((mountpoint, topic) in model)
            model.pop((mountpoint, topic), None)
    assert len(store) == len(model)
    assert sorted(store) == sorted((mp, t, v) for (mp, t), v in model.items())
    for mountpoint in ("", "m"):
        for f in queries:
            got = store.match(mountpoint, f)
            assert len(got) == len(set(got))
            assert set(got) == {
                (t, v) for (mp, t), v in model.items() if mp == mountpoint and ref_match(f, t)
            }
    for (mp, t), v in model.items():
        assert store.get(mp, t) == v


def test_reference_matcher_sanity() -> None:
    # The reference itself must be right for the properties to mean anything.
    assert ref_match("a/#", "a") and ref_match("a/#", "a/b/c") and not ref_match("a/#", "ab")
    assert ref_match("#", "a") and not ref_match("#", "$s/a") and ref_match("$s/#", "$s")
    assert ref_match("+/+", "/") and not ref_match("+", "/") and not ref_match("a/+", "a")
    assert not ref_match("a.b", "axb")


FORBIDDEN = {"asyncio", "grpc", "lmdb", "socket", "time", "threading", "os", "selectors"}


def test_routing_modules_are_pure() -> None:
    modules = sorted(ROUTING_DIR.glob("*.py"))
    assert len(modules) >= 5
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
