"""The registry's durable session table: LMDB, fsynced group commits.

Why: epochs must never go backwards, across a SIGKILL too, and persistent sessions must
outlive the process. Every change to a durable session (``Session.durable``: persistent, or
holding a queue) is written through before the RPC that caused it answers. A clean session
is never written: it cannot outlive a registry restart anyway (the listeners drop their
connections when the registry comes back), so a plain CONNECT costs no fsync.
:class:`Journal` gathers the changes of concurrent RPCs into one LMDB write
transaction (one fsync) run in a worker thread, so a burst of CONNECTs costs a few fsyncs,
not one each, and the event loop never blocks on the disk.

Layout (one LMDB environment in ``data_dir/registry``):
  ``s`` + BLAKE2b-128(mountpoint \\0 client_id) -> ``SessionInfo`` (the key is inside;
  hashing keeps LMDB keys under its 511-byte limit whatever the client id's length)
  ``m:epoch`` -> the epoch reservation, 8 bytes big-endian: every epoch issued is at or
  below it, so a restart continues above it without a write per registration.

This is the only module of the registry that imports ``lmdb``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import lmdb

from services.common.session_key import SessionKey
from services.pb import registry_pb2
from services.registry.leadership import key_bytes
from services.registry.records import from_info, to_info
from services.registry.sessions import Session

_EPOCH_KEY = b"m:epoch"


class StoreError(OSError):
    """The table could not be read or written (disk full, map full, I/O error)."""


@dataclass(frozen=True, slots=True)
class Put:
    session: Session


@dataclass(frozen=True, slots=True)
class Delete:
    key: SessionKey


@dataclass(frozen=True, slots=True)
class Reserve:
    epoch: int


Op = Put | Delete | Reserve


def _db_key(key: SessionKey) -> bytes:
    return b"s" + hashlib.blake2b(key_bytes(key), digest_size=16).digest()


class SessionStore:
    """Blocking LMDB access; call :meth:`apply` from one thread at a time."""

    def __init__(self, path: Path, map_size: int) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._env = lmdb.open(
                str(path),
                map_size=map_size,
                subdir=True,
                sync=True,
                metasync=True,
                max_dbs=0,
                readahead=False,
            )
        except (lmdb.Error, OSError) as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc

    def load(self) -> tuple[list[Session], int]:
        """Every stored session and the epoch reservation."""
        sessions = []
        reserved = 0
        try:
            with self._env.begin() as txn:
                for k, v in txn.cursor():
                    if k == _EPOCH_KEY:
                        reserved = int.from_bytes(v, "big")
                    elif k[:1] == b"s":
                        sessions.append(from_info(registry_pb2.SessionInfo.FromString(v)))
        except lmdb.Error as exc:
            raise StoreError(f"cannot read the session table: {exc}") from exc
        return sessions, reserved

    def apply(self, ops: Sequence[Op]) -> None:
        """Write ``ops`` in order in one durable transaction."""
        try:
            with self._env.begin(write=True) as txn:
                for op in ops:
                    if isinstance(op, Put):
                        txn.put(_db_key(op.session.key), to_info(op.session).SerializeToString())
                    elif isinstance(op, Delete):
                        txn.delete(_db_key(op.key))
                    else:
                        txn.put(_EPOCH_KEY, op.epoch.to_bytes(8, "big"))
        except lmdb.Error as exc:
            raise StoreError(f"cannot write the session table: {exc}") from exc

    def close(self) -> None:
        self._env.close()


class Journal:
    """Write-behind of the in-memory table with group commit.

    Callers change the table, then ``await sync(key)``: it returns once a transaction
    that started after the call has written the key's *current* state (a put, or a delete
    when the table no longer holds it). Writing current state rather than queued values
    keeps the disk equal to the table whatever order concurrent RPCs change one key in.
    """

    def __init__(
        self,
        store: SessionStore,
        lookup: Callable[[SessionKey], Session | None],
        on_disk: Iterable[SessionKey] = (),
    ) -> None:
        self._store = store
        self._lookup = lookup
        self._on_disk: set[SessionKey] = set(on_disk)  # keys with a record in the store
        self._dirty: set[SessionKey] = set()
        self._writing: set[SessionKey] = set()  # keys of the transaction in progress
        self._reserve = 0  # epoch reservation to write, 0 = unchanged
        self._waiters: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._closed = False
        self._task = asyncio.create_task(self._run(), name="registry-journal")

    async def sync(self, *keys: SessionKey, reserve: int = 0) -> None:
        """Make the current state of ``keys`` (and an epoch reservation) durable.

        Returns at once when there is nothing to write: the keys' sessions are not durable
        and the store holds no record of them.
        """
        if self._closed:
            raise StoreError("the session table is closed")
        keys = tuple(k for k in keys if self._may_hold(k) or self._durable(k))
        if not keys and not reserve:
            return
        self._dirty.update(keys)
        self._reserve = max(self._reserve, reserve)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._wake.set()
        await fut

    def _may_hold(self, key: SessionKey) -> bool:
        """The store holds (or is about to hold) a record of ``key``: a record written by
        a transaction still in progress must be overwritten too."""
        return key in self._on_disk or key in self._dirty or key in self._writing

    def _durable(self, key: SessionKey) -> bool:
        session = self._lookup(key)
        return session is not None and session.durable

    async def _run(self) -> None:
        while not self._closed or self._waiters:
            await self._wake.wait()
            self._wake.clear()
            if self._waiters:
                await self._commit()

    async def _commit(self) -> None:
        keys, self._dirty = self._dirty, set()
        self._writing = keys
        waiters, self._waiters = self._waiters, []
        reserve, self._reserve = self._reserve, 0
        ops: list[Op] = []
        written: list[tuple[SessionKey, bool]] = []
        for key in keys:
            session = self._lookup(key)
            if session is None or not session.durable:
                ops.append(Delete(key))  # a record that no longer says anything true
                written.append((key, False))
            else:
                ops.append(Put(session))
                written.append((key, True))
        if reserve:
            ops.append(Reserve(reserve))
        try:
            await asyncio.to_thread(self._store.apply, ops)
        except Exception as exc:  # a dead journal would hang every caller: tell them all
            self._writing = set()
            error = exc if isinstance(exc, StoreError) else StoreError(f"journal: {exc!r}")
            self._dirty |= keys  # written by the next transaction that succeeds
            self._reserve = max(self._reserve, reserve)
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(error)
            return
        self._writing = set()
        for key, stored in written:
            if stored:
                self._on_disk.add(key)
            else:
                self._on_disk.discard(key)
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def close(self) -> None:
        """Finish what was asked, then stop."""
        self._closed = True
        self._wake.set()
        await self._task
