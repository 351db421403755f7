"""Framing of the connect path's unix-socket stream (``services.common.framed``)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.framed import (
    HELLO,
    MAX_FRAME,
    FrameError,
    frame,
    frames,
    read_frame,
    socket_path,
)


def _read_all(data: bytes, chunks: list[int]) -> list[bytes]:
    """Every frame of ``data`` fed in pieces of the given sizes, then EOF."""

    async def main() -> list[bytes]:
        reader = asyncio.StreamReader()
        rest = data
        for size in chunks:
            reader.feed_data(rest[:size])
            rest = rest[size:]
        reader.feed_data(rest)
        reader.feed_eof()
        return [f async for f in frames(reader)]

    return asyncio.run(main())


@given(st.lists(st.binary(max_size=300), max_size=20), st.lists(st.integers(1, 50)))
def test_frames_come_back_whole_however_the_bytes_are_split(
    payloads: list[bytes], chunks: list[int]
) -> None:
    data = b"".join(frame(p) for p in payloads)
    assert _read_all(data, chunks) == payloads


def test_the_hello_is_an_empty_frame() -> None:
    assert _read_all(HELLO, []) == [b""]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x00", "inside a frame header"),
        (b"\x00\x00\x00\x05abc", "inside a frame of 5 bytes"),
        ((MAX_FRAME + 1).to_bytes(4, "big"), "over"),
    ],
)
def test_a_broken_stream_is_an_error_not_an_end(data: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        _read_all(frame(b"ok") + data, [])


def test_an_oversize_payload_is_refused_before_it_is_sent() -> None:
    with pytest.raises(FrameError):
        frame(bytes(MAX_FRAME + 1))


def test_the_lane_sits_beside_the_grpc_socket_only_for_unix_addresses() -> None:
    assert socket_path("unix:/d/run/registry.sock", "conn") == "/d/run/registry.conn.sock"
    assert socket_path("unix:///d/run/registry.sock", "conn") == "/d/run/registry.conn.sock"
    assert socket_path("127.0.0.1:9001", "conn") is None


def test_read_frame_says_none_at_a_clean_end() -> None:
    async def main() -> bytes | None:
        reader = asyncio.StreamReader()
        reader.feed_eof()
        return await read_frame(reader)

    assert asyncio.run(main()) is None
