"""What the session state machine asks its host (the listener server) to do, as data.

The session never touches a socket, a clock or an RPC: each ``handle_*`` call returns a
list of these actions, executed in order by the listener's action executor
(``services.listener.executor``). Several
actions come back to the session as a ``handle_*`` call once the host has done the work
(a round trip): ``Register`` -> ``handle_registered``, ``Route`` (QoS >= 1) ->
``handle_routed``, ``SubscribeRequest`` -> ``handle_subscribed``,
``UnsubscribeRequest`` -> ``handle_unsubscribed``, ``SetTimer`` -> ``handle_timeout``.

Worked example, a QoS 1 publish from a connected client::

    session.handle_packet(Publish("a/b", b"x", qos=1, packet_id=7), now)
      -> [Route(message, token=7)]
    host routes the message, waits until the queue writes are durable, then:
    session.handle_routed(7, ReasonCode.SUCCESS, now)
      -> [Send(Puback(7))]

Actions are immutable by convention. The ones made for every message (``Send``,
``SendPublish``, ``Route``, ``Acked``) or connection (``Register``, ``SetTimer``,
``CancelTimer``, ``Ended``) are not ``frozen``: a frozen dataclass sets each field through
``object.__setattr__``, a cost paid for every message on the hot path. Their ``__init__`` is
written out, as the packets' are (see ``mqtt.types``).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.listener.mqtt.types import Connect, Packet, Publish, Subscription, Will
from services.listener.session.messages import Message, OutboundMessage


@dataclass(slots=True, init=False)  # not frozen: per message, see the module docstring
class Send:
    """Encode ``packet`` with the session's protocol version and write it."""

    packet: Packet

    def __init__(self, packet: Packet) -> None:
        self.packet = packet


@dataclass(slots=True, init=False)  # not frozen: per message, see the module docstring
class SendPublish:
    """Write a PUBLISH that delivers ``delivery`` (logged as ``message.delivered``)."""

    packet: Publish
    delivery: OutboundMessage

    def __init__(self, packet: Publish, delivery: OutboundMessage) -> None:
        self.packet = packet
        self.delivery = delivery


@dataclass(frozen=True, slots=True)
class Close:
    """Close the connection after writing what is queued. ``reason`` goes to the log."""

    reason: str
    reason_code: int = 0


@dataclass(slots=True, init=False)  # not frozen: per connection, see the module docstring
class Register:
    """Ask the registry to make this connection the live session of ``client_id``.

    ``session_expiry`` is in seconds: 0 = the session ends with the connection,
    0xFFFFFFFF = never expires (v3/v4 persistent sessions; the registry then applies
    ``persistent_client_expiration``).
    """

    connect: Connect
    client_id: str
    mountpoint: str
    clean_start: bool
    session_expiry: int

    def __init__(
        self,
        connect: Connect,
        client_id: str,
        mountpoint: str,
        clean_start: bool,
        session_expiry: int,
    ) -> None:
        self.connect = connect
        self.client_id = client_id
        self.mountpoint = mountpoint
        self.clean_start = clean_start
        self.session_expiry = session_expiry


@dataclass(slots=True, init=False)  # not frozen: per message, see the module docstring
class Route:
    """Route an accepted PUBLISH. For QoS >= 1 ``token`` is not None and the host answers
    with ``handle_routed(token, reason_code, now)`` once every persistent copy is durable."""

    message: Message
    token: int | None

    def __init__(self, message: Message, token: int | None) -> None:
        self.message = message
        self.token = token


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    """Add subscriptions; the host answers ``handle_subscribed(packet_id, codes, now)``.

    ``sub_id`` is the MQTT 5 subscription identifier (None when absent). Entries already
    refused by the session (bad filter, ACL) are not listed; the session merges codes.
    """

    packet_id: int
    subscriptions: tuple[Subscription, ...]
    sub_id: int | None


@dataclass(frozen=True, slots=True)
class UnsubscribeRequest:
    """Remove subscriptions; the host answers ``handle_unsubscribed(packet_id, codes, now)``."""

    packet_id: int
    topic_filters: tuple[str, ...]


@dataclass(slots=True, init=False)  # not frozen: per message, see the module docstring
class Acked:
    """The client acknowledged ``delivery`` (PUBACK for QoS 1, PUBCOMP for QoS 2).

    For persistent sessions the host advances the queue (``delivery.seq``)."""

    delivery: OutboundMessage

    def __init__(self, delivery: OutboundMessage) -> None:
        self.delivery = delivery


@dataclass(frozen=True, slots=True)
class StoreMark:
    """Persist QoS 2 state of a persistent session (see msgstore.proto ``Mark``)."""

    kind: int  # msgstore_pb2.MARK_INBOUND_QOS2 (packet id) or MARK_OUTBOUND_PUBREL (seq)
    ident: int
    set: bool


@dataclass(frozen=True, slots=True)
class Dropped:
    """A delivery was not made, on purpose; logged as ``message.dropped`` and counted."""

    delivery: OutboundMessage
    reason: str  # queue_full | expired | too_large | not_authorized | ...


@dataclass(frozen=True, slots=True)
class PublishWill:
    """Publish the will (after ``delay`` seconds unless the client id reconnects first)."""

    will: Will
    delay: int


@dataclass(slots=True, init=False)  # not frozen: per connection, see the module docstring
class SetTimer:
    """Call ``handle_timeout(name, now)`` at wall-clock time ``at`` (replaces ``name``)."""

    name: str
    at: float

    def __init__(self, name: str, at: float) -> None:
        self.name = name
        self.at = at


@dataclass(slots=True, init=False)  # not frozen: per connection, see the module docstring
class CancelTimer:
    name: str

    def __init__(self, name: str) -> None:
        self.name = name


@dataclass(slots=True, init=False)  # not frozen: per connection, see the module docstring
class Ended:
    """The connection is over: tell the registry. ``session_expiry`` may have changed in the
    v5 DISCONNECT; ``taken_over`` when the registry asked for it; ``unacked_shared``: the
    shared groups' copies the client never acknowledged, owed to another member."""

    reason: str
    session_expiry: int
    taken_over: bool = False
    unacked_shared: tuple[OutboundMessage, ...] = ()

    def __init__(
        self,
        reason: str,
        session_expiry: int,
        taken_over: bool = False,
        unacked_shared: tuple[OutboundMessage, ...] = (),
    ) -> None:
        self.reason = reason
        self.session_expiry = session_expiry
        self.taken_over = taken_over
        self.unacked_shared = unacked_shared


@dataclass(frozen=True, slots=True)
class LogEvent:
    """An event for the log that only the session can see (names from services.common.events)."""

    event: str
    fields: tuple[tuple[str, object], ...]


Action = (
    Send
    | SendPublish
    | Close
    | Register
    | Route
    | SubscribeRequest
    | UnsubscribeRequest
    | Acked
    | StoreMark
    | Dropped
    | PublishWill
    | SetTimer
    | CancelTimer
    | Ended
    | LogEvent
)
