"""The MQTT session state machine of one connection (3.1, 3.1.1 and 5.0), sans I/O.

Theory of operation. A ``Session`` is fed decoded packets, timer expiries and the
answers to its own requests, and returns actions as data (``session.actions``); the
server executes them in order. It never reads a clock (``now`` is passed in) and never
touches a socket, so every behaviour is testable by calling methods and comparing lists.

States and transitions::

    CONNECTING --CONNECT ok--> REGISTERING --handle_registered(ok)--> CONNECTED
        |                          |  (packets pipelined behind CONNECT      |
        |                          |   are buffered, replayed after CONNACK) |
        +--error/timeout--+--------+--refused/error/takeover/lost------------+
                          v
                        CLOSED (absorbing: inputs return [], deliveries Dropped)

A CONNECT naming an Authentication Method stays CONNECTING while its AUTH exchange
runs (``handle_auth``, ``Session.auth``); only AUTH and DISCONNECT may arrive then.

Inbound packets of a connected client are dispatched through a table to one module per
packet type (``handle_connect``, ``handle_publish``, ``handle_puback``, ...), the shape
of mosquitto's ``handle_<packet>.c``; timers go to ``handle_timeout``, deliveries to
``outbound``. Handlers raise ``MQTTError`` (carrying its reason code) when the client
broke the protocol; ``handle_packet`` catches it and ``ending.fail`` is the one place
where an error becomes a CONNACK refusal, a v5 DISCONNECT, a ``Close``, the will and
``Ended`` (the invariants are listed there).

The session only asks; the host answers through ``handle_registered``,
``handle_routed``, ``handle_subscribed`` and ``handle_unsubscribed`` (see
``session.actions``). Calls that make no sense in the current state return ``[]``, so a
late answer for a connection that has meanwhile closed is harmless.

Memory: a broker holds one ``Session`` per connected client, most of them idle, so
the class has ``__slots__``, the CONNECT packet is not kept (only what later packets
are checked against), and what only some clients need — packets pipelined behind
CONNECT, pending SUBSCRIBE/UNSUBSCRIBE answers, the inbound QoS 1/2 state — is created
on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from services.listener.mqtt.errors import MQTTError, ProtocolError
from services.listener.mqtt.types import (
    Auth,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Subscribe,
    Unsubscribe,
    Will,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session import (
    ending,
    handle_auth,
    handle_connect,
    handle_disconnect,
    handle_ping,
    handle_puback,
    handle_publish,
    handle_subscribe,
    handle_timeout,
    handle_unsubscribe,
)
from services.listener.session.actions import (
    Action,
    Close,
    SetTimer,
)
from services.listener.session.auth import Authorizer
from services.listener.session.limits import SessionLimits
from services.listener.session.messages import OutboundMessage
from services.listener.session.outbound import Outbound
from services.listener.session.state import SessionState

__all__ = ["EARLY_PACKET_LIMIT", "Session", "SessionState"]

EARLY_PACKET_LIMIT: Final = 100
"""Packets a client may pipeline behind CONNECT before its CONNACK (then: closed)."""


# Each handler takes the packet type it is filed under, which Callable cannot express.
Handler = Callable[["Session", Any, float], list[Action]]

_CONNECTED: Final[dict[type, Handler]] = {
    Publish: handle_publish.handle_publish,
    Puback: handle_puback.handle_puback,
    Pubrec: handle_puback.handle_pubrec,
    Pubrel: handle_puback.handle_pubrel,
    Pubcomp: handle_puback.handle_pubcomp,
    Subscribe: handle_subscribe.handle_subscribe,
    Unsubscribe: handle_unsubscribe.handle_unsubscribe,
    Pingreq: handle_ping.handle_pingreq,
    Disconnect: handle_disconnect.handle_disconnect,
    Auth: handle_auth.handle_auth,
}
"""Inbound packets a connected client may send; anything else is a protocol error."""


class Session:
    """One client connection's MQTT state; see the module docstring."""

    __slots__ = (
        "answers",
        "assigned_client_id",
        "auth",
        "authorizer",
        "clean_start",
        "client_id",
        "connect_expiry",
        "early",
        "ended",
        "epoch",
        "expiry_capped",
        "inbound",
        "keepalive",
        "last_seen",
        "limits",
        "mountpoint",
        "msg_ids",
        "outbound",
        "peer",
        "persistent",
        "protocol_version",
        "register_sent",
        "server_keepalive",
        "session_expiry",
        "state",
        "subscribes",
        "unsubscribes",
        "username",
        "version_known",
        "will",
    )

    def __init__(
        self,
        limits: SessionLimits,
        authorizer: Authorizer,
        peer: str,
        msg_ids: Callable[[], str],
        now: float,
        answers: handle_auth.AuthAnswers | None = None,
    ) -> None:
        self.limits = limits
        self.authorizer = authorizer
        self.peer = peer
        self.msg_ids = msg_ids
        self.state = SessionState.CONNECTING
        # 4 until a CONNECT says otherwise, so a refusal of garbage is 3.1.1-encoded.
        self.protocol_version = 4
        self.version_known = False
        self.client_id = ""
        self.mountpoint = limits.mountpoint
        self.username: str | None = None
        self.clean_start = True
        self.session_expiry = 0
        self.persistent = False
        self.epoch = 0
        self.keepalive = 0
        self.will: Will | None = None
        # -- set while connecting (handle_connect) ------------------------------------
        self.connect_expiry = 0  # the CONNECT's Session Expiry Interval (v5), uncapped
        self.assigned_client_id = False
        self.server_keepalive = False  # keepalive was capped: tell a v5 client
        self.expiry_capped = False  # session expiry was capped: tell a v5 client
        self.register_sent = False
        self.ended = False
        self.early: list[Packet] | None = None  # pipelined behind CONNECT, until CONNACK
        # enhanced authentication (handle_auth): who answers it, and its state if used
        self.answers = answers
        self.auth: handle_auth.EnhancedAuth | None = None
        # -- connected state ------------------------------------------------------------
        self.last_seen = now
        self.inbound: handle_publish.Inbound | None = None  # see handle_publish.inbound_of
        self.outbound = Outbound(limits)
        # SUBSCRIBE / UNSUBSCRIBE ids awaiting the host's answer (handle_subscribe)
        self.subscribes: dict[int, list[int | None]] | None = None
        self.unsubscribes: dict[int, list[int | None]] | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, now: float) -> list[Action]:
        """The connection is open: a CONNECT must arrive within ``connect_timeout``."""
        return [SetTimer("connect", now + self.limits.connect_timeout)]

    def handle_packet(self, pkt: Packet, now: float) -> list[Action]:
        """One decoded inbound packet."""
        try:
            return self._dispatch(pkt, now)
        except MQTTError as err:
            return self.fail(err, now)

    def _dispatch(self, pkt: Packet, now: float) -> list[Action]:
        state = self.state
        if state is SessionState.CONNECTED:
            self.last_seen = now
            handler = _CONNECTED.get(type(pkt))
            if handler is None:
                raise _unexpected(pkt)
            return handler(self, pkt, now)
        if state is SessionState.CONNECTING:
            if self.auth is not None:  # the CONNECT's AUTH exchange runs
                self.last_seen = now
                return handle_auth.during_connect(self, pkt, now)
            if not isinstance(pkt, Connect):
                raise ProtocolError(f"{type(pkt).__name__} before CONNECT [MQTT-3.1.0-1]")
            self.last_seen = now
            return handle_connect.handle_connect(self, pkt, now)
        if state is SessionState.REGISTERING:
            self.last_seen = now
            if isinstance(pkt, Connect):
                raise ProtocolError("second CONNECT [MQTT-3.1.0-2]")
            early = self.early
            if early is None:
                early = self.early = []
            if len(early) >= EARLY_PACKET_LIMIT:
                raise MQTTError("too many packets before CONNACK", reason_code=R.SERVER_BUSY)
            early.append(pkt)
            return []
        return []

    def handle_protocol_error(self, err: MQTTError, now: float) -> list[Action]:
        """The decoder refused the stream. Packets it decoded before the bad frame in the
        same ``feed`` (``err.preceding``) are handled here first, so the host passes
        the error as it is and does not replay them itself."""
        out: list[Action] = []
        for pkt in err.preceding:
            if self.state is SessionState.CLOSED:
                return out
            out += self.handle_packet(pkt, now)
        known = err.protocol_version
        if self.state is SessionState.CONNECTING and not self.version_known and known:
            self.protocol_version, self.version_known = known, True
        return out + self.fail(err, now)

    def handle_registered(
        self,
        ok: bool,
        epoch: int,
        session_present: bool,
        persistent: bool,
        reason_code: int,
        now: float,
    ) -> list[Action]:
        """The registry's answer to ``Register``: CONNACK, then the pipelined packets."""
        if self.state is not SessionState.REGISTERING:
            return []
        if not ok:
            return handle_connect.refuse(self, reason_code)
        actions = handle_connect.accept(self, epoch, session_present, persistent, now)
        early, self.early = self.early or (), None
        for pkt in early:
            if not self.connected:
                break
            actions += self.handle_packet(pkt, now)
        if self.connected:
            actions += self.outbound.drain(now)
        return actions

    def begin_auth(self, pkt: Connect, now: float) -> list[Action]:
        """A CONNECT names an Authentication Method: ``handle_auth`` takes it over (through
        here, as ``handle_auth`` builds on ``handle_connect``)."""
        return handle_auth.begin(self, pkt, now)

    @property
    def connected(self) -> bool:
        """CONNACK with success sent and the connection not over."""
        return self.state is SessionState.CONNECTED

    # -- answers to the session's requests ------------------------------------------------

    def handle_routed(self, token: int, reason_code: int, now: float) -> list[Action]:
        """The routed PUBLISH ``token`` is durable where it must be: acknowledge it."""
        if self.state is not SessionState.CONNECTED:
            return []
        try:
            return handle_publish.handle_routed(self, token, reason_code, now)
        except MQTTError as err:
            return self.fail(err, now)

    def handle_subscribed(self, packet_id: int, codes: Sequence[int], now: float) -> list[Action]:
        if self.state is not SessionState.CONNECTED:
            return []
        return handle_subscribe.handle_subscribed(self, packet_id, codes, now)

    def handle_unsubscribed(self, packet_id: int, codes: Sequence[int], now: float) -> list[Action]:
        if self.state is not SessionState.CONNECTED:
            return []
        return handle_unsubscribe.handle_unsubscribed(self, packet_id, codes, now)

    # -- outbound ---------------------------------------------------------------------------

    def deliver(self, msg: OutboundMessage, now: float) -> list[Action]:
        """Send ``msg`` to the client now, or queue it behind the window, or drop it."""
        if self.state in (SessionState.CONNECTED, SessionState.REGISTERING):
            return self.outbound.deliver(msg, now)
        return self.outbound.drop(msg, "not_connected")

    def resume(
        self,
        queued: Sequence[OutboundMessage],
        inbound_qos2: Iterable[int],
        outbound_pubrel: Iterable[int],
        now: float,
    ) -> list[Action]:
        """A persistent session was resumed: restore its QoS 2 state, then redeliver."""
        if self.state is not SessionState.CONNECTED:
            return []
        restored = list(inbound_qos2)
        if restored:
            handle_publish.inbound_of(self).restore(restored)
        return self.outbound.resume(queued, outbound_pubrel, now)

    def set_congested(self, flag: bool, now: float) -> list[Action]:
        """The socket's write buffer is full (True) or has drained (False)."""
        actions = self.outbound.set_congested(flag, now)
        return actions if self.state is SessionState.CONNECTED else []

    # -- timers and endings ---------------------------------------------------------------

    def handle_timeout(self, name: str, now: float) -> list[Action]:
        """A ``SetTimer`` fired: "connect", "keepalive", "retry" or "auth"."""
        if name == "auth":
            return handle_auth.handle_timeout(self, now)
        return handle_timeout.handle_timeout(self, name, now)

    def handle_takeover(self, now: float) -> list[Action]:
        """Another connection took the client id over [MQTT-3.1.4-2] / [MQTT-3.1.4-3]."""
        if self.state is SessionState.CONNECTING:
            self.state = SessionState.CLOSED
            return [Close("taken_over", R.SESSION_TAKEN_OVER)]
        return self.end(
            "taken_over", R.SESSION_TAKEN_OVER, disconnect=True, will=True, taken_over=True
        )

    def handle_connection_lost(self, now: float) -> list[Action]:
        """The socket closed without a DISCONNECT: the will is due [MQTT-3.1.2-8]."""
        if self.state is SessionState.CONNECTING:
            self.state = SessionState.CLOSED
            return []
        return self.end("connection_lost", 0, disconnect=False, will=True, close=False)

    def handle_shutdown(self, now: float) -> list[Action]:
        """The server is stopping. The will is published: the server, not the client,
        closes the connection, which the spec (3.1.2.5) lists among the will's causes."""
        if self.state is SessionState.CONNECTING:
            self.state = SessionState.CLOSED
            return [Close("shutdown", R.SERVER_SHUTTING_DOWN)]
        return self.end("shutdown", R.SERVER_SHUTTING_DOWN, disconnect=True, will=True)

    def fail(self, err: MQTTError, now: float, before: Sequence[Action] = ()) -> list[Action]:
        """A protocol error: see ``ending.fail``, the one place errors become packets."""
        return ending.fail(self, err, before)

    def end(
        self,
        reason: str,
        reason_code: int,
        *,
        disconnect: bool,
        will: bool,
        taken_over: bool = False,
        close: bool = True,
    ) -> list[Action]:
        """Leave for CLOSED: see ``ending.end``."""
        return ending.end(
            self,
            reason,
            reason_code,
            disconnect=disconnect,
            will=will,
            taken_over=taken_over,
            close=close,
        )


def _unexpected(pkt: Packet) -> MQTTError:
    if isinstance(pkt, Connect):
        return ProtocolError("second CONNECT [MQTT-3.1.0-2]")
    return ProtocolError(f"unexpected {type(pkt).__name__} from a client")
