"""CONNECT handling, the registry round trip and the CONNACK (handle_connect)."""

from __future__ import annotations

from typing import Any

import pytest
from test_session_support import (
    PEER,
    VERSIONS,
    Recorder,
    check_encodable,
    connect_packet,
    connected,
    id_source,
    new_session,
    of,
    packets,
)

from services.common.events import unknown_fields
from services.listener.mqtt.errors import (
    ClientIdRejected,
    MalformedPacket,
    UnsupportedProtocolVersion,
)
from services.listener.mqtt.types import (
    Connack,
    Disconnect,
    Pingreq,
    Properties,
    Publish,
    Subscribe,
    Subscription,
    Will,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import (
    CancelTimer,
    Close,
    Ended,
    LogEvent,
    Register,
    Route,
    Send,
    SetTimer,
    SubscribeRequest,
)
from services.listener.session.codes import NEVER_EXPIRES
from services.listener.session.core import EARLY_PACKET_LIMIT, Session, SessionState
from services.listener.session.limits import SessionLimits


def refused(version: int, code: int, **kw: Any) -> None:
    """CONNECT is answered with a CONNACK refusal ``code`` and a close, nothing else."""
    limits = kw.pop("limits", None)
    auth = kw.pop("auth", None)
    session = new_session(limits, auth)
    actions = session.handle_packet(connect_packet(version, **kw), 1.0)
    check_encodable(session, actions)
    assert packets(actions) == [Connack(False, code)]
    assert len(of(actions, Close)) == 1
    assert not of(actions, Register)
    assert session.state is SessionState.CLOSED


# -- protocol version --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "allowed", "code"),
    [
        (3, {4, 5}, 1),  # [MQTT-3.1.2-2] (3.1.1): return code 1
        (4, {3, 5}, 1),
        (5, {3, 4}, R.UNSUPPORTED_PROTOCOL_VERSION),  # [MQTT-3.1.2-2] (5.0): 0x84
    ],
)
def test_version_not_allowed_on_listener(version: int, allowed: set[int], code: int) -> None:
    refused(version, code, limits=SessionLimits(allowed_versions=frozenset(allowed)))


@pytest.mark.parametrize("version", VERSIONS)
def test_allowed_version_registers(version: int) -> None:
    session = new_session()
    actions = session.handle_packet(connect_packet(version, client_id="dev-1"), 1.0)
    assert actions == [Register(connect_packet(version, client_id="dev-1"), "dev-1", "", True, 0)]
    assert session.state is SessionState.REGISTERING
    assert session.protocol_version == version


def test_start_arms_connect_timer() -> None:
    session = new_session()
    assert session.start(5.0) == [SetTimer("connect", 15.0)]


@pytest.mark.parametrize("first", [Pingreq(), Publish("a", b"", 0), Disconnect()])
def test_first_packet_must_be_connect(first: Any) -> None:
    """[MQTT-3.1.0-1]: no CONNACK, the connection is just closed."""
    session = new_session()
    actions = session.handle_packet(first, 1.0)
    assert not packets(actions)
    assert of(actions, Close) and session.state is SessionState.CLOSED


def test_second_connect_while_registering_closes_without_packets() -> None:
    """[MQTT-3.1.0-2]; no DISCONNECT may precede the CONNACK [MQTT-3.14.0-1]."""
    session = new_session()
    session.handle_packet(connect_packet(5), 1.0)
    actions = session.handle_packet(connect_packet(5), 1.0)
    assert not packets(actions)
    assert [type(a) for a in actions] == [LogEvent, Close, Ended]
    assert actions[0].event == "protocol.error"  # type: ignore[union-attr]


@pytest.mark.parametrize("version", VERSIONS)
def test_second_connect_when_connected_is_protocol_error(version: int) -> None:
    session = connected(version)
    actions = session.handle_packet(connect_packet(version), 2.0)
    expected = [Disconnect(R.PROTOCOL_ERROR)] if version == 5 else []
    assert packets(actions) == expected
    assert of(actions, Ended)[0].reason == "protocol_error"


