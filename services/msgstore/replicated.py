"""Replicated queues in the store: positions kept with the entries, a copy's writes.

Theory of operation (DESIGN §4, "Queue replication"; the rules are the pure core's,
:mod:`services.msgstore.replication`). A replicated queue is an ordinary queue (its meta
record and ``seq -> message`` entries) plus a record in the ``repl`` database: the
replica set, and the positions of its entries as runs ``(epoch, first seq)`` above a
``base`` (the last position dropped as acknowledged). On the primary, entries are
appended by the usual path at the queue's epoch, so a run starts at each ``Open`` that
raises the epoch; on a replica, :func:`replica_write` takes the primary's appends by the
log's rules. Both ends read their copy as a :class:`ReplicaLog`:

* the base is the queue's ``acked`` index on the primary (a client acknowledgement
  deletes entries there); positions at or below it are garbage;
* an entry the client acknowledged out of order (above ``acked``) keeps its position
  but has no message: it travels as empty data and a replica stores nothing for it.

A queue that is not replicated has no record and pays nothing for any of this.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.msgstore import keys
from services.msgstore.engines.base import WriteTxn
from services.msgstore.model import (
    FenceQueue,
    MarkKind,
    OpenQueue,
    QueueMeta,
    ReplicaState,
    ReplicaWrite,
)
from services.msgstore.replication.log import Append, Appended, Position, ReplicaLog

META, ENTRIES, MARKS, REPL = "meta", "entries", "marks", "repl"  # ``ops.DBS``
MARK_INBOUND, MARK_PUBREL = int(MarkKind.INBOUND_QOS2), int(MarkKind.OUTBOUND_PUBREL)


class Txn(Protocol):
    """What these functions use of ``ops.Txn`` (which imports this module)."""

    txn: WriteTxn
    delta: Any
    dirty: set[bytes]

    def meta(self, sess: bytes) -> QueueMeta | None: ...

    def store(self, sess: bytes, meta: QueueMeta) -> None: ...


@dataclass(slots=True)
class ReplRecord:
    replicas: tuple[str, ...] = ()
    base: Position = (0, 0)
    runs: list[Position] = field(default_factory=list)  # (epoch, first seq), ascending
    stamp: Position = (0, 0)  # the delivery state's version: (epoch, ns) at its primary

    def encode(self) -> bytes:
        return json.dumps(
            {
                "r": list(self.replicas),
                "b": list(self.base),
                "u": [list(r) for r in self.runs],
                "s": list(self.stamp),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ReplRecord:
        d = json.loads(raw)
        stamp = d.get("s", (0, 0))
        return cls(
            tuple(d["r"]),
            (d["b"][0], d["b"][1]),
            [(e, s) for e, s in d["u"]],
            (stamp[0], stamp[1]),
        )


def load(t: Txn, sess: bytes) -> ReplRecord | None:
    raw = t.txn.get(REPL, sess)
    return ReplRecord.decode(raw) if raw is not None else None


def save(t: Txn, sess: bytes, rec: ReplRecord) -> None:
    t.txn.put(REPL, sess, rec.encode())


def epoch_at(rec: ReplRecord, seq: int) -> int:
    """The epoch of the entry at ``seq`` (the base's, or the run holding it)."""
    if seq <= rec.base[1] or not rec.runs:
        return rec.base[0]
    i = bisect.bisect_right(rec.runs, seq, key=lambda r: r[1]) - 1
    return rec.runs[i][0] if i >= 0 else rec.base[0]


def as_log(meta: QueueMeta, rec: ReplRecord, base_seq: int | None = None) -> ReplicaLog:
    """The copy's positions, with the base at ``base_seq`` (default: the record's)."""
    last = meta.last_seq
    b = rec.base[1] if base_seq is None else max(base_seq, rec.base[1])
    b = min(b, last)
    base = (epoch_at(rec, b), b)
    runs: list[Position] = []
    for epoch, first in rec.runs:
        if first > last:
            break
        if first <= b:
            first = b + 1
            if first > last:
                continue
            runs = [(epoch, first)] if epoch_at(rec, first) == epoch else runs
            continue
        if runs and runs[-1][0] == epoch:
            continue
        runs.append((epoch, first))
    if last > b and (not runs or runs[0][1] != b + 1):
        runs.insert(0, (epoch_at(rec, b + 1), b + 1))
    return ReplicaLog(meta.epoch, base, runs, last)


def _record_of(log: ReplicaLog, replicas: tuple[str, ...]) -> ReplRecord:
    return ReplRecord(replicas, log.base, list(log.runs))


def on_open(t: Txn, sess: bytes, meta: QueueMeta, job: OpenQueue, wiped: bool) -> None:
    """The queue was opened (at ``job.epoch``): keep its record, if it is replicated
    (``job.replicas``; none named = the set stays as it is). Entries appended from now
    on are of the new epoch: a run starts after the last."""
    rec = load(t, sess)
    replicas = job.replicas or (rec.replicas if rec is not None else ())
    if len(replicas) < 2:
        if rec is not None:
            t.txn.pop(REPL, sess)  # no longer replicated
        meta.replicated = False
        return
    meta.replicated = True
    if rec is None:
        # A new queue starts at the origin, as a new copy does; one whose seqs continue
        # (revived, or replicated from now on) has a base no copy holds: installed.
        rec = ReplRecord(base=(0, 0) if meta.last_seq == 0 else (meta.epoch, meta.last_seq))
    elif wiped:
        # A clean start: a new log from here. Its base is a position of the new epoch,
        # which no copy can hold, so every replica is given it whole (an install).
        rec = ReplRecord(base=(meta.epoch, meta.last_seq))
    rec.replicas = replicas
    nxt = meta.last_seq + 1
    if rec.runs and rec.runs[-1][1] == nxt:
        rec.runs[-1] = (meta.epoch, nxt)  # no entry of the earlier epoch was appended
    elif not rec.runs or rec.runs[-1][0] != meta.epoch:
        rec.runs.append((meta.epoch, nxt))
    save(t, sess, rec)


def on_delete(t: Txn, sess: bytes) -> None:
    t.txn.pop(REPL, sess)


def replica_write(t: Txn, job: ReplicaWrite) -> ReplicaState:
    """Take the primary's append into this node's copy, by the log's rules."""
    try:
        sess = keys.session(*job.session)
    except keys.KeyTooLong as exc:
        return ReplicaState(job.session, False, reason=str(exc))
    meta = t.meta(sess)
    if meta is not None and job.epoch < meta.epoch:
        return _state(job.session, meta, load(t, sess), False, f"epoch {job.epoch} < {meta.epoch}")
    if meta is None or not meta.exists:
        # The first append of this copy (or one after a delete): seqs continue above
        # whatever the tombstone says was assigned here before.
        last = 0 if meta is None else meta.last_seq
        epoch = 0 if meta is None else meta.epoch
        meta = QueueMeta(epoch=epoch, last_seq=last, acked=last, delivered_upto=last)
        meta.replicated = True
        t.delta.queues += 1
        rec = ReplRecord(base=(0, last))
    else:
        rec = load(t, sess) or ReplRecord(base=(meta.epoch, meta.acked))
    log = as_log(meta, rec, meta.acked)
    before = log.last()[1]
    req = Append(job.epoch, job.prev, tuple((e, s) for e, s, _ in job.entries), install=job.install)
    reply = log.append(req)
    meta.epoch = log.epoch
    meta.max_len = job.max_len
    meta.replica = True
    if isinstance(reply, Appended):
        # What the log no longer holds goes: below its base (an install may have moved
        # it) and past its end (a replaced suffix); held positions keep their messages.
        _drop(t, sess, meta, 0, log.base[1])
        _drop(t, sess, meta, log.last()[1], before)
        for epoch, seq, data in job.entries:
            if log.at(seq) == (epoch, seq) and seq > log.base[1]:
                if seq > before:
                    _put_new(t, sess, meta, seq, data)
                else:
                    _put(t, sess, meta, seq, data)
        meta.last_seq = log.last()[1]
        # Garbage only up to what this append proved the copy holds of the primary's log.
        upto = min(job.acked, reply.upto, meta.last_seq)
        if upto > log.base[1]:
            _drop(t, sess, meta, log.base[1], upto)
            log.compact(upto)
        meta.acked = log.base[1]
        meta.delivered_upto = max(meta.acked, min(meta.delivered_upto, meta.last_seq))
        if job.state is not None and job.stamp >= rec.stamp:
            _set_state(t, sess, meta, job.state)
            rec.stamp = job.stamp
    t.store(sess, meta)
    kept = _record_of(log, job.replicas or rec.replicas)
    kept.stamp = rec.stamp
    save(t, sess, kept)
    if isinstance(reply, Appended):
        return ReplicaState(
            job.session, True, True, meta.epoch, reply.upto, log.last(), log.base, "", rec.stamp
        )
    return ReplicaState(
        job.session, False, True, meta.epoch, reply.last_seq, log.last(), log.base, reply.reason
    )


def fence(t: Txn, job: FenceQueue) -> ReplicaState:
    """A failover's read of this copy at ``job.epoch``."""
    try:
        sess = keys.session(*job.session)
    except keys.KeyTooLong as exc:
        return ReplicaState(job.session, False, reason=str(exc))
    meta = t.meta(sess)
    if meta is None:
        # No copy here yet (an install still on its way, say): the fence is kept all
        # the same, as a tombstone, or the old primary's next append would create the
        # copy at its older epoch and count it towards a write quorum the new primary
        # never sees.
        t.store(sess, QueueMeta(exists=False, epoch=job.epoch, replica=True))
        return ReplicaState(job.session, True, False, job.epoch)
    rec = load(t, sess)
    if job.epoch < meta.epoch:
        return _state(job.session, meta, rec, False, f"epoch {job.epoch} < {meta.epoch}")
    meta.epoch = job.epoch
    meta.replica = True  # until an Open here makes it the primary
    t.store(sess, meta)
    return _state(job.session, meta, rec, True, "")


def _state(
    sid: tuple[str, str], meta: QueueMeta, rec: ReplRecord | None, ok: bool, reason: str
) -> ReplicaState:
    if not meta.exists:
        return ReplicaState(sid, ok, False, meta.epoch, reason=reason)
    if rec is None:  # a queue that was never replicated: every entry is of its epoch
        last = (meta.epoch, meta.last_seq) if meta.last_seq > meta.acked else (0, meta.acked)
        return ReplicaState(sid, ok, True, meta.epoch, meta.last_seq, last, (0, meta.acked), reason)
    log = as_log(meta, rec, meta.acked)
    return ReplicaState(
        sid, ok, True, meta.epoch, meta.last_seq, log.last(), log.base, reason, rec.stamp,
        rec.replicas,
    )  # fmt: skip


def _put(t: Txn, sess: bytes, meta: QueueMeta, seq: int, data: bytes) -> None:
    key = keys.entry(sess, seq)
    old = t.txn.pop(ENTRIES, key)
    if old is not None:
        meta.count -= 1
        meta.size -= len(old)
        t.delta.entries -= 1
        t.delta.bytes -= len(old)
    if data:
        t.txn.put(ENTRIES, key, data)
        meta.count += 1
        meta.size += len(data)
        t.delta.entries += 1
        t.delta.bytes += len(data)
    t.dirty.add(sess)


def _put_new(t: Txn, sess: bytes, meta: QueueMeta, seq: int, data: bytes) -> None:
    """``_put`` past the copy's last seq, where no entry is held: nothing to replace."""
    if data:
        t.txn.put(ENTRIES, keys.entry(sess, seq), data)
        meta.count += 1
        meta.size += len(data)
        t.delta.entries += 1
        t.delta.bytes += len(data)
    t.dirty.add(sess)


def _set_state(
    t: Txn, sess: bytes, meta: QueueMeta, state: tuple[int, tuple[int, ...], tuple[int, ...]]
) -> None:
    """The copy's delivery state becomes the primary's: what was sent to the client, and
    the QoS 2 marks (so exactly once holds across a failover)."""
    delivered, inbound, pubrel = state
    meta.delivered_upto = min(delivered, meta.last_seq)
    if meta.marks:
        t.txn.delete_range(MARKS, sess, keys.prefix_end(sess))
    meta.marks = 0
    for kind, idents in ((MARK_INBOUND, inbound), (MARK_PUBREL, pubrel)):
        for ident in idents:
            t.txn.put(MARKS, keys.mark(sess, kind, ident), b"")
            meta.marks += 1
    t.dirty.add(sess)


def _drop(t: Txn, sess: bytes, meta: QueueMeta, after: int, upto: int) -> None:
    """Delete the entries in ``(after, upto]`` (a replaced suffix, or garbage)."""
    if upto <= after:
        return
    start, end = keys.entry(sess, after + 1), keys.entry(sess, upto + 1)
    gone = [(key, len(value)) for key, value in t.txn.scan(ENTRIES, start, end)]
    for key, size in gone:
        t.txn.pop(ENTRIES, key)
        meta.count -= 1
        meta.size -= size
        t.delta.entries -= 1
        t.delta.bytes -= size
    t.dirty.add(sess)
