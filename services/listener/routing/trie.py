"""The subscription trie: which subscribers does a published topic reach?

Theory of operation
-------------------
One trie per mountpoint (VerneMQ's namespaces: a subscription made under mountpoint
``m1`` never sees a publish under ``""`` or ``m2``). Each node is one filter level; a
node's literal children are in a dict and its ``+`` and ``#`` children in their own slots,
so matching a topic of L levels follows at most one literal edge plus the wildcard edges
at each level, whatever the number of subscriptions::

    filters a/b, a/+, a/#, +/b        topic a/b hits:
        root ─a─ n1 ─b─ n2            n1.hash (a/#)      via a
          │      ├─+─ n3              n2      (a/b)      via a, b
          │      └─#─ n4              n3      (a/+)      via a, +
          └─+─ n5 ─b─ n6              n6      (+/b)      via +, b

A filter is a single path, so each node is reached at most once per match. A topic
starting with ``$`` skips the root's ``+`` and ``#`` edges [MQTT-4.7.2-1]; ``#`` also
matches its parent level (``a/#`` hits topic ``a``) [MQTT-4.7.1-2].

A node holds the subscriptions whose filter ends there: normal ones as a dict
subscriber -> prebuilt ``Match``, shared ones (``$share/{group}/{filter}``) as a dict
group -> ``_Group`` of members. ``match`` collects the nodes hit, then merges the
``Match`` values of subscribers hit more than once (MQTT 5 overlap rules, see
``model.Match``). When one node holds all the hits, as usual, the result is a C-level
copy of that node's values: no per-subscriber work at all.

A per-subscriber index (subscriber -> filter -> options) serves ``subscriptions_of``,
``remove_all`` and replace detection. Removal prunes every node left empty, so memory
follows the live subscriptions, not their history.

Inputs are assumed valid (the codec checks filters and topics, see ``topics``).
"""

from __future__ import annotations

from collections.abc import Iterator

from services.common.session_key import SessionKey
from services.listener.mqtt.topics import parse_shared
from services.listener.routing.model import (
    GroupToken,
    Match,
    MatchResult,
    SharedGroupMatch,
    SharedMember,
    SubOptions,
)


class _Group:
    """Members of one shared subscription (group, filter) with a lazily built snapshot."""

    __slots__ = ("filter", "members", "name", "snapshot", "token")

    def __init__(self, name: str, topic_filter: str) -> None:
        self.name = name
        self.filter = topic_filter
        self.members: dict[SessionKey, SubOptions] = {}
        self.snapshot: SharedGroupMatch | None = None
        self.token = GroupToken()

    def view(self) -> SharedGroupMatch:
        """The immutable view handed to callers; rebuilt only after a membership change."""
        snap = self.snapshot
        if snap is None:
            members = tuple(SharedMember(s, o) for s, o in self.members.items())
            snap = SharedGroupMatch(self.name, self.filter, members, self.token)
            self.snapshot = snap
        return snap


class _Node:
    __slots__ = ("children", "hash", "plus", "shared", "subs")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.plus: _Node | None = None
        self.hash: _Node | None = None
        self.subs: dict[SessionKey, Match] | None = None
        self.shared: dict[str, _Group] | None = None

    def is_empty(self) -> bool:
        return not (self.children or self.plus or self.hash or self.subs or self.shared)


def _walk(node: _Node, levels: list[str], i: int, n: int, hits: list[_Node]) -> None:
    """Append to ``hits`` every node under ``node`` whose filter matches ``levels[i:]``."""
    while True:
        h = node.hash
        if h is not None:
            hits.append(h)  # '#' nodes are leaves and pruned when empty: always a hit
        if i == n:
            if node.subs or node.shared:
                hits.append(node)
            return
        p = node.plus
        if p is not None:
            _walk(p, levels, i + 1, n, hits)
        nxt = node.children.get(levels[i])
        if nxt is None:
            return
        node = nxt
        i += 1


