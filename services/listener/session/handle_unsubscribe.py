"""UNSUBSCRIBE: pass the filters to the host, answer UNSUBACK with merged codes.

Theory of operation: the decoder already refuses a malformed filter, so the session
only re-checks filters handed to it directly: an invalid one gets 0x8F in a v5
UNSUBACK and is not passed on. The host answers ``handle_unsubscribed`` with one code
per filter it received (0x00 success, 0x11 no subscription existed); 3.1/3.1.1
UNSUBACK carries no codes at all [MQTT-3.10.4-4], [MQTT-3.10.4-5].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from services.listener.mqtt.errors import TopicFilterInvalid
from services.listener.mqtt.topics import validate_topic_filter
from services.listener.mqtt.types import PacketType, Unsuback, Unsubscribe
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import Action, Send, UnsubscribeRequest
from services.listener.session.codes import v5_code
from services.listener.session.handle_subscribe import merge

if TYPE_CHECKING:
    from services.listener.session.core import Session


def handle_unsubscribe(s: Session, pkt: Unsubscribe, now: float) -> list[Action]:
    if s.unsubscribes is not None and pkt.packet_id in s.unsubscribes:
        codes = (R.PACKET_IDENTIFIER_IN_USE,) * len(pkt.topic_filters)
        return [_unsuback(s, pkt.packet_id, codes)]
    slots: list[int | None] = []
    accepted: list[str] = []
    for topic_filter in pkt.topic_filters:
        try:
            validate_topic_filter(topic_filter)
        except TopicFilterInvalid:
            slots.append(R.TOPIC_FILTER_INVALID)
            continue
        slots.append(None)
        accepted.append(topic_filter)
    if not accepted:
        return [_unsuback(s, pkt.packet_id, [c or 0 for c in slots])]
    if s.unsubscribes is None:
        s.unsubscribes = {}
    s.unsubscribes[pkt.packet_id] = slots
    return [UnsubscribeRequest(pkt.packet_id, tuple(accepted))]


def handle_unsubscribed(
    s: Session, packet_id: int, codes: Sequence[int], now: float
) -> list[Action]:
    slots = s.unsubscribes.pop(packet_id, None) if s.unsubscribes is not None else None
    if slots is None:
        return []
    return [_unsuback(s, packet_id, merge(slots, codes, "UNSUBSCRIBE"))]


def _unsuback(s: Session, packet_id: int, codes: Sequence[int]) -> Send:
    if s.protocol_version != 5:
        return Send(Unsuback(packet_id))
    return Send(Unsuback(packet_id, tuple(v5_code(PacketType.UNSUBACK, c) for c in codes)))
