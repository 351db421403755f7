"""MQTT over WebSocket (``listener.ws.*``, ``listener.wss.*``): the upgrade, the frames,
and an MQTT connection on top.

Theory of operation. The WebSocket protocol itself (the HTTP upgrade, framing, masking,
ping, close) is ``wsproto``'s, a sans-IO library: :class:`WsProtocol` feeds it the
socket's bytes and writes what it returns. Once a client has upgraded on path ``/mqtt``
with subprotocol ``mqtt`` (3.1.1 and 5.0) or ``mqttv3.1`` (3.1), an ordinary
:class:`~services.listener.connection.Connection` takes over the MQTT stream. It sees a
transport (:class:`_WsTransport`) whose ``write`` sends one binary message, and it gets
each binary message's bytes as a TCP connection's data: MQTT packets may span messages,
and one message may carry several, as MQTT over WebSocket allows. Flow control passes
through both ways: pausing the MQTT connection's reading pauses the socket's, and the
socket's write buffer pauses the MQTT connection's writers.

A PROXY header (``proxy_protocol``) is read before the HTTP request on ``ws``; on
``wss`` the TLS listener reads it before the handshake. A request that is not a
WebSocket upgrade to ``/mqtt``, or that offers only subprotocols other than ours, is
answered with an HTTP error and logged as ``client.rejected``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from services.listener.proxy_protocol import ProxyHeaderError, ProxyReader

PATH = "/mqtt"
SUBPROTOCOLS = ("mqtt", "mqttv3.1")  # ours, in order of preference
MAX_REQUEST = 16 * 1024  # bytes of HTTP request before the upgrade is given up on

# Makes the MQTT connection once upgraded: (peer, identity) -> protocol.
MakeConnection = Callable[[str, "str | None"], Any]
Rejected = Callable[[str, str], None]  # (peer, reason)


def choose_subprotocol(offered: list[str]) -> str | None:
    """Ours that the client offered (None when it offered none: accepted without one,
    as MQTT.js and paho send one but some clients do not); "" when it offered only
    others."""
    if not offered:
        return None
    for ours in SUBPROTOCOLS:
        if ours in offered:
            return ours
    return ""


class WsProtocol(asyncio.Protocol):
    """One WebSocket connection: the upgrade, then an MQTT connection over it."""

    def __init__(
        self,
        make: MakeConnection,
        rejected: Rejected,
        proxy: bool = False,
        peer: str = "",
        identity: str | None = None,
    ) -> None:
        self.make = make
        self.rejected = rejected
        self.ws = WSConnection(ConnectionType.SERVER)
        self.proxy = ProxyReader() if proxy else None
        self.peer = peer
        self.identity = identity
        self.raw: asyncio.Transport | None = None
        self.inner: Any = None  # the MQTT connection, once upgraded
        self.shim: _WsTransport | None = None
        self.received = 0  # bytes before the upgrade

    # -- the socket's side -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.raw = transport  # type: ignore[assignment]
        if not self.peer:
            name = transport.get_extra_info("peername")
            self.peer = f"{name[0]}:{name[1]}" if isinstance(name, tuple) else str(name)

    def data_received(self, data: bytes) -> None:
        if self.proxy is not None:
            try:
                header = self.proxy.feed(data)
            except ProxyHeaderError as exc:
                self._refuse(f"proxy_protocol: {exc}")
                return
            if header is None:
                return
            if header.source is not None:
                self.peer = f"{header.source[0]}:{header.source[1]}"
            data, self.proxy = self.proxy.rest, None
            if not data:
                return
        if self.inner is None:
            self.received += len(data)
            if self.received > MAX_REQUEST:
                self._refuse("websocket: the upgrade request is too long")
                return
        try:
            self.ws.receive_data(data)
            self._events()
        except RemoteProtocolError as exc:
            if self.inner is None:
                self._reject(400, f"websocket: {exc}")
            else:
                self._close_inner(1002)

    def eof_received(self) -> bool | None:
        if self.inner is not None:
            return bool(self.inner.eof_received())
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    # -- WebSocket events ----------------------------------------------------------------
    def _events(self) -> None:
        for event in self.ws.events():
            if isinstance(event, Request):
                self._upgrade(event)
            elif isinstance(event, BytesMessage):
                if self.inner is not None and event.data:
                    self.inner.data_received(bytes(event.data))
            elif isinstance(event, TextMessage):
                self._close_inner(1003)  # MQTT travels in binary messages only
            elif isinstance(event, Ping):
                self._send(event.response())
            elif isinstance(event, CloseConnection):
                if self.ws.state is ConnectionState.REMOTE_CLOSING:
                    self._send(event.response())
                if self.raw is not None:
                    self.raw.close()
            if self.raw is None or self.raw.is_closing():
                return

    def _upgrade(self, request: Request) -> None:
        path = request.target.split("?", 1)[0]
        if path != PATH:
            self._reject(404, f"websocket: path {path!r} (MQTT is on {PATH})")
            return
        sub = choose_subprotocol(list(request.subprotocols))
        if sub == "":
            offered = ", ".join(request.subprotocols)
            self._reject(400, f"websocket: subprotocols {offered} (ours: mqtt, mqttv3.1)")
            return
        self._send(AcceptConnection(subprotocol=sub))
        assert self.raw is not None
        self.shim = _WsTransport(self, self.raw)
        self.inner = self.make(self.peer, self.identity)
        self.inner.connection_made(self.shim)

    def _reject(self, status: int, reason: str) -> None:
        if self.ws.state is ConnectionState.CONNECTING:
            self._send(RejectConnection(status_code=status, headers=[], has_body=False))
        self._refuse(reason)

    def _refuse(self, reason: str) -> None:
        self.rejected(self.peer, reason)
        if self.raw is not None:
            self.raw.close()

    def _close_inner(self, code: int) -> None:
        if self.ws.state is ConnectionState.OPEN:
            self._send(CloseConnection(code=code))
        if self.raw is not None:
            self.raw.close()

    def _send(self, event: Any) -> None:
        if self.raw is not None and not self.raw.is_closing():
            self.raw.write(self.ws.send(event))


class _WsTransport:
    """What the MQTT connection writes to: each write one binary message. Duck-typed as
    an ``asyncio.Transport``, as far as the connection uses one."""

    def __init__(self, owner: WsProtocol, raw: asyncio.Transport) -> None:
        self.owner = owner
        self.raw = raw
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed or self.raw.is_closing():
            return
        self.raw.write(self.owner.ws.send(Message(data=bytes(data))))

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.owner.ws.state is ConnectionState.OPEN and not self.raw.is_closing():
            self.raw.write(self.owner.ws.send(CloseConnection(code=1000)))
        self.raw.close()

    def abort(self) -> None:
        self.closed = True
        self.raw.abort()

    def is_closing(self) -> bool:
        return self.closed or self.raw.is_closing()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        self.close()

    def pause_reading(self) -> None:
        self.raw.pause_reading()

    def resume_reading(self) -> None:
        self.raw.resume_reading()

    def is_reading(self) -> bool:
        return bool(self.raw.is_reading())

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return int(self.raw.get_write_buffer_size())

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.raw.get_extra_info(name, default)  # the connection is handed the peer
