"""The registry's directory writer: one Put in flight, writes in order, waiters see failures."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from services.pb import gossip_pb2
from services.registry.backends import BackendError
from services.registry.directory import BEHIND, MAX_OPS, DirectoryWriter


def op(key: str) -> gossip_pb2.MetaOp:
    return gossip_pb2.MetaOp(prefix="sessions", key=key.encode(), value=b"v")


class FakeGossip:
    """Records each Put's keys; a Put waits while ``gate`` is clear; ``fail`` refuses."""

    def __init__(self) -> None:
        self.puts: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False
        self.started = 0

    async def put(self, ops: list[gossip_pb2.MetaOp]) -> None:
        self.started += 1
        await self.gate.wait()
        self.puts.append([o.key.decode() for o in ops])
        if self.fail:
            raise BackendError("gossip", "Put", "UNAVAILABLE", "fake")


async def started(g: FakeGossip, n: int) -> None:
    """Until the ``n``-th Put is in flight."""
    while g.started < n:
        await asyncio.sleep(0)


def run(
    body: Callable[[DirectoryWriter, FakeGossip], Awaitable[None]], behind: float = BEHIND
) -> None:
    async def main() -> None:
        gossip = FakeGossip()
        writer = DirectoryWriter(gossip.put, behind)
        await asyncio.wait_for(body(writer, gossip), 10)
        await asyncio.wait_for(writer.close(), 10)

    asyncio.run(main())


def test_an_idle_writer_puts_at_once_and_a_busy_one_gathers_in_order() -> None:
    async def body(w: DirectoryWriter, g: FakeGossip) -> None:
        await w.write([op("a")])
        assert g.puts == [["a"]]
        g.gate.clear()  # the next Put hangs: what is written meanwhile gathers
        first = asyncio.ensure_future(w.write([op("b")]))
        await started(g, 2)
        w.send([op("c")])
        last = asyncio.ensure_future(w.write([op("d"), op("e")]))
        await asyncio.sleep(0)
        g.gate.set()
        await asyncio.gather(first, last)
        assert g.puts == [["a"], ["b"], ["c", "d", "e"]]

    run(body)


def test_a_failed_put_fails_its_waiters_and_the_writer_goes_on() -> None:
    async def body(w: DirectoryWriter, g: FakeGossip) -> None:
        g.fail = True
        w.send([op("lost")])  # nobody waits: logged by the backends, caught up later
        with pytest.raises(BackendError):
            await w.write([op("a")])
        g.fail = False
        await w.write([op("b")])
        assert g.puts[-1] == ["b"]

    run(body)


def test_a_put_carries_at_most_max_ops_and_never_splits_a_write() -> None:
    async def body(w: DirectoryWriter, g: FakeGossip) -> None:
        g.gate.clear()
        w.send([op("x")])
        await started(g, 1)
        big = [op(f"k{i}") for i in range(MAX_OPS - 1)]
        w.send(big)
        w.send([op("y"), op("z")])
        done = asyncio.ensure_future(w.write([op("w")]))
        await asyncio.sleep(0)
        g.gate.set()
        await done
        assert [len(p) for p in g.puts] == [1, MAX_OPS - 1, 3]

    run(body)


def test_close_writes_what_was_sent_and_refuses_the_rest() -> None:
    async def body(w: DirectoryWriter, g: FakeGossip) -> None:
        g.gate.clear()
        w.send([op("a")])
        w.send([op("b")])
        await started(g, 1)
        closing = asyncio.ensure_future(w.close())
        await asyncio.sleep(0)
        g.gate.set()
        await closing
        assert g.puts == [["a", "b"]]  # sent in one turn: one Put
        with pytest.raises(BackendError):
            await w.write([op("late")])

    run(body)


def test_writes_nobody_waits_for_linger_together() -> None:
    async def body(w: DirectoryWriter, g: FakeGossip) -> None:
        w.send([op("a")])
        await asyncio.sleep(0.05)
        assert g.started == 0  # lingering
        w.send([op("b")])
        while not g.puts:
            await asyncio.sleep(0.01)
        assert g.puts == [["a", "b"]]

    run(body, behind=0.3)


def test_a_write_somebody_waits_for_ends_the_linger_and_carries_what_came_before() -> None:
    async def body(w: DirectoryWriter, g: FakeGossip) -> None:
        w.send([op("a")])
        await asyncio.sleep(0.01)
        await asyncio.wait_for(w.write([op("b")]), 1)  # far sooner than ``behind``
        assert g.puts == [["a", "b"]]

    run(body, behind=30)


def test_a_puts_worth_of_writes_does_not_linger() -> None:
    async def body(w: DirectoryWriter, g: FakeGossip) -> None:
        for i in range(MAX_OPS):
            w.send([op(f"k{i}")])
        await asyncio.wait_for(started(g, 1), 1)
        assert len(g.puts[0]) == MAX_OPS

    run(body, behind=30)


def test_close_ends_the_linger_and_writes_what_was_sent() -> None:
    async def body(w: DirectoryWriter, g: FakeGossip) -> None:
        w.send([op("a")])
        await asyncio.sleep(0.01)
        await asyncio.wait_for(w.close(), 1)
        assert g.puts == [["a"]]

    run(body, behind=30)
