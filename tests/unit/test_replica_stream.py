"""``msgstore.cluster.stream.AppendStream``: replies matched to batches in the order they
were written, and a stream that breaks, stalls or moves fails every batch it had out as
a failed call does, and is opened again only after its backoff.

The call is a stand-in whose replies and failures the test decides."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from services.msgstore.cluster import stream as stream_mod
from services.msgstore.cluster.stream import AppendStream
from services.pb import msgstore_pb2

META: tuple[tuple[str, str], ...] = (("k", "v"),)


class Call:
    """One open stream: what was written, and replies or a failure fed by the test."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.cancelled = False
        self._replies: asyncio.Queue[msgstore_pb2.ReplicaReplies | BaseException | None]
        self._replies = asyncio.Queue()

    async def write(self, data: bytes) -> None:
        if self.cancelled:
            raise grpc.aio.UsageError("written after the call ended")
        self.written.append(data)

    def reply(self, *oks: bool) -> None:
        replies = [msgstore_pb2.ReplicaReply(ok=ok, upto=i) for i, ok in enumerate(oks)]
        self._replies.put_nowait(msgstore_pb2.ReplicaReplies(replies=replies))

    def fail(self, exc: BaseException | None) -> None:
        """End the call: with ``exc``, or (None) as a clean end of the stream."""
        self._replies.put_nowait(exc)

    def cancel(self) -> bool:
        self.cancelled = True
        self._replies.put_nowait(None)
        return True

    async def _iterate(self) -> AsyncIterator[msgstore_pb2.ReplicaReplies]:
        while True:
            item = await self._replies.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def __aiter__(self) -> AsyncIterator[msgstore_pb2.ReplicaReplies]:
        return self._iterate()


class Opener:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, Call]] = []

    def __call__(self, stub: Any, metadata: tuple[tuple[str, str], ...]) -> Call:
        assert metadata == META
        call = Call()
        self.calls.append((stub, call))
        return call

    @property
    def last(self) -> Call:
        return self.calls[-1][1]


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def _send(s: AppendStream, data: bytes, stub: object = "stub") -> asyncio.Future[list[Any]]:
    return asyncio.ensure_future(s.send(stub, lambda: META, data))


def _code(fut: asyncio.Future[Any]) -> grpc.StatusCode:
    exc = fut.exception()
    assert isinstance(exc, grpc.aio.AioRpcError), exc
    return exc.code()


def test_replies_go_to_their_batches_in_order_on_one_stream() -> None:
    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=5.0, opener=opener)
        a, b = _send(s, b"A"), _send(s, b"B")
        await _settle()
        assert len(opener.calls) == 1 and opener.last.written == [b"A", b"B"]
        opener.last.reply(True)
        opener.last.reply(False, True)
        assert [r.ok for r in await a] == [True]
        assert [r.ok for r in await b] == [False, True]
        c = _send(s, b"C")
        await _settle()
        opener.last.reply(True)
        assert len(await c) == 1
        assert len(opener.calls) == 1  # the same stream all along
        await s.close()
        assert opener.last.cancelled

    asyncio.run(run())


def test_a_broken_stream_fails_what_it_had_out_and_reopens_after_its_backoff() -> None:
    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=5.0, opener=opener)
        a, b = _send(s, b"A"), _send(s, b"B")
        await _settle()
        broken = stream_mod.rpc_error(grpc.StatusCode.UNAVAILABLE, "connection reset")
        opener.last.fail(broken)
        await _settle()
        assert a.exception() is broken and b.exception() is broken  # as a failed call
        assert opener.calls[0][1].cancelled
        # within the backoff: refused at once, nothing opened
        c = _send(s, b"C")
        await _settle()
        assert _code(c) == grpc.StatusCode.UNAVAILABLE and len(opener.calls) == 1
        await asyncio.sleep(stream_mod.BACKOFF_MIN + 0.02)
        d = _send(s, b"D")
        await _settle()
        assert len(opener.calls) == 2 and opener.last.written == [b"D"]
        opener.last.reply(True)
        assert (await d)[0].ok
        await s.close()

    asyncio.run(run())


