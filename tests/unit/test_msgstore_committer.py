"""Group commit: gathering, batch limits, ordering, fsync policies, shutdown, failures."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

from services.common.inline_policy import (
    INLINE_OPS,
    INLINE_STALL,
    INLINE_UNDER,
    STORE_INLINE_OPS,
    STORE_INLINE_UNDER,
    InlinePolicy,
)
from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.msgstore.committer import Committer
from services.msgstore.engines.base import WriteTxn
from services.msgstore.engines.memory import MemoryEngine
from services.msgstore.metrics import StoreMetrics
from services.msgstore.model import (
    Append,
    AppendStatus,
    BatchResult,
    OpenQueue,
    Result,
    WriteBatch,
)
from services.msgstore.queue import DBS, QueueStore

C1: SessionKey = ("", "c1")


def batch(batch_id: int, n: int = 1, data: bytes = b"m") -> WriteBatch:
    return WriteBatch(batch_id, tuple(Append(C1, 1, data) for _ in range(n)))


def seqs(result: Result) -> list[int]:
    assert isinstance(result, BatchResult), result
    return [r.seq for r in result.results]


def run(
    body: Callable[[Committer, MemoryEngine], Awaitable[None]],
    engine: MemoryEngine | None = None,
    **kw: object,
) -> Committer:
    """Run ``body`` against a started committer over a store with queue C1, then close."""
    engine = engine or MemoryEngine(DBS)
    store = QueueStore(engine)
    store.write_group([OpenQueue(C1, 1, create=True)])

    async def main() -> Committer:
        committer = Committer(store, **kw)  # type: ignore[arg-type]
        committer.start()
        try:
            await asyncio.wait_for(body(committer, engine), 10)
        finally:
            await asyncio.wait_for(committer.close(), 10)
        return committer

    return asyncio.run(main())


def test_jobs_submitted_together_share_one_commit_and_keep_their_order() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        futures = [c.submit(batch(i, 2)) for i in range(5)]
        results = await asyncio.gather(*futures)
        assert [r.batch_id for r in results if isinstance(r, BatchResult)] == list(range(5))
        assert [s for r in results for s in seqs(r)] == list(range(1, 11))
        assert c.groups == 1

    run(body, max_delay=0.05)


def test_max_batch_bounds_a_group_but_never_splits_a_job() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        results = await asyncio.gather(*(c.submit(batch(i, 3)) for i in range(10)))
        assert c.groups == 5  # two 3-op jobs per 6-op group
        big = await c.submit(batch(99, 20))
        assert seqs(big) == list(range(31, 51))
        assert c.groups == 6
        assert [s for r in results for s in seqs(r)] == list(range(1, 31))

    run(body, max_batch=6, max_delay=0.05)


def test_the_delay_gathers_a_busy_streams_batch_that_arrives_later() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        a, b = object(), object()
        c.stream_opened(a)
        c.stream_opened(b)
        await c.submit(batch(0), b)  # b is busy from now on
        groups = c.groups
        start = time.monotonic()
        first = c.submit(batch(1), a)
        await asyncio.sleep(0.05)
        second = c.submit(batch(2), b)
        await asyncio.gather(first, second)
        assert c.groups == groups + 1
        assert 0.05 <= time.monotonic() - start < 2.0

    run(body, max_delay=0.3, busy_for=5.0)


def test_no_delay_commits_without_waiting() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        a, b = object(), object()
        c.stream_opened(a)
        c.stream_opened(b)
        await c.submit(batch(0), b)
        start = time.monotonic()
        for i in range(5):
            await c.submit(batch(i), a)
        assert c.groups == 6
        assert time.monotonic() - start < 1.0

    run(body, max_delay=0, busy_for=5.0)


def test_a_group_waits_only_for_a_busy_stream_with_nothing_in_it() -> None:
    """A listener sends its next batch only when this one is answered: waiting for more
    from a stream already in the group is pure latency. A busy stream with nothing
    pending is waited for."""

    async def body(c: Committer, engine: MemoryEngine) -> None:
        a, b = object(), object()
        c.stream_opened(a)
        c.stream_opened(b)
        await c.submit(batch(0), b)  # b is busy from now on
        start = time.monotonic()
        await c.submit(batch(1), a)
        waited = time.monotonic() - start
        assert waited >= 0.25, f"busy stream b had nothing pending: the group waits ({waited:.3f}s)"
        start = time.monotonic()
        both = [c.submit(batch(2), a), c.submit(batch(3), b)]
        await asyncio.gather(*both)
        assert time.monotonic() - start < 0.2, "both streams waited: committed at once"
        c.stream_closed(b)
        start = time.monotonic()
        await c.submit(batch(4), a)
        assert time.monotonic() - start < 0.2, "the only open stream waited: no delay"
        assert c.groups == 4

    run(body, max_delay=0.3, busy_for=5.0)


def test_an_idle_stream_and_a_lone_call_are_not_waited_for() -> None:
    """Send now if idle: a CONNECT waits for its queue's Open, and nothing else is coming."""

    async def body(c: Committer, engine: MemoryEngine) -> None:
        a, b = object(), object()
        c.stream_opened(a)
        c.stream_opened(b)
        start = time.monotonic()
        await c.submit(OpenQueue(("", "c2"), 1, create=True))  # a lone call, both idle
        await c.submit(batch(1), a)  # b never sent anything
        assert time.monotonic() - start < 0.25, "waited for streams that sent nothing"
        await c.submit(batch(2), b)
        start = time.monotonic()
        await c.submit(batch(3), a)  # b sent just now: busy, waited for
        assert time.monotonic() - start >= 0.25
        await asyncio.sleep(0.6)  # both idle for longer than busy_for
        start = time.monotonic()
        await c.submit(OpenQueue(("", "c3"), 1, create=True))
        assert time.monotonic() - start < 0.25, "waited for a stream idle past busy_for"

    run(body, max_delay=0.3, busy_for=0.5)


