"""The storage engine interface: ordered byte keys in named sub-databases, one writer.

Theory of operation. The queue core (``services.msgstore.queue``) only needs what LMDB
gives: several named, sorted key/value tables; read transactions that see a consistent
snapshot; one write transaction at a time that either commits as a whole or leaves no
trace; range scans in key order; and a separate, explicit flush to stable storage
(:meth:`Engine.sync`) so that one fsync can cover many commits or one large group commit.

Errors: anything the disk or the map refuses becomes :class:`StoreError` (or its
subclass :class:`StoreFull` for "no space left"), never an engine-specific exception, so
callers can turn it into a result instead of crashing. After a write operation raised,
the transaction is unusable and must be aborted (LMDB's rule; the in-memory twin
enforces the same so that tests catch misuse).

Worked example::

    with engine.write() as txn:            # commits on normal exit, aborts on exception
        txn.put("entries", b"k1", b"v1")
    with engine.read() as txn:
        list(txn.scan("entries", b"k", b"l"))   # [(b"k1", b"v1")]
    engine.sync()                            # durable now
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class StoreError(Exception):
    """The engine could not complete an operation (I/O error, corrupt file, closed)."""


class StoreFull(StoreError):
    """No room left: the map size is reached or the disk is full."""


@dataclass(frozen=True, slots=True)
class EngineInfo:
    """Sizes for metrics and ``Stats``: bytes the engine uses out of ``limit`` (0 = none)."""

    used_bytes: int
    limit_bytes: int


class ReadTxn(ABC):
    """A consistent snapshot of every sub-database."""

    @abstractmethod
    def get(self, db: str, key: bytes) -> bytes | None: ...

    @abstractmethod
    def scan(
        self, db: str, start: bytes, end: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with ``start <= key < end`` (``end=None``: to the last key), in key order
        (descending with ``reverse``). Consume the iterator before the transaction ends."""

    def first(self, db: str, start: bytes, end: bytes | None = None) -> tuple[bytes, bytes] | None:
        """The smallest item in ``[start, end)``: one seek, the cheap way to find a log head."""
        for item in self.scan(db, start, end):
            return item
        return None

    def last(self, db: str, start: bytes, end: bytes | None = None) -> tuple[bytes, bytes] | None:
        for item in self.scan(db, start, end, reverse=True):
            return item
        return None


class WriteTxn(ReadTxn):
    """The only writer; its changes are visible to itself at once and to others on commit."""

    @abstractmethod
    def put(self, db: str, key: bytes, value: bytes) -> None: ...

    @abstractmethod
    def pop(self, db: str, key: bytes) -> bytes | None:
        """Delete ``key``; return its old value (None when it was absent)."""

    @abstractmethod
    def delete_range(self, db: str, start: bytes, end: bytes) -> int:
        """Delete every key in ``[start, end)``; return how many."""

    @abstractmethod
    def fill(self) -> float:
        """The fraction of the store's capacity that live data uses as of this transaction
        (0.0 when unlimited). Callers keep a reserve below 1.0: in LMDB even deleting
        needs free pages, so a store filled to the brim could not be drained."""

    @abstractmethod
    def commit(self) -> None:
        """Make the changes visible (and, depending on the engine's mode, written)."""

    @abstractmethod
    def abort(self) -> None: ...


class Engine(ABC):
    """An open store; sub-database names are fixed when it is opened."""

    @abstractmethod
    def begin_read(self) -> ReadTxn: ...

    @abstractmethod
    def end_read(self, txn: ReadTxn) -> None: ...

    @abstractmethod
    def begin_write(self) -> WriteTxn: ...

    @abstractmethod
    def sync(self) -> None:
        """Flush every committed transaction to stable storage (fsync)."""

    @abstractmethod
    def info(self) -> EngineInfo: ...

    @abstractmethod
    def close(self) -> None:
        """Flush and release; further use raises :class:`StoreError`."""

    @contextmanager
    def read(self) -> Iterator[ReadTxn]:
        txn = self.begin_read()
        try:
            yield txn
        finally:
            self.end_read(txn)

    @contextmanager
    def write(self) -> Iterator[WriteTxn]:
        """Commit on normal exit, abort when the block raises."""
        txn = self.begin_write()
        try:
            yield txn
        except BaseException:
            txn.abort()
            raise
        txn.commit()
