"""Inbound PUBLISH and PUBREL (handle_publish, handle_puback): QoS 0/1/2 from clients."""

from __future__ import annotations

from typing import Any

import pytest
from test_session_support import (
    V3_V4,
    VERSIONS,
    Recorder,
    check_encodable,
    connected,
    of,
    packets,
)

from services.common.events import unknown_fields
from services.listener.mqtt.types import (
    NO_PROPERTIES,
    Disconnect,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import (
    Close,
    Ended,
    LogEvent,
    Route,
    Send,
    StoreMark,
)
from services.listener.session.codes import MARK_INBOUND_QOS2
from services.listener.session.core import SessionState
from services.listener.session.limits import SessionLimits


def route_of(actions: list[Any]) -> Route:
    (route,) = of(actions, Route)
    return route


# -- the three QoS flows ------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_qos0_is_routed_without_token(version: int) -> None:
    session = connected(version)
    actions = session.handle_packet(Publish("a/b", b"hi", 0), 5.0)
    route = route_of(actions)
    assert route.token is None and actions == [route]
    msg = route.message
    assert (msg.topic, msg.payload, msg.qos, msg.publisher) == ("a/b", b"hi", 0, "c1")
    assert msg.msg_id == "m1" and msg.published_at == 5.0


@pytest.mark.parametrize(
    ("version", "routed", "wire"),
    [
        (3, R.SUCCESS, 0),
        (4, R.NO_MATCHING_SUBSCRIBERS, 0),  # 3.1.1 has no reason codes
        (5, R.SUCCESS, 0),
        (5, R.NO_MATCHING_SUBSCRIBERS, 0x10),  # a success variant in v5
        (5, R.QUOTA_EXCEEDED, 0x97),
    ],
)
def test_qos1_puback_after_routing(version: int, routed: int, wire: int) -> None:
    """[MQTT-4.3.2-4]: PUBACK once the message is owned (routed durably)."""
    session = connected(version)
    actions = session.handle_packet(Publish("a", b"x", 1, packet_id=9), 1.0)
    assert route_of(actions).token == 9 and not packets(actions)
    actions = session.handle_routed(9, routed, 2.0)
    assert packets(actions) == [Puback(9, wire)]
    check_encodable(session, actions)


@pytest.mark.parametrize("version", VERSIONS)
def test_qos2_exactly_once(version: int) -> None:
    session = connected(version)
    assert route_of(session.handle_packet(Publish("a", b"x", 2, packet_id=7), 1.0)).token == 7
    assert packets(session.handle_routed(7, 0, 1.1)) == [Pubrec(7)]  # [MQTT-4.3.3-8]
    # A resend before PUBREL: PUBREC again, not routed again [MQTT-4.3.3-10].
    again = session.handle_packet(Publish("a", b"x", 2, dup=True, packet_id=7), 1.2)
    assert again == [Send(Pubrec(7))]
    assert packets(session.handle_packet(Pubrel(7), 1.3)) == [Pubcomp(7)]  # [MQTT-4.3.3-11]
    # After PUBCOMP the id names a new message [MQTT-4.3.3-12].
    assert of(session.handle_packet(Publish("a", b"y", 2, packet_id=7), 1.4), Route)


def test_qos2_resend_while_routing_is_ignored() -> None:
    session = connected(5)
    session.handle_packet(Publish("a", b"x", 2, packet_id=7), 1.0)
    assert session.handle_packet(Publish("a", b"x", 2, dup=True, packet_id=7), 1.1) == []
    assert packets(session.handle_routed(7, 0, 1.2)) == [Pubrec(7)]


def test_qos2_refused_pubrec_frees_the_id() -> None:
    """[MQTT-4.3.3-9]: after a PUBREC >= 0x80 the id names a new message."""
    session = connected(5)
    session.handle_packet(Publish("a", b"x", 2, packet_id=7), 1.0)
    assert packets(session.handle_routed(7, R.QUOTA_EXCEEDED, 1.1)) == [Pubrec(7, 0x97)]
    assert 7 not in session.inbound.awaiting_pubrel
    assert of(session.handle_packet(Publish("a", b"x", 2, packet_id=7), 1.2), Route)


@pytest.mark.parametrize(("version", "code"), [(4, 0), (5, R.PACKET_IDENTIFIER_NOT_FOUND)])
def test_pubrel_for_unknown_id(version: int, code: int) -> None:
    session = connected(version)
    assert packets(session.handle_packet(Pubrel(3), 1.0)) == [Pubcomp(3, code)]


def test_qos1_reusing_an_id_awaiting_pubrel_v5() -> None:
    """[MQTT-2.2.1-3] in spirit: the id is in use (0x91), nothing is routed."""
    session = connected(5)
    session.handle_packet(Publish("a", b"x", 2, packet_id=7), 1.0)
    session.handle_routed(7, 0, 1.1)
    actions = session.handle_packet(Publish("a", b"y", 1, packet_id=7), 1.2)
    assert actions == [Send(Puback(7, R.PACKET_IDENTIFIER_IN_USE))]


@pytest.mark.parametrize("persistent", [False, True])
def test_qos2_store_marks_only_for_persistent_sessions(persistent: bool) -> None:
    session = connected(5, persistent=persistent)
    session.handle_packet(Publish("a", b"x", 2, packet_id=4), 1.0)
    rec = session.handle_routed(4, 0, 1.1)
    comp = session.handle_packet(Pubrel(4), 1.2)
    if persistent:
        assert rec == [StoreMark(MARK_INBOUND_QOS2, 4, True), Send(Pubrec(4))]
        assert comp == [StoreMark(MARK_INBOUND_QOS2, 4, False), Send(Pubcomp(4))]
    else:
        assert rec == [Send(Pubrec(4))] and comp == [Send(Pubcomp(4))]


def test_acks_leave_in_arrival_order() -> None:
    """[MQTT-4.6.0-2], [MQTT-4.6.0-3]: whatever order routing completes in."""
    session = connected(5)
    for pid, qos in [(1, 1), (2, 2), (3, 1)]:
        session.handle_packet(Publish("a", b"x", qos, packet_id=pid), 1.0)
    assert session.handle_routed(3, 0, 1.1) == []
    assert session.handle_routed(2, 0, 1.2) == []
    assert packets(session.handle_routed(1, 0, 1.3)) == [Puback(1), Pubrec(2), Puback(3)]


def test_routed_twice_or_unknown_token_is_ignored() -> None:
    session = connected(5)
    session.handle_packet(Publish("a", b"x", 1, packet_id=1), 1.0)
    assert packets(session.handle_routed(1, 0, 1.1)) == [Puback(1)]
    assert session.handle_routed(1, 0, 1.2) == []
    assert session.handle_routed(99, 0, 1.2) == []


@pytest.mark.parametrize("version", V3_V4)
def test_routing_failure_v3_closes_instead_of_acknowledging(version: int) -> None:
    """3.1.1 cannot refuse a PUBLISH [MQTT-3.3.5-2]; a false PUBACK would break I1."""
    session = connected(version)
    session.handle_packet(Publish("a", b"x", 1, packet_id=1), 1.0)
    actions = session.handle_routed(1, R.UNSPECIFIED_ERROR, 1.1)
    assert not packets(actions)
    assert of(actions, Close)
    assert of(actions, Ended)


# -- protocol limits ---------------------------------------------------------------------


def disconnected_with(version: int, code: int, actions: list[Any]) -> None:
    if version == 5:
        assert packets(actions) == [Disconnect(code)]
    else:
        assert packets(actions) == []
    assert of(actions, Close)[0].reason_code == code
    assert len(of(actions, Ended)) == 1


@pytest.mark.parametrize(
    ("limits", "publish", "code"),
    [
        # [MQTT-3.2.2-11]: above the announced Maximum QoS -> 0x9B.
        (SessionLimits(max_qos=1), Publish("a", b"x", 2, packet_id=1), R.QOS_NOT_SUPPORTED),
        (SessionLimits(max_qos=0), Publish("a", b"x", 1, packet_id=1), R.QOS_NOT_SUPPORTED),
        (SessionLimits(retain_available=False), Publish("a", b"x", 0, True), 0x9A),
        (SessionLimits(max_message_size=4), Publish("a", b"12345", 0), R.PACKET_TOO_LARGE),
        (SessionLimits(), Publish("a/#", b"x", 0), R.TOPIC_NAME_INVALID),  # [MQTT-3.3.2-2]
    ],
)
@pytest.mark.parametrize("version", VERSIONS)
def test_publish_beyond_limits_disconnects(
    version: int, limits: SessionLimits, publish: Publish, code: int
) -> None:
    session = connected(version, limits)
    actions = session.handle_packet(publish, 1.0)
    assert not of(actions, Route)
    disconnected_with(version, code, actions)


def test_payload_at_max_message_size_is_accepted() -> None:
    session = connected(5, SessionLimits(max_message_size=4))
    assert of(session.handle_packet(Publish("a", b"1234", 0), 1.0), Route)


def test_subscription_identifier_from_client_is_protocol_error() -> None:
    """[MQTT-3.3.4-6]."""
    session = connected(5)
    props = Properties(subscription_identifiers=(3,))
    disconnected_with(
        5, R.PROTOCOL_ERROR, session.handle_packet(Publish("a", b"", 0, properties=props), 1.0)
    )


def test_response_topic_with_wildcard_is_protocol_error() -> None:
    """[MQTT-3.3.2-14]."""
    session = connected(5)
    props = Properties(response_topic="r/#")
    actions = session.handle_packet(Publish("a", b"", 0, properties=props), 1.0)
    disconnected_with(5, R.PROTOCOL_ERROR, actions)


def test_receive_maximum_exceeded() -> None:
    """The client may have Receive Maximum unacknowledged QoS 1/2 PUBLISH [MQTT-3.3.4-7]."""
    session = connected(5, SessionLimits(receive_max_broker=2))
    session.handle_packet(Publish("a", b"x", 1, packet_id=1), 1.0)
    session.handle_packet(Publish("a", b"x", 2, packet_id=2), 1.0)
    session.handle_routed(2, 0, 1.0)  # PUBREC is not the end: still counted until PUBCOMP
    assert session.handle_packet(Publish("a", b"x", 0), 1.0)  # QoS 0 is not counted
    actions = session.handle_packet(Publish("a", b"x", 1, packet_id=3), 1.0)
    disconnected_with(5, R.RECEIVE_MAXIMUM_EXCEEDED, actions)


def test_receive_maximum_frees_on_acknowledgement() -> None:
    session = connected(5, SessionLimits(receive_max_broker=1))
    for pid in range(1, 5):
        session.handle_packet(Publish("a", b"x", 1, packet_id=pid), 1.0)
        assert packets(session.handle_routed(pid, 0, 1.0)) == [Puback(pid)]


def test_restored_qos2_ids_do_not_use_this_connections_quota() -> None:
    """The quota is per connection [MQTT-4.9.0-1]: ids accepted before a reconnect
    do not count, until released."""
    session = connected(5, SessionLimits(receive_max_broker=1), persistent=True)
    session.resume([], [10, 11], [], 1.0)
    assert of(session.handle_packet(Publish("a", b"x", 1, packet_id=1), 1.1), Route)
    session.handle_packet(Pubrel(10), 1.2)
    assert session.inbound.unacknowledged() == 1
    disconnected_with(5, 0x93, session.handle_packet(Publish("a", b"x", 1, packet_id=2), 1.3))


def test_v4_has_no_receive_maximum() -> None:
    session = connected(4, SessionLimits(receive_max_broker=1))
    for pid in range(1, 5):
        assert of(session.handle_packet(Publish("a", b"x", 1, packet_id=pid), 1.0), Route)


# -- topic aliases -----------------------------------------------------------------------------


def aliased(topic: str, alias: int, qos: int = 0) -> Publish:
    pid = 1 if qos else None
    return Publish(topic, b"x", qos, packet_id=pid, properties=Properties(topic_alias=alias))


def test_topic_alias_binds_and_resolves() -> None:
    """[MQTT-3.3.2-12]: every alias in 1..Topic Alias Maximum is accepted."""
    session = connected(5, SessionLimits(topic_alias_max_client=3))
    assert route_of(session.handle_packet(aliased("a/b", 3), 1.0)).message.topic == "a/b"
    assert route_of(session.handle_packet(aliased("", 3), 1.1)).message.topic == "a/b"
    session.handle_packet(aliased("c", 3), 1.2)  # rebinding
    assert route_of(session.handle_packet(aliased("", 3), 1.3)).message.topic == "c"


@pytest.mark.parametrize(
    ("alias_max", "alias", "topic", "code"),
    [
        (3, 4, "a", R.TOPIC_ALIAS_INVALID),  # above the maximum [MQTT-3.2.2-17]
        (0, 1, "a", R.TOPIC_ALIAS_INVALID),  # none announced [MQTT-3.2.2-18]
        (3, 0, "a", R.TOPIC_ALIAS_INVALID),  # 0 is never valid [MQTT-3.3.2-8]
        (3, 2, "", R.PROTOCOL_ERROR),  # used before being set
    ],
)
def test_topic_alias_errors(alias_max: int, alias: int, topic: str, code: int) -> None:
    session = connected(5, SessionLimits(topic_alias_max_client=alias_max))
    disconnected_with(5, code, session.handle_packet(aliased(topic, alias), 1.0))


def test_aliases_do_not_survive_the_connection() -> None:
    """[MQTT-3.3.2-7]: a new connection starts without aliases."""
    session = connected(5)
    session.handle_packet(aliased("a", 1), 1.0)
    fresh = connected(5)
    disconnected_with(5, R.PROTOCOL_ERROR, fresh.handle_packet(aliased("", 1), 1.0))


# -- authorisation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "qos", "acks"),
    [
        (5, 0, []),
        (5, 1, [Puback(1, R.NOT_AUTHORIZED)]),
        (5, 2, [Pubrec(1, R.NOT_AUTHORIZED)]),
        (4, 0, []),
        (4, 1, [Puback(1)]),  # positive ack, not routed [MQTT-3.3.5-2]
        (3, 2, [Pubrec(1)]),
    ],
)
def test_publish_not_authorized(version: int, qos: int, acks: list[Any]) -> None:
    auth = Recorder(deny_publish=frozenset({"secret"}))
    session = connected(version, auth=auth)
    pid = 1 if qos else None
    actions = session.handle_packet(Publish("secret", b"x", qos, packet_id=pid), 1.0)
    assert not of(actions, Route)
    assert packets(actions) == acks
    (log,) = of(actions, LogEvent)
    fields = dict(log.fields)
    assert log.event == "auth.failed" and unknown_fields(log.event, fields) == []
    assert (fields["action"], fields["topic"]) == ("publish", "secret")
    assert ("publish", "c1", None, "", "secret") in auth.calls
    assert session.state is SessionState.CONNECTED


