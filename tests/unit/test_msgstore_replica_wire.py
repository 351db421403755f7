"""``msgstore.replica_wire`` writes a ``ReplicaAppend`` (and a ``ReplicaAppends``) byte
for byte as protobuf does, so replicas read it with the generated classes unchanged."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.msgstore import replica_wire
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


def test_varints_at_their_edges() -> None:
    for n in (0, 1, 127, 128, 16383, 16384, 2**32 - 1, 2**49, 2**63, 2**64 - 1):
        pb = msgstore_pb2.ReplicaEntry(seq=n).SerializeToString()
        assert replica_wire.entry(0, n, b"") == b"\x32" + bytes((len(pb),)) + pb
    with pytest.raises(ValueError):
        replica_wire.varint(-1)
    with pytest.raises(ValueError):
        replica_wire.varint(2**64)
