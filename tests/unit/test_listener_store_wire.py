"""The hand-written msgstore stream encoders (``services.listener.convert``) against the
generated protobuf classes: same bytes as ``SerializeToString``, same message when parsed."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from services.listener import convert
from services.listener.mqtt.types import Properties
from services.listener.session.messages import Message
from services.pb import common_pb2, msgstore_pb2

u64 = st.integers(min_value=0, max_value=2**64 - 1)
text = st.text(max_size=40)


def _key(mountpoint: str, client_id: str) -> common_pb2.SessionKey:
    return common_pb2.SessionKey(mountpoint=mountpoint, client_id=client_id)


@given(st.integers(min_value=0, max_value=2**64 - 1))
@example(0x7FF)  # the last of the two-byte table
@example(0x800)
@example(2**49 - 1)  # the last seven-byte varint
@example(2**49)  # the first eight-byte one (µs timestamps), still gathered whole
@example(2**55 - 1)  # the last gathered whole
@example(2**55)  # from here on, in two parts
@example(2**62)  # past what a compiled module keeps unboxed
@example(2**64 - 1)
def test_varint_matches_protobuf(n: int) -> None:
    pb = msgstore_pb2.Ack(delivered_upto=n)  # uint64, field 4
    assert (b"\x20" + convert.varint(n) if n else b"") == pb.SerializeToString()


def test_varint_refuses_negative_numbers() -> None:
    with pytest.raises(ValueError):
        convert.varint(-1)


def test_message_field_is_the_serialized_message() -> None:
    msg = Message("n-1", "a/b", b"x" * 200, 1, True, "pub", "mp", 1700000000.25, 1700000100.5)
    pb = convert.message_to_pb(msg, "node@host")
    delivery = common_pb2.Delivery.FromString(convert.message_field(msg, "node@host"))
    assert delivery.msg == pb
    assert convert.message_from_pb(delivery.msg) == msg


maybe_text = st.none() | text
properties = st.builds(
    Properties,
    payload_format_indicator=st.none() | st.integers(min_value=0, max_value=255),
    content_type=maybe_text,
    response_topic=maybe_text,
    correlation_data=st.none() | st.binary(max_size=40),
    user_properties=st.lists(st.tuples(text, text), max_size=3).map(tuple),
)
# published_us and expires_us are int64: negative ones (a clock before 1970) included
times = st.floats(min_value=-1e9, max_value=4e9, allow_nan=False)


@given(
    msg_id=text,
    topic=text,
    payload=st.binary(max_size=300),
    qos=st.integers(min_value=0, max_value=2),
    retain=st.booleans(),
    publisher=text,
    mountpoint=text,
    published_at=times,
    expires_at=st.none() | times,
    props=st.just(Properties()) | properties,
    node=text,
)
def test_message_bytes_match_protobuf(
    msg_id: str,
    topic: str,
    payload: bytes,
    qos: int,
    retain: bool,
    publisher: str,
    mountpoint: str,
    published_at: float,
    expires_at: float | None,
    props: Properties,
    node: str,
) -> None:
    msg = Message(
        msg_id, topic, payload, qos, retain, publisher, mountpoint, published_at, expires_at, props
    )
    expected = convert.message_to_pb(msg, node).SerializeToString()
    assert convert.message_bytes(msg, node) == expected


def test_message_bytes_refuse_a_string_that_is_not_utf8() -> None:
    msg = Message("id", "a/\ud800", b"x", 0, False, "p", "", 1.0)
    with pytest.raises(UnicodeEncodeError):
        convert.message_bytes(msg, "node")


@given(
    mountpoint=text,
    client_id=text,
    epoch=u64,
    qos=st.integers(min_value=0, max_value=2),
    retain=st.booleans(),
    sub_ids=st.lists(st.integers(min_value=1, max_value=268435455), max_size=3),
    payload=st.binary(max_size=300),
    offline=st.booleans(),
)
def test_append_entry_matches_protobuf(
    mountpoint: str,
    client_id: str,
    epoch: int,
    qos: int,
    retain: bool,
    sub_ids: list[int],
    payload: bytes,
    offline: bool,
) -> None:
    msg = Message("id-1", "t", payload, 2, False, "p", mountpoint, 1.5, None, Properties())
    pb_msg = convert.message_to_pb(msg, "node")
    encoded = convert.append_entry(
        convert.key_field(mountpoint, client_id),
        epoch,
        convert.message_field(msg, "node"),
        qos,
        retain,
        tuple(sub_ids),
        offline,
    )
    expected = msgstore_pb2.StoreBatch()
    entry = expected.appends.add(key=_key(mountpoint, client_id), epoch=epoch, offline=offline)
    entry.delivery.msg.CopyFrom(pb_msg)
    entry.delivery.qos = qos
    entry.delivery.retain = retain
    entry.delivery.sub_ids.extend(sub_ids)
    assert encoded == expected.SerializeToString()


@given(
    batch_id=u64,
    acks=st.lists(st.tuples(text, text, u64, st.lists(u64, max_size=5), u64), max_size=4),
    marks=st.lists(
        st.tuples(text, text, u64, st.sampled_from([0, 1]), u64, st.booleans()), max_size=4
    ),
)
def test_store_batch_matches_protobuf(
    batch_id: int,
    acks: list[tuple[str, str, int, list[int], int]],
    marks: list[tuple[str, str, int, int, int, bool]],
) -> None:
    expected = msgstore_pb2.StoreBatch(batch_id=batch_id)
    for mountpoint, client_id, epoch, seqs, upto in acks:
        expected.acks.add(
            key=_key(mountpoint, client_id), epoch=epoch, seqs=seqs, delivered_upto=upto
        )
    for mountpoint, client_id, epoch, kind, ident, set_ in marks:
        expected.marks.add(
            key=_key(mountpoint, client_id),
            epoch=epoch,
            kind=kind,  # type: ignore[arg-type]
            id=ident,
            set=set_,
        )
    encoded = convert.store_batch(
        batch_id,
        [],
        [convert.ack_entry(convert.key_field(m, c), e, s, u) for m, c, e, s, u in acks],
        [convert.mark_entry(convert.key_field(m, c), e, k, i, s) for m, c, e, k, i, s in marks],
    )
    assert encoded == expected.SerializeToString()
    assert msgstore_pb2.StoreBatch.FromString(encoded) == expected
