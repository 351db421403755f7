"""The registry's msgstore calls for one client id, in the order it made them.

Why: the Open of a resumed session's queue may complete after its CONNACK (see
:mod:`services.registry.registrar`), and so may the offline limit set at a session's end;
the id's next queue call (a clean start's Delete, the next registration's Open, expiry)
must still reach the store after them: the last call made is the state the queue must
end in. Every queue call goes through here and first waits for the calls still running
behind an answer; calls made without one pending go straight out, with no task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from services.common.session_key import SessionKey
from services.registry.backends import BackendError, Backends
from services.registry.sessions import DeleteQueue, OpenQueue

Refused = Callable[[OpenQueue, BackendError], None]


class QueueCalls:
    def __init__(self, backends: Backends, on_refused: Refused) -> None:
        self.backends = backends
        self._refused = on_refused
        self._behind: dict[SessionKey, asyncio.Task[None]] = {}  # Opens after an answer

    async def open(self, step: OpenQueue) -> None:
        await self._settled(step.key)
        await self.backends.open_queue(step)

    async def delete(self, step: DeleteQueue) -> None:
        await self._settled(step.key)
        await self.backends.delete_queue(step)

    def open_behind(self, step: OpenQueue) -> None:
        """Open the queue without anyone waiting, after the id's calls still running.

        A failure is logged (``rpc.failed``); a refusal (the store holds a newer epoch)
        also goes to ``on_refused``: the connection of ``step.epoch`` cannot write.
        """
        self._chain(step.key, lambda: self._open(step))

    def limit_behind(self, key: SessionKey, epoch: int, max_len: int) -> None:
        """Set the queue's length limit without anyone waiting, after the id's calls still
        running and before its next one. A failure is logged; the limit stays as it was
        until the next Open."""
        self._chain(key, lambda: self._limit(key, epoch, max_len))

    def _chain(self, key: SessionKey, call: Callable[[], Awaitable[None]]) -> None:
        previous = self._behind.get(key)

        async def run() -> None:
            if previous is not None:
                await asyncio.wait({previous})
            await call()

        task = asyncio.create_task(run())
        self._behind[key] = task
        task.add_done_callback(lambda done: self._done(key, done))

    async def _open(self, step: OpenQueue) -> None:
        try:
            await self.backends.open_queue(step)
        except BackendError as exc:
            if exc.code == "REFUSED":
                self._refused(step, exc)

    async def _limit(self, key: SessionKey, epoch: int, max_len: int) -> None:
        with contextlib.suppress(BackendError):  # logged (rpc.failed)
            await self.backends.limit_queue(key, epoch, max_len)

    def _done(self, key: SessionKey, task: asyncio.Task[None]) -> None:
        if self._behind.get(key) is task:
            del self._behind[key]

    async def _settled(self, key: SessionKey) -> None:
        task = self._behind.get(key)
        if task is not None:
            await asyncio.wait({task})  # its failure is its own, already reported

    async def close(self) -> None:
        """Let the calls still running behind their answers finish."""
        if self._behind:
            await asyncio.wait(set(self._behind.values()))
