"""MQTT bytes built by hand, and a frame splitter for what the broker sends back.

The fuzzer does not use the broker's own codec: a generator that shares the code under
test would agree with its bugs. Everything here follows the spec's layouts (MQTT 3.1.1
§2-3, MQTT 5.0 §2-3), byte for byte, and is pure: no sockets, no clock.

Worked example: ``frame(0x30, string("a/b") + b"hi")`` is a QoS 0 PUBLISH of ``hi`` to
``a/b``; ``Frames().feed(b"\\x20\\x02\\x00\\x00")`` returns ``[(0x20, b"\\x00\\x00")]``,
a CONNACK accepted.
"""

from __future__ import annotations

MAX_REMAINING = 268_435_455  # the largest Remaining Length a 4-byte varint holds


def varint(value: int) -> bytes:
    """Variable Byte Integer, minimally encoded (values above 2**28-1 make 5+ bytes, which
    is exactly the malformed length a mutator wants)."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def u16(value: int) -> bytes:
    return (value & 0xFFFF).to_bytes(2, "big")


def u32(value: int) -> bytes:
    return (value & 0xFFFFFFFF).to_bytes(4, "big")


def string(raw: bytes | str) -> bytes:
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    return u16(len(data)) + data


def frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + varint(len(body)) + body


def header_len(packet: bytes) -> int:
    """Bytes of the fixed header (type byte + Remaining Length) of a well-formed packet."""
    n = 1
    while n < len(packet) and n < 5 and packet[n] & 0x80:
        n += 1
    return n + 1


# -- MQTT 5 properties ----------------------------------------------------------------
# Identifier -> value kind; the generator only writes ones valid for the packet at hand.
BYTE, U16, U32, VARINT, STRING, BINARY, PAIR = range(7)

KIND = {
    0x01: BYTE,  # payload format indicator
    0x02: U32,  # message expiry interval
    0x03: STRING,  # content type
    0x08: STRING,  # response topic
    0x09: BINARY,  # correlation data
    0x0B: VARINT,  # subscription identifier
    0x11: U32,  # session expiry interval
    0x15: STRING,  # authentication method
    0x16: BINARY,  # authentication data
    0x17: BYTE,  # request problem information
    0x18: U32,  # will delay interval
    0x19: BYTE,  # request response information
    0x1F: STRING,  # reason string
    0x21: U16,  # receive maximum
    0x22: U16,  # topic alias maximum
    0x23: U16,  # topic alias
    0x26: PAIR,  # user property
    0x27: U32,  # maximum packet size
}


def prop(identifier: int, value: int | bytes | str | tuple[str, str]) -> bytes:
    kind = KIND[identifier]
    head = bytes((identifier,))
    if kind == PAIR:
        assert isinstance(value, tuple)
        return head + string(value[0]) + string(value[1])
    if kind in (STRING, BINARY):
        assert isinstance(value, bytes | str)
        return head + string(value)
    assert isinstance(value, int)
    if kind == BYTE:
        return head + bytes((value & 0xFF,))
    if kind == U16:
        return head + u16(value)
    if kind == U32:
        return head + u32(value)
    return head + varint(value)


def props(*encoded: bytes) -> bytes:
    """A property block: its length, then the properties."""
    body = b"".join(encoded)
    return varint(len(body)) + body


# -- reading the broker's answers ------------------------------------------------------


class Malformed(ValueError):
    """The broker sent bytes that are not an MQTT frame."""


class Frames:
    """Splits a byte stream into ``(first byte, body)`` frames; keeps partial ones."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self.buf += data
        out: list[tuple[int, bytes]] = []
        while True:
            parsed = self._one()
            if parsed is None:
                return out
            out.append(parsed)

    def _one(self) -> tuple[int, bytes] | None:
        buf = self.buf
        length, shift, pos = 0, 0, 1
        while True:
            if pos >= len(buf):
                return None
            byte = buf[pos]
            length |= (byte & 0x7F) << shift
            pos += 1
            if not byte & 0x80:
                break
            shift += 7
            if shift > 21:
                raise Malformed(f"remaining length of more than 4 bytes: {bytes(buf[:6])!r}")
        if len(buf) < pos + length:
            return None
        first, body = buf[0], bytes(buf[pos : pos + length])
        del buf[: pos + length]
        return first, body
