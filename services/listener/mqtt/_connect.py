"""CONNECT parsing: the one packet that carries its own protocol version.

Theory of operation: the protocol name and level select the rules for the rest of the
packet (``("MQIsdp", 3)``, ``("MQTT", 4)``, ``("MQTT", 5)``; anything else is an
unsupported version, answered with CONNACK return code 1 / reason 0x84). Every error
raised after the level byte is tagged with that level so the session can refuse the
client in its own version. Flag consistency is checked before the payload is read:
reserved bit [MQTT-3.1.2-3], will QoS/retain only with the will flag
[MQTT-3.1.2-11..15], and before MQTT 5 no password without a user name [MQTT-3.1.2-22].
"""

from __future__ import annotations

from . import _wire as w
from .errors import (
    ClientIdRejected,
    MalformedPacket,
    MQTTError,
    ProtocolError,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from .properties import WILL, decode_properties
from .types import NO_PROPERTIES, Connect, PacketType, Will

__all__ = ["parse_connect"]

_PROTOCOLS = {("MQIsdp", 3), ("MQTT", 4), ("MQTT", 5)}


def parse_connect(flags: int, data: bytes, pos: int, end: int, version: int) -> Connect:
    """CONNECT carries its own version; errors past the level byte are tagged with it."""
    name, pos = w.read_str(data, pos, end)
    level, pos = w.read_u8(data, pos, end)
    if (name, level) not in _PROTOCOLS:
        refused = UnsupportedProtocolVersion(f"protocol {name!r} level {level} [MQTT-3.1.2-2]")
        refused.protocol_version = level if level in (3, 4, 5) else None
        raise refused
    try:
        return _connect_body(name, level, data, pos, end)
    except MQTTError as err:
        err.protocol_version = level
        raise


def _connect_body(name: str, level: int, data: bytes, pos: int, end: int) -> Connect:
    cflags, pos = w.read_u8(data, pos, end)
    if cflags & 0x01:
        raise MalformedPacket("CONNECT reserved flag set [MQTT-3.1.2-3]")
    clean = bool(cflags & 0x02)
    has_will = bool(cflags & 0x04)
    will_qos = (cflags >> 3) & 0x03
    will_retain = bool(cflags & 0x20)
    has_password = bool(cflags & 0x40)
    has_username = bool(cflags & 0x80)
    if will_qos == 3:
        raise MalformedPacket("will QoS 3 [MQTT-3.1.2-14]")
    if not has_will and (will_qos or will_retain):
        raise MalformedPacket("will QoS/retain without will flag [MQTT-3.1.2-13,15]")
    if has_password and not has_username and level < 5:
        raise MalformedPacket("password without user name [MQTT-3.1.2-22]")
    keepalive, pos = w.read_u16(data, pos, end)
    props = NO_PROPERTIES
    if level == 5:
        props, pos = decode_properties(data, pos, end, PacketType.CONNECT)
        if props.authentication_data is not None and props.authentication_method is None:
            raise ProtocolError("authentication data without authentication method")
    client_id, pos = w.read_str(data, pos, end)
    if not client_id and (level == 3 or (level == 4 and not clean)):
        raise ClientIdRejected("empty client identifier [MQTT-3.1.3-8]")
    will = None
    if has_will:
        will_props = NO_PROPERTIES
        if level == 5:
            will_props, pos = decode_properties(data, pos, end, WILL)
        topic, pos = w.read_str(data, pos, end)
        if not topic or "+" in topic or "#" in topic:
            raise TopicNameInvalid(f"invalid will topic {topic!r}")
        payload, pos = w.read_bin(data, pos, end)
        will = Will(topic, payload, will_qos, will_retain, will_props)
    username = password = None
    if has_username:
        username, pos = w.read_str(data, pos, end)
    if has_password:
        password, pos = w.read_bin(data, pos, end)
    if pos != end:
        raise MalformedPacket(f"{end - pos} trailing bytes after CONNECT")
    return Connect(name, level, clean, keepalive, client_id, will, username, password, props)
