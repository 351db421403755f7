"""The registry's session table and its group commit, on every engine (LMDB and the
journal in a temp dir, and the in-memory twin)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from services.common.inline_policy import (
    INLINE_BACKOFF,
    INLINE_OPS,
    INLINE_STALL,
    INLINE_UNDER,
    InlinePolicy,
)
from services.common.metrics import MetricsRegistry
from services.registry.committer import Committer
from services.registry.engines.base import Change, Engine, StoreError
from services.registry.engines.journal_engine import JournalEngine
from services.registry.engines.lmdb_engine import LmdbEngine
from services.registry.engines.memory import MemoryEngine, MemoryTable
from services.registry.sessions import NEVER, Session
from services.registry.store import Delete, Put, Reserve, SessionStore

MB = 1024 * 1024
Opener = Callable[[int], SessionStore]  # map size -> the table, reopened on each call


@pytest.fixture(params=["lmdb", "journal", "memory"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    table: MemoryTable = {}

    def opener(map_size: int) -> SessionStore:
        engine: Engine
        if request.param == "lmdb":
            engine = LmdbEngine(tmp_path / "reg", map_size)
        elif request.param == "journal":
            engine = JournalEngine(tmp_path / "reg", map_size)
        else:
            engine = MemoryEngine(table, limit_bytes=map_size)
        return SessionStore(engine)

    return opener


def session(cid: str, epoch: int = 1, **kw: object) -> Session:
    base = Session(("mp", cid), epoch, True, "n1", "L1", NEVER, 5, 10, 0, "peer", "user")
    return replace(base, **kw)  # type: ignore[arg-type]


def test_round_trip_delete_and_reservation(open_store: Opener) -> None:
    store = open_store(16 * MB)
    long_id = "x" * 5000  # far over LMDB's key limit: keys are hashed
    a, b = session("a", 3), session(long_id, 7, online=False, disconnected_us=99)
    store.apply([Put(a), Put(b), Put(session("gone")), Reserve(2048), Delete(("mp", "gone"))])
    store.close()
    again = open_store(16 * MB)
    sessions, reserved = again.load()
    assert sorted(sessions, key=lambda s: s.key) == sorted([a, b], key=lambda s: s.key)
    assert reserved == 2048
    again.close()


def test_map_full_is_a_store_error(open_store: Opener) -> None:
    store = open_store(1 * MB)
    big = [Put(session(f"c{i}" + "y" * 4000, i)) for i in range(600)]
    with pytest.raises(StoreError):
        store.apply(big)
    store.close()


def test_group_commit_writes_the_current_state_in_one_go(open_store: Opener) -> None:
    table: dict[tuple[str, str], Session] = {}

    async def main() -> None:
        store = open_store(16 * MB)
        committer = Committer(store, table.get)
        table[("mp", "a")] = session("a", 1)
        table[("mp", "b")] = session("b", 2)
        await asyncio.gather(committer.sync(("mp", "a"), reserve=1025), committer.sync(("mp", "b")))
        # A group commit writes what the table holds when its transaction runs.
        table[("mp", "a")] = session("a", 5, online=False)
        del table[("mp", "b")]
        await committer.sync(("mp", "a"), ("mp", "b"))
        await committer.close()
        with pytest.raises(StoreError):
            await committer.sync(("mp", "a"))
        store.close()

    asyncio.run(main())
    store = open_store(16 * MB)
    sessions, reserved = store.load()
    assert sessions == [session("a", 5, online=False)] and reserved == 1025
    store.close()


def test_clean_sessions_are_not_written_unless_they_replace_a_record(open_store: Opener) -> None:
    table: dict[tuple[str, str], Session] = {}
    stored = session("kept", 1)  # persistent, on disk from an earlier run
    setup = open_store(16 * MB)
    setup.apply([Put(stored)])
    setup.close()

    async def main() -> None:
        store = open_store(16 * MB)
        committer = Committer(store, table.get, [stored.key])
        table[("mp", "clean")] = session("clean", 2, session_expiry=0)
        await committer.sync(("mp", "clean"))  # nothing to write: returns at once
        assert committer._dirty == set() and committer._waiters == []
        # a clean session replacing the stored one: the stale record goes
        table[stored.key] = session("kept", 3, session_expiry=0)
        await committer.sync(stored.key)
        # and from then on the key is like any clean one
        table[stored.key] = session("kept", 3, session_expiry=0, online=False)
        await committer.sync(stored.key)
        assert committer._waiters == []
        await committer.close()
        store.close()

    asyncio.run(main())
    store = open_store(16 * MB)
    sessions, _ = store.load()
    assert sessions == []
    store.close()


def test_a_clean_session_overwrites_a_record_still_being_written(open_store: Opener) -> None:
    """A persistent session's record is in flight when a clean registration replaces it:
    the clean one's sync must not be skipped, or a restart would resurrect the old session."""
    table: dict[tuple[str, str], Session] = {}
    key = ("mp", "racy")

    async def main() -> None:
        store = open_store(16 * MB)
        committer = Committer(store, table.get, inline_ops=0)  # a transaction to race with
        table[key] = session("racy", 1)  # persistent
        first = asyncio.ensure_future(committer.sync(key))
        await asyncio.sleep(0)  # the committer has taken the key into its transaction
        while not committer._writing:
            await asyncio.sleep(0)
        table[key] = session("racy", 2, session_expiry=0)  # replaced by a clean session
        second = asyncio.ensure_future(committer.sync(key))
        await asyncio.gather(first, second)
        await committer.close()
        store.close()

    asyncio.run(main())
    store = open_store(16 * MB)
    sessions, _ = store.load()
    assert sessions == []
    store.close()


