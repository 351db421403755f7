"""Group commit: many streams' batches, one write transaction, one fsync.

Theory of operation. Every writer (each listener's Stream, Open, Delete) calls
:meth:`Committer.submit` and awaits the returned future. One asyncio task gathers
pending jobs: when the first one arrives it waits at most ``max_delay`` (measured from
that job's arrival, so time spent waiting behind the previous commit counts) for more,
or until ``max_batch`` operations are pending, then writes the group. It waits only for
a *busy* stream, one that sent a batch within ``busy_for`` and has none in the group: a
listener sends its next batch only once this one is answered, so a stream already in
the group sends nothing more, and one idle for that long is not about to; waiting for
either would be pure latency, with the store and the listener both idle meanwhile. A
lone call (an Open, a Delete: a session's CONNECT waits for it) is never waited for by
itself: "send now if idle, gather while busy". Whatever arrives while a group is
written forms the next group anyway. The whole group is applied in one transaction and
committed; with ``fsync = always`` it is also synced, so no future resolves before its
write is durable. Futures then resolve in submission order, which is the order the jobs
were applied: a stream that awaits its futures in order sends its results in order. The
slower the disk, the larger the groups.

``fsync = interval``: futures resolve after the commit; the task syncs when the oldest
unsynced commit is ``interval`` old. ``never``: only :meth:`close` syncs. LMDB allows
one writer and blocks in commit and fsync, hence one dedicated thread, used only after a
write stalled the loop or while writes are slow (``InlinePolicy``, with the store's
settings): otherwise every group is written on the loop. Handing a group to the thread
and back cost more in wake-ups than the loop would have done meanwhile: its streams wait
for that group, and what they send next is read when it is done. A group is written on
the loop or in the thread, never both at once, so LMDB sees one writer.

A job is never split: one with more than ``max_batch`` operations forms a group alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from services.common import log
from services.common.inline_policy import STORE_INLINE_OPS, STORE_INLINE_UNDER, InlinePolicy
from services.msgstore.engines.base import StoreError
from services.msgstore.metrics import StoreMetrics
from services.msgstore.model import (
    AppendStatus,
    BatchResult,
    Collected,
    Job,
    OpenQueue,
    QueueState,
    Result,
    WriteBatch,
)
from services.msgstore.queue import QueueStore, failed_result

POLICIES = ("always", "interval", "never")
LOG_PERIOD = 1.0  # store.commit is sampled: at most one line per second
BUSY_FOR = 0.02  # s after its last batch that a stream still counts as busy (waited for)
_QUEUE_OPS: dict[type, str] = {OpenQueue: "open"}  # else "delete"


@dataclass(slots=True)
class _Pending:
    job: Job
    future: asyncio.Future[Result]
    arrived: float
    writer: object | None


@dataclass(slots=True)
class _Outcome:
    results: list[Result]
    commit_s: float = 0.0
    fsync_s: float | None = None  # None: not synced
    bug: Exception | None = None  # not a store error: the callers get the exception


class Committer:
    def __init__(
        self,
        store: QueueStore,
        fsync: str = "always",
        interval: float = 1.0,
        max_batch: int = 4096,
        max_delay: float = 0.002,
        metrics: StoreMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        busy_for: float = BUSY_FOR,
        inline_ops: int = STORE_INLINE_OPS,
    ) -> None:
        if fsync not in POLICIES:
            raise ValueError(f"fsync policy must be one of {POLICIES}, got {fsync!r}")
        self.store = store
        self.fsync = fsync
        self.interval = interval
        self.max_batch = max(1, max_batch)
        self.max_delay = max(0.0, max_delay)
        self.busy_for = busy_for
        self.metrics = metrics
        self.clock = clock
        self._pending: deque[_Pending] = deque()
        self._pending_ops = 0
        self._streams: dict[object, float] = {}  # open streaming writers -> last batch sent
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="msgstore-commit")
        self._where = InlinePolicy(inline_ops, STORE_INLINE_UNDER)
        self._unsynced_since: float | None = None  # clock time of the oldest unsynced commit
        self._last_log = self._last_error_log = -LOG_PERIOD
        self.groups = 0  # committed groups, for tests and status

    # -- public ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="msgstore-committer")

    def submit(self, job: Job, stream: object | None = None) -> asyncio.Future[Result]:
        """Queue ``job`` for the next group; the future resolves once it is written (and,
        with ``fsync = always``, durable). Store errors resolve it with an error result.
        ``stream``: the open stream (see :meth:`stream_opened`) the job came from."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        if self._closing:
            future.set_result(failed_result(job, "msgstore is shutting down"))
            return future
        now = self.clock()
        self._pending.append(_Pending(job, future, now, stream))
        if stream in self._streams:
            self._streams[stream] = now
        self._pending_ops += job.ops
        self._wakeup.set()
        return future

    def stream_opened(self, stream: object) -> None:
        """A writer that will submit batch after batch: a group does not wait for it
        while it has a job pending, nor once it is idle (see the module's docstring)."""
        self._streams[stream] = -math.inf  # idle until its first batch

    def stream_closed(self, stream: object) -> None:
        self._streams.pop(stream, None)
        self._wakeup.set()  # the group being gathered may have been waiting for it

    async def close(self) -> None:
        """Write everything already submitted, sync, and stop the thread."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        self._executor.shutdown(wait=True)

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- the gathering task ---------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = self._sync_due_in()
            if due == 0.0:  # checked between groups too: a busy store must still sync
                await loop.run_in_executor(self._executor, self._sync_now, "fsync")
                continue
            if not self._pending:
                if self._closing:
                    break
                await self._sleep(due)
                continue
            await self._gather()
            group, ops = self._take()
            now = self.clock()
            if self._where.inline(ops, now):
                outcome = self._write(group)  # small, on an idle store: see the docstring
            else:
                outcome = await loop.run_in_executor(self._executor, self._write, group)
            self._where.took(outcome.commit_s + (outcome.fsync_s or 0.0), now)
            for pending, result in zip(group, outcome.results, strict=True):
                if pending.future.done():  # the caller went away
                    continue
                if outcome.bug is not None:
                    pending.future.set_exception(outcome.bug)
                else:
                    pending.future.set_result(result)
        if self._unsynced_since is not None:
            await loop.run_in_executor(self._executor, self._sync_now, "final fsync")

    async def _sleep(self, timeout: float | None) -> None:
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _gather(self) -> None:
        deadline = self._pending[0].arrived + self.max_delay
        while self._pending_ops < self.max_batch and not self._closing:
            now = self.clock()
            if not self._busy_elsewhere(now):
                return  # nothing more is likely to come soon
            remaining = deadline - now
            if remaining <= 0:
                return
            await self._sleep(remaining)

    def _busy_elsewhere(self, now: float) -> bool:
        """Whether a busy stream (see the module's docstring) has no batch in the group."""
        since = now - self.busy_for
        busy = [s for s, last in self._streams.items() if last > since]
        if not busy:
            return False
        writers = {p.writer for p in self._pending}
        return any(s not in writers for s in busy)

    def _take(self) -> tuple[list[_Pending], int]:
        """The next group, and its operations."""
        group = [self._pending.popleft()]
        ops = group[0].job.ops
        while self._pending and ops + self._pending[0].job.ops <= self.max_batch:
            item = self._pending.popleft()
            ops += item.job.ops
            group.append(item)
        self._pending_ops -= ops
        return group, ops

    def _sync_due_in(self) -> float | None:
        """Seconds until the interval policy must sync; None when nothing waits for it."""
        if self.fsync != "interval" or self._unsynced_since is None:
            return None
        return max(0.0, self._unsynced_since + self.interval - self.clock())

    # -- the worker thread ----------------------------------------------------------

    def _write(self, group: Sequence[_Pending]) -> _Outcome:
        jobs = [p.job for p in group]
        start = time.perf_counter()
        try:
            results = self.store.write_group(jobs)
        except Exception as exc:
            # A bug, not a store error (those come back as results): fail this group's
            # callers loudly and keep serving the others.
            log.emit("internal.error", "error", op="commit", reason=f"{type(exc).__name__}: {exc}")
            return _Outcome([failed_result(j, "internal error") for j in jobs], bug=exc)
        commit_s = time.perf_counter() - start
        if self._unsynced_since is None:
            self._unsynced_since = self.clock()
        fsync_s = None
        if self.fsync == "always":
            fsync_s = self._sync_now("fsync")
            if fsync_s is None:
                results = [
                    failed_result(j, "fsync failed: the write may not be durable") for j in jobs
                ]
        outcome = _Outcome(results, commit_s, fsync_s)
        self._account(jobs, outcome)
        return outcome

    def _sync_now(self, what: str) -> float | None:
        """fsync; its duration, or None if it failed (logged)."""
        start = time.perf_counter()
        try:
            self.store.engine.sync()
        except StoreError as exc:
            log.emit("store.error", "error", op=what, reason=str(exc))
            if self.metrics is not None:
                self.metrics.errors.labels("fsync").inc()
            return None
        elapsed = time.perf_counter() - start
        self._unsynced_since = None
        if self.metrics is not None:
            self.metrics.fsynced(elapsed)
        return elapsed

    def _account(self, jobs: Sequence[Job], outcome: _Outcome) -> None:
        self.groups += 1
        appended = size = ops = 0
        for job, result in zip(jobs, outcome.results, strict=True):
            ops += job.ops
            if isinstance(result, BatchResult):
                assert isinstance(job, WriteBatch)
                appended, size = self._count_appends(job, result, appended, size)
                if result.error:
                    self._error("write", result.error)
            elif isinstance(result, QueueState) and result.store_error:
                self._error(_QUEUE_OPS.get(type(job), "delete"), result.error)
            elif isinstance(result, Collected) and result.error:
                self._error("collect", result.error)
        m = self.metrics
        if m is not None:
            m.commits.inc()
            m.writes.inc(ops)
            m.appends.inc(appended)
            m.append_bytes.inc(size)
            m.commit_sum.inc(outcome.commit_s)
        now = self.clock()
        if now - self._last_log >= LOG_PERIOD:
            self._last_log = now
            fsync_us = int((outcome.fsync_s or 0.0) * 1e6)
            log.emit("store.commit", entries=ops, bytes=size, fsync_us=fsync_us)

    def _error(self, op: str, reason: str) -> None:
        """Count every failed job; log at most one line per second (a full store fails
        every write, and the log must not be what fills the disk next)."""
        if self.metrics is not None:
            self.metrics.errors.labels(op).inc()
        now = self.clock()
        if now - self._last_error_log >= LOG_PERIOD:
            self._last_error_log = now
            log.emit("store.error", "warning", op=op, reason=reason)

    def _count_appends(
        self, job: WriteBatch, result: BatchResult, n: int, size: int
    ) -> tuple[int, int]:
        for op, res in zip(job.appends, result.results, strict=True):
            if res.status == AppendStatus.OK:
                n += 1
                size += len(op.data)
            elif self.metrics is not None:
                self.metrics.rejected.labels(res.status.name.lower()).inc()
        return n, size
