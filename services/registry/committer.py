"""Group commit of the session table: the changes of concurrent RPCs, one fsync.

Why: every change to a durable session must be on disk before its RPC answers, and a
burst of CONNECTs would otherwise cost an fsync each. The :class:`Committer` gathers the
keys that changed while a transaction was being written and writes them all in the
next one, in a worker thread, so the event loop never blocks on the disk.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from services.common.session_key import SessionKey
from services.registry.engines.base import StoreError
from services.registry.sessions import Session
from services.registry.store import Delete, Op, Put, Reserve, SessionStore


class Committer:
    """Write-behind of the in-memory table by group commit.

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
        self._task = asyncio.create_task(self._run(), name="registry-committer")

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
        except Exception as exc:  # a dead committer would hang every caller: tell them all
            self._writing = set()
            error = exc if isinstance(exc, StoreError) else StoreError(f"group commit: {exc!r}")
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
