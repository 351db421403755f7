"""The journal engine: the registry's tables as a snapshot plus a journal, one flush a write.

Why: a persistent CONNECT waits for the registry's write, and LMDB with ``sync`` and
``metasync`` flushes twice per transaction (the new pages, then the meta page that
points at them): 0.8 to 1.4 ms on the development VM against one flush's 0.2 to 0.3 ms. The
registry's tables are small and already held in memory by their users (the session
table, the acceptor's slots), so a log-structured store costs little and needs one
``fdatasync`` per write.

Layout of the directory:

* ``table.snap``: ``MAGIC``, the journal generation ``gen`` that follows it, the item
  count, the items (``u32 key length, u32 value length, key, value``), then a CRC-32
  of everything before it. Written to ``table.snap.tmp``, flushed and renamed, so it is
  whole or absent.
* ``journal.<gen>``: preallocated with zeros (an overwrite of allocated blocks flushes
  no file metadata), then one record per :meth:`JournalEngine.write`: ``u32 payload
  length, u32 CRC-32 of the payload``, then the changes (``u32 key length, key, u32
  value length or DELETED, value``). A zero length ends the journal.

Start-up loads the snapshot and replays its journal up to the first record that is
short, or fails its CRC: that record was being written when the process or machine
died, so its write never returned, and the bytes after it are zeroed before anything
is appended. A journal that would overflow is compacted: a new snapshot of the whole
table (with ``gen + 1``) and a fresh ``journal.<gen + 1>``, created before the rename
that makes them current. A journal of another generation is a leftover of an
interrupted compaction and is removed. The journal's capacity is at least twice the
last snapshot's size, so compaction costs O(1) per byte written.

A directory that still holds the LMDB engine's table (``data.mdb``, from before this
engine) is imported once at start-up and renamed to ``data.mdb.imported``.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path

from services.registry.engines.base import Change, Engine, StoreError

MAGIC = b"TNQSNAP1"
MIN_JOURNAL = 1024 * 1024  # a few thousand records; a large table gets twice its size
DELETED = 0xFFFFFFFF
_HEAD = struct.Struct("<II")  # record: payload length, CRC-32 of the payload
_SNAP_HEAD = struct.Struct("<8sQQ")  # magic, gen, item count
_ITEM = struct.Struct("<II")  # key length, value length
_CRC = struct.Struct("<I")
_ZEROS = bytes(1024 * 1024)
_GRAIN = 64 * 1024  # journal capacities are multiples of this


def encode_changes(changes: Sequence[Change]) -> bytes:
    parts: list[bytes] = []
    for key, value in changes:
        if value is None:
            parts += (_ITEM.pack(len(key), DELETED), key)
        else:
            parts += (_ITEM.pack(len(key), len(value)), key, value)
    return b"".join(parts)


def decode_changes(payload: bytes) -> list[Change]:
    """The changes of one record whose CRC matched (a mismatch never gets here)."""
    out: list[Change] = []
    at = 0
    while at < len(payload):
        klen, vlen = _ITEM.unpack_from(payload, at)
        at += _ITEM.size
        key = payload[at : at + klen]
        at += klen
        if vlen == DELETED:
            out.append((key, None))
        else:
            out.append((key, payload[at : at + vlen]))
            at += vlen
    return out


def replay(journal: bytes) -> tuple[list[list[Change]], int]:
    """The records of ``journal`` that are whole, and where the first bad one starts."""
    records: list[list[Change]] = []
    at = 0
    while at + _HEAD.size <= len(journal):
        length, crc = _HEAD.unpack_from(journal, at)
        body = journal[at + _HEAD.size : at + _HEAD.size + length]
        if length == 0 or len(body) < length or zlib.crc32(body) != crc:
            break
        records.append(decode_changes(body))
        at += _HEAD.size + length
    return records, at


def encode_snapshot(gen: int, table: dict[bytes, bytes]) -> bytes:
    parts = [_SNAP_HEAD.pack(MAGIC, gen, len(table))]
    for key in sorted(table):
        value = table[key]
        parts += (_ITEM.pack(len(key), len(value)), key, value)
    body = b"".join(parts)
    return body + _CRC.pack(zlib.crc32(body))


def decode_snapshot(data: bytes) -> tuple[int, dict[bytes, bytes]]:
    if len(data) < _SNAP_HEAD.size + _CRC.size or data[:8] != MAGIC:
        raise StoreError("the registry snapshot is not one (bad header)")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(data[: -_CRC.size]) != crc:
        raise StoreError("the registry snapshot is damaged (CRC mismatch)")
    _, gen, count = _SNAP_HEAD.unpack_from(data)
    table: dict[bytes, bytes] = {}
    at = _SNAP_HEAD.size
    for _ in range(count):
        klen, vlen = _ITEM.unpack_from(data, at)
        at += _ITEM.size
        table[data[at : at + klen]] = data[at + klen : at + klen + vlen]
        at += klen + vlen
    return gen, table


class JournalEngine(Engine):
    def __init__(self, path: Path, map_size: int, min_journal: int = MIN_JOURNAL) -> None:
        self.path = path
        self.limit_bytes = map_size  # keys plus values, as LMDB's map bounds them
        self.min_journal = min_journal
        self.table: dict[bytes, bytes] = {}
        self._bytes = 0  # keys plus values in the table
        self._gen = 0
        self._fd = -1
        self._at = 0  # where the next record goes
        self._capacity = 0
        # LMDB lets one writer in at a time, and callers lean on that: the acceptor's
        # catch-up writes from one worker thread while its group commit writes from
        # another. Records written at once would land on the same offset.
        self._writing = threading.Lock()
        self._lock = -1
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._lock = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StoreError(f"{path} is in use by another process") from None
            self._open()
        except OSError as exc:
            self._release()
            raise StoreError(f"cannot open {path}: {exc}") from exc

    # -- start-up --------------------------------------------------------------

    def _open(self) -> None:
        # an LMDB table from before this engine: imported below, or already in the
        # snapshot by a process that died before renaming it aside
        self._pending_import = (self.path / "data.mdb").exists()
        snap = self.path / "table.snap"
        if snap.exists():
            self._gen, self.table = decode_snapshot(snap.read_bytes())
            self._bytes = sum(len(k) + len(v) for k, v in self.table.items())
            self._drop_stale_journals()
            journal = self._journal_path(self._gen)
            if not journal.exists():  # the snapshot was renamed in; its journal is new
                self._compact()
                return
            self._fd = os.open(journal, os.O_RDWR)
            data = journal.read_bytes()
            records, self._at = replay(data)
            for changes in records:
                self._apply(changes)
            self._capacity = len(data)
            if data.count(0, self._at) != len(data) - self._at:
                self._zero_from(self._at)  # a torn record: its write never returned
            self._set_aside_lmdb()
            return
        self.table = self._import_lmdb()
        self._bytes = sum(len(k) + len(v) for k, v in self.table.items())
        self._compact()

    def _import_lmdb(self) -> dict[bytes, bytes]:
        """The LMDB engine's table, if this directory still holds one."""
        if not self._pending_import:
            return {}
        from services.registry.engines.lmdb_engine import LmdbEngine

        old = LmdbEngine(self.path, max(self.limit_bytes, 1024 * 1024))
        try:
            items = dict(old.items())
        finally:
            old.close()
        return items  # written as a snapshot first (``_compact``), then renamed aside

    def _drop_stale_journals(self) -> None:
        for p in self.path.glob("journal.*"):
            if p.name != f"journal.{self._gen}":
                p.unlink()

    def _journal_path(self, gen: int) -> Path:
        return self.path / f"journal.{gen}"

    # -- the engine contract ---------------------------------------------------

    def items(self) -> list[tuple[bytes, bytes]]:
        with self._writing:
            self._check()
            return sorted(self.table.items())

    def write(self, changes: Sequence[Change]) -> None:
        with self._writing:
            self._write(changes)

    def _write(self, changes: Sequence[Change]) -> None:
        self._check()
        if not changes:
            return  # an empty record would read as the journal's end
        size = self._bytes
        now: dict[bytes, bytes | None] = {}  # each key's value as the batch goes
        for key, value in changes:
            old = now[key] if key in now else self.table.get(key)
            size -= 0 if old is None else len(key) + len(old)
            size += 0 if value is None else len(key) + len(value)
            now[key] = value
        if self.limit_bytes and size > self.limit_bytes:
            raise StoreError(
                f"cannot write the session table: over {self.limit_bytes} bytes (map size)"
            )
        payload = encode_changes(changes)
        record = _HEAD.pack(len(payload), zlib.crc32(payload)) + payload
        try:
            if self._at + len(record) + _HEAD.size > self._capacity:
                self._compact(len(record))
            view = memoryview(record)
            at = self._at
            while view:
                n = os.pwrite(self._fd, view, at)
                view, at = view[n:], at + n
            os.fdatasync(self._fd)
        except OSError as exc:
            raise StoreError(f"cannot write the session table: {exc}") from exc
        self._at += len(record)
        self._apply(changes)

    def close(self) -> None:
        with self._writing:
            self._release()
            self._closed = True

    # -- inside ----------------------------------------------------------------

    _closed = False
    _pending_import = False

    def _check(self) -> None:
        if self._closed:
            raise StoreError("the session table is closed")

    def _apply(self, changes: Sequence[Change]) -> None:
        table = self.table
        for key, value in changes:
            old = table.pop(key, None)
            if old is not None:
                self._bytes -= len(key) + len(old)
            if value is not None:
                table[key] = value
                self._bytes += len(key) + len(value)

    def _compact(self, need: int = 0) -> None:
        """A snapshot of the table and an empty journal after it (see the docstring)."""
        gen = self._gen + 1
        snap = encode_snapshot(gen, self.table)
        capacity = max(self.min_journal, 2 * len(snap), 2 * (need + _HEAD.size))
        capacity = -(-capacity // _GRAIN) * _GRAIN
        journal = self._journal_path(gen)
        fd = os.open(journal, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            left = capacity
            while left:
                left -= os.write(fd, _ZEROS[: min(left, len(_ZEROS))])
            os.fsync(fd)
            tmp = self.path / "table.snap.tmp"
            with open(tmp, "wb") as f:
                f.write(snap)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path / "table.snap")
            self._sync_dir()
        except BaseException:
            os.close(fd)
            raise
        if self._fd >= 0:
            os.close(self._fd)
        old, self._gen = self._journal_path(self._gen), gen
        self._fd, self._at, self._capacity = fd, 0, capacity
        old.unlink(missing_ok=True)
        self._set_aside_lmdb()

    def _set_aside_lmdb(self) -> None:
        if self._pending_import:
            self._pending_import = False
            os.replace(self.path / "data.mdb", self.path / "data.mdb.imported")
            (self.path / "lock.mdb").unlink(missing_ok=True)
            self._sync_dir()

    def _zero_from(self, at: int) -> None:
        end = self._capacity
        while at < end:
            at += os.pwrite(self._fd, _ZEROS[: min(len(_ZEROS), end - at)], at)
        os.fdatasync(self._fd)

    def _sync_dir(self) -> None:
        dfd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1
