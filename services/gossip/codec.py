"""Binary encoding of stored records: engine keys and versioned record values.

Theory of operation
-------------------
Engine keys: ``prefix 0x00 key``, so all keys of one prefix sort together (a prefix
scan is a range). LMDB limits keys to 511 bytes but a retained topic may be 64 KiB, so
a key longer than :data:`MAX_INLINE_KEY` is stored as ``prefix 0x01 sha256(key)``
instead; prefix names contain neither byte, so the two forms never collide. The value
carries the real prefix and key, so loading never needs to invert the engine key.

Values: the record — prefix, key and a DVV set of
:class:`~services.gossip.crdt.lww.Stamped` envelopes — in a small length-prefixed
format with a leading format byte, so that a later format can be read next to this one.
The same bytes are what anti-entropy will send to peers, so :func:`decode_record`
validates everything and raises :class:`CodecError` (never an ``IndexError`` or a
broken DVV) on garbage::

    record  := FORMAT(1) str(prefix) bytes(key) uvarint(n) entry{n}
    entry   := str(node) uvarint(counter) uvarint(m) stamped{m}
    stamped := svarint(ts_us) str(node) flag(1: 0 deleted, 1 live) [bytes(value) if live]
    str     := bytes(utf-8)          bytes := uvarint(len) raw
"""

from __future__ import annotations

import hashlib

from services.gossip.crdt import dvv
from services.gossip.crdt.dvv import DVVSet, Entry
from services.gossip.crdt.lww import Stamped

FORMAT = 1
MAX_INLINE_KEY = 400
_INT64 = 1 << 63


class CodecError(ValueError):
    """Stored or received bytes that are not a valid record."""


def record_key(prefix: str, key: bytes) -> bytes:
    """The engine key of ``(prefix, key)``: unique, short enough for LMDB, prefix-grouped."""
    if len(key) <= MAX_INLINE_KEY:
        return prefix.encode() + b"\x00" + key
    return prefix.encode() + b"\x01" + hashlib.sha256(key).digest()


def prefix_range(prefix: str) -> tuple[bytes, bytes]:
    """``[start, end)`` of the engine keys of one prefix."""
    return prefix.encode() + b"\x00", prefix.encode() + b"\x02"


def _uvarint(out: bytearray, n: int) -> None:
    if n < 0:
        raise ValueError(f"uvarint of a negative number {n}")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _bytes(out: bytearray, data: bytes) -> None:
    _uvarint(out, len(data))
    out += data


def encode_record(prefix: str, key: bytes, clock: DVVSet[Stamped]) -> bytes:
    out = bytearray([FORMAT])
    _bytes(out, prefix.encode())
    _bytes(out, key)
    _uvarint(out, len(clock.entries))
    for e in clock.entries:
        _bytes(out, e.node.encode())
        _uvarint(out, e.counter)
        _uvarint(out, len(e.values))
        for s in e.values:
            if not -_INT64 <= s.ts_us < _INT64:
                raise ValueError(f"timestamp {s.ts_us} out of the int64 range")
            _uvarint(out, (s.ts_us << 1) ^ (s.ts_us >> 63))  # zigzag: small negatives stay small
            _bytes(out, s.node.encode())
            if s.value is None:
                out.append(0)
            else:
                out.append(1)
                _bytes(out, s.value)
    return bytes(out)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise CodecError("truncated record")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uvarint(self) -> int:
        n = shift = 0
        while True:
            b = self.byte()
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                # one value, one byte form: a record re-encodes to exactly its bytes
                if b == 0 and shift:
                    raise CodecError("overlong varint")
                if n >> 64:
                    raise CodecError("varint longer than 64 bits")
                return n
            shift += 7
            if shift > 63:
                raise CodecError("varint longer than 64 bits")

    def raw(self) -> bytes:
        size = self.uvarint()
        end = self.pos + size
        if end > len(self.data):
            raise CodecError("truncated record")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def text(self) -> str:
        try:
            return self.raw().decode()
        except UnicodeDecodeError:
            raise CodecError("name is not UTF-8") from None


def _stamped(r: _Reader) -> Stamped:
    z = r.uvarint()
    ts = (z >> 1) ^ -(z & 1)
    node = r.text()
    flag = r.byte()
    if flag not in (0, 1):
        raise CodecError(f"bad value flag {flag}")
    return Stamped(ts, node, r.raw() if flag else None)


def decode_record(data: bytes) -> tuple[str, bytes, DVVSet[Stamped]]:
    """Inverse of :func:`encode_record`; :class:`CodecError` on anything malformed."""
    r = _Reader(data)
    fmt = r.byte()
    if fmt != FORMAT:
        raise CodecError(f"unknown record format {fmt}")
    prefix = r.text()
    key = r.raw()
    entries = []
    for _ in range(r.uvarint()):
        node = r.text()
        counter = r.uvarint()
        count = r.uvarint()
        if count > counter:
            raise CodecError(f"entry {node!r}: {count} values for counter {counter}")
        entries.append(Entry(node, counter, tuple(_stamped(r) for _ in range(count))))
    if r.pos != len(data):
        raise CodecError(f"{len(data) - r.pos} trailing bytes")
    try:
        return prefix, key, dvv.check(DVVSet(tuple(entries)))
    except dvv.InvalidDVV as exc:
        raise CodecError(str(exc)) from None


def encode_uint(n: int) -> bytes:
    return n.to_bytes(8, "big")


def decode_uint(data: bytes) -> int:
    if len(data) != 8:
        raise CodecError(f"expected 8 bytes, got {len(data)}")
    return int.from_bytes(data, "big")