def test_closing_the_stream_a_group_waits_for_ends_the_wait() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        a, b = object(), object()
        c.stream_opened(a)
        c.stream_opened(b)
        await c.submit(batch(0), b)
        start = time.monotonic()
        first = c.submit(batch(1), a)
        await asyncio.sleep(0.05)
        c.stream_closed(b)
        await first
        assert time.monotonic() - start < 1.5, "waited the whole delay for a closed stream"

    run(body, max_delay=3.0, busy_for=30.0)


def test_fsync_always_syncs_every_group_before_any_result() -> None:
    seen: list[tuple[int, int]] = []

    async def body(c: Committer, engine: MemoryEngine) -> None:
        for round_ in range(3):
            futures = [c.submit(batch(i)) for i in range(4)]
            for f in futures:
                f.add_done_callback(lambda _f: seen.append((engine.syncs, c.groups)))
            await asyncio.gather(*futures)
            assert engine.syncs == c.groups == round_ + 1

    run(body, fsync="always", max_delay=0.01)
    assert seen and all(syncs == groups for syncs, groups in seen)


def test_fsync_interval_syncs_once_the_oldest_unsynced_commit_is_due() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        await c.submit(batch(1))
        await c.submit(batch(2))
        assert engine.syncs == 0  # results do not wait for the disk
        for _ in range(100):
            if engine.syncs:
                break
            await asyncio.sleep(0.02)
        assert engine.syncs == 1
        await asyncio.sleep(0.3)
        assert engine.syncs == 1  # nothing new to sync

    engine = MemoryEngine(DBS)
    run(body, engine, fsync="interval", interval=0.1, max_delay=0)
    assert engine.syncs == 1  # close found nothing left to sync


def test_fsync_never_syncs_only_on_close() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        for i in range(3):
            await c.submit(batch(i))
        await asyncio.sleep(0.1)
        assert engine.syncs == 0

    engine = MemoryEngine(DBS)
    run(body, engine, fsync="never", max_delay=0)
    assert engine.syncs == 1


