"""The registry table's engine interface: ordered byte items, written in durable batches.

Why an interface: the table's logic (what a record is, which keys a batch writes, when a
write is due) is tested on the in-memory twin as on LMDB, and the cluster may move the
table elsewhere without touching the committer or the registrar.

Contract: :meth:`Engine.items` is called once, at start-up; :meth:`Engine.write` applies
its changes in order as one transaction that is durable when it returns, or raises
:class:`StoreError` and leaves the store as it was. Writes may come from several threads at
once (the acceptor's catch-up and its group commit): an engine takes them one at a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

Change = tuple[bytes, bytes | None]  # (key, value); value None deletes the key


class StoreError(OSError):
    """The table could not be read or written (disk full, map full, I/O error)."""


class Engine(ABC):
    @abstractmethod
    def items(self) -> list[tuple[bytes, bytes]]:
        """Every stored item, in key order."""

    @abstractmethod
    def write(self, changes: Sequence[Change]) -> None:
        """Apply ``changes`` in order, all or nothing; return once they are durable."""

    @abstractmethod
    def close(self) -> None: ...
