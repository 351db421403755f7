from services.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AppendStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPEND_OK: _ClassVar[AppendStatus]
    APPEND_NO_QUEUE: _ClassVar[AppendStatus]
    APPEND_QUEUE_FULL: _ClassVar[AppendStatus]
    APPEND_STALE_EPOCH: _ClassVar[AppendStatus]
    APPEND_STORE_ERROR: _ClassVar[AppendStatus]

class MarkKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MARK_INBOUND_QOS2: _ClassVar[MarkKind]
    MARK_OUTBOUND_PUBREL: _ClassVar[MarkKind]
APPEND_OK: AppendStatus
APPEND_NO_QUEUE: AppendStatus
APPEND_QUEUE_FULL: AppendStatus
APPEND_STALE_EPOCH: AppendStatus
APPEND_STORE_ERROR: AppendStatus
MARK_INBOUND_QOS2: MarkKind
MARK_OUTBOUND_PUBREL: MarkKind

class OrphansRequest(_message.Message):
    __slots__ = ("primary", "replica")
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    primary: str
    replica: str
    def __init__(self, primary: _Optional[str] = ..., replica: _Optional[str] = ...) -> None: ...

class ReplicaEntry(_message.Message):
    __slots__ = ("epoch", "seq", "delivery")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    seq: int
    delivery: bytes
    def __init__(self, epoch: _Optional[int] = ..., seq: _Optional[int] = ..., delivery: _Optional[bytes] = ...) -> None: ...

class ReplicaAppend(_message.Message):
    __slots__ = ("key", "epoch", "prev_epoch", "prev_seq", "install", "entries", "acked", "max_len", "replicas", "has_state", "delivered_upto", "inbound_qos2", "outbound_pubrel", "state_epoch", "state_stamp")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREV_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PREV_SEQ_FIELD_NUMBER: _ClassVar[int]
    INSTALL_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    MAX_LEN_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    HAS_STATE_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_UPTO_FIELD_NUMBER: _ClassVar[int]
    INBOUND_QOS2_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_PUBREL_FIELD_NUMBER: _ClassVar[int]
    STATE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_STAMP_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    prev_epoch: int
    prev_seq: int
    install: bool
    entries: _containers.RepeatedCompositeFieldContainer[ReplicaEntry]
    acked: int
    max_len: int
    replicas: _containers.RepeatedScalarFieldContainer[str]
    has_state: bool
    delivered_upto: int
    inbound_qos2: _containers.RepeatedScalarFieldContainer[int]
    outbound_pubrel: _containers.RepeatedScalarFieldContainer[int]
    state_epoch: int
    state_stamp: int
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., prev_epoch: _Optional[int] = ..., prev_seq: _Optional[int] = ..., install: _Optional[bool] = ..., entries: _Optional[_Iterable[_Union[ReplicaEntry, _Mapping]]] = ..., acked: _Optional[int] = ..., max_len: _Optional[int] = ..., replicas: _Optional[_Iterable[str]] = ..., has_state: _Optional[bool] = ..., delivered_upto: _Optional[int] = ..., inbound_qos2: _Optional[_Iterable[int]] = ..., outbound_pubrel: _Optional[_Iterable[int]] = ..., state_epoch: _Optional[int] = ..., state_stamp: _Optional[int] = ...) -> None: ...

class ReplicaAppends(_message.Message):
    __slots__ = ("appends",)
    APPENDS_FIELD_NUMBER: _ClassVar[int]
    appends: _containers.RepeatedCompositeFieldContainer[ReplicaAppend]
    def __init__(self, appends: _Optional[_Iterable[_Union[ReplicaAppend, _Mapping]]] = ...) -> None: ...

class ReplicaReplies(_message.Message):
    __slots__ = ("replies",)
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[ReplicaReply]
    def __init__(self, replies: _Optional[_Iterable[_Union[ReplicaReply, _Mapping]]] = ...) -> None: ...

