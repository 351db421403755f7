"""Translation between the session's messages and their protobuf form (store, gossip).

Kept in one module so the wire form of a message is defined once: what the msgstore
persists and what gossip replicates must decode back to the same ``Message``.

The msgstore stream's ``StoreBatch`` is written here by hand, in protobuf's wire format,
from pieces encoded once: a session's ``SessionKey`` once per session, a message once
per publish. Building it field by field through the generated classes cost more per
message than routing it. The encoders below write exactly what the generated
``SerializeToString`` writes for the same values (fields in number order, zero values
left out, repeated scalars packed); ``tests/unit/test_listener_store_wire.py`` checks it.
"""

from __future__ import annotations

from typing import Final

from services.listener.mqtt.types import NO_PROPERTIES, Properties
from services.listener.routing.model import SubOptions
from services.listener.session.messages import Message, OutboundMessage
from services.pb import common_pb2, gossip_pb2

_US: Final = 1_000_000


def message_to_pb(msg: Message, node: str) -> common_pb2.MqttMessage:
    # Field by field and only what is set: cheaper than keyword arguments (once
    # per publish to a persistent session). Zero values are not on the wire either way.
    props = msg.properties
    pb = common_pb2.MqttMessage()
    pb.msg_id = msg.msg_id
    pb.topic = msg.topic
    if msg.mountpoint:
        pb.mountpoint = msg.mountpoint
    pb.payload = msg.payload
    pb.qos = msg.qos
    if msg.retain:
        pb.retain = True
    pb.publisher = msg.publisher
    pb.origin_node = node
    pb.published_us = int(msg.published_at * _US)
    if msg.expires_at is not None:
        pb.expires_us = int(msg.expires_at * _US)
    if props is not NO_PROPERTIES:
        if props.payload_format_indicator is not None:
            pb.payload_format = props.payload_format_indicator
        if props.content_type is not None:
            pb.content_type = props.content_type
        if props.response_topic is not None:
            pb.response_topic = props.response_topic
        if props.correlation_data is not None:
            pb.correlation_data = props.correlation_data
        for key, value in props.user_properties:
            pb.user_properties.add(key=key, value=value)
    return pb


def message_from_pb(pb: common_pb2.MqttMessage) -> Message:
    props = NO_PROPERTIES
    if (
        pb.HasField("payload_format")
        or pb.content_type
        or pb.response_topic
        or pb.correlation_data
        or pb.user_properties
    ):
        props = Properties(
            payload_format_indicator=pb.payload_format if pb.HasField("payload_format") else None,
            content_type=pb.content_type or None,
            response_topic=pb.response_topic or None,
            correlation_data=pb.correlation_data or None,
            user_properties=tuple((u.key, u.value) for u in pb.user_properties),
        )
    return Message(
        msg_id=pb.msg_id,
        topic=pb.topic,
        payload=pb.payload,
        qos=pb.qos,
        retain=pb.retain,
        publisher=pb.publisher,
        mountpoint=pb.mountpoint,
        published_at=pb.published_us / _US,
        expires_at=pb.expires_us / _US if pb.expires_us else None,
        properties=props,
    )


def delivery_from_pb(pb: common_pb2.Delivery, seq: int | None, dup: bool) -> OutboundMessage:
    return OutboundMessage(
        message=message_from_pb(pb.msg),
        qos=pb.qos,
        retain=pb.retain,
        sub_ids=tuple(pb.sub_ids),
        seq=seq,
        dup=dup,
    )


def meta_key(mountpoint: str, name: str) -> bytes:
    """Gossip keys: ``mountpoint \\0 client_id`` (subs, sessions) or ``mountpoint \\0 topic``."""
    return f"{mountpoint}\0{name}".encode()


def split_meta_key(key: bytes) -> tuple[str, str]:
    mountpoint, _, name = key.decode().partition("\0")
    return mountpoint, name


def subs_to_pb(node: str, subs: dict[str, SubOptions]) -> bytes:
    record = gossip_pb2.SubscriberRecord(
        node=node, persistent=any(o.persistent for o in subs.values())
    )
    for topic_filter, opts in subs.items():
        record.subs.add(
            filter=topic_filter,
            qos=opts.qos,
            no_local=opts.no_local,
            retain_as_published=opts.retain_as_published,
            retain_handling=opts.retain_handling,
            sub_id=opts.sub_id or 0,
        )
    return bytes(record.SerializeToString())


