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

The replica reads a ``ReplicaAppends`` by hand too (:func:`read_appends`): through the
generated classes every entry was three attribute reads on a wrapper object made for
it. The batch is still parsed by protobuf first (``ReplicaAppends.FromString``, cheap
when nothing is read from it), which validates it: lengths, UTF-8, nesting. This module
then reads only bytes protobuf accepted, as protobuf reads them: fields in any order,
unknown fields and fields of an unexpected wire type skipped, the last of a scalar
kept (``max_len`` cut to 32 bits), repeated integers packed or not, the key's
occurrences merged, a bytes field's last occurrence kept.
``tests/unit/test_msgstore_replica_wire.py`` compares it with the generated classes on
valid, bit-flipped and truncated input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from services.msgstore.model import ReplicaWrite
from services.msgstore.wire import skip as _skip
from services.msgstore.wire import varint as read_varint

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


def entries(positions: Sequence[tuple[int, int]], datas: Mapping[int, bytes]) -> bytes:
    """The :func:`entry` fields of ``positions`` (epoch, seq) joined, each with its
    message from ``datas`` (none when it is not there: acknowledged, or dropped)."""
    return b"".join([entry(epoch, seq, datas.get(seq, b"")) for epoch, seq in positions])


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


# -- reading (the replica's side) ---------------------------------------------------

_U32: Final = (1 << 32) - 1


def _span(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A length-delimited value at ``pos``: where it starts and ends."""
    length, pos = read_varint(data, pos)
    if pos + length > end:
        raise ValueError("truncated field")
    return pos, pos + length


def _key(data: bytes, pos: int, end: int, key: tuple[str, str]) -> tuple[str, str]:
    """A ``SessionKey`` merged into ``key`` (what it sets wins)."""
    mountpoint, client_id = key
    while pos < end:
        tag, pos = read_varint(data, pos)
        if tag == 0x0A or tag == 0x12:  # 1 mountpoint, 2 client_id
            start, pos = _span(data, pos, end)
            if tag == 0x0A:
                mountpoint = data[start:pos].decode()
            else:
                client_id = data[start:pos].decode()
        else:
            pos = _skip(data, pos, tag)
    return mountpoint, client_id


def _entry(data: bytes, pos: int, end: int) -> tuple[int, int, bytes]:
    """A ``ReplicaEntry``: (epoch, seq, delivery)."""
    epoch = seq = 0
    delivery = b""
    while pos < end:
        tag, pos = read_varint(data, pos)
        if tag == 0x08:
            epoch, pos = read_varint(data, pos)
        elif tag == 0x10:
            seq, pos = read_varint(data, pos)
        elif tag == 0x1A:
            start, pos = _span(data, pos, end)
            delivery = data[start:pos]
        else:
            pos = _skip(data, pos, tag)
    return epoch, seq, delivery


def _ints(data: bytes, pos: int, end: int, out: list[int]) -> None:
    """Packed varints from ``pos`` to ``end``, added to ``out``."""
    while pos < end:
        value, pos = read_varint(data, pos)
        out.append(value)
    if pos != end:
        raise ValueError("packed field overruns")


def _append(data: bytes, pos: int, end: int) -> ReplicaWrite:
    """One ``ReplicaAppend`` as the store's job (``cluster.servicer.replica_write``)."""
    key = ("", "")
    epoch = prev_epoch = prev_seq = acked = max_len = 0
    delivered = state_epoch = state_stamp = 0
    install = has_state = False
    entries: list[tuple[int, int, bytes]] = []
    replicas: list[str] = []
    inbound: list[int] = []
    pubrel: list[int] = []
    while pos < end:
        tag, pos = read_varint(data, pos)
        field = tag >> 3
        wire = tag & 7
        if wire == 0:
            if field in (12, 13):
                value, pos = read_varint(data, pos)
                (inbound if field == 12 else pubrel).append(value)
                continue
            value, pos = read_varint(data, pos)
            if field == 2:
                epoch = value
            elif field == 3:
                prev_epoch = value
            elif field == 4:
                prev_seq = value
            elif field == 5:
                install = value != 0
            elif field == 7:
                acked = value
            elif field == 8:
                max_len = value & _U32
            elif field == 10:
                has_state = value != 0
            elif field == 11:
                delivered = value
            elif field == 14:
                state_epoch = value
            elif field == 15:
                state_stamp = value
        elif wire == 2:
            start, pos = _span(data, pos, end)
            if field == 6:
                entries.append(_entry(data, start, pos))
            elif field == 1:
                key = _key(data, start, pos, key)
            elif field == 9:
                replicas.append(data[start:pos].decode())
            elif field == 12:
                _ints(data, start, pos, inbound)
            elif field == 13:
                _ints(data, start, pos, pubrel)
        else:
            pos = _skip(data, pos, tag)
    return ReplicaWrite(
        key,
        epoch,
        (prev_epoch, prev_seq),
        tuple(entries),
        install,
        acked,
        max_len,
        tuple(replicas),
        (delivered, tuple(inbound), tuple(pubrel)) if has_state else None,
        (state_epoch, state_stamp),
    )


def read_appends(data: bytes) -> list[ReplicaWrite]:
    """The appends of a serialized ``ReplicaAppends`` (one protobuf accepted), in order,
    as the store's jobs."""
    out: list[ReplicaWrite] = []
    pos = 0
    end = len(data)
    while pos < end:
        tag, pos = read_varint(data, pos)
        if tag == 0x0A:
            start, pos = _span(data, pos, end)
            out.append(_append(data, start, pos))
        else:
            pos = _skip(data, pos, tag)
    return out