class ReplicaReply(_message.Message):
    __slots__ = ("ok", "epoch", "upto", "last_seq", "reason")
    OK_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    UPTO_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    epoch: int
    upto: int
    last_seq: int
    reason: str
    def __init__(self, ok: _Optional[bool] = ..., epoch: _Optional[int] = ..., upto: _Optional[int] = ..., last_seq: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class FenceRequest(_message.Message):
    __slots__ = ("key", "epoch")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class FenceReply(_message.Message):
    __slots__ = ("ok", "exists", "epoch", "last_epoch", "last_seq", "base_epoch", "base_seq", "reason", "state_epoch", "state_stamp", "replicas")
    OK_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    BASE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BASE_SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATE_STAMP_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    exists: bool
    epoch: int
    last_epoch: int
    last_seq: int
    base_epoch: int
    base_seq: int
    reason: str
    state_epoch: int
    state_stamp: int
    replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ok: _Optional[bool] = ..., exists: _Optional[bool] = ..., epoch: _Optional[int] = ..., last_epoch: _Optional[int] = ..., last_seq: _Optional[int] = ..., base_epoch: _Optional[int] = ..., base_seq: _Optional[int] = ..., reason: _Optional[str] = ..., state_epoch: _Optional[int] = ..., state_stamp: _Optional[int] = ..., replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("key", "epoch", "after_seq", "max_entries")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    after_seq: int
    max_entries: int
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., after_seq: _Optional[int] = ..., max_entries: _Optional[int] = ...) -> None: ...

class FetchReply(_message.Message):
    __slots__ = ("entries", "last_seq", "error", "delivered_upto", "inbound_qos2", "outbound_pubrel")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_UPTO_FIELD_NUMBER: _ClassVar[int]
    INBOUND_QOS2_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_PUBREL_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ReplicaEntry]
    last_seq: int
    error: str
    delivered_upto: int
    inbound_qos2: _containers.RepeatedScalarFieldContainer[int]
    outbound_pubrel: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, entries: _Optional[_Iterable[_Union[ReplicaEntry, _Mapping]]] = ..., last_seq: _Optional[int] = ..., error: _Optional[str] = ..., delivered_upto: _Optional[int] = ..., inbound_qos2: _Optional[_Iterable[int]] = ..., outbound_pubrel: _Optional[_Iterable[int]] = ...) -> None: ...

class FailoverRequest(_message.Message):
    __slots__ = ("key", "epoch", "copies", "replicas", "max_len", "max_offline_len", "uncertain")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_LEN_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFLINE_LEN_FIELD_NUMBER: _ClassVar[int]
    UNCERTAIN_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    copies: _containers.RepeatedScalarFieldContainer[str]
    replicas: _containers.RepeatedScalarFieldContainer[str]
    max_len: int
    max_offline_len: int
    uncertain: bool
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., copies: _Optional[_Iterable[str]] = ..., replicas: _Optional[_Iterable[str]] = ..., max_len: _Optional[int] = ..., max_offline_len: _Optional[int] = ..., uncertain: _Optional[bool] = ...) -> None: ...

class Append(_message.Message):
    __slots__ = ("key", "epoch", "delivery", "offline")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    delivery: _common_pb2.Delivery
    offline: bool
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., delivery: _Optional[_Union[_common_pb2.Delivery, _Mapping]] = ..., offline: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("key", "epoch", "seqs", "delivered_upto")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_UPTO_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    seqs: _containers.RepeatedScalarFieldContainer[int]
    delivered_upto: int
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., seqs: _Optional[_Iterable[int]] = ..., delivered_upto: _Optional[int] = ...) -> None: ...

class Mark(_message.Message):
    __slots__ = ("key", "epoch", "kind", "id", "set")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    kind: MarkKind
    id: int
    set: bool
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., kind: _Optional[_Union[MarkKind, str]] = ..., id: _Optional[int] = ..., set: _Optional[bool] = ...) -> None: ...

class StoreBatch(_message.Message):
    __slots__ = ("batch_id", "appends", "acks", "marks")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    APPENDS_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    appends: _containers.RepeatedCompositeFieldContainer[Append]
    acks: _containers.RepeatedCompositeFieldContainer[Ack]
    marks: _containers.RepeatedCompositeFieldContainer[Mark]
    def __init__(self, batch_id: _Optional[int] = ..., appends: _Optional[_Iterable[_Union[Append, _Mapping]]] = ..., acks: _Optional[_Iterable[_Union[Ack, _Mapping]]] = ..., marks: _Optional[_Iterable[_Union[Mark, _Mapping]]] = ...) -> None: ...

