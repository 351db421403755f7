"""The in-memory twin of the LMDB engine: same interface, same rules, no disk.

Theory of operation. Each sub-database is a dict plus a sorted key list (bisect), so
range scans come out in key order as in LMDB. A write transaction changes the tables in
place and keeps an undo log; ``abort`` replays it backwards, so an aborted transaction
leaves no trace. One re-entrant lock is held from ``begin_write`` to commit/abort and
around every read transaction: readers never see a half-applied write (the twin has no
MVCC, so readers wait instead of reading a snapshot).

``limit_bytes`` emulates LMDB's map size (keys plus values): a put that would pass it
raises :class:`StoreFull` and poisons the transaction, which must then be aborted —
exactly LMDB's ``MDB_MAP_FULL`` behaviour, so the queue core's recovery path is tested
on both engines.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator

from services.msgstore.engines.base import (
    Engine,
    EngineInfo,
    ReadTxn,
    StoreError,
    StoreFull,
    WriteTxn,
)


class _Table:
    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}
        self.keys: list[bytes] = []

    def set(self, key: bytes, value: bytes) -> bytes | None:
        old = self.values.get(key)
        if old is None:
            bisect.insort(self.keys, key)
        self.values[key] = value
        return old

    def remove(self, key: bytes) -> bytes | None:
        old = self.values.pop(key, None)
        if old is not None:
            i = bisect.bisect_left(self.keys, key)
            del self.keys[i]
        return old

    def scan(self, start: bytes, end: bytes | None, reverse: bool) -> Iterator[bytes]:
        lo = bisect.bisect_left(self.keys, start)
        hi = len(self.keys) if end is None else bisect.bisect_left(self.keys, end)
        indices: Iterable[int] = range(hi - 1, lo - 1, -1) if reverse else range(lo, hi)
        for i in indices:
            yield self.keys[i]


class _MemoryRead(ReadTxn):
    def __init__(self, engine: MemoryEngine) -> None:
        self._engine = engine

    def _table(self, db: str) -> _Table:
        if self._engine._closed:
            raise StoreError("store is closed")
        try:
            return self._engine._tables[db]
        except KeyError:
            raise StoreError(f"no sub-database {db!r}") from None

    def get(self, db: str, key: bytes) -> bytes | None:
        return self._table(db).values.get(key)

    def scan(
        self, db: str, start: bytes, end: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        table = self._table(db)
        for key in table.scan(start, end, reverse):
            yield key, table.values[key]


class _MemoryWrite(_MemoryRead, WriteTxn):
    def __init__(self, engine: MemoryEngine) -> None:
        super().__init__(engine)
        self._undo: list[tuple[str, bytes, bytes | None]] = []
        self._done = False
        self._failed = False

    def _check(self) -> None:
        if self._done:
            raise StoreError("transaction already finished")
        if self._failed:
            raise StoreError("transaction failed earlier and must be aborted")

    def put(self, db: str, key: bytes, value: bytes) -> None:
        self._check()
        table = self._table(db)
        old = table.values.get(key)
        grow = len(value) - (len(old) if old is not None else -len(key))
        engine = self._engine
        if engine.limit_bytes and engine._used + grow > engine.limit_bytes:
            self._failed = True
            raise StoreFull(f"store full: {engine._used} of {engine.limit_bytes} bytes used")
        table.set(key, value)
        engine._used += grow
        self._undo.append((db, key, old))

    def pop(self, db: str, key: bytes) -> bytes | None:
        self._check()
        old = self._table(db).remove(key)
        if old is not None:
            self._engine._used -= len(key) + len(old)
            self._undo.append((db, key, old))
        return old

    def delete_range(self, db: str, start: bytes, end: bytes) -> int:
        self._check()
        doomed = list(self._table(db).scan(start, end, False))
        for key in doomed:
            self.pop(db, key)
        return len(doomed)

    def fill(self) -> float:
        limit = self._engine.limit_bytes
        return self._engine._used / limit if limit else 0.0

    def commit(self) -> None:
        self._check()
        self._finish()

    def abort(self) -> None:
        if self._done:
            return
        engine = self._engine
        for db, key, old in reversed(self._undo):
            table = engine._tables[db]
            now = table.values.get(key)
            if now is not None:
                engine._used -= len(key) + len(now)
            if old is None:
                table.remove(key)
            else:
                table.set(key, old)
                engine._used += len(key) + len(old)
        self._finish()

    def _finish(self) -> None:
        self._done = True
        self._undo.clear()
        self._engine._lock.release()


class MemoryEngine(Engine):
    """Sorted dict tables; ``limit_bytes`` (0 = unlimited) plays the LMDB map size."""

    def __init__(self, dbs: Iterable[str], limit_bytes: int = 0) -> None:
        self._tables = {name: _Table() for name in dbs}
        self.limit_bytes = limit_bytes
        self._used = 0
        self._lock = threading.RLock()
        self._closed = False
        self.syncs = 0  # counted so tests can check the fsync policy

    def begin_read(self) -> ReadTxn:
        self._lock.acquire()
        return _MemoryRead(self)

    def end_read(self, txn: ReadTxn) -> None:
        self._lock.release()

    def begin_write(self) -> WriteTxn:
        if self._closed:
            raise StoreError("store is closed")
        self._lock.acquire()
        return _MemoryWrite(self)

    def sync(self) -> None:
        if self._closed:
            raise StoreError("store is closed")
        self.syncs += 1

    def info(self) -> EngineInfo:
        return EngineInfo(self._used, self.limit_bytes)

    def close(self) -> None:
        self._closed = True
