"""Protobuf <-> queue core conversions of the store's per-message path (compiled: see
setup.py; the servicer, whose Stream is an async generator, stays interpreted).

Messages are stored as serialized ``Delivery`` bytes and parsed again only on Read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.common import log
from services.common.session_key import SessionKey
from services.msgstore import wire
from services.msgstore.model import (
    Ack,
    Append,
    AppendStatus,
    BatchResult,
    Mark,
    MarkKind,
    QueueState,
    WriteBatch,
)
from services.pb import common_pb2, msgstore_pb2

_tuple_new = tuple.__new__


def session_key(key: common_pb2.SessionKey) -> SessionKey:
    return (key.mountpoint, key.client_id)


def batch_from_pb(
    batch: msgstore_pb2.StoreBatch, data: bytes, logged: list[tuple[str, int]] | None = None
) -> WriteBatch:
    """``batch`` parsed from ``data`` (which validated it), as the queue core's batch: its
    acks and marks read from ``batch``, its appends from ``data`` by ``wire`` (see there
    why). Raises ValueError for a mark kind this store does not know. With ``logged``,
    the ``(msg_id, qos)`` of each append is added to it for ``message.queued``."""
    appends: list[Append] = []
    for a in wire.appends(data, logged is not None):  # one per subscriber of a publish
        # Append(...) without the NamedTuple's Python-level __new__
        appends.append(
            _tuple_new(Append, ((a.mountpoint, a.client_id), a.epoch, a.delivery, a.offline))
        )
        if logged is not None:
            logged.append((a.msg_id, a.qos))
    return WriteBatch(
        batch.batch_id,
        tuple(appends),
        tuple(
            Ack(session_key(a.key), a.epoch, tuple(a.seqs), a.delivered_upto) for a in batch.acks
        ),
        tuple(
            Mark(session_key(m.key), m.epoch, MarkKind(m.kind), m.id, m.set) for m in batch.marks
        ),
    )


def result_to_pb(result: BatchResult) -> msgstore_pb2.StoreBatchResult:
    reply = msgstore_pb2.StoreBatchResult(
        batch_id=result.batch_id,
        error=result.error,
        stale_acks=result.stale_acks,
        marks_error=result.marks_error,
    )
    if result.marks_error and result.marks_failed:
        reply.marks_failed.extend(
            common_pb2.SessionKey(mountpoint=mp, client_id=cid) for mp, cid in result.marks_failed
        )
    statuses: list[Any] = []  # model.AppendStatus: the numbers of msgstore.AppendStatus
    seqs: list[int] = []
    for status, seq in result.results:
        statuses.append(status)
        seqs.append(seq)
    reply.statuses.extend(statuses)
    reply.seqs.extend(seqs)
    return reply


def state_to_pb(state: QueueState) -> msgstore_pb2.QueueState:
    mountpoint, client_id = state.session
    return msgstore_pb2.QueueState(
        key=common_pb2.SessionKey(mountpoint=mountpoint, client_id=client_id),
        exists=state.exists,
        epoch=state.epoch,
        last_seq=state.last_seq,
        acked=state.acked,
        count=state.count,
        delivered_upto=state.delivered_upto,
        inbound_qos2=state.inbound_qos2,
        outbound_pubrel=state.outbound_pubrel,
        error=state.error,
    )


_emit_queued = log.emitter("message.queued")  # one line per append: compiled, see log.emitter
_OK = AppendStatus.OK


def log_queued(
    appends: Sequence[Append], logged: list[tuple[str, int]], result: BatchResult
) -> None:
    for (sid, epoch, _data, _offline), (msg_id, qos), (status, seq) in zip(
        appends, logged, result.results, strict=True
    ):
        if status == _OK:
            _emit_queued(msg_id, sid[1], sid[0], seq, epoch, qos)
