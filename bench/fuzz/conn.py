"""One client connection for the fuzzer: an asyncio protocol that keeps what comes back.

Plain asyncio streams cost several times more per connection than a bare protocol, and
the fuzzer opens hundreds of connections a second on a machine it shares with the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct

from bench.fuzz.wire import Frames, Malformed

LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends an RST


class Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.frames: list[tuple[int, bytes]] = []
        self.splitter = Frames()
        self.received = 0
        self.malformed = ""  # the broker sent something that is no MQTT frame
        self.closed = asyncio.get_running_loop().create_future()
        self.wakeup = asyncio.Event()

    @classmethod
    async def open(cls, host: str, port: int, timeout: float) -> Conn:
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(loop.create_connection(cls, host, port), timeout)
        return proto

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        if not self.malformed:
            try:
                self.frames.extend(self.splitter.feed(data))
            except Malformed as exc:
                self.malformed = str(exc)
        self.wakeup.set()

    def eof_received(self) -> bool | None:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result("reset" if exc is not None else "closed")
        self.wakeup.set()

    @property
    def is_closed(self) -> bool:
        return self.closed.done()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def write_eof(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write_eof()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def reset(self) -> None:
        if self.transport is None or self.is_closed:
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
        self.transport.abort()

    async def wait_closed(self, timeout: float) -> bool:
        """True when the broker closed the connection within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)
        except TimeoutError:
            return False
        return True

    async def next_frame(self, timeout: float) -> tuple[int, bytes]:
        """The next frame the broker sends; TimeoutError, or ConnectionError on close."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.frames:
            if self.malformed:
                raise ConnectionError(f"broker sent a malformed frame: {self.malformed}")
            if self.is_closed:
                raise ConnectionError("closed by the broker")
            self.wakeup.clear()
            left = deadline - loop.time()
            if left <= 0:
                raise TimeoutError
            try:
                await asyncio.wait_for(self.wakeup.wait(), left)
            except TimeoutError:
                continue
        return self.frames.pop(0)
