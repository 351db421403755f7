"""What a Watch stream owes its client: coalesced deltas and size-bounded batches.

Theory of operation
-------------------
A watcher may read slower than the store changes. Writers must not wait for it, and
its backlog must not grow without bound. So each watcher has a :class:`DeltaBuffer`:
a map from ``(prefix, key)`` to the key's latest :class:`Update`. A key changed ten
times while the watcher was busy costs one entry and is sent once, with its latest
value ("latest wins"); the backlog is bounded by the number of distinct keys, i.e. by
the store itself. A key keeps the position of its first pending change, so a hot key
cannot push others back forever. ``drain`` hands out everything pending — one event
per drain — cut only at ``max_updates`` / ``max_bytes`` so a batch fits a gRPC message.

Because only the latest value per key is kept, a watcher sees a subsequence of each
key's history that always ends at the current value: enough for a replica (the
listener's trie) that wants the state, not the history.

Worked example::

    buf = DeltaBuffer({"subs"})
    buf.add([Update("subs", b"k", b"1"), Update("subs", b"k", b"2")])
    buf.drain(100, 1 << 20) == [Update("subs", b"k", b"2")]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from services.gossip.store import Update

_OVERHEAD = 16  # per update: field tags and lengths in the protobuf encoding, roughly


def update_size(u: Update) -> int:
    """Approximate encoded size, to keep one event under the gRPC message limit."""
    return len(u.prefix) + len(u.key) + (len(u.value) if u.value is not None else 0) + _OVERHEAD


class DeltaBuffer:
    """Pending changes of one watcher, coalesced per key, first-change order."""

    def __init__(self, prefixes: Iterable[str]) -> None:
        self.prefixes = frozenset(prefixes)
        self._pending: dict[tuple[str, bytes], Update] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, updates: Iterable[Update]) -> int:
        """Buffer the updates of watched prefixes; returns how many were relevant."""
        n = 0
        for u in updates:
            if u.prefix in self.prefixes:
                self._pending[(u.prefix, u.key)] = u  # an existing key keeps its position
                n += 1
        return n

    def drain(self, max_updates: int, max_bytes: int) -> list[Update]:
        """Take the oldest pending updates, at least one, at most the limits allow."""
        out: list[Update] = []
        size = 0
        for u in self._pending.values():
            s = update_size(u)
            if out and (len(out) >= max_updates or size + s > max_bytes):
                break
            out.append(u)
            size += s
        for u in out:
            del self._pending[(u.prefix, u.key)]
        return out


def chunks(updates: Iterable[Update], max_updates: int, max_bytes: int) -> Iterator[list[Update]]:
    """Split a snapshot into batches with the same limits as :meth:`DeltaBuffer.drain`."""
    out: list[Update] = []
    size = 0
    for u in updates:
        s = update_size(u)
        if out and (len(out) >= max_updates or size + s > max_bytes):
            yield out
            out, size = [], 0
        out.append(u)
        size += s
    if out:
        yield out
