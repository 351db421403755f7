"""A service's long-lived stream served on a plain unix socket (``services.common.framed``).

Each accepted socket is one call of the stream. The service writes an empty frame first
(the stream is up: gRPC's initial metadata), then the servicer's method runs unchanged,
fed the frames read as its request iterator, and what it yields is written back as
frames. Only the transport differs from the gRPC method, which stays for clients that
reach the service over TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from services.common.framed import HELLO, FrameError, frame, frames
from services.common.grpcutil import rpc_failed_as

Call = Callable[[AsyncIterator[bytes], Any], AsyncIterator[Any]]
"""The servicer's stream method: raw request frames and a context in, messages out."""


class LaneContext:
    """What the servicers' stream methods use of a gRPC context."""

    __slots__ = ()

    async def send_initial_metadata(self, _metadata: object) -> None:
        """Sent already: the lane's first frame."""


class Lane:
    """The listening socket and the streams it carries (closed with it)."""

    def __init__(self, path: str, call: Call, target: str, method: str) -> None:
        self.path = path
        self.call = call
        self.target = target  # for rpc.failed: the service and the method it serves
        self.method = method
        self.server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        sock = Path(self.path)
        sock.parent.mkdir(parents=True, exist_ok=True)
        sock.unlink(missing_ok=True)  # a killed service's socket file
        self.server = await asyncio.start_unix_server(self._stream, self.path)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in list(self._writers):
            writer.close()  # each stream's reader sees the end, and its call returns
        if self.server is not None:
            await self.server.wait_closed()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            writer.write(HELLO)
            async for out in self.call(frames(reader), LaneContext()):
                writer.write(frame(out.SerializeToString()))
                await writer.drain()  # a client that stops reading holds its own answers
        except (ConnectionError, FrameError, DecodeError) as exc:
            rpc_failed_as(self.target, self.method, "UNAVAILABLE", repr(exc))
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