# -- client identifier -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "clean", "allow", "code"),
    [
        (3, True, True, 2),  # 3.1 needs 1-23 characters
        (4, False, True, 2),  # [MQTT-3.1.3-8] (3.1.1)
        (4, True, False, 2),  # [MQTT-3.1.3-9]
        (5, True, False, R.CLIENT_IDENTIFIER_NOT_VALID),  # [MQTT-3.1.3-8] (5.0)
    ],
)
def test_empty_client_id_refused(version: int, clean: bool, allow: bool, code: int) -> None:
    limits = SessionLimits(allow_empty_client_id=allow)
    refused(version, code, limits=limits, client_id="", clean=clean)


@pytest.mark.parametrize(("version", "clean"), [(4, True), (5, True), (5, False)])
def test_empty_client_id_is_assigned(version: int, clean: bool) -> None:
    """[MQTT-3.1.3-6]: a unique id is assigned; v5 returns it [MQTT-3.1.3-7]."""
    session = new_session()
    register = session.handle_packet(connect_packet(version, client_id="", clean=clean), 1.0)[0]
    assert isinstance(register, Register)
    assert register.client_id == "ternmq-m1" == session.client_id
    connack = packets(session.handle_registered(True, 1, False, False, 0, 1.0))[0]
    assert isinstance(connack, Connack)
    expected = "ternmq-m1" if version == 5 else None
    assert connack.properties.assigned_client_identifier == expected


def test_assigned_ids_are_unique() -> None:
    """Sessions share the server's id source, so assigned ids never collide."""
    ids = id_source("n1-")
    seen = set()
    for _ in range(3):
        session = Session(SessionLimits(), Recorder(), PEER, ids, 0.0)
        register = session.handle_packet(connect_packet(5, client_id=""), 1.0)[0]
        assert isinstance(register, Register)
        seen.add(register.client_id)
    assert len(seen) == 3


@pytest.mark.parametrize(("version", "code"), [(4, 2), (5, R.CLIENT_IDENTIFIER_NOT_VALID)])
def test_client_id_too_long(version: int, code: int) -> None:
    limits = SessionLimits(max_client_id_size=4)
    refused(version, code, limits=limits, client_id="é" * 3)  # 6 bytes
    session = new_session(limits)
    assert of(session.handle_packet(connect_packet(version, client_id="abcd"), 1.0), Register)


# -- authentication ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("auth_code", "v4_code"),
    [
        (R.BAD_USER_NAME_OR_PASSWORD, 4),
        (R.NOT_AUTHORIZED, 5),
        (R.BANNED, 5),
        (R.SERVER_UNAVAILABLE, 3),
    ],
)
@pytest.mark.parametrize("version", VERSIONS)
def test_authentication_refused(version: int, auth_code: int, v4_code: int) -> None:
    auth = Recorder(connect_code=auth_code)
    code = auth_code if version == 5 else v4_code
    refused(version, code, auth=auth, username="u", password=b"p")
    assert auth.calls == [("authenticate", "c1", "u", b"p", PEER)]


def test_authentication_failure_is_logged_with_catalogue_fields() -> None:
    session = new_session(auth=Recorder(connect_code=R.BAD_USER_NAME_OR_PASSWORD))
    actions = session.handle_packet(connect_packet(5, username="bob"), 1.0)
    logs = {a.event: a for a in of(actions, LogEvent)}
    assert set(logs) == {"auth.failed", "client.rejected"}
    log = logs["auth.failed"]
    fields = dict(log.fields)
    assert unknown_fields(log.event, fields) == []
    assert fields["username"] == "bob" and fields["action"] == "connect"
    assert fields["peer"] == PEER


def test_enhanced_authentication_is_refused() -> None:
    """[MQTT-4.12.0-1]: an unsupported Authentication Method -> 0x8C and close."""
    props = Properties(authentication_method="SCRAM-SHA-1")
    refused(5, R.BAD_AUTHENTICATION_METHOD, properties=props)


