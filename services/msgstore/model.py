"""Plain data of the queue core: operations in, results out, the stored queue record.

These mirror ``msgstore.proto`` without depending on protobuf, so the core and its tests
need no generated code; ``servicer.py`` translates. Message bodies are opaque bytes
(the servicer stores a serialized ``Delivery``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from services.common.session_key import SessionKey


class AppendStatus(IntEnum):
    """Same numbers as ``msgstore.AppendStatus``."""

    OK = 0
    NO_QUEUE = 1
    QUEUE_FULL = 2
    STALE_EPOCH = 3
    STORE_ERROR = 4


class MarkKind(IntEnum):
    """Same numbers as ``msgstore.MarkKind``."""

    INBOUND_QOS2 = 0
    OUTBOUND_PUBREL = 1


# Operations are NamedTuples: thousands are made per group commit, and a tuple is
# several times cheaper to build than a frozen dataclass.


class Append(NamedTuple):
    session: SessionKey
    epoch: int  # 0 = unfenced
    data: bytes
    offline: bool = False  # no connection of the session is live: the offline limit applies


class Ack(NamedTuple):
    session: SessionKey
    epoch: int
    seqs: tuple[int, ...]
    delivered_upto: int = 0


class Mark(NamedTuple):
    session: SessionKey
    epoch: int
    kind: MarkKind
    ident: int
    set: bool


@dataclass(slots=True, init=False)  # __init__ written out: see BatchResult
class WriteBatch:
    """One ``StoreBatch``: applied in one transaction, answered by one :class:`BatchResult`.
    ``ops`` (what ``msgstore.max_batch`` counts) counts each acknowledged seq."""

    batch_id: int
    appends: tuple[Append, ...]
    acks: tuple[Ack, ...]
    marks: tuple[Mark, ...]
    ops: int = field(init=False)  # derived: ``dataclasses.replace`` leaves it out

    def __init__(
        self,
        batch_id: int,
        appends: tuple[Append, ...] = (),
        acks: tuple[Ack, ...] = (),
        marks: tuple[Mark, ...] = (),
    ) -> None:
        self.batch_id = batch_id
        self.appends = appends
        self.acks = acks
        self.marks = marks
        acked = sum(max(1, len(a.seqs)) for a in acks)
        self.ops = len(appends) + acked + len(marks)


@dataclass(frozen=True, slots=True)
class OpenQueue:
    session: SessionKey
    epoch: int
    create: bool = False
    clean: bool = False
    max_len: int = 0  # while the session is online; 0 = unlimited
    # A replicated queue's replica set, this node (the primary) first; () = not replicated.
    replicas: tuple[str, ...] = ()
    max_offline: int = 0  # for appends made while it is offline; 0 = unlimited

    ops = 1


@dataclass(frozen=True, slots=True)
class DeleteQueue:
    session: SessionKey
    epoch: int  # 0 = unfenced (expiry, admin)
    reason: str = ""
    # A replicated queue's primary dropped it: only a replica's copy of that epoch or
    # older goes, never a queue this node serves as primary (a newer one failed over).
    replica_only: bool = False

    ops = 1


@dataclass(frozen=True, slots=True)
class CollectTombstones:
    """Remove these tombstones, each only if it is still a tombstone of that epoch (see
    ``tombstones``): ``(queue key prefix, epoch)`` pairs."""

    graves: tuple[tuple[bytes, int], ...]

    @property
    def ops(self) -> int:
        return len(self.graves)


@dataclass(frozen=True, slots=True)
class ReplicaWrite:
    """A replicated queue's primary feeds this node's copy (``replicated``): ``entries``
    are ``(epoch, seq, data)`` after position ``prev``; empty data is a position whose
    message the client already acknowledged. ``install``: drop the copy first."""

    session: SessionKey
    epoch: int
    prev: tuple[int, int]
    entries: tuple[tuple[int, int, bytes], ...]
    install: bool = False
    acked: int = 0
    max_len: int = 0
    replicas: tuple[str, ...] = ()
    # The primary's delivery state, when it changed: (delivered_upto, inbound QoS 2
    # packet ids, outbound PUBREL seqs); the copy's marks become exactly these.
    state: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
    stamp: tuple[int, int] = (0, 0)  # the state's version: (epoch, ns) at the primary

    @property
    def ops(self) -> int:
        return max(1, len(self.entries))


@dataclass(frozen=True, slots=True)
class FenceQueue:
    """A failover at ``epoch`` reads this copy: it refuses older primaries from now on."""

    session: SessionKey
    epoch: int

    ops = 1


Job = WriteBatch | OpenQueue | DeleteQueue | CollectTombstones | ReplicaWrite | FenceQueue


class AppendResult(NamedTuple):
    status: AppendStatus
    seq: int = 0


# Per batch, compiled (setup.py): the __init__ is written out because the one dataclasses
# generates stays interpreted, several times slower than a compiled one.
@dataclass(slots=True, init=False)
class BatchResult:
    batch_id: int
    results: list[AppendResult]
    error: str = ""
    stale_acks: int = 0
    # Why the batch's QoS 2 marks may not be durable where they must be ("" = they are).
    marks_error: str = ""
    # The replicated queues this batch appended to or marked: each must be led from here
    # (a primary in the replicator), or what was written is on this copy alone.
    replicated: set[SessionKey] | None = None
    # The sessions ``marks_error`` is about (None: every mark of the batch).
    marks_failed: set[SessionKey] | None = None

    def __init__(
        self,
        batch_id: int,
        results: list[AppendResult],
        error: str = "",
        stale_acks: int = 0,
        marks_error: str = "",
        replicated: set[SessionKey] | None = None,
        marks_failed: set[SessionKey] | None = None,
    ) -> None:
        self.batch_id = batch_id
        self.results = results
        self.error = error
        self.stale_acks = stale_acks
        self.marks_error = marks_error
        self.replicated = replicated
        self.marks_failed = marks_failed

    def marks_failed_for(self, sessions: set[SessionKey]) -> None:
        """``sessions``' marks are not on msgstore.write_quorum copies. Narrows nothing:
        a batch whose every mark failed stays so."""
        if not self.marks_error:
            self.marks_error = "QoS 2 state not on msgstore.write_quorum copies in time"
            self.marks_failed = set(sessions)
        elif self.marks_failed is not None:
            self.marks_failed |= sessions


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue as ``QueueState`` shows it; ``created``/``deleted`` say what this call did."""

    session: SessionKey
    exists: bool = False
    epoch: int = 0
    last_seq: int = 0
    acked: int = 0
    count: int = 0
    size: int = 0  # bytes of live entries
    delivered_upto: int = 0
    max_len: int = 0
    max_offline: int = 0
    inbound_qos2: tuple[int, ...] = ()
    outbound_pubrel: tuple[int, ...] = ()
    error: str = ""
    created: bool = False
    deleted: bool = False
    store_error: bool = False  # ``error`` is a store failure, not a refusal