def subs_from_pb(value: bytes) -> dict[str, SubOptions]:
    record = gossip_pb2.SubscriberRecord.FromString(value)
    return {
        e.filter: SubOptions(
            qos=e.qos,
            no_local=e.no_local,
            retain_as_published=e.retain_as_published,
            retain_handling=e.retain_handling,
            sub_id=e.sub_id or None,
            node=record.node,
            persistent=record.persistent,
        )
        for e in record.subs
    }


# -- the msgstore stream in wire format -----------------------------------------------
# Tags are (field number << 3) | wire type; 0 = varint, 2 = length-delimited.
_SMALL: Final = [bytes((i,)) for i in range(0x80)]


# Two-byte varints (128 to 2047): the lengths of most copies, entries and batches'
# items. Built once; ``bytes((a, b))`` per call went through a generic constructor call.
_PAIRS: Final = [bytes(((i & 0x7F) | 0x80, i >> 7)) if i >= 0x80 else b"" for i in range(0x800)]
# Up to here a varint's bytes, gathered in one int, stay below 2**62, what a compiled
# module keeps unboxed: seven groups with their continuation bits and a last byte below
# 64. µs timestamps (about 2**51 today) are eight bytes and still below it.
_UNBOXED: Final = 1 << 55
_LOW49: Final = (1 << 49) - 1


def varint(n: int) -> bytes:
    """Base-128 varint of an unsigned integer."""
    if n < 0x80:
        if n < 0:
            raise ValueError(f"varint of a negative number: {n}")
        return _SMALL[n]
    if n < 0x800:
        return _PAIRS[n]
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n >= _UNBOXED:
        # Seven bytes, then the rest: gathered in one int, these would take the bignum
        # path.
        return _gathered(n & _LOW49, 7) + varint(n >> 49)
    # Gathered in an int written out once: a quarter of a bytearray's cost compiled
    acc = 0
    shift = 0
    while n >= 0x80:
        acc |= ((n & 0x7F) | 0x80) << shift
        shift += 8
        n >>= 7
    acc |= n << shift
    return acc.to_bytes((shift >> 3) + 1, "little")


def _gathered(n: int, count: int) -> bytes:
    """The low ``count`` seven-bit groups of ``n``, each with its continuation bit."""
    acc = 0
    shift = 0
    for _ in range(count):
        acc |= ((n & 0x7F) | 0x80) << shift
        shift += 8
        n >>= 7
    return acc.to_bytes(count, "little")


def _field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field (``tag`` already encoded)."""
    n = len(data)
    return tag + (_SMALL[n] if n < 0x80 else varint(n)) + data


def _str_field(tag: bytes, text: str) -> bytes:
    return _field(tag, text.encode()) if text else b""


def key_field(mountpoint: str, client_id: str) -> bytes:
    """``SessionKey`` as field 1 of ``Append``, ``Ack`` and ``Mark``."""
    return _field(b"\x0a", _str_field(b"\x0a", mountpoint) + _str_field(b"\x12", client_id))


def _int64(n: int) -> bytes:
    """An ``int64`` varint: a negative number as its 64-bit two's complement."""
    return varint(n if n >= 0 else n + (1 << 64))


def _put(parts: list[bytes], tag: bytes, data: bytes) -> None:
    """A length-delimited field, appended in pieces (one join at the end, no copies)."""
    n = len(data)
    parts.append(tag)
    parts.append(_SMALL[n] if n < 0x80 else varint(n))
    parts.append(data)


def message_bytes(msg: Message, node: str) -> bytes:
    """``MqttMessage`` serialized, as ``message_to_pb(msg, node).SerializeToString()``
    writes it."""
    return b"".join(_message_parts(msg, node, []))


def message_field(msg: Message, node: str) -> bytes:
    """``MqttMessage`` as field 1 of ``Delivery``, once per publish to a persistent
    session; written by hand because, compiled, that is cheaper than the generated class."""
    parts = _message_parts(msg, node, [b"\x0a", b""])
    size = 0
    for part in parts:
        size += len(part)
    size -= 1
    parts[1] = _SMALL[size] if size < 0x80 else varint(size)
    return b"".join(parts)


# origin_node, once per node name (one or two per process) rather than once per message
_NODE_FIELDS: Final[dict[str, bytes]] = {}


def _heads(tag: int) -> list[bytes]:
    """A length-delimited field's tag and one-byte length, as one piece, by length."""
    return [bytes((tag, n)) for n in range(0x80)]


