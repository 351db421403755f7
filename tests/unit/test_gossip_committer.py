"""Group commit over both engines (LMDB and the in-memory twin): batching, durability
before acknowledgement, failures that leave the store untouched, reload after restart."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from services.gossip import codec
from services.gossip.committer import (
    CommitFull,
    Committer,
    ShuttingDown,
    load_store,
    write_batch,
)
from services.gossip.engines.base import Engine, WriteBatch
from services.gossip.engines.lmdb_engine import LmdbEngine
from services.gossip.engines.memory import MemoryEngine
from services.gossip.store import MetaStore, Op, Txn, Update

EngineFactory = Callable[[], Engine]


class CountingEngine:
    """Counts writes and remembers what was durable when (wraps a real engine)."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.writes = 0
        self.batch_sizes: list[int] = []

    def records(self) -> Iterator[bytes]:
        return self.inner.records()

    def meta(self, key: bytes) -> bytes | None:
        return self.inner.meta(key)

    def write(self, batch: WriteBatch) -> None:
        self.inner.write(batch)
        self.writes += 1
        self.batch_sizes.append(len(batch.puts))

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(params=["memory", "lmdb"])
def engine_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EngineFactory]:
    if request.param == "memory":
        mem = MemoryEngine()
        yield lambda: mem
    else:
        opened: list[LmdbEngine] = []

        def make() -> Engine:
            for e in opened:
                e.close()
            opened.clear()
            opened.append(LmdbEngine(tmp_path / "gossip", 1 << 24))
            return opened[0]

        yield make
        for e in opened:
            e.close()


def run_with(
    engine: Engine,
    body: Callable[[Committer, MetaStore, list[Update]], Coroutine[Any, Any, None]],
    max_batch: int = 1024,
    node: str = "n1",
) -> MetaStore:
    store = MetaStore(node)
    load_store(store, engine)
    seen: list[Update] = []
    clock = itertools.count(1_000_000, 1000)  # every commit is 1 ms after the previous

    async def main() -> None:
        with ThreadPoolExecutor(1) as executor:
            committer = Committer(
                store,
                engine,
                executor,
                max_batch=max_batch,
                clock_us=lambda: next(clock),
                on_commit=seen.extend,
            )
            committer.start()
            try:
                await asyncio.wait_for(body(committer, store, seen), 20)
            finally:
                await committer.close()

    asyncio.run(main())
    return store


def apply(ops: list[Op], txn: Txn) -> None:
    txn.apply(ops)


def put_op(i: int) -> Op:
    return Op("subs", b"\0c%d" % i, b"v%d" % i)


def test_concurrent_puts_share_commits_and_survive_reopen(engine_factory: EngineFactory) -> None:
    engine = CountingEngine(engine_factory())

    async def body(c: Committer, store: MetaStore, seen: list[Update]) -> None:
        await asyncio.gather(*(c.submit(partial(apply, [put_op(i)])) for i in range(60)))
        assert len(seen) == 60
        assert all(store.get("subs", b"\0c%d" % i) == b"v%d" % i for i in range(60))

    run_with(engine, body)
    assert engine.writes < 60  # without grouping there would be one commit per Put
    assert sum(engine.batch_sizes) == 60
    reopened = MetaStore("n1")
    assert load_store(reopened, engine_factory()) == 60
    assert reopened.get("subs", b"\0c59") == b"v59"


def test_max_batch_bounds_a_commit(engine_factory: EngineFactory) -> None:
    engine = CountingEngine(engine_factory())

    async def body(c: Committer, store: MetaStore, seen: list[Update]) -> None:
        await asyncio.gather(*(c.submit(partial(apply, [put_op(i)])) for i in range(10)))

    run_with(engine, body, max_batch=4)
    assert max(engine.batch_sizes) <= 4 and sum(engine.batch_sizes) == 10


def test_acknowledged_means_written(engine_factory: EngineFactory) -> None:
    engine = CountingEngine(engine_factory())

    async def body(c: Committer, store: MetaStore, seen: list[Update]) -> None:
        for i in range(3):
            await c.submit(partial(apply, [put_op(i)]))
            fresh = MetaStore("n1")
            load_store(fresh, engine)
            assert fresh.get("subs", b"\0c%d" % i) == b"v%d" % i

    run_with(engine, body)


def test_a_full_store_refuses_the_batch_and_changes_nothing() -> None:
    engine = MemoryEngine(max_bytes=300)

    async def body(c: Committer, store: MetaStore, seen: list[Update]) -> None:
        await c.submit(partial(apply, [Op("retain", b"\0small", b"x")]))
        with pytest.raises(CommitFull):
            await c.submit(
                partial(apply, [Op("retain", b"\0a", b"y"), Op("retain", b"\0big", b"z" * 1000)])
            )
        assert store.get("retain", b"\0a") is None  # the whole request, not a part
        assert seen == [Update("retain", b"\0small", b"x")]
        await c.submit(partial(apply, [Op("retain", b"\0small", None)]))
        assert store.get("retain", b"\0small") is None

    run_with(engine, body)


def test_close_commits_what_is_queued_then_refuses(engine_factory: EngineFactory) -> None:
    engine = engine_factory()
    store = MetaStore("n1")

    async def main() -> None:
        with ThreadPoolExecutor(1) as executor:
            c = Committer(
                store, engine, executor, max_batch=2, clock_us=lambda: 1, on_commit=lambda u: None
            )
            c.start()
            tasks = [asyncio.ensure_future(c.submit(partial(apply, [put_op(i)]))) for i in range(5)]
            await asyncio.sleep(0)
            await c.close()
            await asyncio.gather(*tasks)
            with pytest.raises(ShuttingDown):
                await c.submit(partial(apply, [put_op(9)]))

    asyncio.run(main())
    assert store.count("subs") == 5


def test_gc_floor_survives_a_restart(engine_factory: EngineFactory) -> None:
    engine = engine_factory()

    async def body(c: Committer, store: MetaStore, seen: list[Update]) -> None:
        await c.submit(partial(apply, [Op("sessions", b"\0c", b"1"), Op("sessions", b"\0c", b"2")]))
        await c.submit(partial(apply, [Op("sessions", b"\0c", None)]))
        assert await c.submit(lambda txn: txn.collect_garbage(0)) == 1

    run_with(engine, body)
    engine = engine_factory()
    store = MetaStore("n1")
    assert load_store(store, engine) == 0
    assert store.dot_floor == 3

    async def again(c: Committer, store: MetaStore, seen: list[Update]) -> None:
        await c.submit(partial(apply, [Op("sessions", b"\0c", b"3")]))
        rec = store.record("sessions", b"\0c")
        assert rec is not None and rec.clock.entries[0].counter == 4

    run_with(engine, again)


def test_an_undecodable_record_is_skipped_at_load() -> None:
    engine = MemoryEngine()
    store = MetaStore("n1")
    txn = store.begin(1)
    txn.apply([put_op(1)])
    batch = write_batch(txn)
    batch.puts.append((codec.record_key("subs", b"\0bad"), b"\x01garbage"))
    engine.write(batch)
    fresh = MetaStore("n1")
    assert load_store(fresh, engine) == 1
    assert fresh.get("subs", b"\0c1") == b"v1"
