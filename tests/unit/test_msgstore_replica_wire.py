"""``msgstore.replica_wire`` writes a ``ReplicaAppend`` (and a ``ReplicaAppends``) byte
for byte as protobuf does, and reads a ``ReplicaAppends`` as the generated classes do:
on what it writes, on any encoding protobuf accepts, and on bit-flipped and truncated
batches (which the replica has protobuf refuse or accept first)."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from services.msgstore import replica_wire
from services.msgstore.cluster.servicer import replica_write
from services.msgstore.model import ReplicaWrite
from services.pb import common_pb2, msgstore_pb2

U64 = st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1))
TEXT = st.text(max_size=12)
STATE = st.none() | st.tuples(U64, st.lists(U64, max_size=5), st.lists(U64, max_size=5), U64, U64)


@st.composite
def appends(draw: st.DrawFn) -> tuple[bytes, msgstore_pb2.ReplicaAppend]:
    mountpoint, client_id = draw(TEXT), draw(TEXT)
    epoch, prev_epoch, prev_seq, acked = draw(U64), draw(U64), draw(U64), draw(U64)
    max_len = draw(st.integers(0, 2**32 - 1))
    install = draw(st.booleans())
    entries = draw(st.lists(st.tuples(U64, U64, st.binary(max_size=300)), max_size=8))
    replicas = draw(st.lists(TEXT, max_size=4))
    state = draw(STATE)
    data = replica_wire.append(
        mountpoint,
        client_id,
        epoch,
        (prev_epoch, prev_seq),
        install,
        b"".join(replica_wire.entry(*e) for e in entries),
        acked,
        max_len,
        replicas,
        state,
    )
    pb = msgstore_pb2.ReplicaAppend(
        key=common_pb2.SessionKey(mountpoint=mountpoint, client_id=client_id),
        epoch=epoch,
        prev_epoch=prev_epoch,
        prev_seq=prev_seq,
        install=install,
        acked=acked,
        max_len=max_len,
        replicas=replicas,
    )
    for e, s, d in entries:
        pb.entries.add(epoch=e, seq=s, delivery=d)
    if state is not None:
        pb.has_state = True
        pb.delivered_upto = state[0]
        pb.inbound_qos2.extend(state[1])
        pb.outbound_pubrel.extend(state[2])
        pb.state_epoch, pb.state_stamp = state[3], state[4]
    return data, pb


@settings(max_examples=400, deadline=None)
@given(appends())
def test_an_append_is_written_as_protobuf_writes_it(
    case: tuple[bytes, msgstore_pb2.ReplicaAppend],
) -> None:
    data, pb = case
    assert data == pb.SerializeToString()
    assert msgstore_pb2.ReplicaAppend.FromString(data) == pb


@settings(max_examples=100, deadline=None)
@given(st.lists(appends(), max_size=5))
def test_a_call_is_its_appends_joined(
    cases: list[tuple[bytes, msgstore_pb2.ReplicaAppend]],
) -> None:
    data = replica_wire.appends([d for d, _ in cases])
    assert data == msgstore_pb2.ReplicaAppends(appends=[pb for _, pb in cases]).SerializeToString()


@given(
    st.lists(st.tuples(U64, U64), max_size=8),
    st.dictionaries(U64, st.binary(max_size=40), max_size=8),
)
def test_entries_carry_the_messages_held_and_none_for_the_others(
    positions: list[tuple[int, int]], datas: dict[int, bytes]
) -> None:
    pb = msgstore_pb2.ReplicaAppend()
    for epoch, seq in positions:
        pb.entries.add(epoch=epoch, seq=seq, delivery=datas.get(seq, b""))
    assert replica_wire.entries(positions, datas) == pb.SerializeToString()


def test_varints_at_their_edges() -> None:
    for n in (0, 1, 127, 128, 16383, 16384, 2**32 - 1, 2**49, 2**63, 2**64 - 1):
        pb = msgstore_pb2.ReplicaEntry(seq=n).SerializeToString()
        assert replica_wire.entry(0, n, b"") == b"\x32" + bytes((len(pb),)) + pb
    with pytest.raises(ValueError):
        replica_wire.varint(-1)
    with pytest.raises(ValueError):
        replica_wire.varint(2**64)


# -- the replica's side: ``read_appends`` against the generated classes ----------------


def reference(data: bytes) -> list[ReplicaWrite] | None:
    """What the generated classes read (None: protobuf refuses the bytes)."""
    try:
        pb = msgstore_pb2.ReplicaAppends.FromString(data)
    except DecodeError:
        return None
    return [replica_write(a) for a in pb.appends]


def assert_read_as_protobuf_reads(data: bytes) -> None:
    expected = reference(data)
    if expected is None:
        return  # refused before the hand reader sees it (the servicer parses first)
    assert replica_wire.read_appends(data) == expected


def _tag(field: int, wire: int) -> bytes:
    return replica_wire.varint(field << 3 | wire)


@st.composite
def raw_field(draw: st.DrawFn, fields: tuple[int, ...], depth: int) -> bytes:
    """One field as any encoder might write it: a known or unknown number, any wire
    type, a known message's body written again field by field (nested, merged)."""
    field = draw(st.sampled_from(fields))
    wire = draw(st.sampled_from((0, 0, 2, 2, 1, 5, 3)))
    if wire == 3:  # a group (proto2's): protobuf keeps it as an unknown field
        inner = b"".join(draw(st.lists(raw_field(INNER, max(depth - 1, 0)), max_size=3)))
        return _tag(field, 3) + inner + _tag(field, 4)
    if wire == 0:
        value = draw(U64 | st.integers(2**64, 2**70 - 1))  # over 64 bits: its low 64 kept
        return _tag(field, 0) + _varint_any(value)
    if wire == 1:
        return _tag(field, 1) + draw(st.binary(min_size=8, max_size=8))
    if wire == 5:
        return _tag(field, 5) + draw(st.binary(min_size=4, max_size=4))
    if depth > 0 and draw(st.booleans()):
        inner = b"".join(draw(st.lists(raw_field(INNER, depth - 1), max_size=4)))
    elif draw(st.booleans()):
        inner = draw(TEXT).encode()
    else:
        inner = b"".join(replica_wire.varint(v) for v in draw(st.lists(U64, max_size=3)))
    return _tag(field, 2) + replica_wire.varint(len(inner)) + inner


