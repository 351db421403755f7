"""Typed model of MQTT control packets shared by the codec and the session.

Theory of operation: every control packet is one slotted dataclass and an immutable
value that the session state machine can match on (``match pkt: case Publish(...)``)
and tests can compare with ``==``. Most are ``frozen=True``; PUBLISH and its four
acknowledgements, CONNECT (and its Will) and CONNACK are immutable by convention only
(nothing assigns to a field; a changed copy is made with ``dataclasses.replace``): they are
built per message or per connection, and a
frozen dataclass builds itself through one ``object.__setattr__`` per field, two to
three times the cost of a plain one. They are therefore not hashable either, and their
``__init__`` is written out (``init=False``): in the compiled build (setup.py) the one
``dataclasses`` generates stays interpreted, ~1 µs per object against ~0.1 µs. Version
differences are carried as data, not as separate classes: the decoder fills the
MQTT 5 ``properties`` only for protocol version 5 and leaves ``NO_PROPERTIES``
otherwise; ``Connack.reason_code`` holds the 3.1.1 return code for versions 3 and 4
and the MQTT 5 reason code for version 5. Enumerations are ``IntEnum`` so that they
compare equal to the raw wire bytes; duplicate values (``SUCCESS`` and
``NORMAL_DISCONNECTION`` are both 0) are aliases, which is how the MQTT 5 spec names
them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TypeAlias

__all__ = [
    "NO_PROPERTIES",
    "Auth",
    "Connack",
    "Connect",
    "ConnectReturnCode",
    "Disconnect",
    "Packet",
    "PacketType",
    "Pingreq",
    "Pingresp",
    "Properties",
    "PropertyId",
    "ProtocolVersion",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "QoS",
    "ReasonCode",
    "Suback",
    "Subscribe",
    "Subscription",
    "Unsuback",
    "Unsubscribe",
    "Will",
]


class PacketType(IntEnum):
    """Control packet type: the high nibble of the fixed header's first byte."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


class QoS(IntEnum):
    AT_MOST_ONCE = 0
    AT_LEAST_ONCE = 1
    EXACTLY_ONCE = 2


class ProtocolVersion(IntEnum):
    """Protocol level byte of CONNECT (3.1 uses the protocol name ``MQIsdp``)."""

    V31 = 3
    V311 = 4
    V5 = 5


class ReasonCode(IntEnum):
    """MQTT 5 reason codes (spec section 2.4); equal values are the spec's aliases."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class ConnectReturnCode(IntEnum):
    """MQTT 3.1/3.1.1 CONNACK return codes."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USERNAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


class PropertyId(IntEnum):
    """MQTT 5 property identifiers (spec section 2.2.2.2)."""

    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


@dataclass(frozen=True, slots=True)
class Properties:
    """MQTT 5 properties of one packet; ``None`` means absent (not the default value).

    Only ``subscription_identifiers`` and ``user_properties`` may repeat on the wire,
    hence tuples; the order of user properties is preserved [MQTT-3.3.2-18].
    """

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None


NO_PROPERTIES = Properties()


@dataclass(slots=True, init=False)  # not frozen: see the module docstring (per connection)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = NO_PROPERTIES

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        properties: Properties = NO_PROPERTIES,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties


@dataclass(slots=True, init=False)  # not frozen: see the module docstring (per connection)
class Connect:
    protocol_name: str
    protocol_version: int
    clean_start: bool
    keepalive: int
    client_id: str
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    properties: Properties = NO_PROPERTIES

    def __init__(
        self,
        protocol_name: str,
        protocol_version: int,
        clean_start: bool,
        keepalive: int,
        client_id: str,
        will: Will | None = None,
        username: str | None = None,
        password: bytes | None = None,
        properties: Properties = NO_PROPERTIES,
    ) -> None:
        self.protocol_name = protocol_name
        self.protocol_version = protocol_version
        self.clean_start = clean_start
        self.keepalive = keepalive
        self.client_id = client_id
        self.will = will
        self.username = username
        self.password = password
        self.properties = properties


@dataclass(slots=True, init=False)  # not frozen: see the module docstring (per connection)
class Connack:
    """``reason_code`` is the 3.1.1 return code for v3/v4, the MQTT 5 reason code for v5."""

    session_present: bool
    reason_code: int
    properties: Properties = NO_PROPERTIES

    def __init__(
        self, session_present: bool, reason_code: int, properties: Properties = NO_PROPERTIES
    ) -> None:
        self.session_present = session_present
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True, init=False)  # not frozen: see the module docstring
class Publish:
    """``packet_id`` is None exactly when ``qos`` is 0.

    With an MQTT 5 topic alias the topic may be empty on the wire; the decoder leaves it
    empty and the session resolves ``properties.topic_alias``.
    """

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = NO_PROPERTIES

    def __init__(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        dup: bool = False,
        packet_id: int | None = None,
        properties: Properties = NO_PROPERTIES,
    ) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.dup = dup
        self.packet_id = packet_id
        self.properties = properties


@dataclass(slots=True, init=False)  # not frozen: see the module docstring
class Puback:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES

    def __init__(
        self, packet_id: int, reason_code: int = 0, properties: Properties = NO_PROPERTIES
    ) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True, init=False)  # not frozen: see the module docstring
class Pubrec:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES

    def __init__(
        self, packet_id: int, reason_code: int = 0, properties: Properties = NO_PROPERTIES
    ) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True, init=False)  # not frozen: see the module docstring
class Pubrel:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES

    def __init__(
        self, packet_id: int, reason_code: int = 0, properties: Properties = NO_PROPERTIES
    ) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties


@dataclass(slots=True, init=False)  # not frozen: see the module docstring
class Pubcomp:
    packet_id: int
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES

    def __init__(
        self, packet_id: int, reason_code: int = 0, properties: Properties = NO_PROPERTIES
    ) -> None:
        self.packet_id = packet_id
        self.reason_code = reason_code
        self.properties = properties


@dataclass(frozen=True, slots=True)
class Subscription:
    """One SUBSCRIBE entry; the option bits beyond ``qos`` are MQTT 5 only."""

    topic_filter: str
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(frozen=True, slots=True)
class Subscribe:
    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Suback:
    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Unsuback:
    """``reason_codes`` is empty for v3/v4, whose UNSUBACK carries only the packet id."""

    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Pingreq:
    """No fields: the fixed header is the whole packet."""


@dataclass(frozen=True, slots=True)
class Pingresp:
    """No fields: the fixed header is the whole packet."""


@dataclass(frozen=True, slots=True)
class Disconnect:
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True)
class Auth:
    reason_code: int = 0
    properties: Properties = NO_PROPERTIES


Packet: TypeAlias = (
    Connect
    | Connack
    | Publish
    | Puback
    | Pubrec
    | Pubrel
    | Pubcomp
    | Subscribe
    | Suback
    | Unsubscribe
    | Unsuback
    | Pingreq
    | Pingresp
    | Disconnect
    | Auth
)
