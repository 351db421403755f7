"""The registry's writes to gossip: session directory records and subscription drops, in order.

Why one writer: a session's directory record must reach gossip in the order its changes
happened (online at CONNECT, offline at its end), whether or not the caller waits for it,
and a CONNECT that resumes a session does not wait: nothing reads the record before the
CONNACK, and a registry that dies before writing it corrects it at its restart
(:mod:`services.registry.recovery` rewrites every recovered session's record). A write
that drops subscriptions is waited for: the new session's own subscriptions must not be
dropped by a write that arrives after them.

One ``Put`` is in flight at a time; what is written meanwhile leaves as the next one, so
a connect storm costs a Put per round trip, not per session. A write somebody waits for
leaves at once, with everything sent before it. Writes nobody waits for linger up to
``BEHIND`` seconds for company: each Put is a durable gossip commit (two flushes) and a
broadcast, and a client that connects and disconnects in a loop would otherwise cost two
of them per cycle, on the disk that the registry's own write, which its CONNACK waits for,
shares. Nothing reads a record within that time (the register, not the directory, says
who owns a client id). A failed Put fails the writes it carried (the waiting callers get
the :class:`BackendError`, already logged as ``rpc.failed``); the others are caught up by
the session's next change, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable

from services.pb import gossip_pb2
from services.registry.backends import BackendError

MAX_OPS = 1000  # gossip ops per Put at most (a write is never split)
BEHIND = 0.05  # s a write nobody waits for may linger for others to join it

Put = Callable[[list[gossip_pb2.MetaOp]], Awaitable[None]]


class _Write:
    __slots__ = ("done", "ops")

    def __init__(self, ops: list[gossip_pb2.MetaOp], done: asyncio.Future[None] | None) -> None:
        self.ops = ops
        self.done = done


class DirectoryWriter:
    def __init__(self, put: Put, behind: float = BEHIND) -> None:
        self._put = put
        self.behind = behind
        self._waited = 0  # queued writes that somebody waits for
        self._queued_ops = 0
        self._queue: deque[_Write] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.puts = 0  # Puts made (for tests and status)

    def send(self, ops: list[gossip_pb2.MetaOp]) -> None:
        """Write ``ops`` after everything sent before; nobody waits for them."""
        self._enqueue(_Write(ops, None))

    async def write(self, ops: list[gossip_pb2.MetaOp]) -> None:
        """Write ``ops`` after everything sent before; returns once gossip has them."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(_Write(ops, done))
        await done

    def _enqueue(self, write: _Write) -> None:
        if self._closing:
            if write.done is not None:
                write.done.set_exception(
                    BackendError("gossip", "Put", "CANCELLED", "the registry is stopping")
                )
            return
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="registry-directory")
        self._queue.append(write)
        self._waited += write.done is not None
        self._queued_ops += len(write.ops)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            while self._queue:
                await self._linger()
                await self._flush(self._take())
            if self._closing:
                return
            self._wake.clear()
            await self._wake.wait()

    async def _linger(self) -> None:
        """Until ``behind`` has passed, somebody waits for a write, a Put's worth is
        queued (a storm is not slowed down), or the writer closes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.behind
        while not self._waited and not self._closing and self._queued_ops < MAX_OPS:
            left = deadline - loop.time()
            if left <= 0:
                return
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), left)

    def _take(self) -> list[_Write]:
        batch = [self._queue.popleft()]
        count = len(batch[0].ops)
        while self._queue and count + len(self._queue[0].ops) <= MAX_OPS:
            count += len(self._queue[0].ops)
            batch.append(self._queue.popleft())
        self._waited -= sum(w.done is not None for w in batch)
        self._queued_ops -= count
        return batch

    async def _flush(self, batch: list[_Write]) -> None:
        ops = [op for write in batch for op in write.ops]
        error: BackendError | None = None
        try:
            await self._put(ops)
        except BackendError as exc:  # logged by the backends as rpc.failed
            error = exc
        self.puts += 1
        for write in batch:
            if write.done is None or write.done.done():
                continue
            if error is None:
                write.done.set_result(None)
            else:
                write.done.set_exception(error)

    async def close(self) -> None:
        """Write what was sent, then stop; later writes fail."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
