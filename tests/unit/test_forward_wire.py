"""The hand-written ``ForwardBatch`` reader against the generated classes: the same values
for everything protobuf would read, and a ``WireError`` wherever protobuf refuses."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from services.listener import convert
from services.listener.forward.wire import BatchIn, ForwardedIn, WireError, read_batch
from services.pb import common_pb2, forward_pb2

_text = st.text(max_size=12)
_u32 = st.integers(0, 2**32 - 1)
_u64 = st.integers(0, 2**64 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def messages(draw: st.DrawFn) -> common_pb2.MqttMessage:
    pb = common_pb2.MqttMessage(
        msg_id=draw(_text),
        topic=draw(_text),
        mountpoint=draw(_text),
        payload=draw(st.binary(max_size=40)),
        qos=draw(st.integers(0, 2)),
        retain=draw(st.booleans()),
        publisher=draw(_text),
        origin_node=draw(_text),
        published_us=draw(_i64),
        expires_us=draw(_i64),
        content_type=draw(_text),
        response_topic=draw(_text),
        correlation_data=draw(st.binary(max_size=8)),
    )
    if draw(st.booleans()):
        pb.payload_format = draw(_u32)
    for key, value in draw(st.lists(st.tuples(_text, _text), max_size=3)):
        pb.user_properties.add(key=key, value=value)
    return pb


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    batch = forward_pb2.ForwardBatch(
        sender=draw(_text),
        incarnation=draw(_u64),
        acked=draw(_u64),
        resent_upto=draw(_u64),
        heard=draw(st.lists(_u64, max_size=4)),
    )
    for _ in range(draw(st.integers(0, 4))):
        batch.items.add(
            seq=draw(_u64),
            mountpoint=draw(_text),
            client_id=draw(_text),
            qos=draw(st.integers(0, 2)),
            retain=draw(st.booleans()),
            sub_ids=draw(st.lists(_u32, max_size=3)),
            message=draw(messages()),
            share=draw(_text),
        )
    return bytes(batch.SerializeToString())


def _item(i: forward_pb2.Forwarded | ForwardedIn) -> tuple[object, ...]:
    m = i.message if isinstance(i, ForwardedIn) else convert.message_from_pb(i.message)
    message = (
        m.msg_id,
        m.topic,
        m.payload,
        m.qos,
        m.retain,
        m.publisher,
        m.mountpoint,
        m.published_at,
        m.expires_at,
        m.properties,
    )
    return (i.seq, i.mountpoint, i.client_id, i.qos, i.retain, tuple(i.sub_ids), i.share, message)


def _batch(b: forward_pb2.ForwardBatch | BatchIn) -> tuple[object, ...]:
    items = [_item(i) for i in b.items]
    return (b.sender, b.incarnation, b.acked, b.resent_upto, list(b.heard), items)


def _generated(data: bytes) -> tuple[object, ...] | None:
    try:
        return _batch(forward_pb2.ForwardBatch.FromString(data))
    except DecodeError:
        return None


def _ours(data: bytes) -> tuple[object, ...] | None:
    try:
        return _batch(read_batch(data))
    except WireError:
        return None


@given(batches())
@settings(max_examples=300, deadline=None)
def test_a_batch_reads_as_the_generated_classes_read_it(data: bytes) -> None:
    assert _ours(data) == _generated(data) is not None


@given(
    batches(),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10_000),
)
@settings(max_examples=600, deadline=None)
def test_corrupted_bytes_read_as_the_generated_classes_read_them_or_fail_as_they_do(
    data: bytes, flips: list[tuple[int, int]], cut: int
) -> None:
    """Bit flips and truncations: whatever protobuf still reads we read the same way
    (unknown fields skipped, a field with the wrong wire type skipped), and whatever it
    refuses we refuse, never with any other exception."""
    if not data:
        return
    raw = bytearray(data)
    for at, xor in flips:
        raw[at % len(raw)] ^= xor
    for corrupt in (bytes(raw), data[: cut % len(data)], bytes(raw)[: cut % len(data)]):
        assert _ours(corrupt) == _generated(corrupt)


def test_what_no_writer_of_ours_writes_is_read_as_protobuf_reads_it() -> None:
    """Repeated fields unpacked, the message in two parts (merged), unknown fields of
    every wire type, a group, fields out of order."""
    message_a = common_pb2.MqttMessage(topic="t", qos=1, payload=b"p").SerializeToString()
    message_b = common_pb2.MqttMessage(msg_id="m", retain=True).SerializeToString()
    item = (
        b"\x30\x05"  # sub_ids 5, unpacked
        + b"\x3a"
        + bytes([len(message_a)])
        + message_a
        + b"\x08\x07"  # seq 7, after the message
        + b"\x32\x02\x06\x07"  # sub_ids 6, 7 packed
        + b"\x3a"
        + bytes([len(message_b)])
        + message_b
        + b"\xf8\x01\x01"  # field 31, varint
        + b"\xf9\x01"
        + bytes(8)  # field 31, fixed64
        + b"\xfd\x01"
        + bytes(4)  # field 31, fixed32
        + b"\xfb\x01\x08\x01\xfc\x01"  # field 31, a group holding a varint
        + b"\x20\x02"  # qos 2
        + b"\x1a\x01c"  # client_id
    )
    data = b"\x30\x09" + b"\x22" + bytes([len(item)]) + item + b"\x30\x0a" + b"\x0a\x01s"
    ours = read_batch(data)
    assert _batch(ours) == _generated(data)
    (copy,) = ours.items
    assert (copy.seq, copy.sub_ids, copy.qos, copy.client_id) == (7, (5, 6, 7), 2, "c")
    assert (copy.message.topic, copy.message.msg_id, copy.message.retain) == ("t", "m", True)
    assert ours.heard == [9, 10]


@pytest.mark.parametrize("us", [8652272787646516959, -8652272787646516959, 2**53 + 1])
def test_times_past_double_precision_round_as_the_converter_rounds_them(us: int) -> None:
    """A microsecond count wider than a double's mantissa: dividing it as a float first
    rounds twice and lands one unit away from what ``convert.message_from_pb`` gives."""
    batch = forward_pb2.ForwardBatch(sender="s")
    batch.items.add(seq=1, message=common_pb2.MqttMessage(published_us=us, expires_us=-us))
    data = batch.SerializeToString()
    assert _ours(data) == _generated(data) is not None


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05ab",  # a string past the end
        b"\x08\xff",  # a varint past the end
        b"\x08" + b"\xff" * 10 + b"\x01",  # a varint of eleven bytes
        b"\x00\x01",  # field number 0
        b"\x0a\x02\xff\xfe",  # a sender that is not UTF-8
        b"\x0b\x08\x01\x14",  # a group ended by another field's end
        b"\x0c",  # an end of group where a field starts
        b"\x0f",  # wire type 7
        b"\x0b" * 200,  # groups nested too deep
    ],
)
def test_malformed_batches_are_refused(data: bytes) -> None:
    with pytest.raises(WireError):
        read_batch(data)
    assert _generated(data) is None


@given(batches())
@settings(max_examples=100, deadline=None)
def test_the_senders_batch_reads_back(data: bytes) -> None:
    """What ``convert.forward_batch`` writes (the sender's side) reads back whole."""
    batch = forward_pb2.ForwardBatch.FromString(data)
    bodies = [
        (
            i.seq,
            convert.forwarded_body(
                i.mountpoint,
                i.client_id,
                i.qos,
                i.retain,
                tuple(i.sub_ids),
                i.message.SerializeToString(),
                i.share,
            ),
        )
        for i in batch.items
    ]
    written = convert.forward_batch(
        batch.sender, batch.incarnation, batch.acked, bodies, batch.resent_upto, list(batch.heard)
    )
    assert _batch(read_batch(written)) == _batch(batch)
