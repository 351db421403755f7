from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UserProperty(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class MqttMessage(_message.Message):
    __slots__ = ("msg_id", "topic", "mountpoint", "payload", "qos", "retain", "publisher", "origin_node", "published_us", "expires_us", "payload_format", "content_type", "response_topic", "correlation_data", "user_properties")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MOUNTPOINT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    RETAIN_FIELD_NUMBER: _ClassVar[int]
    PUBLISHER_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_NODE_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_US_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_US_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FORMAT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_TOPIC_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_DATA_FIELD_NUMBER: _ClassVar[int]
    USER_PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    topic: str
    mountpoint: str
    payload: bytes
    qos: int
    retain: bool
    publisher: str
    origin_node: str
    published_us: int
    expires_us: int
    payload_format: int
    content_type: str
    response_topic: str
    correlation_data: bytes
    user_properties: _containers.RepeatedCompositeFieldContainer[UserProperty]
    def __init__(self, msg_id: _Optional[str] = ..., topic: _Optional[str] = ..., mountpoint: _Optional[str] = ..., payload: _Optional[bytes] = ..., qos: _Optional[int] = ..., retain: _Optional[bool] = ..., publisher: _Optional[str] = ..., origin_node: _Optional[str] = ..., published_us: _Optional[int] = ..., expires_us: _Optional[int] = ..., payload_format: _Optional[int] = ..., content_type: _Optional[str] = ..., response_topic: _Optional[str] = ..., correlation_data: _Optional[bytes] = ..., user_properties: _Optional[_Iterable[_Union[UserProperty, _Mapping]]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("msg", "qos", "retain", "sub_ids")
    MSG_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    RETAIN_FIELD_NUMBER: _ClassVar[int]
    SUB_IDS_FIELD_NUMBER: _ClassVar[int]
    msg: MqttMessage
    qos: int
    retain: bool
    sub_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, msg: _Optional[_Union[MqttMessage, _Mapping]] = ..., qos: _Optional[int] = ..., retain: _Optional[bool] = ..., sub_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class SessionKey(_message.Message):
    __slots__ = ("mountpoint", "client_id")
    MOUNTPOINT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    mountpoint: str
    client_id: str
    def __init__(self, mountpoint: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class TraceRequest(_message.Message):
    __slots__ = ("mountpoint", "client_id", "rate_max", "rate_interval_ms", "payload_limit", "seconds")
    MOUNTPOINT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    RATE_MAX_FIELD_NUMBER: _ClassVar[int]
    RATE_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_LIMIT_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    mountpoint: str
    client_id: str
    rate_max: int
    rate_interval_ms: int
    payload_limit: int
    seconds: int
    def __init__(self, mountpoint: _Optional[str] = ..., client_id: _Optional[str] = ..., rate_max: _Optional[int] = ..., rate_interval_ms: _Optional[int] = ..., payload_limit: _Optional[int] = ..., seconds: _Optional[int] = ...) -> None: ...

class TraceLine(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("service", "node", "ready", "started_us", "json")
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    STARTED_US_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    service: str
    node: str
    ready: bool
    started_us: int
    json: str
    def __init__(self, service: _Optional[str] = ..., node: _Optional[str] = ..., ready: _Optional[bool] = ..., started_us: _Optional[int] = ..., json: _Optional[str] = ...) -> None: ...

class MetricsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Sample(_message.Message):
    __slots__ = ("name", "labels", "value", "kind", "help")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    HELP_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    value: float
    kind: str
    help: str
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., value: _Optional[float] = ..., kind: _Optional[str] = ..., help: _Optional[str] = ...) -> None: ...

class MetricsReply(_message.Message):
    __slots__ = ("samples",)
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    def __init__(self, samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ...) -> None: ...

class LaneCall(_message.Message):
    __slots__ = ("id", "method", "body")
    ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    id: int
    method: str
    body: bytes
    def __init__(self, id: _Optional[int] = ..., method: _Optional[str] = ..., body: _Optional[bytes] = ...) -> None: ...

class LaneReply(_message.Message):
    __slots__ = ("id", "code", "details", "body")
    ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    id: int
    code: str
    details: str
    body: bytes
    def __init__(self, id: _Optional[int] = ..., code: _Optional[str] = ..., details: _Optional[str] = ..., body: _Optional[bytes] = ...) -> None: ...
