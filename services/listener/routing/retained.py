"""Retained messages: one per topic, found by filter when a client subscribes.

Theory of operation
-------------------
The mirror image of the subscription trie: here the stored keys are topic names (no
wildcards) and the query is a filter. One trie per mountpoint, one node per topic level;
a node holding a retained message remembers its full topic. ``match`` walks the filter:
a literal level follows one edge, ``+`` fans out to every child, ``#`` collects the
whole subtree including the node itself (``a/#`` returns the message on ``a``). So a
filter with a literal prefix (``sensors/42/#``) touches only that subtree, never the
whole store. At the root, ``+`` and ``#`` skip children whose level starts with ``$``
[MQTT-4.7.2-1]: ``#`` does not return ``$SYS/...``.

Clearing prunes empty nodes. The store is generic in the message type and knows nothing
of payloads: the MQTT rule that a retained PUBLISH with an empty payload deletes the
retained message [MQTT-3.3.1-6] is the caller's (``clear``). Inputs are assumed valid
(see ``topics``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class _RNode(Generic[T]):
    __slots__ = ("children", "entry")

    def __init__(self) -> None:
        self.children: dict[str, _RNode[T]] = {}
        self.entry: tuple[str, T] | None = None  # (topic, message) if one is retained here

    def is_empty(self) -> bool:
        # a method, not an inline test: compiled, the test would keep the type ``entry``
        # was narrowed to before the caller's loop moved to another node
        return not self.children and self.entry is None


def _subtree(node: _RNode[T], out: list[tuple[str, T]], skip_dollar: bool) -> None:
    """Append every message at or below ``node``; ``skip_dollar`` when ``node`` is a root
    (which never holds a message itself: topics have at least one level)."""
    if skip_dollar:
        stack = [c for level, c in node.children.items() if not level.startswith("$")]
    else:
        stack = [node]
    while stack:
        cur = stack.pop()
        if cur.entry is not None:
            out.append(cur.entry)
        stack.extend(cur.children.values())


def _collect(node: _RNode[T], levels: list[str], i: int, out: list[tuple[str, T]]) -> None:
    """Append every message under ``node`` whose topic matches ``levels[i:]``."""
    n = len(levels)
    while i < n:
        level = levels[i]
        if level == "#":
            _subtree(node, out, skip_dollar=i == 0)
            return
        if level == "+":
            for key, child in node.children.items():
                if i == 0 and key.startswith("$"):
                    continue
                _collect(child, levels, i + 1, out)
            return
        nxt = node.children.get(level)
        if nxt is None:
            return
        node = nxt
        i += 1
    if node.entry is not None:
        out.append(node.entry)


class RetainedStore(Generic[T]):
    """The retained message of each (mountpoint, topic)."""

    __slots__ = ("_count", "_roots")

    def __init__(self) -> None:
        self._roots: dict[str, _RNode[T]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[tuple[str, str, T]]:
        """``(mountpoint, topic, message)`` for every retained message; do not mutate
        the store meanwhile."""
        for mountpoint, root in self._roots.items():
            found: list[tuple[str, T]] = []
            _subtree(root, found, skip_dollar=False)
            for topic, msg in found:
                yield mountpoint, topic, msg

    def set(self, mountpoint: str, topic: str, msg: T) -> None:
        """Retain ``msg`` on ``topic``, replacing any previous one."""
        node = self._roots.get(mountpoint)
        if node is None:
            node = self._roots[mountpoint] = _RNode()
        for level in topic.split("/"):
            nxt = node.children.get(level)
            if nxt is None:
                nxt = node.children[level] = _RNode()
            node = nxt
        if node.entry is None:
            self._count += 1
        node.entry = (topic, msg)

    def get(self, mountpoint: str, topic: str) -> T | None:
        node = self._find(mountpoint, topic)
        return None if node is None or node.entry is None else node.entry[1]

    def _find(self, mountpoint: str, topic: str) -> _RNode[T] | None:
        node = self._roots.get(mountpoint)
        for level in topic.split("/"):
            if node is None:
                return None
            node = node.children.get(level)
        return node

    def clear(self, mountpoint: str, topic: str) -> bool:
        """Forget the retained message on ``topic``; False if there was none."""
        root = self._roots.get(mountpoint)
        if root is None:
            return False
        path: list[tuple[_RNode[T], str]] = []
        node = root
        for level in topic.split("/"):
            nxt = node.children.get(level)
            if nxt is None:
                return False
            path.append((node, level))
            node = nxt
        if node.entry is None:
            return False
        node.entry = None
        self._count -= 1
        for parent, level in reversed(path):  # prune the nodes left empty
            if not node.is_empty():
                break
            del parent.children[level]
            node = parent
        if not root.children:
            del self._roots[mountpoint]
        return True

    def match(self, mountpoint: str, topic_filter: str) -> list[tuple[str, T]]:
        """``(topic, message)`` of every retained message ``topic_filter`` matches.

        The filter must be a plain one: strip a ``$share/{group}/`` prefix first (MQTT 5
        §4.8.2 sends no retained messages on a shared subscription: the caller decides).
        Order is unspecified; the tuples are the stored ones, not copies.
        """
        root = self._roots.get(mountpoint)
        out: list[tuple[str, T]] = []
        if root is not None:
            _collect(root, topic_filter.split("/"), 0, out)
        return out

    def match_many(
        self, mountpoint: str, filters: Iterable[tuple[str, int]]
    ) -> list[tuple[str, T, int]]:
        """``(topic, message, qos)`` of every retained message any of ``filters`` (each a
        ``(filter, qos)``) matches, once, with the highest ``qos`` of those that match it.

        For one SUBSCRIBE naming overlapping filters: each retained message is sent once,
        as one copy stands for every matching subscription of a live publish
        [MQTT-3.3.4-2]. Messages come in the order the filters find them first.
        """
        best: dict[str, tuple[T, int]] = {}
        for topic_filter, qos in filters:
            for topic, msg in self.match(mountpoint, topic_filter):
                prev = best.get(topic)
                if prev is None or qos > prev[1]:
                    best[topic] = (msg, qos)
        return [(topic, msg, qos) for topic, (msg, qos) in best.items()]
