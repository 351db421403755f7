"""The Registry gRPC servicer: protobuf in, :class:`Registrar` calls, protobuf out."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from services.common.grpcutil import Pacer, rpc_failed_as
from services.pb import registry_pb2, registry_pb2_grpc
from services.registry.records import from_pb_key, to_info
from services.registry.registrar import RC_CLIENT_ID_INVALID, RC_UNSPECIFIED, Registrar
from services.registry.sessions import Connect
from services.registry.watchers import WatchHub

MAX_LISTED = 100_000  # Sessions with limit 0 lists at most this many
RESULTS_WINDOW = 0.005  # s: as the listener's (registry_client._WINDOW), busy streams only


class RegistryServicer(registry_pb2_grpc.RegistryServicer):  # type: ignore[misc]
    def __init__(self, registrar: Registrar, hub: WatchHub) -> None:
        self.registrar = registrar
        self.hub = hub
        self._tasks: set[asyncio.Task[None]] = set()  # Connections ops still running

    async def Register(
        self, request: registry_pb2.RegisterRequest, context: Any
    ) -> registry_pb2.RegisterReply:
        """Make a new connection the live session of its client id.

        What the listener sends:

        - ``session_expiry``: MQTT 5: the CONNECT's Session Expiry Interval (0 if absent);
          the registry caps it at ``max_session_expiry_interval``. MQTT 3.1/3.1.1:
          0 for clean_session=true, 0xFFFFFFFF for clean_session=false — the registry then
          applies ``persistent_client_expiration``.
        - ``clean_start``: MQTT 5 Clean Start, or the 3.1/3.1.1 clean_session flag.
        - ``max_offline_messages``: 0 = the node's ``max_offline_messages``.

        The reply comes after any old connection of the id was told to close (Takeover
        on its listener's Watch stream) and answered with Disconnected, or after
        ``registry.takeover_timeout``; and after the queue was opened with the new epoch
        (``persistent``: the session has a queue in the msgstore and must use ``epoch``
        for every write) or deleted. ``session_present`` follows MQTT: a persistent,
        unexpired session existed and clean_start was false. When ``ok`` is false,
        ``reason_code`` is the MQTT 5 CONNACK reason (0x88 server unavailable when the
        msgstore or gossip did not answer; 3.1.1 listeners send return code 3).
        """
        return await self._register(request, shield=True)

    async def _register(
        self, request: registry_pb2.RegisterRequest, shield: bool
    ) -> registry_pb2.RegisterReply:
        if not request.key.client_id:
            return registry_pb2.RegisterReply(
                ok=False, reason="empty client id", reason_code=RC_CLIENT_ID_INVALID
            )
        result = await self.registrar.register(
            Connect(
                key=from_pb_key(request.key),
                # a handful of distinct values shared by every session: one copy each
                node=sys.intern(request.node or self.registrar.settings.node),
                listener_id=sys.intern(request.listener_id),
                clean_start=request.clean_start,
                session_expiry=request.session_expiry,
                proto_ver=request.proto_ver,
                peer=request.peer,
                username=request.username,
                max_offline_messages=request.max_offline_messages,
                route=sys.intern(request.route),
            ),
            shield,
        )
        return registry_pb2.RegisterReply(
            ok=result.ok,
            epoch=result.epoch,
            session_present=result.session_present,
            reason=result.reason,
            reason_code=result.reason_code,
            persistent=result.persistent,
        )

    async def Disconnected(
        self, request: registry_pb2.DisconnectedRequest, context: Any
    ) -> registry_pb2.DisconnectedReply:
        """A connection ended. Also the answer to a Takeover command.

        ``epoch`` is the one its Register returned; a report for an older epoch is
        ignored. ``session_expiry`` is the session's expiry now, in Register's encoding
        (the CONNECT value unless an MQTT 5 DISCONNECT changed it; MQTT 3 values are not
        read). A listener told to take over a connection it no longer has must still
        answer with Disconnected(key, old_epoch, taken_over=true): the new CONNECT is
        waiting for it. ``ok`` is false when the report was stale.
        """
        ok = await self.registrar.disconnected(
            from_pb_key(request.key),
            request.epoch,
            # A connection taken over sent no DISCONNECT that could change the expiry,
            # and a listener answering for one it no longer holds does not know it.
            None if request.taken_over else request.session_expiry,
            # A connection taken over leaves its subscriptions to the session's new
            # connection, on this node or another.
            drop_subs=not request.no_subscriptions and not request.taken_over,
        )
        return registry_pb2.DisconnectedReply(ok=ok)

    async def Connections(
        self, request_iterator: AsyncIterator[registry_pb2.ConnectionOps], context: Any
    ) -> AsyncIterator[registry_pb2.ConnectionResults]:
        """Register and Disconnected in batches, for a listener's connect path.

        Each op runs as its own task (a registration may wait for a takeover while others
        complete). Every batch read gets one results message at least, as soon as the ops
        that complete at once have: an empty one (a receipt) when none has. The listener
        sends its next batch when an answer comes back (``grpcutil.Pacer``; ``receipts``
        says how many of its batches a message answers, as one may answer several), so the
        receipt keeps a slow op (a takeover, a persistent session's writes) from holding
        back the CONNECTs behind it. Results that come later leave with the next message,
        and whatever completes while one is being written goes with the one after; under
        a connect storm a message also waits for ``RESULTS_WINDOW`` after the previous one
        (``grpcutil.Pacer``). An op that fails unexpectedly is logged and answered as
        failed, so the listener never waits for an answer that cannot come.
        """
        await context.send_initial_metadata(())  # the listener knows the stream is up
        answers = _Answers()
        reader = asyncio.create_task(self._read(request_iterator, context, answers))
        pacer = Pacer(RESULTS_WINDOW)
        loop = asyncio.get_running_loop()
        try:
            while True:
                await answers.wake.wait()
                wait = pacer.delay(loop.time())
                if wait:
                    await asyncio.sleep(wait)
                answers.wake.clear()
                if answers.due():
                    out = answers.take()
                    pacer.sent(len(out.results), loop.time())
                    yield out
                    pacer.answered()  # written: the next one may leave
                if reader.done():
                    reader.result()  # the stream failed: end this call with its error
                    return  # the listener closed its side; ops still running are unanswered
        finally:
            reader.cancel()

    def connections_lane(
        self, frames: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[registry_pb2.ConnectionResults]:
        """``Connections`` on the registry's unix socket (``services.common.lane``)."""
        return self.Connections(_ops(frames), context)

    async def _read(
        self,
        request_iterator: AsyncIterator[registry_pb2.ConnectionOps],
        context: Any,
        answers: _Answers,
    ) -> None:
        try:
            async for batch in request_iterator:
                for op in batch.ops:
                    task = asyncio.create_task(self._run_op(op, context, answers.done))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                # Set after the ops' tasks were scheduled: the writer wakes after their
                # first step, so the ops that need no I/O are in this batch's answer.
                answers.read()
        finally:
            answers.wake.set()  # ended or failed (a broken frame): the writer ends the call

    async def _run_op(
        self,
        op: registry_pb2.ConnectionOp,
        context: Any,
        done: Callable[[registry_pb2.ConnectionResult], None],
    ) -> None:
        result = registry_pb2.ConnectionResult(id=op.id)
        kind = op.WhichOneof("op")
        try:
            if kind == "register":
                # _run_op tasks are never cancelled by the stream's end: no shield needed
                result.register.CopyFrom(await self._register(op.register, shield=False))
            elif kind == "disconnected":
                result.disconnected.CopyFrom(await self.Disconnected(op.disconnected, context))
        except Exception as exc:  # answered as failed below; logged, not hidden
            rpc_failed_as("registry", f"Connections.{kind}", "INTERNAL", repr(exc), "error")
            if kind == "register":
                result.register.reason = f"internal error: {exc!r}"
                result.register.reason_code = RC_UNSPECIFIED
            else:
                result.disconnected.ok = False
        done(result)

    async def Watch(
        self, request: registry_pb2.WatchRequest, context: Any
    ) -> AsyncIterator[registry_pb2.RegistryCommand]:
        """Commands for one listener process; a newer stream with its id replaces this one.

        Initial metadata goes out at once so the listener knows the stream is established
        (it drops its connections when a stream is re-established after a registry restart).
        """
        await context.send_initial_metadata(())
        async for command in self.hub.stream(request.listener_id, request.node):
            yield command

    async def Sessions(
        self, request: registry_pb2.SessionsRequest, context: Any
    ) -> registry_pb2.SessionsReply:
        own = local_sessions(self.registrar, request)
        listing = self.registrar.listing
        if request.local or listing is None or len(self.registrar.cluster().members) < 2:
            return own
        return await listing.gather(request, own)


def local_sessions(
    registrar: Registrar, request: registry_pb2.SessionsRequest
) -> registry_pb2.SessionsReply:
    """This node's sessions (``request.limit`` 0: up to :data:`MAX_LISTED`)."""
    limit = min(request.limit or MAX_LISTED, MAX_LISTED)
    found = registrar.table.find(request.client_id, limit)
    infos = []
    for s in found:
        info = to_info(s)
        if s.queued and registrar.settings.replication_factor > 1:
            info.replicas.extend(registrar.replica_set(s.key))
        infos.append(info)
    return registry_pb2.SessionsReply(sessions=infos)


async def _ops(frames: AsyncIterator[bytes]) -> AsyncIterator[registry_pb2.ConnectionOps]:
    async for data in frames:
        yield registry_pb2.ConnectionOps.FromString(data)


class _Answers:
    """The results of one ``Connections`` stream waiting to be sent, and the batches read
    since the last message (each is owed an answer, empty if need be)."""

    __slots__ = ("finished", "unanswered", "wake")

    def __init__(self) -> None:
        self.finished: list[registry_pb2.ConnectionResult] = []
        self.unanswered = 0
        self.wake = asyncio.Event()

    def done(self, result: registry_pb2.ConnectionResult) -> None:
        self.finished.append(result)
        self.wake.set()

    def read(self) -> None:
        self.unanswered += 1
        self.wake.set()

    def due(self) -> bool:
        return bool(self.finished or self.unanswered)

    def take(self) -> registry_pb2.ConnectionResults:
        out = registry_pb2.ConnectionResults(results=self.finished, receipts=self.unanswered)
        self.finished = []
        self.unanswered = 0
        return out
