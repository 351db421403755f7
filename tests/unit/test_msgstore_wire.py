"""``msgstore.wire`` reads a StoreBatch's appends as the generated classes do.

Every batch here is one protobuf accepted (the store parses each batch before ``wire``
reads it); the reference is what the generated classes give for the same bytes.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from services.msgstore import wire
from services.msgstore.convert import batch_from_pb
from services.msgstore.model import MarkKind
from services.pb import common_pb2, msgstore_pb2

text = st.text(max_size=12)
u64 = st.integers(min_value=0, max_value=2**64 - 1)


@st.composite
def deliveries(draw: st.DrawFn) -> common_pb2.Delivery:
    msg = common_pb2.MqttMessage(
        msg_id=draw(text),
        topic=draw(text),
        payload=draw(st.binary(max_size=40)),
        qos=draw(st.integers(0, 2)),
        retain=draw(st.booleans()),
        publisher=draw(text),
        published_us=draw(st.integers(-(2**63), 2**63 - 1)),  # negative: 10 bytes
    )
    for key, value in draw(st.lists(st.tuples(text, text), max_size=2)):
        msg.user_properties.add(key=key, value=value)
    return common_pb2.Delivery(
        msg=msg,
        qos=draw(st.integers(0, 2)),
        retain=draw(st.booleans()),
        sub_ids=draw(st.lists(st.integers(1, 2**28 - 1), max_size=3)),
    )


@st.composite
def batches(draw: st.DrawFn) -> msgstore_pb2.StoreBatch:
    batch = msgstore_pb2.StoreBatch(batch_id=draw(u64))
    for _ in range(draw(st.integers(0, 4))):
        append = batch.appends.add(epoch=draw(u64), offline=draw(st.booleans()))
        if draw(st.booleans()):
            append.key.mountpoint = draw(text)
        append.key.client_id = draw(text)
        if draw(st.booleans()):  # an append without a delivery is still an append
            append.delivery.CopyFrom(draw(deliveries()))
    for _ in range(draw(st.integers(0, 2))):
        batch.acks.add(epoch=draw(u64), seqs=draw(st.lists(u64, max_size=3)))
    return batch


def expected(batch: msgstore_pb2.StoreBatch) -> list[tuple[str, str, int, bytes, str, int, bool]]:
    return [
        (
            a.key.mountpoint,
            a.key.client_id,
            a.epoch,
            a.delivery.SerializeToString(),
            a.delivery.msg.msg_id,
            a.delivery.qos,
            a.offline,
        )
        for a in batch.appends
    ]


def read(data: bytes) -> list[tuple[str, str, int, bytes, str, int, bool]]:
    """What ``wire`` reads, the delivery as protobuf would write it again."""
    out = []
    for a in wire.appends(data, True):
        delivery = common_pb2.Delivery.FromString(a.delivery).SerializeToString()
        out.append((a.mountpoint, a.client_id, a.epoch, delivery, a.msg_id, a.qos, a.offline))
    return out


@settings(max_examples=300, deadline=None)
@given(batches())
def test_the_appends_of_any_batch_read_as_protobuf_reads_them(
    batch: msgstore_pb2.StoreBatch,
) -> None:
    data = batch.SerializeToString()
    assert read(data) == expected(batch)
    # The delivery is the very slice the listener wrote: no copy made anew.
    assert [a.delivery for a in wire.appends(data, False)] == [
        a.delivery.SerializeToString() for a in batch.appends
    ]


@settings(max_examples=200, deadline=None)
@given(batches(), batches())
def test_two_batches_concatenated_read_as_their_protobuf_merge(
    first: msgstore_pb2.StoreBatch, second: msgstore_pb2.StoreBatch
) -> None:
    data = first.SerializeToString() + second.SerializeToString()
    assert read(data) == expected(msgstore_pb2.StoreBatch.FromString(data))


def _length(value: bytes) -> bytes:
    """A length-delimited field's length, as a varint."""
    n, out = len(value), bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def test_repeated_and_unknown_fields_are_read_as_protobuf_reads_them() -> None:
    """One append written by hand: its key twice (merged), its delivery twice (merged),
    its epoch twice (the last wins), and fields this version does not know, of every
    wire type (groups too), at each level."""
    key1 = common_pb2.SessionKey(mountpoint="mp", client_id="first").SerializeToString()
    key2 = common_pb2.SessionKey(client_id="second").SerializeToString()
    d1 = common_pb2.Delivery(
        msg=common_pb2.MqttMessage(msg_id="id1", topic="t"), qos=1
    ).SerializeToString()
    d2 = common_pb2.Delivery(msg=common_pb2.MqttMessage(payload=b"p"), retain=True)
    unknown = b"\xf8\x01\x05" + b"\x81\x02" + bytes(8) + b"\x8a\x02\x02hi" + b"\x8d\x02" + bytes(4)
    # a group (proto2's wire type 3), with a group inside: protobuf keeps it as unknown
    unknown += b"\x93\x02" + b"\x08\x05" + b"\x9b\x02\x12\x01x\x9c\x02" + b"\x94\x02"
    d2_data = d2.SerializeToString() + unknown
    body = b"".join(
        [
            b"\x0a", bytes([len(key1)]), key1,
            b"\x10\x07",
            b"\x20\x02",  # offline: any non-zero varint is true
            b"\x1a", _length(d1), d1,
            unknown,
            b"\x0a", bytes([len(key2)]), key2,
            b"\x10\x09",
            b"\x1a", _length(d2_data), d2_data,
            b"\x08\x01",  # field 1 as a varint: not the key's wire type, an unknown field
        ]
    )  # fmt: skip
    data = b"\x08\x05" + unknown + b"\x12" + _length(body) + body
    batch = msgstore_pb2.StoreBatch.FromString(data)
    assert len(batch.appends) == 1
    (a,) = wire.appends(data, True)
    assert (a.mountpoint, a.client_id, a.epoch) == ("mp", "second", 9)
    assert a.offline and batch.appends[0].offline
    assert (a.msg_id, a.qos) == ("id1", 1)
    assert common_pb2.Delivery.FromString(a.delivery) == batch.appends[0].delivery


