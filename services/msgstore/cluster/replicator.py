"""A replicated queue's primary: feed each replica, answer publishers once committed.

Theory of operation. The decisions are the pure core's (:class:`Primary`); this is its
I/O. Every queue this node is the primary of (its replica set names this node first) has
a :class:`QueuePrimary` with one sender task per replica. An append committed here is
written into the primary's log (same seq as the store gave it) and wakes the senders; a
sender reads what its replica lacks from the store, calls ``Replica.Append`` and hands
the answer to the core, which moves the commit index. The publisher's result waits until
its append is committed (``wait``), at most ``msgstore.failover_timeout``.

What a sender sends was just written here, so the messages are kept in memory
(``QueuePrimary.held``) until every replica holds them: a sender reads the store only for
what is no longer there (a replica far behind, a rebuilt primary, the memory bound
:data:`HELD_MAX` reached). Reading them back was a large share of the primary's CPU per
message (an LMDB read per entry, and a thread hop once a round exceeded a few dozen).
One difference: a message the client acknowledged out of order before it was sent goes
with its bytes, where the store would have sent none; the replica drops it with the
acknowledged index, as it does every message acknowledged after it was sent.

An ``Open`` may start a new epoch (and so a new run of positions) or change the replica
set: the queue's primary is paused before the Open is written and rebuilt from the store
after it, so no entry is ever sent under the wrong epoch. Appends that land meanwhile are
in the rebuilt log, and their publishers keep waiting on it.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from typing import Any

import grpc

from services.common import log
from services.common.background import Background
from services.common.grpcutil import rpc_failed
from services.common.peer.book import PeerBook
from services.common.session_key import SessionKey
from services.msgstore import replica_wire
from services.msgstore.cluster.batcher import PeerBatcher
from services.msgstore.cluster.stream import AppendStream
from services.msgstore.committer import Committer
from services.msgstore.model import FenceQueue
from services.msgstore.queue import QueueStore
from services.msgstore.replica_reads import read_copy, read_entries
from services.msgstore.replication.log import Append, Appended, Refused
from services.msgstore.replication.primary import Primary
from services.pb import common_pb2, msgstore_pb2
from services.pb.msgstore_pb2 import ReplicaAppend, ReplicaAppends, ReplicaReplies, ReplicaReply
from services.pb.msgstore_pb2_grpc import ReplicaStub

_APPEND_MANY = "/ternmq.msgstore.Replica/AppendMany"
_APPEND_STREAM = "/ternmq.msgstore.Replica/AppendStream"


class ReplicaPeerStub(ReplicaStub):  # type: ignore[misc]
    """``ReplicaStub`` plus ``AppendMany`` and ``AppendStream`` for requests already in
    wire form (:mod:`services.msgstore.replica_wire`)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        super().__init__(channel)
        self.AppendManyRaw = channel.unary_unary(
            _APPEND_MANY,
            request_serializer=None,
            response_deserializer=ReplicaReplies.FromString,
        )
        self.AppendStreamRaw = channel.stream_stream(
            _APPEND_STREAM,
            request_serializer=None,
            response_deserializer=ReplicaReplies.FromString,
        )


RETRY = 0.5  # s before a replica that did not answer is tried again
ACK_EVERY = 1.0  # s between acknowledged-index updates to an idle replica
STATUS_QUEUES = 100
INLINE_READ = 256  # entries read on the loop (~0.8 µs each); more go to a thread
HELD_MAX = 64 * 1024 * 1024  # bytes of messages kept in memory for the senders, all queues
STEPPED_DOWN_MAX = 100_000  # superseded queues remembered (the oldest go first)
DROP_PATIENCE = 30.0  # s a deleted queue's replica is tried for while it cannot be reached
_UNREACHED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def probe(p: Primary, replica: str) -> Append:
    """An empty append at the position before what ``replica`` is sent next: how a
    rebuilt primary (which starts by assuming every copy is as long as its own) learns
    whether it is, and how an idle copy learns the acknowledged index."""
    return Append(p.epoch, p.log.at(p.next[replica] - 1) or p.log.base, ())


