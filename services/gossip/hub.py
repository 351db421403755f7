"""Fan-out of committed changes to the open Watch streams.

Each :class:`Watcher` wraps a pure :class:`~services.gossip.watch.DeltaBuffer` with an
``asyncio.Event``: ``publish`` (called by the committer, on the event loop) only adds
to the buffers and sets the events, so a slow watcher costs writers nothing but a dict
assignment per changed key. The Watch handler waits on ``next`` and drains its buffer
as one batch whenever it is ready to send again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from services.gossip.store import Update
from services.gossip.watch import DeltaBuffer


class Watcher:
    def __init__(self, prefixes: Iterable[str]) -> None:
        self.buffer = DeltaBuffer(prefixes)
        self._ready = asyncio.Event()
        self.closed = False

    def push(self, updates: list[Update]) -> None:
        if self.buffer.add(updates):
            self._ready.set()

    def close(self) -> None:
        self.closed = True
        self._ready.set()

    async def next(self, max_updates: int, max_bytes: int) -> list[Update]:
        """The next batch of changes, waiting for one; ``[]`` once the hub is closed."""
        while not self.buffer and not self.closed:
            self._ready.clear()
            await self._ready.wait()
        if self.closed:
            return []
        return self.buffer.drain(max_updates, max_bytes)


class WatchHub:
    def __init__(self) -> None:
        self._watchers: set[Watcher] = set()
        self.closed = False

    def __len__(self) -> int:
        return len(self._watchers)

    def register(self, prefixes: Iterable[str]) -> Watcher:
        """A new watcher; it sees every change published from now on."""
        watcher = Watcher(prefixes)
        if self.closed:
            watcher.close()
        self._watchers.add(watcher)
        return watcher

    def unregister(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def publish(self, updates: list[Update]) -> None:
        for watcher in self._watchers:
            watcher.push(updates)

    def close(self) -> None:
        """End every stream (service shutdown)."""
        self.closed = True
        for watcher in self._watchers:
            watcher.close()