@dataclass(frozen=True, slots=True)
class Collected:
    """What a :class:`CollectTombstones` did: how many records went, or why none did."""

    count: int
    error: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """What a :class:`ReplicaWrite` or :class:`FenceQueue` did to a copy: ``ok`` False
    when it was refused (``reason``). ``upto``: the copy holds the primary's log up to
    there; ``last`` and ``base``: the positions of its last entry and of the last one
    dropped as acknowledged."""

    session: SessionKey
    ok: bool
    exists: bool = False
    epoch: int = 0
    upto: int = 0
    last: tuple[int, int] = (0, 0)
    base: tuple[int, int] = (0, 0)
    reason: str = ""
    stamp: tuple[int, int] = (0, 0)  # the version of the delivery state it holds
    # The set the copy's primary fed it as, at its last append: a failover whose
    # request names fewer copies reads this set too (``Failover``).
    replicas: tuple[str, ...] = ()


Result = BatchResult | QueueState | Collected | ReplicaState


@dataclass(frozen=True, slots=True)
class ReadResult:
    entries: list[tuple[int, bytes]]
    state: QueueState
    more: bool = False  # live entries follow the last one (the page was cut)


@dataclass(frozen=True, slots=True)
class StoreStats:
    queues: int
    entries: int
    bytes: int
    top: list[QueueState] = field(default_factory=list)


_META = struct.Struct(">BQQQQQQIII")
# Records written before queues had an offline limit of their own: their one limit
# serves both (it was the offline one while the session was offline).
_META_V1 = struct.Struct(">BQQQQQQII")


@dataclass(slots=True)
class QueueMeta:
    """The stored record of one queue. A deleted queue keeps a tombstone
    (``exists=False``) with its epoch and last seq, so a writer fenced out before the
    delete stays fenced out and a re-created queue never reuses a sequence number."""

    exists: bool = True
    epoch: int = 0
    last_seq: int = 0
    acked: int = 0
    count: int = 0
    size: int = 0  # bytes of live entries
    delivered_upto: int = 0
    max_len: int = 0
    marks: int = 0
    replicated: bool = False  # it has a record in ``repl`` (services.msgstore.replicated)
    # A copy another node's primary feeds: this node's own appends are refused (a stale
    # route to the session's old node must not write into it).
    replica: bool = False
    max_offline: int = 0  # the limit for appends made while the session is offline

    def encode(self) -> bytes:
        return _META.pack(
            int(self.exists) | (2 if self.replicated else 0) | (4 if self.replica else 0),
            self.epoch,
            self.last_seq,
            self.acked,
            self.count,
            self.size,
            self.delivered_upto,
            self.max_len,
            self.marks,
            self.max_offline,
        )

    @classmethod
    def decode(cls, raw: bytes) -> QueueMeta:
        if len(raw) == _META_V1.size:
            flags, epoch, last, acked, count, size, delivered, max_len, marks = _META_V1.unpack(raw)
            max_offline = max_len
        else:
            flags, epoch, last, acked, count, size, delivered, max_len, marks, max_offline = (
                _META.unpack(raw)
            )
        return cls(
            bool(flags & 1), epoch, last, acked, count, size, delivered, max_len, marks,
            bool(flags & 2), bool(flags & 4), max_offline,
        )  # fmt: skip
