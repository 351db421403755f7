"""The listener's side of the registry's ``Connections`` stream: CONNECTs in batches.

A unary RPC per CONNECT costs more CPU on both sides than the rest of the connect path
together, so registrations and disconnection reports travel over one long-lived stream.
A batch leaves at once when fewer than two are in flight; while two are, the ops
submitted meanwhile gather and leave together when the registry answers; under a connect
storm batches leave ``_WINDOW`` apart (:class:`grpcutil.Pacer
<services.common.grpcutil.Pacer>`). A client connecting alone never waits for a timer.
The registry answers every batch it reads at once, with the results of the ops that
completed (an empty receipt if none did), and later results in completion order (each op
carries an id).

When the stream breaks every unanswered op fails with :class:`RegistryUnavailable` (the
client gets "server unavailable"), and the stream is reopened with backoff; while it is
down, new ops fail at once rather than queue behind an outage. An op given up on by its
caller (deadline) may still be answered later: a registration that succeeded after all is
handed to ``on_late_register`` so the listener reports that connection gone at once, and
the registry never keeps a session online for a client nobody serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable

import grpc
from google.protobuf.message import DecodeError

from services.common.framed import FrameError, frame, frames, open_lane
from services.common.grpcutil import Pacer, rpc_failed_as
from services.pb import registry_pb2, registry_pb2_grpc

# s: under a connect storm a batch leaves at most this soon after the previous one. A
# stream message costs each side some 0.3 ms of CPU however few ops it carries: at 1 ms a
# storm spent a quarter to a third of the listener's CPU on them, and wider windows
# starve the handshakes in flight. A stream that carries lone ops never waits for it.
_WINDOW = 0.005
# Batches in flight on an idle stream. Two, so that a client reconnecting at once does
# not wait behind its previous connection's Disconnected: with one, a sequential
# connect loop's Register waited for that answer, a third of its round trip.
_IDLE_INFLIGHT = 2
LateRegister = Callable[[registry_pb2.RegisterRequest, registry_pb2.RegisterReply], None]
Result = registry_pb2.ConnectionResult
Done = Callable[["Result | RegistryUnavailable"], None]


class RegistryUnavailable(Exception):
    """The registry did not answer an op (stream down, broken, or deadline passed)."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


class _Pending:
    __slots__ = ("abandoned", "deadline", "done", "op")

    def __init__(self, op: registry_pb2.ConnectionOp, done: Done, deadline: float) -> None:
        self.op = op
        self.done = done
        self.deadline = deadline
        self.abandoned = False


