"""PINGREQ, DISCONNECT, keepalive, takeover, lost connections, shutdown, wills, errors."""

from __future__ import annotations

from typing import Any

import pytest
from test_session_support import (
    V3_V4,
    VERSIONS,
    connect_packet,
    connected,
    new_session,
    of,
    packets,
)

from services.listener.mqtt.errors import MalformedPacket, MQTTError
from services.listener.mqtt.types import (
    Auth,
    Connack,
    Disconnect,
    Pingreq,
    Pingresp,
    Properties,
    Publish,
    Suback,
    Will,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import Close, Ended, LogEvent, PublishWill, SetTimer
from services.listener.session.core import SessionState
from services.listener.session.limits import SessionLimits

WILL = Will("status/c1", b"offline", qos=1)


def delayed_will(delay: int) -> Will:
    return Will("status/c1", b"offline", 1, False, Properties(will_delay_interval=delay))


def expiry(seconds: int) -> Properties:
    return Properties(session_expiry_interval=seconds)


@pytest.mark.parametrize("version", VERSIONS)
def test_pingreq(version: int) -> None:
    """[MQTT-3.12.4-1]."""
    session = connected(version)
    assert packets(session.handle_packet(Pingreq(), 1.0)) == [Pingresp()]


# -- DISCONNECT -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_normal_disconnect_discards_the_will(version: int) -> None:
    """[MQTT-3.1.2-10] (3.1.1), [MQTT-3.14.4-3] (5.0)."""
    session = connected(version, will=WILL)
    actions = session.handle_packet(Disconnect(), 1.0)
    assert actions == [Close("disconnect", 0), Ended("disconnect", 0)]
    assert session.state is SessionState.CLOSED and session.will is None


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (R.DISCONNECT_WITH_WILL_MESSAGE, "disconnect_with_will"),
        (R.UNSPECIFIED_ERROR, "client_error"),
    ],
)
def test_v5_disconnect_that_publishes_the_will(code: int, reason: str) -> None:
    session = connected(5, will=WILL)
    actions = session.handle_packet(Disconnect(code), 1.0)
    assert actions == [Close(reason, code), PublishWill(WILL, 0), Ended(reason, 0)]


def test_v5_disconnect_updates_session_expiry() -> None:
    session = connected(5, properties=expiry(100), clean=False)
    (_, ended) = session.handle_packet(Disconnect(0, expiry(50)), 1.0)
    assert ended == Ended("disconnect", 50)


def test_v5_disconnect_expiry_is_capped() -> None:
    limits = SessionLimits(max_session_expiry_interval=60)
    session = connected(5, limits, properties=expiry(10), clean=False)
    (_, ended) = session.handle_packet(Disconnect(0, expiry(1000)), 1.0)
    assert ended == Ended("disconnect", 60)


def test_v5_disconnect_cannot_set_expiry_after_zero() -> None:
    """3.14.2.2.2: non-zero Session Expiry in DISCONNECT after 0 in CONNECT -> 0x82."""
    session = connected(5, will=WILL)
    actions = session.handle_packet(Disconnect(0, expiry(30)), 1.0)
    assert packets(actions) == [Disconnect(R.PROTOCOL_ERROR)]
    assert of(actions, PublishWill) and of(actions, Ended) == [Ended("protocol_error", 0)]


# -- keepalive --------------------------------------------------------------------------------


def test_keepalive_timer_follows_activity() -> None:
    session = connected(5, keepalive=10, now=0.0)
    session.handle_packet(Pingreq(), 12.0)
    assert session.handle_timeout("keepalive", 15.0) == [SetTimer("keepalive", 27.0)]


@pytest.mark.parametrize("version", VERSIONS)
def test_keepalive_expiry(version: int) -> None:
    """[MQTT-3.1.2-24] (3.1.1) / [MQTT-3.1.2-22] (5.0): 1.5 x keepalive of silence."""
    session = connected(version, keepalive=10, will=WILL, now=0.0)
    actions = session.handle_timeout("keepalive", 15.0)
    expected = [Disconnect(R.KEEP_ALIVE_TIMEOUT)] if version == 5 else []
    assert packets(actions) == expected
    assert of(actions, PublishWill) == [PublishWill(WILL, 0)]
    assert of(actions, Ended) == [Ended("keepalive_timeout", 0)]


def test_keepalive_factor_is_configurable() -> None:
    session = connected(4, SessionLimits(keepalive_factor=2.0), keepalive=10, now=0.0)
    assert session.handle_timeout("keepalive", 15.0) == [SetTimer("keepalive", 20.0)]


def test_keepalive_zero_never_expires() -> None:
    session = connected(4, keepalive=0)
    assert session.handle_timeout("keepalive", 1e9) == []


# -- takeover, lost connection, shutdown ----------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_takeover(version: int) -> None:
    """[MQTT-3.1.4-2] (3.1.1) / [MQTT-3.1.4-3] (5.0): DISCONNECT 0x8E, close, will."""
    session = connected(version, will=WILL)
    actions = session.handle_takeover(1.0)
    expected: list[Any] = [Disconnect(R.SESSION_TAKEN_OVER)] if version == 5 else []
    assert packets(actions) == expected
    assert actions[len(expected) :] == [
        Close("taken_over", R.SESSION_TAKEN_OVER),
        PublishWill(WILL, 0),
        Ended("taken_over", 0, taken_over=True),
    ]


