"""A ``ForwardBatch`` read by hand, compiled, straight into the broker's own values.

Why not the generated classes: reading a copy through them costs an attribute lookup by
name and a new Python object per field, about twenty per copy (its ``Forwarded`` and its
``MqttMessage``). In a cross-node QoS 0 run that was a fifth of the receiving listener's
CPU (perf, 2026-11-27). The sender already writes these messages by hand
(``convert.forward_batch``); this is the other half.

It reads what any protobuf writer may write for these messages: fields in any order, a
repeated scalar packed or not, a later singular field replacing an earlier one, unknown
fields skipped by their wire type. Malformed input raises :class:`WireError` (a sender's
bug or a corrupt stream: the stream ends, and the sender dials again and resends).
``tests/unit/test_forward_wire.py`` checks it against the generated classes.
"""

from __future__ import annotations

from typing import Final

from services.listener.mqtt.types import NO_PROPERTIES, Properties
from services.listener.session.messages import Message

_US: Final = 1_000_000  # an int: int / int rounds once, as convert.message_from_pb does
_VARINT: Final = 0
_FIXED64: Final = 1
_LEN: Final = 2
_START_GROUP: Final = 3
_END_GROUP: Final = 4
_FIXED32: Final = 5
_INT64_SIGN: Final = 1 << 63
_INT64_WRAP: Final = 1 << 64
_SHORT: Final = (1 << 62) - 1  # the largest int a compiled module keeps unboxed
_NO_IDS: Final[tuple[int, ...]] = ()
_U32: Final = 0xFFFFFFFF
_MAX_DEPTH: Final = 100  # nested groups, as upb allows
_U64: Final = 0xFFFFFFFFFFFFFFFF


class WireError(ValueError):
    """Bytes that are not the message they were read as."""


class ForwardedIn:
    """One ``Forwarded`` copy as the broker takes it: its message already a ``Message``."""

    __slots__ = ("client_id", "message", "mountpoint", "qos", "retain", "seq", "share", "sub_ids")

    def __init__(
        self,
        seq: int,
        mountpoint: str,
        client_id: str,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        message: Message,
        share: str,
    ) -> None:
        self.seq = seq
        self.mountpoint = mountpoint
        self.client_id = client_id
        self.qos = qos
        self.retain = retain
        self.sub_ids = sub_ids
        self.message = message
        self.share = share


class BatchIn:
    """One ``ForwardBatch``: who sent it, what it heard, and its copies in order."""

    __slots__ = ("acked", "heard", "incarnation", "items", "resent_upto", "sender")

    def __init__(
        self,
        sender: str,
        incarnation: int,
        acked: int,
        items: list[ForwardedIn],
        resent_upto: int,
        heard: list[int],
    ) -> None:
        self.sender = sender
        self.incarnation = incarnation
        self.acked = acked
        self.items = items
        self.resent_upto = resent_upto
        self.heard = heard


def varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    if pos < end:
        b = data[pos]
        if b < 0x80:  # most tags, lengths and small values
            return b, pos + 1
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise WireError("a varint runs past its message")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            # Only a tenth byte (shift 63) can carry bits past 64, which protobuf drops;
            # masking every value would take the bignum path for nothing.
            return (result & _U64 if shift == 63 else result), pos
        shift += 7
        if shift > 63:
            raise WireError("a varint longer than ten bytes")


