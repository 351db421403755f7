"""SUBSCRIBE: refuse what the session can judge, ask the host for the rest, merge codes.

Theory of operation: each topic filter is judged alone [MQTT-3.8.4-4] (3.1.1) /
[MQTT-3.8.4-5] (5.0): an invalid filter gets 0x8F, a shared subscription on a server
without them 0x9E, a wildcard on a server without them 0xA2 [MQTT-3.8.3-2] (3.1.1),
an ACL refusal 0x87 (with an ``auth.failed`` event); 3.1.1 says 0x80 for all of them.
A requested QoS above ``max_qos`` is granted at ``max_qos`` [MQTT-3.2.2-10]. The
accepted filters go to the host in one ``SubscribeRequest``; ``handle_subscribed``
fills the host's codes into the gaps, so the SUBACK lists one code per filter in the
SUBSCRIBE's order [MQTT-3.9.3-1].

Worked example: SUBSCRIBE id 5 [a/#, bad/#/x, $share/g/b] with wildcards off ->
slots [0xA2, 0x8F, None], SubscribeRequest(5, ($share/g/b,)); handle_subscribed(5, [1])
-> SUBACK 5 [0xA2, 0x8F, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from services.listener.mqtt.errors import TopicFilterInvalid
from services.listener.mqtt.topics import parse_shared, validate_topic_filter
from services.listener.mqtt.types import ReasonCode as R
from services.listener.mqtt.types import Suback, Subscribe, Subscription
from services.listener.session.actions import Action, LogEvent, Send, SubscribeRequest
from services.listener.session.codes import suback_code
from services.listener.session.handle_connect import auth_failed

if TYPE_CHECKING:
    from services.listener.session.core import Session


def handle_subscribe(s: Session, pkt: Subscribe, now: float) -> list[Action]:
    if s.subscribes is not None and pkt.packet_id in s.subscribes:
        # The id of a SUBSCRIBE still being answered [MQTT-2.2.1-3] (v5: 0x91).
        codes = [suback_code(s.protocol_version, R.PACKET_IDENTIFIER_IN_USE)]
        return [Send(Suback(pkt.packet_id, tuple(codes * len(pkt.subscriptions))))]
    slots: list[int | None] = []
    accepted: list[Subscription] = []
    logs: list[Action] = []
    for sub in pkt.subscriptions:
        code = _judge(s, sub.topic_filter)
        if code == R.NOT_AUTHORIZED:
            logs.append(_log(s, sub.topic_filter))
        if code is not None:
            slots.append(code)
            continue
        slots.append(None)
        accepted.append(replace(sub, qos=s.limits.max_qos) if sub.qos > s.limits.max_qos else sub)
    if not accepted:
        return [*logs, _suback(s, pkt.packet_id, [c or 0 for c in slots])]
    if s.subscribes is None:
        s.subscribes = {}
    s.subscribes[pkt.packet_id] = slots
    sub_ids = pkt.properties.subscription_identifiers
    request = SubscribeRequest(pkt.packet_id, tuple(accepted), sub_ids[0] if sub_ids else None)
    return [*logs, request]


def _judge(s: Session, topic_filter: str) -> int | None:
    """The code refusing ``topic_filter``, or None when the host should decide."""
    limits = s.limits
    try:
        validate_topic_filter(topic_filter)
        group, plain = parse_shared(topic_filter)
    except TopicFilterInvalid:
        return R.TOPIC_FILTER_INVALID
    if group is not None and not limits.shared_subscription_available:
        return R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED
    if not limits.wildcard_subscription_available and ("+" in plain or "#" in plain):
        return R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED
    if not s.authorizer.authorize_subscribe(s.client_id, s.username, s.mountpoint, topic_filter):
        return R.NOT_AUTHORIZED
    return None


def _log(s: Session, topic_filter: str) -> LogEvent:
    return auth_failed(s, "subscribe", topic_filter, "not authorized")


def _suback(s: Session, packet_id: int, codes: Sequence[int]) -> Send:
    version = s.protocol_version
    return Send(Suback(packet_id, tuple(suback_code(version, c) for c in codes)))


def handle_subscribed(s: Session, packet_id: int, codes: Sequence[int], now: float) -> list[Action]:
    """The host's codes for the accepted filters, in their order."""
    slots = s.subscribes.pop(packet_id, None) if s.subscribes is not None else None
    if slots is None:
        return []
    return [_suback(s, packet_id, merge(slots, codes, "SUBSCRIBE"))]


def merge(slots: Sequence[int | None], codes: Sequence[int], what: str) -> list[int]:
    """Fill the None slots with ``codes`` in order; the counts must agree."""
    gaps = sum(1 for slot in slots if slot is None)
    if gaps != len(codes):
        raise ValueError(f"{what}: {len(codes)} codes for {gaps} accepted topic filters")
    it = iter(codes)
    return [next(it) if slot is None else slot for slot in slots]
