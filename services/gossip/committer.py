"""Group commit: many Put requests, one durable write, then acknowledgements.

Theory of operation
-------------------
Requests queue up as *stage* functions (``txn.apply(ops)``, ``txn.collect_garbage(...)``,
later ``txn.merge_remote(records)``). One task takes everything queued (up to
``max_batch``), stages it in order into one store transaction, encodes the staged
records into one :class:`WriteBatch` and writes it on the engine's own thread (LMDB
commit + fsync, off the event loop). While that write is in flight new requests queue,
and the next round takes them all: the busier the service, the more Puts share an
fsync, with no timer.

Only after the write returned does the store install the transaction and do the
requests' futures resolve, so an acknowledged Put is on disk, readers never see data a
crash could lose, and a failed write (full disk) refuses exactly its batch and leaves
the store as it was. Watchers are told about the visible changes right after install.

Shutdown: ``close`` lets the task finish everything queued, then stops it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from services.common import log
from services.gossip import codec
from services.gossip.engines.base import Engine, StoreFull, WriteBatch
from services.gossip.metrics import GossipMetrics
from services.gossip.store import MetaStore, Record, Txn, UnknownPrefix, Update

T = TypeVar("T")
DOT_FLOOR_KEY = b"dot_floor"
_LOG_EVERY_S = 1.0  # store.commit is sampled: at most one line per second


class CommitError(Exception):
    """A batch could not be made durable; none of its requests was applied."""


class CommitFull(CommitError):
    """The store is full (``gossip.map_size``); the batch was refused."""


class ShuttingDown(CommitError):
    """The service is stopping and takes no more writes."""


@dataclass(slots=True)
class _Pending:
    stage: Callable[[Txn], Any]
    future: asyncio.Future[Any]


def load_store(store: MetaStore, engine: Engine) -> int:
    """Fill ``store`` from ``engine`` at start-up; returns how many records were loaded.

    An undecodable record is reported (``store.error``) and skipped: one damaged key must
    not keep the node's metadata service down.
    """
    records = []
    for raw in engine.records():
        try:
            prefix, key, clock = codec.decode_record(raw)
        except codec.CodecError as exc:
            log.emit("store.error", "error", op="load", reason=f"skipped a record: {exc}")
            continue
        if prefix not in store.resolvers:
            log.emit("store.error", "error", op="load", reason=f"unknown prefix {prefix!r}")
            continue
        records.append(Record(prefix, key, clock))
    floor_raw = engine.meta(DOT_FLOOR_KEY)
    store.load(records, codec.decode_uint(floor_raw) if floor_raw is not None else 0)
    return len(records)


def write_batch(txn: Txn) -> WriteBatch:
    """The engine writes that make ``txn`` durable."""
    batch = WriteBatch()
    for rec in txn.writes():
        batch.puts.append(
            (
                codec.record_key(rec.prefix, rec.key),
                codec.encode_record(rec.prefix, rec.key, rec.clock),
            )
        )
    batch.deletes = [codec.record_key(prefix, key) for prefix, key in txn.removals()]
    if txn.dot_floor_changed():
        batch.meta[DOT_FLOOR_KEY] = codec.encode_uint(txn.dot_floor)
    return batch


class Committer:
    def __init__(
        self,
        store: MetaStore,
        engine: Engine,
        executor: Executor,
        *,
        max_batch: int,
        clock_us: Callable[[], int],
        on_commit: Callable[[list[Update]], None],
        metrics: GossipMetrics | None = None,
        on_durable: Callable[[Txn, WriteBatch], None] | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.executor = executor
        self.max_batch = max_batch
        self.clock_us = clock_us
        self.on_commit = on_commit
        self.metrics = metrics
        self.on_durable = on_durable  # after each commit: the txn and what was written
        self._queue: deque[_Pending] = deque()
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._last_log = 0.0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="gossip-committer")

    async def submit(self, stage: Callable[[Txn], T]) -> T:
        """Stage, make durable, install; returns ``stage``'s result once on disk."""
        if self._closing:
            raise ShuttingDown("the gossip service is shutting down")
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(stage, future))
        self._wake.set()
        return await future

    async def close(self) -> None:
        """Commit what is queued, then stop; later submits raise :class:`ShuttingDown`."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]
            await self._commit(batch)

    async def _commit(self, batch: list[_Pending]) -> None:
        txn = self.store.begin(self.clock_us())
        results: list[tuple[_Pending, Any]] = []
        try:
            for pending in batch:
                try:
                    results.append((pending, pending.stage(txn)))
                except UnknownPrefix as exc:  # raised before the request staged anything
                    _fail(pending, exc)
            writes = write_batch(txn)
        except Exception as exc:  # a bug while staging: refuse the whole batch, loudly
            log.emit("internal.error", "error", op="stage", reason=f"{type(exc).__name__}: {exc}")
            for pending in batch:
                _fail(pending, CommitError(f"internal error while staging: {exc}"))
            return
        if len(writes) and not await self._write(writes, batch):
            return
        updates = self.store.commit(txn)
        if self.on_durable is not None and len(writes):
            self.on_durable(txn, writes)
        if self.metrics is not None:
            self.metrics.refresh()
        if updates:
            self.on_commit(updates)
        for pending, result in results:
            if not pending.future.done():
                pending.future.set_result(result)

    async def _write(self, writes: WriteBatch, batch: list[_Pending]) -> bool:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        try:
            await loop.run_in_executor(self.executor, self.engine.write, writes)
        except Exception as exc:  # full disk, I/O error: these requests fail, the service lives
            reason = f"{type(exc).__name__}: {exc}"
            log.emit("store.error", "error", op="commit", reason=reason)
            if self.metrics is not None:
                self.metrics.commit_errors.inc()
            error = CommitFull if isinstance(exc, StoreFull) else CommitError
            for pending in batch:
                _fail(pending, error(reason))
            return False
        elapsed = time.perf_counter() - started
        if self.metrics is not None:
            self.metrics.commits.inc()
        now = time.monotonic()
        if now - self._last_log >= _LOG_EVERY_S:
            self._last_log = now
            log.emit(
                "store.commit",
                "debug",
                entries=len(writes),
                bytes=writes.size(),
                fsync_us=int(elapsed * 1e6),
            )
        return True


def _fail(pending: _Pending, exc: BaseException) -> None:
    if not pending.future.done():
        pending.future.set_exception(exc)
