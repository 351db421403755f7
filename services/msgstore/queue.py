"""The queue core: durable, ordered, epoch-fenced logs per session over an Engine.

Theory of operation (DESIGN §4 "Queue model"). A queue is a log of ``seq -> message``
per session, plus a small state record (``QueueMeta``): the epoch, the highest seq ever
assigned (``last_seq``), ``acked`` (every seq <= acked is acknowledged), live entry
count and bytes, ``delivered_upto`` and the number of QoS 2 marks.

* seq is assigned here, as ``last_seq + 1``; ``last_seq`` is stored, never lowered —
  not by acks, clean starts or deletes (a tombstone keeps it) — so seqs only grow,
  across restarts too.
* Acks name individual seqs; acknowledged entries are deleted at once. Because every seq
  in ``(acked, last_seq]`` is either live or acknowledged, ``acked`` is recomputed as
  "first live entry - 1" (one seek) and therefore is the highest *contiguous* ack.
* Fencing: ``Open`` sets the epoch and refuses one older than the stored epoch. Every
  other operation carrying a non-zero epoch older than the stored one is refused (an
  append gets STALE_EPOCH, an ack or mark is counted in ``stale_acks``); epoch 0 means
  unfenced (a publisher routing to the queue, expiry, inspection).
* ``max_len`` (set by Open) bounds live entries: the append past it gets QUEUE_FULL.

Writes come in groups (:meth:`QueueStore.write_group`): many jobs, one transaction, one
commit — the group commit. Queue records touched by the group are cached for the
transaction and written once at its end. If the store is full the group is retried job
by job, and a batch that still does not fit is retried without its appends (acks free
space, so a full store drains); whatever cannot be written gets an error result.
Nothing here syncs: durability policy belongs to the caller (``committer.py``).

Worked example: appends A, B, C get seqs 1, 2, 3; ack(2) deletes B, acked stays 0;
ack(1) deletes A and acked becomes 2 (C is the first live entry); a restart then reads
from seq 3 and the next append gets seq 4.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from services.msgstore import keys
from services.msgstore.engines.base import Engine, ReadTxn, StoreError, StoreFull, WriteTxn
from services.msgstore.model import (
    Ack,
    Append,
    AppendResult,
    AppendStatus,
    BatchResult,
    DeleteQueue,
    Job,
    Mark,
    MarkKind,
    OpenQueue,
    QueueMeta,
    QueueState,
    ReadResult,
    Result,
    SessionId,
    StoreStats,
    WriteBatch,
)

DBS = ("meta", "entries", "marks")
META, ENTRIES, MARKS = DBS
READ_MAX_ENTRIES = 1000  # when a Read asks for 0 (= "as many as sensible")
READ_MAX_BYTES = 16 * 1024 * 1024  # stay well under the gRPC message limit


@dataclass(slots=True)
class Totals:
    queues: int = 0
    entries: int = 0
    bytes: int = 0

    def add(self, other: Totals) -> None:
        self.queues += other.queues
        self.entries += other.entries
        self.bytes += other.bytes


def _stale(epoch: int, meta: QueueMeta) -> bool:
    return epoch != 0 and epoch < meta.epoch


def _marks(txn: ReadTxn, sess: bytes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    inbound: list[int] = []
    outbound: list[int] = []
    for key, _ in txn.scan(MARKS, sess, keys.prefix_end(sess)):
        kind, ident = keys.mark_of(key)
        (inbound if kind == MarkKind.INBOUND_QOS2 else outbound).append(ident)
    return tuple(inbound), tuple(outbound)


def _state(
    txn: ReadTxn, sid: SessionId, sess: bytes, meta: QueueMeta | None, error: str = "",
    created: bool = False, deleted: bool = False,
) -> QueueState:  # fmt: skip
    if meta is None:
        return QueueState(sid, error=error)
    inbound, outbound = _marks(txn, sess) if meta.marks else ((), ())
    return QueueState(
        sid, meta.exists, meta.epoch, meta.last_seq, meta.acked, meta.count, meta.size,
        meta.delivered_upto, meta.max_len, inbound, outbound, error, created, deleted,
    )  # fmt: skip


class _Txn:
    """A write transaction plus the queue records it has read or changed."""

    __slots__ = ("delta", "dirty", "head_moved", "metas", "txn")

    def __init__(self, txn: WriteTxn) -> None:
        self.txn = txn
        self.metas: dict[bytes, QueueMeta | None] = {}
        self.dirty: set[bytes] = set()
        self.head_moved: set[bytes] = set()
        self.delta = Totals()

    def meta(self, sess: bytes) -> QueueMeta | None:
        try:
            return self.metas[sess]
        except KeyError:
            raw = self.txn.get(META, sess)
            meta = self.metas[sess] = QueueMeta.decode(raw) if raw is not None else None
            return meta

    def live(self, sid: SessionId) -> tuple[bytes, QueueMeta] | None:
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


def _append(t: _Txn, op: Append) -> AppendResult:
    found = t.live(op.session)
    if found is None:
        return AppendResult(AppendStatus.NO_QUEUE)
    sess, meta = found
    if op.epoch and op.epoch < meta.epoch:
        return AppendResult(AppendStatus.STALE_EPOCH)
    if meta.max_len and meta.count >= meta.max_len:
        return AppendResult(AppendStatus.QUEUE_FULL)
    seq = meta.last_seq + 1
    t.txn.put(ENTRIES, keys.entry(sess, seq), op.data)
    meta.last_seq = seq
    meta.count += 1
    meta.size += len(op.data)
    t.delta.entries += 1
    t.delta.bytes += len(op.data)
    t.dirty.add(sess)
    return AppendResult(AppendStatus.OK, seq)


def _ack(t: _Txn, op: Ack) -> int:
    """Apply one ack; 1 if it was refused for its epoch."""
    found = t.live(op.session)
    if found is None:
        return 0
    sess, meta = found
    if _stale(op.epoch, meta):
        return 1
    for seq in op.seqs:
        if not meta.acked < seq <= meta.last_seq:
            continue  # already acknowledged, or never assigned
        old = t.txn.pop(ENTRIES, keys.entry(sess, seq))
        if old is not None:
            meta.count -= 1
            meta.size -= len(old)
            t.delta.entries -= 1
            t.delta.bytes -= len(old)
            if seq == meta.acked + 1:
                t.head_moved.add(sess)
        if meta.marks:  # a completed QoS 2 delivery needs no PUBREL state
            pubrel = keys.mark(sess, MarkKind.OUTBOUND_PUBREL, seq)
            if t.txn.pop(MARKS, pubrel) is not None:
                meta.marks -= 1
    if op.delivered_upto > meta.delivered_upto:
        meta.delivered_upto = min(op.delivered_upto, meta.last_seq)
    t.dirty.add(sess)
    return 0


def _mark(t: _Txn, op: Mark) -> int:
    found = t.live(op.session)
    if found is None:
        return 0
    sess, meta = found
    if _stale(op.epoch, meta):
        return 1
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


def _batch(t: _Txn, job: WriteBatch) -> BatchResult:
    results = [_append(t, op) for op in job.appends]
    stale = sum(_ack(t, op) for op in job.acks) + sum(_mark(t, op) for op in job.marks)
    return BatchResult(job.batch_id, results, "", stale)


def _open(t: _Txn, job: OpenQueue) -> QueueState:
    try:
        sess = keys.session(*job.session)
    except keys.KeyTooLong as exc:
        return QueueState(job.session, error=str(exc))
    meta = t.meta(sess)
    if meta is not None and job.epoch < meta.epoch:
        return _state(t.txn, job.session, sess, meta,
                      error=f"stale epoch {job.epoch} < {meta.epoch}")  # fmt: skip
    created = meta is None or not meta.exists
    if created and not job.create:
        return _state(t.txn, job.session, sess, meta)
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
    t.store(sess, meta)
    return _state(t.txn, job.session, sess, meta, created=created)


def _delete(t: _Txn, job: DeleteQueue) -> QueueState:
    found = t.live(job.session)
    if found is None:
        return QueueState(job.session)
    sess, meta = found
    if _stale(job.epoch, meta):
        return _state(t.txn, job.session, sess, meta,
                      error=f"stale epoch {job.epoch} < {meta.epoch}")  # fmt: skip
    t.wipe(sess, meta)
    meta.exists = False
    meta.epoch = max(meta.epoch, job.epoch)
    t.delta.queues -= 1
    return _state(t.txn, job.session, sess, meta, deleted=True)


_HANDLERS: dict[type, Callable[[_Txn, object], Result]] = {
    WriteBatch: _batch,  # type: ignore[dict-item]
    OpenQueue: _open,  # type: ignore[dict-item]
    DeleteQueue: _delete,  # type: ignore[dict-item]
}


def _failed(job: Job, reason: str) -> Result:
    if isinstance(job, WriteBatch):
        error = [AppendResult(AppendStatus.STORE_ERROR)] * len(job.appends)
        return BatchResult(job.batch_id, error, reason)
    return QueueState(job.session, error=reason)


class QueueStore:
    """Queues over one engine. Writes must come from one thread at a time (the
    committer's); reads may come from any thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.totals = Totals()
        with engine.read() as txn:
            for _, raw in txn.scan(META, b""):
                meta = QueueMeta.decode(raw)
                if meta.exists:
                    self.totals.add(Totals(1, meta.count, meta.size))

    # -- writes ---------------------------------------------------------------------

    def write_group(self, jobs: Sequence[Job]) -> list[Result]:
        """Apply ``jobs`` in one transaction and commit (no sync); one result per job.

        Store errors become results, never exceptions: if the group fails it is retried
        job by job, so one job that does not fit cannot fail the others.
        """
        try:
            return self._commit(jobs)
        except StoreError as exc:
            if len(jobs) == 1:
                return [self._degraded(jobs[0], exc)]
        results: list[Result] = []
        for job in jobs:
            try:
                results.extend(self._commit([job]))
            except StoreError as exc:
                results.append(self._degraded(job, exc))
        return results

    def _commit(self, jobs: Sequence[Job]) -> list[Result]:
        txn = self.engine.begin_write()
        try:
            t = _Txn(txn)
            results = [_HANDLERS[type(job)](t, job) for job in jobs]
            t.flush()
        except BaseException:
            txn.abort()
            raise
        txn.commit()
        self.totals.add(t.delta)
        return results

    def _degraded(self, job: Job, exc: StoreError) -> Result:
        """A job that failed alone: keep its acks and marks if only appends are the problem."""
        reason = str(exc)
        degradable = isinstance(job, WriteBatch) and job.appends and (job.acks or job.marks)
        if not (degradable and isinstance(exc, StoreFull)):
            return _failed(job, reason)
        assert isinstance(job, WriteBatch)
        try:
            (done,) = self._commit([replace(job, appends=())])
        except StoreError:
            return _failed(job, reason)
        assert isinstance(done, BatchResult)
        done.results = [AppendResult(AppendStatus.STORE_ERROR)] * len(job.appends)
        done.error = reason
        return done

    # -- reads ----------------------------------------------------------------------

    def read(
        self, sid: SessionId, epoch: int, after_seq: int, max_entries: int = 0,
        max_bytes: int = READ_MAX_BYTES,
    ) -> ReadResult:  # fmt: skip
        """Live entries with ``seq > after_seq`` in order, at least one if any (a single
        entry may exceed ``max_bytes``); nothing for a stale epoch."""
        limit = max_entries or READ_MAX_ENTRIES
        try:
            sess = keys.session(*sid)
        except keys.KeyTooLong:
            return ReadResult([], QueueState(sid))
        with self.engine.read() as txn:
            raw = txn.get(META, sess)
            meta = QueueMeta.decode(raw) if raw is not None else None
            if meta is None or not meta.exists:
                return ReadResult([], _state(txn, sid, sess, meta))
            if _stale(epoch, meta):
                stale = _state(txn, sid, sess, meta, error=f"stale epoch {epoch} < {meta.epoch}")
                return ReadResult([], stale)
            out: list[tuple[int, bytes]] = []
            size = 0
            start, end = keys.entries_after(sess, max(after_seq, meta.acked))
            for key, value in txn.scan(ENTRIES, start, end):
                if len(out) >= limit or (out and size + len(value) > max_bytes):
                    break
                out.append((keys.seq_of(key), value))
                size += len(value)
            return ReadResult(out, _state(txn, sid, sess, meta))

    def state(self, sid: SessionId) -> QueueState:
        return self.read(sid, 0, keys.SEQ_MAX).state

    def stats(self, max_queues: int = 0) -> StoreStats:
        """Totals, and the ``max_queues`` longest queues (a full scan of queue records)."""
        totals = self.totals
        if max_queues <= 0:
            return StoreStats(totals.queues, totals.entries, totals.bytes)
        with self.engine.read() as txn:
            metas = ((k, QueueMeta.decode(v)) for k, v in txn.scan(META, b""))
            top = heapq.nlargest(
                max_queues, ((m.count, k, m) for k, m in metas if m.exists), key=lambda x: x[:2]
            )
            states = [_state(txn, keys.split_session(k), k, m) for _, k, m in top]
        return StoreStats(totals.queues, totals.entries, totals.bytes, states)