def test_close_writes_what_was_submitted_and_refuses_the_rest() -> None:
    engine = MemoryEngine(DBS)
    store = QueueStore(engine)
    store.write_group([OpenQueue(C1, 1, create=True)])

    async def main() -> None:
        c = Committer(store, max_delay=1.0)
        c.start()
        futures = [c.submit(batch(i)) for i in range(3)]
        await asyncio.wait_for(c.close(), 5)  # does not wait out the 1 s delay
        assert all(f.done() for f in futures)
        assert [s for f in futures for s in seqs(f.result())] == [1, 2, 3]
        late = c.submit(batch(9))
        result = late.result()
        assert isinstance(result, BatchResult) and "shutting down" in result.error
        assert result.results[0].status == AppendStatus.STORE_ERROR

    asyncio.run(main())
    assert store.state(C1).last_seq == 3


def test_a_job_that_does_not_fit_fails_alone() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        futures = [
            c.submit(batch(1)),
            c.submit(batch(2, data=b"x" * 200_000)),
            c.submit(batch(3)),
        ]
        first, huge, third = await asyncio.gather(*futures)
        assert c.groups == 1
        assert seqs(first) == [1] and seqs(third) == [2]
        assert isinstance(huge, BatchResult) and "full" in huge.error
        assert huge.results[0].status == AppendStatus.STORE_ERROR

    run(body, MemoryEngine(DBS, limit_bytes=100_000), max_delay=0.05)


class _BuggyEngine(MemoryEngine):
    """Raises a non-store exception for one value: a bug, which must not be hidden."""

    def begin_write(self) -> WriteTxn:
        txn = super().begin_write()
        put = txn.put

        def buggy_put(db: str, key: bytes, value: bytes) -> None:
            if value == b"boom":
                raise RuntimeError("bug")
            put(db, key, value)

        txn.put = buggy_put  # type: ignore[method-assign]
        return txn


def test_a_bug_fails_its_callers_loudly_and_the_committer_keeps_going() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        with pytest.raises(RuntimeError, match="bug"):
            await c.submit(batch(1, data=b"boom"))
        assert seqs(await c.submit(batch(2))) == [1]

    run(body, _BuggyEngine(DBS), max_delay=0)


def test_metrics_count_writes_commits_and_fsyncs() -> None:
    registry = MetricsRegistry()
    metrics = StoreMetrics(registry)

    async def body(c: Committer, engine: MemoryEngine) -> None:
        await asyncio.gather(*(c.submit(batch(i, 2, b"abc")) for i in range(3)))

    run(body, metrics=metrics, max_delay=0.05)
    values = {s.name: s.value for s in registry.samples() if not s.labels}
    assert values["ternmq_msgstore_appends_total"] == 6
    assert values["ternmq_msgstore_append_bytes_total"] == 18
    assert values["ternmq_msgstore_writes_total"] == 6
    assert values["ternmq_msgstore_commits_total"] == 1
    assert values["ternmq_msgstore_fsync_seconds_count"] == 1
    assert values["ternmq_msgstore_fsync_seconds_max"] >= 0


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError):
        Committer(QueueStore(MemoryEngine(DBS)), fsync="sometimes")


class _SlowEngine(MemoryEngine):
    """Commits take 5 ms, like a busy disk, so jobs pile up while one is written."""

    def begin_write(self) -> WriteTxn:
        txn = super().begin_write()
        commit = txn.commit

        def slow_commit() -> None:
            time.sleep(0.005)
            commit()

        txn.commit = slow_commit  # type: ignore[method-assign]
        return txn


def test_fsync_interval_also_syncs_a_store_that_is_never_idle() -> None:
    async def body(c: Committer, engine: MemoryEngine) -> None:
        futures: list[asyncio.Future[Result]] = []
        deadline = time.monotonic() + 1.5  # fifteen intervals: two syncs even on a loaded machine
        while time.monotonic() < deadline:  # a job every ms: something is always pending
            futures.append(c.submit(batch(len(futures))))
            await asyncio.sleep(0.001)
        synced_while_busy = engine.syncs
        await asyncio.gather(*futures)
        assert synced_while_busy >= 2
        assert c.groups > synced_while_busy  # results did not wait for each sync

    run(body, _SlowEngine(DBS), fsync="interval", interval=0.1, max_delay=0.001)