def _merge(a: Match, b: Match) -> Match:
    """Two matches of one subscriber as one delivery (rules in ``model.Match``)."""
    if b.sub_ids:
        sub_ids = tuple(dict.fromkeys(a.sub_ids + b.sub_ids)) if a.sub_ids else b.sub_ids
    else:
        sub_ids = a.sub_ids
    return Match(
        a.sid,
        a.qos if a.qos >= b.qos else b.qos,
        a.node,
        a.retain_as_published or b.retain_as_published,
        sub_ids,
        a.filters + b.filters,
    )


def _single(sid: SessionKey, topic_filter: str, opts: SubOptions) -> Match:
    sub_ids = () if opts.sub_id is None else (opts.sub_id,)
    return Match(sid, opts.qos, opts.node, opts.retain_as_published, sub_ids, (topic_filter,))


class SubscriptionTrie:
    """Topic-filter trie mapping filters to subscribers, per mountpoint."""

    __slots__ = ("_by_sid", "_count", "_roots")

    def __init__(self) -> None:
        self._roots: dict[str, _Node] = {}
        self._by_sid: dict[SessionKey, dict[str, SubOptions]] = {}
        self._count = 0

    def __len__(self) -> int:
        """Number of (subscriber, filter) subscriptions."""
        return self._count

    def add(self, sid: SessionKey, topic_filter: str, opts: SubOptions) -> bool:
        """Subscribe ``sid`` (in its mountpoint ``sid[0]``); True if new, False if replaced.

        Replacing keeps the one subscription per (client, filter) that MQTT requires
        [MQTT-3.8.4-3]; the new options win.
        """
        group, inner = parse_shared(topic_filter)
        root = self._roots.get(sid[0])
        if root is None:
            root = self._roots[sid[0]] = _Node()
        node = root
        for level in inner.split("/"):
            if level == "+":
                nxt = node.plus
                if nxt is None:
                    nxt = node.plus = _Node()
            elif level == "#":
                nxt = node.hash
                if nxt is None:
                    nxt = node.hash = _Node()
            else:
                nxt = node.children.get(level)
                if nxt is None:
                    nxt = node.children[level] = _Node()
            node = nxt
        if group is None:
            if node.subs is None:
                node.subs = {}
            node.subs[sid] = _single(sid, topic_filter, opts)
        else:
            if node.shared is None:
                node.shared = {}
            grp = node.shared.get(group)
            if grp is None:
                grp = node.shared[group] = _Group(group, inner)
            grp.members[sid] = opts
            grp.snapshot = None
        mine = self._by_sid.get(sid)
        if mine is None:
            mine = self._by_sid[sid] = {}
        is_new = topic_filter not in mine
        mine[topic_filter] = opts
        self._count += is_new
        return is_new

    def remove(self, sid: SessionKey, topic_filter: str) -> bool:
        """Unsubscribe; False if ``sid`` had no such subscription. Prunes empty nodes."""
        mine = self._by_sid.get(sid)
        if mine is None or mine.pop(topic_filter, None) is None:
            return False
        if not mine:
            del self._by_sid[sid]
        self._count -= 1
        group, inner = parse_shared(topic_filter)
        root = self._roots[sid[0]]
        path: list[tuple[_Node, str]] = []  # (parent, level) for each step, for pruning
        node = root
        for level in inner.split("/"):
            path.append((node, level))
            if level == "+":
                nxt = node.plus
            elif level == "#":
                nxt = node.hash
            else:
                nxt = node.children.get(level)
            assert nxt is not None, "index and trie disagree"
            node = nxt
        if group is None:
            assert node.subs is not None
            del node.subs[sid]
            if not node.subs:
                node.subs = None
        else:
            assert node.shared is not None
            grp = node.shared[group]
            del grp.members[sid]
            grp.snapshot = None
            if not grp.members:
                del node.shared[group]
                if not node.shared:
                    node.shared = None
        self._prune(node, path)
        if root.is_empty():
            del self._roots[sid[0]]
        return True

    @staticmethod
    def _prune(node: _Node, path: list[tuple[_Node, str]]) -> None:
        """Unlink ``node`` and its ancestors, bottom-up, while they hold nothing."""
        for parent, level in reversed(path):
            if not node.is_empty():
                return
            if level == "+":
                parent.plus = None
            elif level == "#":
                parent.hash = None
            else:
                del parent.children[level]
            node = parent

    def remove_all(self, sid: SessionKey) -> int:
        """Drop every subscription of ``sid`` (session ended); returns how many."""
        mine = self._by_sid.get(sid)
        if not mine:
            return 0
        filters = list(mine)
        for topic_filter in filters:
            self.remove(sid, topic_filter)
        return len(filters)

    def subscriptions_of(self, sid: SessionKey) -> dict[str, SubOptions]:
        """A copy of ``sid``'s filters (shared ones with their ``$share/g/`` prefix)."""
        return dict(self._by_sid.get(sid, ()))

    def options_of(self, sid: SessionKey) -> SubOptions | None:
        """One of ``sid``'s subscriptions' options (what they share: node, persistence),
        without copying its filters; None if it has none."""
        mine = self._by_sid.get(sid)
        if not mine:
            return None
        for opts in mine.values():
            return opts
        return None

    def items(self) -> Iterator[tuple[SessionKey, str, SubOptions]]:
        """Every subscription, for snapshots and anti-entropy; do not mutate meanwhile."""
        for sid, mine in self._by_sid.items():
            for topic_filter, opts in mine.items():
                yield sid, topic_filter, opts

    def match(
        self, mountpoint: str, topic: str, publisher: SessionKey | None = None
    ) -> MatchResult:
        """Everyone a publish to ``topic`` under ``mountpoint`` goes to.

        ``publisher`` is the publishing session; its own subscriptions with No Local set
        are skipped [MQTT-3.8.3-3] (its other matching subscriptions still count).
        The lists are fresh; the ``Match`` and ``SharedGroupMatch`` values are shared
        immutable objects.
        """
        root = self._roots.get(mountpoint)
        if root is None:
            return MatchResult([], [])
        levels = topic.split("/")
        n = len(levels)
        hits: list[_Node] = []
        if topic[:1] == "$":  # [MQTT-4.7.2-1]: no wildcard edge out of the root
            first = root.children.get(levels[0])
            if first is not None:
                _walk(first, levels, 1, n, hits)
        else:
            _walk(root, levels, 0, n, hits)
        return MatchResult(self._normal(hits, publisher), self._shared(hits))

    def _normal(self, hits: list[_Node], publisher: SessionKey | None) -> list[Match]:
        tables = [node.subs for node in hits if node.subs]
        if not tables:
            return []
        if len(tables) == 1 and (publisher is None or publisher not in tables[0]):
            return list(tables[0].values())
        # Copy the biggest table at C speed and merge the others into it: a wide fan-out
        # plus one overlapping filter costs one dict copy, not a Python loop per subscriber.
        base = max(tables, key=len)
        acc = dict(base)
        for table in tables:
            if table is base:
                continue
            for sid, m in table.items():
                prev = acc.get(sid)
                acc[sid] = m if prev is None else _merge(prev, m)
        if publisher is not None and publisher in acc:
            self._drop_no_local(acc, publisher, tables)
        return list(acc.values())

    def _drop_no_local(
        self,
        acc: dict[SessionKey, Match],
        publisher: SessionKey,
        tables: list[dict[SessionKey, Match]],
    ) -> None:
        """Re-merge the publisher's own entry from its subscriptions without No Local."""
        opts = self._by_sid[publisher]
        kept: Match | None = None
        for table in tables:
            m = table.get(publisher)
            if m is None or opts[m.filters[0]].no_local:
                continue
            kept = m if kept is None else _merge(kept, m)
        if kept is None:
            del acc[publisher]
        else:
            acc[publisher] = kept

    @staticmethod
    def _shared(hits: list[_Node]) -> list[SharedGroupMatch]:
        out: list[SharedGroupMatch] = []
        for node in hits:
            if node.shared:
                out.extend(grp.view() for grp in node.shared.values())
        return out
