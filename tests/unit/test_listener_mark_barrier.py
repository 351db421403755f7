"""A QoS 2 step is never sent when the mark it relies on was not stored.

The CI fault run of 2026-11-28 (seed 20261126) delivered 16 QoS 2 messages twice: the
node holding a subscriber's queue was cut off from its replicas, the PUBREL marks it
wrote did not reach ``msgstore.write_quorum`` copies, and the store said so beside the
batch's appends, where the listener did not look. The barrier passed, the PUBRELs went
out, the client completed the deliveries, and the failover that followed read copies
without the marks and sent the messages again as new. The store now answers a batch's
marks on their own (``StoreBatchResult.marks_error``), each session's barrier
(``StoreClient.mark_barrier``) carries it, and a connection whose mark failed sends
nothing held behind it and closes: the client retries against the state that is there.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvloop

from services.listener.connection import Connection
from services.listener.store_client import StoreClient
from services.pb import msgstore_pb2
from tests.support.connection import served
from tests.unit.test_listener_lost_write import CONNECT, FakeBroker

PUBREC = b"\x50\x02\x00\x01"


async def _held_behind(why: str) -> tuple[bytes, bool]:
    """What the client reads after the barrier passes with ``why``; closed or not."""
    loop = asyncio.get_running_loop()
    broker: Any = FakeBroker()
    async with served(broker) as client:
        await loop.sock_sendall(client, CONNECT)
        assert await asyncio.wait_for(loop.sock_recv(client, 4), 5) == b"\x20\x02\x00\x00"
        conn: Connection = broker.conns[0]
        barrier: asyncio.Future[str] = loop.create_future()  # a QoS 2 mark on its way
        conn._barrier = barrier
        barrier.add_done_callback(conn._barrier_passed)
        conn._write(PUBREC)  # held until the mark is answered
        await asyncio.sleep(0.05)
        barrier.set_result(why)
        got = b""
        while True:
            try:
                chunk = await asyncio.wait_for(loop.sock_recv(client, 64), 1.0 if why else 0.3)
            except TimeoutError:
                break
            if not chunk:
                break
            got += chunk
            if got == PUBREC and not why:
                break
        return got, conn.closed


def _run(why: str) -> tuple[bytes, bool]:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(asyncio.wait_for(_held_behind(why), 30))


def test_a_durable_mark_releases_what_it_holds() -> None:
    got, closed = _run("")
    assert got == PUBREC and not closed


def test_a_mark_not_stored_sends_nothing_behind_it_and_closes() -> None:
    got, closed = _run("QoS 2 state not on msgstore.write_quorum copies in time")
    assert got == b"" and closed


class _MarksCall:
    """The Stream call: answers each batch with ``marks_error`` when it carries marks,
    naming the sessions of ``failed`` among them (none named: every mark failed)."""

    def __init__(self, requests: Any, marks_error: str, failed: tuple[str, ...]) -> None:
        self.requests = requests
        self.marks_error = marks_error
        self.failed = failed

    def __aiter__(self) -> _MarksCall:
        return self

    async def __anext__(self) -> msgstore_pb2.StoreBatchResult:
        batch = msgstore_pb2.StoreBatch.FromString(await self.requests.__anext__())
        error = self.marks_error if batch.marks else ""
        reply = msgstore_pb2.StoreBatchResult(batch_id=batch.batch_id, marks_error=error)
        if error:
            reply.marks_failed.extend(m.key for m in batch.marks if m.key.client_id in self.failed)
        return reply

    def cancel(self) -> None:
        pass


class _Channel:
    def __init__(self, marks_error: str, failed: tuple[str, ...] = ()) -> None:
        self.marks_error = marks_error
        self.failed = failed

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        return lambda requests: _MarksCall(requests, self.marks_error, self.failed)


async def _flushes(marks_error: str) -> tuple[str, bool]:
    """A flush behind a batch with a mark: (the mark's barrier, whether the flush resolved
    once the batch was answered)."""
    client = StoreClient(_Channel(marks_error))  # type: ignore[arg-type]
    client.start()
    try:
        client.mark("", "c1", 3, 2, 7, True)
        barrier = client.mark_barrier("", "c1")
        flushed = client.flush()
        why = await asyncio.wait_for(barrier, 10)
        await asyncio.wait_for(flushed, 10)
        return why, client.settled()
    finally:
        await client.stop()


def test_a_flush_resolves_whatever_the_marks_outcome_and_the_barrier_tells_it() -> None:
    """Nobody acts on a flush's value: the barrier is where a refused mark is heard."""
    assert asyncio.run(_flushes("")) == ("", True)
    why = "1 QoS 2 marks refused for an older epoch"
    assert asyncio.run(_flushes(why)) == (why, True)


async def _barriers(failed: tuple[str, ...]) -> tuple[str, str]:
    """Two sessions mark in one batch, the store refuses the marks of ``failed``."""
    client = StoreClient(_Channel("QoS 2 marks refused for an older epoch", failed))  # type: ignore[arg-type]
    client.start()
    try:
        client.mark("", "taken", 3, 2, 7, True)
        taken = client.mark_barrier("", "taken")
        client.mark("", "live", 4, 2, 8, True)
        live = client.mark_barrier("", "live")
        return await asyncio.wait_for(taken, 10), await asyncio.wait_for(live, 10)
    finally:
        await client.stop()


def test_a_sessions_barrier_fails_only_for_its_own_refused_marks() -> None:
    """A connection taken over on another node keeps writing marks at its older epoch;
    the store refuses those, and only that connection's barrier fails. Before, the
    batch's one outcome closed every connection whose mark rode with them (0x80)."""
    taken, live = asyncio.run(_barriers(("taken",)))
    assert "older epoch" in taken and live == ""
    # a batch the store names no session of failed every mark (a store error, say)
    taken, live = asyncio.run(_barriers(()))
    assert "older epoch" in taken and "older epoch" in live


async def _broken() -> tuple[None, str]:
    client = StoreClient(_Channel(""))  # type: ignore[arg-type]
    client.mark("", "c1", 3, 2, 7, True)
    fut = client.flush()
    barrier = client.mark_barrier("", "c1")
    # the batch goes out and the stream breaks before its answer
    batch = client._open
    client._open = type(batch)()
    client._inflight.append(batch)
    client._broken("UNAVAILABLE", "msgstore gone")
    return await asyncio.wait_for(fut, 5), await asyncio.wait_for(barrier, 5)


def test_a_batch_lost_with_its_stream_fails_the_barrier() -> None:
    flushed, barrier = asyncio.run(_broken())
    assert flushed is None and "msgstore gone" in barrier