@pytest.mark.parametrize(
    "props", [Properties(receive_maximum=0), Properties(maximum_packet_size=0)]
)
def test_zero_receive_maximum_or_packet_size_is_protocol_error(props: Properties) -> None:
    refused(5, R.PROTOCOL_ERROR, properties=props)


# -- will ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "will", "code"),
    [
        (SessionLimits(), Will("a/+", b"x"), R.TOPIC_NAME_INVALID),
        (SessionLimits(max_qos=1), Will("a", b"x", qos=2), R.QOS_NOT_SUPPORTED),
        # [MQTT-3.2.2-13]: a retained will without retain support is refused.
        (SessionLimits(retain_available=False), Will("a", b"x", retain=True), 0x9A),
        (SessionLimits(max_message_size=3), Will("a", b"four"), R.PACKET_TOO_LARGE),
    ],
)
def test_will_refused_v5(limits: SessionLimits, will: Will, code: int) -> None:
    refused(5, code, limits=limits, will=will)


@pytest.mark.parametrize(
    ("limits", "will"),
    [
        (SessionLimits(), Will("a/+", b"x")),
        (SessionLimits(max_message_size=3), Will("a", b"four")),
    ],
)
def test_will_invalid_v4_closes_without_connack(limits: SessionLimits, will: Will) -> None:
    """3.1.1 has no return code for these: close without CONNACK [MQTT-3.2.2-6]."""
    session = new_session(limits)
    actions = session.handle_packet(connect_packet(4, will=will), 1.0)
    assert not packets(actions) and of(actions, Close)


def test_will_downgraded_for_v4() -> None:
    limits = SessionLimits(max_qos=1, retain_available=False)
    session = new_session(limits)
    session.handle_packet(connect_packet(4, will=Will("a", b"x", qos=2, retain=True)), 1.0)
    assert session.will == Will("a", b"x", qos=1, retain=False)


@pytest.mark.parametrize(("version", "code"), [(4, 5), (5, R.NOT_AUTHORIZED)])
def test_will_topic_not_authorized(version: int, code: int) -> None:
    auth = Recorder(deny_publish=frozenset({"lwt"}))
    refused(version, code, auth=auth, will=Will("lwt", b"bye"))
    session = new_session(auth=auth)
    actions = session.handle_packet(connect_packet(version, will=Will("lwt", b"bye")), 1.0)
    assert dict(of(actions, LogEvent)[0].fields)["topic"] == "lwt"


# -- keepalive and session expiry --------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "keepalive", "cap", "effective", "told"),
    [
        (5, 600, 300, 300, 300),  # capped: Server Keep Alive [MQTT-3.2.2-21]
        (5, 0, 300, 300, 300),  # no keepalive asked, the server wants one
        (5, 60, 300, 60, None),  # within the cap: the client's [MQTT-3.2.2-22]
        (5, 600, 65535, 600, None),  # default: no cap
        (4, 600, 300, 600, None),  # 3.1.1 cannot be told: the client's value
        (5, 600, 0, 600, None),  # 0: no cap
    ],
)
def test_keepalive(
    version: int, keepalive: int, cap: int, effective: int, told: int | None
) -> None:
    session = connected(version, SessionLimits(max_keepalive=cap), keepalive=keepalive)
    assert session.keepalive == effective
    session2 = new_session(SessionLimits(max_keepalive=cap))
    session2.handle_packet(connect_packet(version, keepalive=keepalive), 0.0)
    actions = session2.handle_registered(True, 1, False, False, 0, 10.0)
    (connack,) = of(actions, Send)
    assert isinstance(connack.packet, Connack)
    assert connack.packet.properties.server_keep_alive == told
    assert SetTimer("keepalive", 10.0 + effective * 1.5) in actions


def test_keepalive_zero_sets_no_timer() -> None:
    session = new_session()
    session.handle_packet(connect_packet(4, keepalive=0), 0.0)
    actions = session.handle_registered(True, 1, False, False, 0, 1.0)
    assert not [a for a in actions if isinstance(a, SetTimer) and a.name == "keepalive"]