def test_the_backoff_doubles_while_streams_break_and_resets_once_one_answers() -> None:
    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=5.0, opener=opener)
        waits = []
        for _ in range(3):
            fut = _send(s, b"X")
            await _settle()
            opener.last.fail(None)  # ended by the peer: the batch out fails too
            await _settle()
            assert _code(fut) == grpc.StatusCode.UNAVAILABLE
            waits.append(s._retry_at - asyncio.get_running_loop().time())
            s._retry_at = 0.0  # the test does not sleep through it
        assert waits[0] < waits[1] < waits[2] <= stream_mod.BACKOFF_MAX
        fut = _send(s, b"Y")
        await _settle()
        opener.last.reply(True)
        await fut
        assert s._backoff == stream_mod.BACKOFF_MIN
        await s.close()

    asyncio.run(run())


def test_no_reply_in_time_fails_the_batches_out_and_ends_the_stream() -> None:
    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=0.05, opener=opener)
        a = _send(s, b"A")
        await asyncio.sleep(0.02)
        b = _send(s, b"B")
        await asyncio.sleep(0.05)  # A's deadline passed, not B's: B fails with it
        assert _code(a) == grpc.StatusCode.DEADLINE_EXCEEDED
        await _settle()
        assert _code(b) == grpc.StatusCode.DEADLINE_EXCEEDED
        assert opener.last.cancelled
        # a reply that comes late answers nothing (the stream is gone)
        opener.last.reply(True)
        await s.close()

    asyncio.run(run())


def test_a_caller_that_gives_up_keeps_its_place_for_the_replies_after_it() -> None:
    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=5.0, opener=opener)
        a, b = _send(s, b"A"), _send(s, b"B")
        await _settle()
        a.cancel()
        await _settle()
        opener.last.reply(True, True)  # A's reply, nobody waits for it
        opener.last.reply(False)  # B's
        assert [r.ok for r in await b] == [False]
        await s.close()

    asyncio.run(run())


def test_a_peer_at_a_new_address_gets_a_new_stream() -> None:
    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=5.0, opener=opener)
        a = _send(s, b"A", stub="old")
        await _settle()
        b = _send(s, b"B", stub="new")
        await _settle()
        assert _code(a) == grpc.StatusCode.UNAVAILABLE  # the old stream went
        assert [stub for stub, _ in opener.calls] == ["old", "new"]
        opener.last.reply(True)
        assert (await b)[0].ok
        await s.close()

    asyncio.run(run())


def test_a_write_that_fails_fails_the_batch() -> None:
    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=5.0, opener=opener)
        a = _send(s, b"A")
        await _settle()
        opener.last.cancelled = True  # the call ended under us
        b = _send(s, b"B")
        await _settle()
        assert isinstance(b.exception(), grpc.aio.AioRpcError)
        assert isinstance(a.exception(), grpc.aio.AioRpcError)
        await s.close()

    asyncio.run(run())


@pytest.mark.parametrize("code", [grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAUTHENTICATED])
def test_the_peers_refusal_reaches_the_caller_with_its_code(code: grpc.StatusCode) -> None:
    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=5.0, opener=opener)
        a = _send(s, b"A")
        await _settle()
        opener.last.fail(stream_mod.rpc_error(code, "no"))
        await _settle()
        assert _code(a) == code
        await s.close()

    asyncio.run(run())


def test_a_write_stuck_for_good_fails_at_the_deadline_and_the_next_goes_on_a_new_stream() -> None:
    """Flow control to a stopped peer: the write does not end, not even when the call
    is cancelled (gRPC ends it; this stand-in does not)."""

    async def run() -> None:
        opener = Opener()
        s = AppendStream("b", timeout=0.05, opener=opener)
        stuck: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def never(data: bytes) -> None:
            await stuck

        opener_write = opener.__call__

        def first_stuck(stub: Any, metadata: tuple[tuple[str, str], ...]) -> Call:
            call = opener_write(stub, metadata)
            if len(opener.calls) == 1:
                call.write = never  # type: ignore[method-assign]
            return call

        s._open = first_stuck
        a = _send(s, b"A")
        await asyncio.sleep(0.1)
        assert _code(a) == grpc.StatusCode.DEADLINE_EXCEEDED
        assert opener.calls[0][1].cancelled
        await asyncio.sleep(stream_mod.BACKOFF_MIN + 0.02)
        b = _send(s, b"B")
        await _settle()
        assert len(opener.calls) == 2 and opener.last.written == [b"B"]
        opener.last.reply(True)
        assert (await b)[0].ok
        stuck.cancel()
        await s.close()

    asyncio.run(run())
