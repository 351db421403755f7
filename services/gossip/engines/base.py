"""The engine interface: load everything at start-up, write batches durably.

Theory of operation
-------------------
The metadata store keeps its whole state in memory (metadata is small next to the
message queues) and uses the engine only as a durable log of the latest record per
key: ``load`` once at start-up, then ``write`` one :class:`WriteBatch` per group
commit. ``write`` returns only once the batch is durable (for LMDB: committed and
fsynced), and a batch is all or nothing — that is what lets a Put be acknowledged.

Engines are called from one thread at a time (the server runs them on a dedicated
single-thread executor), so they need no locking of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(slots=True)
class WriteBatch:
    """Records to write and to remove, and small metadata values, applied atomically."""

    puts: list[tuple[bytes, bytes]] = field(default_factory=list)
    deletes: list[bytes] = field(default_factory=list)
    meta: dict[bytes, bytes] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.puts) + len(self.deletes) + len(self.meta)

    def size(self) -> int:
        """Bytes written, roughly (for the commit log event)."""
        return sum(len(k) + len(v) for k, v in self.puts) + sum(map(len, self.deletes))


class StoreFull(Exception):
    """The engine ran out of space; the batch was not written."""


class Engine(Protocol):
    def records(self) -> Iterator[bytes]:
        """Every stored record value, in key order."""
        ...

    def meta(self, key: bytes) -> bytes | None: ...

    def write(self, batch: WriteBatch) -> None:
        """Apply the batch atomically; return only once it is durable."""
        ...

    def close(self) -> None: ...
