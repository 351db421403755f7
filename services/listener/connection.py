"""One MQTT connection's reading half: the asyncio protocol and its input buffers.

``data_received`` strips a PROXY header if the listener expects one, feeds the sans-IO
decoder and hands each packet to the session; what the session answers is carried out by
the base class (``executor.ActionExecutor``). This is the only place where a session
meets a socket's input.

Input is bounded three ways: a read budget (at most :data:`_BUDGET` packets per event
loop turn, the rest waits with reading paused), flow control (``flow``: a publisher is not
read while a subscriber it feeds is congested), and the password check (a CONNECT with a
password holds what follows until the check, run off the loop, answers). A resumed
session's input is held until its queue's state is restored, read on meanwhile up to
:data:`_RESUME_HOLD` packets, with PINGREQs answered at once. The transport's
write buffer high-water mark is ``max_pending_bytes``; above it ``pause_writing`` marks
the session congested (it queues, bounded, instead of writing), so a client that never
reads cannot make the broker's memory grow without bound.

Memory: thousands of mostly idle connections each hold one ``Connection``, so it has
``__slots__``, dispatches actions through a class-level table and creates what an idle
client never needs (backlog, flow state, password check) only when it is needed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Final, cast

from services.common import log
from services.listener import flow, trace
from services.listener.config import TcpListener
from services.listener.executor import ActionExecutor, log_disconnected
from services.listener.gate import ConnectionGate
from services.listener.metrics import ListenerMetrics
from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.errors import MQTTError
from services.listener.mqtt.types import Connect, Packet, Pingreq
from services.listener.ports import BrokerPort, ClientPort
from services.listener.preauth import CertifiedAuth, ConnectionAuth
from services.listener.proxy_protocol import ProxyHeaderError, ProxyReader
from services.listener.session.actions import Close, Ended
from services.listener.session.auth import Authorizer
from services.listener.session.core import Session, SessionState
from services.listener.session.limits import SessionLimits
from services.listener.session.messages import OutboundMessage
from services.listener.webhooks.client import Webhooks
from services.listener.webhooks.gate import ConnectionHooks
from services.listener.webhooks.notify import Notifier

_BUDGET: Final = 200  # packets handled per connection per event-loop turn
_RESUME_HOLD: Final = 256  # packets held while a resume waits; then reading pauses
LINGER: Final = 2.0  # s: at most this long a closing connection's input is read and dropped


class Connection(ActionExecutor):
    """An asyncio protocol (duck-typed, as asyncio allows: not an ``asyncio.Protocol``
    subclass, so the compiled build makes it a native class with fixed attributes)."""

    __slots__ = (
        "_backlog",
        "_backlog_error",
        "_held",
        "_held_error",
        "_hooks",
        "_linger",
        "_max_pending",
        "_peer",
        "_preauth",
        "_proxy",
        "authorizer",
        "decoder",
        "flow",
        "gate",
        "identity",
        "limits",
    )

    def __init__(
        self,
        broker: BrokerPort,
        listener: TcpListener,
        limits: SessionLimits,
        authorizer: Authorizer,
        metrics: ListenerMetrics,
        slow_auth: bool = False,
        gate: ConnectionGate | None = None,
        max_pending: int = 4 * 1024 * 1024,
        peer: str = "",
        identity: str | None = None,
        webhooks: Webhooks | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        super().__init__(broker, listener, metrics)
        self.gate = gate
        self.limits = limits
        self._max_pending = max_pending
        # A TLS listener's: the client's address behind a PROXY header read before the
        # handshake, and the certificate's CN with use_identity_as_username.
        self._peer = peer
        self.identity = identity
        if identity is not None:
            authorizer = CertifiedAuth(authorizer, identity)
            slow_auth = False  # the certificate authenticated it: no password check
        # the password check runs off the loop (preauth) only when it may be slow
        self._preauth = ConnectionAuth(authorizer) if slow_auth else None
        self.authorizer: Authorizer = self._preauth or authorizer
        # Webhooks first (VerneMQ's vmq_webhooks), the rules above on "next".
        self._hooks: ConnectionHooks | None = None
        if webhooks is not None and webhooks.auth_hooks():
            self._hooks = ConnectionHooks(webhooks, self.authorizer)
            self.authorizer = self._hooks
        if notifier is not None and notifier.webhooks.notify_hooks():
            self.notifier = notifier
        self._held: list[Packet] | None = None  # waiting: password check, webhook, resume
        self._held_error: MQTTError | None = None
        self.decoder = Decoder(limits.max_packet_size)
        self._backlog: list[Packet] | None = None  # decoded, not yet handled (see _work)
        self._backlog_error: MQTTError | None = None
        self.flow: flow.FlowState | None = None
        self._linger: asyncio.TimerHandle | None = None  # ends a half-closed socket
        # a PROXY header still being read (listener.tcp.proxy_protocol), else None
        self._proxy: ProxyReader | None = ProxyReader() if listener.proxy_protocol else None

    # -- asyncio protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if self._peer:
            self.peer = self._peer
        if self.gate is not None and not self.gate.admit(self):
            self._refuse("max_connections")
            return
        # TCP_NODELAY: uvloop and asyncio both set it on every TCP transport already
        self.transport.set_write_buffer_limits(high=self._max_pending)
        self.metrics.connections.inc()
        self.session = Session(
            self.limits,
            self.authorizer,
            self.peer,
            self.broker.msg_id_source,
            time.time(),
            answers=self._hooks,  # on_auth_m5's verdicts (enhanced authentication)
        )
        self.execute(self.session.start(time.time()))

    def _refuse(self, reason: str) -> None:
        """Close before anything is read (VerneMQ's answer to a full listener): no session,
        so ``connection_lost`` has nothing to undo."""
        self.metrics.refused.labels(reason).inc()
        log.emit(
            "client.rejected",
            "warning",
            client_id="",
            peer=self.peer,
            reason=reason,
            reason_code=0,
            proto_ver=0,
        )
        self._close(Close(reason))

    def data_received(self, data: bytes) -> None:
        session = self.session
        if session is None or self.closed:
            return  # closing: input is discarded (see executor, "Closing")
        self.metrics.bytes_in.inc(len(data))
        if self._proxy is not None:
            data = self._strip_proxy(self._proxy, data)
            if not data:
                return
        error: MQTTError | None = None
        try:
            packets = self.decoder.feed(data)
        except MQTTError as exc:
            packets = list(exc.preceding)  # valid packets before the bad one come first
            error = exc
        if self._held is not None:  # the password check, a webhook, or a resume
            if self.resuming:
                packets = self._while_resuming(packets)
            self._held.extend(packets)
            self._held_error = self._held_error or error
            return
        if self._backlog:  # a read that was already queued when we paused
            self._backlog.extend(packets)
            self._backlog_error = self._backlog_error or error
            return
        self._work(packets, error)
        if flow.holds_others(self):
            flow.drained(self, self.broker.flow)

    def _while_resuming(self, packets: list[Packet]) -> list[Packet]:
        """A resumed session's input waits for its queue's state (``registered``); a
        PINGREQ need not. The replay can wait long, for a replicated queue's tail to
        reach its write quorum, longer than a keepalive: so the client's pings are
        answered, any packet keeps the connection alive, and reading pauses only once
        :data:`_RESUME_HOLD` packets wait. Returns the packets to hold."""
        session = self.session
        assert session is not None and self._held is not None
        now = time.time()
        rest: list[Packet] = []
        for pkt in packets:
            if type(pkt) is Pingreq:  # PINGRESP is ordered with nothing [MQTT-4.6.0]
                self.metrics.packets_in[Pingreq].inc()
                if self.tracing is not None:
                    self._trace_in(pkt)
                self.execute(session.handle_packet(pkt, now))
            else:
                rest.append(pkt)
        if rest:
            session.last_seen = now
            if len(self._held) + len(rest) >= _RESUME_HOLD and self.transport is not None:
                self.transport.pause_reading()
        return rest

    def _strip_proxy(self, reader: ProxyReader, data: bytes) -> bytes:
        """The PROXY header off the stream's start; what follows it is MQTT."""
        assert self.session is not None
        try:
            header = reader.feed(data)
        except ProxyHeaderError as exc:
            self._protocol_error(exc, time.time())
            return b""
        if header is None:
            return b""
        self._proxy = None
        if header.source is not None:
            host, port = header.source
            self.peer = self.session.peer = f"{host}:{port}"
        return reader.rest

    def _work(self, packets: list[Packet], error: MQTTError | None) -> None:
        """Handle at most ``_BUDGET`` packets now; the rest waits for the next loop turn
        with this socket's reading paused. One read can carry thousands of PUBLISHes:
        handled in one go they would hold the loop for a second, starving every other
        connection (subscribers' writes included), and nothing would slow the sender
        down. Paused, the socket's buffers fill and TCP pushes back on the publisher."""
        now = time.time()
        if len(packets) > _BUDGET:
            self._backlog = packets[_BUDGET:]
            self._backlog_error, error = error, None
            packets = packets[:_BUDGET]
            if self.transport is not None:
                self.transport.pause_reading()
            self._loop.call_soon(self._continue)
        if self._handle(packets, now):
            if self._held is not None:  # the password check takes over what is left
                if self._backlog:
                    self._held.extend(self._backlog)
                self._held_error = self._held_error or error or self._backlog_error
                self._backlog, self._backlog_error = None, None
            elif self._backlog:  # held back (flow control): the error comes after the rest
                self._backlog_error = self._backlog_error or error
            return
        if error is not None:
            self._protocol_error(error, now)

    def _continue(self) -> None:
        if self.closed or self.session is None or flow.is_held(self):
            return  # held back: resume_input calls again
        packets, error = self._take_backlog()
        if packets or error is not None:
            self._work(packets or [], error)
        # ``_work`` may have queued a new backlog: read it afresh. (Assigned None in this
        # method, the attribute would stay narrowed to None here, and the compiled check
        # would raise on the list ``_work`` put there.)
        if not self._backlog and self._held is None and not self.closed and not flow.is_held(self):
            assert self.transport is not None
            self.transport.resume_reading()

    def _take_backlog(self) -> tuple[list[Packet] | None, MQTTError | None]:
        taken = self._backlog, self._backlog_error
        self._backlog = self._backlog_error = None
        return taken

    def _protocol_error(self, error: MQTTError, now: float) -> None:
        assert self.session is not None
        self.execute(self.session.handle_protocol_error(error, now))  # logs protocol.error

    def _handle(self, packets: list[Packet], now: float) -> bool:
        """Feed packets to the session; True when it must stop (closed or auth pending)."""
        session = self.session
        assert session is not None
        preauth = self._preauth
        hooks = self._hooks
        for i, pkt in enumerate(packets):
            if self.identity is not None and isinstance(pkt, Connect):
                pkt.username = self.identity  # use_identity_as_username
            if hooks is not None and hooks.wants(pkt, session.protocol_version):
                self._held = packets[i:]
                self._ask_hook(pkt)
                return True
            if (
                preauth is not None
                and isinstance(pkt, Connect)
                and pkt.username is not None
                and preauth.answer is None
                and (hooks is None or hooks.connect is None)
            ):
                self._held = packets[i:]
                self._check_password(pkt)
                return True
            self.metrics.packets_in[type(pkt)].inc()
            if self.tracing is not None or isinstance(pkt, Connect):
                self._trace_in(pkt)
            self.execute(session.handle_packet(pkt, now))
            if self.closed:
                return True
            if flow.is_held(self) and i + 1 < len(packets):
                rest = packets[i + 1 :]  # held back: the rest waits in front of the backlog
                self._backlog = rest + self._backlog if self._backlog else rest
                return True
        return False

    def _trace_in(self, pkt: Packet) -> None:
        """A packet for ``trace client`` (``trace``); a CONNECT looks its id up first."""
        if isinstance(pkt, Connect):
            self.tracing = trace.ACTIVE.get((self.listener.mountpoint, pkt.client_id))
            client_id = pkt.client_id
        else:
            assert self.session is not None
            client_id = self.session.client_id
        if self.tracing:
            trace.received(self.tracing, self.peer, client_id, pkt)

    # -- the password check ------------------------------------------------------------
    def _check_password(self, pkt: Connect) -> None:
        assert self.transport is not None and self._preauth is not None
        self.transport.pause_reading()
        inner = self._preauth.inner
        fut = self._loop.run_in_executor(
            None, inner.authenticate, pkt.client_id, pkt.username, pkt.password, self.peer
        )
        fut.add_done_callback(self._password_checked)

    def _password_checked(self, fut: asyncio.Future[int]) -> None:
        assert self._preauth is not None
        self._preauth.answer = fut.result()
        self._release_held()

    # -- webhooks --------------------------------------------------------------------------
    def _ask_hook(self, pkt: Packet) -> None:
        """Hold ``pkt`` and what follows while its webhook is asked (on the loop)."""
        assert self.transport is not None and self._hooks is not None
        assert self.session is not None
        self.transport.pause_reading()
        task = self._loop.create_task(self._hooks.decide(pkt, self.session, self.peer))
        self._hooks.task = task  # referenced until done: the loop holds tasks weakly
        task.add_done_callback(self._hook_decided)

    def _hook_decided(self, task: asyncio.Task[Packet]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:  # a bug, not an endpoint's failure (those are decisions)
            log.emit("internal.error", "error", op="webhook", reason=repr(exc))
            self._close(Close("internal error"))
            return
        if self._held:
            self._held[0] = task.result()  # as the answer's modifiers rewrote it
        self._release_held()

    # -- a resumed session's QoS 2 state -------------------------------------------------
    def registered(
        self, ok: bool, epoch: int, session_present: bool, persistent: bool, reason_code: int
    ) -> None:
        if ok and self.resuming and self._held is None and not self.closed:
            # Until the queue's QoS 2 state is restored (``resume``), a PUBLISH could not
            # be told from the resend of one already received (exactly once): input waits,
            # read on but held (``_while_resuming``).
            self._held = []
        super().registered(ok, epoch, session_present, persistent, reason_code)

    def resume(
        self, queued: Sequence[OutboundMessage], inbound: Sequence[int], pubrel: Sequence[int]
    ) -> None:
        super().resume(queued, inbound, pubrel)
        if self._held is not None and (self._preauth is None or self._preauth.answer is not None):
            self._release_held()

    def _release_held(self) -> None:
        """Handle the input held back (by the password check, or until a resumed
        session's state was restored), and read again."""
        if self._hooks is not None and self._hooks.asking:
            return  # the webhook's answer releases them
        held, self._held = self._held or [], None
        if self.closed or self.session is None:
            return
        assert self.transport is not None
        if not flow.is_held(self):
            self.transport.resume_reading()
        now = time.time()
        if self._handle(held, now):
            if self._backlog:  # held back (flow control): the error comes after the rest
                self._backlog_error = self._backlog_error or self._held_error
                self._held_error = None
            return
        error, self._held_error = self._held_error, None
        if error is not None:
            self._protocol_error(error, now)

    # -- flow control (see ``flow``) -----------------------------------------------------
    def hold_back(self, publisher: ClientPort) -> None:
        """Stop reading ``publisher`` until this connection's backlog drains."""
        if isinstance(publisher, Connection):
            flow.hold_back(self, publisher, self._loop)

    def pause_input(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_input(self) -> None:
        if self._backlog:
            self._loop.call_soon(self._continue)
        elif self._held is None and self.transport is not None:
            self.transport.resume_reading()

    # -- the end -------------------------------------------------------------------
    def _half_close(self, transport: asyncio.Transport) -> None:
        """End a connection the server closes with a reason code (DISCONNECT, a refusing
        CONNACK, or nothing for 3.1.1) without a reset: send the FIN after what is
        written, then read and drop (``data_received`` ignores input once closed) until
        the client closes its side (``eof_received``) or ``LINGER`` passes (abort).
        Closed with the client's bytes unread, the socket would answer them with a reset,
        and a client still sending would lose the reason code. The session ends now, not
        with the socket, as the peer's close would end it."""
        transport.write_eof()
        transport.resume_reading()
        self._linger = self._loop.call_later(LINGER, transport.abort)
        flow.release(self)  # nobody waits for a connection that is closing
        session = self.session
        if session is not None and session.state is not SessionState.CLOSED:
            self.execute(session.handle_connection_lost(time.time()))

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost does the rest

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self.session is None:  # refused in connection_made: nothing was counted
            return
        if self.gate is not None:
            self.gate.release(self)
        self.metrics.connections.inc(-1)
        self._cancel_timers()
        was_closed = self.closed
        self.closed = True
        flow.release(self)  # nobody waits for a connection that is gone
        if self.session.state is not SessionState.CLOSED:
            self.execute(self.session.handle_connection_lost(time.time()))
        if not self._ended and self.sid is not None and self.epoch:
            # the session closed itself without an Ended (e.g. protocol error after CONNACK)
            self._ended_action(Ended("closed", self.session.session_expiry))
        if not was_closed and self.sid is not None:
            log_disconnected(
                client_id=self.sid[1],
                mountpoint=self.sid[0],
                peer=self.peer,
                reason="connection_lost" if exc is None else str(exc),
                reason_code=0,
                duration_s=round(time.time() - self._connected_at, 3),
            )

    def pause_writing(self) -> None:
        if self.session is not None:
            self.execute(self.session.set_congested(True, time.time()))

    def resume_writing(self) -> None:
        if self.session is not None:
            self.execute(self.session.set_congested(False, time.time()))
