"""Messages as the session and the router see them (protocol-version independent).

A :class:`Message` is one accepted PUBLISH; an :class:`OutboundMessage` is that message
as one subscriber receives it (its QoS, retain flag, subscription ids, and — for
persistent sessions — its position ``seq`` in the session's durable queue).

Both are values, immutable by convention: nothing assigns to a field after
construction (a changed copy is made with ``dataclasses.replace``), so one ``Message``
is shared by every subscriber's ``OutboundMessage`` and by the retained store. They are
not ``frozen=True`` because a frozen dataclass builds itself through
``object.__setattr__`` per field, which makes construction several times dearer on
the path that creates two or three of them per message and subscriber; and they are
not hashable (no code puts them in a set or uses them as a key).

Their ``__init__`` is written out (``init=False``), as that of every dataclass made per
message (packets, actions): in the compiled build (setup.py) the one ``dataclasses``
generates stays interpreted, an order of magnitude dearer than a compiled one.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.listener.mqtt.types import NO_PROPERTIES, Properties


@dataclass(slots=True, init=False)
class Message:
    """An application message. ``properties`` keeps only what is forwarded to subscribers
    (payload format, content type, response topic, correlation data, user properties);
    expiry is absolute (``expires_at``, wall-clock seconds) so it survives queueing."""

    msg_id: str
    topic: str
    payload: bytes
    qos: int
    retain: bool
    publisher: str
    mountpoint: str
    published_at: float
    expires_at: float | None = None
    properties: Properties = NO_PROPERTIES

    def __init__(
        self,
        msg_id: str,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        publisher: str,
        mountpoint: str,
        published_at: float,
        expires_at: float | None = None,
        properties: Properties = NO_PROPERTIES,
    ) -> None:
        self.msg_id = msg_id
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.publisher = publisher
        self.mountpoint = mountpoint
        self.published_at = published_at
        self.expires_at = expires_at
        self.properties = properties


@dataclass(slots=True, init=False)
class OutboundMessage:
    """A message on its way to one session.

    ``qos`` is min(publish QoS, granted QoS) (unless upgrade_outgoing_qos); ``seq`` is the
    entry's sequence number in the session's durable queue, None for non-persistent
    delivery; ``dup`` is set when the message may have been sent to the client before.
    """

    message: Message
    qos: int
    retain: bool
    sub_ids: tuple[int, ...] = ()
    seq: int | None = None
    dup: bool = False

    def __init__(
        self,
        message: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...] = (),
        seq: int | None = None,
        dup: bool = False,
    ) -> None:
        self.message = message
        self.qos = qos
        self.retain = retain
        self.sub_ids = sub_ids
        self.seq = seq
        self.dup = dup
