"""MQTT encoder: packet values to wire bytes for protocol versions 3, 4 and 5.

Theory of operation: ``encode(packet, version)`` looks up the packet's class in
``_ENCODERS``, which builds the whole frame (fixed header included). Properties and
reason codes are written only for version 5 and silently left out for 3/4, so the
session can build one packet and send it to clients of any version. MQTT 5's short
forms are used whenever they say the same thing: a PUBACK with reason 0 and no
properties is the four bytes ``40 02 id id``, a DISCONNECT with reason 0 is ``E0 00``.
Packets the protocol cannot express (QoS 1 without a packet id, a string longer than
65,535 bytes, a property not allowed on the packet) raise ``EncodeError``.

``encode_publish`` is the broker's fan-out path: topic and properties are encoded
once per message by the caller and only the per-subscriber fields vary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from . import _wire as w
from .errors import EncodeError
from .properties import WILL, encode_properties, encode_properties_block
from .rules import V3_CONNACK_CODES
from .types import (
    NO_PROPERTIES,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)

__all__ = ["encode", "encode_publish", "encode_publish_properties"]

_Encoder = Callable[[Any, int], bytes]
T = PacketType


def _frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + w.encode_varint(len(body)) + body


def encode(packet: Packet, protocol_version: int) -> bytes:
    """Serialise ``packet`` for a connection speaking ``protocol_version`` (3, 4 or 5).

    CONNECT is written in its own ``protocol_version`` field's layout.
    """
    encoder = _ENCODERS.get(type(packet))
    if encoder is None:
        raise EncodeError(f"not an MQTT packet: {packet!r}")
    return encoder(packet, protocol_version)


def encode_publish_properties(props: Properties) -> bytes:
    """Raw PUBLISH properties (no length prefix) for ``encode_publish``."""
    return encode_properties(props, T.PUBLISH)


def encode_publish(
    topic_bytes: bytes,
    payload: bytes,
    qos: int,
    retain: bool,
    dup: bool,
    packet_id: int | None,
    props_bytes: bytes,
    version: int,
) -> bytes:
    """PUBLISH from pre-encoded parts: UTF-8 topic and raw properties (ignored below v5)."""
    if qos:
        if qos not in (1, 2) or not packet_id or packet_id > 0xFFFF:
            raise EncodeError(f"PUBLISH QoS {qos} needs a packet id 1..65535, got {packet_id}")
        pid = packet_id.to_bytes(2, "big")
    else:
        if packet_id is not None or dup:
            raise EncodeError("a QoS 0 PUBLISH has no packet id and no DUP [MQTT-3.3.1-2]")
        pid = b""
    tlen = len(topic_bytes)
    if tlen > 0xFFFF:
        raise EncodeError("topic longer than 65535 bytes")
    first = 0x30 | (dup << 3) | (qos << 1) | retain
    if version == 5:
        plen = w.encode_varint(len(props_bytes))
        size = 2 + tlen + len(pid) + len(plen) + len(props_bytes) + len(payload)
        tail: tuple[bytes, ...] = (pid, plen, props_bytes, payload)
    else:
        size = 2 + tlen + len(pid) + len(payload)
        tail = (pid, payload)
    # the fixed header and the topic length in one bytes() when the size fits one byte
    if size < 0x80:
        head = bytes((first, size, tlen >> 8, tlen & 0xFF))
    else:
        head = bytes((first,)) + w.encode_varint(size) + bytes((tlen >> 8, tlen & 0xFF))
    return b"".join((head, topic_bytes, *tail))


def _publish(p: Publish, version: int) -> bytes:
    props = encode_properties(p.properties, T.PUBLISH) if version == 5 else b""
    try:
        topic = p.topic.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(f"string is not encodable as UTF-8: {exc.reason}") from None
    return encode_publish(topic, p.payload, p.qos, p.retain, p.dup, p.packet_id, props, version)


def _pid(packet_id: int) -> bytes:
    if not 0 < packet_id <= 0xFFFF:
        raise EncodeError(f"packet id {packet_id} outside 1..65535 [MQTT-2.2.1-3]")
    return packet_id.to_bytes(2, "big")


def _codes(codes: tuple[int, ...]) -> bytes:
    if not codes:
        raise EncodeError("a reason code list must not be empty")
    try:
        return bytes(codes)
    except ValueError:
        raise EncodeError(f"reason codes out of byte range: {codes}") from None


def _empty(props: Properties) -> bool:
    return props is NO_PROPERTIES or props == NO_PROPERTIES


def _props(props: Properties, ptype: int, version: int) -> bytes:
    return encode_properties_block(props, ptype) if version == 5 else b""


def _connect(p: Connect, version: int) -> bytes:
    level = p.protocol_version
    will = p.will
    flags = 0x02 if p.clean_start else 0
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise EncodeError(f"will QoS {will.qos}")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if p.username is not None:
        flags |= 0x80
    if p.password is not None:
        if p.username is None and level < 5:
            raise EncodeError("password without user name before MQTT 5 [MQTT-3.1.2-22]")
        flags |= 0x40
    parts = [
        w.encode_str(p.protocol_name),
        w.encode_u8(level),
        bytes((flags,)),
        w.encode_u16(p.keepalive),
        _props(p.properties, T.CONNECT, level),
        w.encode_str(p.client_id),
    ]
    if will is not None:
        parts += (
            _props(will.properties, WILL, level),
            w.encode_str(will.topic),
            w.encode_bin(will.payload),
        )
    if p.username is not None:
        parts.append(w.encode_str(p.username))
    if p.password is not None:
        parts.append(w.encode_bin(p.password))
    return _frame(0x10, b"".join(parts))


def _connack(p: Connack, version: int) -> bytes:
    if version != 5 and p.reason_code not in V3_CONNACK_CODES:
        raise EncodeError(f"3.1.1 CONNACK return code {p.reason_code}")
    # 3.1 has no session present flag: its first CONNACK byte is reserved
    present = 1 if p.session_present and version != 3 else 0
    head = bytes((present,)) + w.encode_u8(p.reason_code)
    return _frame(0x20, head + _props(p.properties, T.CONNACK, version))


def _ack(first: int, ptype: int) -> _Encoder:
    def encode_ack(p: Puback | Pubrec | Pubrel | Pubcomp, version: int) -> bytes:
        packet_id = p.packet_id
        if version != 5 or (not p.reason_code and p.properties is NO_PROPERTIES):
            if not 0 < packet_id <= 0xFFFF:
                raise EncodeError(f"packet id {packet_id} outside 1..65535 [MQTT-2.2.1-3]")
            return bytes((first, 2, packet_id >> 8, packet_id & 0xFF))  # the common case
        pid = _pid(packet_id)
        if not p.reason_code and _empty(p.properties):
            return _frame(first, pid)
        tail = b"" if _empty(p.properties) else _props(p.properties, ptype, 5)
        return _frame(first, pid + w.encode_u8(p.reason_code) + tail)

    return encode_ack


def _subscribe(p: Subscribe, version: int) -> bytes:
    if not p.subscriptions:
        raise EncodeError("SUBSCRIBE without topic filters [MQTT-3.8.3-3]")
    parts = [_pid(p.packet_id), _props(p.properties, T.SUBSCRIBE, version)]
    for sub in p.subscriptions:
        if sub.qos not in (0, 1, 2) or sub.retain_handling not in (0, 1, 2):
            raise EncodeError(f"invalid subscription options {sub!r}")
        options = sub.qos
        extra = (
            (0x04 if sub.no_local else 0)
            | (0x08 if sub.retain_as_published else 0)
            | (sub.retain_handling << 4)
        )
        if version == 5:
            options |= extra
        elif extra:
            raise EncodeError("subscription options beyond QoS need MQTT 5")
        parts += (w.encode_str(sub.topic_filter), w.encode_u8(options))
    return _frame(0x82, b"".join(parts))


def _suback(p: Suback, version: int) -> bytes:
    head = _pid(p.packet_id) + _props(p.properties, T.SUBACK, version)
    return _frame(0x90, head + _codes(p.reason_codes))


def _unsubscribe(p: Unsubscribe, version: int) -> bytes:
    if not p.topic_filters:
        raise EncodeError("UNSUBSCRIBE without topic filters [MQTT-3.10.3-2]")
    parts = [_pid(p.packet_id), _props(p.properties, T.UNSUBSCRIBE, version)]
    parts += (w.encode_str(f) for f in p.topic_filters)
    return _frame(0xA2, b"".join(parts))


def _unsuback(p: Unsuback, version: int) -> bytes:
    if version != 5:
        return _frame(0xB0, _pid(p.packet_id))
    head = _pid(p.packet_id) + _props(p.properties, T.UNSUBACK, version)
    return _frame(0xB0, head + _codes(p.reason_codes))


def _pingreq(p: Pingreq, version: int) -> bytes:
    return _frame(0xC0, b"")


def _pingresp(p: Pingresp, version: int) -> bytes:
    return _frame(0xD0, b"")


def _reason_and_props(code: int, props: Properties, ptype: int) -> bytes:
    if not code and _empty(props):
        return b""
    tail = b"" if _empty(props) else encode_properties_block(props, ptype)
    return w.encode_u8(code) + tail


def _disconnect(p: Disconnect, version: int) -> bytes:
    if version != 5:
        return _frame(0xE0, b"")
    return _frame(0xE0, _reason_and_props(p.reason_code, p.properties, T.DISCONNECT))


def _auth(p: Auth, version: int) -> bytes:
    if version != 5:
        raise EncodeError("AUTH exists only in MQTT 5")
    return _frame(0xF0, _reason_and_props(p.reason_code, p.properties, T.AUTH))


_ENCODERS: Final[dict[type, _Encoder]] = {
    Connect: _connect,
    Publish: _publish,
    Connack: _connack,
    Puback: _ack(0x40, T.PUBACK),
    Pubrec: _ack(0x50, T.PUBREC),
    Pubrel: _ack(0x62, T.PUBREL),
    Pubcomp: _ack(0x70, T.PUBCOMP),
    Subscribe: _subscribe,
    Suback: _suback,
    Unsubscribe: _unsubscribe,
    Unsuback: _unsuback,
    Pingreq: _pingreq,
    Pingresp: _pingresp,
    Disconnect: _disconnect,
    Auth: _auth,
}