@pytest.mark.parametrize(
    ("version", "clean", "requested", "cap", "registered", "told"),
    [
        (4, True, None, -1, 0, None),
        (4, False, None, -1, NEVER_EXPIRES, None),
        (5, True, None, -1, 0, None),
        (5, False, 100, -1, 100, None),
        (5, False, 100, 50, 50, 50),
        (5, False, NEVER_EXPIRES, 86400, 86400, 86400),
    ],
)
def test_session_expiry(
    version: int, clean: bool, requested: int | None, cap: int, registered: int, told: int | None
) -> None:
    session = new_session(SessionLimits(max_session_expiry_interval=cap))
    props = Properties(session_expiry_interval=requested)
    (register,) = session.handle_packet(connect_packet(version, clean=clean, properties=props), 0.0)
    assert isinstance(register, Register)
    assert register.session_expiry == registered and register.clean_start == clean
    connack = packets(session.handle_registered(True, 1, False, True, 0, 1.0))[0]
    assert isinstance(connack, Connack)
    assert connack.properties.session_expiry_interval == told


# -- CONNACK ------------------------------------------------------------------------------------


def test_connack_announces_limits() -> None:
    limits = SessionLimits(
        receive_max_broker=7,
        topic_alias_max_client=5,
        max_qos=1,
        retain_available=False,
        max_packet_size=4096,
        wildcard_subscription_available=False,
        shared_subscription_available=False,
    )
    session = new_session(limits)
    session.handle_packet(connect_packet(5), 0.0)
    actions = session.handle_registered(True, 3, False, False, 0, 1.0)
    check_encodable(session, actions)
    assert actions[0] == CancelTimer("connect")
    (connack,) = packets(actions)
    assert connack == Connack(
        False,
        0,
        Properties(
            receive_maximum=7,
            topic_alias_maximum=5,
            maximum_qos=1,  # sent because < 2 [MQTT-3.2.2-9]
            retain_available=0,
            maximum_packet_size=4096,
            wildcard_subscription_available=0,
            subscription_identifier_available=1,
            shared_subscription_available=0,
        ),
    )
    assert session.epoch == 3


def test_connack_v4_has_no_properties() -> None:
    session = new_session()
    session.handle_packet(connect_packet(4), 0.0)
    (connack,) = packets(session.handle_registered(True, 1, False, False, 0, 1.0))
    assert connack == Connack(False, 0)


@pytest.mark.parametrize(("clean", "present"), [(True, False), (False, True)])
def test_session_present(clean: bool, present: bool) -> None:
    """Clean start never reports a session [MQTT-3.2.2-1] (3.1.1) / [MQTT-3.2.2-2] (5.0)."""
    session = new_session()
    session.handle_packet(connect_packet(5, clean=clean), 0.0)
    (connack,) = packets(session.handle_registered(True, 1, True, True, 0, 1.0))
    assert isinstance(connack, Connack) and connack.session_present is present
    assert session.persistent


@pytest.mark.parametrize(("version", "code"), [(4, 3), (5, R.SERVER_UNAVAILABLE)])
def test_registration_refused(version: int, code: int) -> None:
    """I3: the minority side refuses CONNECT with 3 / 0x88; no session to end."""
    session = new_session()
    session.handle_packet(connect_packet(version), 0.0)
    actions = session.handle_registered(False, 0, False, False, R.SERVER_UNAVAILABLE, 1.0)
    assert packets(actions) == [Connack(False, code)]
    assert of(actions, Close) and not of(actions, Ended)
    assert session.state is SessionState.CLOSED
    assert session.handle_registered(True, 1, False, False, 0, 2.0) == []


# -- timers and pipelined packets --------------------------------------------------------------


def test_connect_timeout_before_connect() -> None:
    session = new_session()
    assert session.handle_timeout("connect", 10.0) == [Close("connect_timeout")]
    assert session.state is SessionState.CLOSED


@pytest.mark.parametrize(("version", "code"), [(4, 3), (5, R.SERVER_UNAVAILABLE)])
def test_connect_timeout_while_registering_undoes_registration(version: int, code: int) -> None:
    session = new_session()
    session.handle_packet(connect_packet(version), 0.0)
    actions = session.handle_timeout("connect", 10.0)
    assert packets(actions) == [Connack(False, code)]
    assert len(of(actions, Ended)) == 1
    assert session.handle_timeout("connect", 11.0) == []


