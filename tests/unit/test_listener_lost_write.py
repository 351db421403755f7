"""A write held for a connection that is lost before it is flushed is dropped.

The fuzzer found this: writes held behind a QoS 2 barrier (or scheduled for the end of
the loop turn) may be flushed after the client reset the connection, and uvloop raises
on a write to a closed transport where asyncio only logs. The flush must drop what
nobody can read, not raise in the event loop.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvloop

from services.listener.connection import Connection
from services.listener.session.actions import Ended, Register
from tests.support.connection import served

CONNECT = b"\x10\x0f\x00\x04MQTT\x04\x02\x00\x3c\x00\x03c-1"


class FakeBroker:
    """Answers every Register at once; nothing else is needed on this path."""

    def __init__(self) -> None:
        self.conns: list[Connection] = []
        self._ids = 0

    def msg_id_source(self) -> str:
        self._ids += 1
        return str(self._ids)

    def register(self, conn: Connection, req: Register) -> None:
        self.conns.append(conn)
        asyncio.get_running_loop().call_soon(conn.registered, True, 1, False, False, 0)

    def ended(self, conn: Connection, action: Ended) -> None:
        pass


async def _lost_before_flush() -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
    broker: Any = FakeBroker()
    async with served(broker) as client:
        await loop.sock_sendall(client, CONNECT)
        assert await asyncio.wait_for(loop.sock_recv(client, 4), 5) == b"\x20\x02\x00\x00"
        conn = broker.conns[0]
        barrier: asyncio.Future[str] = loop.create_future()  # a QoS 2 mark on its way
        conn._barrier = barrier
        barrier.add_done_callback(conn._barrier_passed)
        conn._write(b"\x50\x02\x00\x01")  # the PUBREC it holds back ...
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00" * 2)
        client.close()  # ... while the client resets the connection
        for _ in range(100):
            if conn.closed:
                break
            await asyncio.sleep(0.01)
        assert conn.closed
        barrier.set_result("")  # the mark is durable: the held writes are flushed
        await asyncio.sleep(0.05)
        return errors


def test_a_write_to_a_lost_connection_is_dropped_not_raised() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        errors = runner.run(asyncio.wait_for(_lost_before_flush(), 30))
    assert errors == []
