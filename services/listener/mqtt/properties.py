"""MQTT 5 properties (spec section 2.2.2): one table drives decoding and encoding.

Theory of operation: ``_SPECS`` maps each property identifier to its ``Properties``
field, its wire type and an optional value rule; ``ALLOWED`` maps each packet type
(plus the pseudo type ``WILL`` for the will properties inside CONNECT) to the
identifiers that packet may carry. Decoding enforces, in this order: a known
identifier (else malformed), allowed on this packet (else malformed), a well-formed
value inside the property block, the value rule (else protocol error, e.g. Receive
Maximum 0) and "at most once" for everything except User Property and, in PUBLISH
only, Subscription Identifier (else protocol error).

Worked example: the block ``05 21 00 0A 24 01`` is five bytes of properties: Receive
Maximum (0x21) = 10 and Maximum QoS (0x24) = 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _wire as w
from .errors import EncodeError, MalformedPacket, MQTTError, ProtocolError, TopicAliasInvalid
from .types import NO_PROPERTIES, PacketType, Properties, PropertyId

__all__ = [
    "ALLOWED",
    "WILL",
    "decode_properties",
    "encode_properties",
    "encode_properties_block",
]

P = PropertyId
T = PacketType
WILL = 0  # pseudo packet type: the will properties inside a CONNECT payload

_Reader = Callable[[bytes, int, int], tuple[Any, int]]
_Writer = Callable[[Any], bytes]

_BOOL = (lambda v: v in (0, 1), ProtocolError, "must be 0 or 1")
_NONZERO = (lambda v: v != 0, ProtocolError, "must not be 0")

# id -> (field, reader, writer, rule or None); rule = (predicate, error class, text)
_SPECS: dict[int, tuple[str, _Reader, _Writer, Any]] = {
    P.PAYLOAD_FORMAT_INDICATOR: ("payload_format_indicator", w.read_u8, w.encode_u8, _BOOL),
    P.MESSAGE_EXPIRY_INTERVAL: ("message_expiry_interval", w.read_u32, w.encode_u32, None),
    P.CONTENT_TYPE: ("content_type", w.read_str, w.encode_str, None),
    P.RESPONSE_TOPIC: ("response_topic", w.read_str, w.encode_str, None),
    P.CORRELATION_DATA: ("correlation_data", w.read_bin, w.encode_bin, None),
    P.SUBSCRIPTION_IDENTIFIER: (
        "subscription_identifiers",
        w.read_varint,
        w.encode_varint,
        _NONZERO,
    ),
    P.SESSION_EXPIRY_INTERVAL: ("session_expiry_interval", w.read_u32, w.encode_u32, None),
    P.ASSIGNED_CLIENT_IDENTIFIER: ("assigned_client_identifier", w.read_str, w.encode_str, None),
    P.SERVER_KEEP_ALIVE: ("server_keep_alive", w.read_u16, w.encode_u16, None),
    P.AUTHENTICATION_METHOD: ("authentication_method", w.read_str, w.encode_str, None),
    P.AUTHENTICATION_DATA: ("authentication_data", w.read_bin, w.encode_bin, None),
    P.REQUEST_PROBLEM_INFORMATION: ("request_problem_information", w.read_u8, w.encode_u8, _BOOL),
    P.WILL_DELAY_INTERVAL: ("will_delay_interval", w.read_u32, w.encode_u32, None),
    P.REQUEST_RESPONSE_INFORMATION: (
        "request_response_information",
        w.read_u8,
        w.encode_u8,
        _BOOL,
    ),
    P.RESPONSE_INFORMATION: ("response_information", w.read_str, w.encode_str, None),
    P.SERVER_REFERENCE: ("server_reference", w.read_str, w.encode_str, None),
    P.REASON_STRING: ("reason_string", w.read_str, w.encode_str, None),
    P.RECEIVE_MAXIMUM: ("receive_maximum", w.read_u16, w.encode_u16, _NONZERO),
    P.TOPIC_ALIAS_MAXIMUM: ("topic_alias_maximum", w.read_u16, w.encode_u16, None),
    P.TOPIC_ALIAS: (
        "topic_alias",
        w.read_u16,
        w.encode_u16,
        (lambda v: v != 0, TopicAliasInvalid, "must not be 0 [MQTT-3.3.2-8]"),
    ),
    P.MAXIMUM_QOS: ("maximum_qos", w.read_u8, w.encode_u8, _BOOL),
    P.RETAIN_AVAILABLE: ("retain_available", w.read_u8, w.encode_u8, _BOOL),
    P.USER_PROPERTY: ("user_properties", w.read_pair, w.encode_pair, None),
    P.MAXIMUM_PACKET_SIZE: ("maximum_packet_size", w.read_u32, w.encode_u32, _NONZERO),
    P.WILDCARD_SUBSCRIPTION_AVAILABLE: (
        "wildcard_subscription_available",
        w.read_u8,
        w.encode_u8,
        _BOOL,
    ),
    P.SUBSCRIPTION_IDENTIFIER_AVAILABLE: (
        "subscription_identifier_available",
        w.read_u8,
        w.encode_u8,
        _BOOL,
    ),
    P.SHARED_SUBSCRIPTION_AVAILABLE: (
        "shared_subscription_available",
        w.read_u8,
        w.encode_u8,
        _BOOL,
    ),
}

_ACK = frozenset({P.REASON_STRING, P.USER_PROPERTY})
_MESSAGE = frozenset(
    {
        P.PAYLOAD_FORMAT_INDICATOR,
        P.MESSAGE_EXPIRY_INTERVAL,
        P.CONTENT_TYPE,
        P.RESPONSE_TOPIC,
        P.CORRELATION_DATA,
        P.USER_PROPERTY,
    }
)
ALLOWED: dict[int, frozenset[int]] = {
    T.CONNECT: frozenset(
        {
            P.SESSION_EXPIRY_INTERVAL,
            P.AUTHENTICATION_METHOD,
            P.AUTHENTICATION_DATA,
            P.REQUEST_PROBLEM_INFORMATION,
            P.REQUEST_RESPONSE_INFORMATION,
            P.RECEIVE_MAXIMUM,
            P.TOPIC_ALIAS_MAXIMUM,
            P.USER_PROPERTY,
            P.MAXIMUM_PACKET_SIZE,
        }
    ),
    WILL: _MESSAGE | {P.WILL_DELAY_INTERVAL},
    T.CONNACK: frozenset(
        {
            P.SESSION_EXPIRY_INTERVAL,
            P.ASSIGNED_CLIENT_IDENTIFIER,
            P.SERVER_KEEP_ALIVE,
            P.AUTHENTICATION_METHOD,
            P.AUTHENTICATION_DATA,
            P.RESPONSE_INFORMATION,
            P.SERVER_REFERENCE,
            P.REASON_STRING,
            P.RECEIVE_MAXIMUM,
            P.TOPIC_ALIAS_MAXIMUM,
            P.MAXIMUM_QOS,
            P.RETAIN_AVAILABLE,
            P.USER_PROPERTY,
            P.MAXIMUM_PACKET_SIZE,
            P.WILDCARD_SUBSCRIPTION_AVAILABLE,
            P.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
            P.SHARED_SUBSCRIPTION_AVAILABLE,
        }
    ),
    T.PUBLISH: _MESSAGE | {P.SUBSCRIPTION_IDENTIFIER, P.TOPIC_ALIAS},
    T.PUBACK: _ACK,
    T.PUBREC: _ACK,
    T.PUBREL: _ACK,
    T.PUBCOMP: _ACK,
    T.SUBSCRIBE: frozenset({P.SUBSCRIPTION_IDENTIFIER, P.USER_PROPERTY}),
    T.SUBACK: _ACK,
    T.UNSUBSCRIBE: frozenset({P.USER_PROPERTY}),
    T.UNSUBACK: _ACK,
    T.DISCONNECT: frozenset(
        {P.SESSION_EXPIRY_INTERVAL, P.SERVER_REFERENCE, P.REASON_STRING, P.USER_PROPERTY}
    ),
    T.AUTH: frozenset(
        {P.AUTHENTICATION_METHOD, P.AUTHENTICATION_DATA, P.REASON_STRING, P.USER_PROPERTY}
    ),
}

# Publishers tend to repeat the same property block (content type, user properties,
# expiry), so valid small blocks map to their (immutable) decoded value. Bounded:
# cleared when full; only blocks that decoded without error are stored.
_CACHE: dict[tuple[int, bytes], Properties] = {}
_CACHE_MAX_BLOCK = 256
_CACHE_MAX_ENTRIES = 4096

# Encoding order: ascending identifier, which is also the field order of ``Properties``.
_ORDER = sorted(_SPECS.items())


def _name(ptype: int) -> str:
    return "will" if ptype == WILL else PacketType(ptype).name


def decode_properties(data: bytes, pos: int, end: int, ptype: int) -> tuple[Properties, int]:
    """Read a property block (length + properties) at ``pos`` for packet type ``ptype``."""
    length, pos = w.read_varint(data, pos, end)
    if not length:
        return NO_PROPERTIES, pos
    stop = pos + length
    if stop > end:
        raise MalformedPacket("property block overruns the packet")
    if length > _CACHE_MAX_BLOCK:
        return _parse(data, pos, stop, ptype), stop
    key = (ptype, data[pos:stop])
    props = _CACHE.get(key)
    if props is None:
        props = _parse(data, pos, stop, ptype)
        if len(_CACHE) >= _CACHE_MAX_ENTRIES:
            _CACHE.clear()
        _CACHE[key] = props
    return props, stop


def _parse(data: bytes, pos: int, stop: int, ptype: int) -> Properties:
    allowed = ALLOWED[ptype]
    values: dict[str, Any] = {}
    users: list[tuple[str, str]] = []
    sub_ids: list[int] = []
    while pos < stop:
        pid = data[pos]
        pos += 1
        spec = _SPECS.get(pid)
        if spec is None:
            raise MalformedPacket(f"unknown property identifier 0x{pid:02X}")
        if pid not in allowed:
            raise MalformedPacket(f"property {P(pid).name} not allowed in {_name(ptype)}")
        field, reader, _writer, rule = spec
        value, pos = reader(data, pos, stop)
        if rule is not None and not rule[0](value):
            error: type[MQTTError] = rule[1]
            raise error(f"property {P(pid).name} {rule[2]}, got {value}")
        if pid == P.USER_PROPERTY:
            users.append(value)
        elif pid == P.SUBSCRIPTION_IDENTIFIER:
            if sub_ids and ptype != T.PUBLISH:
                raise ProtocolError(f"property {P(pid).name} more than once")
            sub_ids.append(value)
        elif field in values:
            raise ProtocolError(f"property {P(pid).name} more than once")
        else:
            values[field] = value
    if users:
        values["user_properties"] = tuple(users)
    if sub_ids:
        values["subscription_identifiers"] = tuple(sub_ids)
    return Properties(**values)


def encode_properties(props: Properties, ptype: int) -> bytes:
    """The properties of ``props`` without the length prefix, checked against ``ptype``."""
    if props is NO_PROPERTIES:
        return b""
    allowed = ALLOWED[ptype]
    out: list[bytes] = []
    for pid, (field, _reader, writer, rule) in _ORDER:
        value = getattr(props, field)
        if value is None or value == ():
            continue
        if pid not in allowed:
            raise EncodeError(f"property {P(pid).name} not allowed in {_name(ptype)}")
        head = bytes((pid,))
        items = value if pid == P.USER_PROPERTY or pid == P.SUBSCRIPTION_IDENTIFIER else (value,)
        if pid == P.SUBSCRIPTION_IDENTIFIER and ptype != T.PUBLISH and len(items) > 1:
            raise EncodeError(f"only one subscription identifier allowed in {_name(ptype)}")
        for item in items:
            if rule is not None and not rule[0](item):
                raise EncodeError(f"property {P(pid).name} {rule[2]}, got {item}")
            out.append(head + writer(item))
    return b"".join(out)


def encode_properties_block(props: Properties, ptype: int) -> bytes:
    """Length-prefixed property block, as it appears on the wire."""
    if props is NO_PROPERTIES:
        return b"\x00"
    raw = encode_properties(props, ptype)
    return w.encode_varint(len(raw)) + raw
