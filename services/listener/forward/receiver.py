"""The receiving side of forwarding: other nodes' copies, routed to sessions here.

One :class:`~services.listener.forward.inbox.Inbox` per sending listener incarnation
drops the copies a reconnecting sender resends; every new copy goes to ``accept`` (the
broker), whose ``done`` callback completes it once it is delivered or durably queued.
The stream's answers are the inbox's cumulative acknowledgements, sent as copies
complete. A sender that outruns this node (:data:`MAX_OUTSTANDING` copies not yet
complete) is not read from until it catches up: gRPC's flow control then holds its
writes, and its outbox holds the rest. The stream is also a publisher to flow control
(:class:`StreamParty`): a congested subscriber here holds it back, as it would hold a
local publisher, until that subscriber drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from services.listener.flow import FlowState
from services.listener.forward.inbox import Inbox
from services.listener.forward.intake import Accept, intake
from services.listener.forward.wire import read_batch
from services.pb import forward_pb2, forward_pb2_grpc

MAX_OUTSTANDING = 10_000
SERVICE = "ternmq.forward.Forward"
RUN_KEY = "ternmq-run"  # initial metadata: this listener's incarnation
IDLE_INBOX_S = 300.0  # an inbox no stream used for this long is forgotten


class StreamParty:
    """One forwarding stream as a publisher that flow control may pause."""

    __slots__ = ("closed", "flow", "readable")

    def __init__(self) -> None:
        self.closed = False
        self.flow: FlowState | None = None
        self.readable = asyncio.Event()
        self.readable.set()

    def backlog(self) -> int:
        return 0

    def pause_input(self) -> None:
        self.readable.clear()

    def resume_input(self) -> None:
        self.readable.set()


class ForwardServicer(forward_pb2_grpc.ForwardServicer):  # type: ignore[misc]
    def __init__(self, accept: Accept, incarnation: int = 0) -> None:
        self.accept = accept
        self.incarnation = incarnation  # this listener's run, in every acknowledgement
        self.inboxes: dict[tuple[str, int], Inbox] = {}
        self._wakes: dict[tuple[str, int], asyncio.Event] = {}  # the stream now attached
        self.received = 0
        self.resent = 0

    async def Stream(
        self, request_iterator: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[forward_pb2.ForwardAck]:
        # the sender knows the stream is up, and which run of this listener it reached
        await context.send_initial_metadata(((RUN_KEY, str(self.incarnation)),))
        wake = asyncio.Event()
        attached: list[tuple[str, int]] = []  # the sender, once its first batch is read
        first = True  # a new stream hears the inbox's state at once (a resender's acks)
        party = StreamParty()
        reader = asyncio.create_task(self._read(request_iterator, wake, attached, party))
        try:
            while True:
                waiter = asyncio.ensure_future(wake.wait())
                await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                # Cleared before the inbox is read, never after: a copy that completes
                # while this ack is on its way (the yield) sets it again for the next turn.
                wake.clear()
                if attached:
                    inbox = self.inboxes.get(attached[0])
                    ack = inbox.take_ack(again=first) if inbox else None
                    first = False
                    if ack is not None:
                        yield forward_pb2.ForwardAck(
                            upto=ack[0], failed=ack[1], settled=ack[2], returned=ack[3]
                        )
                if reader.done():
                    reader.result()  # a bug in reading is raised, not swallowed
                    return
        finally:
            party.closed = True
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read(
        self,
        batches: AsyncIterator[bytes],
        wake: asyncio.Event,
        attached: list[tuple[str, int]],
        party: StreamParty,
    ) -> None:
        async for raw in batches:
            batch = read_batch(raw)
            key = (batch.sender, batch.incarnation)
            inbox = self.inboxes.get(key)
            if inbox is None:
                self._forget_idle()
                inbox = self.inboxes[key] = Inbox()
                # What the sender resends it may have sent to this node's previous run
                # (or to this run, before an idle inbox was forgotten): unknown outcome.
                inbox.doubtful_upto = batch.resent_upto
            inbox.last_seen = time.monotonic()
            if not attached:
                attached.append(key)
            self._wakes[key] = wake
            inbox.confirm(batch.acked)
            if batch.heard:
                inbox.confirm_outcomes(batch.heard)
            received, resent = intake(batch.items, inbox, self.accept, party, self._wakes, key)
            self.received += received
            self.resent += resent
            wake.set()
            while inbox.outstanding() > MAX_OUTSTANDING:
                await asyncio.sleep(0.01)
            await party.readable.wait()

    def _forget_idle(self) -> None:
        horizon = time.monotonic() - IDLE_INBOX_S
        for key in [k for k, box in self.inboxes.items() if box.last_seen < horizon]:
            del self.inboxes[key]
            self._wakes.pop(key, None)


def add_to_server(servicer: ForwardServicer, server: grpc.aio.Server) -> None:
    """``Forward`` served with its batches left as bytes (no request deserializer): they
    are read by hand (``wire.read_batch``), as the sender writes them."""
    handlers = {
        "Stream": grpc.stream_stream_rpc_method_handler(
            servicer.Stream,
            request_deserializer=None,
            response_serializer=forward_pb2.ForwardAck.SerializeToString,
        )
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    # as the generated ``add_ForwardServicer_to_server`` does (missing from the stubs)
    server.add_registered_method_handlers(SERVICE, handlers)  # type: ignore[attr-defined]
