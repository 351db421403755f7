"""Framing: partial feeds, size limits, version tracking, errors in a stream."""

from __future__ import annotations

import ast
import pathlib
import time

import pytest

from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.encoder import encode
from services.listener.mqtt.errors import MalformedPacket, PacketTooLarge
from services.listener.mqtt.types import (
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Puback,
    Publish,
    Subscribe,
    Subscription,
)

H = bytes.fromhex

STREAM: list[Packet] = [
    Connect("MQTT", 4, True, 30, "client"),
    Subscribe(1, (Subscription("a/#", 1), Subscription("b", 0))),
    Publish("a/b", b"x" * 300, 1, False, False, 2),
    Puback(2),
    Pingreq(),
    Publish("a/c", b"", 0),
    Disconnect(),
]


def _wire() -> bytes:
    return b"".join(encode(p, 4) for p in STREAM)


def test_whole_stream_at_once() -> None:
    decoder = Decoder()
    assert decoder.feed(_wire()) == STREAM
    assert decoder.buffered == 0


def test_byte_by_byte() -> None:
    decoder = Decoder()
    out: list[Packet] = []
    for byte in _wire():
        out += decoder.feed(bytes((byte,)))
    assert out == STREAM
    assert decoder.buffered == 0


@pytest.mark.parametrize("chunk", [2, 3, 7, 64, 301])
def test_fixed_chunks(chunk: int) -> None:
    data = _wire()
    decoder = Decoder()
    out: list[Packet] = []
    for i in range(0, len(data), chunk):
        out += decoder.feed(data[i : i + chunk])
    assert out == STREAM


def test_partial_frame_is_kept() -> None:
    data = encode(Publish("t", b"payload"), 4)
    decoder = Decoder()
    assert decoder.feed(data[:-1]) == []
    assert decoder.buffered == len(data) - 1
    assert decoder.feed(data[-1:] + data[:1]) == [Publish("t", b"payload")]
    assert decoder.buffered == 1
    assert decoder.feed(b"") == []


def test_empty_feed() -> None:
    assert Decoder().feed(b"") == []


def test_too_large_raised_from_header_alone() -> None:
    """[MQTT-3.1.2-24]-style limit: refused before the body is buffered."""
    decoder = Decoder(max_packet_size=1024)
    # PUBLISH announcing 200 MB: only the five header bytes were sent
    with pytest.raises(PacketTooLarge) as info:
        decoder.feed(H("30 80 80 80 60"))
    assert info.value.reason_code == 0x95


def test_max_packet_size_counts_the_whole_packet() -> None:
    data = encode(Publish("t", b"x" * 100), 4)  # 2 + 3 + 100 = 105 bytes
    assert len(data) == 105
    assert Decoder(max_packet_size=105).feed(data) == [Publish("t", b"x" * 100)]
    with pytest.raises(PacketTooLarge):
        Decoder(max_packet_size=104).feed(data[:2])


def test_error_keeps_preceding_packets() -> None:
    good = encode(Puback(1), 4) + encode(Pingreq(), 4)
    with pytest.raises(MalformedPacket) as info:
        Decoder().feed(good + H("40 02 0000"))
    assert info.value.preceding == (Puback(1), Pingreq())


def test_connect_sets_version_once() -> None:
    decoder = Decoder()
    assert decoder.protocol_version is None
    decoder.feed(encode(Connect("MQTT", 5, True, 0, "c"), 5))
    assert decoder.protocol_version == 5
    # later packets follow MQTT 5 rules: a PUBACK with a reason code is legal
    assert decoder.feed(H("40 03 0001 10")) == [Puback(1, 0x10)]
    # a second CONNECT (a protocol error the session reports) does not switch versions
    assert decoder.feed(encode(Connect("MQTT", 4, True, 0, "c"), 4)) == [
        Connect("MQTT", 4, True, 0, "c")
    ]
    assert decoder.protocol_version == 5


def test_connect_and_v5_packet_in_one_feed() -> None:
    data = encode(Connect("MQTT", 5, True, 0, "c"), 5) + H("E0 01 04")
    assert Decoder().feed(data) == [Connect("MQTT", 5, True, 0, "c"), Disconnect(0x04)]


def test_large_frame_in_small_chunks_is_linear() -> None:
    """A quadratic buffer would copy ~32 GB here; the linear one copies 8 MB."""
    payload = bytes(range(256)) * (4 * 4096)  # 4 MiB
    data = encode(Publish("big", payload), 4)
    decoder = Decoder()
    out: list[Packet] = []
    start = time.monotonic()
    for i in range(0, len(data), 256):
        out += decoder.feed(data[i : i + 256])
    elapsed = time.monotonic() - start
    assert out == [Publish("big", payload)]
    assert elapsed < 5.0, f"feeding 4 MiB in 256 byte chunks took {elapsed:.1f}s"


FORBIDDEN = {"asyncio", "grpc", "lmdb", "socket", "time", "threading", "selectors"}


def test_codec_is_sans_io() -> None:
    package = pathlib.Path(__file__).parents[2] / "services" / "listener" / "mqtt"
    modules = sorted(package.glob("*.py"))
    assert len(modules) >= 8
    for path in modules:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