_ID_HEADS: Final = _heads(0x0A)
_TOPIC_HEADS: Final = _heads(0x12)
_PAYLOAD_HEADS: Final = _heads(0x22)
_PUBLISHER_HEADS: Final = _heads(0x3A)
_QOS_FIELDS: Final = [b"", b"\x28\x01", b"\x28\x02"]
# ... and of Forwarded
_CLIENT_HEADS: Final = _heads(0x1A)
_MESSAGE_HEADS: Final = _heads(0x3A)
_COPY_QOS_FIELDS: Final = [b"", b"\x20\x01", b"\x20\x02"]
# ... and of a ForwardBatch's items (field 4), with lengths of up to two bytes
_ITEM_HEADS: Final = [b"\x22" + (_SMALL[n] if n < 0x80 else _PAIRS[n]) for n in range(0x800)]


def _add(parts: list[bytes], tag: bytes, heads: list[bytes], data: bytes) -> None:
    """As ``_put``, the tag and a short length in one piece: a message is joined from a
    dozen pieces, and the join's cost is per piece."""
    n = len(data)
    if n < 0x80:
        parts.append(heads[n])
    else:
        parts.append(tag)
        parts.append(varint(n))
    parts.append(data)


def _add_uint(parts: list[bytes], tag: bytes, fields: list[bytes], n: int) -> None:
    """A varint field, as one piece from ``fields`` (tag and value) when it holds ``n``."""
    if n < len(fields):
        parts.append(fields[n])
    else:
        parts.append(tag)
        parts.append(varint(n))


def _message_parts(msg: Message, node: str, parts: list[bytes]) -> list[bytes]:
    """``parts`` with the message's fields appended as protobuf writes them: in field
    number order, a zero, empty or unset value left out (``payload_format`` is optional:
    written when set, even to 0)."""
    if msg.msg_id:
        _add(parts, b"\x0a", _ID_HEADS, msg.msg_id.encode())
    if msg.topic:
        _add(parts, b"\x12", _TOPIC_HEADS, msg.topic.encode())
    if msg.mountpoint:
        _put(parts, b"\x1a", msg.mountpoint.encode())
    if msg.payload:
        _add(parts, b"\x22", _PAYLOAD_HEADS, msg.payload)
    if msg.qos:
        _add_uint(parts, b"\x28", _QOS_FIELDS, msg.qos)
    if msg.retain:
        parts.append(b"\x30\x01")
    if msg.publisher:
        _add(parts, b"\x3a", _PUBLISHER_HEADS, msg.publisher.encode())
    if node:
        field = _NODE_FIELDS.get(node)
        if field is None:
            field = _NODE_FIELDS[node] = _field(b"\x42", node.encode())
        parts.append(field)
    published_us = int(msg.published_at * _US)
    if published_us:
        parts.append(b"\x48")
        parts.append(_int64(published_us))
    if msg.expires_at is not None:
        expires_us = int(msg.expires_at * _US)
        if expires_us:
            parts.append(b"\x50")
            parts.append(_int64(expires_us))
    props = msg.properties
    if props is not NO_PROPERTIES:
        if props.payload_format_indicator is not None:  # optional: written even if 0
            parts.append(b"\x58")
            parts.append(varint(props.payload_format_indicator))
        if props.content_type:
            _put(parts, b"\x62", props.content_type.encode())
        if props.response_topic:
            _put(parts, b"\x6a", props.response_topic.encode())
        if props.correlation_data:
            _put(parts, b"\x72", props.correlation_data)
        for key, value in props.user_properties:
            _put(parts, b"\x7a", _str_field(b"\x0a", key) + _str_field(b"\x12", value))
    return parts


def forwarded_body(
    mountpoint: str,
    client_id: str,
    qos: int,
    retain: bool,
    sub_ids: tuple[int, ...],
    message: bytes,
    share: str = "",
) -> bytes:
    """A ``Forwarded`` serialized without its ``seq`` (field 1), which the link puts in
    front when it batches the copy (``forward_batch``)."""
    parts: list[bytes] = []
    if mountpoint:
        _put(parts, b"\x12", mountpoint.encode())
    if client_id:
        _add(parts, b"\x1a", _CLIENT_HEADS, client_id.encode())
    if qos:
        _add_uint(parts, b"\x20", _COPY_QOS_FIELDS, qos)
    if retain:
        parts.append(b"\x28\x01")
    if sub_ids:
        _put(parts, b"\x32", b"".join([varint(i) for i in sub_ids]))  # packed
    if message:
        _add(parts, b"\x3a", _MESSAGE_HEADS, message)
    if share:
        _put(parts, b"\x42", share.encode())
    return b"".join(parts)