class _ThreadRecordingEngine(MemoryEngine):
    """Records which thread began each write transaction; ``delay``: how long each
    commit takes."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__(DBS)
        self.threads: list[str] = []
        self.delay = delay

    def begin_write(self) -> WriteTxn:
        self.threads.append(threading.current_thread().name)
        txn = super().begin_write()
        if self.delay:
            commit = txn.commit

            def slow_commit() -> None:
                time.sleep(self.delay)
                commit()

            txn.commit = slow_commit  # type: ignore[method-assign]
        return txn


def test_every_group_is_written_on_the_loop_and_over_inline_ops_in_the_thread() -> None:
    """A group of any size costs no thread hop (``STORE_INLINE_OPS``); given a smaller
    ``inline_ops``, a group over it goes to the worker thread, so the loop goes on."""
    main = threading.main_thread().name
    engine = _ThreadRecordingEngine()

    async def large(c: Committer, e: MemoryEngine) -> None:
        engine.threads.clear()
        assert seqs(await c.submit(batch(1, 1000)))[-1] == 1000

    run(large, engine, max_delay=0)
    assert engine.threads[:1] == [main]

    engine = _ThreadRecordingEngine()

    async def body(c: Committer, e: MemoryEngine) -> None:
        engine.threads.clear()
        assert seqs(await c.submit(batch(1, INLINE_OPS))) == list(range(1, INLINE_OPS + 1))
        assert seqs(await c.submit(batch(2, INLINE_OPS + 1)))[0] == INLINE_OPS + 1
        assert (await c.submit(OpenQueue(C1, 2))).epoch == 2

    run(body, engine, max_delay=0, inline_ops=INLINE_OPS)
    loop_thread, worker, loop_again = engine.threads[:3]
    assert loop_thread == main and loop_again == main
    assert worker.startswith("msgstore-commit")


def test_the_store_keeps_writes_of_a_few_ms_on_the_loop_and_slower_ones_go() -> None:
    """The store's policy: groups that take a few milliseconds (hundreds of entries and
    an fsync) stay on the loop, where the registry's would have left it; a write that
    stalls the loop sends them to the thread."""
    store = InlinePolicy(STORE_INLINE_OPS, STORE_INLINE_UNDER)
    registry = InlinePolicy()
    now = 0.0
    for _ in range(100):
        for where in (store, registry):
            where.took(INLINE_UNDER * 3, now)  # 6 ms: each below a stall
        now += 0.01
    assert store.inline(4096, now) and not registry.inline(1, now)
    store.took(INLINE_STALL * 1.5, now)  # one stalled the loop: the thread, for a while
    assert not store.inline(1, now)


def test_a_stalled_write_sends_the_small_ones_to_the_thread_for_a_while() -> None:
    """One write slower than ``INLINE_STALL`` held the loop once; for
    ``INLINE_BACKOFF`` after it every write goes to the thread."""
    engine = _ThreadRecordingEngine(delay=INLINE_STALL * 1.5)

    async def body(c: Committer, e: MemoryEngine) -> None:
        engine.threads.clear()
        await c.submit(batch(1))  # on the loop, and slow
        engine.delay = 0.0
        await c.submit(batch(2))
        await c.submit(batch(3))

    run(body, engine, max_delay=0)
    main = threading.main_thread().name
    assert engine.threads[0] == main
    assert all(t.startswith("msgstore-commit") for t in engine.threads[1:3])


def test_inline_ops_zero_always_writes_in_the_thread() -> None:
    engine = _ThreadRecordingEngine()

    async def body(c: Committer, e: MemoryEngine) -> None:
        engine.threads.clear()
        await c.submit(batch(1))
        await c.submit(OpenQueue(C1, 2))

    run(body, engine, max_delay=0, inline_ops=0)
    assert all(t.startswith("msgstore-commit") for t in engine.threads[:2])
