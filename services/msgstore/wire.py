"""The appends of a ``StoreBatch``, read straight from its wire form (compiled).

Why: the store keeps each append's ``Delivery`` as the bytes it came in, and logs its
``msg_id`` and ``qos``. Through the generated classes that means a wrapper object per
append, key and delivery, then ``SerializeToString`` to get the bytes back, a large
share of the store's cost per message. Here the delivery is a slice of the request and
the rest is read in one pass.

The batch is still parsed by protobuf first (``StoreBatch.FromString``, cheap when
nothing is read from it): that is what validates it — lengths, UTF-8 of every string,
nested messages — so this module only reads bytes protobuf has accepted, and reads
them as protobuf does: unknown fields (groups included) and fields of an unexpected wire
type skipped,
the last of a repeated scalar kept, repeated sub-messages merged (for the delivery,
whose merge is the concatenation of its occurrences, by concatenating them).
``tests/unit/test_msgstore_wire.py`` compares it with the generated classes.
"""

from __future__ import annotations

from typing import Final

# Wire types
_VARINT: Final = 0
_I64: Final = 1
_LEN: Final = 2
_I32: Final = 5
_START_GROUP: Final = 3
_END_GROUP: Final = 4
_MAX_DEPTH: Final = 100
_U64: Final = (1 << 64) - 1


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` (as protobuf keeps it: its low 64 bits) and the position
    after it."""
    result = 0
    shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _U64, pos
        shift += 7


def skip(data: bytes, pos: int, tag: int, depth: int = 0) -> int:
    """The position after the value of a field with ``tag`` that starts at ``pos``. A
    group (wire type 3, proto2's) is skipped to its end, as protobuf keeps one in a proto3
    message as an unknown field (nested at most ``_MAX_DEPTH`` deep, as upb allows)."""
    wire_type = tag & 7
    if wire_type == _VARINT:
        return varint(data, pos)[1]
    if wire_type == _LEN:
        length, pos = varint(data, pos)
        end = pos + length
    elif wire_type == _I64:
        end = pos + 8
    elif wire_type == _I32:
        end = pos + 4
    elif wire_type == _START_GROUP:
        if depth >= _MAX_DEPTH:
            raise ValueError("groups nested too deep")
        while True:
            inner, pos = varint(data, pos)
            if inner & 7 == _END_GROUP:
                if inner >> 3 != tag >> 3:
                    raise ValueError("a group ends with another field's end")
                return pos
            pos = skip(data, pos, inner, depth + 1)
    else:
        raise ValueError(f"unexpected wire type {wire_type}")
    if end > len(data):
        raise ValueError("truncated field")
    return end


def session_key(
    data: bytes, pos: int, end: int, mountpoint: str, client_id: str
) -> tuple[str, str]:
    """A ``SessionKey`` merged into ``(mountpoint, client_id)`` (what it sets wins)."""
    while pos < end:
        tag, pos = varint(data, pos)
        if tag == 0x0A or tag == 0x12:  # 1 mountpoint, 2 client_id: strings
            length, pos = varint(data, pos)
            text = data[pos : pos + length].decode()
            pos += length
            if tag == 0x0A:
                mountpoint = text
            else:
                client_id = text
        else:
            pos = skip(data, pos, tag)
    return mountpoint, client_id


def message_id(data: bytes, pos: int, end: int, msg_id: str) -> str:
    """``msg_id`` (field 1) of an ``MqttMessage``, or the one given if it has none."""
    while pos < end:
        tag, pos = varint(data, pos)
        if tag == 0x0A:
            length, pos = varint(data, pos)
            msg_id = data[pos : pos + length].decode()
            pos += length
        else:
            pos = skip(data, pos, tag)
    return msg_id


def delivery_head(data: bytes, pos: int, end: int, msg_id: str, qos: int) -> tuple[str, int]:
    """``(msg.msg_id, qos)`` of a ``Delivery``, merged into the ones given."""
    while pos < end:
        tag, pos = varint(data, pos)
        if tag == 0x0A:  # 1 msg
            length, pos = varint(data, pos)
            msg_id = message_id(data, pos, pos + length, msg_id)
            pos += length
        elif tag == 0x10:  # 2 qos
            qos, pos = varint(data, pos)
        else:
            pos = skip(data, pos, tag)
    return msg_id, qos


class WireAppend:
    """One ``Append``: its session, epoch, ``offline`` flag and ``Delivery`` bytes, and the
    delivery's ``msg_id`` and ``qos`` when asked for (``read`` with ``head``)."""

    __slots__ = ("client_id", "delivery", "epoch", "mountpoint", "msg_id", "offline", "qos")

    def __init__(self) -> None:
        self.mountpoint = ""
        self.client_id = ""
        self.epoch = 0
        self.delivery = b""
        self.msg_id = ""
        self.qos = 0
        self.offline = False

    def read(self, data: bytes, pos: int, end: int, head: bool) -> None:
        parts: list[bytes] = []
        while pos < end:
            tag, pos = varint(data, pos)
            if tag == 0x0A:  # 1 key
                length, pos = varint(data, pos)
                self.mountpoint, self.client_id = session_key(
                    data, pos, pos + length, self.mountpoint, self.client_id
                )
                pos += length
            elif tag == 0x10:  # 2 epoch
                self.epoch, pos = varint(data, pos)
            elif tag == 0x1A:  # 3 delivery
                length, pos = varint(data, pos)
                parts.append(data[pos : pos + length])
                if head:
                    self.msg_id, self.qos = delivery_head(
                        data, pos, pos + length, self.msg_id, self.qos
                    )
                pos += length
            elif tag == 0x20:  # 4 offline
                value, pos = varint(data, pos)
                self.offline = value != 0
            else:
                pos = skip(data, pos, tag)
        self.delivery = parts[0] if len(parts) == 1 else b"".join(parts)


def appends(data: bytes, head: bool) -> list[WireAppend]:
    """The appends (field 2) of a serialized ``StoreBatch``, in order."""
    out: list[WireAppend] = []
    pos = 0
    end = len(data)
    while pos < end:
        tag, pos = varint(data, pos)
        if tag == 0x12:
            length, pos = varint(data, pos)
            if pos + length > end:
                raise ValueError("truncated append")
            append = WireAppend()
            append.read(data, pos, pos + length, head)
            out.append(append)
            pos += length
        else:
            pos = skip(data, pos, tag)
    return out
