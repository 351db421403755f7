from services.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterRequest(_message.Message):
    __slots__ = ("key", "node", "listener_id", "clean_start", "session_expiry", "proto_ver", "peer", "username", "max_offline_messages", "route")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    LISTENER_ID_FIELD_NUMBER: _ClassVar[int]
    CLEAN_START_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    PROTO_VER_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFLINE_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    node: str
    listener_id: str
    clean_start: bool
    session_expiry: int
    proto_ver: int
    peer: str
    username: str
    max_offline_messages: int
    route: str
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., node: _Optional[str] = ..., listener_id: _Optional[str] = ..., clean_start: _Optional[bool] = ..., session_expiry: _Optional[int] = ..., proto_ver: _Optional[int] = ..., peer: _Optional[str] = ..., username: _Optional[str] = ..., max_offline_messages: _Optional[int] = ..., route: _Optional[str] = ...) -> None: ...

class RegisterReply(_message.Message):
    __slots__ = ("ok", "epoch", "session_present", "reason", "reason_code", "persistent")
    OK_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SESSION_PRESENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REASON_CODE_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    epoch: int
    session_present: bool
    reason: str
    reason_code: int
    persistent: bool
    def __init__(self, ok: _Optional[bool] = ..., epoch: _Optional[int] = ..., session_present: _Optional[bool] = ..., reason: _Optional[str] = ..., reason_code: _Optional[int] = ..., persistent: _Optional[bool] = ...) -> None: ...

class DisconnectedRequest(_message.Message):
    __slots__ = ("key", "epoch", "listener_id", "session_expiry", "reason", "taken_over", "no_subscriptions")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    LISTENER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TAKEN_OVER_FIELD_NUMBER: _ClassVar[int]
    NO_SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    listener_id: str
    session_expiry: int
    reason: str
    taken_over: bool
    no_subscriptions: bool
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., listener_id: _Optional[str] = ..., session_expiry: _Optional[int] = ..., reason: _Optional[str] = ..., taken_over: _Optional[bool] = ..., no_subscriptions: _Optional[bool] = ...) -> None: ...

class DisconnectedReply(_message.Message):
    __slots__ = ("ok",)
    OK_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    def __init__(self, ok: _Optional[bool] = ...) -> None: ...

class ConnectionOp(_message.Message):
    __slots__ = ("id", "register", "disconnected")
    ID_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    DISCONNECTED_FIELD_NUMBER: _ClassVar[int]
    id: int
    register: RegisterRequest
    disconnected: DisconnectedRequest
    def __init__(self, id: _Optional[int] = ..., register: _Optional[_Union[RegisterRequest, _Mapping]] = ..., disconnected: _Optional[_Union[DisconnectedRequest, _Mapping]] = ...) -> None: ...

class ConnectionOps(_message.Message):
    __slots__ = ("ops",)
    OPS_FIELD_NUMBER: _ClassVar[int]
    ops: _containers.RepeatedCompositeFieldContainer[ConnectionOp]
    def __init__(self, ops: _Optional[_Iterable[_Union[ConnectionOp, _Mapping]]] = ...) -> None: ...

class ConnectionResult(_message.Message):
    __slots__ = ("id", "register", "disconnected")
    ID_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    DISCONNECTED_FIELD_NUMBER: _ClassVar[int]
    id: int
    register: RegisterReply
    disconnected: DisconnectedReply
    def __init__(self, id: _Optional[int] = ..., register: _Optional[_Union[RegisterReply, _Mapping]] = ..., disconnected: _Optional[_Union[DisconnectedReply, _Mapping]] = ...) -> None: ...

class ConnectionResults(_message.Message):
    __slots__ = ("results", "receipts")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ConnectionResult]
    receipts: int
    def __init__(self, results: _Optional[_Iterable[_Union[ConnectionResult, _Mapping]]] = ..., receipts: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ("listener_id", "node")
    LISTENER_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    listener_id: str
    node: str
    def __init__(self, listener_id: _Optional[str] = ..., node: _Optional[str] = ...) -> None: ...

class Takeover(_message.Message):
    __slots__ = ("key", "old_epoch", "new_epoch", "new_node")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OLD_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_NODE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    old_epoch: int
    new_epoch: int
    new_node: str
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., old_epoch: _Optional[int] = ..., new_epoch: _Optional[int] = ..., new_node: _Optional[str] = ...) -> None: ...

class RegistryCommand(_message.Message):
    __slots__ = ("takeover", "expire", "moved")
    TAKEOVER_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_FIELD_NUMBER: _ClassVar[int]
    MOVED_FIELD_NUMBER: _ClassVar[int]
    takeover: Takeover
    expire: _common_pb2.SessionKey
    moved: Moved
    def __init__(self, takeover: _Optional[_Union[Takeover, _Mapping]] = ..., expire: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., moved: _Optional[_Union[Moved, _Mapping]] = ...) -> None: ...

class Moved(_message.Message):
    __slots__ = ("key", "node")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    node: str
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., node: _Optional[str] = ...) -> None: ...

class SessionsRequest(_message.Message):
    __slots__ = ("client_id", "limit", "local")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    LOCAL_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    limit: int
    local: bool
    def __init__(self, client_id: _Optional[str] = ..., limit: _Optional[int] = ..., local: _Optional[bool] = ...) -> None: ...

class SessionInfo(_message.Message):
    __slots__ = ("key", "node", "listener_id", "online", "epoch", "session_expiry", "connected_us", "disconnected_us", "peer", "username", "proto_ver", "persistent", "queued", "replicas")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    LISTENER_ID_FIELD_NUMBER: _ClassVar[int]
    ONLINE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_US_FIELD_NUMBER: _ClassVar[int]
    DISCONNECTED_US_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    PROTO_VER_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    node: str
    listener_id: str
    online: bool
    epoch: int
    session_expiry: int
    connected_us: int
    disconnected_us: int
    peer: str
    username: str
    proto_ver: int
    persistent: bool
    queued: bool
    replicas: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., node: _Optional[str] = ..., listener_id: _Optional[str] = ..., online: _Optional[bool] = ..., epoch: _Optional[int] = ..., session_expiry: _Optional[int] = ..., connected_us: _Optional[int] = ..., disconnected_us: _Optional[int] = ..., peer: _Optional[str] = ..., username: _Optional[str] = ..., proto_ver: _Optional[int] = ..., persistent: _Optional[bool] = ..., queued: _Optional[bool] = ..., replicas: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionsReply(_message.Message):
    __slots__ = ("sessions", "unreachable")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    UNREACHABLE_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionInfo]
    unreachable: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionInfo, _Mapping]]] = ..., unreachable: _Optional[_Iterable[str]] = ...) -> None: ...
