"""While a resumed session's replay waits, the client's PINGREQs are answered and the
connection stays alive; everything else stays held, in order, until the replay.

A replicated queue's read can wait for its tail to reach the write quorum (a restarted
primary with fewer than W copies up), longer than a client's keepalive. Input used to be
paused for the whole wait: the client's PINGREQ went unanswered (it gave up and
reconnected, to wait again), and the server's own keepalive timer could end the
connection it was holding.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvloop

from services.listener import connection as connection_module
from services.listener.connection import Connection
from services.listener.session.actions import SubscribeRequest
from services.listener.session.messages import Message
from tests.support.connection import served
from tests.unit.test_listener_resume_once import FakeBroker as ResumingBroker

# 3.1.1 CONNECT, clean session off, keepalive 1 s, client id "c-1"
CONNECT = b"\x10\x0f\x00\x04MQTT\x04\x00\x00\x01\x00\x03c-1"
PINGREQ = b"\xc0\x00"
PINGRESP = b"\xd0\x00"
SUBSCRIBE = b"\x82\x08\x00\x05\x00\x03a/b\x01"  # packet id 5, "a/b" at QoS 1
SUBACK = b"\x90\x03\x00\x05\x01"


class FakeBroker(ResumingBroker):
    """Resumes every session; grants subscriptions, counts what is published."""

    def __init__(self) -> None:
        super().__init__()
        self.routed = 0

    def route(self, msg: Message, client: Any, token: int | None) -> None:
        self.routed += 1

    def subscribe(self, client: Connection, req: SubscribeRequest) -> None:
        client.subscribed(req.packet_id, [s.qos for s in req.subscriptions])


async def _recv(client: socket.socket, n: int, timeout: float) -> bytes:
    loop = asyncio.get_running_loop()
    got = b""
    while len(got) < n:
        chunk = await asyncio.wait_for(loop.sock_recv(client, n - len(got)), timeout)
        if not chunk:
            break
        got += chunk
    return got


async def _pings_during_a_long_resume() -> tuple[list[bytes], bool, bytes]:
    loop = asyncio.get_running_loop()
    broker: Any = FakeBroker()
    async with served(broker) as client:
        await loop.sock_sendall(client, CONNECT)
        assert await _recv(client, 4, 5) == b"\x20\x02\x01\x00"  # session present
        conn: Connection = broker.conns[0]
        assert conn.resuming
        await loop.sock_sendall(client, SUBSCRIBE)  # held until the replay
        answers = []
        # three keepalive periods (1 s, the server allows 1.5 s of silence) of pinging
        for _ in range(8):
            await asyncio.sleep(0.4)
            await loop.sock_sendall(client, PINGREQ)
            answers.append(await _recv(client, 2, 2))
        still_open = not conn.closed
        conn.resume([], [], [])  # the replay: what was held is handled now
        return answers, still_open, await _recv(client, len(SUBACK), 5)


def test_pings_are_answered_while_the_replay_waits_and_the_rest_follows_it() -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        answers, still_open, after = runner.run(asyncio.wait_for(_pings_during_a_long_resume(), 30))
    assert answers == [PINGRESP] * 8
    assert still_open, "the server's keepalive ended a connection whose client pinged"
    assert after == SUBACK  # the SUBSCRIBE held behind the replay, answered after it


async def _flood_during_a_resume(limit: int) -> tuple[int, int, int]:
    loop = asyncio.get_running_loop()
    broker: Any = FakeBroker()
    async with served(broker) as client:
        await loop.sock_sendall(client, CONNECT)
        assert await _recv(client, 4, 5) == b"\x20\x02\x01\x00"
        conn: Connection = broker.conns[0]
        publish = b"\x30\x85\x08\x00\x03a/b" + b"x" * 1024  # QoS 0, 1 KB: a read holds few
        flood = publish * (limit * 40)
        sender = loop.create_task(loop.sock_sendall(client, flood))
        await asyncio.sleep(0.5)
        held = len(conn._held or [])
        conn.resume([], [], [])  # released: the rest is read and handled
        await asyncio.wait_for(sender, 10)
        sent = len(flood) // len(publish)
        for _ in range(200):
            if broker.routed == sent:
                break
            await asyncio.sleep(0.05)
        return held, sent, broker.routed


def test_input_held_during_a_resume_is_bounded() -> None:
    limit = connection_module._RESUME_HOLD
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        held, sent, routed = runner.run(asyncio.wait_for(_flood_during_a_resume(limit), 30))
    # reading pauses at the bound; the read that crossed it adds what it carried
    assert limit <= held < sent // 4, (held, sent)
    assert routed == sent  # nothing dropped: all of it handled once released
