"""Memory held per idle MQTT connection, measured with tracemalloc, against a budget.

Brokers hold tens of thousands of connections that are connected and silent, so what a
``Session`` and a ``Connection`` keep for such a client is a figure to defend: every
per-connection dict, deque or bound method left behind multiplies. The budgets sit a
little above what the code takes today (figures in each test) and far below what it
took before ``__slots__``, lazy queues and the shared timer heap (in brackets): a
regression of a few hundred bytes per connection fails here.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import socket
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvloop

from services.common.config import load
from services.common.metrics import MetricsRegistry
from services.listener.broker import Broker
from services.listener.config import tcp_listeners
from services.listener.connection import Connection
from services.listener.metrics import ListenerMetrics
from services.listener.mqtt.types import NO_PROPERTIES, Connect
from services.listener.session.actions import Ended, Register
from services.listener.session.auth import AllowAll
from services.listener.session.core import Session
from services.listener.session.limits import SessionLimits
from services.node.schema import schema

SESSION_BUDGET = 800
"""Bytes per idle connected 3.1.1 session: ~600 today [~3,000 before]."""

CONNECTION_BUDGET = 3_700
"""Bytes per idle connection in the listener process, uvloop's transport (~1,200)
included: ~3,000 today [~9,100 before]."""


@pytest.fixture
def traced() -> Iterator[None]:
    gc.collect()
    tracemalloc.start(1)
    try:
        yield
    finally:
        tracemalloc.stop()


def retained_per_item(build: Callable[[int], Any], n: int) -> float:
    """Traced bytes still allocated after ``build(i)`` for ``n`` items, per item."""
    keep = [None] * n  # allocated before the first snapshot: not counted
    gc.collect()
    before, _ = tracemalloc.get_traced_memory()
    for i in range(n):
        keep[i] = build(i)
    gc.collect()
    after, _ = tracemalloc.get_traced_memory()
    assert all(k is not None for k in keep)
    return (after - before) / n


def test_an_idle_session_stays_within_budget(traced: None) -> None:
    limits = SessionLimits()
    auth = AllowAll()
    ids = iter(range(10**9))

    def msg_id() -> str:
        return str(next(ids))

    def build(i: int) -> Session:
        session = Session(limits, auth, "127.0.0.1:50000", msg_id, 1000.0)
        session.start(1000.0)
        connect = Connect("MQTT", 4, True, 300, f"client-{i:06d}", None, None, None, NO_PROPERTIES)
        session.handle_packet(connect, 1000.0)
        session.handle_registered(True, 1, False, False, 0, 1000.0)
        assert session.connected
        return session

    per_session = retained_per_item(build, 500)
    assert per_session < SESSION_BUDGET, f"{per_session:.0f} bytes per idle session"


class FakeBroker(Broker):
    """Stands in for ``Broker`` on the idle path: every Register is answered at once."""

    def __init__(self, config: Any) -> None:  # no super().__init__: no services to talk to
        self.config = config
        self.sessions: dict[tuple[str, str], Connection] = {}
        self._fake_ids = 0
        self.msg_id_source = self.next_msg_id

    def next_msg_id(self) -> str:
        self._fake_ids += 1
        return str(self._fake_ids)

    def register(self, conn: Connection, req: Register) -> None:
        self.sessions[(req.mountpoint, req.client_id)] = conn
        asyncio.get_running_loop().call_soon(conn.registered, True, 1, False, False, 0)

    def ended(self, conn: Connection, action: Ended) -> None:
        if conn.sid is not None:
            self.sessions.pop(conn.sid, None)


def _connect_frame(client_id: str) -> bytes:
    """CONNECT 3.1.1, clean session, keepalive 300."""
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x01\x2c" + len(cid).to_bytes(2, "big") + cid
    return bytes([0x10, len(body)]) + body


async def _idle_connections(n: int) -> tuple[float, list[Connection]]:
    """Open ``n`` idle connections to a real listener socket; bytes per connection
    allocated outside this file (the client side is allocated here: not counted)."""
    config = load(schema(), None)
    broker = FakeBroker(config)
    listener = tcp_listeners(config)[0]
    limits = SessionLimits.from_config(config, listener.mountpoint, listener.allowed_versions)
    metrics = ListenerMetrics(MetricsRegistry())
    # partial, not a function of this file: Connection objects must not look like
    # allocations of this file, which are the client side and are filtered out
    fake: Any = broker
    factory = functools.partial(Connection, fake, listener, limits, AllowAll(), metrics, False)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(factory, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    clients: list[socket.socket] = []
    try:
        for warm in range(20):  # first connections fill caches and free lists
            clients.append(await _client(loop, port, f"warm-{warm}"))
        gc.collect()
        here = tracemalloc.Filter(False, __file__)
        before = tracemalloc.take_snapshot().filter_traces([here])
        for i in range(n):
            clients.append(await _client(loop, port, f"idle-{i:06d}"))
        await asyncio.sleep(0.05)
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces([here])
        grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
        conns = list(broker.sessions.values())
        return grown / n, conns
    finally:
        for c in clients:
            c.close()
        server.close()
        await server.wait_closed()
        await asyncio.sleep(0.05)


async def _client(loop: asyncio.AbstractEventLoop, port: int, client_id: str) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, _connect_frame(client_id))
    connack = await asyncio.wait_for(loop.sock_recv(sock, 4), 5)
    assert connack == b"\x20\x02\x00\x00"
    return sock


def test_an_idle_connection_stays_within_budget(traced: None) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        per_conn, conns = runner.run(asyncio.wait_for(_idle_connections(300), 60))
    assert len(conns) >= 300
    assert per_conn < CONNECTION_BUDGET, f"{per_conn:.0f} bytes per idle connection"


def test_the_per_connection_objects_have_no_instance_dict() -> None:
    """A ``__dict__`` would come back with any attribute set outside ``__slots__``."""
    session = Session(SessionLimits(), AllowAll(), "p", str, 0.0)
    for obj in (session, session.outbound):
        assert not hasattr(obj, "__dict__"), type(obj).__name__
    assert "__dict__" not in dir(Connection)
