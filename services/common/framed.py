"""Length-prefixed protobuf messages over a local unix socket: the connect path's transport.

A gRPC aio stream message costs each side 150-200 µs of CPU and a round trip about
300 µs on a 2-core VM (``bench/rpc_cost.py``), against 25 µs over a plain socket. A lone
CONNECT makes two such round trips to the registry (its registration, later its end),
which alone spent more than the whole 0.5 ms a sequential CONNECT may take. The
registry's ``Connections`` stream and the msgstore's ``Stream`` (every write of a
persistent session) therefore also run here, same messages, same semantics, between
processes of one node (``services.common.lane``); gRPC keeps every other call and
remains the fallback when the service's address is not a unix socket.

A frame is a 4-byte big-endian length and that many bytes (one serialized message). The
server's first frame is empty: the stream is up (gRPC's initial metadata). Either side
closing its socket ends the stream; a frame over :data:`MAX_FRAME` or a truncated one is a
:class:`FrameError`, and the stream is dropped.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from typing import Final

HEADER = struct.Struct(">I")
MAX_FRAME = 64 * 1024 * 1024  # as grpcutil's max message length
HELLO = HEADER.pack(0)
MAX_SOCKET_PATH = 107  # bytes of sun_path before its NUL; a longer lane is left to gRPC
REGISTRY_LANE = "conn"  # the registry's Connections stream: run/registry.conn.sock
STORE_LANE = "stream"  # the msgstore's Stream: run/msgstore.stream.sock
CALL_LANE = "call"  # a service's unary methods: run/<service>.call.sock


class FrameError(Exception):
    """The peer broke framing: the stream cannot go on."""


class LaneError(Exception):
    """A call on a lane ended with a status: a ``grpc.StatusCode`` name, as an
    ``AioRpcError`` carries (a servicer's ``context.abort`` on the service's side, the
    reply's status on the caller's)."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


def frame(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME:
        raise FrameError(f"frame of {len(payload)} bytes, over {MAX_FRAME}")
    return HEADER.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's bytes, or None when the peer closed between frames."""
    try:
        head = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise FrameError("stream closed inside a frame header") from None
    (size,) = HEADER.unpack(head)
    if size > MAX_FRAME:
        raise FrameError(f"frame of {size} bytes announced, over {MAX_FRAME}")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError(f"stream closed inside a frame of {size} bytes") from None


# A lane's StreamReader stops reading from its socket once it buffers twice its limit;
# asyncio's default (64 KiB) paused and resumed it several times within one batch of a
# few hundred KiB, each time an epoll change and a wake-up on both ends.
READ_LIMIT: Final = 4 * 1024 * 1024


async def open_lane(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the lane at ``path``, once the service's hello came. Raises
    ``OSError`` (nobody listens, or the service closed at once) or :class:`FrameError`."""
    reader, writer = await asyncio.open_unix_connection(path, limit=READ_LIMIT)
    try:
        hello = await read_frame(reader)
    except BaseException:
        writer.close()
        raise
    if hello is None:
        writer.close()
        raise ConnectionResetError(f"{path}: the service closed the lane at once")
    return reader, writer


async def frames(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while (data := await read_frame(reader)) is not None:
        yield data


def socket_path(grpc_address: str, lane: str, enabled: bool = True) -> str | None:
    """The unix socket beside a service's gRPC socket for ``lane``, or None when lanes
    are off (``service_lanes``), the service listens on TCP (a service on another host
    gets gRPC only) or the path would not fit a socket address."""
    if not enabled or not grpc_address.startswith("unix:"):
        return None
    path = grpc_address[5:].removeprefix("//")
    stem = path.removesuffix(".sock")
    lane_path = f"{stem}.{lane}.sock"
    return lane_path if len(lane_path.encode()) <= MAX_SOCKET_PATH else None
