from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetaBatch(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, records: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Digest(_message.Message):
    __slots__ = ("buckets",)
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, buckets: _Optional[_Iterable[int]] = ...) -> None: ...

class ExchangeReply(_message.Message):
    __slots__ = ("buckets", "batch", "truncated")
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedScalarFieldContainer[int]
    batch: MetaBatch
    truncated: bool
    def __init__(self, buckets: _Optional[_Iterable[int]] = ..., batch: _Optional[_Union[MetaBatch, _Mapping]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class PushReply(_message.Message):
    __slots__ = ("merged",)
    MERGED_FIELD_NUMBER: _ClassVar[int]
    merged: int
    def __init__(self, merged: _Optional[int] = ...) -> None: ...

class Rumour(_message.Message):
    __slots__ = ("state", "node", "incarnation", "by")
    STATE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    state: int
    node: str
    incarnation: int
    by: str
    def __init__(self, state: _Optional[int] = ..., node: _Optional[str] = ..., incarnation: _Optional[int] = ..., by: _Optional[str] = ...) -> None: ...

class DetectorMessage(_message.Message):
    __slots__ = ("kind", "src", "incarnation", "seq", "target", "rumours")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    RUMOURS_FIELD_NUMBER: _ClassVar[int]
    kind: int
    src: str
    incarnation: int
    seq: int
    target: str
    rumours: _containers.RepeatedCompositeFieldContainer[Rumour]
    def __init__(self, kind: _Optional[int] = ..., src: _Optional[str] = ..., incarnation: _Optional[int] = ..., seq: _Optional[int] = ..., target: _Optional[str] = ..., rumours: _Optional[_Iterable[_Union[Rumour, _Mapping]]] = ...) -> None: ...

class MemberRecord(_message.Message):
    __slots__ = ("node", "version", "status")
    NODE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    node: str
    version: int
    status: int
    def __init__(self, node: _Optional[str] = ..., version: _Optional[int] = ..., status: _Optional[int] = ...) -> None: ...

class Address(_message.Message):
    __slots__ = ("node", "address", "incarnation")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    incarnation: int
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., incarnation: _Optional[int] = ...) -> None: ...

class MemberState(_message.Message):
    __slots__ = ("records", "addresses")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[MemberRecord]
    addresses: _containers.RepeatedCompositeFieldContainer[Address]
    def __init__(self, records: _Optional[_Iterable[_Union[MemberRecord, _Mapping]]] = ..., addresses: _Optional[_Iterable[_Union[Address, _Mapping]]] = ...) -> None: ...

class Envelope(_message.Message):
    __slots__ = ("detector", "members", "meta")
    DETECTOR_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    detector: DetectorMessage
    members: MemberState
    meta: MetaBatch
    def __init__(self, detector: _Optional[_Union[DetectorMessage, _Mapping]] = ..., members: _Optional[_Union[MemberState, _Mapping]] = ..., meta: _Optional[_Union[MetaBatch, _Mapping]] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("node", "address", "incarnation", "state")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    incarnation: int
    state: MemberState
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., incarnation: _Optional[int] = ..., state: _Optional[_Union[MemberState, _Mapping]] = ...) -> None: ...

class JoinReply(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: MemberState
    def __init__(self, state: _Optional[_Union[MemberState, _Mapping]] = ...) -> None: ...
