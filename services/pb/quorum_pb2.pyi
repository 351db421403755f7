from services.pb import common_pb2 as _common_pb2
from services.pb import msgstore_pb2 as _msgstore_pb2
from services.pb import registry_pb2 as _registry_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HandoverPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HANDOVER_TAKE: _ClassVar[HandoverPhase]
    HANDOVER_RELEASE: _ClassVar[HandoverPhase]
HANDOVER_TAKE: HandoverPhase
HANDOVER_RELEASE: HandoverPhase

class MergeRequest(_message.Message):
    __slots__ = ("key", "entries", "node")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    entries: _containers.RepeatedCompositeFieldContainer[_msgstore_pb2.QueueEntry]
    node: str
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[_msgstore_pb2.QueueEntry, _Mapping]]] = ..., node: _Optional[str] = ...) -> None: ...

class MergeReply(_message.Message):
    __slots__ = ("error", "merged")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MERGED_FIELD_NUMBER: _ClassVar[int]
    error: str
    merged: int
    def __init__(self, error: _Optional[str] = ..., merged: _Optional[int] = ...) -> None: ...

class Ballot(_message.Message):
    __slots__ = ("counter", "incarnation", "node")
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    counter: int
    incarnation: int
    node: str
    def __init__(self, counter: _Optional[int] = ..., incarnation: _Optional[int] = ..., node: _Optional[str] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("owner", "epoch", "replicas", "state", "persistent", "prior")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_FIELD_NUMBER: _ClassVar[int]
    PRIOR_FIELD_NUMBER: _ClassVar[int]
    owner: str
    epoch: int
    replicas: _containers.RepeatedScalarFieldContainer[str]
    state: str
    persistent: bool
    prior: int
    def __init__(self, owner: _Optional[str] = ..., epoch: _Optional[int] = ..., replicas: _Optional[_Iterable[str]] = ..., state: _Optional[str] = ..., persistent: _Optional[bool] = ..., prior: _Optional[int] = ...) -> None: ...

class Slot(_message.Message):
    __slots__ = ("promised", "accepted", "value")
    PROMISED_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    promised: Ballot
    accepted: Ballot
    value: Entry
    def __init__(self, promised: _Optional[_Union[Ballot, _Mapping]] = ..., accepted: _Optional[_Union[Ballot, _Mapping]] = ..., value: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class PrepareRequest(_message.Message):
    __slots__ = ("ballot", "keys")
    BALLOT_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    ballot: Ballot
    keys: _containers.RepeatedCompositeFieldContainer[_common_pb2.SessionKey]
    def __init__(self, ballot: _Optional[_Union[Ballot, _Mapping]] = ..., keys: _Optional[_Iterable[_Union[_common_pb2.SessionKey, _Mapping]]] = ...) -> None: ...

class Promise(_message.Message):
    __slots__ = ("key", "accepted", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    accepted: Ballot
    value: Entry
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., accepted: _Optional[_Union[Ballot, _Mapping]] = ..., value: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class Refusal(_message.Message):
    __slots__ = ("key", "promised")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PROMISED_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    promised: Ballot
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., promised: _Optional[_Union[Ballot, _Mapping]] = ...) -> None: ...

class PrepareReply(_message.Message):
    __slots__ = ("ballot", "node", "incarnation", "promises", "refusals")
    BALLOT_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PROMISES_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    ballot: Ballot
    node: str
    incarnation: int
    promises: _containers.RepeatedCompositeFieldContainer[Promise]
    refusals: _containers.RepeatedCompositeFieldContainer[Refusal]
    def __init__(self, ballot: _Optional[_Union[Ballot, _Mapping]] = ..., node: _Optional[str] = ..., incarnation: _Optional[int] = ..., promises: _Optional[_Iterable[_Union[Promise, _Mapping]]] = ..., refusals: _Optional[_Iterable[_Union[Refusal, _Mapping]]] = ...) -> None: ...

class Proposal(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    value: Entry
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., value: _Optional[_Union[Entry, _Mapping]] = ...) -> None: ...

class AcceptRequest(_message.Message):
    __slots__ = ("ballot", "incarnation", "proposals")
    BALLOT_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    ballot: Ballot
    incarnation: int
    proposals: _containers.RepeatedCompositeFieldContainer[Proposal]
    def __init__(self, ballot: _Optional[_Union[Ballot, _Mapping]] = ..., incarnation: _Optional[int] = ..., proposals: _Optional[_Iterable[_Union[Proposal, _Mapping]]] = ...) -> None: ...

class AcceptReply(_message.Message):
    __slots__ = ("ballot", "node", "incarnation", "accepted", "refusals")
    BALLOT_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_FIELD_NUMBER: _ClassVar[int]
    ballot: Ballot
    node: str
    incarnation: int
    accepted: _containers.RepeatedCompositeFieldContainer[_common_pb2.SessionKey]
    refusals: _containers.RepeatedCompositeFieldContainer[Refusal]
    def __init__(self, ballot: _Optional[_Union[Ballot, _Mapping]] = ..., node: _Optional[str] = ..., incarnation: _Optional[int] = ..., accepted: _Optional[_Iterable[_Union[_common_pb2.SessionKey, _Mapping]]] = ..., refusals: _Optional[_Iterable[_Union[Refusal, _Mapping]]] = ...) -> None: ...

class HandoverRequest(_message.Message):
    __slots__ = ("key", "epoch", "node", "phase", "discard", "after_seq", "route", "keep_queue", "relay_to")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DISCARD_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    KEEP_QUEUE_FIELD_NUMBER: _ClassVar[int]
    RELAY_TO_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.SessionKey
    epoch: int
    node: str
    phase: HandoverPhase
    discard: bool
    after_seq: int
    route: str
    keep_queue: bool
    relay_to: str
    def __init__(self, key: _Optional[_Union[_common_pb2.SessionKey, _Mapping]] = ..., epoch: _Optional[int] = ..., node: _Optional[str] = ..., phase: _Optional[_Union[HandoverPhase, str]] = ..., discard: _Optional[bool] = ..., after_seq: _Optional[int] = ..., route: _Optional[str] = ..., keep_queue: _Optional[bool] = ..., relay_to: _Optional[str] = ...) -> None: ...

class HandoverReply(_message.Message):
    __slots__ = ("present", "persistent", "session_expiry", "proto_ver", "entries", "inbound_qos2", "error", "last_seq", "delivered_upto", "outbound_pubrel", "unconfirmed")
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRY_FIELD_NUMBER: _ClassVar[int]
    PROTO_VER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    INBOUND_QOS2_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    DELIVERED_UPTO_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_PUBREL_FIELD_NUMBER: _ClassVar[int]
    UNCONFIRMED_FIELD_NUMBER: _ClassVar[int]
    present: bool
    persistent: bool
    session_expiry: int
    proto_ver: int
    entries: _containers.RepeatedCompositeFieldContainer[_msgstore_pb2.QueueEntry]
    inbound_qos2: _containers.RepeatedScalarFieldContainer[int]
    error: str
    last_seq: int
    delivered_upto: int
    outbound_pubrel: _containers.RepeatedScalarFieldContainer[int]
    unconfirmed: bool
    def __init__(self, present: _Optional[bool] = ..., persistent: _Optional[bool] = ..., session_expiry: _Optional[int] = ..., proto_ver: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[_msgstore_pb2.QueueEntry, _Mapping]]] = ..., inbound_qos2: _Optional[_Iterable[int]] = ..., error: _Optional[str] = ..., last_seq: _Optional[int] = ..., delivered_upto: _Optional[int] = ..., outbound_pubrel: _Optional[_Iterable[int]] = ..., unconfirmed: _Optional[bool] = ...) -> None: ...

class KeysRequest(_message.Message):
    __slots__ = ("after", "limit")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after: int
    limit: int
    def __init__(self, after: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class KeysReply(_message.Message):
    __slots__ = ("keys", "next", "catching_up")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    CATCHING_UP_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[_common_pb2.SessionKey]
    next: int
    catching_up: bool
    def __init__(self, keys: _Optional[_Iterable[_Union[_common_pb2.SessionKey, _Mapping]]] = ..., next: _Optional[int] = ..., catching_up: _Optional[bool] = ...) -> None: ...

class RegistryRecord(_message.Message):
    __slots__ = ("node", "address", "incarnation")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    incarnation: int
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., incarnation: _Optional[int] = ...) -> None: ...
