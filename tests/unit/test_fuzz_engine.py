"""The fuzzer's pure half (``bench/fuzz``): cases are reproducible, the valid sequences
really are valid (the broker's own decoder accepts them), the mutators never fail on
what they are given, and the probe tells a restart from a quiet sample."""

from __future__ import annotations

import random

import pytest

from bench.fuzz import probe, roundtrip
from bench.fuzz.cases import make_case
from bench.fuzz.generate import Generator, Pools
from bench.fuzz.mutate import MUTATORS, mutate
from bench.fuzz.wire import Frames, Malformed, frame, string, varint
from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.errors import MQTTError
from services.listener.mqtt.types import Connect

POOLS = Pools()


def test_a_case_is_a_function_of_seed_and_index() -> None:
    a, b = make_case(7, 12345, POOLS), make_case(7, 12345, POOLS)
    assert a == b
    assert make_case(7, 12346, POOLS).data != a.data
    assert make_case(8, 12345, POOLS).data != a.data
    assert a.ref == "7:12345"


def test_valid_sequences_decode_with_the_brokers_codec() -> None:
    """The generator's side of the contract: unmutated cases are packets a client may
    send, so what the broker refuses in a run is the mutators' doing."""
    for index in range(1500):
        case = make_case(3, index, POOLS, valid_share=1.0)
        assert case.mutations == ()
        packets = Decoder().feed(case.data)
        assert isinstance(packets[0], Connect), index


def test_names_come_from_the_bounded_pools() -> None:
    pools = Pools(persistent_ids=5, topics=3)
    gen = Generator(random.Random(1), pools)
    ids, topics = set(), set()
    for _ in range(2000):
        topics.add(gen.topic())
        raw = gen.connect()
        connect = Decoder().feed(raw)[0]
        assert isinstance(connect, Connect)
        if not connect.clean_start and connect.protocol_version < 5:
            ids.add(connect.client_id)
    assert ids <= {f"fz-p{i}" for i in range(5)}
    assert len(topics) <= 4 * 3


@pytest.mark.parametrize("name", sorted(MUTATORS))
def test_each_mutator_takes_any_sequence(name: str) -> None:
    fn = MUTATORS[name][0]
    for seed in range(150):
        rng = random.Random(seed)
        gen = Generator(rng, POOLS)
        for packets in (gen.sequence(), [b"\x10"], [b"", b"\xc0\x00"], [gen.connect()]):
            out = fn(rng, list(packets), gen)
            assert isinstance(out, list) and all(isinstance(p, bytes) for p in out)


def test_mutated_bytes_never_crash_the_decoder() -> None:
    """The broker's decoder answers garbage with MQTTError only (invariant I5); the
    fuzzer's cases exercise that path before they ever reach a socket."""
    refused = 0
    for index in range(3000):
        case = make_case(5, index, POOLS)
        try:
            Decoder().feed(case.data)
        except MQTTError:
            refused += 1
    assert refused > 1000  # the mutators do break most sequences


def test_mutate_names_what_it_did() -> None:
    rng = random.Random(2)
    gen = Generator(rng, POOLS)
    seen: set[str] = set()
    for _ in range(500):
        _, names = mutate(rng, gen.sequence(), gen)
        seen.update(names)
    assert seen == set(MUTATORS)


def test_frames_splits_a_stream_and_keeps_partial_frames() -> None:
    f = Frames()
    connack, suback = frame(0x20, b"\x00\x00"), frame(0x90, b"\x00\x01\x01")
    data = connack + suback + frame(0x30, string("a") + b"x" * 200)
    assert f.feed(data[:3]) == []
    assert f.feed(data[3:7]) == [(0x20, b"\x00\x00")]
    out = f.feed(data[7:])
    assert [first for first, _ in out] == [0x90, 0x30]
    assert len(out[1][1]) == 203


def test_frames_refuses_a_five_byte_length() -> None:
    with pytest.raises(Malformed):
        Frames().feed(b"\x30\xff\xff\xff\xff\x7f")


def test_varint_is_minimal() -> None:
    assert varint(0) == b"\x00" and varint(127) == b"\x7f" and varint(128) == b"\x80\x01"
    assert varint(268_435_455) == b"\xff\xff\xff\x7f"


def test_persistent_round_trips_reuse_a_small_pool() -> None:
    plans = [roundtrip.Plan.of(1, n) for n in range(300)]
    persistent = {p.client_id for p in plans if p.persistent}
    assert len(persistent) == roundtrip.PERSISTENT_POOL
    clean = [p.client_id for p in plans if not p.persistent]
    assert len(set(clean)) == len(clean)


def test_the_memory_track_sees_a_restart() -> None:
    track = probe.MemoryTrack()
    quiet = probe.Sample({"listener": (10, 0)}, {"listener": (50_000, 20_000)}, {})
    assert track.add(quiet) == []
    assert track.add(quiet) == []
    restarted = probe.Sample({"listener": (11, 1)}, {"listener": (40_000, 15_000)}, {})
    assert track.add(restarted) == ["listener"]
    assert track.peak["listener"] == (50_000, 20_000)
    assert track.mark() == {"listener": 40_000}
