"""The registry's msgstore calls for one client id, in the order it made them.

Why: the Open of a resumed session's queue may complete after its CONNACK (see
:mod:`services.registry.registrar`), and so may the offline limit set at a session's end;
the id's next queue call (a clean start's Delete, the next registration's Open, expiry)
must still reach the store after them: the last call made is the state the queue must
end in. Every queue call goes through here and first waits for the calls still running
behind an answer; calls made without one pending go straight out, with no task.

Offline limits leave at the end of the loop's turn, every one of that turn in one
``Limit`` call (a connect storm's ends share it). A limit still waiting when the id's
next queue call is made is dropped instead: that call (an Open, which sets the online
limit, or a Delete) is the state the queue must end in. For a store round trip after a
session's end its queue may still hold the online limit (``max_online_messages`` plus the
inflight window). Holding limits longer for company (10 ms) took a sequential reconnect
loop's CONNACK p50 from 882 to about 725 µs, but let a burst published right after the
end fill the queue past ``max_offline_messages`` (``test_e2e_broker_audit``): an offline
limit must land before the appends that follow the end, not 10 ms later.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
from collections.abc import Awaitable, Callable

from services.common.session_key import SessionKey
from services.registry.backends import BackendError, Backends
from services.registry.sessions import DeleteQueue, OpenQueue

Refused = Callable[[OpenQueue, BackendError], None]

LIMIT_BEHIND = 0.0  # s an offline limit waits for others to leave with it (see above)
MAX_LIMITS = 1000  # limits per Limit call


class QueueCalls:
    def __init__(self, backends: Backends, on_refused: Refused) -> None:
        self.backends = backends
        self._refused = on_refused
        self._behind: dict[SessionKey, asyncio.Task[None]] = {}  # Opens after an answer
        self._limits: dict[SessionKey, tuple[int, int]] = {}  # waiting: (epoch, max_len)
        self._limiter: asyncio.TimerHandle | None = None

    async def open(self, step: OpenQueue) -> None:
        await self._superseding(step.key, lambda: self.backends.open_queue(step))

    async def delete(self, step: DeleteQueue) -> None:
        await self._superseding(step.key, lambda: self.backends.delete_queue(step))

    async def _superseding(self, key: SessionKey, call: Callable[[], Awaitable[object]]) -> None:
        """``call`` after the id's calls still running, in place of its waiting limit: a
        call that fails (the registration or expiry is undone) leaves the limit waiting."""
        waiting = self._limits.pop(key, None)
        try:
            await self._settled(key)
            await call()
        except BackendError:
            if waiting is not None and key not in self._limits:
                self.limit_behind(key, *waiting)
            raise

    def open_behind(self, step: OpenQueue) -> None:
        """Open the queue without anyone waiting, after the id's calls still running.

        A failure is logged (``rpc.failed``); a refusal (the store holds a newer epoch)
        also goes to ``on_refused``: the connection of ``step.epoch`` cannot write.
        """
        self._chain(step.key, lambda: self._open(step))

    def limit_behind(self, key: SessionKey, epoch: int, max_len: int) -> None:
        """Set the queue's length limit without anyone waiting, at the end of this turn of
        the loop, after the id's calls still running; dropped if the id's next call comes
        first. A failure is logged; the limit stays as it was until the next Open."""
        self._limits[key] = (epoch, max_len)
        if self._limiter is None:
            self._limiter = asyncio.get_running_loop().call_later(LIMIT_BEHIND, self._send_limits)

    def _send_limits(self) -> None:
        """Every waiting limit leaves now, ``MAX_LIMITS`` to a call; each id's calls
        still running go first."""
        self._limiter = None
        while self._limits:
            batch = dict(itertools.islice(self._limits.items(), MAX_LIMITS))
            for key in batch:
                del self._limits[key]
            previous = {task for key in batch if (task := self._behind.get(key)) is not None}
            task = asyncio.create_task(self._limit_all(batch, previous))
            for key in batch:
                self._behind[key] = task
                task.add_done_callback(functools.partial(self._done, key))

    async def _limit_all(
        self, batch: dict[SessionKey, tuple[int, int]], previous: set[asyncio.Task[None]]
    ) -> None:
        if previous:
            await asyncio.wait(previous)
        limits = [(key, epoch, max_len) for key, (epoch, max_len) in batch.items()]
        with contextlib.suppress(BackendError):  # logged (rpc.failed)
            await self.backends.limit_queues(limits)

    def _chain(self, key: SessionKey, call: Callable[[], Awaitable[None]]) -> None:
        self._limits.pop(key, None)  # superseded by this call
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
        """Send the waiting limits, and let the calls still running behind their answers
        finish."""
        if self._limiter is not None:
            self._limiter.cancel()
            self._send_limits()
        if self._behind:
            await asyncio.wait(set(self._behind.values()))