def test_refused_qos2_v4_completes_its_flow() -> None:
    session = connected(4, auth=Recorder(deny_publish=frozenset({"s"})))
    session.handle_packet(Publish("s", b"x", 2, packet_id=5), 1.0)
    assert packets(session.handle_packet(Pubrel(5), 1.1)) == [Pubcomp(5)]


# -- the routed message ------------------------------------------------------------------------


def test_message_keeps_forwarded_properties_and_absolute_expiry() -> None:
    props = Properties(
        payload_format_indicator=1,
        message_expiry_interval=30,
        content_type="text/plain",
        response_topic="reply/1",
        correlation_data=b"\x01",
        user_properties=(("k", "v"), ("k", "w")),
        topic_alias=1,
    )
    session = connected(5)
    msg = route_of(
        session.handle_packet(Publish("a", b"x", 0, True, properties=props), 100.0)
    ).message
    assert msg.expires_at == 130.0 and msg.retain
    assert msg.properties == Properties(
        payload_format_indicator=1,
        content_type="text/plain",
        response_topic="reply/1",
        correlation_data=b"\x01",
        user_properties=(("k", "v"), ("k", "w")),  # order kept [MQTT-3.3.2-18]
    )


def test_message_without_properties_uses_the_shared_empty_value() -> None:
    session = connected(5)
    props = Properties(topic_alias=1)
    msg = route_of(session.handle_packet(Publish("a", b"x", 0, properties=props), 1.0)).message
    assert msg.properties is NO_PROPERTIES and msg.expires_at is None


def test_mountpoint_is_carried() -> None:
    session = connected(4, SessionLimits(mountpoint="tenant1/"))
    msg = route_of(session.handle_packet(Publish("a", b"x", 0), 1.0)).message
    assert msg.mountpoint == "tenant1/"