def test_a_change_nobody_waits_for_goes_with_the_next_transaction(open_store: Opener) -> None:
    """The end of a connection (write_behind) does not start a transaction of its own
    ahead of the next CONNECT's: that CONNECT's transaction carries both."""
    table: dict[tuple[str, str], Session] = {}
    metrics = MetricsRegistry()

    def commits() -> float:
        return sum(s.value for s in metrics.samples() if s.name.endswith("registry_commits_total"))

    async def main() -> None:
        store = open_store(16 * MB)
        committer = Committer(store, table.get, metrics=metrics)
        table[("mp", "gone")] = session("gone", 1, online=False)
        committer.write_behind(("mp", "gone"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert commits() == 0  # nobody waits: no transaction of its own yet
        table[("mp", "next")] = session("next", 2)
        await committer.sync(("mp", "next"))
        assert commits() == 1
        table[("mp", "last")] = session("last", 3, online=False)
        committer.write_behind(("mp", "last"))
        await committer.close()  # written before the committer stops
        store.close()

    asyncio.run(main())
    store = open_store(16 * MB)
    sessions, _ = store.load()
    assert sorted(s.key[1] for s in sessions) == ["gone", "last", "next"]
    store.close()


def test_a_change_nobody_waits_for_is_written_by_itself_when_nothing_follows(
    open_store: Opener,
) -> None:
    table: dict[tuple[str, str], Session] = {}

    async def main() -> None:
        store = open_store(16 * MB)
        committer = Committer(store, table.get)
        table[("mp", "alone")] = session("alone", 1, online=False)
        committer.write_behind(("mp", "alone"))
        while committer._dirty or committer._writing:  # BEHIND later, on its own
            await asyncio.sleep(0.01)
        await committer.close()
        store.close()

    asyncio.run(main())
    store = open_store(16 * MB)
    assert [s.key[1] for s in store.load()[0]] == ["alone"]
    store.close()


def test_small_writes_go_on_the_loop_until_one_is_slow() -> None:
    where = InlinePolicy()
    assert where.inline(1, 0.0) and where.inline(INLINE_OPS, 0.0)
    assert not where.inline(INLINE_OPS + 1, 0.0)  # busy: the thread, the loop goes on
    where.took(INLINE_UNDER / 2, 0.0)
    assert where.inline(1, 0.1)
    where.took(INLINE_UNDER * 2, 1.0)  # one flush slower than usual: still the loop
    assert where.inline(1, 1.0)
    where.took(INLINE_STALL * 2, 10.0)  # a stalled flush: the loop waited for one, no more
    assert not where.inline(1, 10.0)
    assert not where.inline(1, 10.0 + INLINE_BACKOFF - 0.01)
    assert where.inline(1, 10.0 + INLINE_BACKOFF)


def test_a_disk_that_stays_slow_moves_the_writes_to_the_thread_until_it_is_fast() -> None:
    where = InlinePolicy()
    now = 0.0
    slow = 0
    while where.inline(1, now):
        where.took(INLINE_UNDER * 3, now)  # each below a stall, all above the usual
        slow += 1
        now += 0.01
        assert slow < 50, "a slow disk never left the loop"
    assert slow > 1  # not for the first one
    for _ in range(200):  # the thread's writes are fast again
        where.took(INLINE_UNDER / 10, now)
        now += 0.01
    assert where.inline(1, now + INLINE_BACKOFF)


def test_a_slow_engine_moves_the_commits_off_the_loop() -> None:
    """Where each write ran, seen from a real committer over a slow engine."""
    threads: list[str] = []

    class Slow(MemoryEngine):
        def write(self, changes: Sequence[Change]) -> None:
            threads.append(threading.current_thread().name)
            time.sleep(INLINE_STALL * 1.5)
            super().write(changes)

    async def go() -> None:
        table: dict[tuple[str, str], Session] = {}
        store = SessionStore(Slow())
        committer = Committer(store, table.get)
        for i in range(3):
            table[("mp", f"s{i}")] = session(f"s{i}")
            await committer.sync(("mp", f"s{i}"))
        await committer.close()

    asyncio.run(go())
    assert threads[0] == threading.main_thread().name
    assert all(t != threading.main_thread().name for t in threads[1:]) and len(threads) == 3
