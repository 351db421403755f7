"""Typed model of MQTT control packets shared by the codec and the session.

Theory of operation: every control packet is one slotted dataclass and an immutable
value that the session state machine can match on (``match pkt: case Publish(...)``)
and tests can compare with ``==``. Most are ``frozen=True``; PUBLISH and its four
acknowledgements, CONNECT (and its Will) and CONNACK are immutable by convention only
(nothing assigns to a field; a changed copy is made with ``dataclasses.replace``): they are
built per message or per connection, and a
frozen dataclass builds itself through one ``object.__setattr__`` per field, a
multiple of a plain one's cost. They are therefore not hashable either, and their
``__init__`` is written out (``init=False``): in the compiled build (setup.py) the one
``dataclasses`` generates stays interpreted, much slower. Version
differences are carried as data, not as separate classes: the decoder fills the
MQTT 5 ``properties`` only for protocol version 5 and leaves ``NO_PROPERTIES``
otherwise; ``Connack.reason_code`` holds the 3.1.1 return code for versions 3 and 4
and the MQTT 5 reason code for version 5. The enumerations live in ``codes`` and are
re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from services.listener.mqtt.codes import (
    ConnectReturnCode,
    PacketType,
    PropertyId,
    ProtocolVersion,
    QoS,
    ReasonCode,
)

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
