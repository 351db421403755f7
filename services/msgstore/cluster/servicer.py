"""gRPC ``Replica`` (between nodes' msgstores) and the failover a registry asks for.

``Replica`` is served on ``cluster.msgstore_listen`` behind the cookie check: a primary's
appends to this node's copy, a failover's fence of it, and the reads that copy it. The
rules are in :mod:`services.msgstore.replicated` (the store's side) and
:mod:`services.msgstore.replication` (the pure core).

A failover (``MsgStore.Failover``, asked by this node's registry once it has claimed the
client id at a new epoch while the queue's primary is down) follows DESIGN §4: fence
``R - W + 1`` of the old copies at the new epoch, start from the one whose last position
is highest (:func:`~services.msgstore.replication.failover.choose`), copy it here if it
is another node's, and open the queue here as its primary with the new replica set.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc

from services.common import log
from services.common.peer.book import PeerBook
from services.common.session_key import SessionKey
from services.msgstore import replica_wire
from services.msgstore.cluster.replicator import Replicator
from services.msgstore.committer import Committer
from services.msgstore.convert import session_key, state_to_pb
from services.msgstore.model import (
    Ack,
    BatchResult,
    DeleteQueue,
    FenceQueue,
    OpenQueue,
    QueueState,
    ReplicaState,
    ReplicaWrite,
    WriteBatch,
)
from services.msgstore.queue import QueueStore
from services.msgstore.replica_reads import read_copy
from services.msgstore.replication.failover import acked_upto, choose, read_quorum
from services.msgstore.replication.log import Position
from services.pb import common_pb2, msgstore_pb2, msgstore_pb2_grpc
from services.pb.msgstore_pb2_grpc import ReplicaStub

FETCH_PAGE = 1000
STREAM_AHEAD = 8  # batches of a stream submitted and not yet answered, at most
SERVICE = "ternmq.msgstore.Replica"


class ReplicaServicer(msgstore_pb2_grpc.ReplicaServicer):  # type: ignore[misc]
    def __init__(self, store: QueueStore, committer: Committer, replicator: Replicator) -> None:
        self.store = store
        self.committer = committer
        self.replicator = replicator

    async def Append(
        self, request: msgstore_pb2.ReplicaAppend, context: Any
    ) -> msgstore_pb2.ReplicaReply:
        return await self._append(request)

    async def AppendMany(
        self, request: msgstore_pb2.ReplicaAppends, context: Any
    ) -> msgstore_pb2.ReplicaReplies:
        """Submitted together, the writes share the committer's next group commit."""
        replies = await asyncio.gather(*(self._append(a) for a in request.appends))
        return msgstore_pb2.ReplicaReplies(replies=replies)

    async def AppendStream(
        self, batches: AsyncIterator[bytes], context: Any
    ) -> AsyncIterator[msgstore_pb2.ReplicaReplies]:
        """``AppendMany`` over a long-lived stream (``cluster.stream``): each batch's
        writes are submitted as soon as it is read, so the batches of a stream share
        group commits as concurrent calls did, and answered in the order they came.
        Past :data:`STREAM_AHEAD` unanswered batches the stream is not read (HTTP/2's
        flow control then holds the primary back)."""
        answers: asyncio.Queue[asyncio.Future[list[msgstore_pb2.ReplicaReply]] | None]
        answers = asyncio.Queue(STREAM_AHEAD)
        reader = asyncio.create_task(self._read_stream(batches, answers))
        try:
            while (answer := await answers.get()) is not None:
                yield msgstore_pb2.ReplicaReplies(replies=await answer)
            try:
                await reader  # the primary ended the stream, or sent what cannot be read
            except Exception as exc:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad batch: {exc!r}")
        finally:
            reader.cancel()
            await asyncio.wait([reader])
            if not reader.cancelled():
                reader.exception()  # retrieved (reported above, or the stream went first)
            while not answers.empty():
                if (left := answers.get_nowait()) is not None:
                    left.cancel()

    async def _read_stream(
        self,
        batches: AsyncIterator[bytes],
        answers: asyncio.Queue[asyncio.Future[list[msgstore_pb2.ReplicaReply]] | None],
    ) -> None:
        try:
            async for raw in batches:
                # Parsed by protobuf, which validates it, then read by hand: cheaper
                # than reading every entry through the generated classes.
                msgstore_pb2.ReplicaAppends.FromString(raw)
                jobs = replica_wire.read_appends(raw)
                await answers.put(asyncio.ensure_future(asyncio.gather(*map(self._write, jobs))))
        except Exception:
            await answers.put(None)  # what came before is still answered, then the error
            raise
        await answers.put(None)

    async def _append(self, request: msgstore_pb2.ReplicaAppend) -> msgstore_pb2.ReplicaReply:
        return await self._write(replica_write(request))

    async def _write(self, job: ReplicaWrite) -> msgstore_pb2.ReplicaReply:
        state = await self.committer.submit(job)
        assert isinstance(state, ReplicaState)
        if state.ok:
            self.replicator.superseded(job.session, state.epoch)
        return replica_reply(state)

    async def Fence(
        self, request: msgstore_pb2.FenceRequest, context: Any
    ) -> msgstore_pb2.FenceReply:
        sid = session_key(request.key)
        state = await self.committer.submit(FenceQueue(sid, request.epoch))
        assert isinstance(state, ReplicaState)
        if state.ok:
            self.replicator.superseded(sid, state.epoch)
        return fence_pb(state)

    async def Drop(
        self, request: msgstore_pb2.FenceRequest, context: Any
    ) -> msgstore_pb2.FenceReply:
        sid = session_key(request.key)
        reason = "deleted on its primary"
        job = DeleteQueue(sid, request.epoch, reason, replica_only=True)
        state = await self.committer.submit(job)
        assert isinstance(state, QueueState)
        if state.deleted:
            log.emit("queue.deleted", client_id=sid[1], mountpoint=sid[0], reason=reason)
        return msgstore_pb2.FenceReply(ok=not state.error, exists=state.exists, reason=state.error)

    async def Fetch(
        self, request: msgstore_pb2.FetchRequest, context: Any
    ) -> msgstore_pb2.FetchReply:
        sid = session_key(request.key)
        copy = await asyncio.to_thread(read_copy, self.store, sid)
        if copy is None:
            return msgstore_pb2.FetchReply(error="no replicated queue here")
        if request.epoch < copy.log.epoch:
            return msgstore_pb2.FetchReply(error=f"epoch {request.epoch} < {copy.log.epoch}")
        page = request.max_entries or FETCH_PAGE
        found = await asyncio.to_thread(self.store.read, sid, 0, request.after_seq, page)
        last = copy.log.last()[1]
        # a page cut short (by count or by size) answers only up to its last entry
        upto = found.entries[-1][0] if found.more else last
        held = dict(found.entries)
        st = found.state
        reply = msgstore_pb2.FetchReply(
            last_seq=last,
            delivered_upto=st.delivered_upto,
            inbound_qos2=list(st.inbound_qos2),
            outbound_pubrel=list(st.outbound_pubrel),
        )
        # Every position, with the message where the client has not acknowledged it.
        for seq in range(max(request.after_seq, copy.log.base[1]) + 1, min(upto, last) + 1):
            pos = copy.log.at(seq)
            if pos is not None:
                reply.entries.add(epoch=pos[0], seq=seq, delivery=held.get(seq, b""))
        return reply