def test_batch_from_pb_gives_the_queue_core_its_batch() -> None:
    pb = msgstore_pb2.StoreBatch(batch_id=3)
    delivery = common_pb2.Delivery(msg=common_pb2.MqttMessage(msg_id="m", qos=1), qos=1)
    pb.appends.add(epoch=2, delivery=delivery).key.client_id = "c"
    pb.appends.add(delivery=delivery, offline=True).key.client_id = "d"
    pb.acks.add(epoch=2, seqs=[4, 5], delivered_upto=6).key.client_id = "c"
    pb.marks.add(
        epoch=2, kind=msgstore_pb2.MARK_OUTBOUND_PUBREL, id=9, set=True
    ).key.client_id = "c"
    data = pb.SerializeToString()
    logged: list[tuple[str, int]] = []
    batch = batch_from_pb(msgstore_pb2.StoreBatch.FromString(data), data, logged)
    assert batch.batch_id == 3
    data_of = delivery.SerializeToString()
    assert [tuple(a) for a in batch.appends] == [
        (("", "c"), 2, data_of, False),
        (("", "d"), 0, data_of, True),
    ]
    assert [tuple(a) for a in batch.acks] == [(("", "c"), 2, (4, 5), 6)]
    assert [tuple(m) for m in batch.marks] == [(("", "c"), 2, MarkKind.OUTBOUND_PUBREL, 9, True)]
    assert logged == [("m", 1), ("m", 1)]
    assert batch_from_pb(msgstore_pb2.StoreBatch.FromString(data), data, None).appends


@pytest.mark.parametrize(
    "data",
    [b"\x12", b"\x12\x05\x0a", b"\x08\xff\xff", b"\x08" + b"\xff" * 10 + b"\x01", b"\x0b"],
)
def test_bytes_cut_short_raise_value_error(data: bytes) -> None:
    """Protobuf refuses these before ``wire`` sees them; ``wire`` refuses them too."""
    with pytest.raises(ValueError):
        wire.appends(data, True)


def test_a_group_ending_with_another_fields_end_is_refused_as_protobuf_refuses_it() -> None:
    bad = b"\x08\x05" + b"\x93\x02\x08\x05\x9c\x02"  # opened as field 34, closed as 35
    with pytest.raises(DecodeError):
        msgstore_pb2.StoreBatch.FromString(bad)
    with pytest.raises(ValueError):
        wire.appends(bad, True)
