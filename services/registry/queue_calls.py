"""The registry's msgstore calls for one client id, in the order it made them.

Why: the Open of a resumed session's queue may complete after its CONNACK (see
:mod:`services.registry.registrar`); the id's next queue call (a clean start's Delete,
the next registration's Open, expiry) must still reach the store after it: the last call
made is the state the queue must end in. Every queue call goes through here and first
waits for the calls still running behind an answer; calls made without one pending go
straight out, with no task.

A session's end makes no queue call: each Open sets both of the queue's limits, and the
listener marks an append made while it holds no connection of the session ``offline``,
so the store applies the offline limit from the first append after the end. (The end
used to set the offline limit with a call of its own. It left after the end was
answered, so appends racing it met the online limit, and holding it back to share calls
let a burst right after a DISCONNECT fill the queue past ``max_offline_messages``.)
"""

from __future__ import annotations

import asyncio
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

    def _chain(self, key: SessionKey, call: Callable[[], Awaitable[None]]) -> None:
        previous = self._behind.get(key)

        async def run() -> None:
            if previous is not None:
                await asyncio.wait({previous})
            else:
                # A turn of the loop first: the answer this call is behind leaves before
                # it (its stream's writer runs in the same turn), and the store's work on
                # the call does not compete with the listener's on the CONNACK.
                await asyncio.sleep(0)
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
