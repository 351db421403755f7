"""Per-client-id serialisation of the registry's work: one FIFO lock per session key.

Why FIFO: registrations of one id must run in arrival order, so the last CONNECT wins.
"""

from __future__ import annotations

import asyncio
from collections import deque

from services.common.session_key import SessionKey


class KeyedLocks:
    """One FIFO lock per session key, kept only while somebody holds or waits for it.

    Hand-rolled rather than an ``asyncio.Lock`` per key: every CONNECT takes one, and an
    uncontended acquire here is a dict insert, not a lock object and a context manager.
    """

    def __init__(self) -> None:
        # key -> the waiters behind the current holder (present while the key is held)
        self._held: dict[SessionKey, deque[asyncio.Future[None]]] = {}

    def hold(self, key: SessionKey) -> _Held:
        return _Held(self, key)

    async def _acquire(self, key: SessionKey) -> None:
        waiters = self._held.get(key)
        if waiters is None:
            self._held[key] = deque()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release(key)  # we were handed the lock as we were cancelled: pass it on
            else:
                waiters.remove(fut)
            raise

    def _release(self, key: SessionKey) -> None:
        waiters = self._held[key]
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # ownership passes directly to the next waiter
                return
        del self._held[key]


class _Held:
    __slots__ = ("key", "locks")

    def __init__(self, locks: KeyedLocks, key: SessionKey) -> None:
        self.locks = locks
        self.key = key

    async def __aenter__(self) -> None:
        await self.locks._acquire(self.key)

    async def __aexit__(self, *exc: object) -> None:
        self.locks._release(self.key)
