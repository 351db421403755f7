"""The registry's msgstore calls for one client id, in the order it made them.

Why: the Open of a resumed session's queue may complete after its CONNACK (see
:mod:`services.registry.registrar`), and the id's next queue call (the offline limit at
its end, a clean start's Delete, the next registration's Open, expiry) must still reach
the store after it: the last call made is the state the queue must end in. Every queue
call goes through here and first waits for an Open still running behind an answer; calls
made without one pending go straight out, with no task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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

    async def limit(self, key: SessionKey, epoch: int, max_len: int) -> None:
        await self._settled(key)
        await self.backends.limit_queue(key, epoch, max_len)

    def open_behind(self, step: OpenQueue) -> None:
        """Open the queue without anyone waiting, after the id's calls still running.

        A failure is logged (``rpc.failed``); a refusal (the store holds a newer epoch)
        also goes to ``on_refused``: the connection of ``step.epoch`` cannot write.
        """
        task = asyncio.create_task(self._open_later(step, self._behind.get(step.key)))
        self._behind[step.key] = task
        task.add_done_callback(lambda done: self._done(step.key, done))

    async def _open_later(self, step: OpenQueue, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait({previous})
        try:
            await self.backends.open_queue(step)
        except BackendError as exc:
            if exc.code == "REFUSED":
                self._refused(step, exc)

    def _done(self, key: SessionKey, task: asyncio.Task[None]) -> None:
        if self._behind.get(key) is task:
            del self._behind[key]

    async def _settled(self, key: SessionKey) -> None:
        task = self._behind.get(key)
        if task is not None:
            await asyncio.wait({task})  # its failure is its own, already reported

    async def close(self) -> None:
        """Let the Opens still running finish."""
        if self._behind:
            await asyncio.wait(set(self._behind.values()))
