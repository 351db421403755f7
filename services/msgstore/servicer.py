"""gRPC ``MsgStore``: protobuf <-> queue core (conversions in ``convert``), nothing more.

A Stream is two halves: a reader task submits each incoming batch to the committer as
soon as it arrives (so one listener's batches pipeline into group commits), and the
response generator awaits the futures in arrival order and sends each result, so
results leave in request order. At most ``inflight`` batches per stream wait for their
result; past that the reader stops reading and gRPC flow control pushes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import message_factory
from google.protobuf.message import DecodeError

from services.common import log
from services.common.lane import unary_handlers
from services.msgstore import keys
from services.msgstore.committer import Committer
from services.msgstore.convert import (
    batch_from_pb,
    log_queued,
    result_to_pb,
    session_key,
    state_to_pb,
)
from services.msgstore.engines.base import StoreError
from services.msgstore.model import (
    Append,
    AppendResult,
    AppendStatus,
    BatchResult,
    DeleteQueue,
    Mark,
    OpenQueue,
    QueueState,
    Result,
)
from services.msgstore.ops import READ_MAX_ENTRIES
from services.msgstore.queue import QueueStore
from services.msgstore.replica_reads import copies_of, replica_sets
from services.msgstore.replication import runs
from services.msgstore.tombstones import Graveyard
from services.pb import common_pb2, msgstore_pb2, msgstore_pb2_grpc

if TYPE_CHECKING:
    from services.msgstore.cluster.replicator import Replicator
    from services.msgstore.cluster.start import ClusterSide

STREAM_INFLIGHT = 256
QUEUES_PAGE = 1000  # Queues lists at most this many per call
# A Read that finds at most this much reads on the event loop (see Read).
INLINE_READ_ENTRIES = 64
INLINE_READ_BYTES = 256 * 1024

# A batch handed to the committer: its appends, their (msg_id, qos) for message.queued
# (empty when message events are off) and the future of its result.
_Waiting = tuple[Sequence[Append], list[tuple[str, int]], "asyncio.Future[Result]", Sequence[Mark]]


class MsgStoreServicer(msgstore_pb2_grpc.MsgStoreServicer):  # type: ignore[misc]
    def __init__(
        self,
        store: QueueStore,
        committer: Committer,
        inflight: int = STREAM_INFLIGHT,
        graveyard: Graveyard | None = None,
    ):
        self.store = store
        self.committer = committer
        self.inflight = inflight
        self.streams = 0
        self.graveyard = graveyard if graveyard is not None else Graveyard()
        self.cluster: ClusterSide | None = None  # replicated queues (R > 1) only

    async def Stream(
        self, request_iterator: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[msgstore_pb2.StoreBatchResult]:
        waiting: asyncio.Queue[_Waiting | None] = asyncio.Queue()
        slots = asyncio.Semaphore(self.inflight)
        stream = object()  # this call, as the committer knows it
        self.committer.stream_opened(stream)
        reader = asyncio.create_task(self._read(request_iterator, waiting, slots, stream))
        self.streams += 1
        try:
            while (item := await waiting.get()) is not None:
                appends, logged, future, marks = item
                result = await future
                slots.release()
                assert isinstance(result, BatchResult)
                rep = self.cluster.replicator if self.cluster is not None else None
                if rep is not None and (
                    rep.queues or rep.rebuilding or rep.stepped_down or result.replicated
                ):
                    await self._replicated(rep, appends, result, marks)
                if logged:
                    log_queued(appends, logged, result)
                yield result_to_pb(result)
            await reader  # re-raises what ended the request stream, if it failed
        finally:
            self.streams -= 1
            self.committer.stream_closed(stream)
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader

    async def _read(
        self,
        requests: AsyncIterator[bytes],
        waiting: asyncio.Queue[_Waiting | None],
        slots: asyncio.Semaphore,
        stream: object,
    ) -> None:
        try:
            async for data in requests:
                await slots.acquire()
                logged: list[tuple[str, int]] = []
                try:
                    batch = msgstore_pb2.StoreBatch.FromString(data)
                except DecodeError as exc:  # whose appends and batch id are unknown
                    self._refuse(waiting, 0, 0, f"not a StoreBatch: {exc}")
                    continue
                try:
                    job = batch_from_pb(
                        batch, data, logged if log.message_events_enabled() else None
                    )
                except ValueError as exc:  # refused before it reaches the store
                    self._refuse(waiting, batch.batch_id, len(batch.appends), str(exc))
                    continue
                future = self.committer.submit(job, stream)
                waiting.put_nowait((job.appends, logged, future, job.marks))
        finally:
            waiting.put_nowait(None)

    @staticmethod
    async def _replicated(
        replicator: Replicator,
        appends: Sequence[Append],
        result: BatchResult,
        marks: Sequence[Mark] = (),
    ) -> None:
        """Hold the result until the appends to replicated queues, and their QoS 2 marks
        (exactly once across a failover), are on W copies; appends that are not within
        ``msgstore.failover_timeout`` fail (never a success for a message on fewer
        copies), and so do the batch's marks when they are not (``marks_error``).

        A queue the store holds as replicated but that no primary here leads (its
        rebuild found the copy is not this node's to lead) fails the same way: what was
        written is on this copy alone, and a success for it was how a failover could
        later lose an acknowledged message, or deliver one that was never committed."""
        if replicator.rebuilding:
            opening = runs.opening([op.session for op in appends], replicator.rebuilding)
            opening |= runs.opening([m.session for m in marks], replicator.rebuilding)
            if opening:
                await replicator.settled(opening)
        queues, stepped_down = replicator.queues, replicator.stepped_down
        unled = {
            sid for sid in result.replicated or () if sid not in queues and sid not in stepped_down
        }
        queued = runs.by_queue(appends, result.results, queues, stepped_down)
        marked = {m.session for m in marks if m.session in queues or m.session in unled}
        if not queued and not marked and not unled:
            return
        pending = {}
        for sid, (seqs, datas) in queued.items():
            fut = replicator.appended(sid, seqs, datas)
            if fut is not None:
                pending[sid] = fut
        states = {}
        for sid in marked:
            fut = replicator.state_changed(sid)
            if fut is not None:
                states[sid] = fut
        failed = await replicator.wait(pending)
        failed_states = await replicator.wait(states)
        if failed_states or marked & unled:
            result.marks_failed_for(failed_states | (marked & unled))
        if unled:  # rare: no second pass over the batch's appends otherwise
            failed |= {op.session for op in appends if op.session in unled}
        if not failed:
            return
        refused = AppendResult(AppendStatus.STORE_ERROR)
        result.results = [
            refused if op.session in failed and res.status == AppendStatus.OK else res
            for op, res in zip(appends, result.results, strict=False)
        ]
        result.error = "not on msgstore.write_quorum copies within msgstore.failover_timeout"
        for sid in failed:
            qp = replicator.queues.get(sid)
            follows = replicator.stepped_down.get(sid)
            if sid in unled:
                state, reason = "unled", "a replicated queue with no primary on this node"
            elif follows is None:
                state, reason = "late", result.error
            else:
                state, reason = "superseded", "a newer primary took the queue"
            log.emit(
                "queue.replicated",
                "warning",
                client_id=sid[1],
                mountpoint=sid[0],
                epoch=qp.primary.epoch if qp is not None else follows or 0,
                replicas=list(qp.copies) if qp is not None else [],
                state=state,
                reason=reason,
            )

    @staticmethod
    def _refuse(
        waiting: asyncio.Queue[_Waiting | None], batch_id: int, appends: int, why: str
    ) -> None:
        """Answer a batch the store cannot take: each of its appends fails (none at all,
        and batch id 0, when it could not be read: the listener then fails every append of
        the batch it expected and reopens the stream)."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        refused = [AppendResult(AppendStatus.STORE_ERROR)] * appends
        future.set_result(BatchResult(batch_id, refused, f"invalid batch: {why}"))
        waiting.put_nowait(((), [], future, ()))

    async def Open(
        self, request: msgstore_pb2.OpenRequest, context: Any
    ) -> msgstore_pb2.QueueState:
        sid = session_key(request.key)
        job = OpenQueue(
            sid, request.epoch, request.create, request.clean, request.max_len,
            tuple(request.replicas), request.max_offline_len,
        )  # fmt: skip
        if self.cluster is None:
            state = await self.committer.submit(job)
        else:
            self.cluster.replicator.pause(sid)
            try:
                state = await self.committer.submit(job)
            finally:
                await self.cluster.replicator.opened(sid)  # also ends the pause
        assert isinstance(state, QueueState)
        if state.created:
            mountpoint, client_id = state.session
            log.emit("queue.created", client_id=client_id, mountpoint=mountpoint, epoch=state.epoch)
        return state_to_pb(state)

    async def Delete(
        self, request: msgstore_pb2.DeleteRequest, context: Any
    ) -> msgstore_pb2.QueueState:
        state = await self.committer.submit(
            DeleteQueue(session_key(request.key), request.epoch, request.reason)
        )
        assert isinstance(state, QueueState)
        if state.deleted and self.cluster is not None:
            await self.cluster.replicator.forget(state.session)
        if state.deleted:
            mountpoint, client_id = state.session
            self.graveyard.bury(keys.session(mountpoint, client_id), state.epoch, time.monotonic())
            reason = request.reason or "deleted"
            log.emit("queue.deleted", client_id=client_id, mountpoint=mountpoint, reason=reason)
        return state_to_pb(state)

    async def Failover(
        self, request: msgstore_pb2.FailoverRequest, context: Any
    ) -> msgstore_pb2.QueueState:
        if self.cluster is None:
            return msgstore_pb2.QueueState(
                key=request.key, error="queues are not replicated (msgstore.replication_factor = 1)"
            )
        return await self.cluster.failover.run(request)

    async def Orphans(
        self, request: msgstore_pb2.OrphansRequest, context: Any
    ) -> msgstore_pb2.QueuesReply:
        found = await asyncio.to_thread(copies_of, self.store, request.primary, request.replica)
        reply = msgstore_pb2.QueuesReply()
        for sid, copy in found:
            reply.queues.add(
                key=common_pb2.SessionKey(mountpoint=sid[0], client_id=sid[1]),
                exists=True,
                epoch=copy.log.epoch,
                last_seq=copy.log.last()[1],
                acked=copy.log.base[1],
                replicas=list(copy.replicas),
            )
        return reply

    async def Read(self, request: msgstore_pb2.ReadRequest, context: Any) -> msgstore_pb2.ReadReply:
        """Most resumes find an empty or short queue: read on the event loop, as far as
        ``INLINE_READ_ENTRIES`` and ``INLINE_READ_BYTES``, since a worker thread's two
        wake-ups cost more than such a read. A page that goes further is read again whole
        in a thread, so a large read never holds the loop."""
        sid = session_key(request.key)
        wanted = request.max_entries or READ_MAX_ENTRIES
        try:
            found = self.store.read(
                sid,
                request.epoch,
                request.after_seq,
                min(wanted, INLINE_READ_ENTRIES),
                INLINE_READ_BYTES,
            )
            if found.more and len(found.entries) < wanted:  # cut short by the inline limits
                found = await asyncio.to_thread(
                    self.store.read, sid, request.epoch, request.after_seq, request.max_entries
                )
        except StoreError as exc:
            log.emit("store.error", "warning", op="read", reason=str(exc))
            return msgstore_pb2.ReadReply(state=state_to_pb(QueueState(sid, error=str(exc))))
        entries, more = found.entries, found.more
        rep = self.cluster.replicator if self.cluster is not None else None
        if rep is not None and entries:
            # of a replicated queue led here, only what is on W copies goes to the client
            cap = await rep.readable_upto(sid, entries[-1][0])
            if cap is not None and entries[-1][0] > cap:
                # Not committed within msgstore.failover_timeout: the reader asks again
                # (its replay waits, live messages behind it), as it would for a page.
                entries = [e for e in entries if e[0] <= cap]
                more = True
        reply = msgstore_pb2.ReadReply(state=state_to_pb(found.state), more=more)
        for seq, data in entries:
            entry = reply.entries.add(seq=seq)
            entry.delivery.MergeFromString(data)
        return reply

    async def Stats(
        self, request: msgstore_pb2.StatsRequest, context: Any
    ) -> msgstore_pb2.StatsReply:
        try:
            stats = await asyncio.to_thread(self.store.stats, request.max_queues)
        except StoreError as exc:
            log.emit("store.error", "warning", op="stats", reason=str(exc))
            totals = self.store.totals
            return msgstore_pb2.StatsReply(
                queues=totals.queues, entries=totals.entries, bytes=totals.bytes
            )
        return msgstore_pb2.StatsReply(
            queues=stats.queues,
            entries=stats.entries,
            bytes=stats.bytes,
            top=[state_to_pb(s) for s in stats.top],
        )

    async def Queues(
        self, request: msgstore_pb2.QueuesRequest, context: Any
    ) -> msgstore_pb2.QueuesReply:
        limit = min(request.limit or QUEUES_PAGE, QUEUES_PAGE)
        try:
            found, after = await asyncio.to_thread(self.store.queues, request.after, limit)
        except StoreError as exc:
            log.emit("store.error", "warning", op="queues", reason=str(exc))
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"store error: {exc}")
        reply = msgstore_pb2.QueuesReply(queues=[state_to_pb(s) for s in found], next=after)
        if self.cluster is not None:  # replicated queues name their copies
            sets = await asyncio.to_thread(replica_sets, self.store, [s.session for s in found])
            for pb in reply.queues:
                pb.replicas.extend(sets.get((pb.key.mountpoint, pb.key.client_id), ()))
        return reply


def add_to_server(servicer: MsgStoreServicer, server: grpc.aio.Server) -> None:
    """The generated ``add_MsgStoreServicer_to_server``, except that ``Stream`` gets its
    batches as bytes: ``batch_from_pb`` reads the appends from them (see ``wire``). The
    unary methods come from the service's descriptor, as on the call lane, so a method
    added to the proto is served on both."""
    service = msgstore_pb2.DESCRIPTOR.services_by_name["MsgStore"]
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "Stream": grpc.stream_stream_rpc_method_handler(
            servicer.Stream,
            request_deserializer=None,
            response_serializer=msgstore_pb2.StoreBatchResult.SerializeToString,
        ),
    }
    for name, (request, method) in unary_handlers(servicer, service).items():
        reply = message_factory.GetMessageClass(service.methods_by_name[name].output_type)
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            method,
            request_deserializer=request.FromString,
            response_serializer=reply.SerializeToString,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
