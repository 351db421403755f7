"""The queue core: durable, ordered, epoch-fenced logs per session over an Engine.

Theory of operation (DESIGN §4 "Queue model"). A queue is a log of ``seq -> message``
per session, plus a small state record (``QueueMeta``): the epoch, the highest seq ever
assigned (``last_seq``), ``acked`` (every seq <= acked is acknowledged), live entry
count and bytes, ``delivered_upto`` and the number of QoS 2 marks.

* seq is assigned here, as ``last_seq + 1``; ``last_seq`` is stored, never lowered —
  not by acks, clean starts or deletes (a tombstone keeps it) — so seqs only grow,
  across restarts too. A queue created again after its tombstone was collected starts
  again at 1, under a higher epoch: ``(epoch, seq)`` only grows (``tombstones``).
* Acks name individual seqs; acknowledged entries are deleted at once. Because every seq
  in ``(acked, last_seq]`` is either live or acknowledged, ``acked`` is recomputed as
  "first live entry - 1" (one seek) and therefore is the highest *contiguous* ack.
* Fencing: ``Open`` sets the epoch and refuses one older than the stored epoch. Every
  other operation carrying a non-zero epoch older than the stored one is refused (an
  append gets STALE_EPOCH, an ack or mark is counted in ``stale_acks``); epoch 0 means
  unfenced (a publisher routing to the queue, expiry, inspection).
  A deleted queue leaves a tombstone with its epoch, so fencing outlives the delete;
  ``tombstones`` says when it may go (:class:`~services.msgstore.model.CollectTombstones`).
* Two limits bound live entries, the append past its limit gets QUEUE_FULL: ``max_len``
  while the session is online, ``max_offline`` for an append marked ``offline`` (the
  listener holds no connection of the session). Every Open sets both (0 = unlimited), so
  the owner states the session's limits when it takes the queue, and a session's end
  needs no call to the store: the first append after it is marked offline.
* A full store: appends get STORE_ERROR once live data fills ``APPEND_FILL_LIMIT`` of
  the engine; the rest is a reserve so that acks and deletes, which need free pages in
  LMDB too, can still drain it.

Writes come in groups (:meth:`QueueStore.write_group`): many jobs, one transaction, one
commit — the group commit. Queue records touched by the group are cached for the
transaction and written once at its end (``ops.Txn``). If the engine refuses the group
(full past the reserve, I/O error) it is retried job by job, and a batch that still does
not fit is retried without its appends; whatever cannot be written gets an error
result. Nothing here syncs: durability policy belongs to the caller (``committer.py``).

Worked example: appends A, B, C get seqs 1, 2, 3; ack(2) deletes B, acked stays 0;
ack(1) deletes A and acked becomes 2 (C is the first live entry); a restart then reads
from seq 3 and the next append gets seq 4.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import replace

from services.common.session_key import SessionKey
from services.msgstore import keys
from services.msgstore.engines.base import Engine, StoreError, StoreFull
from services.msgstore.model import (
    AppendResult,
    AppendStatus,
    BatchResult,
    Job,
    QueueMeta,
    QueueState,
    ReadResult,
    Result,
    StoreStats,
    WriteBatch,
)
from services.msgstore.ops import (
    APPEND_FILL_LIMIT,
    DBS,
    ENTRIES,
    META,
    READ_MAX_BYTES,
    READ_MAX_ENTRIES,
    Totals,
    Txn,
    apply,
    failed_result,
    queue_state,
    stale,
)

__all__ = ["APPEND_FILL_LIMIT", "DBS", "QueueStore", "failed_result"]


class QueueStore:
    """Queues over one engine. Writes must come from one thread at a time (the
    committer's); reads may come from any thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.totals = Totals()
        # tombstones on disk at open, (key prefix, epoch): their grace starts now
        self.tombstones_at_open: list[tuple[bytes, int]] = []
        with engine.read() as txn:
            for key, raw in txn.scan(META, b""):
                meta = QueueMeta.decode(raw)
                if meta.exists:
                    self.totals.add(Totals(1, meta.count, meta.size))
                else:
                    self.tombstones_at_open.append((key, meta.epoch))

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
            t = Txn(txn)
            results = [apply(t, job) for job in jobs]
            t.flush()
        except BaseException:
            txn.abort()
            raise
        txn.commit()
        self.totals.add(t.delta)
        return results

    def _degraded(self, job: Job, exc: StoreError) -> Result:
        """A job that failed alone: keep its acks and marks if only appends are the problem."""
        reason = str(exc) if isinstance(exc, StoreFull) else f"store error: {exc}"
        degradable = isinstance(job, WriteBatch) and job.appends and (job.acks or job.marks)
        if not (degradable and isinstance(exc, StoreFull)):
            return failed_result(job, reason)
        assert isinstance(job, WriteBatch)
        try:
            (done,) = self._commit([replace(job, appends=())])
        except StoreError:
            return failed_result(job, reason)
        assert isinstance(done, BatchResult)
        done.results = [AppendResult(AppendStatus.STORE_ERROR)] * len(job.appends)
        done.error = reason
        return done

    # -- reads ----------------------------------------------------------------------

    def read(
        self,
        sid: SessionKey,
        epoch: int,
        after_seq: int,
        max_entries: int = 0,
        max_bytes: int = READ_MAX_BYTES,
    ) -> ReadResult:
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
                return ReadResult([], queue_state(txn, sid, sess, meta))
            if stale(epoch, meta):
                refused = queue_state(
                    txn, sid, sess, meta, error=f"stale epoch {epoch} < {meta.epoch}"
                )
                return ReadResult([], refused)
            out: list[tuple[int, bytes]] = []
            size = 0
            more = False
            start, end = keys.entries_after(sess, max(after_seq, meta.acked))
            for key, value in txn.scan(ENTRIES, start, end):
                if len(out) >= limit or (out and size + len(value) > max_bytes):
                    more = True
                    break
                out.append((keys.seq_of(key), value))
                size += len(value)
            return ReadResult(out, queue_state(txn, sid, sess, meta), more)

    def state(self, sid: SessionKey) -> QueueState:
        return self.read(sid, 0, keys.SEQ_MAX).state

    def queues(self, after: bytes, limit: int) -> tuple[list[QueueState], bytes]:
        """At most ``limit`` existing queues in key order, strictly after the cursor
        ``after`` (b"": from the first), and the cursor of the next page (b"": no more).
        Tombstones are skipped."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        found: list[QueueState] = []
        last = b""
        with self.engine.read() as txn:
            for k, v in txn.scan(META, after + b"\x00" if after else b""):
                meta = QueueMeta.decode(v)
                if not meta.exists:
                    continue
                if len(found) == limit:
                    return found, last
                found.append(queue_state(txn, keys.split_session(k), k, meta))
                last = k
        return found, b""

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
            states = [queue_state(txn, keys.split_session(k), k, m) for _, k, m in top]
        return StoreStats(totals.queues, totals.entries, totals.bytes, states)
