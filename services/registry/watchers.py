"""Watch streams: the registry's way to command listener processes.

Each listener process keeps one ``Watch`` stream open, named by its ``listener_id``. A new
stream with the same id replaces the old one (a listener that reconnected). Commands for
a listener without a stream are dropped: a listener that is not watching cannot be
holding a connection the registry can still talk to.

Each stream has a bounded queue; a listener that does not read it is cut off (its stream
ends) rather than let the registry's memory grow without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from services.pb import registry_pb2

QUEUE_LIMIT = 10_000


@dataclass(eq=False)
class Watcher:
    listener_id: str
    node: str
    queue: asyncio.Queue[registry_pb2.RegistryCommand | None] = field(
        default_factory=lambda: asyncio.Queue(QUEUE_LIMIT)
    )
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def push(self, command: registry_pb2.RegistryCommand | None) -> bool:
        """Queue a command (None ends the stream); False if the stream is gone or full."""
        if self.closed.is_set():
            return False
        try:
            self.queue.put_nowait(command)
        except asyncio.QueueFull:
            self.close()
            return False
        return True

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            # Wake the reader even when the queue is full: drop one command for the sentinel.
            if self.queue.full():
                self.queue.get_nowait()
            self.queue.put_nowait(None)


class WatchHub:
    """``on_lost(listener_id)`` is called when a listener's stream ends without a newer
    one replacing it and not because the hub closed: the listener went away."""

    def __init__(self, on_lost: Callable[[str], None] | None = None) -> None:
        self._watchers: dict[str, Watcher] = {}
        self.on_lost = on_lost
        self._closing = False

    def watching(self, listener_id: str) -> bool:
        return listener_id in self._watchers

    def get(self, listener_id: str) -> Watcher | None:
        return self._watchers.get(listener_id)

    def listeners(self) -> list[str]:
        return sorted(self._watchers)

    async def stream(
        self, listener_id: str, node: str
    ) -> AsyncIterator[registry_pb2.RegistryCommand]:
        """Commands for one listener until it goes away, is replaced, or the hub closes."""
        watcher = Watcher(listener_id, node)
        old = self._watchers.get(listener_id)
        if old is not None:
            old.close()
        self._watchers[listener_id] = watcher
        try:
            while True:
                command = await watcher.queue.get()
                if command is None:
                    return
                yield command
        finally:
            watcher.closed.set()
            if self._watchers.get(listener_id) is watcher:
                del self._watchers[listener_id]
                if not self._closing and self.on_lost is not None:
                    self.on_lost(listener_id)

    def send(self, listener_id: str, command: registry_pb2.RegistryCommand) -> Watcher | None:
        """Push to one listener; the watcher it went to, or None if it has no stream."""
        watcher = self._watchers.get(listener_id)
        if watcher is None or not watcher.push(command):
            return None
        return watcher

    def __len__(self) -> int:
        return len(self._watchers)

    def broadcast(self, command: registry_pb2.RegistryCommand) -> int:
        return sum(w.push(command) for w in list(self._watchers.values()))

    def close(self) -> None:
        self._closing = True
        for watcher in list(self._watchers.values()):
            watcher.close()
        self._watchers.clear()