class QueuePrimary:
    __slots__ = (
        "acked",
        "copies",
        "held",
        "held_low",
        "joining",
        "max_len",
        "notes",
        "paused",
        "primary",
        "pubrel_sent",
        "replicas",
        "sid",
        "state_acked",
        "state_stamp",
        "state_told",
        "state_version",
        "state_waiters",
        "tasks",
        "waiters",
        "wake",
    )

    def __init__(self, sid: SessionKey, primary: Primary, max_len: int) -> None:
        self.sid = sid
        self.primary = primary
        self.replicas = tuple(primary.replicas)  # the others
        self.copies = (primary.node, *self.replicas)  # the whole set, this node first
        self.max_len = max_len
        self.paused = False
        self.acked = primary.log.base[1]
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.wake = {r: asyncio.Event() for r in self.replicas}
        self.notes = {r: "" for r in self.replicas}  # how the last call to each went
        self.joining: set[str] = set()  # new to the set: caught up = queue.rereplicated
        # Messages appended here that some replica may still need (see the module
        # docstring): the seqs ``held_low .. held_low + len(held) - 1``, no gap.
        self.held: dict[int, bytes] = {}
        self.held_low = 0
        # The delivery state (QoS 2 marks, delivered mark): a version per change, and
        # what each replica was sent and acknowledged.
        self.state_version = 0
        self.state_stamp = (primary.epoch, 0)
        self.state_told = {r: 0 for r in self.replicas}
        self.state_acked = {r: 0 for r in self.replicas}
        self.state_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # PUBREL marks the replicas were sent: one the client has since completed
        # (PUBCOMP) is still sent until the acknowledged index passes its seq (see
        # ``_send``).
        self.pubrel_sent: set[int] = set()
        self.tasks: list[asyncio.Task[None]] = []

    def fail(self, why: str) -> None:
        for _, fut in (*self.waiters, *self.state_waiters):
            if not fut.done():
                fut.set_exception(LookupError(why))
        self.waiters.clear()
        self.state_waiters.clear()

    def settle_state(self) -> None:
        """Resolve the waiters whose delivery state is on W copies."""
        keep = []
        for version, fut in self.state_waiters:
            copies = 1 + sum(1 for v in self.state_acked.values() if v >= version)
            if copies >= self.primary.w:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((version, fut))
        self.state_waiters = keep

    def waiter(self, seq: int) -> asyncio.Future[None]:
        """A future resolved once the entries up to ``seq`` are committed. Kept in ``seq``
        order, which ``settle`` relies on (a read's may come after a larger append's)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        bisect.insort(self.waiters, (seq, fut), key=lambda w: w[0])
        self.settle()
        return fut

    def settle(self) -> None:
        """Resolve the waiters whose entries are committed."""
        committed = self.primary.committed
        if not self.waiters or self.waiters[0][0] > committed:
            return
        keep = []
        for seq, fut in self.waiters:
            if seq <= committed:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((seq, fut))
        self.waiters = keep


class Replicator:
    def __init__(
        self,
        node: str,
        store: QueueStore,
        committer: Committer,
        peers: PeerBook[ReplicaStub],
        w: int,
        timeout: float,
        rpc_timeout: float = 5.0,
    ) -> None:
        self.node = node
        self.store = store
        self.committer = committer
        self.peers = peers
        self.w = w
        self.timeout = timeout
        self.rpc_timeout = rpc_timeout
        self.queues: dict[SessionKey, QueuePrimary] = {}
        self.replicated = 0  # entries acknowledged by replicas (a counter for /metrics)
        self.held_bytes = 0  # of every QueuePrimary.held
        self.background = Background()
        self._locks: dict[SessionKey, list[Any]] = {}  # sid -> [lock, users]
        # sid -> [set when rebuilt, Opens under way] (see ``pause``)
        self.rebuilding: dict[SessionKey, list[Any]] = {}
        # Queues this node was the primary of until a newer one superseded it: sid -> the
        # epoch it follows (see ``step_down``); until an Open here makes it the primary
        # again.
        self.stepped_down: dict[SessionKey, int] = {}
        # One per replica node: every queue's appends (in wire form) share its calls.
        self._batchers: dict[str, PeerBatcher[bytes, ReplicaReply]] = {}
        self._legacy: set[str] = set()  # nodes that answer AppendMany UNIMPLEMENTED
        # One long-lived stream per replica node carries the batches (``cluster.stream``);
        # nodes that answer it UNIMPLEMENTED get AppendMany calls instead.
        self._streams: dict[str, AppendStream] = {}
        self._unary: set[str] = set()

    def _batcher(self, replica: str) -> PeerBatcher[bytes, ReplicaReply]:
        batcher = self._batchers.get(replica)
        if batcher is None:

            async def send(appends: list[bytes]) -> list[ReplicaReply]:
                return await self._append_many(replica, appends)

            batcher = self._batchers[replica] = PeerBatcher(send, len)
        return batcher

    async def _append_many(self, replica: str, appends: list[bytes]) -> list[ReplicaReply]:
        """The appends of many queues as one message of the replica node's stream; one
        AppendMany call to a node that does not serve the stream, and one Append each to
        a node that does not know AppendMany either (a rolling upgrade)."""
        stub = self.peers.stub(replica)
        if stub is None:
            raise LookupError("no address known (gossip prefix msgstores)")
        data = replica_wire.appends(appends)
        if replica not in self._unary and hasattr(stub, "AppendStreamRaw"):
            stream = self._streams.get(replica)
            if stream is None:
                stream = self._streams[replica] = AppendStream(replica, self.rpc_timeout)
            try:
                return await stream.send(stub, self.peers.metadata, data)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._unary.add(replica)  # nothing was taken: sent again below
        metadata = self.peers.metadata()
        if replica not in self._legacy:
            try:
                raw = getattr(stub, "AppendManyRaw", None)
                reply: ReplicaReplies = await (
                    raw(data, timeout=self.rpc_timeout, metadata=metadata)
                    if raw is not None
                    else stub.AppendMany(
                        ReplicaAppends.FromString(data),
                        timeout=self.rpc_timeout,
                        metadata=metadata,
                    )
                )
                return list(reply.replies)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._legacy.add(replica)
        return list(
            await asyncio.gather(
                *(
                    stub.Append(
                        ReplicaAppend.FromString(a), timeout=self.rpc_timeout, metadata=metadata
                    )
                    for a in appends
                )
            )
        )

    def lag_max(self) -> float:
        """Entries the most lagging replica of any queue replicated from here lacks."""
        worst = 0
        for qp in self.queues.values():
            last = qp.primary.log.last()[1]
            worst = max(worst, *(last - m for m in qp.primary.match.values()))
        return float(worst)

    def status(self) -> dict[str, object]:
        """The queues replicated from here: for /status and ternmq-admin (at most
        ``STATUS_QUEUES`` listed, the ones with the most lag first)."""
        rows = []
        for sid, qp in self.queues.items():
            p = qp.primary
            last = p.log.last()[1]
            rows.append(
                {
                    "client_id": sid[1],
                    "mountpoint": sid[0],
                    "epoch": p.epoch,
                    "replicas": list(qp.copies),
                    "last": last,
                    "committed": p.committed,
                    "acked": qp.acked,
                    "match": dict(p.match),
                    "lag": {r: last - m for r, m in p.match.items()},
                    "paused": qp.paused,
                    "senders": dict(qp.notes),
                    "waiting": len(qp.waiters),
                }
            )
        rows.sort(key=lambda row: -max(row["lag"].values(), default=0))  # type: ignore[attr-defined]
        return {
            "write_quorum": self.w,
            "queues": len(self.queues),
            "entries_replicated": self.replicated,
            "held_bytes": self.held_bytes,
            "primaries": rows[:STATUS_QUEUES],
        }

    # -- the store's side ------------------------------------------------------------

    def pause(self, sid: SessionKey) -> None:
        """An Open of ``sid`` is about to be written: its primary stops until rebuilt
        (``opened``), and appends that land meanwhile wait for the rebuild before their
        results are held for W copies (``settled``); a queue being opened for the first
        time has no primary yet, and its first appends must not slip through."""
        qp = self.queues.get(sid)
        if qp is not None:
            qp.paused = True
        entry = self.rebuilding.setdefault(sid, [asyncio.Event(), 0])
        entry[1] += 1

    async def settled(self, sids: set[SessionKey]) -> None:
        """Wait (at most ``msgstore.failover_timeout``) for the rebuilds of ``sids``."""
        events = [self.rebuilding[sid][0].wait() for sid in sids if sid in self.rebuilding]
        if events:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*events), self.timeout)

    @contextlib.asynccontextmanager
    async def _exclusive(self, sid: SessionKey) -> AsyncIterator[None]:
        """One rebuild or forget of a queue at a time: a delete that lands while an Open
        rebuilds the primary must find the rebuilt one, or it could not drop its copies."""
        entry = self._locks.setdefault(sid, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._locks[sid]

    async def opened(
        self, sid: SessionKey, continuing: bool = True, joining: frozenset[str] = frozenset()
    ) -> None:
        """Rebuild ``sid``'s primary from the store (after an Open or a failover).
        ``continuing``: this node stays the primary (an Open), so the entries it wrote
        under its earlier epochs count as its own (``Primary.floor``); False after a
        failover, which may have chosen another history. ``joining``: members new to
        the set (a failover's, which held no copy it read): ``queue.rereplicated`` is
        logged when each has caught up."""
        try:
            async with self._exclusive(sid):
                await self._rebuild(sid, continuing, joining)
        finally:
            entry = self.rebuilding.get(sid)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self.rebuilding[sid]
                    entry[0].set()

    async def _rebuild(
        self, sid: SessionKey, continuing: bool, joining: frozenset[str] = frozenset()
    ) -> None:
        # The old primary stays in ``queues``, paused, until the new one replaces it:
        # appends that land meanwhile wait on it, and their waiters move over below
        # (no await between taking them and installing the new primary).
        stale = self.queues.get(sid)
        if stale is not None:
            stale.paused = True
        copy = await asyncio.to_thread(read_copy, self.store, sid)
        if stale is not None:
            await self._stop(stale)
        old = self.queues.pop(sid, None)
        waiters = old.waiters if old is not None else []
        state_waiters = old.state_waiters if old is not None else []
        if copy is None or copy.follows or not copy.replicas or copy.replicas[0] != self.node:
            # Not ours to lead: not replicated, another node's copy, or fenced by a newer
            # primary (only an Open here, which a failover here writes too, leads again).
            for _, fut in (*waiters, *state_waiters):
                if not fut.done():
                    fut.set_exception(LookupError("the queue is no longer replicated from here"))
            return
        # W as configured, even when fewer copies are left: a set healed down to fewer
        # than W members commits nothing (its publishers are refused) until it grows.
        w = self.w
        floor = old.primary.floor if continuing and old is not None else None
        primary = Primary(self.node, copy.log.epoch, copy.log, copy.replicas, w, floor)
        if floor is not None and old is not None:
            # Still this node's tenure: what it committed stays committed (its reads
            # need not wait for a round, nor for W copies to be up again).
            primary.committed = min(old.primary.committed, copy.log.last()[1])
        qp = QueuePrimary(sid, primary, copy.max_len)
        qp.waiters = waiters
        qp.joining = set(joining) & set(qp.replicas)
        if old is not None:
            qp.joining |= (set(qp.replicas) - set(old.replicas)) | (old.joining & set(qp.replicas))
            qp.state_version = old.state_version + 1  # sent again to every replica
            qp.state_stamp = old.state_stamp
            qp.pubrel_sent = old.pubrel_sent
            qp.state_waiters = old.state_waiters
        self.queues[sid] = qp
        self.stepped_down.pop(sid, None)
        if old is None or old.replicas != qp.replicas or old.primary.epoch != qp.primary.epoch:
            log.emit(
                "queue.replicated",
                client_id=sid[1],
                mountpoint=sid[0],
                epoch=qp.primary.epoch,
                replicas=list(qp.copies),
                state="started",
                reason="",
            )
        qp.tasks = [
            asyncio.create_task(self._feed(qp, r), name=f"replicate-{r}") for r in qp.replicas
        ]
        for ev in qp.wake.values():
            ev.set()
        qp.settle()
        if waiters and max(seq for seq, _ in waiters) > qp.primary.log.last()[1]:
            # appended after the store was read: read it again
            qp.paused = True
            self.background.spawn(self.opened(sid), "replica-rebuild")

    def appended(
        self, sid: SessionKey, seqs: list[int], datas: list[bytes] | None = None
    ) -> asyncio.Future[None] | None:
        """Appends committed here at ``seqs`` (ascending), their messages ``datas`` as
        the store holds them; a future resolved once the last of them is on W copies, or
        None if the queue is not replicated."""
        qp = self.queues.get(sid)
        if qp is None:
            if sid in self.stepped_down:
                return _failed("superseded by a newer primary")
            return None
        log_ = qp.primary.log
        first, n = seqs[0], len(seqs)
        if not qp.paused and log_.last_seq == first - 1 and seqs[-1] == first + n - 1:
            # the usual case: the next seqs, in one run (a group commit's appends)
            if qp.primary.write_many(n) is None:
                self._out_of_step(qp)
            elif datas is not None and self.held_bytes < HELD_MAX:
                self._hold(qp, seqs, datas)
        else:
            for seq in seqs:
                if qp.paused or log_.last_seq >= seq:
                    continue  # the rebuild reads it from the store
                if log_.last_seq != seq - 1 or qp.primary.write() is None:
                    self._out_of_step(qp)
        fut = qp.waiter(seqs[-1])
        for ev in qp.wake.values():
            ev.set()
        return fut

    def _out_of_step(self, qp: QueuePrimary) -> None:
        """Appends that do not follow the primary's log (or it was replaced): rebuild it
        from the store."""
        qp.paused = True
        self.background.spawn(self.opened(qp.sid), "replica-rebuild")

    def state_changed(self, sid: SessionKey) -> asyncio.Future[None] | None:
        """The queue's delivery state changed here (QoS 2 marks written); a future
        resolved once W copies hold it, or None if the queue is not replicated."""
        qp = self.queues.get(sid)
        if qp is None:
            return None
        qp.state_version += 1
        qp.state_stamp = (qp.primary.epoch, time.time_ns())
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        qp.state_waiters.append((qp.state_version, fut))
        qp.settle_state()
        for ev in qp.wake.values():
            ev.set()
        return fut

    async def readable_upto(self, sid: SessionKey, seq: int) -> int | None:
        """How far a read of ``sid`` may go, once what it found up to ``seq`` is
        committed (waiting at most ``msgstore.failover_timeout``): ``Primary.serves``;
        None if this node does not lead ``sid`` (nothing to hold back).

        Why: a resume reads the queue from this store, where an append sits before its
        batch is committed (its result, and a live delivery, wait for W copies). A read
        that handed such an entry to the subscriber would deliver a message that a
        failover may then lose, and that a QoS 2 publisher, never answered, sends again:
        delivered twice."""
        qp = self.queues.get(sid)
        if qp is None:
            return None
        if qp.primary.serves() < seq:
            await self.wait({sid: qp.waiter(seq)})
            qp = self.queues.get(sid, qp)  # a rebuild meanwhile moved the waiter over
        return qp.primary.serves()

    async def wait(self, pending: Mapping[SessionKey, asyncio.Future[None]]) -> set[SessionKey]:
        """Wait for the futures of ``appended``; the queues that did not commit in time."""
        if not pending:
            return set()
        _, late = await asyncio.wait(pending.values(), timeout=self.timeout)
        failed = {sid for sid, fut in pending.items() if fut in late or fut.exception()}
        for fut in late:
            fut.cancel()
        return failed

    def superseded(self, sid: SessionKey, epoch: int) -> None:
        """This node's copy of ``sid`` now follows a primary at ``epoch`` (a replica
        write or a failover's fence): if this node was the primary at an older epoch, it
        is no longer; what waits on it fails (its publishers are refused)."""
        qp = self.queues.get(sid)
        if qp is not None and qp.primary.epoch < epoch:
            del self.queues[sid]
            self._step_down(qp, epoch, "superseded by a newer primary")

    def _step_down(self, qp: QueuePrimary, epoch: int, why: str) -> None:
        """No longer the primary: what waits on it fails, and so does every append to it
        from now on. Its local copy is fenced at ``epoch`` too, so the store refuses them
        (a stale epoch). Before that lands, an append would commit to this copy alone
        and, with the queue gone from ``queues``, be answered at once as a success: a
        copy no replica holds, deleted with the copy when the session's new primary
        takes it over (the fault test lost two so). ``stepped_down`` fails those."""
        self.stepped_down[qp.sid] = epoch
        while len(self.stepped_down) > STEPPED_DOWN_MAX:
            del self.stepped_down[next(iter(self.stepped_down))]
        qp.fail(why)
        self.background.spawn(self._stop(qp), "replica-stop")
        self.background.spawn(self._fence_here(qp.sid, epoch), "replica-fence")

    async def _fence_here(self, sid: SessionKey, epoch: int) -> None:
        await self.committer.submit(FenceQueue(sid, epoch))

    async def forget(self, sid: SessionKey) -> None:
        """The queue was deleted here: if this node was its primary, its replicas delete
        their copies too (best effort: a replica down for longer than
        :data:`DROP_PATIENCE` keeps its copy)."""
        async with self._exclusive(sid):
            qp = self.queues.pop(sid, None)
        self.stepped_down.pop(sid, None)
        if qp is None:
            return
        self.background.spawn(self._stop(qp), "replica-stop")
        # At the epoch of this primary's own log, not the delete's: a delete that a
        # newer owner asked for carries that owner's epoch, which its own queue (failed
        # over onto a replica here, perhaps) holds too.
        for replica in qp.replicas:
            self.background.spawn(self._drop(sid, replica, qp.primary.epoch), "replica-drop")

    async def _drop(self, sid: SessionKey, replica: str, epoch: int) -> None:
        """Tried again for :data:`DROP_PATIENCE` while the replica cannot be reached: a
        replica that just restarted listens on an address gossip may not have brought
        here yet, and a copy it kept would outlive its session."""
        req = msgstore_pb2.FenceRequest(
            key=common_pb2.SessionKey(mountpoint=sid[0], client_id=sid[1]), epoch=epoch
        )
        deadline = time.monotonic() + DROP_PATIENCE
        delay = 0.2
        while True:
            stub = self.peers.stub(replica)
            if stub is not None:
                try:
                    await stub.Drop(req, timeout=self.rpc_timeout, metadata=self.peers.metadata())
                    return
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in _UNREACHED or time.monotonic() + delay > deadline:
                        rpc_failed("msgstore", "Replica.Drop", exc, "info")
                        return
            elif time.monotonic() + delay > deadline:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def close(self) -> None:
        await self.background.close()
        for qp in list(self.queues.values()):
            await self._stop(qp)
        self.queues.clear()
        for stream in self._streams.values():
            await stream.close()

    async def _stop(self, qp: QueuePrimary) -> None:
        qp.paused = True
        self._release(qp)
        for task in qp.tasks:
            task.cancel()
        for task in qp.tasks:
            with suppress(asyncio.CancelledError):
                await task

    # -- one replica -------------------------------------------------------------------

    async def _feed(self, qp: QueuePrimary, replica: str) -> None:
        """Feed one replica for as long as this primary lasts. A bug here must not end
        the feeding quietly (the queue would stop committing): it is logged and the
        feeding starts over from what the core says."""
        while not qp.paused:
            try:
                await self._feed_once(qp, replica)
            except Exception as exc:  # logged, then retried: see the docstring
                log.emit("internal.error", "error", op="replicate", reason=repr(exc))
                await asyncio.sleep(RETRY)

    async def _feed_once(self, qp: QueuePrimary, replica: str) -> None:
        wake = qp.wake[replica]
        told_acked = -1
        while not qp.paused:
            try:
                await asyncio.wait_for(wake.wait(), ACK_EVERY)
            except TimeoutError:
                # Idle: the client may have acknowledged entries since (garbage there too).
                state = await asyncio.to_thread(self.store.state, qp.sid)
                qp.acked = max(qp.acked, state.acked)
            wake.clear()
            while not qp.paused:
                req = qp.primary.to_send(replica)
                stale = qp.state_told[replica] < qp.state_version
                if req is None and told_acked >= qp.acked and not stale:
                    break
                sent = await self._send(qp, replica, req)
                if sent is None:
                    await asyncio.sleep(RETRY)
                    continue
                told_acked = sent
                if req is None:
                    break

    async def _send(self, qp: QueuePrimary, replica: str, req: Append | None) -> int | None:
        """One append (or, with nothing to send, the acknowledged index alone); the
        acknowledged index told, or None when the replica did not answer."""
        p = qp.primary
        if req is None:
            req = probe(p, replica)
        stub = self.peers.stub(replica)
        if stub is None:
            qp.notes[replica] = "no address known (gossip prefix msgstores)"
            return None
        first = req.entries[0][1] if req.entries else 0
        last = req.entries[-1][1] if req.entries else 0
        datas: dict[int, bytes] = {}
        acked = qp.acked
        if req.entries and qp.held_low <= first and last < qp.held_low + len(qp.held):
            datas = qp.held
            acked = self.store.state(qp.sid).acked
        elif req.entries and last - first < INLINE_READ:
            # A few entries just written, in LMDB's page cache: read in microseconds. A
            # thread hop cost 0.7 ms here on a quiet VM (waking the thread), on every
            # round of a publisher's PUBACK.
            datas, acked = read_entries(self.store, qp.sid, first, last)
        elif req.entries:
            datas, acked = await asyncio.to_thread(read_entries, self.store, qp.sid, first, last)
        if acked > qp.acked:
            qp.acked = acked
            p.log.compact(acked)
            if req.entries and req.prev[1] < p.log.base[1]:
                return -1  # garbage now: ask the core again
        entries = replica_wire.entries(req.entries, datas)
        version = qp.state_version
        told: tuple[int, list[int], list[int], int, int] | None = None
        if qp.state_told[replica] < version:
            state = await asyncio.to_thread(self.store.state, qp.sid)
            # A QoS 2 delivery the client completed leaves the queue with its PUBREL mark,
            # but its removal reaches the replicas only with the acknowledged index, which
            # waits for every earlier seq. Until then the mark stays on the copies: a
            # failover in between resends its PUBREL, not the PUBLISH, which the client
            # would take as a new message (exactly once).
            pubrel = set(state.outbound_pubrel)
            pubrel |= {seq for seq in qp.pubrel_sent if seq > qp.acked}
            qp.pubrel_sent = pubrel
            told = (
                state.delivered_upto,
                list(state.inbound_qos2),
                sorted(pubrel),
                qp.state_stamp[0],
                qp.state_stamp[1],
            )
        data = replica_wire.append(
            qp.sid[0],
            qp.sid[1],
            req.epoch,
            req.prev,
            req.install,
            entries,
            qp.acked,
            qp.max_len,
            qp.copies,
            told,
        )
        try:
            reply = await self._batcher(replica).call(data)
        except grpc.aio.AioRpcError as exc:
            rpc_failed("msgstore", "Replica.AppendMany", exc, "debug")
            qp.notes[replica] = f"{exc.code().name}: {exc.details() or ''}"
            return None
        except LookupError as exc:
            qp.notes[replica] = str(exc)
            return None
        qp.notes[replica] = "ok" if reply.ok else f"refused: {reply.reason}"
        if reply.ok and told is not None:
            qp.state_told[replica] = qp.state_acked[replica] = version
            qp.settle_state()
        answer = (
            Appended(reply.epoch, reply.upto)
            if reply.ok
            else Refused(reply.epoch, reply.last_seq, reply.reason)
        )
        if not p.on_reply(replica, answer):
            # Fenced by a failover at a newer epoch: no longer the primary. Appends that
            # still land in this copy fail at once (their publishers are refused).
            qp.paused = True
            if self.queues.get(qp.sid) is qp:
                del self.queues[qp.sid]
                self._step_down(qp, reply.epoch, "superseded by a failover")
            else:
                qp.fail("superseded by a failover")
            log.emit(
                "queue.failover",
                client_id=qp.sid[1],
                mountpoint=qp.sid[0],
                from_node=self.node,
                to_node="",
                committed_seq=p.committed,
                epoch=reply.epoch,
                state="superseded",
                reason=f"{replica} follows epoch {reply.epoch}; this primary's was {p.epoch}",
            )
            return None
        if reply.ok:
            self.replicated += len(req.entries)
            self._prune(qp)
            if replica in qp.joining and p.match[replica] >= p.log.last()[1]:
                qp.joining.discard(replica)
                log.emit(
                    "queue.rereplicated",
                    client_id=qp.sid[1],
                    mountpoint=qp.sid[0],
                    replica=replica,
                    epoch=p.epoch,
                    upto=reply.upto,
                )
        qp.settle()
        return qp.acked

    def _hold(self, qp: QueuePrimary, seqs: list[int], datas: list[bytes]) -> None:
        """Keep the messages of the next appends (the run stays without a gap: after a
        batch that was not kept, none is until the run is empty again)."""
        held = qp.held
        if not held:
            qp.held_low = seqs[0]
        elif seqs[0] != qp.held_low + len(held):
            return
        for seq, data in zip(seqs, datas, strict=True):
            held[seq] = data
            self.held_bytes += len(data)

    def _prune(self, qp: QueuePrimary) -> None:
        """Drop the held messages every replica has (or the client acknowledged)."""
        held, low = qp.held, qp.held_low
        upto = max(min(qp.primary.match.values(), default=0), qp.acked)
        if not held or upto < low:
            return
        if upto >= low + len(held) - 1:
            self._release(qp)
            return
        for seq in range(low, upto + 1):
            self.held_bytes -= len(held.pop(seq))
        qp.held_low = upto + 1

    def _release(self, qp: QueuePrimary) -> None:
        self.held_bytes -= sum(map(len, qp.held.values()))
        qp.held.clear()


def _failed(why: str) -> asyncio.Future[None]:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fut.set_exception(LookupError(why))
    return fut