def forward_batch(
    sender: str,
    incarnation: int,
    acked: int,
    items: list[tuple[int, bytes]],
    resent_upto: int = 0,
    heard: list[int] | None = None,
) -> bytes:
    """A ``ForwardBatch`` serialized, each item a ``(seq, forwarded_body)``: one join per
    batch, where the generated classes would build and copy a message per copy."""
    parts: list[bytes] = []
    if sender:
        _put(parts, b"\x0a", sender.encode())
    if incarnation:
        parts.append(b"\x10")
        parts.append(varint(incarnation))
    if acked:
        parts.append(b"\x18")
        parts.append(varint(acked))
    for seq, body in items:
        if seq:
            vseq = varint(seq)
            n = 1 + len(vseq) + len(body)
            parts.append(_ITEM_HEADS[n] if n < 0x800 else b"\x22" + varint(n))
            parts.append(b"\x08")
            parts.append(vseq)
        else:
            n = len(body)
            parts.append(_ITEM_HEADS[n] if n < 0x800 else b"\x22" + varint(n))
        parts.append(body)
    if resent_upto:
        parts.append(b"\x28")
        parts.append(varint(resent_upto))
    if heard:
        _put(parts, b"\x32", b"".join([varint(s) for s in heard]))  # packed
    return b"".join(parts)


# Delivery's fields after the message, by (qos << 1) | retain, without subscription ids.
_DELIVERY_TAILS: Final = [
    (b"\x10" + _SMALL[qos] if qos else b"") + (b"\x18\x01" if retain else b"")
    for qos in (0, 1, 2)
    for retain in (False, True)
]


_OFFLINE: Final = b"\x20\x01"  # Append.offline = true (field 4, varint)


def append_entry(
    key: bytes,
    epoch: int,
    msg: bytes,
    qos: int,
    retain: bool,
    sub_ids: tuple[int, ...],
    offline: bool = False,
) -> bytes:
    """One ``Append`` as field 2 of ``StoreBatch``; ``key`` from :func:`key_field`, ``msg``
    from :func:`message_field`. (Once per message and subscriber: one join, no helpers
    for the common sizes.)"""
    tail = _DELIVERY_TAILS[(qos << 1) | retain]
    if sub_ids:
        tail += _field(b"\x22", b"".join(map(varint, sub_ids)))
    n = len(msg) + len(tail)
    delivery_len = _SMALL[n] if n < 0x80 else varint(n)
    head = key + b"\x10" + varint(epoch) + b"\x1a" if epoch else key + b"\x1a"
    flag = _OFFLINE if offline else b""
    size = len(head) + len(delivery_len) + n + len(flag)
    size_bytes = _SMALL[size] if size < 0x80 else varint(size)
    return b"".join((b"\x12", size_bytes, head, delivery_len, msg, tail, flag))


def ack_entry(key: bytes, epoch: int, seqs: list[int], delivered_upto: int) -> bytes:
    """One ``Ack`` as field 3 of ``StoreBatch``."""
    body = key
    if epoch:
        body += b"\x10" + varint(epoch)
    if seqs:
        body += _field(b"\x1a", b"".join(map(varint, seqs)))
    if delivered_upto:
        body += b"\x20" + varint(delivered_upto)
    return _field(b"\x1a", body)


def mark_entry(key: bytes, epoch: int, kind: int, ident: int, set_: bool) -> bytes:
    """One ``Mark`` as field 4 of ``StoreBatch``."""
    body = key
    if epoch:
        body += b"\x10" + varint(epoch)
    if kind:
        body += b"\x18" + varint(kind)
    if ident:
        body += b"\x20" + varint(ident)
    if set_:
        body += b"\x28\x01"
    return _field(b"\x22", body)


def store_batch(
    batch_id: int, appends: list[bytes], acks: list[bytes], marks: list[bytes]
) -> bytes:
    """A ``StoreBatch`` from encoded entries."""
    head = b"\x08" + varint(batch_id) if batch_id else b""
    return b"".join((head, *appends, *acks, *marks))
