"""A resumed session's replay and its live appends deliver each queue entry once.

The randomized fault run found this: an append routed to a session that was resuming
was already in the store when the resume's read ran, but the store's answer to the
append reached the listener only after the replay. The connection then delivered the
entry a second time, as a new PUBLISH without DUP (a QoS 2 message twice).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvloop

from services.common.metrics import MetricsRegistry
from services.listener.connection import Connection
from services.listener.session.actions import Ended, Register
from services.listener.session.messages import Message, OutboundMessage
from tests.support.connection import served

# 3.1.1 CONNECT, clean session off, client id "c-1"
CONNECT = b"\x10\x0f\x00\x04MQTT\x04\x00\x00\x3c\x00\x03c-1"


class FakeBroker:
    """Answers Register as a resumed persistent session; counts what is delivered."""

    def __init__(self) -> None:
        self.conns: list[Connection] = []
        self._ids = 0
        delivered = MetricsRegistry().counter("delivered_total", "PUBLISHes sent", ["qos"])
        self.delivered_qos = [delivered.labels(str(qos)) for qos in (0, 1, 2)]

    def msg_id_source(self) -> str:
        self._ids += 1
        return str(self._ids)

    def register(self, conn: Connection, req: Register) -> None:
        self.conns.append(conn)
        conn.resuming = True  # as the lifecycle sets it for a resumed persistent session
        # session present; not persistent, so that no delivered mark goes to a store
        asyncio.get_running_loop().call_soon(conn.registered, True, 1, True, False, 0)

    def ended(self, conn: Connection, action: Ended) -> None:
        pass


def _entry(seq: int) -> OutboundMessage:
    msg = Message(f"m{seq}", "t", f"p{seq}".encode(), 1, False, "pub", "", 0.0)
    return OutboundMessage(msg, 1, False, (), seq)


def _publish_ids(data: bytes) -> list[int]:
    """The packet ids of the QoS 1 PUBLISH packets in ``data`` (server to client)."""
    ids, pos = [], 0
    while pos < len(data):
        kind = data[pos] >> 4
        length, shift, pos = 0, 0, pos + 1
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if kind == 3:
            topic_len = int.from_bytes(data[pos : pos + 2], "big")
            ids.append(int.from_bytes(data[pos + 2 + topic_len : pos + 4 + topic_len], "big"))
        pos += length
    return ids


async def _replay_then_late_answer() -> list[int]:
    loop = asyncio.get_running_loop()
    broker: Any = FakeBroker()
    async with served(broker) as client:
        await loop.sock_sendall(client, CONNECT)
        assert await asyncio.wait_for(loop.sock_recv(client, 4), 5) == b"\x20\x02\x01\x00"
        conn = broker.conns[0]
        conn.deliver(_entry(2))  # an append answered during the resume: buffered
        conn.resume([_entry(1), _entry(2), _entry(3)], [], [])  # the read held 1..3
        conn.deliver(_entry(3))  # answered after the replay, though the read had it
        conn.deliver(_entry(4))  # a new one
        # The client acknowledges what it gets: a second copy parked behind the first
        # one's packet id would go out once that id is free.
        received, acked = b"", 0
        try:
            while True:
                received += await asyncio.wait_for(loop.sock_recv(client, 4096), 0.5)
                ids = _publish_ids(received)
                for pid in ids[acked:]:
                    await loop.sock_sendall(client, b"\x40\x02" + pid.to_bytes(2, "big"))
                acked = len(ids)
        except TimeoutError:
            pass
        return _publish_ids(received)


def test_each_entry_is_delivered_once_across_the_replay() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        ids = runner.run(asyncio.wait_for(_replay_then_late_answer(), 30))
    assert len(ids) == 4 and len(set(ids)) == 4, ids
