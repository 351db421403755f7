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
from typing import Protocol

from services.common.session_key import SessionKey
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


class ShareWaiter(Protocol):
    """What hears a forwarded shared copy's outcome (a ``publish_ack.Waiter``)."""

    def step(self, failure: str | None) -> None: ...


class Shared:
    """A QoS >= 1 copy that a shared subscription group's member holds for the group.

    The node that picked the member keeps the copy until the member acknowledges it:
    if the member's session ends first, another member gets it (MQTT 5.0 4.8.2,
    "SHOULD"), and if the member's node dies, the node that picked it picks again. A
    copy another node forwarded (``remote``) is that node's to pick again: ``waiter``,
    its forwarding inbox's completion, hears the member's acknowledgement or its loss.
    ``excluded`` are the members that already lost it, never picked for it again;
    ``released`` once a QoS 2 copy's PUBREC came: the member has it.

    The publisher is answered as for any non-persistent subscriber, when the copy is
    routed: a copy that dies with the node holding it, before any member acknowledged
    it, is lost, as a clean session's is (persistent members' copies are queued)."""

    __slots__ = ("excluded", "released", "remote", "share", "waiter")

    def __init__(
        self,
        share: str,
        excluded: frozenset[SessionKey],
        waiter: ShareWaiter | None = None,
        remote: bool = False,
    ) -> None:
        self.share = share
        self.excluded = excluded
        self.waiter = waiter
        self.remote = remote
        self.released = False


@dataclass(slots=True, init=False)
class OutboundMessage:
    """A message on its way to one session.

    ``qos`` is min(publish QoS, granted QoS) (unless upgrade_outgoing_qos); ``seq`` is the
    entry's sequence number in the session's durable queue, None for non-persistent
    delivery; ``dup`` is set when the message may have been sent to the client before;
    ``shared`` when the copy is a shared group's, owed to the group until acknowledged.
    """

    message: Message
    qos: int
    retain: bool
    sub_ids: tuple[int, ...] = ()
    seq: int | None = None
    dup: bool = False
    shared: Shared | None = None

    def __init__(
        self,
        message: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...] = (),
        seq: int | None = None,
        dup: bool = False,
        shared: Shared | None = None,
    ) -> None:
        self.message = message
        self.qos = qos
        self.retain = retain
        self.sub_ids = sub_ids
        self.seq = seq
        self.dup = dup
        self.shared = shared
