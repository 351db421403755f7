"""A primary's ``ReplicaAppend`` written straight in protobuf's wire format (compiled).

Why: every entry a primary sends went through the generated classes — an
``entries.add`` with three fields, the message's ``ByteSize`` for the batcher, a copy of
every append into the ``ReplicaAppends`` of the call, then ``SerializeToString`` — on the
CPU that bounds replicated throughput. Here an append is bytes from the start, and a call
is its appends' bytes joined.

The bytes are exactly what protobuf writes for the same message (fields in number order,
zeros and empty values left out, repeated integers packed), so a replica reads them with
the generated classes as before; ``tests/unit/test_msgstore_replica_wire.py`` holds the
two byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

_SMALL: Final = [bytes((n,)) for n in range(0x80)]


def varint(n: int) -> bytes:
    """Base-128 varint of an unsigned integer below 2**64."""
    if n < 0x80:
        if n < 0:
            raise ValueError(f"varint of a negative number: {n}")
        return _SMALL[n]
    if n >= 1 << 64:
        raise ValueError(f"varint of a number over 64 bits: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _len_field(tag: bytes, data: bytes) -> bytes:
    return tag + varint(len(data)) + data


def _uint(tag: bytes, n: int) -> bytes:
    return tag + varint(n) if n else b""


def _packed(tag: bytes, values: Sequence[int]) -> bytes:
    if not values:
        return b""
    return _len_field(tag, b"".join([varint(v) for v in values]))


def entry(epoch: int, seq: int, delivery: bytes) -> bytes:
    """One ``ReplicaEntry`` as field 6 of its append."""
    body = _uint(b"\x08", epoch) + _uint(b"\x10", seq)
    if delivery:
        body += b"\x1a" + varint(len(delivery)) + delivery
    return b"\x32" + varint(len(body)) + body


def append(
    mountpoint: str,
    client_id: str,
    epoch: int,
    prev: tuple[int, int],
    install: bool,
    entries: bytes,
    acked: int,
    max_len: int,
    replicas: Sequence[str],
    state: tuple[int, Sequence[int], Sequence[int], int, int] | None = None,
) -> bytes:
    """A ``ReplicaAppend``; ``entries`` is its :func:`entry` fields joined, ``state`` the
    delivery state when it is sent: (delivered_upto, inbound QoS 2 ids, outbound PUBREL
    seqs, state_epoch, state_stamp)."""
    key = b""
    if mountpoint:
        key += _len_field(b"\x0a", mountpoint.encode())
    if client_id:
        key += _len_field(b"\x12", client_id.encode())
    parts = [
        _len_field(b"\x0a", key),
        _uint(b"\x10", epoch),
        _uint(b"\x18", prev[0]),
        _uint(b"\x20", prev[1]),
        b"\x28\x01" if install else b"",
        entries,
        _uint(b"\x38", acked),
        _uint(b"\x40", max_len),
    ]
    for name in replicas:
        parts.append(_len_field(b"\x4a", name.encode()))
    if state is not None:
        delivered, inbound, pubrel, state_epoch, state_stamp = state
        parts += [
            b"\x50\x01",
            _uint(b"\x58", delivered),
            _packed(b"\x62", inbound),
            _packed(b"\x6a", pubrel),
            _uint(b"\x70", state_epoch),
            _uint(b"\x78", state_stamp),
        ]
    return b"".join(parts)


def appends(items: Sequence[bytes]) -> bytes:
    """A ``ReplicaAppends`` of appends written by :func:`append`."""
    return b"".join([_len_field(b"\x0a", a) for a in items])