def test_connect_timer_ignored_once_connected() -> None:
    session = connected(5)
    assert session.handle_timeout("connect", 10.0) == []


def test_pipelined_packets_run_after_connack() -> None:
    """Clients need not wait for CONNACK; nothing is processed before it is sent."""
    session = new_session()
    session.handle_packet(connect_packet(5), 0.0)
    assert session.handle_packet(Publish("a", b"1", 1, packet_id=1), 0.1) == []
    assert session.handle_packet(Subscribe(2, (Subscription("b", 1),)), 0.2) == []
    actions = session.handle_registered(True, 1, False, False, 0, 1.0)
    kinds = [type(a) for a in actions if not isinstance(a, SetTimer | CancelTimer)]
    assert kinds == [Send, Route, SubscribeRequest]


def test_pipelined_packets_dropped_when_refused() -> None:
    """[MQTT-3.1.4-5] (3.1.1): nothing after a refused CONNECT is processed."""
    session = new_session()
    session.handle_packet(connect_packet(4), 0.0)
    session.handle_packet(Publish("a", b"1", 1, packet_id=1), 0.1)
    actions = session.handle_registered(False, 0, False, False, R.NOT_AUTHORIZED, 1.0)
    assert not of(actions, Route)


def test_too_many_pipelined_packets_close() -> None:
    session = new_session()
    session.handle_packet(connect_packet(5), 0.0)
    for i in range(EARLY_PACKET_LIMIT):
        assert session.handle_packet(Pingreq(), float(i)) == []
    actions = session.handle_packet(Pingreq(), 999.0)
    assert not packets(actions)
    assert of(actions, Close)
    assert of(actions, Ended)


# -- decoder errors during the handshake ------------------------------------------------------


def decoder_error(err: Any, version: int | None) -> Any:
    err.protocol_version = version
    return err


@pytest.mark.parametrize(
    ("err", "expected", "encoded_as"),
    [
        # Unknown protocol level: answer in 3.1.1 with return code 1 [MQTT-3.1.2-2].
        (decoder_error(UnsupportedProtocolVersion("level 9"), None), [Connack(False, 1)], 4),
        (decoder_error(UnsupportedProtocolVersion("x"), 5), [Connack(False, 0x84)], 5),
        (decoder_error(ClientIdRejected("empty"), 4), [Connack(False, 2)], 4),
        (decoder_error(MalformedPacket("bad flags"), 5), [Connack(False, 0x81)], 5),
        # 3.1.1 has no return code for a malformed CONNECT: close [MQTT-3.1.4-1].
        (decoder_error(MalformedPacket("bad flags"), 4), [], 4),
        (decoder_error(MalformedPacket("garbage"), None), [], 4),
    ],
)
def test_decoder_error_while_connecting(err: Any, expected: list[Any], encoded_as: Any) -> None:
    session = new_session()
    actions = session.handle_protocol_error(err, 1.0)
    assert packets(actions) == expected
    assert session.protocol_version == encoded_as
    assert of(actions, Close)[0].reason_code == err.reason_code
    check_encodable(session, actions)


def test_decoder_error_handles_preceding_packets_first() -> None:
    session = connected(5)
    err = MalformedPacket("junk")
    err.preceding = (Publish("a", b"1", 0),)
    actions = session.handle_protocol_error(err, 1.0)
    assert isinstance(actions[0], Route)
    assert packets(actions) == [Disconnect(R.MALFORMED_PACKET)]


def test_decoder_error_while_registering_sends_nothing() -> None:
    session = new_session()
    session.handle_packet(connect_packet(5), 0.0)
    actions = session.handle_protocol_error(MalformedPacket("junk"), 1.0)
    assert not packets(actions)
    assert [type(a) for a in actions] == [LogEvent, Close, Ended]
    assert actions[0].event == "protocol.error"  # type: ignore[union-attr]
