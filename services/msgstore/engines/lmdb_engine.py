"""The LMDB engine: the only module that imports ``lmdb``.

Theory of operation. One LMDB environment (a directory with ``data.mdb`` and
``lock.mdb``) holds one named database per sub-database. LMDB gives the engine contract
for free: MVCC snapshots for readers, a single writer, atomic commits, B+tree key order.

Durability is split from commit so that the fsync policy lives in the caller:

* ``ordered_sync=True`` (``msgstore.fsync = always``): the environment is opened with
  ``sync`` on and ``metasync`` off. A commit writes the new pages and fdatasyncs them,
  then writes the meta page without flushing it; :meth:`LmdbEngine.sync` flushes the
  meta page. Data always reaches the disk before the meta page that points at it, so
  even a power loss leaves a consistent file, and once ``sync`` returns the commit is
  durable. A group commit costs two flushes however many messages it carries.
* ``ordered_sync=False`` (``interval`` / ``never``): ``sync`` off; commits only reach
  the OS page cache, and :meth:`LmdbEngine.sync` (one fsync) makes every earlier
  commit durable at once. A killed process loses nothing (the page cache survives it);
  a power loss or kernel crash may lose the unsynced window and, because the OS may
  write the meta page before the data pages, LMDB documents that the file may then be
  damaged. That is the documented price of those policies.

Running out of map (``MDB_MAP_FULL``) or disk (``ENOSPC``) raises :class:`StoreFull`;
any other LMDB error raises :class:`StoreError`.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from services.msgstore.engines.base import (
    Engine,
    EngineInfo,
    ReadTxn,
    StoreError,
    StoreFull,
    WriteTxn,
)

T = TypeVar("T")


def _translate(exc: lmdb.Error, what: str) -> StoreError:
    if isinstance(exc, lmdb.MapFullError):
        return StoreFull(f"store full: map size reached during {what} ({exc})")
    code = getattr(exc, "code", None)
    if code == errno.ENOSPC or "No space left" in str(exc):
        return StoreFull(f"store full: no space left on device during {what} ({exc})")
    return StoreError(f"{what} failed: {type(exc).__name__}: {exc}")


def _call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return fn(*args, **kwargs)
    except lmdb.Error as exc:
        raise _translate(exc, what) from exc


class _LmdbRead(ReadTxn):
    def __init__(self, engine: LmdbEngine, txn: Any) -> None:
        self._engine = engine
        self._txn = txn

    def _db(self, db: str) -> Any:
        try:
            return self._engine._dbs[db]
        except KeyError:
            raise StoreError(f"no sub-database {db!r}") from None

    def get(self, db: str, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._txn.get(key, db=self._engine._dbs[db])
        except lmdb.Error as exc:
            raise _translate(exc, "get") from exc
        return value

    def scan(
        self, db: str, start: bytes, end: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        cursor = _call("scan", self._txn.cursor, db=self._db(db))
        try:
            if reverse:
                yield from self._scan_back(cursor, start, end)
                return
            if not cursor.set_range(start):
                return
            for key, value in cursor.iternext():
                if end is not None and key >= end:
                    return
                yield key, value
        except lmdb.Error as exc:
            raise _translate(exc, "scan") from exc
        finally:
            cursor.close()

    @staticmethod
    def _scan_back(cursor: Any, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        # Start on the last key below ``end``: seek to end and step back, or the very last.
        at_end = end is None or not cursor.set_range(end)
        if not (cursor.last() if at_end else cursor.prev()):
            return
        for key, value in cursor.iterprev():
            if key < start:
                return
            yield key, value


class _LmdbWrite(_LmdbRead, WriteTxn):
    _done = False

    # put, pop and get are the hot path: no helper calls, the dict lookup inline.
    def put(self, db: str, key: bytes, value: bytes) -> None:
        try:
            self._txn.put(key, value, db=self._engine._dbs[db])
        except lmdb.Error as exc:
            raise _translate(exc, "put") from exc

    def pop(self, db: str, key: bytes) -> bytes | None:
        try:
            old: bytes | None = self._txn.pop(key, db=self._engine._dbs[db])
        except lmdb.Error as exc:
            raise _translate(exc, "delete") from exc
        return old

    def delete_range(self, db: str, start: bytes, end: bytes) -> int:
        cursor = _call("delete", self._txn.cursor, db=self._db(db))
        count = 0
        try:
            positioned = cursor.set_range(start)
            while positioned and cursor.key() < end:
                cursor.delete()  # moves to the next item; the key is b"" past the last one
                count += 1
                positioned = cursor.key() != b""
        except lmdb.Error as exc:
            raise _translate(exc, "delete") from exc
        finally:
            cursor.close()
        return count

    def fill(self) -> float:
        """Pages of every B-tree (the main one too) over the map's pages; pages on LMDB's
        free list count as free, as LMDB reuses them before growing the file."""
        txn, engine = self._txn, self._engine
        pages = 0
        try:
            for db in (engine._main, *engine._dbs.values()):
                st = txn.stat(db)
                pages += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        except lmdb.Error as exc:
            raise _translate(exc, "stat") from exc
        return pages / engine._capacity_pages

    def commit(self) -> None:
        self._done = True  # LMDB frees the transaction whether the commit succeeds or not
        _call("commit", self._txn.commit)

    def abort(self) -> None:
        if not self._done:
            self._done = True
            _call("abort", self._txn.abort)


# Below this, one transaction's copy-on-write pages are a large share of the map and the
# append reserve (``ops.APPEND_FILL_LIMIT``) no longer guarantees that acks can drain it.
MIN_MAP_SIZE = 1024 * 1024


class LmdbEngine(Engine):
    """An LMDB environment in ``path`` with the named sub-databases ``dbs``; ``map_size``
    is raised to :data:`MIN_MAP_SIZE` if smaller."""

    def __init__(
        self, path: str | Path, dbs: Iterable[str], map_size: int, ordered_sync: bool
    ) -> None:
        names = list(dbs)
        map_size = max(map_size, MIN_MAP_SIZE)
        Path(path).mkdir(parents=True, exist_ok=True)
        try:
            self._env = lmdb.open(
                str(path),
                map_size=map_size,
                max_dbs=len(names),
                sync=ordered_sync,
                metasync=False,
                readahead=False,
                max_spare_txns=4,
            )
            self._dbs = {name: self._env.open_db(name.encode(), create=True) for name in names}
            self._main = self._env.open_db(None)
            info, page = self._env.info(), self._env.stat()["psize"]
        except lmdb.Error as exc:
            raise _translate(exc, f"opening {path}") from exc
        self._capacity_pages = max(1, info["map_size"] // page - 2)  # two meta pages
        self.path = Path(path)
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    def begin_read(self) -> ReadTxn:
        self._check()
        return _LmdbRead(self, _call("begin", self._env.begin, write=False))

    def end_read(self, txn: ReadTxn) -> None:
        assert isinstance(txn, _LmdbRead)
        txn._txn.abort()

    def begin_write(self) -> WriteTxn:
        self._check()
        return _LmdbWrite(self, _call("begin", self._env.begin, write=True))

    def sync(self) -> None:
        self._check()
        _call("fsync", self._env.sync, True)

    def info(self) -> EngineInfo:
        self._check()
        info = self._env.info()
        page = self._env.stat()["psize"]
        return EngineInfo((info["last_pgno"] + 1) * page, info["map_size"])

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._env.sync(True)
        except lmdb.Error as exc:
            raise _translate(exc, "final fsync") from exc
        finally:
            self._closed = True
            self._env.close()
