"""Publish-ack accounting: what a QoS >= 1 publish waits for before its PUBACK/PUBREC
(invariant I1).

Theory of operation. ``Broker.append`` gives every copy of a publish that must be
durable — one per persistent (or offline) target session — a :class:`Queued`, whose
``done`` is the store client's callback for that append. A QoS >= 1 publisher gets one
:class:`Countdown` counting those appends (and the gossip write of a retained message);
it answers the publisher when routing has issued them all (``arm``) and the last one
is done (``step``), whichever comes last — with 0x80 if any failed. No future per
write: the store client calls ``Queued.done`` directly, in batch order, which keeps the
deliveries to one session in ``seq`` order.

Worked example: a QoS 1 publish matches two persistent sessions A (online) and B
(offline): route makes Queued(A), Queued(B), a Countdown with ``left`` 2, then
``arm(SUCCESS)``. The store answers OK seq 7 for A: A receives the message with seq 7,
``left`` 1; OK for B: ``left`` 0, the publisher gets its PUBACK.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from services.common.session_key import SessionKey
from services.listener.mqtt.types import ReasonCode
from services.listener.ports import ClientPort
from services.listener.session.messages import Message, OutboundMessage
from services.listener.store_client import UNAVAILABLE
from services.pb import msgstore_pb2

_OK: Final = msgstore_pb2.APPEND_OK
_NO_QUEUE: Final = msgstore_pb2.APPEND_NO_QUEUE
_QUEUE_FULL: Final = msgstore_pb2.APPEND_QUEUE_FULL
_STORE_ERROR: Final = msgstore_pb2.APPEND_STORE_ERROR
_STALE_EPOCH: Final = msgstore_pb2.APPEND_STALE_EPOCH


class Outcomes(Protocol):
    """Where the copies' fates are reported (the broker)."""

    @property
    def sessions(self) -> Mapping[SessionKey, ClientPort]: ...

    def dropped(self, client_id: str, out: OutboundMessage, reason: str) -> None: ...

    def refused(self, msg: Message, reason: str) -> None:
        """``msg``'s publisher is answered 0x80: a copy of it failed (``reason``)."""
        ...

    def persistent(self, key: SessionKey) -> bool:
        """Whether ``key``'s session outlives its connections (its subscriptions say)."""
        ...


class Waiter(Protocol):
    """What hears a durable write's outcome: a publisher's :class:`Countdown`, or a
    forwarded copy's acknowledgement to the node that sent it (:class:`Completion`)."""

    def step(self, failure: str | None) -> None: ...


class Completion:
    """A :class:`Waiter` that calls a function (a forwarded copy's ``done``)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[str | None], None]) -> None:
        self.fn = fn

    def step(self, failure: str | None) -> None:
        self.fn(failure)


class Queued:
    """One session's copy of a publish on its way into that session's queue.

    ``done`` is the store client's callback: an online session receives the copy once
    it is durable (with its ``seq``), then the publisher's countdown moves. A full
    session queue (max_offline_messages) is a deliberate, logged drop, not a failure;
    NO_QUEUE is an offline, non-persistent session not yet cleaned up: nothing lost. For
    a persistent session it means the session left this node (a handover this
    listener's routes have not caught up with): a failure, so that the publisher sends
    again rather than being acknowledged for a message no queue took.
    """

    __slots__ = ("broker", "conn", "countdown", "msg", "qos", "retain", "sid", "sub_ids")

    def __init__(
        self,
        broker: Outcomes,
        sid: SessionKey,
        conn: ClientPort | None,
        msg: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        countdown: Waiter | None,
    ) -> None:
        self.broker = broker
        self.sid = sid
        self.conn = conn
        self.msg = msg
        self.qos = qos
        self.retain = retain
        self.sub_ids = sub_ids
        self.countdown = countdown

    def done(self, status: int, seq: int, error: str) -> None:
        failure: str | None = None
        conn = self.conn
        if conn is not None:
            conn.appending -= 1
        if status == _OK:
            if conn is not None and self.broker.sessions.get(self.sid) is conn:
                conn.deliver(OutboundMessage(self.msg, self.qos, self.retain, self.sub_ids, seq))
        elif status == _QUEUE_FULL:
            self.broker.dropped(self.sid[1], self._out(), "queue_full")
        elif status == _STORE_ERROR:
            self.broker.dropped(self.sid[1], self._out(), "store_error")
            failure = "APPEND_STORE_ERROR"
        elif status == _STALE_EPOCH:
            failure = "APPEND_STALE_EPOCH"
        elif status == UNAVAILABLE:
            failure = error or "store unavailable"
        elif status == _NO_QUEUE and self.qos and self.broker.persistent(self.sid):
            self.broker.dropped(self.sid[1], self._out(), "session_moved")
            failure = "APPEND_NO_QUEUE"
        if self.countdown is not None:
            self.countdown.step(failure)

    def _out(self) -> OutboundMessage:
        return OutboundMessage(self.msg, self.qos, self.retain, self.sub_ids)


class Countdown:
    """Answers a QoS >= 1 publisher once every durable write it waits on is done.

    Lighter than ``asyncio.gather``: one counter, no future per write (a future and its
    callback per append cost more than the routing around it). ``left`` counts the writes
    still out; ``arm`` is called once routing has issued them all, so the answer leaves
    when both happened, whichever comes last. Any failed write — an exception, or an
    append the store refused for lack of space or a stale epoch — makes the answer 0x80,
    so the publisher is never acknowledged for a message that is not on disk (I1).
    """

    __slots__ = ("broker", "code", "conn", "failure", "left", "msg", "token")

    def __init__(self, conn: ClientPort, token: int, broker: Outcomes, msg: Message) -> None:
        self.left = 0
        self.conn = conn
        self.token = token
        self.code: int | None = None  # set by ``arm``
        self.broker = broker
        self.failure: str | None = None
        self.msg = msg

    def arm(self, code: int) -> None:
        self.code = code
        if not self.left:
            self._answer()

    def step(self, failure: str | None) -> None:
        """One write is done (``failure`` None) or failed."""
        if failure is not None and self.failure is None:
            self.failure = failure
        self.left -= 1
        if not self.left and self.code is not None:
            self._answer()

    def future_done(self, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            self.step("cancelled")
        else:
            exc = fut.exception()
            self.step(None if exc is None else str(exc) or type(exc).__name__)

    def _answer(self) -> None:
        if self.failure is not None:
            self.broker.refused(self.msg, self.failure)
            self.conn.routed(self.token, ReasonCode.UNSPECIFIED_ERROR)
        else:
            assert self.code is not None
            self.conn.routed(self.token, self.code)
