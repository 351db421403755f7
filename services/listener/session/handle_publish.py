"""Inbound PUBLISH: validate, authorise, route; acknowledge in arrival order.

Theory of operation. A PUBLISH is checked in the order the spec names its errors
(topic alias 0x94 / unknown alias 0x82, topic name 0x90, subscription identifier from a
client 0x82 [MQTT-3.3.4-6], QoS above Maximum QoS 0x9B, retain not available 0x9A,
payload above ``max_message_size`` 0x95, Receive Maximum exceeded 0x93); any of those
ends the connection (v5 DISCONNECT with that code, 3.1.1 close). Then the ACL: a refused
PUBLISH is not routed, and acknowledged with 0x87 (v5) or positively (3.1.1 has no way
to refuse [MQTT-3.3.5-2]). Otherwise it becomes ``Route(message, token)`` and, for
QoS >= 1, waits in ``Inbound.acks`` until the host calls ``handle_routed``.

Acknowledgements leave in the order the PUBLISHes arrived, whatever order routing
finishes in: PUBACKs [MQTT-4.6.0-2] and PUBRECs [MQTT-4.6.0-3]. ``acks`` is an
insertion-ordered dict keyed by packet id; ``flush`` sends from its head while the head
is decided.

Exactly once (QoS 2): from the PUBREC until the PUBREL the id sits in
``awaiting_pubrel`` (persisted with ``StoreMark`` for persistent sessions), and a PUBLISH
reusing it is answered with PUBREC again without being routed [MQTT-4.3.3-10]. A
PUBLISH whose id is still being routed is dropped: its acknowledgement is on its way.

Worked example (v5): PUBLISH qos 2 id 7 -> [Route(m, 7)]; handle_routed(7, 0x10) ->
[StoreMark(inbound, 7, set), Send(PUBREC 7 0x10)]; PUBLISH dup id 7 -> [Send(PUBREC 7)];
PUBREL 7 -> [StoreMark(inbound, 7, clear), Send(PUBCOMP 7)].
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from services.listener.mqtt.errors import (
    MQTTError,
    PacketTooLarge,
    ProtocolError,
    TopicAliasInvalid,
    TopicNameInvalid,
)
from services.listener.mqtt.topics import validate_topic_name
from services.listener.mqtt.types import (
    NO_PROPERTIES,
    PacketType,
    Properties,
    Puback,
    Publish,
    Pubrec,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import Action, Route, Send, StoreMark
from services.listener.session.codes import MARK_INBOUND_QOS2, v5_code
from services.listener.session.handle_connect import auth_failed
from services.listener.session.messages import Message

if TYPE_CHECKING:
    from services.listener.session.core import Session


@dataclass(slots=True, init=False)
class PendingAck:
    """An inbound QoS 1/2 PUBLISH awaiting its acknowledgement; ``code`` is None while
    routing, then the v5 reason code to answer with. (``__init__`` written out: compiled,
    the generated one stays interpreted — one per QoS >= 1 publish.)"""

    qos: int
    code: int | None

    def __init__(self, qos: int, code: int | None = None) -> None:
        self.qos = qos
        self.code = code


@dataclass(slots=True)
class Inbound:
    """The inbound half of a session. ``restored`` are the ids of ``awaiting_pubrel``
    that a previous connection accepted (``Session.resume``). The id sets are dicts
    (keys only): an empty dict costs 64 bytes, an empty set 216, on every connection."""

    acks: dict[int, PendingAck] = field(default_factory=dict)
    awaiting_pubrel: dict[int, None] = field(default_factory=dict)
    restored: dict[int, None] = field(default_factory=dict)
    aliases: dict[int, str] = field(default_factory=dict)

    def unacknowledged(self) -> int:
        """QoS 1/2 PUBLISHes of this connection counted against the broker's Receive
        Maximum: until PUBACK, or PUBCOMP for QoS 2 [MQTT-3.3.4-7]. Restored ids were
        published on an earlier connection, whose quota they used."""
        return len(self.acks) + len(self.awaiting_pubrel) - len(self.restored)

    def restore(self, packet_ids: Iterable[int]) -> None:
        ids = dict.fromkeys(packet_ids)
        self.awaiting_pubrel |= ids
        self.restored |= ids

    def release(self, packet_id: int) -> bool:
        """PUBREL: forget ``packet_id``; False if it was not awaiting one."""
        if packet_id not in self.awaiting_pubrel:
            return False
        del self.awaiting_pubrel[packet_id]
        self.restored.pop(packet_id, None)
        return True


def inbound_of(s: Session) -> Inbound:
    """The session's inbound state, created on first use: a client that is idle or
    publishes only QoS 0 without topic aliases never needs it."""
    inbound = s.inbound
    if inbound is None:
        inbound = s.inbound = Inbound()
    return inbound


def handle_publish(s: Session, pkt: Publish, now: float) -> list[Action]:
    v5 = s.protocol_version == 5
    topic = _resolve_topic(s, pkt) if v5 else pkt.topic
    _check(s, pkt, topic, v5)
    pid = pkt.packet_id
    if pkt.qos:
        if pid is None:
            raise ProtocolError(f"QoS {pkt.qos} PUBLISH without packet identifier")
        inbound = inbound_of(s)
        if pid in inbound.acks:
            return []  # a resend while the first copy is being routed
        if pid in inbound.awaiting_pubrel:
            if pkt.qos == 2:
                inbound.acks[pid] = PendingAck(2, R.SUCCESS)  # PUBREC again [MQTT-4.3.3-10]
                return flush(s)
            if v5:
                inbound.acks[pid] = PendingAck(1, R.PACKET_IDENTIFIER_IN_USE)
                return flush(s)
        if v5 and inbound.unacknowledged() >= s.limits.receive_max_broker:
            raise MQTTError(
                f"more than Receive Maximum {s.limits.receive_max_broker} unacknowledged "
                "QoS 1/2 PUBLISH [MQTT-3.3.4-7]",
                reason_code=R.RECEIVE_MAXIMUM_EXCEEDED,
            )
    if not s.authorizer.authorize_publish(s.client_id, s.username, s.mountpoint, topic):
        log = auth_failed(s, "publish", topic, "not authorized")
        if pid is None:
            return [log]
        inbound_of(s).acks[pid] = PendingAck(pkt.qos, R.NOT_AUTHORIZED if v5 else R.SUCCESS)
        return [log, *flush(s)]
    props = pkt.properties
    # positional, in field order (msg_id, topic, payload, qos, retain, publisher,
    # mountpoint, published_at, expires_at, properties): the hottest construction
    if props is NO_PROPERTIES:
        message = Message(
            s.msg_ids(), topic, pkt.payload, pkt.qos, pkt.retain, s.client_id, s.mountpoint, now
        )
    else:
        message = Message(
            s.msg_ids(),
            topic,
            pkt.payload,
            pkt.qos,
            pkt.retain,
            s.client_id,
            s.mountpoint,
            now,
            _expires_at(props, now),
            forwarded(props),
        )
    if pid is not None:
        inbound_of(s).acks[pid] = PendingAck(pkt.qos)
    return [Route(message, pid)]


def _resolve_topic(s: Session, pkt: Publish) -> str:
    """Map a v5 Topic Alias to its topic, or bind it [MQTT-3.3.2-12]."""
    alias = pkt.properties.topic_alias
    if alias is None:
        return pkt.topic
    limit = s.limits.topic_alias_max_client
    if alias == 0 or alias > limit:
        # [MQTT-3.2.2-17], [MQTT-3.3.2-8]: outside 1..Topic Alias Maximum.
        raise TopicAliasInvalid(f"topic alias {alias} outside 1..{limit}")
    if pkt.topic:
        inbound_of(s).aliases[alias] = pkt.topic
        return pkt.topic
    topic = s.inbound.aliases.get(alias) if s.inbound is not None else None
    if topic is None:
        raise ProtocolError(f"topic alias {alias} used before it was set")
    return topic


def _check(s: Session, pkt: Publish, topic: str, v5: bool) -> None:
    limits = s.limits
    validate_topic_name(topic)
    props = pkt.properties
    if v5 and props.subscription_identifiers:
        raise ProtocolError("subscription identifier in a PUBLISH from a client [MQTT-3.3.4-6]")
    if v5 and props.response_topic is not None:
        try:
            validate_topic_name(props.response_topic)
        except TopicNameInvalid as err:
            raise ProtocolError(f"response topic: {err.message} [MQTT-3.3.2-14]") from None
    if pkt.qos > limits.max_qos:
        raise MQTTError(
            f"PUBLISH QoS {pkt.qos} above Maximum QoS {limits.max_qos} [MQTT-3.2.2-11]",
            reason_code=R.QOS_NOT_SUPPORTED,
        )
    if pkt.retain and not limits.retain_available:
        raise MQTTError(
            "retained PUBLISH but retain not available", reason_code=R.RETAIN_NOT_SUPPORTED
        )
    if limits.max_message_size and len(pkt.payload) > limits.max_message_size:
        raise PacketTooLarge(
            f"payload of {len(pkt.payload)} bytes over max_message_size {limits.max_message_size}"
        )


def _expires_at(props: Properties, now: float) -> float | None:
    interval = props.message_expiry_interval
    return None if interval is None else now + interval


def forwarded(props: Properties) -> Properties:
    """What a subscriber receives unaltered [MQTT-3.3.2-4, -16, -17, -18, -20]."""
    if props is NO_PROPERTIES:
        return NO_PROPERTIES
    out = Properties(
        payload_format_indicator=props.payload_format_indicator,
        content_type=props.content_type,
        response_topic=props.response_topic,
        correlation_data=props.correlation_data,
        user_properties=props.user_properties,
    )
    return NO_PROPERTIES if out == NO_PROPERTIES else out


def handle_routed(s: Session, token: int, reason_code: int, now: float) -> list[Action]:
    pending = s.inbound.acks.get(token) if s.inbound is not None else None
    if pending is None or pending.code is not None:
        return []
    if reason_code >= 0x80 and s.protocol_version != 5:
        # 3.1.1 cannot refuse a PUBLISH; acknowledging it would lie (I1): close instead.
        raise MQTTError(f"routing failed with 0x{reason_code:02X}", reason_code=reason_code)
    pending.code = reason_code
    return flush(s)


def flush(s: Session) -> list[Action]:
    """Send the acknowledgements whose turn has come, in PUBLISH arrival order."""
    inbound = s.inbound
    out: list[Action] = []
    if inbound is None:
        return out
    acks = inbound.acks
    v5 = s.protocol_version == 5
    while acks:
        pid = next(iter(acks))
        pending = acks[pid]
        code = pending.code
        if code is None:
            break
        del acks[pid]
        wire = v5_code(PacketType.PUBACK, code) if v5 else 0
        if pending.qos == 1:
            out.append(Send(Puback(pid, wire)))
            continue
        if wire < 0x80 and pid not in inbound.awaiting_pubrel:
            inbound.awaiting_pubrel[pid] = None
            if s.persistent:
                out.append(StoreMark(MARK_INBOUND_QOS2, pid, True))
        out.append(Send(Pubrec(pid, wire)))
    return out
