"""Per packet type parsers of the variable header and payload, and their dispatch table.

Theory of operation: each parser has the signature ``(flags, data, pos, end, version)``
and returns one packet value; ``data[pos:end]`` is the packet after its fixed header,
``flags`` its low nibble (already checked for the types whose flags are fixed) and
``version`` the connection's protocol level (3, 4 or 5). A parser must consume every
byte up to ``end`` or raise ``MalformedPacket`` (trailing bytes are malformed too).
The decoder looks parsers up in ``PARSERS`` by packet type; a missing entry is a
reserved type.

Which error a violation raises follows the spec's wording: "malformed" for bytes that
cannot be parsed, "protocol error" where MQTT 5 says so, topic errors where a reason
code (0x8F, 0x90, 0x94) names the problem better.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from . import _wire as w
from ._connect import parse_connect
from .errors import MalformedPacket, ProtocolError, TopicNameInvalid
from .properties import decode_properties
from .rules import V3_CONNACK_CODES, V3_SUBACK_CODES, V5_REASON_CODES
from .topics import parse_shared, validate_topic_filter
from .types import (
    NO_PROPERTIES,
    Auth,
    Connack,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
)

Parser = Callable[[int, bytes, int, int, int], Packet]


def end_check(pos: int, end: int, what: str) -> None:
    if pos != end:
        raise MalformedPacket(f"{end - pos} trailing bytes after {what}")


def _packet_id(data: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise MalformedPacket("truncated packet identifier")
    pid = (data[pos] << 8) | data[pos + 1]
    if not pid:
        raise MalformedPacket("packet identifier 0 [MQTT-2.3.1-1]")
    return pid, pos + 2


def _reason(code: int, ptype: PacketType) -> int:
    if code not in V5_REASON_CODES[ptype]:
        raise MalformedPacket(f"reason code 0x{code:02X} not valid in {ptype.name}")
    return code


def parse_connack(flags: int, data: bytes, pos: int, end: int, version: int) -> Connack:
    if pos + 2 > end:
        raise MalformedPacket("truncated CONNACK")
    ack_flags, code = data[pos], data[pos + 1]
    if version == 3:
        ack_flags = 0  # 3.1: the whole byte is reserved and unused, no session present
    elif ack_flags & 0xFE:
        raise MalformedPacket("CONNACK reserved flags set [MQTT-3.2.2-1]")
    pos += 2
    props = NO_PROPERTIES
    if version == 5:
        _reason(code, PacketType.CONNACK)
        props, pos = decode_properties(data, pos, end, PacketType.CONNACK)
    elif code not in V3_CONNACK_CODES:
        raise MalformedPacket(f"CONNACK return code {code}")
    end_check(pos, end, "CONNACK")
    return Connack(bool(ack_flags), code, props)


def parse_publish(flags: int, data: bytes, pos: int, end: int, version: int) -> Publish:
    """Hot path: inline reads, one slice per field, validation by substring tests."""
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise MalformedPacket("PUBLISH QoS 3 [MQTT-3.3.1-4]")
    dup = bool(flags & 0x08)
    if dup and not qos:
        error = ProtocolError if version == 5 else MalformedPacket
        raise error("DUP set on a QoS 0 PUBLISH [MQTT-3.3.1-2]")
    if pos + 2 > end:
        raise MalformedPacket("truncated PUBLISH topic")
    stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise MalformedPacket("PUBLISH topic overruns the packet")
    topic = w.decode_utf8(data[pos + 2 : stop])
    pos = stop
    packet_id = None
    if qos:
        packet_id, pos = _packet_id(data, pos, end)
    if "+" in topic or "#" in topic:
        raise TopicNameInvalid(f"wildcard in PUBLISH topic {topic!r} [MQTT-3.3.2-2]")
    if version == 5:
        if pos < end and not data[pos]:  # the common empty property block
            props, pos = NO_PROPERTIES, pos + 1
        else:
            props, pos = decode_properties(data, pos, end, PacketType.PUBLISH)
        if not topic and props.topic_alias is None:
            raise ProtocolError("empty PUBLISH topic without topic alias")
    else:
        props = NO_PROPERTIES
        if not topic:
            raise TopicNameInvalid("empty PUBLISH topic [MQTT-4.7.3-1]")
    return Publish(topic, data[pos:end], qos, bool(flags & 0x01), dup, packet_id, props)


def _ack_parser(cls: type[Puback | Pubrec | Pubrel | Pubcomp], ptype: PacketType) -> Parser:
    def parse_ack(
        flags: int, data: bytes, pos: int, end: int, version: int
    ) -> Puback | Pubrec | Pubrel | Pubcomp:
        size = end - pos
        if size < 2:
            raise MalformedPacket(f"truncated {ptype.name}")
        packet_id = (data[pos] << 8) | data[pos + 1]
        if not packet_id:
            raise MalformedPacket("packet identifier 0 [MQTT-2.3.1-1]")
        if size == 2:
            return cls(packet_id)
        if version != 5:
            raise MalformedPacket(f"{ptype.name} remaining length {size}, expected 2")
        code = _reason(data[pos + 2], ptype)
        if size == 3:
            return cls(packet_id, code)
        props, pos = decode_properties(data, pos + 3, end, ptype)
        end_check(pos, end, ptype.name)
        return cls(packet_id, code, props)

    return parse_ack


def parse_subscribe(flags: int, data: bytes, pos: int, end: int, version: int) -> Subscribe:
    packet_id, pos = _packet_id(data, pos, end)
    props = NO_PROPERTIES
    if version == 5:
        props, pos = decode_properties(data, pos, end, PacketType.SUBSCRIBE)
    subs: list[Subscription] = []
    while pos < end:
        topic_filter, pos = w.read_str(data, pos, end)
        options, pos = w.read_u8(data, pos, end)
        validate_topic_filter(topic_filter)
        subs.append(_subscription(topic_filter, options, version))
    if not subs:
        raise ProtocolError("SUBSCRIBE without topic filters [MQTT-3.8.3-3]")
    return Subscribe(packet_id, tuple(subs), props)


def _subscription(topic_filter: str, options: int, version: int) -> Subscription:
    qos = options & 0x03
    if qos == 3:
        raise MalformedPacket("subscription QoS 3 [MQTT-3-8.3-4]")
    if version < 5:
        if options & 0xFC:
            raise MalformedPacket("reserved subscription option bits set [MQTT-3-8.3-4]")
        return Subscription(topic_filter, qos)
    if options & 0xC0:
        raise MalformedPacket("reserved subscription option bits set [MQTT-3.8.3-5]")
    no_local = bool(options & 0x04)
    retain_handling = (options >> 4) & 0x03
    if retain_handling == 3:
        raise ProtocolError("retain handling 3")
    if no_local and parse_shared(topic_filter)[0] is not None:
        raise ProtocolError("no local on a shared subscription [MQTT-3.8.3-4]")
    return Subscription(topic_filter, qos, no_local, bool(options & 0x08), retain_handling)


def parse_suback(flags: int, data: bytes, pos: int, end: int, version: int) -> Suback:
    packet_id, pos = _packet_id(data, pos, end)
    props = NO_PROPERTIES
    if version == 5:
        props, pos = decode_properties(data, pos, end, PacketType.SUBACK)
        allowed = V5_REASON_CODES[PacketType.SUBACK]
    else:
        allowed = V3_SUBACK_CODES
    codes = tuple(data[pos:end])
    if not codes:
        raise ProtocolError("SUBACK without reason codes")
    for code in codes:
        if code not in allowed:
            raise MalformedPacket(f"SUBACK reason code 0x{code:02X}")
    return Suback(packet_id, codes, props)


def parse_unsubscribe(flags: int, data: bytes, pos: int, end: int, version: int) -> Unsubscribe:
    packet_id, pos = _packet_id(data, pos, end)
    props = NO_PROPERTIES
    if version == 5:
        props, pos = decode_properties(data, pos, end, PacketType.UNSUBSCRIBE)
    filters: list[str] = []
    while pos < end:
        topic_filter, pos = w.read_str(data, pos, end)
        validate_topic_filter(topic_filter)
        filters.append(topic_filter)
    if not filters:
        raise ProtocolError("UNSUBSCRIBE without topic filters [MQTT-3.10.3-2]")
    return Unsubscribe(packet_id, tuple(filters), props)


def parse_unsuback(flags: int, data: bytes, pos: int, end: int, version: int) -> Unsuback:
    packet_id, pos = _packet_id(data, pos, end)
    if version != 5:
        end_check(pos, end, "UNSUBACK")
        return Unsuback(packet_id)
    props, pos = decode_properties(data, pos, end, PacketType.UNSUBACK)
    codes = tuple(_reason(code, PacketType.UNSUBACK) for code in data[pos:end])
    if not codes:
        raise ProtocolError("UNSUBACK without reason codes")
    return Unsuback(packet_id, codes, props)


def parse_pingreq(flags: int, data: bytes, pos: int, end: int, version: int) -> Pingreq:
    end_check(pos, end, "PINGREQ")
    return Pingreq()


def parse_pingresp(flags: int, data: bytes, pos: int, end: int, version: int) -> Pingresp:
    end_check(pos, end, "PINGRESP")
    return Pingresp()


def parse_disconnect(flags: int, data: bytes, pos: int, end: int, version: int) -> Disconnect:
    if version != 5 or pos == end:
        end_check(pos, end, "DISCONNECT")
        return Disconnect()
    code = _reason(data[pos], PacketType.DISCONNECT)
    if pos + 1 == end:
        return Disconnect(code)
    props, pos = decode_properties(data, pos + 1, end, PacketType.DISCONNECT)
    end_check(pos, end, "DISCONNECT")
    return Disconnect(code, props)


def parse_auth(flags: int, data: bytes, pos: int, end: int, version: int) -> Auth:
    if version != 5:
        raise MalformedPacket("AUTH is reserved before MQTT 5")
    if pos == end:
        return Auth()
    code = _reason(data[pos], PacketType.AUTH)
    if pos + 1 == end:
        return Auth(code)
    props, pos = decode_properties(data, pos + 1, end, PacketType.AUTH)
    end_check(pos, end, "AUTH")
    return Auth(code, props)


PARSERS: Final[dict[int, Parser]] = {
    PacketType.CONNECT: parse_connect,
    PacketType.CONNACK: parse_connack,
    PacketType.PUBLISH: parse_publish,
    PacketType.PUBACK: _ack_parser(Puback, PacketType.PUBACK),
    PacketType.PUBREC: _ack_parser(Pubrec, PacketType.PUBREC),
    PacketType.PUBREL: _ack_parser(Pubrel, PacketType.PUBREL),
    PacketType.PUBCOMP: _ack_parser(Pubcomp, PacketType.PUBCOMP),
    PacketType.SUBSCRIBE: parse_subscribe,
    PacketType.SUBACK: parse_suback,
    PacketType.UNSUBSCRIBE: parse_unsubscribe,
    PacketType.UNSUBACK: parse_unsuback,
    PacketType.PINGREQ: parse_pingreq,
    PacketType.PINGRESP: parse_pingresp,
    PacketType.DISCONNECT: parse_disconnect,
    PacketType.AUTH: parse_auth,
}

# Required low nibble of the fixed header; None = carries flags (PUBLISH) [MQTT-2.2.2-1].
FIXED_FLAGS: Final[dict[int, int | None]] = {ptype: 0 for ptype in PARSERS}
FIXED_FLAGS[PacketType.PUBLISH] = None
FIXED_FLAGS[PacketType.PUBREL] = 0b0010
FIXED_FLAGS[PacketType.SUBSCRIBE] = 0b0010
FIXED_FLAGS[PacketType.UNSUBSCRIBE] = 0b0010
