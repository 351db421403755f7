"""The registry's ``Connections`` stream on a plain unix socket (``services.common.framed``).

Each accepted socket is one ``Connections`` call: the servicer runs unchanged, fed the
frames read as its request iterator, and its answers are written back as frames. Only
the transport differs from the gRPC method, which stays for listeners that reach the
registry over TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from google.protobuf.message import DecodeError

from services.common.framed import HELLO, FrameError, frame, frames
from services.common.grpcutil import rpc_failed_as
from services.pb import registry_pb2
from services.registry.servicer import RegistryServicer


class _Context:
    """What ``RegistryServicer.Connections`` needs of a gRPC context."""

    __slots__ = ("_writer",)

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def send_initial_metadata(self, _metadata: object) -> None:
        self._writer.write(HELLO)


async def _ops(reader: asyncio.StreamReader) -> AsyncIterator[registry_pb2.ConnectionOps]:
    async for data in frames(reader):
        yield registry_pb2.ConnectionOps.FromString(data)


class Lane:
    """The listening socket and the streams it carries (closed with it)."""

    def __init__(self, path: str, servicer: RegistryServicer) -> None:
        self.path = path
        self.servicer = servicer
        self.server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        sock = Path(self.path)
        sock.parent.mkdir(parents=True, exist_ok=True)
        sock.unlink(missing_ok=True)  # a killed registry's socket file
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
            async for out in self.servicer.Connections(_ops(reader), _Context(writer)):
                writer.write(frame(out.SerializeToString()))
                await writer.drain()  # a listener that stops reading holds its own answers
        except (ConnectionError, FrameError, DecodeError) as exc:
            rpc_failed_as("registry", "Connections", "UNAVAILABLE", repr(exc))
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
