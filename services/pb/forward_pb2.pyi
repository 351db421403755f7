from services.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Forwarded(_message.Message):
    __slots__ = ("seq", "mountpoint", "client_id", "qos", "retain", "sub_ids", "message", "share")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    MOUNTPOINT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    RETAIN_FIELD_NUMBER: _ClassVar[int]
    SUB_IDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SHARE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    mountpoint: str
    client_id: str
    qos: int
    retain: bool
    sub_ids: _containers.RepeatedScalarFieldContainer[int]
    message: _common_pb2.MqttMessage
    share: str
    def __init__(self, seq: _Optional[int] = ..., mountpoint: _Optional[str] = ..., client_id: _Optional[str] = ..., qos: _Optional[int] = ..., retain: _Optional[bool] = ..., sub_ids: _Optional[_Iterable[int]] = ..., message: _Optional[_Union[_common_pb2.MqttMessage, _Mapping]] = ..., share: _Optional[str] = ...) -> None: ...

class ForwardBatch(_message.Message):
    __slots__ = ("sender", "incarnation", "acked", "items", "resent_upto", "heard")
    SENDER_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ACKED_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    RESENT_UPTO_FIELD_NUMBER: _ClassVar[int]
    HEARD_FIELD_NUMBER: _ClassVar[int]
    sender: str
    incarnation: int
    acked: int
    items: _containers.RepeatedCompositeFieldContainer[Forwarded]
    resent_upto: int
    heard: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, sender: _Optional[str] = ..., incarnation: _Optional[int] = ..., acked: _Optional[int] = ..., items: _Optional[_Iterable[_Union[Forwarded, _Mapping]]] = ..., resent_upto: _Optional[int] = ..., heard: _Optional[_Iterable[int]] = ...) -> None: ...

class ForwardAck(_message.Message):
    __slots__ = ("upto", "failed", "settled", "returned")
    UPTO_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    RETURNED_FIELD_NUMBER: _ClassVar[int]
    upto: int
    failed: _containers.RepeatedScalarFieldContainer[int]
    settled: _containers.RepeatedScalarFieldContainer[int]
    returned: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, upto: _Optional[int] = ..., failed: _Optional[_Iterable[int]] = ..., settled: _Optional[_Iterable[int]] = ..., returned: _Optional[_Iterable[int]] = ...) -> None: ...

class ListenerRecord(_message.Message):
    __slots__ = ("node", "address", "incarnation")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    incarnation: int
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., incarnation: _Optional[int] = ...) -> None: ...
