"""MQTT data representations (spec section 1.5): the primitive readers and writers.

Theory of operation: readers take ``(data, pos, end)`` and return ``(value, new_pos)``,
never reading past ``end`` (the end of the current packet, not of the buffer), and
raise ``MalformedPacket`` for anything short or ill-formed. Working on offsets into
one ``bytes`` object avoids copying a frame before its fields are sliced out. Writers
return ``bytes`` and raise ``EncodeError`` for values the wire cannot carry.

Worked example: the string "a/b" is ``00 03 61 2F 62``; the Variable Byte Integer 321
is ``C1 02`` (0x41 + 0x80, then 2; 0x41 + 2*128 = 321).
"""

from __future__ import annotations

import struct

from .errors import EncodeError, MalformedPacket

MAX_VARINT = 268_435_455  # 0xFF 0xFF 0xFF 0x7F, the largest four-byte varint
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


def read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Variable Byte Integer, at most four bytes and minimally encoded [MQTT-1.5.5-1]."""
    value = 0
    shift = 0
    for i in range(4):
        if pos >= end:
            raise MalformedPacket("truncated variable byte integer")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if byte == 0 and i > 0:
                raise MalformedPacket("variable byte integer not minimally encoded")
            return value, pos
        shift += 7
    raise MalformedPacket("variable byte integer longer than four bytes")


def read_u8(data: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos >= end:
        raise MalformedPacket("truncated byte")
    return data[pos], pos + 1


def read_u16(data: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise MalformedPacket("truncated two byte integer")
    return (data[pos] << 8) | data[pos + 1], pos + 2


def read_u32(data: bytes, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise MalformedPacket("truncated four byte integer")
    return _U32.unpack_from(data, pos)[0], pos + 4


def read_bin(data: bytes, pos: int, end: int) -> tuple[bytes, int]:
    if pos + 2 > end:
        raise MalformedPacket("truncated binary data length")
    stop = pos + 2 + ((data[pos] << 8) | data[pos + 1])
    if stop > end:
        raise MalformedPacket("binary data overruns the packet")
    return data[pos + 2 : stop], stop


def decode_utf8(raw: bytes) -> str:
    """MQTT UTF-8: well-formed, no surrogates [MQTT-1.5.4-1], no U+0000 [MQTT-1.5.4-2]."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedPacket(f"invalid UTF-8 string: {exc.reason}") from None
    if "\x00" in text:
        raise MalformedPacket("U+0000 in UTF-8 string [MQTT-1.5.4-2]")
    return text


def read_str(data: bytes, pos: int, end: int) -> tuple[str, int]:
    raw, pos = read_bin(data, pos, end)
    return decode_utf8(raw), pos


def read_pair(data: bytes, pos: int, end: int) -> tuple[tuple[str, str], int]:
    key, pos = read_str(data, pos, end)
    value, pos = read_str(data, pos, end)
    return (key, value), pos


def encode_varint(value: int) -> bytes:
    if not 0 <= value <= MAX_VARINT:
        raise EncodeError(f"{value} does not fit a variable byte integer")
    if value < 0x80:
        return bytes((value,))
    # gathered in an int, written once: compiled, a quarter of a bytearray's cost
    acc = 0
    shift = 0
    while value >= 0x80:
        acc |= ((value & 0x7F) | 0x80) << shift
        shift += 8
        value >>= 7
    return (acc | value << shift).to_bytes((shift >> 3) + 1, "little")


def encode_u8(value: int) -> bytes:
    if not 0 <= value <= 0xFF:
        raise EncodeError(f"{value} does not fit a byte")
    return bytes((value,))


def encode_u16(value: int) -> bytes:
    if not 0 <= value <= 0xFFFF:
        raise EncodeError(f"{value} does not fit a two byte integer")
    return _U16.pack(value)


def encode_u32(value: int) -> bytes:
    if not 0 <= value <= 0xFFFFFFFF:
        raise EncodeError(f"{value} does not fit a four byte integer")
    return _U32.pack(value)


def encode_bin(value: bytes) -> bytes:
    if len(value) > 0xFFFF:
        raise EncodeError("binary data longer than 65535 bytes")
    return _U16.pack(len(value)) + value


def encode_str(value: str) -> bytes:
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodeError(f"string is not encodable as UTF-8: {exc.reason}") from None
    return encode_bin(raw)


def encode_pair(value: tuple[str, str]) -> bytes:
    return encode_str(value[0]) + encode_str(value[1])
