"""One MQTT connection: bytes in through the decoder, actions out of the session.

The protocol object is the only place where a session meets a socket, a clock and the
broker. ``data_received`` feeds the sans-IO decoder, hands each packet to the session
and executes the returned actions through a dispatch table. Writes are gathered and
sent once per event-loop turn (``_schedule_flush``): a publisher's burst that fans out
to this subscriber becomes one ``write`` instead of one per message.

Flow control: the transport's write buffer high-water mark is ``max_pending_bytes``;
above it ``pause_writing`` marks the session congested (it queues, bounded, instead of
writing) and ``resume_writing`` lets it drain — a client that never reads cannot make
the broker's memory grow without bound.

Timers are lazy: a ``SetTimer`` that moves a deadline later (the keepalive, on every
packet) only records the new deadline; the pending entry re-arms itself when it comes
up early. That keeps per-packet timer cost to an attribute store. All connections'
timers share one heap and one event-loop timer (``loop_timers``, ``session.timers``).

Memory: thousands of mostly idle connections each hold one ``Connection``, so it has
``__slots__``, dispatches actions through a class-level table (not a dict of bound
methods per instance) and creates what an idle client never needs (backlog, resume
buffer, password check) only when it is needed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

from services.common import log
from services.listener import proxy_protocol
from services.listener.loop_timers import timers_of
from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.encoder import encode
from services.listener.mqtt.errors import MQTTError
from services.listener.mqtt.types import Connect, Disconnect, Packet, Publish
from services.listener.preauth import ConnectionAuth
from services.listener.session.actions import (
    Acked,
    Action,
    CancelTimer,
    Close,
    Dropped,
    Ended,
    LogEvent,
    PublishWill,
    Register,
    Route,
    Send,
    SendPublish,
    SetTimer,
    StoreMark,
    SubscribeRequest,
    UnsubscribeRequest,
)
from services.listener.session.auth import Authorizer
from services.listener.session.core import Session, SessionState
from services.listener.session.messages import OutboundMessage
from services.listener.session.timers import Timer

if TYPE_CHECKING:
    from services.listener.broker import Broker
    from services.listener.config import TcpListener
    from services.listener.server import ListenerMetrics
    from services.listener.session.limits import SessionLimits


_BUDGET: Final = 200  # packets handled per connection per event-loop turn
FLOW_MAX_HOLD: Final = 1.0  # s: a subscriber that does not drain in this time holds nobody back
LINGER: Final = 2.0  # s: at most this long a closing connection's input is read and dropped

# The per-message events, compiled once (fields in catalogue order, see log.emitter).
_log_published: Final = log.emitter("message.published")
_log_delivered: Final = log.emitter("message.delivered")
_log_acked: Final = log.emitter("message.acked")
_log_connected: Final = log.emitter("client.connected")
_log_disconnected: Final = log.emitter("client.disconnected")


class ConnectionGate:
    """Open connections of one listener against its ``max_connections`` (0: no limit)."""

    __slots__ = ("limit", "open")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def admit(self) -> bool:
        if self.limit and self.open >= self.limit:
            return False
        self.open += 1
        return True


class Connection:
    """An asyncio protocol (duck-typed, as asyncio allows: not an ``asyncio.Protocol``
    subclass, so the compiled build makes it a native class with fixed attributes)."""

    __slots__ = (
        "_backlog",
        "_backlog_error",
        "_barrier",
        "_connected_at",
        "_delivered_hi",
        "_delivered_sent",
        "_ended",
        "_flow_holders",
        "_flow_slow",
        "_flow_timer",
        "_flow_waiters",
        "_flush_scheduled",
        "_held",
        "_held_error",
        "_linger",
        "_loop",
        "_preauth",
        "_proxy",
        "_resume_buffer",
        "_timers",
        "_wbuf",
        "appending",
        "authorizer",
        "broker",
        "closed",
        "decoder",
        "epoch",
        "gate",
        "limits",
        "listener",
        "metrics",
        "peer",
        "persistent",
        "resuming",
        "session",
        "sid",
        "transport",
    )

    def __init__(
        self,
        broker: Broker,
        listener: TcpListener,
        limits: SessionLimits,
        authorizer: Authorizer,
        metrics: ListenerMetrics,
        slow_auth: bool = False,
        gate: ConnectionGate | None = None,
    ) -> None:
        self.broker = broker
        self.gate = gate
        self.listener = listener
        self.limits = limits
        # the password check runs off the loop (preauth) only when it may be slow
        self._preauth = ConnectionAuth(authorizer) if slow_auth else None
        self.authorizer: Authorizer = self._preauth or authorizer
        self._held: list[Packet] | None = None  # packets waiting for the password check
        self.metrics = metrics
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.session: Session | None = None
        self.decoder = Decoder(limits.max_packet_size)
        self.sid: tuple[str, str] | None = None
        self.epoch = 0
        self.persistent = False
        self.closed = False
        self.resuming = False
        self._resume_buffer: list[OutboundMessage] | None = None  # created when resuming
        self._held_error: MQTTError | None = None
        self._backlog: list[Packet] | None = None  # decoded, not yet handled (see _work)
        self._backlog_error: MQTTError | None = None
        self._barrier: asyncio.Future[None] | None = None  # writes wait for a durable mark
        self._delivered_hi = 0  # highest queue seq written to the client
        self._delivered_sent = 0  # ... and reported to the store
        self._wbuf: list[bytes] = []
        self._flush_scheduled = False
        self._timers: tuple[Timer[Connection], ...] = ()
        self._connected_at = time.time()
        self._loop = asyncio.get_running_loop()
        self._ended = False
        self._flow_holders: set[Connection] | None = None  # congested subscribers we wait for
        self._flow_waiters: set[Connection] | None = None  # publishers waiting for us
        self._flow_timer: asyncio.TimerHandle | None = None  # when we stop holding them
        self._flow_slow = False  # did not drain in FLOW_MAX_HOLD: holds nobody back
        self._linger: asyncio.TimerHandle | None = None  # ends a half-closed socket (_close)
        self.appending = 0  # queue appends for this session the store has not answered yet
        # bytes of a PROXY header still being read (listener.tcp.proxy_protocol), else None
        self._proxy: bytes | None = b"" if listener.proxy_protocol else None

    # -- asyncio protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        if self.gate is not None and not self.gate.admit():
            self._refuse("max_connections")
            return
        # TCP_NODELAY: uvloop and asyncio both set it on every TCP transport already
        self.transport.set_write_buffer_limits(high=self.limits_pending())
        self.metrics.connections.inc()
        self.session = Session(
            self.limits, self.authorizer, self.peer, self.broker.msg_id_source, time.time()
        )
        self.execute(self.session.start(time.time()))

    def _proxy_header(self, buf: bytes) -> bytes:
        """Read the PROXY header off the stream's start; what follows it is MQTT."""
        assert self.session is not None
        try:
            header = proxy_protocol.parse(buf)
        except proxy_protocol.ProxyHeaderError as exc:
            self._protocol_error(exc, time.time())
            return b""
        if header is None:
            self._proxy = buf
            return b""
        self._proxy = None
        if header.source is not None:
            host, port = header.source
            self.peer = self.session.peer = f"{host}:{port}"
        return buf[header.consumed :]

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

    def limits_pending(self) -> int:
        return int(self.broker.config["max_pending_bytes"])

    def data_received(self, data: bytes) -> None:
        session = self.session
        if session is None or self.closed:
            return
        self.metrics.bytes_in.inc(len(data))
        if self._proxy is not None:
            data = self._proxy_header(self._proxy + data)
            if not data:
                return
        error: MQTTError | None = None
        try:
            packets = self.decoder.feed(data)
        except MQTTError as exc:
            packets = list(exc.preceding)  # valid packets before the bad one come first
            error = exc
        if self._held is not None:  # still checking the CONNECT's password
            self._held.extend(packets)
            self._held_error = self._held_error or error
            return
        if self._backlog:  # a read that was already queued when we paused
            self._backlog.extend(packets)
            self._backlog_error = self._backlog_error or error
            return
        self._work(packets, error)
        if self._flow_waiters is not None or self._flow_slow:
            self._flow_drained()

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
        if self.closed or self.session is None or self._flow_holders:
            return  # held back: _flow_release calls again
        packets, self._backlog = self._backlog, None
        error, self._backlog_error = self._backlog_error, None
        if packets or error is not None:
            self._work(packets or [], error)
        if not self._backlog and self._held is None and not self.closed and not self._flow_holders:
            assert self.transport is not None
            self.transport.resume_reading()

    # -- flow control ----------------------------------------------------------------
    # A publisher faster than a subscriber it sends QoS >= 1 to would fill that session's
    # queue until max_online_messages drops messages. Instead the publisher stops being
    # read while the subscriber's backlog (queued for the client + in flight) is above
    # ``broker.flow_high``, until it drains to ``broker.flow_low``: TCP then slows the
    # publisher down to the subscriber's pace. Two limits keep one client from stalling
    # others: a subscriber that has not drained within FLOW_MAX_HOLD is "slow" and holds
    # nobody back until it drains (its queue limit applies, as without flow control), and
    # a connection others wait for is never held itself, so no cycle of clients
    # publishing to each other can wait forever.
    def backlog(self) -> int:
        """Messages for this client not yet acknowledged: on their way into its queue,
        waiting to be sent, or in flight."""
        session = self.session
        return self.appending + (session.outbound.backlog() if session is not None else 0)

    def hold_back(self, publisher: Connection) -> None:
        """Stop reading ``publisher`` until this connection's backlog drains."""
        if (
            publisher is self
            or publisher.closed
            or self.closed
            or self._flow_slow
            or publisher._flow_waiters
        ):
            return
        waiters = self._flow_waiters
        if waiters is None:
            waiters = self._flow_waiters = set()
            self._flow_timer = self._loop.call_later(FLOW_MAX_HOLD, self._flow_give_up)
        elif publisher in waiters:
            return
        waiters.add(publisher)
        holders = publisher._flow_holders
        if holders is None:
            holders = publisher._flow_holders = set()
        if not holders and publisher.transport is not None:
            publisher.transport.pause_reading()
        holders.add(self)

    def _flow_drained(self) -> None:
        if self.backlog() <= self.broker.flow_low:
            self._flow_slow = False
            self._release_flow()

    def _flow_give_up(self) -> None:
        self._flow_timer = None
        self._flow_slow = True
        self._release_flow()

    def _release_flow(self) -> None:
        if self._flow_timer is not None:
            self._flow_timer.cancel()
            self._flow_timer = None
        waiters, self._flow_waiters = self._flow_waiters, None
        for publisher in waiters or ():
            publisher._flow_release(self)

    def _flow_release(self, holder: Connection) -> None:
        holders = self._flow_holders
        if not holders:
            return
        holders.discard(holder)
        if holders:
            return
        self._flow_holders = None
        if self.closed:
            return
        if self._backlog:
            self._loop.call_soon(self._continue)
        elif self._held is None and self.transport is not None:
            self.transport.resume_reading()

    def _protocol_error(self, error: MQTTError, now: float) -> None:
        assert self.session is not None
        self.execute(self.session.handle_protocol_error(error, now))  # logs protocol.error

    def _handle(self, packets: list[Packet], now: float) -> bool:
        """Feed packets to the session; True when it must stop (closed or auth pending)."""
        session = self.session
        assert session is not None
        preauth = self._preauth
        for i, pkt in enumerate(packets):
            if (
                preauth is not None
                and isinstance(pkt, Connect)
                and pkt.username is not None
                and preauth.answer is None
            ):
                self._held = packets[i:]
                self._check_password(pkt)
                return True
            self.metrics.packets_in[type(pkt)].inc()
            self.execute(session.handle_packet(pkt, now))
            if self.closed:
                return True
            if self._flow_holders and i + 1 < len(packets):
                rest = packets[i + 1 :]  # held back: the rest waits in front of the backlog
                self._backlog = rest + self._backlog if self._backlog else rest
                return True
        return False

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
        held, self._held = self._held or [], None
        if self.closed or self.session is None:
            return
        assert self.transport is not None
        if not self._flow_holders:
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

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost does the rest

    def connection_lost(self, exc: Exception | None) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self.session is None:  # refused in connection_made: nothing was counted
            return
        if self.gate is not None:
            self.gate.open -= 1
        self.metrics.connections.inc(-1)
        if self._timers:
            timers = timers_of(self._loop)
            for timer in self._timers:
                timers.cancel(timer)
            self._timers = ()
        was_closed = self.closed
        self.closed = True
        if self._flow_waiters is not None:
            self._release_flow()  # nobody waits for a connection that is gone
        if self.session is not None and self.session.state is not SessionState.CLOSED:
            self.execute(self.session.handle_connection_lost(time.time()))
        if not self._ended and self.sid is not None and self.epoch:
            # the session closed itself without an Ended (e.g. protocol error after CONNACK)
            self._ended_action(Ended("closed", self.session.session_expiry if self.session else 0))
        if not was_closed and self.sid is not None:
            _log_disconnected(
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

    # -- called by the broker ----------------------------------------------------------
    def deliver(self, out: OutboundMessage) -> None:
        if self.closed or self.session is None:
            return
        if self.resuming and out.seq is not None:
            if self._resume_buffer is None:
                self._resume_buffer = []
            self._resume_buffer.append(out)
            return
        self.execute(self.session.deliver(out, time.time()))

    def registered(
        self, ok: bool, epoch: int, session_present: bool, persistent: bool, reason_code: int
    ) -> None:
        if self.session is None:
            return
        if ok:
            self.epoch = epoch
            self.persistent = persistent
        actions = self.session.handle_registered(
            ok, epoch, session_present, persistent, reason_code, time.time()
        )
        if ok and self.sid is not None:
            s = self.session
            _log_connected(
                client_id=self.sid[1],
                mountpoint=self.sid[0],
                peer=self.peer,
                proto_ver=s.protocol_version,
                clean_start=s.clean_start,
                session_present=session_present,
                keepalive=s.keepalive,
                session_expiry=s.session_expiry,
                username=s.username or "",
                listener=self.listener.name,
            )
        elif self.sid is not None:
            log.emit(
                "client.rejected",
                "warning",
                client_id=self.sid[1],
                peer=self.peer,
                reason="registry",
                reason_code=reason_code,
                proto_ver=self.session.protocol_version,
            )
        self.execute(actions)

    def resume(
        self, queued: Sequence[OutboundMessage], inbound: Sequence[int], pubrel: Sequence[int]
    ) -> None:
        if self.session is None or self.closed:
            return
        last = queued[-1].seq if queued else 0
        held = self._resume_buffer or ()
        buffered = [o for o in held if o.seq is not None and o.seq > (last or 0)]
        self._resume_buffer = None
        self.resuming = False
        now = time.time()
        self.execute(self.session.resume(queued, inbound, pubrel, now))
        for out in buffered:
            self.execute(self.session.deliver(out, now))

    def routed(self, token: int, reason_code: int) -> None:
        if self.session is None or self.closed:
            return
        if reason_code >= 0x80 and self.session.protocol_version < 5:
            # 3.1/3.1.1 cannot refuse a PUBLISH: close without acknowledging, the client resends
            self.fail(reason_code, "store unavailable")
            return
        self.execute(self.session.handle_routed(token, reason_code, time.time()))

    def subscribed(self, packet_id: int, codes: Sequence[int]) -> None:
        if self.session is not None and not self.closed:
            self.execute(self.session.handle_subscribed(packet_id, codes, time.time()))

    def unsubscribed(self, packet_id: int, codes: Sequence[int]) -> None:
        if self.session is not None and not self.closed:
            self.execute(self.session.handle_unsubscribed(packet_id, codes, time.time()))

    def takeover(self) -> None:
        if self.session is not None and not self.closed:
            self.execute(self.session.handle_takeover(time.time()))

    def shutdown(self) -> None:
        if self.session is not None and not self.closed:
            self.execute(self.session.handle_shutdown(time.time()))

    def fail(self, reason_code: int, reason: str) -> None:
        """Close because of a server-side failure (v5: DISCONNECT with ``reason_code``)."""
        if self.session is None or self.closed:
            return
        if self.session.protocol_version >= 5 and self.session.state is SessionState.CONNECTED:
            self._send(Send(Disconnect(reason_code)))
        self._close(Close(reason, reason_code))

    # -- actions -------------------------------------------------------------------
    def execute(self, actions: list[Action]) -> None:
        dispatch = _DISPATCH
        for action in actions:
            dispatch[type(action)](self, action)

    def _write(self, data: bytes) -> None:
        self._wbuf.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._wbuf or self.transport is None or self._barrier is not None or self.closed:
            return  # closed: nothing goes out after the DISCONNECT [MQTT-3.14.4-1]
        if self._delivered_hi > self._delivered_sent and self.sid is not None:
            self._delivered_sent = self._delivered_hi
            self.broker.store.delivered(self.sid[0], self.sid[1], self.epoch, self._delivered_hi)
        log.flush()  # events about what we are sending reach the OS first
        data = b"".join(self._wbuf) if len(self._wbuf) > 1 else self._wbuf[0]
        self._wbuf.clear()
        self.metrics.bytes_out.inc(len(data))
        self.transport.write(data)

    def _send(self, action: Send) -> None:
        assert self.session is not None
        self.metrics.packets_out[type(action.packet)].inc()
        self._write(encode(action.packet, self.session.protocol_version))

    def _send_publish(self, action: SendPublish) -> None:
        assert self.session is not None
        out = action.delivery
        self.metrics.packets_out[Publish].inc()
        if out.seq is not None and out.seq > self._delivered_hi and self.persistent:
            self._delivered_hi = out.seq
        self.broker.delivered_qos[out.qos].inc()
        self._write(encode(action.packet, self.session.protocol_version))
        if out.qos and log.message_events_enabled():
            msg = out.message
            _log_delivered(
                msg.msg_id,
                self.sid[1] if self.sid else "",
                msg.topic,
                out.qos,
                action.packet.dup,
                int((time.time() - msg.published_at) * 1e6),
                msg.publisher,
                out.seq or 0,
            )

    def _close(self, action: Close) -> None:
        if self.closed:
            return
        self._flush()
        self.closed = True
        if self.sid is not None and self.epoch:
            _log_disconnected(
                client_id=self.sid[1],
                mountpoint=self.sid[0],
                peer=self.peer,
                reason=action.reason,
                reason_code=action.reason_code,
                duration_s=round(time.time() - self._connected_at, 3),
            )
        transport = self.transport
        if transport is None:
            return
        if action.reason_code >= 0x80 and transport.can_write_eof() and not transport.is_closing():
            self._half_close(transport)
        else:
            transport.close()

    def _half_close(self, transport: asyncio.Transport) -> None:
        """End a connection the server closes with a reason code (DISCONNECT, refusing
        CONNACK, or nothing for 3.1.1) without a reset: send the FIN after what is
        written, then read and drop (``data_received`` ignores input once closed) until
        the client closes its side (``eof_received``) or ``LINGER`` passes (abort).
        Closed with the client's bytes unread, the socket would answer them with a
        reset, and a client still sending would lose the reason code. The session ends
        now, not with the socket: a ``fail`` left it open, as the peer's close would."""
        transport.write_eof()
        transport.resume_reading()
        self._linger = self._loop.call_later(LINGER, transport.abort)
        if self._flow_waiters is not None:
            self._release_flow()  # nobody waits for a connection that is closing
        session = self.session
        if session is not None and session.state is not SessionState.CLOSED:
            self.execute(session.handle_connection_lost(time.time()))

    def _register(self, action: Register) -> None:
        self.sid = (action.mountpoint, action.client_id)
        self.broker.register(self, action)

    def _route(self, action: Route) -> None:
        msg = action.message
        if msg.qos and log.message_events_enabled():
            _log_published(
                msg.msg_id,
                msg.publisher,
                msg.topic,
                msg.qos,
                msg.retain,
                len(msg.payload),
                msg.mountpoint,
            )
        self.broker.route(msg, self, action.token)

    def _subscribe(self, action: SubscribeRequest) -> None:
        self.broker.subscribe(self, action)

    def _unsubscribe(self, action: UnsubscribeRequest) -> None:
        self.broker.unsubscribe(self, action)

    def _acked(self, action: Acked) -> None:
        out = action.delivery
        if out.seq is not None and self.persistent and self.sid is not None:
            self.broker.store.ack(self.sid[0], self.sid[1], self.epoch, out.seq)
        if log.message_events_enabled():
            msg = out.message
            _log_acked(
                msg.msg_id,
                self.sid[1] if self.sid else "",
                out.qos,
                int((time.time() - msg.published_at) * 1e6),
            )

    def _store_mark(self, action: StoreMark) -> None:
        """Persist QoS 2 state; what follows (PUBREC/PUBREL) is written only once it is
        durable, so a crash can never leave the client believing a step we forgot."""
        if not (self.persistent and self.sid is not None):
            return
        self.broker.store.mark(
            self.sid[0], self.sid[1], self.epoch, action.kind, action.ident, action.set
        )
        if action.set:
            barrier = self.broker.store.flush()
            self._barrier = barrier
            barrier.add_done_callback(self._barrier_passed)

    def _barrier_passed(self, fut: asyncio.Future[None]) -> None:
        if self._barrier is fut:
            self._barrier = None
            if self._wbuf and not self._flush_scheduled:
                self._flush_scheduled = True
                self._loop.call_soon(self._flush)

    def _dropped(self, action: Dropped) -> None:
        out = action.delivery
        if out.seq is not None and self.persistent and self.sid is not None:
            # expired or too large for this client: it will never be deliverable, so the
            # queue must not offer it again on every reconnect
            self.broker.store.ack(self.sid[0], self.sid[1], self.epoch, out.seq)
        self.broker.dropped(self.sid[1] if self.sid else "", out, action.reason)

    def _publish_will(self, action: PublishWill) -> None:
        self.broker.publish_will(self, action.will, action.delay)

    def _timer(self, name: str) -> Timer[Connection] | None:
        for timer in self._timers:  # at most "connect", "keepalive" and "retry"
            if timer.name == name:
                return timer
        return None

    def _set_timer(self, action: SetTimer) -> None:
        timer = self._timer(action.name)
        if timer is None:  # a fired timer stays in _timers, to be set again
            timer = Timer(self, action.name)
            self._timers += (timer,)
        timers_of(self._loop).set(timer, action.at)  # lazy when the deadline moves later

    def _cancel_timer(self, action: CancelTimer) -> None:
        timer = self._timer(action.name)
        if timer is not None:
            self._timers = tuple(t for t in self._timers if t is not timer)
            timers_of(self._loop).cancel(timer)

    def timer_fired(self, timer: Timer[Connection]) -> None:
        """One of this connection's timers is due (called by ``loop_timers``)."""
        if self.session is None or self.closed:
            return
        self.execute(self.session.handle_timeout(timer.name, time.time()))

    def _ended_action(self, action: Ended) -> None:
        if self._ended:
            return
        self._ended = True
        self.broker.ended(self, action)

    def _log_event(self, action: LogEvent) -> None:
        if action.event == "protocol.error":
            self.metrics.protocol_errors.inc()
            log.emit(action.event, "warning", **dict(action.fields))
        else:
            log.emit(action.event, "info", **dict(action.fields))


_DISPATCH: Final[dict[type, Callable[[Connection, Any], None]]] = {
    Send: Connection._send,
    SendPublish: Connection._send_publish,
    Close: Connection._close,
    Register: Connection._register,
    Route: Connection._route,
    SubscribeRequest: Connection._subscribe,
    UnsubscribeRequest: Connection._unsubscribe,
    Acked: Connection._acked,
    StoreMark: Connection._store_mark,
    Dropped: Connection._dropped,
    PublishWill: Connection._publish_will,
    SetTimer: Connection._set_timer,
    CancelTimer: Connection._cancel_timer,
    Ended: Connection._ended_action,
    LogEvent: Connection._log_event,
}
"""How ``execute`` runs each action type (one table for all connections)."""
