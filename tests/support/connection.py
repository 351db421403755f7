"""One listener ``Connection`` served on a loopback socket, for unit tests that drive it
through a fake broker (what the broker would call on it, they call themselves)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import AsyncIterator
from typing import Any

from services.common.config import load
from services.common.metrics import MetricsRegistry
from services.listener.config import tcp_listeners
from services.listener.connection import Connection
from services.listener.metrics import ListenerMetrics
from services.listener.session.auth import AllowAll
from services.listener.session.limits import SessionLimits
from services.node.schema import schema


@contextlib.asynccontextmanager
async def served(broker: Any) -> AsyncIterator[socket.socket]:
    """A server whose connections talk to ``broker`` (default configuration), and a
    non-blocking client socket connected to it; both closed on exit."""
    loop = asyncio.get_running_loop()
    config = load(schema(), None)
    listener = tcp_listeners(config)[0]
    limits = SessionLimits.from_config(config, listener.mountpoint, listener.allowed_versions)
    metrics = ListenerMetrics(MetricsRegistry())
    factory = functools.partial(Connection, broker, listener, limits, AllowAll(), metrics, False)
    server = await loop.create_server(factory, "127.0.0.1", 0)
    client = socket.socket()
    client.setblocking(False)
    try:
        await loop.sock_connect(client, server.sockets[0].getsockname())
        yield client
    finally:
        client.close()
        server.close()
        await server.wait_closed()
