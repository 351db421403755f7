"""SUBSCRIBE and UNSUBSCRIBE (handle_subscribe, handle_unsubscribe)."""

from __future__ import annotations

import pytest
from test_session_support import VERSIONS, Recorder, check_encodable, connected, of, packets

from services.common.events import unknown_fields
from services.listener.mqtt.types import (
    Properties,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import (
    LogEvent,
    SubscribeRequest,
    UnsubscribeRequest,
)
from services.listener.session.limits import SessionLimits

NO_WILDCARDS = SessionLimits(wildcard_subscription_available=False)
NO_SHARED = SessionLimits(shared_subscription_available=False)
DENY = Recorder(deny_subscribe=frozenset({"secret/#"}))


@pytest.mark.parametrize(
    ("limits", "auth", "topic_filter", "v5_code"),
    [
        (SessionLimits(), Recorder(), "a/+/b", None),
        (SessionLimits(), Recorder(), "a/#/b", R.TOPIC_FILTER_INVALID),
        (SessionLimits(), Recorder(), "$share//a", R.TOPIC_FILTER_INVALID),  # [MQTT-4.8.2-1]
        (NO_WILDCARDS, Recorder(), "a/+", R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED),
        (NO_WILDCARDS, Recorder(), "$share/g/#", R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED),
        (NO_WILDCARDS, Recorder(), "a/b", None),
        (NO_SHARED, Recorder(), "$share/g/a", R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED),
        (NO_SHARED, Recorder(), "$shared/g/a", None),  # not a shared subscription
        (SessionLimits(), DENY, "secret/#", R.NOT_AUTHORIZED),
    ],
)
@pytest.mark.parametrize("version", VERSIONS)
def test_each_filter_judged(
    version: int, limits: SessionLimits, auth: Recorder, topic_filter: str, v5_code: int | None
) -> None:
    """[MQTT-3.8.4-5] (v5) / [MQTT-3.8.4-4] (3.1.1): each filter on its own."""
    session = connected(version, limits, auth)
    actions = session.handle_packet(Subscribe(3, (Subscription(topic_filter, 1),)), 1.0)
    if v5_code is None:
        assert of(actions, SubscribeRequest) == [
            SubscribeRequest(3, (Subscription(topic_filter, 1),), None)
        ]
        actions = session.handle_subscribed(3, [1], 2.0)
        assert packets(actions) == [Suback(3, (1,))]
        return
    # Refused by the session: the SUBACK comes at once, 3.1.1 says 0x80 [MQTT-3.9.3-2].
    assert not of(actions, SubscribeRequest)
    assert packets(actions) == [Suback(3, (v5_code if version == 5 else 0x80,))]
    check_encodable(session, actions)


def test_codes_merged_in_filter_order() -> None:
    """[MQTT-3.9.3-1]: one code per filter, in the SUBSCRIBE's order."""
    session = connected(5, NO_WILDCARDS)
    subs = (
        Subscription("a/#", 0),
        Subscription("x", 2),
        Subscription("bad/#/x", 1),
        Subscription("y", 1),
    )
    (request,) = session.handle_packet(Subscribe(5, subs), 1.0)
    assert request == SubscribeRequest(5, (subs[1], subs[3]), None)
    actions = session.handle_subscribed(5, [2, R.QUOTA_EXCEEDED], 2.0)
    assert packets(actions) == [Suback(5, (0xA2, 2, 0x8F, 0x97))]


def test_v4_host_failure_codes_become_0x80() -> None:
    session = connected(4)
    session.handle_packet(Subscribe(1, (Subscription("a", 1), Subscription("b", 2))), 1.0)
    assert packets(session.handle_subscribed(1, [1, R.QUOTA_EXCEEDED], 2.0)) == [
        Suback(1, (1, 0x80))
    ]


def test_requested_qos_above_max_qos_is_downgraded() -> None:
    """[MQTT-3.2.2-10]: SUBSCRIBE with QoS 2 is accepted by a server with max QoS 1."""
    session = connected(5, SessionLimits(max_qos=1))
    (request,) = session.handle_packet(Subscribe(1, (Subscription("a", 2, no_local=True),)), 1.0)
    assert isinstance(request, SubscribeRequest)
    assert request.subscriptions == (Subscription("a", 1, no_local=True),)


def test_subscription_identifier_passed_on() -> None:
    session = connected(5)
    pkt = Subscribe(1, (Subscription("a", 1),), Properties(subscription_identifiers=(77,)))
    (request,) = session.handle_packet(pkt, 1.0)
    assert isinstance(request, SubscribeRequest) and request.sub_id == 77


def test_refused_subscription_is_logged() -> None:
    session = connected(5, auth=DENY, username="eve")
    actions = session.handle_packet(Subscribe(1, (Subscription("secret/#", 0),)), 1.0)
    (log,) = of(actions, LogEvent)
    fields = dict(log.fields)
    assert unknown_fields("auth.failed", fields) == []
    assert (fields["action"], fields["topic"], fields["username"]) == (
        "subscribe",
        "secret/#",
        "eve",
    )
    assert ("subscribe", "c1", "eve", "", "secret/#") in DENY.calls


def test_packet_id_in_use() -> None:
    session = connected(5)
    session.handle_packet(Subscribe(1, (Subscription("a", 1),)), 1.0)
    actions = session.handle_packet(Subscribe(1, (Subscription("b", 1), Subscription("c", 1))), 1.0)
    assert packets(actions) == [Suback(1, (0x91, 0x91))]
    assert packets(session.handle_subscribed(1, [1], 2.0)) == [Suback(1, (1,))]


def test_answer_for_unknown_packet_id_is_ignored() -> None:
    session = connected(5)
    assert session.handle_subscribed(9, [0], 1.0) == []
    assert session.handle_unsubscribed(9, [0], 1.0) == []


def test_host_giving_the_wrong_number_of_codes_is_a_bug() -> None:
    session = connected(5)
    session.handle_packet(Subscribe(1, (Subscription("a", 1),)), 1.0)
    with pytest.raises(ValueError, match="2 codes for 1"):
        session.handle_subscribed(1, [0, 0], 2.0)


# -- UNSUBSCRIBE -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_unsubscribe(version: int) -> None:
    session = connected(version)
    (request,) = session.handle_packet(Unsubscribe(4, ("a", "b/#")), 1.0)
    assert request == UnsubscribeRequest(4, ("a", "b/#"))
    actions = session.handle_unsubscribed(4, [0, R.NO_SUBSCRIPTION_EXISTED], 2.0)
    # [MQTT-3.10.4-4], [MQTT-3.10.4-5]; 3.1.1 UNSUBACK has no codes.
    expected = Unsuback(4, (0, 0x11)) if version == 5 else Unsuback(4)
    assert packets(actions) == [expected]
    check_encodable(session, actions)


def test_unsubscribe_invalid_filter_v5() -> None:
    session = connected(5)
    (request,) = session.handle_packet(Unsubscribe(4, ("a/#/b", "c")), 1.0)
    assert request == UnsubscribeRequest(4, ("c",))
    assert packets(session.handle_unsubscribed(4, [0], 2.0)) == [Unsuback(4, (0x8F, 0))]


def test_unsubscribe_only_invalid_filters_answers_at_once() -> None:
    session = connected(5)
    assert packets(session.handle_packet(Unsubscribe(4, ("#/a",)), 1.0)) == [Unsuback(4, (0x8F,))]


def test_unsubscribe_packet_id_in_use() -> None:
    session = connected(5)
    session.handle_packet(Unsubscribe(4, ("a",)), 1.0)
    assert packets(session.handle_packet(Unsubscribe(4, ("b",)), 1.0)) == [Unsuback(4, (0x91,))]
