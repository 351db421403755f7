"""Applying jobs inside one write transaction: the queue rules, record by record.

Theory of operation: see ``services.msgstore.queue`` for the queue model. Here a
:class:`Txn` wraps the engine's write transaction and caches each queue record it reads,
so a group of thousands of appends to one queue reads and writes its record once;
:meth:`Txn.flush` then advances ``acked`` past acknowledged heads (one seek per queue)
and writes the changed records. Handlers return results and never raise for a refused
operation; a :class:`~services.msgstore.engines.base.StoreError` from the engine
propagates and aborts the whole transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from services.common.session_key import SessionKey
from services.msgstore import keys, replicated
from services.msgstore.engines.base import ReadTxn, WriteTxn
from services.msgstore.model import (
    Ack,
    Append,
    AppendResult,
    AppendStatus,
    BatchResult,
    Collected,
    CollectTombstones,
    DeleteQueue,
    FenceQueue,
    Job,
    Mark,
    MarkKind,
    OpenQueue,
    QueueMeta,
    QueueState,
    ReplicaState,
    ReplicaWrite,
    Result,
    WriteBatch,
)

DBS = ("meta", "entries", "marks", "repl")
META, ENTRIES, MARKS, REPL = DBS  # repl: replicated queues' records (``replicated``)
READ_MAX_ENTRIES = 1000  # when a Read asks for 0 (= "as many as sensible")
READ_MAX_BYTES = 16 * 1024 * 1024  # stay well under the gRPC message limit
# Appends stop when live data fills this much of the store: the rest is the reserve that
# lets acks, deletes and clean starts (which need free pages too) drain a full store.
APPEND_FILL_LIMIT = 0.9
FILL_CHECK_EVERY = 32  # appends between two looks at the fill level ...
FILL_CHECK_BYTES = 256 * 1024  # ... or bytes, whichever comes first


@dataclass(slots=True)
class Totals:
    queues: int = 0
    entries: int = 0
    bytes: int = 0

    def add(self, other: Totals) -> None:
        self.queues += other.queues
        self.entries += other.entries
        self.bytes += other.bytes


def stale(epoch: int, meta: QueueMeta) -> bool:
    return epoch != 0 and epoch < meta.epoch


def _marks(txn: ReadTxn, sess: bytes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    inbound: list[int] = []
    outbound: list[int] = []
    for key, _ in txn.scan(MARKS, sess, keys.prefix_end(sess)):
        kind, ident = keys.mark_of(key)
        (inbound if kind == MarkKind.INBOUND_QOS2 else outbound).append(ident)
    return tuple(inbound), tuple(outbound)


def queue_state(
    txn: ReadTxn,
    sid: SessionKey,
    sess: bytes,
    meta: QueueMeta | None,
    error: str = "",
    created: bool = False,
    deleted: bool = False,
) -> QueueState:
    if meta is None:
        return QueueState(sid, error=error)
    inbound, outbound = _marks(txn, sess) if meta.marks else ((), ())
    return QueueState(
        sid,
        meta.exists,
        meta.epoch,
        meta.last_seq,
        meta.acked,
        meta.count,
        meta.size,
        meta.delivered_upto,
        meta.max_len,
        meta.max_offline,
        inbound,
        outbound,
        error,
        created,
        deleted,
    )


class Txn:
    """A write transaction plus the queue records it has read or changed."""

    __slots__ = (
        "delta", "dirty", "full", "head_moved", "metas", "replicated", "txn", "unchecked",
        "unchecked_bytes",
    )  # fmt: skip

    def __init__(self, txn: WriteTxn) -> None:
        self.txn = txn
        self.metas: dict[bytes, QueueMeta | None] = {}
        self.dirty: set[bytes] = set()
        self.head_moved: set[bytes] = set()
        self.delta = Totals()
        self.full = ""  # why appends are refused in this transaction ("" = they are not)
        self.unchecked = FILL_CHECK_EVERY  # appends since the fill level was read
        self.unchecked_bytes = 0
        # Replicated queues appended to or marked (``BatchResult.replicated``).
        self.replicated: set[SessionKey] | None = None

    def take_replicated(self) -> set[SessionKey] | None:
        """The replicated queues touched since the last call (one transaction may hold
        several batches). A method, not reads of the attribute around its reset: the
        compiled build narrows such a read to None and raises on the set."""
        touched, self.replicated = self.replicated, None
        return touched

    def touched_replicated(self, sid: SessionKey) -> None:
        if self.replicated is None:
            self.replicated = {sid}
        else:
            self.replicated.add(sid)

    def refuse_append(self, size: int) -> str:
        """Non-empty (the reason) once live data passes the append limit."""
        if not self.full:
            self.unchecked += 1
            self.unchecked_bytes += size
            if self.unchecked >= FILL_CHECK_EVERY or self.unchecked_bytes >= FILL_CHECK_BYTES:
                self.unchecked = self.unchecked_bytes = 0
                fill = self.txn.fill()
                if fill >= APPEND_FILL_LIMIT:
                    self.full = (
                        f"store full: live data uses {fill:.0%} of msgstore.map_size; appends "
                        f"are refused above {APPEND_FILL_LIMIT:.0%} until queues drain"
                    )
        return self.full

    def meta(self, sess: bytes) -> QueueMeta | None:
        try:
            return self.metas[sess]
        except KeyError:
            raw = self.txn.get(META, sess)
            meta = self.metas[sess] = QueueMeta.decode(raw) if raw is not None else None
            return meta

    def live(self, sid: SessionKey) -> tuple[bytes, QueueMeta] | None:
        """The queue of ``sid`` if it exists (a session too long for a key never has one)."""
        try:
            sess = keys.session(*sid)
        except keys.KeyTooLong:
            return None
        meta = self.meta(sess)
        return None if meta is None or not meta.exists else (sess, meta)

    def store(self, sess: bytes, meta: QueueMeta) -> None:
        self.metas[sess] = meta
        self.dirty.add(sess)

    def wipe(self, sess: bytes, meta: QueueMeta) -> None:
        """Drop every entry and mark; everything assigned so far counts as acknowledged."""
        end = keys.prefix_end(sess)
        self.txn.delete_range(ENTRIES, sess, end)
        if meta.marks:
            self.txn.delete_range(MARKS, sess, end)
        self.delta.entries -= meta.count
        self.delta.bytes -= meta.size
        meta.count = meta.size = meta.marks = 0
        meta.acked = meta.delivered_upto = meta.last_seq
        self.head_moved.discard(sess)
        self.store(sess, meta)

    def flush(self) -> None:
        """Advance ``acked`` of queues whose head was acknowledged; write changed records."""
        for sess in self.head_moved:
            meta = self.metas[sess]
            assert meta is not None
            start, end = keys.entries_after(sess, meta.acked)
            head = self.txn.first(ENTRIES, start, end)
            meta.acked = keys.seq_of(head[0]) - 1 if head is not None else meta.last_seq
        for sess in self.dirty:
            meta = self.metas[sess]
            assert meta is not None
            self.txn.put(META, sess, meta.encode())


_NO_QUEUE = AppendResult(AppendStatus.NO_QUEUE)
_STALE = AppendResult(AppendStatus.STALE_EPOCH)
_QUEUE_FULL = AppendResult(AppendStatus.QUEUE_FULL)
_STORE_ERROR = AppendResult(AppendStatus.STORE_ERROR)
_OK = AppendStatus.OK
_tuple_new = tuple.__new__


def _append(t: Txn, op: Append) -> AppendResult:
    """The hottest function of the store (one call per message per subscriber)."""
    found = t.live(op.session)
    if found is None:
        return _NO_QUEUE
    sess, meta = found
    epoch = op.epoch
    if (epoch and epoch < meta.epoch) or meta.replica:
        return _STALE
    limit = meta.max_offline if op.offline else meta.max_len
    if limit and meta.count >= limit:
        return _QUEUE_FULL
    data = op.data
    size = len(data)
    if t.full or t.refuse_append(size):
        return _STORE_ERROR
    seq = meta.last_seq + 1
    t.txn.put(ENTRIES, keys.entry(sess, seq), data)
    meta.last_seq = seq
    meta.count += 1
    meta.size += size
    delta = t.delta
    delta.entries += 1
    delta.bytes += size
    t.dirty.add(sess)
    if meta.replicated:
        t.touched_replicated(op.session)
    # AppendResult(_OK, seq) without the Python-level NamedTuple __new__
    result: AppendResult = _tuple_new(AppendResult, (_OK, seq))
    return result


def _ack(t: Txn, op: Ack) -> int:
    """Apply one ack; 1 if it was refused for its epoch."""
    found = t.live(op.session)
    if found is None:
        return 0
    sess, meta = found
    if stale(op.epoch, meta):
        return 1
    pop, entry, delta = t.txn.pop, keys.entry, t.delta
    acked, last = meta.acked, meta.last_seq
    for seq in op.seqs:
        if not acked < seq <= last:
            continue  # already acknowledged, or never assigned
        old = pop(ENTRIES, entry(sess, seq))
        if old is not None:
            meta.count -= 1
            meta.size -= len(old)
            delta.entries -= 1
            delta.bytes -= len(old)
            if seq == acked + 1:
                t.head_moved.add(sess)
        if meta.marks:  # a completed QoS 2 delivery needs no PUBREL state
            pubrel = keys.mark(sess, MarkKind.OUTBOUND_PUBREL, seq)
            if pop(MARKS, pubrel) is not None:
                meta.marks -= 1
    if op.delivered_upto > meta.delivered_upto:
        meta.delivered_upto = min(op.delivered_upto, last)
    t.dirty.add(sess)
    return 0


def _mark(t: Txn, op: Mark) -> int:
    """1 when the mark is refused for an older epoch."""
    found = t.live(op.session)
    if found is None:
        return 0
    sess, meta = found
    if stale(op.epoch, meta):
        return 1
    if meta.replicated:
        t.touched_replicated(op.session)
    key = keys.mark(sess, op.kind, op.ident)
    if op.set:
        if t.txn.get(MARKS, key) is None:
            t.txn.put(MARKS, key, b"")
            meta.marks += 1
            t.dirty.add(sess)
    elif t.txn.pop(MARKS, key) is not None:
        meta.marks -= 1
        t.dirty.add(sess)
    return 0


def _batch(t: Txn, job: WriteBatch) -> BatchResult:
    t.take_replicated()  # this batch's own from here
    results = [_append(t, op) for op in job.appends]
    stale_marks = {op.session for op in job.marks if _mark(t, op)}
    refused = sum(_ack(t, op) for op in job.acks) + len(stale_marks)
    failed = t.full and any(r.status == AppendStatus.STORE_ERROR for r in results)
    marks_error = "QoS 2 marks refused for an older epoch" if stale_marks else ""
    return BatchResult(
        job.batch_id,
        results,
        t.full if failed else "",
        refused,
        marks_error,
        t.take_replicated(),
        stale_marks or None,
    )


def _open(t: Txn, job: OpenQueue) -> QueueState:
    try:
        sess = keys.session(*job.session)
    except keys.KeyTooLong as exc:
        return QueueState(job.session, error=str(exc))
    meta = t.meta(sess)
    if meta is not None and job.epoch < meta.epoch:
        return queue_state(
            t.txn, job.session, sess, meta, error=f"stale epoch {job.epoch} < {meta.epoch}"
        )
    created = meta is None or not meta.exists
    if created and not job.create:
        return queue_state(t.txn, job.session, sess, meta)
    if meta is None:
        meta = QueueMeta()
    elif created:  # revive a tombstone: seqs continue above the deleted queue's
        meta = replace(meta, exists=True)
    elif job.clean:
        t.wipe(sess, meta)
    if created:
        t.delta.queues += 1
    meta.epoch = job.epoch
    meta.max_len = job.max_len
    meta.max_offline = job.max_offline
    meta.replica = False  # opened by this node's registry: the session is owned here
    t.store(sess, meta)
    if job.replicas or meta.replicated:
        replicated.on_open(t, sess, meta, job, job.clean and not created)
    return queue_state(t.txn, job.session, sess, meta, created=created)


def _delete(t: Txn, job: DeleteQueue) -> QueueState:
    found = t.live(job.session)
    if found is None:
        return QueueState(job.session)
    sess, meta = found
    if stale(job.epoch, meta):
        return queue_state(
            t.txn, job.session, sess, meta, error=f"stale epoch {job.epoch} < {meta.epoch}"
        )
    if job.replica_only and not meta.replica:
        return queue_state(t.txn, job.session, sess, meta, error="not a replica's copy here")
    if not job.replica_only and meta.replica and job.epoch and job.epoch <= meta.epoch:
        # A copy the primary of this epoch (or a newer one) feeds: the session it was
        # this node's for is gone, but the queue is now another node's, which drops its
        # copies itself. Deleting it here (a late eviction) made a hole a failover read.
        return queue_state(
            t.txn, job.session, sess, meta, error=f"a replica's copy at epoch {meta.epoch}"
        )
    t.wipe(sess, meta)
    meta.exists = False
    meta.epoch = max(meta.epoch, job.epoch)
    if meta.replicated:
        meta.replicated = False
        replicated.on_delete(t, sess)
    t.delta.queues -= 1
    return queue_state(t.txn, job.session, sess, meta, deleted=True)


def _collect(t: Txn, job: CollectTombstones) -> Collected:
    """Remove each tombstone that is still the one buried: a queue created again since,
    or a newer delete's tombstone (another epoch), stays."""
    count = 0
    for sess, epoch in job.graves:
        meta = t.meta(sess)
        if meta is None or meta.exists or meta.epoch != epoch:
            continue
        t.txn.pop(META, sess)
        t.metas[sess] = None
        t.dirty.discard(sess)
        count += 1
    return Collected(count)


_HANDLERS: dict[type, Callable[[Txn, object], Result]] = {
    WriteBatch: _batch,  # type: ignore[dict-item]
    OpenQueue: _open,  # type: ignore[dict-item]
    DeleteQueue: _delete,  # type: ignore[dict-item]
    CollectTombstones: _collect,  # type: ignore[dict-item]
    ReplicaWrite: replicated.replica_write,  # type: ignore[dict-item]
    FenceQueue: replicated.fence,  # type: ignore[dict-item]
}


def apply(t: Txn, job: Job) -> Result:
    """Apply one job inside ``t``; a refusal is a result, a store failure raises."""
    return _HANDLERS[type(job)](t, job)


def failed_result(job: Job, reason: str) -> Result:
    """The result of a job that could not be written (or made durable) at all."""
    if isinstance(job, WriteBatch):
        error = [AppendResult(AppendStatus.STORE_ERROR)] * len(job.appends)
        return BatchResult(job.batch_id, error, reason, marks_error=reason if job.marks else "")
    if isinstance(job, CollectTombstones):
        return Collected(0, reason)
    if isinstance(job, (ReplicaWrite, FenceQueue)):
        return ReplicaState(job.session, False, reason=reason)
    return QueueState(job.session, error=reason, store_error=True)
