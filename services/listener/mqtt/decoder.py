"""Sans-IO MQTT decoder: bytes in, packet values out, partial frames kept.

Theory of operation: ``Decoder.feed(data)`` appends to what is left over from the
previous call, cuts complete frames (fixed header byte, Remaining Length, body) and
parses each through the ``PARSERS`` table of its packet type. A frame is checked
against ``max_packet_size`` as soon as its Remaining Length is known, before its body
is buffered, so a peer announcing 200 MB is refused after five bytes.

Buffering is linear, never quadratic: complete frames are parsed straight from the
caller's ``bytes``; a partial frame is copied into a ``bytearray`` once, and further
feeds only append to it until the known frame size (``_need``) is reached, when it is
turned into ``bytes`` once and parsed. Feeding a 1 MB frame byte by byte costs 1 MB of
appends, not 1 TB of copies.

Versions: a CONNECT carries its own protocol level and sets ``protocol_version`` when
it is still unknown; the session may also set it. Other packets are parsed by the
rules of ``protocol_version`` (3.1.1 rules while it is unknown). The decoder does not
enforce packet order (CONNECT first, no second CONNECT); the session does.

Errors: any violation raises an ``MQTTError`` subclass; packets decoded from the same
call before the bad frame are attached as ``error.preceding``. After an error the
stream position is lost and the connection must be closed.

Worked example: ``30 05 00 01 61 68 69`` is PUBLISH QoS 0 (0x30), remaining length 5,
topic "a" (00 01 61), payload b"hi".
"""

from __future__ import annotations

from typing import Final

from ._parsers import FIXED_FLAGS, PARSERS
from .errors import MalformedPacket, MQTTError, PacketTooLarge
from .types import Connect, Packet, PacketType

__all__ = ["Decoder"]

_CONNECT: Final = PacketType.CONNECT


class Decoder:
    """Incremental decoder for one connection's inbound byte stream."""

    __slots__ = ("_buf", "_need", "max_packet_size", "protocol_version")

    def __init__(self, max_packet_size: int | None = None) -> None:
        self.max_packet_size = max_packet_size
        self.protocol_version: int | None = None
        self._buf = bytearray()
        self._need = 0  # bytes the buffered partial frame needs before parsing helps

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back (for flow control and metrics)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Packet]:
        """Decode every complete frame in the stream so far; keep the rest."""
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return []
            data = bytes(self._buf)
            self._buf.clear()
        out: list[Packet] = []
        try:
            pos = self._frames(data, out)
        except MQTTError as err:
            err.preceding = tuple(out)
            self._buf.clear()
            raise
        if pos < len(data):
            self._buf += memoryview(data)[pos:]
        return out

    def _frames(self, data: bytes, out: list[Packet]) -> int:
        """Parse whole frames from ``data`` into ``out``; return where the rest begins."""
        size = len(data)
        pos = 0
        limit = self.max_packet_size
        while size - pos >= 2:
            first = data[pos]
            ptype = first >> 4
            parser = PARSERS.get(ptype)
            if parser is None:
                raise MalformedPacket(f"reserved packet type {ptype}")
            flags = first & 0x0F
            fixed = FIXED_FLAGS[ptype]
            if fixed is not None and flags != fixed:
                raise MalformedPacket(f"{PacketType(ptype).name} flags {flags:04b} [MQTT-2.2.2-2]")
            length = data[pos + 1]
            body = pos + 2
            if length & 0x80:
                length, body = self._long_length(data, pos, size)
                if body < 0:
                    self._need = size - pos + 1
                    return pos
            end = body + length
            if limit is not None and end - pos > limit:
                raise PacketTooLarge(f"packet of {end - pos} bytes exceeds {limit}")
            if end > size:
                self._need = end - pos
                return pos
            version = self.protocol_version
            packet = parser(flags, data, body, end, 4 if version is None else version)
            if ptype == _CONNECT and version is None:
                assert isinstance(packet, Connect)
                self.protocol_version = packet.protocol_version
            out.append(packet)
            pos = end
        self._need = size - pos + 1
        return pos

    @staticmethod
    def _long_length(data: bytes, pos: int, size: int) -> tuple[int, int]:
        """Remaining Length of 2-4 bytes; ``(0, -1)`` when the header is incomplete."""
        value = 0
        shift = 0
        for i in range(1, 5):
            if pos + i >= size:
                return 0, -1
            byte = data[pos + i]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if byte == 0:
                    raise MalformedPacket("remaining length not minimally encoded [MQTT-1.5.5-1]")
                return value, pos + i + 1
            shift += 7
        raise MalformedPacket("remaining length longer than four bytes")
