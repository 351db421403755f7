"""A service's unary methods over its call lane (``services.common.lane.CallLane`` and
``lane_client.LaneClient``), on a real unix socket, with a servicer of the test's own:
replies are paired with their calls when they come back out of order, a servicer's
abort keeps its status, failures map to gRPC's status names, and a lane nobody listens
on is told apart from one that broke with a call in flight."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.common.framed import frame, read_frame
from services.common.lane import CallLane, unary_handlers
from services.common.lane_client import LaneClient, LaneError, LaneUnreachable
from services.pb import common_pb2, msgstore_pb2

SERVICE = msgstore_pb2.DESCRIPTOR.services_by_name["MsgStore"]


BIG = 64 * 1024  # the payload of a reply to after_seq 5


class _Servicer:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.big = 0  # calls answered with a BIG reply

    async def Read(self, request: msgstore_pb2.ReadRequest, context: Any) -> msgstore_pb2.ReadReply:
        if request.after_seq == 5:
            self.big += 1
            delivery = common_pb2.Delivery(msg=common_pb2.MqttMessage(payload=b"x" * BIG))
            return msgstore_pb2.ReadReply(entries=[msgstore_pb2.QueueEntry(delivery=delivery)])
        if request.after_seq == 1:  # the slow one: answered after the fast one
            await self.release.wait()
        if request.after_seq == 2:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "stale epoch")
        if request.after_seq == 3:
            raise RuntimeError("a bug")
        if request.after_seq == 4:
            await asyncio.sleep(3600)
        entry = msgstore_pb2.QueueEntry(seq=request.after_seq + 1)
        return msgstore_pb2.ReadReply(entries=[entry])

    async def Stats(self, request: Any, context: Any) -> Any:
        raise NotImplementedError  # as a generated base class's method does


def _run(tmp_path: Path, body: Any, **lane_args: Any) -> None:
    async def main() -> None:
        path = str(tmp_path / "svc.call.sock")
        servicer = _Servicer()
        lane = CallLane(path, unary_handlers(servicer, SERVICE), "msgstore", **lane_args)
        await lane.start()
        client = LaneClient(path, SERVICE)
        try:
            await body(lane, client, servicer)
        finally:
            await client.close()
            await lane.close()

    asyncio.run(main())


def _read(after: int) -> msgstore_pb2.ReadRequest:
    return msgstore_pb2.ReadRequest(after_seq=after, max_entries=1)


def test_replies_find_their_calls_whatever_order_they_come_in(tmp_path: Path) -> None:
    async def body(lane: CallLane, client: LaneClient, servicer: _Servicer) -> None:
        slow = asyncio.ensure_future(client.call("Read", _read(1), 10))
        fast = await client.call("Read", _read(10), 10)
        assert isinstance(fast, msgstore_pb2.ReadReply) and fast.entries[0].seq == 11
        assert not slow.done()
        servicer.release.set()
        late = await slow
        assert isinstance(late, msgstore_pb2.ReadReply) and late.entries[0].seq == 2

    _run(tmp_path, body)


def test_failures_carry_grpc_status_names(tmp_path: Path) -> None:
    async def body(lane: CallLane, client: LaneClient, servicer: _Servicer) -> None:
        cases = [
            ("Read", _read(2), "FAILED_PRECONDITION", "stale epoch"),
            ("Read", _read(3), "INTERNAL", "a bug"),
            ("Stats", common_pb2.StatusRequest(), "UNIMPLEMENTED", "Stats"),
            ("Nope", _read(0), "UNIMPLEMENTED", "Nope"),
        ]
        for method, request, code, words in cases:
            with pytest.raises(LaneError) as caught:
                await client.call(method, request, 10)
            assert caught.value.code == code and words in caught.value.details
        with pytest.raises(LaneError) as caught:
            await client.call("Read", _read(4), 0.3)
        assert caught.value.code == "DEADLINE_EXCEEDED"
        ok = await client.call("Read", _read(20), 10)  # the lane still serves
        assert isinstance(ok, msgstore_pb2.ReadReply)

    _run(tmp_path, body)


def test_a_lane_that_breaks_fails_its_calls_and_one_nobody_serves_is_unreachable(
    tmp_path: Path,
) -> None:
    async def body(lane: CallLane, client: LaneClient, servicer: _Servicer) -> None:
        hanging = asyncio.ensure_future(client.call("Read", _read(4), 30))
        await asyncio.sleep(0.1)
        await lane.close()  # the service went away with the call in flight
        with pytest.raises(LaneError) as caught:
            await hanging
        assert caught.value.code == "UNAVAILABLE"
        assert not isinstance(caught.value, LaneUnreachable)  # it was sent: not retried
        with pytest.raises(LaneUnreachable):
            await client.call("Read", _read(0), 5)
        await lane.start()  # back: the next call reconnects
        ok = await client.call("Read", _read(30), 10)
        assert isinstance(ok, msgstore_pb2.ReadReply)

    _run(tmp_path, body)


def test_a_caller_that_stops_reading_its_answers_is_not_read_from(tmp_path: Path) -> None:
    """Replies wait in the service's buffers only up to its write limit: past it, the
    lane stops taking calls from that caller until it reads, so a stuck caller cannot
    make a service buffer without bound. Once it reads, every call is answered."""

    async def body(lane: CallLane, client: LaneClient, servicer: _Servicer) -> None:
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "svc.call.sock"))
        try:
            await _stuck_then_reading(reader, writer, servicer)
        finally:
            writer.close()

    async def _stuck_then_reading(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, servicer: _Servicer
    ) -> None:
        assert await read_frame(reader) == b""  # the hello
        calls = 400  # 25 MiB of answers
        request = _read(5).SerializeToString()
        for i in range(1, calls + 1):
            writer.write(
                frame(common_pb2.LaneCall(id=i, method="Read", body=request).SerializeToString())
            )
        await writer.drain()
        await asyncio.sleep(1.0)  # time enough to answer them all, were nothing holding it
        assert 0 < servicer.big < calls // 4, servicer.big
        got = 0
        while got < calls:
            data = await asyncio.wait_for(read_frame(reader), 30)
            assert data is not None
            reply = common_pb2.LaneReply.FromString(data)
            assert reply.code == "OK", reply.details
            got += 1
        assert servicer.big == calls

    _run(tmp_path, body, in_flight=16)