def _varint_any(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


INNER = (1, 2, 3, 4, 9, 17)  # SessionKey and ReplicaEntry fields, and one unknown
APPEND_FIELDS = (*range(1, 16), 16, 99)


@st.composite
def raw_appends(draw: st.DrawFn) -> bytes:
    """A ``ReplicaAppends`` of appends written field by field, in any order, with
    repeats, unknown fields, unpacked integers and well-formed appends among them."""
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            body, _ = draw(appends())
        else:
            body = b"".join(draw(st.lists(raw_field(APPEND_FIELDS, 2), max_size=10)))
        parts.append(b"\x0a" + replica_wire.varint(len(body)) + body)
    if draw(st.booleans()):
        parts.append(draw(raw_field((2, 7), 1)))  # unknown at the top
    return b"".join(parts)


@settings(max_examples=300, deadline=None)
@given(st.lists(appends(), max_size=4))
def test_the_replica_reads_written_appends_as_protobuf_does(
    cases: list[tuple[bytes, msgstore_pb2.ReplicaAppend]],
) -> None:
    data = replica_wire.appends([d for d, _ in cases])
    assert replica_wire.read_appends(data) == [replica_write(pb) for _, pb in cases]


@settings(max_examples=500, deadline=None)
@given(raw_appends())
def test_the_replica_reads_any_accepted_encoding_as_protobuf_does(data: bytes) -> None:
    assert_read_as_protobuf_reads(data)


@settings(max_examples=500, deadline=None)
@given(raw_appends(), st.lists(st.integers(0, 2**20), min_size=1, max_size=3))
def test_bit_flipped_batches_read_as_protobuf_reads_them(data: bytes, flips: list[int]) -> None:
    if not data:
        return
    flipped = bytearray(data)
    for bit in flips:
        flipped[(bit // 8) % len(flipped)] ^= 1 << (bit % 8)
    assert_read_as_protobuf_reads(bytes(flipped))


@settings(max_examples=300, deadline=None)
@given(raw_appends(), st.integers(0, 2**16))
def test_truncated_batches_read_as_protobuf_reads_them(data: bytes, cut: int) -> None:
    assert_read_as_protobuf_reads(data[: cut % (len(data) + 1)])


def test_groups_are_skipped_and_what_protobuf_refuses_the_hand_reader_refuses() -> None:
    group = b"\x0a\x06\x0b\x10\x05\x0c\x10\x07"  # field 1 as a group, then epoch 7
    assert replica_wire.read_appends(group) == reference(group)
    assert replica_wire.read_appends(group)[0].epoch == 7
    for data in (
        b"\x0a\x02\x0b\x14",  # a group that ends with another field's end
        b"\x0a\x0b" + b"\xff" * 11,  # a varint over ten bytes
        b"\x0a\x05\x32\x03\x08",  # an entry longer than its append
    ):
        assert reference(data) is None
        with pytest.raises(ValueError):
            replica_wire.read_appends(data)
