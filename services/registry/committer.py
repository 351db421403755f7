"""Group commit of the session table: the changes of concurrent RPCs, one fsync.

Why: every change to a durable session must be on disk before its RPC answers, and a
burst of CONNECTs would otherwise cost an fsync each. The :class:`Committer` gathers the
keys that changed while a transaction was being written and writes them all in the
next one. A large transaction is written in a worker thread, so the event loop goes on
while the disk works; a small one, on the loop, while the disk answers fast
(:class:`~services.common.inline_policy.InlinePolicy`).

A change nobody waits for (the end of a connection, :meth:`Committer.write_behind`)
waits for the next transaction instead, ``BEHIND`` seconds at most. A client that
reconnects right after it disconnected then finds one transaction on its CONNECT's
path, which carries both, rather than its previous connection's end still being
written ahead of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable

from services.common.inline_policy import INLINE_OPS, InlinePolicy
from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.registry.engines.base import StoreError
from services.registry.sessions import Session
from services.registry.store import Delete, Op, Put, Reserve, SessionStore

BEHIND = 0.05  # s: a change nobody waits for is written with the next transaction, or then
RETRY = 1.0  # s: after a failed transaction, what nobody waits for is tried again this late


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
        metrics: MetricsRegistry | None = None,
        inline_ops: int = INLINE_OPS,
    ) -> None:
        self._store = store
        self._lookup = lookup
        self._on_disk: set[SessionKey] = set(on_disk)  # keys with a record in the store
        self._dirty: set[SessionKey] = set()
        self._writing: set[SessionKey] = set()  # keys of the transaction in progress
        self._reserve = 0  # epoch reservation to write, 0 = unchanged
        self._waiters: list[asyncio.Future[None]] = []
        self._behind_at: float | None = None  # loop time when unwaited changes are due
        self._wake = asyncio.Event()
        self._closed = False
        self._task = asyncio.create_task(self._run(), name="registry-committer")
        self._where = InlinePolicy(inline_ops)
        self._commits = self._commit_seconds = None
        if metrics is not None:
            self._commits = metrics.counter(
                "registry_commits_total", "Session table write transactions (each synced)."
            )
            self._commit_seconds = metrics.counter(
                "registry_commit_seconds_total", "Time spent writing and syncing them."
            )

    async def sync(self, *keys: SessionKey, reserve: int = 0) -> None:
        """Make the current state of ``keys`` (and an epoch reservation) durable.

        Returns at once when there is nothing to write: the keys' sessions are not durable
        and the store holds no record of them.
        """
        written = self.sync_soon(*keys, reserve=reserve)
        if written is not None:
            await written

    def sync_soon(self, *keys: SessionKey, reserve: int = 0) -> asyncio.Future[None] | None:
        """:meth:`sync` begun now, to be awaited later (None: nothing to write); the
        caller may do other work in between without a task for either."""
        if self._closed:
            raise StoreError("the session table is closed")
        keys = tuple(k for k in keys if self._may_hold(k) or self._durable(k))
        if not keys and not reserve:
            return None
        self._dirty.update(keys)
        self._reserve = max(self._reserve, reserve)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._wake.set()
        return fut

    def write_behind(self, *keys: SessionKey) -> None:
        """Make the current state of ``keys`` durable with the next transaction, within
        ``BEHIND`` seconds, without waiting for it."""
        if self._closed:
            raise StoreError("the session table is closed")
        keys = tuple(k for k in keys if self._may_hold(k) or self._durable(k))
        if not keys:
            return
        self._dirty.update(keys)
        if self._behind_at is None:
            self._behind_at = asyncio.get_running_loop().time() + BEHIND
        self._wake.set()

    def _may_hold(self, key: SessionKey) -> bool:
        """The store holds (or is about to hold) a record of ``key``: a record written by
        a transaction still in progress must be overwritten too."""
        return key in self._on_disk or key in self._dirty or key in self._writing

    def _durable(self, key: SessionKey) -> bool:
        session = self._lookup(key)
        return session is not None and session.durable

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = self._behind_at
            if self._waiters or (due is not None and (self._closed or loop.time() >= due)):
                await self._commit()
                continue
            if self._closed:
                return
            self._wake.clear()
            if due is None:
                await self._wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), due - loop.time())

    async def _commit(self) -> None:
        self._behind_at = None  # whatever was left behind goes in this transaction
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
        now = asyncio.get_running_loop().time()
        started = time.perf_counter()
        try:
            if self._where.inline(len(ops), now):
                self._store.apply(ops)
            else:
                await asyncio.to_thread(self._store.apply, ops)
        except Exception as exc:  # a dead committer would hang every caller: tell them all
            self._where.took(time.perf_counter() - started, now)
            self._writing = set()
            error = exc if isinstance(exc, StoreError) else StoreError(f"group commit: {exc!r}")
            self._dirty |= keys  # written by the next transaction that succeeds
            self._reserve = max(self._reserve, reserve)
            if not self._closed:  # nobody may be waiting for these keys: try again later
                self._behind_at = asyncio.get_running_loop().time() + RETRY

            for fut in waiters:
                if not fut.done():
                    fut.set_exception(error)
            return
        self._writing = set()
        took = time.perf_counter() - started
        self._where.took(took, now)
        if self._commits is not None and self._commit_seconds is not None:
            self._commits.inc()
            self._commit_seconds.inc(took)
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
