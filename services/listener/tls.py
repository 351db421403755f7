"""TLS listeners (``listener.ssl.*``): the server context, and accepting connections.

Theory of operation. The context is built once at start-up from the listener's files;
a file that is missing, unreadable or not what its key says stops start-up with an
``OSError`` that names the key, the file and the reason (the node exits non-zero).

Connections are accepted here rather than by ``loop.create_server(ssl=…)``, for two
reasons:

- **PROXY before TLS.** A load balancer passing TLS through (HAProxy in TCP mode) sends
  its PROXY header in plain text ahead of the client's ClientHello, often in the same
  segment. The header is read off the socket with ``MSG_PEEK`` and then exactly its
  length, so the TLS stack sees the stream from the ClientHello on.
- **A refused handshake is the client's refusal.** An untrusted, expired or revoked
  client certificate, or a client that speaks no TLS, fails the handshake. That is
  logged as ``client.rejected`` with the reason and counted, not left to the event
  loop's generic error log.

Once the handshake is done the socket becomes an ordinary MQTT connection
(:class:`~services.listener.connection.Connection`), given the peer address (the PROXY
header's source, if any) and, with ``use_identity_as_username``, the certificate's CN.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from typing import Any

from services.common import log
from services.common.background import Background
from services.listener.config import TcpListener, TlsOptions
from services.listener.proxy_protocol import ProxyHeaderError, parse

ACCEPT_RETRY = 0.1  # s before accepting again after accept() failed (EMFILE)
PROXY_MAX = 536  # the longest PROXY header: v1 is at most 107 bytes, v2 216 + TLVs we allow
_VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}

# Makes the MQTT connection for an accepted, handshaken socket: (peer, identity).
ConnectionFactory = Callable[[str, "str | None"], asyncio.Protocol]
Rejected = Callable[[str, str], None]  # (peer, reason)


def build_context(name: str, opts: TlsOptions, transport: str = "ssl") -> ssl.SSLContext:
    """The server context of listener ``name``; OSError naming the bad setting."""
    where = f"listener.{transport}.{name}"
    if not opts.certfile or not opts.keyfile:
        raise OSError(f"{where}: a TLS listener needs listener.{transport}.certfile and keyfile")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[opts.tls_version]
    try:
        ctx.load_cert_chain(opts.certfile, opts.keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise OSError(
            f"{where}: cannot load certfile {opts.certfile} with keyfile {opts.keyfile}: "
            f"{_why(exc)}"
        ) from None
    if opts.ciphers:
        try:
            ctx.set_ciphers(opts.ciphers)
        except ssl.SSLError as exc:
            raise OSError(f"{where}: ciphers {opts.ciphers!r}: {_why(exc)}") from None
    if opts.require_certificate:
        if not opts.cafile:
            raise OSError(f"{where}: require_certificate needs listener.{transport}.cafile")
        ctx.verify_mode = ssl.CERT_REQUIRED
    elif opts.use_identity_as_username:
        raise OSError(f"{where}: use_identity_as_username needs require_certificate = on")
    if opts.cafile:
        try:
            ctx.load_verify_locations(cafile=opts.cafile)
        except (OSError, ssl.SSLError) as exc:
            raise OSError(f"{where}: cannot load cafile {opts.cafile}: {_why(exc)}") from None
    if opts.crlfile:
        try:
            ctx.load_verify_locations(cafile=opts.crlfile)
        except (OSError, ssl.SSLError) as exc:
            raise OSError(f"{where}: cannot load crlfile {opts.crlfile}: {_why(exc)}") from None
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    return ctx


def _why(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return str(getattr(exc, "reason", None) or exc)  # set_ciphers' has no reason
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def identity(peercert: dict[str, Any] | None) -> str | None:
    """The certificate subject's common name (CN), None without one."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class TlsServer:
    """Accepts connections on one TLS listener until closed."""

    def __init__(
        self,
        listener: TcpListener,
        ctx: ssl.SSLContext,
        make: ConnectionFactory,
        rejected: Rejected,
        reuse_port: bool,
    ) -> None:
        assert listener.tls is not None
        self.listener = listener
        self.opts = listener.tls
        self.ctx = ctx
        self.make = make
        self.rejected = rejected
        self.sock = socket.create_server(
            (listener.host, listener.port),
            family=socket.AF_INET6 if ":" in listener.host else socket.AF_INET,
            backlog=4096,
            reuse_port=reuse_port,
        )
        if listener.buffer_size:  # accepted sockets inherit them (listener.tcp.buffer_sizes)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, listener.buffer_size)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, listener.buffer_size)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._handshakes = Background()  # a bug in one is logged, not lost

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        loop.add_reader(self.sock.fileno(), self._accept)

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
        if self._retry is not None:
            self._retry.cancel()
        await self._handshakes.close()
        self.sock.close()

    def _accept(self) -> None:
        """Every connection waiting, accepted at once (the listening socket stays
        registered with the loop): an ``await sock_accept`` per connection registered
        and unregistered the socket each time, and with the handshake's own timeout
        context cost about 80 µs of the loop per TLS connect, a sixth of it."""
        while True:
            try:
                conn, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: the listener itself goes on
                log.emit("internal.error", "error", op="tls_accept", reason=str(exc))
                self._pause_accepting()
                return
            self._handshakes.spawn(self._handshake(conn, f"{addr[0]}:{addr[1]}"), "tls-handshake")

    def _pause_accepting(self) -> None:
        """Stop accepting for ACCEPT_RETRY s: the backlog stays readable, so the loop
        would call ``_accept`` again at once."""
        assert self._loop is not None
        loop, fd = self._loop, self.sock.fileno()
        loop.remove_reader(fd)
        self._retry = loop.call_later(ACCEPT_RETRY, loop.add_reader, fd, self._accept)

    async def _handshake(self, conn: socket.socket, peer: str) -> None:
        conn.setblocking(False)
        loop = asyncio.get_running_loop()
        timeout = self.opts.handshake_timeout
        holder: list[asyncio.Protocol] = []

        def factory() -> asyncio.Protocol:
            holder.append(_Pending())
            return holder[0]

        try:
            if self.listener.proxy_protocol:
                started = loop.time()
                async with asyncio.timeout(timeout):
                    peer = await _read_proxy(loop, conn) or peer
                timeout = max(0.001, timeout - (loop.time() - started))  # one bound for both
            transport, _ = await loop.connect_accepted_socket(
                factory, conn, ssl=self.ctx, ssl_handshake_timeout=timeout
            )
        except (OSError, ssl.SSLError, ProxyHeaderError, TimeoutError, EOFError) as exc:
            conn.close()
            self.rejected(peer, _handshake_reason(exc))
            return
        who = None
        if self.opts.use_identity_as_username:
            who = identity(transport.get_extra_info("peercert"))
            if who is None:
                transport.abort()
                self.rejected(peer, "tls: the client certificate has no common name")
                return
        pending = holder[0]
        assert isinstance(pending, _Pending)
        protocol = self.make(peer, who)
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        pending.hand_over(protocol)


