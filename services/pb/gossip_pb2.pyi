from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaveClusterRequest(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: str
    def __init__(self, node: _Optional[str] = ...) -> None: ...

class JoinClusterRequest(_message.Message):
    __slots__ = ("seed",)
    SEED_FIELD_NUMBER: _ClassVar[int]
    seed: str
    def __init__(self, seed: _Optional[str] = ...) -> None: ...

class JoinClusterReply(_message.Message):
    __slots__ = ("ok", "reason", "members")
    OK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    reason: str
    members: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ok: _Optional[bool] = ..., reason: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ...) -> None: ...

class WatchViewRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterView(_message.Message):
    __slots__ = ("self_node", "members", "up", "majority", "joined")
    SELF_NODE_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    UP_FIELD_NUMBER: _ClassVar[int]
    MAJORITY_FIELD_NUMBER: _ClassVar[int]
    JOINED_FIELD_NUMBER: _ClassVar[int]
    self_node: str
    members: _containers.RepeatedScalarFieldContainer[str]
    up: _containers.RepeatedScalarFieldContainer[str]
    majority: bool
    joined: bool
    def __init__(self, self_node: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ..., up: _Optional[_Iterable[str]] = ..., majority: _Optional[bool] = ..., joined: _Optional[bool] = ...) -> None: ...

class MetaOp(_message.Message):
    __slots__ = ("prefix", "key", "value", "delete")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    key: bytes
    value: bytes
    delete: bool
    def __init__(self, prefix: _Optional[str] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., delete: _Optional[bool] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("ops",)
    OPS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[MetaOp]
    def __init__(self, ops: _Optional[_Iterable[_Union[MetaOp, _Mapping]]] = ...) -> None: ...

class PutReply(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: int
    def __init__(self, applied: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("prefix", "key")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    key: bytes
    def __init__(self, prefix: _Optional[str] = ..., key: _Optional[bytes] = ...) -> None: ...

class GetReply(_message.Message):
    __slots__ = ("found", "value")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    found: bool
    value: bytes
    def __init__(self, found: _Optional[bool] = ..., value: _Optional[bytes] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("prefixes",)
    PREFIXES_FIELD_NUMBER: _ClassVar[int]
    prefixes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prefixes: _Optional[_Iterable[str]] = ...) -> None: ...

class MetaUpdate(_message.Message):
    __slots__ = ("prefix", "key", "value", "deleted")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    key: bytes
    value: bytes
    deleted: bool
    def __init__(self, prefix: _Optional[str] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., deleted: _Optional[bool] = ...) -> None: ...

class WatchEvent(_message.Message):
    __slots__ = ("updates", "snapshot_done")
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_DONE_FIELD_NUMBER: _ClassVar[int]
    updates: _containers.RepeatedCompositeFieldContainer[MetaUpdate]
    snapshot_done: bool
    def __init__(self, updates: _Optional[_Iterable[_Union[MetaUpdate, _Mapping]]] = ..., snapshot_done: _Optional[bool] = ...) -> None: ...

class SubEntry(_message.Message):
    __slots__ = ("filter", "qos", "no_local", "retain_as_published", "retain_handling", "sub_id")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    NO_LOCAL_FIELD_NUMBER: _ClassVar[int]
    RETAIN_AS_PUBLISHED_FIELD_NUMBER: _ClassVar[int]
    RETAIN_HANDLING_FIELD_NUMBER: _ClassVar[int]
    SUB_ID_FIELD_NUMBER: _ClassVar[int]
    filter: str
    qos: int
    no_local: bool
    retain_as_published: bool
    retain_handling: int
    sub_id: int
    def __init__(self, filter: _Optional[str] = ..., qos: _Optional[int] = ..., no_local: _Optional[bool] = ..., retain_as_published: _Optional[bool] = ..., retain_handling: _Optional[int] = ..., sub_id: _Optional[int] = ...) -> None: ...

class SubscriberRecord(_message.Message):
    __slots__ = ("node", "subs", "persistent")
    NODE_FIELD_NUMBER: _ClassVar[int]
    SUBS_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_FIELD_NUMBER: _ClassVar[int]
    node: str
    subs: _containers.RepeatedCompositeFieldContainer[SubEntry]
    persistent: bool
    def __init__(self, node: _Optional[str] = ..., subs: _Optional[_Iterable[_Union[SubEntry, _Mapping]]] = ..., persistent: _Optional[bool] = ...) -> None: ...

class SessionRecord(_message.Message):
    __slots__ = ("node", "epoch", "online", "session_expiry", "disconnected_us", "listener_id", "replicas")
    NODE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    DISCONNECTED_US_FIELD_NUMBER: _ClassVar[int]
    LISTENER_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    node: str
    epoch: int
    online: bool
    session_expiry: int
    disconnected_us: int
    listener_id: str
    replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node: _Optional[str] = ..., epoch: _Optional[int] = ..., online: _Optional[bool] = ..., session_expiry: _Optional[int] = ..., disconnected_us: _Optional[int] = ..., listener_id: _Optional[str] = ..., replicas: _Optional[_Iterable[str]] = ...) -> None: ...