def add_to_server(servicer: ReplicaServicer, server: grpc.aio.Server) -> None:
    """``Replica`` as ``add_ReplicaServicer_to_server`` serves it, except ``AppendStream``,
    whose batches reach the servicer as bytes (no request deserializer)."""
    pb = msgstore_pb2

    def unary(method: Any, request: Any, reply: Any) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.unary_unary_rpc_method_handler(
            method,
            request_deserializer=request.FromString,
            response_serializer=reply.SerializeToString,
        )

    handlers = {
        "Append": unary(servicer.Append, pb.ReplicaAppend, pb.ReplicaReply),
        "AppendMany": unary(servicer.AppendMany, pb.ReplicaAppends, pb.ReplicaReplies),
        "Fence": unary(servicer.Fence, pb.FenceRequest, pb.FenceReply),
        "Fetch": unary(servicer.Fetch, pb.FetchRequest, pb.FetchReply),
        "Drop": unary(servicer.Drop, pb.FenceRequest, pb.FenceReply),
        "AppendStream": grpc.stream_stream_rpc_method_handler(
            servicer.AppendStream,
            request_deserializer=None,
            response_serializer=pb.ReplicaReplies.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    # as the generated ``add_ReplicaServicer_to_server`` does (missing from the stubs)
    server.add_registered_method_handlers(SERVICE, handlers)  # type: ignore[attr-defined]


def replica_write(request: msgstore_pb2.ReplicaAppend) -> ReplicaWrite:
    """The store's job for a primary's append."""
    return ReplicaWrite(
        session_key(request.key),
        request.epoch,
        (request.prev_epoch, request.prev_seq),
        tuple((e.epoch, e.seq, e.delivery) for e in request.entries),
        request.install,
        request.acked,
        request.max_len,
        tuple(request.replicas),
        (
            (request.delivered_upto, tuple(request.inbound_qos2), tuple(request.outbound_pubrel))
            if request.has_state
            else None
        ),
        (request.state_epoch, request.state_stamp),
    )


def replica_reply(state: ReplicaState) -> msgstore_pb2.ReplicaReply:
    """The answer to a primary's append: how far its copy holds the primary's log."""
    return msgstore_pb2.ReplicaReply(
        ok=state.ok,
        epoch=state.epoch,
        upto=state.upto if state.ok else 0,
        last_seq=state.last[1],
        reason=state.reason,
    )


def failover_event(
    sid: SessionKey,
    epoch: int,
    state: str,
    from_node: str,
    to_node: str,
    committed_seq: int,
    reason: str,
) -> None:
    log.emit(
        "queue.failover",
        "info" if state != "refused" else "warning",
        client_id=sid[1],
        mountpoint=sid[0],
        from_node=from_node,
        to_node=to_node,
        committed_seq=committed_seq,
        epoch=epoch,
        state=state,
        reason=reason,
    )


def fence_pb(state: ReplicaState) -> msgstore_pb2.FenceReply:
    return msgstore_pb2.FenceReply(
        ok=state.ok,
        exists=state.exists,
        epoch=state.epoch,
        last_epoch=state.last[0],
        last_seq=state.last[1],
        base_epoch=state.base[0],
        base_seq=state.base[1],
        reason=state.reason,
        state_epoch=state.stamp[0],
        state_stamp=state.stamp[1],
        replicas=list(state.replicas),
    )


FENCE_GRACE = 0.25  # s the other copies get once a failover's read quorum has answered
MAX_WIDENINGS = 3  # rounds of copies named by the copies read (each adds at least one)


class Failover:
    def __init__(
        self,
        node: str,
        store: QueueStore,
        committer: Committer,
        peers: PeerBook[ReplicaStub],
        replicator: Replicator,
        w: int,
        rpc_timeout: float,
    ) -> None:
        self.node = node
        self.store = store
        self.committer = committer
        self.peers = peers
        self.replicator = replicator
        self.w = w
        self.rpc_timeout = rpc_timeout

    async def run(self, request: msgstore_pb2.FailoverRequest) -> msgstore_pb2.QueueState:
        sid = session_key(request.key)
        epoch = request.epoch
        copies, read = await self._read_copies(sid, list(dict.fromkeys(request.copies)), epoch)
        r, w = len(copies), min(self.w, len(copies))
        lasts: dict[str, Position] = {n: a.last for n, a in read.items()}
        chosen = choose(lasts, r, w, prefer=copies)
        if chosen is None:
            why = (
                f"only {len(read)} of the queue's {r} copies answered; a failover reads "
                f"{read_quorum(r, w)}"
            )
            failover_event(sid, epoch, "refused", "", self.node, 0, why)
            return state_to_pb(QueueState(sid, error=why))
        # The log comes from the most up-to-date copy; the delivery state (QoS 2 marks)
        # from the copy that holds its newest version, which may be another one.
        held = {n: a for n, a in read.items() if a.exists}
        newest = max(held, key=lambda n: (held[n].stamp, n == chosen), default=chosen)
        marks = await self._state_of(sid, newest, epoch, read[newest])
        if isinstance(marks, str):
            failover_event(sid, epoch, "refused", newest, self.node, 0, marks)
            return state_to_pb(QueueState(sid, error=marks))
        if marks is not None and request.uncertain:
            # The delivered mark reaches the copies lazily: whatever the queue holds may
            # have gone out from the dead primary, so it goes out again with DUP set.
            marks = (max(marks[0], read[chosen].last[1]), marks[1], marks[2])
        if chosen != self.node and read[chosen].exists:
            error = await self._copy(sid, chosen, epoch, read[chosen])
            if error:
                failover_event(sid, epoch, "refused", chosen, self.node, 0, error)
                return state_to_pb(QueueState(sid, error=error))
        if marks is not None and read[newest].exists:
            keep = ReplicaWrite(
                sid, epoch, read[chosen].last, (), state=marks, stamp=read[newest].stamp
            )
            done = await self.committer.submit(keep)
            assert isinstance(done, ReplicaState)
            if not done.ok:
                why = f"keeping the delivery state of {newest}: {done.reason}"
                failover_event(sid, epoch, "refused", newest, self.node, 0, why)
                return state_to_pb(QueueState(sid, error=why))
        error, foreign = await self._acked_as_anywhere(sid, epoch, held)
        if error:
            failover_event(sid, epoch, "refused", chosen, self.node, 0, error)
            return state_to_pb(QueueState(sid, error=error))
        self.replicator.pause(sid)
        job = OpenQueue(
            sid, epoch, True, False, request.max_len, tuple(request.replicas),
            request.max_offline_len,
        )  # fmt: skip
        try:
            state = await self.committer.submit(job)
        finally:  # the rebuild also ends the pause
            new_members = frozenset(request.replicas) - frozenset(copies)
            await self.replicator.opened(sid, continuing=False, joining=new_members)
        assert isinstance(state, QueueState)
        kept = f"read the copies on {', '.join(sorted(read))}; {state.count} messages kept{foreign}"
        failover_event(sid, epoch, "done", chosen, self.node, lasts[chosen][1], kept)
        reply = state_to_pb(state)
        reply.held = bool(held)  # else the queue was created afresh: no session to resume
        return reply

    async def _read_copies(
        self, sid: SessionKey, copies: list[str], epoch: int
    ) -> tuple[list[str], dict[str, ReplicaState]]:
        """Fence and read a quorum of ``copies``, and of every member a copy read says
        its primary fed: the copies and what was read. The request names the copies the
        register records, which may be fewer than the set a primary feeds (a claim that
        moved the queue and did not record its new set yet). A read quorum of the fewer
        meets no write quorum of the larger, and the unfenced rest of it could still
        commit for the old primary: two lineages, each acknowledged to publishers."""
        w = self.w
        read = await self._fence_quorum(
            sid, copies, epoch, read_quorum(len(copies), min(w, len(copies)))
        )
        for _ in range(MAX_WIDENINGS):
            named = [n for a in read.values() for n in a.replicas if n not in copies]
            if not named:
                break
            copies = [*copies, *dict.fromkeys(named)]
            need = read_quorum(len(copies), min(w, len(copies))) - len(read)
            if need <= 0:
                break  # already a read quorum of the wider set: it meets all its writes
            others = [n for n in copies if n not in read]
            read.update(await self._fence_quorum(sid, others, epoch, need))
        return copies, read

    async def _fence_quorum(
        self, sid: SessionKey, copies: list[str], epoch: int, need: int
    ) -> dict[str, ReplicaState]:
        """Fence every copy at once; the ones fenced, once ``need`` have answered and the
        others had :data:`FENCE_GRACE` more (or all answered). A copy on a stopped node
        (SIGSTOP) answers no sooner than its RPC's deadline, which is also the deadline
        of the registry's call to this failover: waiting for it failed every failover
        for as long as that node stayed stopped. The read quorum is what makes the
        choice sound (``replication.failover``); the grace only lets an up-to-date copy
        that is a little slow count."""
        loop = asyncio.get_running_loop()
        tasks: dict[asyncio.Future[ReplicaState | None], str] = {
            asyncio.ensure_future(self._fence(sid, node, epoch)): node for node in copies
        }
        read: dict[str, ReplicaState] = {}
        pending: set[asyncio.Future[ReplicaState | None]] = set(tasks)
        deadline: float | None = None
        try:
            while pending:
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                done, pending = await asyncio.wait(
                    pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    break  # the grace is over
                for task in done:
                    answer = task.result()
                    if answer is not None and answer.ok:
                        read[tasks[task]] = answer
                if deadline is None and len(read) >= need:
                    deadline = loop.time() + FENCE_GRACE
        finally:
            for task in pending:
                task.cancel()  # a fence that lands later only confirms the new epoch
        return read

    async def _acked_as_anywhere(
        self, sid: SessionKey, epoch: int, held: Mapping[str, ReplicaState]
    ) -> tuple[str, str]:
        """Acknowledge here what any copy read holds as acknowledged, where it is of the
        history this copy now holds (``failover.acked_upto``); why not ("" when done),
        and a note naming the copies whose acknowledgements were of another history.
        Acks reach the replicas lazily, so the most up-to-date log may lag the old
        primary's acknowledged index (its client acked, then left): without this the new
        primary resends what the client already acknowledged (S8)."""
        bases = {n: a.base for n, a in held.items()}
        copy = await asyncio.to_thread(read_copy, self.store, sid)
        if copy is None:
            return "", ""  # no replicated copy here: nothing of its history to acknowledge
        acked, foreign = acked_upto(bases, copy.log)
        note = ""
        if foreign:
            note = "; acknowledgements of another history ignored: " + ", ".join(
                f"{n} at {bases[n]}" for n in foreign
            )
        here = await asyncio.to_thread(self.store.state, sid)
        if not here.exists or acked <= here.acked:
            return "", note
        seqs = tuple(range(here.acked + 1, min(acked, here.last_seq) + 1))
        if not seqs:
            return "", note
        done = await self.committer.submit(WriteBatch(0, acks=(Ack(sid, epoch, seqs),)))
        assert isinstance(done, BatchResult)
        if done.error or done.stale_acks:
            return f"acknowledging up to {acked}: {done.error or 'stale epoch'}", note
        return "", note

    async def _state_of(
        self, sid: SessionKey, node: str, epoch: int, fenced: ReplicaState
    ) -> tuple[int, tuple[int, ...], tuple[int, ...]] | str | None:
        """The delivery state of ``node``'s copy (None: it holds no queue); a string says
        why it could not be read."""
        if not fenced.exists:
            return None
        if node == self.node:
            st = await asyncio.to_thread(self.store.state, sid)
            return (st.delivered_upto, st.inbound_qos2, st.outbound_pubrel)
        stub = self.peers.stub(node)
        if stub is None:
            return f"no address known for the msgstore of {node}"
        req = msgstore_pb2.FetchRequest(
            key=_key(sid), epoch=epoch, after_seq=fenced.last[1], max_entries=1
        )
        try:
            reply: msgstore_pb2.FetchReply = await stub.Fetch(
                req, timeout=self.rpc_timeout, metadata=self.peers.metadata()
            )
        except grpc.aio.AioRpcError as exc:
            return f"reading the state on {node}: {exc.code().name} {exc.details() or ''}"
        if reply.error:
            return f"reading the state on {node}: {reply.error}"
        return (reply.delivered_upto, tuple(reply.inbound_qos2), tuple(reply.outbound_pubrel))

    async def _fence(self, sid: SessionKey, node: str, epoch: int) -> ReplicaState | None:
        if node == self.node:
            state = await self.committer.submit(FenceQueue(sid, epoch))
            assert isinstance(state, ReplicaState)
            return state
        stub = self.peers.stub(node)
        if stub is None:
            return None
        try:
            reply: msgstore_pb2.FenceReply = await stub.Fence(
                msgstore_pb2.FenceRequest(key=_key(sid), epoch=epoch),
                timeout=self.rpc_timeout,
                metadata=self.peers.metadata(),
            )
        except grpc.aio.AioRpcError:
            return None
        return ReplicaState(
            sid,
            reply.ok,
            reply.exists,
            reply.epoch,
            reply.last_seq,
            (reply.last_epoch, reply.last_seq),
            (reply.base_epoch, reply.base_seq),
            reply.reason,
            (reply.state_epoch, reply.state_stamp),
            tuple(reply.replicas),
        )

    async def _copy(self, sid: SessionKey, source: str, epoch: int, state: ReplicaState) -> str:
        """Replace this node's copy with ``source``'s; why not ("" when done)."""
        stub = self.peers.stub(source)
        if stub is None:
            return f"no address known for the msgstore of {source}"
        entries: list[tuple[int, int, bytes]] = []
        after = state.base[1]
        marks: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
        try:
            while True:  # at least once: the delivery state comes with the first page
                reply: msgstore_pb2.FetchReply = await stub.Fetch(
                    msgstore_pb2.FetchRequest(key=_key(sid), epoch=epoch, after_seq=after),
                    timeout=self.rpc_timeout,
                    metadata=self.peers.metadata(),
                )
                if reply.error:
                    return f"reading the copy on {source}: {reply.error}"
                marks = (
                    reply.delivered_upto,
                    tuple(reply.inbound_qos2),
                    tuple(reply.outbound_pubrel),
                )
                if not reply.entries:
                    break
                entries.extend((e.epoch, e.seq, e.delivery) for e in reply.entries)
                after = reply.entries[-1].seq
                if after >= state.last[1]:
                    break
        except grpc.aio.AioRpcError as exc:
            return f"reading the copy on {source}: {exc.code().name} {exc.details() or ''}"
        job = ReplicaWrite(
            sid, epoch, state.base, tuple(entries), install=True, state=marks, stamp=state.stamp
        )
        done = await self.committer.submit(job)
        assert isinstance(done, ReplicaState)
        return "" if done.ok else f"copying from {source}: {done.reason}"


def _key(sid: SessionKey) -> common_pb2.SessionKey:
    return common_pb2.SessionKey(mountpoint=sid[0], client_id=sid[1])