def _handshake_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"tls: {exc.verify_message or _why(exc)}"
    if isinstance(exc, TimeoutError) or (
        # the event loop's own bound (``ssl_handshake_timeout``) aborts the connection
        isinstance(exc, ConnectionAbortedError) and "taking longer" in str(exc)
    ):
        return "tls: handshake timed out"
    if isinstance(exc, ProxyHeaderError):
        return f"proxy_protocol: {exc}"
    if isinstance(exc, EOFError):
        return "tls: closed before the handshake ended"
    return f"tls: {_why(exc)}"


async def _read_proxy(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> str | None:
    """Read exactly the PROXY header off ``conn``: its source as ``host:port`` (None
    for a LOCAL header, a health check's). Raises ProxyHeaderError or EOFError."""
    while True:
        await _readable(loop, conn)
        head = conn.recv(PROXY_MAX, socket.MSG_PEEK)
        if not head:
            raise EOFError
        header = parse(head)
        if header is None:
            if len(head) >= PROXY_MAX:
                raise ProxyHeaderError("PROXY header too long")
            await asyncio.sleep(0.01)  # the rest of it is on its way: still readable
            continue
        conn.recv(header.consumed)  # the header only; TLS reads the rest
        if header.source is None:
            return None
        host, port = header.source
        return f"{host}:{port}"


async def _readable(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())


class _Pending(asyncio.Protocol):
    """The protocol of a TLS connection between its handshake and the MQTT connection
    taking it over: keeps what arrives meanwhile for the connection."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.lost: Exception | None = None
        self.eof = False
        self.closed = False

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def eof_received(self) -> bool | None:
        self.eof = True
        return True  # the connection decides when it closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc
        self.closed = True

    def hand_over(self, protocol: asyncio.Protocol) -> None:
        """Give ``protocol`` (now the transport's) what arrived before it took over."""
        for data in self.data:
            protocol.data_received(data)
        self.data.clear()
        if self.eof:
            protocol.eof_received()
        if self.closed:
            protocol.connection_lost(self.lost)