class StoreBatchResult(_message.Message):
    __slots__ = ("batch_id", "error", "stale_acks", "statuses", "seqs", "marks_error", "marks_failed")
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STALE_ACKS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    MARKS_ERROR_FIELD_NUMBER: _ClassVar[int]
    MARKS_FAILED_FIELD_NUMBER: _ClassVar[int]
    batch_id: int
    error: str
    stale_acks: int
    statuses: _containers.RepeatedScalarFieldContainer[AppendStatus]
    seqs: _containers.RepeatedScalarFieldContainer[int]
    marks_error: str
    marks_failed: _containers.RepeatedCompositeFieldContainer[_common_pb2.SessionKey]
    def __init__(self, batch_id: _Optional[int] = ..., error: _Optional[str] = ..., stale_acks: _Optional[int] = ..., statuses: _Optional[_Iterable[_Union[AppendStatus, str]]] = ..., seqs: _Optional[_Iterable[int]] = ..., marks_error: _Optional[str] = ..., marks_failed: _Optional[_Iterable[_Union[_common_pb2.SessionKey, _Mapping]]] = ...) -> None: ...

class OpenRequest(_message.Message):
    __slots__ = ("key", "epoch", "create", "clean", "max_len", "replicas", "max_offline_len")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    CLEAN_FIELD_NUMBER: _ClassVar[int]
    MAX_LEN_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFLINE_LEN_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    create: bool
    clean: bool
    max_len: int
    replicas: _containers.RepeatedScalarFieldContainer[str]
    max_offline_len: int
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., create: _Optional[bool] = ..., clean: _Optional[bool] = ..., max_len: _Optional[int] = ..., replicas: _Optional[_Iterable[str]] = ..., max_offline_len: _Optional[int] = ...) -> None: ...

class QueueState(_message.Message):
    __slots__ = ("key", "exists", "epoch", "last_seq", "acked", "count", "delivered_upto", "inbound_qos2", "outbound_pubrel", "error", "replicas", "committed", "held")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_UPTO_FIELD_NUMBER: _ClassVar[int]
    INBOUND_QOS2_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_PUBREL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    exists: bool
    epoch: int
    last_seq: int
    acked: int
    count: int
    delivered_upto: int
    inbound_qos2: _containers.RepeatedScalarFieldContainer[int]
    outbound_pubrel: _containers.RepeatedScalarFieldContainer[int]
    error: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    committed: int
    held: bool
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., exists: _Optional[bool] = ..., epoch: _Optional[int] = ..., last_seq: _Optional[int] = ..., acked: _Optional[int] = ..., count: _Optional[int] = ..., delivered_upto: _Optional[int] = ..., inbound_qos2: _Optional[_Iterable[int]] = ..., outbound_pubrel: _Optional[_Iterable[int]] = ..., error: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ..., committed: _Optional[int] = ..., held: _Optional[bool] = ...) -> None: ...

class ReadRequest(_message.Message):
    __slots__ = ("key", "epoch", "after_seq", "max_entries")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    after_seq: int
    max_entries: int
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., after_seq: _Optional[int] = ..., max_entries: _Optional[int] = ...) -> None: ...

class QueueEntry(_message.Message):
    __slots__ = ("seq", "delivery")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    seq: int
    delivery: _common_pb2.Delivery
    def __init__(self, seq: _Optional[int] = ..., delivery: _Optional[_Union[_common_pb2.Delivery, _Mapping]] = ...) -> None: ...

class ReadReply(_message.Message):
    __slots__ = ("entries", "state", "more")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[QueueEntry]
    state: QueueState
    more: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[QueueEntry, _Mapping]]] = ..., state: _Optional[_Union[QueueState, _Mapping]] = ..., more: _Optional[bool] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("key", "epoch", "reason")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    reason: str
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ("max_queues",)
    MAX_QUEUES_FIELD_NUMBER: _ClassVar[int]
    max_queues: int
    def __init__(self, max_queues: _Optional[int] = ...) -> None: ...

class StatsReply(_message.Message):
    __slots__ = ("queues", "entries", "bytes", "top")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    queues: int
    entries: int
    bytes: int
    top: _containers.RepeatedCompositeFieldContainer[QueueState]
    def __init__(self, queues: _Optional[int] = ..., entries: _Optional[int] = ..., bytes: _Optional[int] = ..., top: _Optional[_Iterable[_Union[QueueState, _Mapping]]] = ...) -> None: ...

class QueuesRequest(_message.Message):
    __slots__ = ("after", "limit")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after: bytes
    limit: int
    def __init__(self, after: _Optional[bytes] = ..., limit: _Optional[int] = ...) -> None: ...

class QueuesReply(_message.Message):
    __slots__ = ("queues", "next")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueState]
    next: bytes
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueState, _Mapping]]] = ..., next: _Optional[bytes] = ...) -> None: ...
