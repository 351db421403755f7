"""The caller's side of a service's call lane (``services.common.lane.CallLane``).

One connection, opened on the first call and again after it breaks; calls in flight are
paired with their replies by id. A failure is a :class:`LaneError` with a
``grpc.StatusCode`` name, as an ``AioRpcError`` would carry, so callers map both the
same way: ``UNAVAILABLE`` when the connection broke with the call in flight,
``DEADLINE_EXCEEDED`` when the service did not answer in time, and whatever the
servicer aborted with.

A lane nobody listens on (the service is restarting, or serves gRPC only) is
:class:`LaneUnreachable`, raised before anything was sent: callers then make the same
call over gRPC, whose ``wait_for_ready`` waits for the service within the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from services.common.framed import FrameError, LaneError, frame, frames, open_lane
from services.pb import common_pb2

__all__ = ["LaneClient", "LaneError", "LaneUnreachable", "call_or_grpc"]


class LaneUnreachable(LaneError):
    """Nothing listens on the lane: the call was not sent (use gRPC)."""


class LaneClient:
    def __init__(self, path: str, service: ServiceDescriptor) -> None:
        self.path = path
        self._replies = {
            m.name: message_factory.GetMessageClass(m.output_type) for m in service.methods
        }
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[common_pb2.LaneReply]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()

    async def call(self, method: str, request: Message, timeout: float) -> Message:
        """``method``'s reply to ``request``, within ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        writer = await self._open()
        call_id = next(self._ids)
        answer: asyncio.Future[common_pb2.LaneReply] = loop.create_future()
        self._pending[call_id] = answer
        try:
            call = common_pb2.LaneCall(id=call_id, method=method, body=request.SerializeToString())
            writer.write(frame(call.SerializeToString()))
            try:
                reply = await asyncio.wait_for(answer, max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise LaneError("DEADLINE_EXCEEDED", f"no answer within {timeout:g}s") from None
        finally:
            self._pending.pop(call_id, None)
        if reply.code != "OK":
            raise LaneError(reply.code, reply.details)
        try:
            return self._replies[method].FromString(reply.body)
        except DecodeError as exc:
            raise LaneError("INTERNAL", f"not a {method} reply: {exc}") from None

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._drop("the caller closed the lane")

    async def _open(self) -> asyncio.StreamWriter:
        if self._writer is not None and not self._writer.is_closing():
            return self._writer
        async with self._opening:
            if self._writer is None or self._writer.is_closing():
                try:
                    reader, writer = await open_lane(self.path)
                except (OSError, FrameError) as exc:
                    raise LaneUnreachable("UNAVAILABLE", f"{self.path}: {exc}") from None
                self._writer = writer
                self._reader = asyncio.create_task(self._read(reader, writer))
            return self._writer

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reason = "the service closed the lane"
        try:
            async for data in frames(reader):
                reply = common_pb2.LaneReply.FromString(data)
                answer = self._pending.get(reply.id)
                if answer is not None and not answer.done():
                    answer.set_result(reply)
        except (OSError, FrameError, DecodeError) as exc:
            reason = repr(exc)
        finally:
            writer.close()
            if self._writer is writer:
                self._drop(reason)

    def _drop(self, reason: str) -> None:
        """Every call in flight fails: its service is gone (it may have done the work)."""
        self._writer = None
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(LaneError("UNAVAILABLE", reason))


async def call_or_grpc(
    lane: LaneClient | None,
    method: str,
    request: Message,
    timeout: float,
    grpc_call: Callable[[], Awaitable[Any]],
) -> Any:
    """``method`` over ``lane``, or over gRPC (``grpc_call``) when there is no lane or
    nobody listens on it. Raises ``LaneError`` or ``grpc.aio.AioRpcError``."""
    if lane is not None:
        try:
            return await lane.call(method, request, timeout)
        except LaneUnreachable:
            pass  # not listening (restarting, or gRPC only): gRPC waits for it
    return await grpc_call()