def test_takeover_while_registering() -> None:
    session = new_session()
    session.handle_packet(connect_packet(5, will=WILL), 0.0)
    actions = session.handle_takeover(1.0)
    assert not packets(actions) and not of(actions, PublishWill)  # never accepted
    assert of(actions, Ended) == [Ended("taken_over", 0, taken_over=True)]


@pytest.mark.parametrize("version", VERSIONS)
def test_connection_lost_publishes_the_will(version: int) -> None:
    """[MQTT-3.1.2-8]: closed without DISCONNECT."""
    session = connected(version, will=WILL)
    assert session.handle_connection_lost(1.0) == [
        PublishWill(WILL, 0),
        Ended("connection_lost", 0),
    ]


def test_connection_lost_before_connect() -> None:
    session = new_session()
    assert session.handle_connection_lost(1.0) == []
    assert session.state is SessionState.CLOSED


@pytest.mark.parametrize("version", VERSIONS)
def test_shutdown(version: int) -> None:
    session = connected(version, will=WILL)
    actions = session.handle_shutdown(1.0)
    expected = [Disconnect(R.SERVER_SHUTTING_DOWN)] if version == 5 else []
    assert packets(actions) == expected
    assert of(actions, Close) == [Close("shutdown", R.SERVER_SHUTTING_DOWN)]
    assert of(actions, PublishWill) and of(actions, Ended) == [Ended("shutdown", 0)]


# -- will delay ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("will_delay", "session_expiry", "delay"),
    [(30, 100, 30), (30, 10, 10), (30, 0, 0), (0, 100, 0)],
)
def test_will_delay_is_cut_by_session_end(will_delay: int, session_expiry: int, delay: int) -> None:
    """The will waits for its delay or the session's end, whichever first (3.1.3.2.2)."""
    session = connected(5, will=delayed_will(will_delay), properties=expiry(session_expiry))
    (will,) = of(session.handle_connection_lost(1.0), PublishWill)
    assert will.delay == delay


def test_v4_will_has_no_delay() -> None:
    session = connected(4, will=WILL, clean=False)
    (will,) = of(session.handle_connection_lost(1.0), PublishWill)
    assert will.delay == 0


# -- protocol errors after CONNACK ---------------------------------------------------------------


@pytest.mark.parametrize("pkt", [Connack(False, 0), Suback(1, (0,)), Pingresp(), Auth()])
@pytest.mark.parametrize("version", VERSIONS)
def test_server_side_packets_from_client_are_protocol_errors(version: int, pkt: Any) -> None:
    """AUTH without an Authentication Method [MQTT-4.12.0-7]; the others are server-only."""
    session = connected(version, will=WILL)
    actions = session.handle_packet(pkt, 1.0)
    expected = [Disconnect(R.PROTOCOL_ERROR)] if version == 5 else []
    assert packets(actions) == expected
    assert of(actions, PublishWill) and len(of(actions, Ended)) == 1


@pytest.mark.parametrize(
    ("err", "code"),
    [
        (MalformedPacket("bad"), R.MALFORMED_PACKET),
        (MQTTError("rate", reason_code=R.MESSAGE_RATE_TOO_HIGH), R.MESSAGE_RATE_TOO_HIGH),
        # Not a DISCONNECT code [MQTT-3.14.2-1]: sent as 0x80.
        (MQTTError("id", reason_code=R.CLIENT_IDENTIFIER_NOT_VALID), R.UNSPECIFIED_ERROR),
    ],
)
def test_decoder_error_when_connected_v5(err: MQTTError, code: int) -> None:
    session = connected(5)
    actions = session.handle_protocol_error(err, 1.0)
    assert packets(actions) == [Disconnect(code)]


@pytest.mark.parametrize("version", V3_V4)
def test_decoder_error_when_connected_v3_just_closes(version: int) -> None:
    session = connected(version, will=WILL)
    actions = session.handle_protocol_error(MalformedPacket("bad"), 1.0)
    assert [type(a) for a in actions] == [LogEvent, Close, PublishWill, Ended]
    log = actions[0]
    assert isinstance(log, LogEvent) and log.event == "protocol.error"
    assert dict(log.fields)["reason_code"] == 0x81


def test_closed_session_absorbs_everything() -> None:
    session = connected(5)
    session.handle_packet(Disconnect(), 1.0)
    assert session.handle_packet(Publish("a", b"", 0), 2.0) == []
    assert session.handle_protocol_error(MalformedPacket("x"), 2.0) == []
    assert session.handle_takeover(2.0) == []
    assert session.handle_connection_lost(2.0) == []
    assert session.handle_shutdown(2.0) == []
    assert session.handle_timeout("keepalive", 2.0) == []
    assert session.handle_timeout("retry", 2.0) == []
    assert session.handle_routed(1, 0, 2.0) == []
    assert session.set_congested(False, 2.0) == []


def test_unknown_timer_is_a_host_bug() -> None:
    with pytest.raises(ValueError, match="unknown session timer"):
        connected(5).handle_timeout("nap", 1.0)
