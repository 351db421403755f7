"""A service's long-lived stream, and its unary calls, on plain unix sockets
(``services.common.framed``).

Each accepted socket is one call of the stream. The service writes an empty frame first
(the stream is up: gRPC's initial metadata), then the servicer's method runs unchanged,
fed the frames read as its request iterator, and what it yields is written back as
frames. A call lane carries a service's unary methods: ``LaneCall`` frames in,
``LaneReply`` frames out, paired by id, several in flight. Only the transport differs
from the gRPC methods, which stay for clients that reach the service over TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from services.common.framed import HELLO, READ_LIMIT, FrameError, LaneError, frame, frames
from services.common.grpcutil import rpc_failed_as
from services.pb import common_pb2

Call = Callable[[AsyncIterator[bytes], Any], AsyncIterator[Any]]
"""The servicer's stream method: raw request frames and a context in, messages out."""


IN_FLIGHT = 1024  # calls of one caller running at once on a call lane


class LaneContext:
    """What the servicers' stream methods use of a gRPC context."""

    __slots__ = ()

    async def send_initial_metadata(self, _metadata: object) -> None:
        """Sent already: the lane's first frame."""


class _Served:
    """A unix socket and the connections it holds, closed with it. Each connection gets
    the hello, then ``_serve``; a peer that breaks framing loses its connection only,
    logged as ``rpc.failed``."""

    def __init__(self, path: str, target: str, method: str) -> None:
        self.path = path
        self.target = target  # for rpc.failed: the service and what it serves here
        self.method = method
        self.server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        sock = Path(self.path)
        sock.parent.mkdir(parents=True, exist_ok=True)
        sock.unlink(missing_ok=True)  # a killed service's socket file
        self.server = await asyncio.start_unix_server(self._accepted, self.path, limit=READ_LIMIT)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in list(self._writers):
            writer.close()  # each connection's reader sees the end, and its call returns
        for task in list(self._tasks):
            task.cancel()
        if self.server is not None:
            await self.server.wait_closed()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            writer.write(HELLO)
            await self._serve(reader, writer)
        except (ConnectionError, FrameError, DecodeError) as exc:
            rpc_failed_as(self.target, self.method, "UNAVAILABLE", repr(exc))
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class Lane(_Served):
    """One stream method: each connection is one call of it."""

    def __init__(self, path: str, call: Call, target: str, method: str) -> None:
        super().__init__(path, target, method)
        self.call = call

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async for out in self.call(frames(reader), LaneContext()):
            writer.write(frame(out.SerializeToString()))
            await writer.drain()  # a client that stops reading holds its own answers


# -- unary calls --------------------------------------------------------------------

Handler = tuple[type[Message], Callable[[Any, Any], Awaitable[Message]]]


class CallContext(LaneContext):
    """What the servicers' unary methods use of a gRPC context."""

    __slots__ = ("code", "details")

    def __init__(self) -> None:
        self.code = "OK"
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: object) -> NoReturn:
        raise LaneError(code.name, details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code.name

    def set_details(self, details: str) -> None:
        self.details = details


def unary_handlers(servicer: object, service: ServiceDescriptor) -> dict[str, Handler]:
    """The servicer's unary methods by name, with their request types (as gRPC's
    generated ``add_*_to_server`` would register them)."""
    handlers: dict[str, Handler] = {}
    for method in service.methods:
        if method.client_streaming or method.server_streaming:
            continue
        fn = getattr(servicer, method.name, None)
        if fn is not None:  # a method the servicer lacks is answered UNIMPLEMENTED
            request = message_factory.GetMessageClass(method.input_type)
            handlers[method.name] = (request, fn)
    return handlers


class CallLane(_Served):
    """A service's unary methods on a unix socket: each ``LaneCall`` frame runs as its own
    task (as gRPC runs each call) and is answered by a ``LaneReply`` frame with its id."""

    def __init__(
        self, path: str, handlers: dict[str, Handler], target: str, in_flight: int = IN_FLIGHT
    ) -> None:
        super().__init__(path, target, "lane")
        self.handlers = handlers
        self.in_flight = in_flight

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A caller that stops reading its answers is not read from either: at most
        # ``in_flight`` of its calls run at once, and none starts while its unread answers
        # are over the socket's write limit. Its answers stay bounded in this service.
        slots = asyncio.Semaphore(self.in_flight)
        async for data in frames(reader):
            call = common_pb2.LaneCall.FromString(data)
            await slots.acquire()
            await writer.drain()
            task = asyncio.create_task(self._run(call, writer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _t: slots.release())

    async def _run(self, call: common_pb2.LaneCall, writer: asyncio.StreamWriter) -> None:
        reply = common_pb2.LaneReply(id=call.id, code="OK")
        handler = self.handlers.get(call.method)
        context = CallContext()
        try:
            if handler is None:
                raise LaneError("UNIMPLEMENTED", f"no method {call.method!r}")
            request_type, method = handler
            result = await method(request_type.FromString(call.body), context)
            if context.code != "OK":
                raise LaneError(context.code, context.details)
            reply.body = result.SerializeToString()
        except LaneError as exc:
            reply.code, reply.details = exc.code, exc.details
        except DecodeError as exc:
            reply.code, reply.details = "INVALID_ARGUMENT", f"not a request: {exc}"
        except NotImplementedError:
            reply.code, reply.details = "UNIMPLEMENTED", f"no method {call.method!r}"
        except Exception as exc:  # answered and logged, as gRPC answers INTERNAL
            reply.code, reply.details = "INTERNAL", repr(exc)
            rpc_failed_as(self.target, call.method, "INTERNAL", repr(exc), "error")
        if not writer.is_closing():  # a caller gone meanwhile gets nothing, as over gRPC
            writer.write(frame(reply.SerializeToString()))
