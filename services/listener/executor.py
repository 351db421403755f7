"""The action executor: what a session's actions mean for the socket and the broker.

The sans-IO session (``session.core``) returns actions as data; ``execute`` runs each
through one class-level dispatch table. This is the half of a connection that the
broker drives (``ports.ClientPort``: deliveries, registration answers, takeovers) and
that writes to the client; the reading half, the asyncio protocol, is
``connection.Connection``, its subclass.

Writes are gathered and sent once per event-loop turn (``_write``/``_flush``): a
publisher's burst that fans out to this subscriber becomes one ``write`` instead of one
per message. A QoS 2 step (PUBREC/PUBREL state) is written only once it is durable: a
*barrier* holds the writes until the store has it, so a crash can never leave the client
believing a step the broker forgot.

Closing with a reason code (a DISCONNECT or a refusing CONNACK): see
``Connection._half_close``. Nothing is written after it [MQTT-3.14.4-1].

Timers are lazy (``session.timers``) and share one heap and loop timer (``loop_timers``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from services.common import log
from services.common.session_key import SessionKey
from services.listener import trace
from services.listener.config import TcpListener
from services.listener.loop_timers import cancel_all, cancel_named, set_named
from services.listener.metrics import ListenerMetrics
from services.listener.mqtt.encoder import encode
from services.listener.mqtt.types import Disconnect, Publish
from services.listener.ports import BrokerPort, ClientPort
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
from services.listener.session.core import Session, SessionState
from services.listener.session.messages import OutboundMessage
from services.listener.session.timers import Timer
from services.listener.webhooks.deliver import DeliverHook
from services.listener.webhooks.gate import ConnectionHooks
from services.listener.webhooks.notify import Notifier

# The per-message events, compiled once (fields in catalogue order, see log.emitter).
_log_published: Final = log.emitter("message.published")
_log_delivered: Final = log.emitter("message.delivered")
_log_acked: Final = log.emitter("message.acked")
_log_connected: Final = log.emitter("client.connected")
log_disconnected: Final = log.emitter("client.disconnected")


class ActionExecutor:
    """A session's actions carried out; the client as the broker sees it."""

    __slots__ = (
        "_barrier",
        "_connected_at",
        "_delivered_hi",
        "_delivered_sent",
        "_ended",
        "_flush_scheduled",
        "_loop",
        "_replayed_upto",
        "_resume_buffer",
        "_timers",
        "_wbuf",
        "appending",
        "broker",
        "closed",
        "deliver_hook",
        "epoch",
        "listener",
        "metrics",
        "notifier",
        "peer",
        "persistent",
        "resuming",
        "session",
        "sid",
        "tracing",
        "transport",
    )

    def __init__(self, broker: BrokerPort, listener: TcpListener, metrics: ListenerMetrics) -> None:
        self.broker = broker
        self.listener = listener
        self.metrics = metrics
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.session: Session | None = None
        self.sid: SessionKey | None = None
        self.epoch = 0
        self.persistent = False
        self.closed = False
        self.resuming = False
        self.tracing: list[trace.Trace] | None = None  # ``trace client`` of this client id
        self.appending = 0  # queue appends for this session the store has not answered yet
        self._resume_buffer: list[OutboundMessage] | None = None  # created when resuming
        # The last seq the resume's read replayed: an append whose answer arrives after
        # the replay, though the read already held it, is not delivered a second time.
        self._replayed_upto = 0
        self._barrier: asyncio.Future[str] | None = None  # writes wait for a durable mark
        self._delivered_hi = 0  # highest queue seq written to the client
        self._delivered_sent = 0  # ... and reported to the store
        self._wbuf: list[bytes] = []
        self._flush_scheduled = False
        self._timers: tuple[Timer[ActionExecutor], ...] = ()
        self._connected_at = time.time()
        self._loop = asyncio.get_running_loop()
        self._ended = False
        self.notifier: Notifier | None = None  # the notification webhooks, if any
        self.deliver_hook: DeliverHook | None = None  # on_deliver, if registered for it

    # -- called by the broker ----------------------------------------------------------
    def backlog(self) -> int:
        """Messages for this client not yet acknowledged: on their way into its queue,
        waiting to be sent, or in flight."""
        session = self.session
        return self.appending + (session.outbound.backlog() if session is not None else 0)

    def deliver(self, out: OutboundMessage) -> None:
        if self.closed or self.session is None:
            if out.shared is not None:  # a group's copy: another member takes it
                self.broker.dropped(self.sid[1] if self.sid else "", out, "not_connected")
            return
        if out.seq is not None:
            if self.resuming:
                if self._resume_buffer is None:
                    self._resume_buffer = []
                self._resume_buffer.append(out)
                return
            if out.seq <= self._replayed_upto:
                return  # the replay sent it
        if self.deliver_hook is not None:
            self.deliver_hook.push(out)  # on_deliver first (webhooks.deliver)
            return
        self.execute(self.session.deliver(out, time.time()))

    def deliver_hooked(self, out: OutboundMessage) -> None:
        """A delivery the on_deliver hook has answered for, as the answer changed it."""
        if self.closed or self.session is None:
            self.deliver(out)  # closed meanwhile: what a closed connection does with it
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
            if self.notifier is not None:
                self.notifier.registered(
                    s.protocol_version,
                    self.peer,
                    self.sid[0],
                    self.sid[1],
                    s.username,
                    session_present,
                )
                self.deliver_hook = self.notifier.deliver_hook(self, s.protocol_version, s.username)
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
        last = (queued[-1].seq if queued else 0) or 0
        self._replayed_upto = last
        held = self._resume_buffer or ()
        buffered = [o for o in held if o.seq is not None and o.seq > last]
        self._resume_buffer = None
        self.resuming = False
        now = time.time()
        hook = self.deliver_hook
        if hook is None:
            self.execute(self.session.resume(queued, inbound, pubrel, now))
            for out in buffered:
                self.execute(self.session.deliver(out, now))
            return
        # on_deliver asks for the replayed messages too: the session restores the QoS 2
        # state now (a PUBREL-only entry is no delivery), the rest follow their answers
        # in order, with the packet ids of their seqs as a plain resume gives them.
        released = set(pubrel)
        kept = [o for o in queued if o.seq is not None and o.seq in released]
        self.execute(self.session.resume(kept, inbound, pubrel, now))
        for out in queued:
            if out.seq is None or out.seq not in released:
                hook.push(out)
        for out in buffered:
            hook.push(out)

    def routed(self, token: int, reason_code: int, reason: str = "store unavailable") -> None:
        if self.session is None or self.closed:
            return
        if reason_code >= 0x80 and self.session.protocol_version < 5:
            # 3.1/3.1.1 cannot refuse a PUBLISH: close without acknowledging, the client resends
            self.fail(reason_code, reason)
            return
        self.execute(self.session.handle_routed(token, reason_code, time.time()))

    def subscribed(self, packet_id: int, codes: Sequence[int]) -> None:
        if self.session is not None and not self.closed:
            self.execute(self.session.handle_subscribed(packet_id, codes, time.time()))

    def unsubscribed(self, packet_id: int, codes: Sequence[int]) -> None:
        if self.session is None or self.closed:
            return
        if self.session.protocol_version < 5 and any(c >= 0x80 for c in codes):
            # 3.1/3.1.1's UNSUBACK cannot say "not done": close rather than lie; the
            # client unsubscribes again once it reconnects
            self.fail(max(codes), "unsubscribe refused")
            return
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

    def hold_back(self, publisher: ClientPort) -> None:
        """Stop reading ``publisher`` until this client drains: the reading half's part
        (``Connection``), where flow control lives."""
        raise NotImplementedError

    def timer_fired(self, timer: Timer[ActionExecutor]) -> None:
        """One of this connection's timers is due (called by ``loop_timers``)."""
        if self.session is None or self.closed:
            return
        self.execute(self.session.handle_timeout(timer.name, time.time()))

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
        transport = self.transport
        if not self._wbuf or transport is None or self._barrier is not None or self.closed:
            return  # closed: nothing goes out after the DISCONNECT [MQTT-3.14.4-1]
        if transport.is_closing():
            # Lost while these writes waited (for the turn's end or a QoS 2 barrier):
            # nobody reads them, and uvloop raises on a write to a closed transport.
            self._wbuf.clear()
            return
        if self._delivered_hi > self._delivered_sent and self.sid is not None:
            self._delivered_sent = self._delivered_hi
            self.broker.store.delivered(self.sid[0], self.sid[1], self.epoch, self._delivered_hi)
        log.flush()  # events about what we are sending reach the OS first
        data = b"".join(self._wbuf) if len(self._wbuf) > 1 else self._wbuf[0]
        self._wbuf.clear()
        self.metrics.bytes_out.inc(len(data))
        transport.write(data)

    def _send(self, action: Send) -> None:
        assert self.session is not None
        self.metrics.packets_out[type(action.packet)].inc()
        if self.tracing:
            trace.sent(self.tracing, self.peer, self.session.client_id, action.packet)
        self._write(encode(action.packet, self.session.protocol_version))

    def _send_publish(self, action: SendPublish) -> None:
        assert self.session is not None
        out = action.delivery
        self.metrics.packets_out[Publish].inc()
        if self.tracing:
            trace.sent(self.tracing, self.peer, self.session.client_id, action.packet)
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
            log_disconnected(
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
        """End the connection without a reset: the reading half's part (``Connection``)."""
        raise NotImplementedError

    def _register(self, action: Register) -> None:
        self.sid = (action.mountpoint, action.client_id)
        self.broker.register(self, action)

    def _route(self, action: Route) -> None:
        msg = action.message
        s = self.session
        if s is not None and type(s.authorizer) is ConnectionHooks:
            s.authorizer.routed(msg)  # auth_on_publish's qos modifier
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
        if self.notifier is not None and self.session is not None:
            s = self.session
            self.notifier.published(
                s.protocol_version,
                msg.mountpoint,
                msg.publisher,
                s.username,
                msg.topic,
                msg.qos,
                msg.payload,
                msg.retain,
                msg.properties,
                msg.expires_at,
            )
        self.broker.route(msg, self, action.token)

    def _subscribe(self, action: SubscribeRequest) -> None:
        self.broker.subscribe(self, action)
        if self.notifier is not None and self.session is not None and self.sid is not None:
            s = self.session
            topics = [(sub.topic_filter, sub.qos) for sub in action.subscriptions]
            self.notifier.subscribed(
                s.protocol_version, self.sid[0], self.sid[1], s.username, topics
            )

    def _unsubscribe(self, action: UnsubscribeRequest) -> None:
        self.broker.unsubscribe(self, action)
        if self.notifier is not None and self.session is not None and self.sid is not None:
            s = self.session
            self.notifier.unsubscribed(
                s.protocol_version, self.sid[0], self.sid[1], s.username, list(action.topic_filters)
            )

    def _acked(self, action: Acked) -> None:
        out = action.delivery
        if out.seq is not None and self.persistent and self.sid is not None:
            self.broker.store.ack(self.sid[0], self.sid[1], self.epoch, out.seq)
        if out.shared is not None:
            self.broker.shared_acked(out)
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
        store = self.broker.store
        store.mark(self.sid[0], self.sid[1], self.epoch, action.kind, action.ident, action.set)
        if action.set:
            barrier = store.mark_barrier(self.sid[0], self.sid[1])
            self._barrier = barrier
            barrier.add_done_callback(self._barrier_passed)

    def _barrier_passed(self, fut: asyncio.Future[str]) -> None:
        why = fut.result()
        if why:
            # Not durable where it must be: what relies on it (the PUBREC or PUBREL held
            # behind the barrier, or behind a later one that replaced it) must not go
            # out, or a failover that reads the copies without it would deliver again a
            # message the client completed. The client retries on a new connection,
            # against the state that is there.
            if not self.closed:
                self._barrier = None
                self._wbuf.clear()
                log.emit("store.error", "error", op="mark", reason=why)
                self.fail(0x80, "QoS 2 state not stored")
            return
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

    def _set_timer(self, action: SetTimer) -> None:
        self._timers = set_named(self._timers, self, action.name, action.at, self._loop)

    def _cancel_timer(self, action: CancelTimer) -> None:
        self._timers = cancel_named(self._timers, action.name, self._loop)

    def _cancel_timers(self) -> None:
        self._timers = cancel_all(self._timers, self._loop)

    def _ended_action(self, action: Ended) -> None:
        if self._ended:
            return
        self._ended = True
        self.broker.ended(self, action)
        if self.notifier is not None and self.sid is not None and not action.taken_over:
            kept = self.persistent and action.session_expiry != 0
            self.notifier.ended(self.sid[0], self.sid[1], kept)

    def _log_event(self, action: LogEvent) -> None:
        if action.event == "protocol.error":
            self.metrics.protocol_errors.inc()
            log.emit(action.event, "warning", **dict(action.fields))
        else:
            log.emit(action.event, "info", **dict(action.fields))


_DISPATCH: Final[dict[type, Callable[[ActionExecutor, Any], None]]] = {
    Send: ActionExecutor._send,
    SendPublish: ActionExecutor._send_publish,
    Close: ActionExecutor._close,
    Register: ActionExecutor._register,
    Route: ActionExecutor._route,
    SubscribeRequest: ActionExecutor._subscribe,
    UnsubscribeRequest: ActionExecutor._unsubscribe,
    Acked: ActionExecutor._acked,
    StoreMark: ActionExecutor._store_mark,
    Dropped: ActionExecutor._dropped,
    PublishWill: ActionExecutor._publish_will,
    SetTimer: ActionExecutor._set_timer,
    CancelTimer: ActionExecutor._cancel_timer,
    Ended: ActionExecutor._ended_action,
    LogEvent: ActionExecutor._log_event,
}
"""How ``execute`` runs each action type (one table for all connections)."""