class RegistryClient:
    def __init__(
        self,
        stub: registry_pb2_grpc.RegistryStub,
        on_late_register: LateRegister,
        deadline: float = 15.0,
    ) -> None:
        self.stub = stub
        self.deadline = deadline
        self._late = on_late_register
        self._ids = itertools.count(1)
        self._unsent: list[registry_pb2.ConnectionOp] = []
        self._pending: dict[int, _Pending] = {}
        self._wake = asyncio.Event()  # ops are waiting to be sent
        self.batches = 0  # ConnectionOps messages sent (a metric, and for tests)
        self._generation = 0  # which stream is current (an old one's writer may linger)
        self._tasks: list[asyncio.Task[None]] = []
        # Kept from start(): asyncio.get_running_loop() costs a getpid() on Python 3.11,
        # and submit runs twice per connection.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self.connected = asyncio.Event()
        # The registry's unix socket for this stream (framed.socket_path), else gRPC.
        self.lane: str | None = None

    # -- calls -----------------------------------------------------------------------
    def submit(self, op: registry_pb2.ConnectionOp, done: Done) -> None:
        """Send ``op`` with the next batch; ``done`` gets its result or the failure.

        ``done`` is called exactly once, from the event loop (never from inside submit).
        """
        loop = self._loop or asyncio.get_running_loop()
        if not self.connected.is_set():
            loop.call_soon(done, RegistryUnavailable("UNAVAILABLE", "no stream to the registry"))
            return
        op.id = next(self._ids)
        self._pending[op.id] = _Pending(op, done, loop.time() + self.deadline)
        self._unsent.append(op)
        self._wake.set()

    async def _expire(self) -> None:
        """Give up on ops past their deadline (the registry may still answer them later)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(1.0)
            now = loop.time()
            overdue = [p for p in self._pending.values() if not p.abandoned and p.deadline < now]
            for pending in overdue:
                pending.abandoned = True
                if pending.op in self._unsent:  # never left: nobody will answer it
                    self._unsent.remove(pending.op)
                    del self._pending[pending.op.id]
                pending.done(
                    RegistryUnavailable("DEADLINE_EXCEEDED", f"no answer within {self.deadline:g}s")
                )

    # -- answers ---------------------------------------------------------------------
    def _answer(self, batch: registry_pb2.ConnectionResults) -> None:
        for result in batch.results:
            pending = self._pending.pop(result.id, None)
            if pending is None:
                continue
            if not pending.abandoned:
                pending.done(result)
            elif result.HasField("register") and result.register.ok:
                self._late(pending.op.register, result.register)

    def _fail(self, ops: list[registry_pb2.ConnectionOp], code: str, reason: str) -> None:
        for op in ops:
            pending = self._pending.pop(op.id, None)
            if pending is not None and not pending.abandoned:
                pending.done(RegistryUnavailable(code, reason))

    def _fail_all(self, code: str, reason: str) -> None:
        ops = [p.op for p in self._pending.values()]
        self._unsent.clear()
        self._fail(ops, code, reason)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tasks = [
            asyncio.create_task(self._run(), name="registry-stream"),
            asyncio.create_task(self._expire(), name="registry-deadlines"),
        ]

    async def stop(self) -> None:
        self._stopping = True
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._fail_all("CANCELLED", "listener stopping")

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stopping:
            try:
                await self._session()
                code, reason = "STREAM_ENDED", "the registry closed the stream"
            except grpc.aio.AioRpcError as exc:
                code, reason = exc.code().name, str(exc.details())
            except RegistryUnavailable as exc:  # failed before the registry answered
                code, reason = exc.code, exc.reason
            else:
                backoff = 0.05
            self.connected.clear()
            self._fail_all(code, reason)
            rpc_failed_as("registry", "Connections", code, reason)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _session(self) -> None:
        self._generation += 1
        generation = self._generation
        pacer = Pacer(_WINDOW, _IDLE_INFLIGHT)
        answered = asyncio.Event()  # the registry answered: a batch may leave
        loop = asyncio.get_running_loop()

        async def requests() -> AsyncIterator[registry_pb2.ConnectionOps]:
            while True:
                await self._wake.wait()
                while generation == self._generation:  # busy: gather
                    wait = pacer.delay(loop.time())
                    if wait is None:
                        answered.clear()
                        await answered.wait()
                    elif wait > 0:
                        await asyncio.sleep(wait)
                    else:
                        break
                if generation != self._generation:
                    return  # a dead stream's writer must not take the new stream's ops
                self._wake.clear()
                if self._unsent:
                    ops, self._unsent = self._unsent, []
                    pacer.sent(len(ops), loop.time())
                    self.batches += 1
                    yield registry_pb2.ConnectionOps(ops=ops)

        if self.lane is not None:
            await self._lane_call(self.lane, requests(), pacer, answered)
        else:
            await self._grpc_call(requests(), pacer, answered)

    async def _grpc_call(
        self,
        requests: AsyncIterator[registry_pb2.ConnectionOps],
        pacer: Pacer,
        answered: asyncio.Event,
    ) -> None:
        call = self.stub.Connections(requests)
        try:
            await call.initial_metadata()  # sent by the registry as the stream opens
            if call.done():  # no registry: a failed call returns here too, never "connected"
                raise RegistryUnavailable((await call.code()).name, str(await call.details()))
            self.connected.set()
            async for batch in call:
                self._received(batch, pacer, answered)
        finally:
            call.cancel()
            self._generation += 1  # this stream is dead: a writer still waiting on it ends
            answered.set()

    async def _lane_call(
        self,
        path: str,
        requests: AsyncIterator[registry_pb2.ConnectionOps],
        pacer: Pacer,
        answered: asyncio.Event,
    ) -> None:
        """The same stream over the registry's unix socket (``services.common.framed``)."""
        try:
            reader, writer = await open_lane(path)  # the registry's hello: the stream is up
        except (OSError, FrameError) as exc:
            raise RegistryUnavailable("UNAVAILABLE", f"{path}: {exc}") from None
        sending: asyncio.Task[None] | None = None
        try:
            self.connected.set()
            sending = asyncio.create_task(_send(requests, writer), name="registry-lane-send")
            async for data in frames(reader):
                self._received(registry_pb2.ConnectionResults.FromString(data), pacer, answered)
            if sending.done():
                sending.result()  # our side failed first: report that, not the close
        except (ConnectionError, FrameError, DecodeError) as exc:
            raise RegistryUnavailable("UNAVAILABLE", repr(exc)) from None
        finally:
            if sending is not None:
                sending.cancel()
            writer.close()
            self._generation += 1  # this stream is dead: a writer still waiting on it ends
            answered.set()

    def _received(
        self, batch: registry_pb2.ConnectionResults, pacer: Pacer, answered: asyncio.Event
    ) -> None:
        if batch.receipts:
            pacer.answered(batch.receipts)
            answered.set()
        self._answer(batch)


async def _send(
    requests: AsyncIterator[registry_pb2.ConnectionOps], writer: asyncio.StreamWriter
) -> None:
    try:
        async for ops in requests:
            writer.write(frame(ops.SerializeToString()))
            await writer.drain()
        writer.write_eof()
    except ConnectionError:
        return  # the lane broke: its reader ends and ``_lane_call`` reports it
