"""Record encoding: round trips, key forms, and garbage gives CodecError, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gossip import codec
from services.gossip.crdt import dvv
from services.gossip.crdt.dvv import DVVSet, Entry
from services.gossip.crdt.lww import Stamped

stamped = st.builds(
    Stamped,
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=4),
    st.one_of(st.none(), st.binary(max_size=20)),
)


@st.composite
def clocks(draw: st.DrawFn) -> DVVSet[Stamped]:
    nodes = sorted(draw(st.sets(st.text(min_size=1, max_size=5), max_size=4)))
    entries = []
    for node in nodes:
        values = tuple(draw(st.lists(stamped, max_size=3)))
        counter = len(values) + draw(st.integers(0, 2**40))
        if counter == 0:
            counter = 1
        entries.append(Entry(node, counter, values))
    return dvv.check(DVVSet(tuple(entries)))


@given(
    st.text(max_size=8).filter(lambda p: "\0" not in p and "\1" not in p),
    st.binary(max_size=600),
    clocks(),
)
def test_round_trip(prefix: str, key: bytes, clock: DVVSet[Stamped]) -> None:
    raw = codec.encode_record(prefix, key, clock)
    assert codec.decode_record(raw) == (prefix, key, clock)


@settings(max_examples=300)
@given(st.binary(max_size=80))
def test_garbage_raises_codec_error_only(raw: bytes) -> None:
    try:
        prefix, key, clock = codec.decode_record(raw)
    except codec.CodecError:
        return
    assert dvv.check(clock) is clock
    assert codec.encode_record(prefix, key, clock) == raw


@given(clocks(), st.data())
def test_truncated_or_flipped_records_are_refused_or_valid(
    clock: DVVSet[Stamped], data: st.DataObject
) -> None:
    raw = codec.encode_record("subs", b"\0c", clock)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(codec.CodecError):
        codec.decode_record(raw[:cut])
    pos = data.draw(st.integers(0, len(raw) - 1))
    flipped = raw[:pos] + bytes([raw[pos] ^ 0xFF]) + raw[pos + 1 :]
    try:
        prefix, key, decoded = codec.decode_record(flipped)
    except codec.CodecError:
        return
    assert codec.encode_record(prefix, key, decoded) == flipped  # valid, then faithful


def test_keys_group_by_prefix_and_long_keys_are_hashed() -> None:
    short = codec.record_key("retain", b"\0a/b")
    assert short == b"retain\0\0a/b"
    long_key = b"\0" + b"x" * 1000
    hashed = codec.record_key("retain", long_key)
    assert len(hashed) < 100 and hashed.startswith(b"retain\x01")
    assert hashed != codec.record_key("retain", long_key + b"y")
    lo, hi = codec.prefix_range("retain")
    assert lo <= short < hi and lo <= hashed < hi
    assert not lo <= codec.record_key("subs", b"\0a") < hi
    assert not lo <= codec.record_key("retainx", b"\0a") < hi


def test_uint_round_trip_and_errors() -> None:
    assert codec.decode_uint(codec.encode_uint(12345)) == 12345
    with pytest.raises(codec.CodecError):
        codec.decode_uint(b"\0")
    with pytest.raises(codec.CodecError):
        codec.decode_record(b"\x02")


@pytest.mark.parametrize(
    "varint",
    [b"\x80\x00", b"\xff\x80\x00", b"\xff" * 9 + b"\x02", b"\xff" * 10 + b"\x01"],
    ids=["overlong-zero", "overlong", "65-bits", "too-long"],
)
def test_non_canonical_or_oversize_varints_are_refused(varint: bytes) -> None:
    raw = bytes([codec.FORMAT]) + b"\x04subs\x02\x00c" + varint  # the entry count
    with pytest.raises(codec.CodecError):
        codec.decode_record(raw)