def _tag(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """The field number and wire type of the tag at ``pos``, and the position after it."""
    tag, pos = varint(data, pos, end)
    if tag < 8 or tag > _U32:
        raise WireError(f"tag {tag}: field number 0, or over 2**29 - 1")
    return tag >> 3, tag & 7, pos


def _span(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A length-delimited field's (start, stop), its length read at ``pos``."""
    n, pos = varint(data, pos, end)
    stop = pos + n
    if stop > end:
        raise WireError("a field runs past its message")
    return pos, stop


def _text(data: bytes, start: int, stop: int) -> str:
    try:
        return data[start:stop].decode()
    except UnicodeDecodeError as exc:
        raise WireError(f"a string field is not UTF-8: {exc.reason}") from None


def _skip(data: bytes, pos: int, end: int, field: int, wire_type: int, depth: int = 0) -> int:
    """The position after the value of a field not read here (unknown, or known with a
    wire type it does not have: protobuf skips both)."""
    if wire_type == _VARINT:
        return varint(data, pos, end)[1]
    if wire_type == _LEN:
        return _span(data, pos, end)[1]
    if wire_type == _FIXED64:
        pos += 8
    elif wire_type == _FIXED32:
        pos += 4
    elif wire_type == _START_GROUP:
        if depth >= _MAX_DEPTH:
            raise WireError("groups nested too deep")
        while True:
            inner, kind, pos = _tag(data, pos, end)
            if kind == _END_GROUP:
                if inner != field:
                    raise WireError("a group ends with another field's end")
                return pos
            pos = _skip(data, pos, end, inner, kind, depth + 1)
    else:
        raise WireError(f"wire type {wire_type} where a field starts")
    if pos > end:
        raise WireError("a fixed-size field runs past its message")
    return pos


def _int64(n: int) -> int:
    if n <= _SHORT:  # a time in µs: compared without the bignum path
        return n
    return n - _INT64_WRAP if n >= _INT64_SIGN else n


def _repeated(data: bytes, pos: int, end: int, wire_type: int, into: list[int]) -> int:
    """One occurrence of a repeated integer field, packed or not: appended to ``into``."""
    if wire_type == _VARINT:
        n, pos = varint(data, pos, end)
        into.append(n)
        return pos
    start, stop = _span(data, pos, end)
    while start < stop:
        n, start = varint(data, start, stop)
        into.append(n)
    return stop


def read_message(data: bytes, pos: int, end: int) -> Message:
    """An ``MqttMessage`` from ``data[pos:end]``, as ``convert.message_from_pb`` makes it."""
    msg_id = topic = mountpoint = publisher = ""
    content_type = response_topic = ""
    payload = correlation = b""
    qos = 0
    retain = False
    published_us = expires_us = 0
    payload_format = -1  # unset: the field has presence
    users: list[tuple[str, str]] = []
    while pos < end:
        field, kind, pos = _tag(data, pos, end)
        if kind == _LEN and (field <= 4 or 7 <= field <= 8 or 12 <= field <= 15):
            start, stop = _span(data, pos, end)
            pos = stop
            if field == 1:
                msg_id = _text(data, start, stop)
            elif field == 2:
                topic = _text(data, start, stop)
            elif field == 3:
                mountpoint = _text(data, start, stop)
            elif field == 4:
                payload = data[start:stop]
            elif field == 7:
                publisher = _text(data, start, stop)
            elif field == 8:
                _text(data, start, stop)  # origin_node: not kept, but it must be UTF-8
            elif field == 12:
                content_type = _text(data, start, stop)
            elif field == 13:
                response_topic = _text(data, start, stop)
            elif field == 14:
                correlation = data[start:stop]
            else:
                users.append(_user_property(data, start, stop))
        elif kind == _VARINT and (5 <= field <= 6 or 9 <= field <= 11):
            value, pos = varint(data, pos, end)
            if field == 5:
                qos = value & _U32
            elif field == 6:
                retain = value != 0
            elif field == 9:
                published_us = _int64(value)
            elif field == 10:
                expires_us = _int64(value)
            else:
                payload_format = value & _U32
        else:
            pos = _skip(data, pos, end, field, kind)
    props = NO_PROPERTIES
    if payload_format >= 0 or content_type or response_topic or correlation or users:
        props = Properties(
            payload_format_indicator=payload_format if payload_format >= 0 else None,
            content_type=content_type or None,
            response_topic=response_topic or None,
            correlation_data=correlation or None,
            user_properties=tuple(users),
        )
    return Message(
        msg_id,
        topic,
        payload,
        qos,
        retain,
        publisher,
        mountpoint,
        published_us / _US,
        expires_us / _US if expires_us else None,
        props,
    )


def _user_property(data: bytes, pos: int, end: int) -> tuple[str, str]:
    key = value = ""
    while pos < end:
        field, kind, pos = _tag(data, pos, end)
        if kind == _LEN and field in (1, 2):
            start, stop = _span(data, pos, end)
            pos = stop
            if field == 1:
                key = _text(data, start, stop)
            else:
                value = _text(data, start, stop)
        else:
            pos = _skip(data, pos, end, field, kind)
    return key, value


def read_forwarded(data: bytes, pos: int, end: int) -> ForwardedIn:
    """A ``Forwarded`` from ``data[pos:end]``."""
    seq = qos = 0
    mountpoint = client_id = share = ""
    retain = False
    ids: list[int] = []
    m_start = m_stop = -1  # where the message is
    parts: list[bytes] | None = None  # a message written in parts, which protobuf merges
    while pos < end:
        field, kind, pos = _tag(data, pos, end)
        if field == 6 and kind in (_VARINT, _LEN):
            pos = _repeated(data, pos, end, kind, ids)
        elif kind == _LEN and field in (2, 3, 7, 8):
            start, stop = _span(data, pos, end)
            pos = stop
            if field == 2:
                mountpoint = _text(data, start, stop)
            elif field == 3:
                client_id = _text(data, start, stop)
            elif field == 7:
                if m_start < 0:
                    m_start, m_stop = start, stop
                else:
                    if parts is None:
                        parts = [data[m_start:m_stop]]
                    parts.append(data[start:stop])
            else:
                share = _text(data, start, stop)
        elif kind == _VARINT and field in (1, 4, 5):
            value, pos = varint(data, pos, end)
            if field == 1:
                seq = value
            elif field == 4:
                qos = value & _U32
            else:
                retain = value != 0
        else:
            pos = _skip(data, pos, end, field, kind)
    if parts is not None:  # read as their concatenation, which is what merging means
        whole = b"".join(parts)
        message = read_message(whole, 0, len(whole))
    else:  # in one part, or absent (the empty message)
        message = read_message(data, m_start, m_stop) if m_start >= 0 else read_message(b"", 0, 0)
    sub_ids = tuple([i & _U32 for i in ids]) if ids else _NO_IDS
    return ForwardedIn(seq, mountpoint, client_id, qos, retain, sub_ids, message, share)


def read_batch(data: bytes) -> BatchIn:
    """A whole ``ForwardBatch``, as one stream message carries it."""
    pos = 0
    end = len(data)
    sender = ""
    incarnation = acked = resent_upto = 0
    items: list[ForwardedIn] = []
    heard: list[int] = []
    while pos < end:
        field, kind, pos = _tag(data, pos, end)
        if field == 6 and kind in (_VARINT, _LEN):
            pos = _repeated(data, pos, end, kind, heard)
        elif kind == _LEN and field in (1, 4):
            start, stop = _span(data, pos, end)
            pos = stop
            if field == 4:
                items.append(read_forwarded(data, start, stop))
            else:
                sender = _text(data, start, stop)
        elif kind == _VARINT and field in (2, 3, 5):
            value, pos = varint(data, pos, end)
            if field == 2:
                incarnation = value
            elif field == 3:
                acked = value
            else:
                resent_upto = value
        else:
            pos = _skip(data, pos, end, field, kind)
    return BatchIn(sender, incarnation, acked, items, resent_upto, heard)
