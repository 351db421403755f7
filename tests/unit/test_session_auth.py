"""MQTT 5 enhanced authentication in the session core (handle_auth): the AUTH exchange
before CONNACK, re-authentication after it, and the protocol rules around both."""

from __future__ import annotations

import pytest
from test_session_support import (
    PEER,
    Recorder,
    check_encodable,
    connect_packet,
    id_source,
    of,
    packets,
)

from services.common.events import unknown_fields
from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.encoder import encode
from services.listener.mqtt.errors import MQTTError
from services.listener.mqtt.types import (
    Auth,
    Connack,
    Disconnect,
    Pingreq,
    Pingresp,
    Properties,
    Publish,
    Will,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import (
    Action,
    CancelTimer,
    Close,
    Ended,
    LogEvent,
    PublishWill,
    Register,
    SetTimer,
)
from services.listener.session.core import Session, SessionState
from services.listener.session.handle_auth import MAX_ROUNDS, AuthAnswer
from services.listener.session.limits import SessionLimits

CONTINUE = R.CONTINUE_AUTHENTICATION


class Script:
    """The host's verdicts, in order (None once they run out: nobody answers)."""

    def __init__(self, *answers: AuthAnswer | None) -> None:
        self.answers = list(answers)
        self.taken = 0

    def auth_answer(self) -> AuthAnswer | None:
        self.taken += 1
        return self.answers.pop(0) if self.answers else None


def props(method: str = "M", data: bytes | None = None) -> Properties:
    return Properties(authentication_method=method, authentication_data=data)


def session(*answers: AuthAnswer | None, auth: Recorder | None = None) -> tuple[Session, Script]:
    script = Script(*answers)
    s = Session(SessionLimits(), auth or Recorder(), PEER, id_source(), 0.0, answers=script)
    s.start(0.0)
    return s, script


def connect(s: Session, data: bytes | None = b"c1", **kw: object) -> list[Action]:
    pkt = connect_packet(5, properties=props(data=data), **kw)  # type: ignore[arg-type]
    return s.handle_packet(pkt, 1.0)


def authed(*answers: AuthAnswer | None, will: Will | None = None) -> tuple[Session, Script]:
    """Connected through a one-round exchange, with ``answers`` left for later AUTHs."""
    s, script = session(AuthAnswer(0, b"ok"), *answers)
    out = connect(s, will=will)
    assert of(out, Register)
    s.handle_registered(True, 1, False, False, 0, 1.0)
    assert s.connected
    return s, script


def auth(code: int = CONTINUE, method: str = "M", data: bytes | None = b"x") -> Auth:
    return Auth(code, props(method, data))


def events(actions: list[Action]) -> dict[str, dict[str, object]]:
    return {a.event: dict(a.fields) for a in of(actions, LogEvent)}


# -- the exchange before CONNACK ------------------------------------------------------------


def test_an_accepting_first_answer_registers_and_the_connack_echoes_the_method() -> None:
    s, _ = session(AuthAnswer(0, b"server-final"))
    out = connect(s)
    assert of(out, Register) and packets(out) == []
    out = s.handle_registered(True, 1, False, False, 0, 1.0)
    (connack,) = packets(out)
    assert isinstance(connack, Connack) and connack.reason_code == 0
    assert connack.properties.authentication_method == "M"  # [MQTT-4.12.0-5]
    assert connack.properties.authentication_data == b"server-final"
    check_encodable(s, out)


def test_a_multi_round_exchange_sends_auth_until_the_answer_accepts() -> None:
    s, script = session(AuthAnswer(CONTINUE, b"s1"), AuthAnswer(CONTINUE, b"s2"), AuthAnswer(0))
    out = connect(s)
    assert packets(out) == [Auth(CONTINUE, props("M", b"s1"))]  # [MQTT-4.12.0-2]
    assert s.state is SessionState.CONNECTING and not of(out, Register)
    out = s.handle_packet(auth(data=b"c2"), 2.0)
    assert packets(out) == [Auth(CONTINUE, props("M", b"s2"))]
    check_encodable(s, out)
    out = s.handle_packet(auth(data=b"c3"), 3.0)
    (register,) = of(out, Register)
    assert register.client_id == "c1" and s.state is SessionState.REGISTERING
    assert script.taken == 3
    out = s.handle_registered(True, 1, False, False, 0, 3.0)
    (connack,) = packets(out)
    assert isinstance(connack, Connack) and connack.properties.authentication_method == "M"
    assert connack.properties.authentication_data is None
    assert of(out, CancelTimer) == [CancelTimer("connect")]


def test_the_connect_is_admitted_after_the_exchange_with_what_the_host_rewrote() -> None:
    """auth_on_register's modifiers rewrite the held CONNECT before the last answer."""
    s, _ = session(AuthAnswer(CONTINUE, b"s1"), AuthAnswer(0))
    pkt = connect_packet(5, properties=props(data=b"c1"), username="before")
    s.handle_packet(pkt, 1.0)
    pkt.client_id, pkt.username = "renamed", "after"
    (register,) = of(s.handle_packet(auth(), 2.0), Register)
    assert register.client_id == "renamed" and s.username == "after"


@pytest.mark.parametrize("rounds", [0, 1])
def test_a_refusal_is_a_connack_with_its_code_and_a_logged_event(rounds: int) -> None:
    answers = [AuthAnswer(CONTINUE)] * rounds + [AuthAnswer(R.NOT_AUTHORIZED, reason="bad")]
    s, _ = session(*answers)
    out = connect(s)
    for _ in range(rounds):
        out = s.handle_packet(auth(), 2.0)
    assert packets(out) == [Connack(False, R.NOT_AUTHORIZED)]
    assert of(out, Close) and s.state is SessionState.CLOSED and not of(out, Register)
    logged = events(out)
    assert logged["auth.failed"]["reason"] == "bad"
    assert unknown_fields("auth.failed", logged["auth.failed"]) == []
    assert "client.rejected" in logged


@pytest.mark.parametrize("rounds", [0, 1])
def test_nobody_answering_the_method_is_bad_authentication_method(rounds: int) -> None:
    """[MQTT-4.12.0-1]: 0x8C, as without a host that speaks enhanced authentication."""
    s, _ = session(*[AuthAnswer(CONTINUE)] * rounds)
    out = connect(s)
    for _ in range(rounds):
        out = s.handle_packet(auth(), 2.0)
    assert packets(out) == [Connack(False, R.BAD_AUTHENTICATION_METHOD)]


def test_the_number_of_rounds_is_bounded() -> None:
    s, _ = session(*[AuthAnswer(CONTINUE)] * (MAX_ROUNDS + 1))
    out = connect(s)
    for _ in range(MAX_ROUNDS - 1):
        out = s.handle_packet(auth(), 2.0)
        assert packets(out) == [auth(data=None)]
    out = s.handle_packet(auth(), 2.0)
    assert packets(out) == [Connack(False, R.NOT_AUTHORIZED)]
    assert "auth.failed" in events(out)


def test_the_connect_timeout_bounds_the_whole_exchange() -> None:
    s, _ = session(AuthAnswer(CONTINUE))
    connect(s)
    assert s.handle_timeout("connect", 11.0) == [Close("connect_timeout")]
    assert s.state is SessionState.CLOSED


@pytest.mark.parametrize(
    ("pkt", "code"),
    [
        (Publish("t", b"x", 0), R.PROTOCOL_ERROR),  # [MQTT-3.1.2-30]
        (Pingreq(), R.PROTOCOL_ERROR),
        (connect_packet(5, properties=props()), R.PROTOCOL_ERROR),  # a second CONNECT
        (auth(method="OTHER"), R.BAD_AUTHENTICATION_METHOD),  # [MQTT-4.12.0-5]
        (auth(R.RE_AUTHENTICATE), R.PROTOCOL_ERROR),  # 0x19 is for after CONNACK
        (auth(R.SUCCESS), R.PROTOCOL_ERROR),
        (Auth(CONTINUE), R.PROTOCOL_ERROR),  # no method [MQTT-3.15.2-1]
    ],
)
def test_only_the_expected_auth_may_arrive_during_the_exchange(pkt: object, code: int) -> None:
    s, script = session(AuthAnswer(CONTINUE), AuthAnswer(0))
    connect(s)
    out = s.handle_packet(pkt, 2.0)  # type: ignore[arg-type]
    assert packets(out) == [Connack(False, code)] and of(out, Close)
    assert "client.rejected" in events(out) and script.taken == 1  # not asked


def test_a_disconnect_during_the_exchange_closes_quietly() -> None:
    s, _ = session(AuthAnswer(CONTINUE))
    connect(s)
    out = s.handle_packet(Disconnect(), 2.0)
    assert packets(out) == [] and of(out, Close) and not of(out, Ended)
    assert s.state is SessionState.CLOSED


def test_without_a_method_no_answer_is_taken_and_the_connack_names_none() -> None:
    """[MQTT-4.12.0-6]: no Authentication Method in the CONNACK of a plain CONNECT."""
    s, script = session(AuthAnswer(0, b"unused"))
    s.handle_packet(connect_packet(5), 1.0)
    out = s.handle_registered(True, 1, False, False, 0, 1.0)
    (connack,) = packets(out)
    assert isinstance(connack, Connack) and connack.properties.authentication_method is None
    assert script.taken == 0


# -- re-authentication after CONNACK ----------------------------------------------------------


def test_reauthentication_ends_with_auth_success() -> None:
    s, script = authed(AuthAnswer(CONTINUE, b"r1"), AuthAnswer(0, b"r2"))
    out = s.handle_packet(auth(R.RE_AUTHENTICATE, data=b"again"), 5.0)
    assert SetTimer("auth", 15.0) in out
    assert packets(out) == [Auth(CONTINUE, props("M", b"r1"))]
    out = s.handle_packet(Pingreq(), 5.5)  # other packets go on meanwhile
    assert packets(out) == [Pingresp()]
    out = s.handle_packet(auth(data=b"more"), 6.0)
    assert packets(out) == [Auth(R.SUCCESS, props("M", b"r2"))]
    assert CancelTimer("auth") in out and s.connected
    check_encodable(s, out)
    assert s.handle_timeout("auth", 20.0) == []  # a late timer is harmless
    # and again: a new re-authentication may start
    script.answers.append(AuthAnswer(0))
    out = s.handle_packet(auth(R.RE_AUTHENTICATE), 30.0)
    assert packets(out) == [Auth(R.SUCCESS, props("M"))]


def test_a_failed_reauthentication_disconnects_with_its_reason() -> None:
    """[MQTT-4.12.1-2]: DISCONNECT with the reason code, close; the will is due."""
    will = Will("w/t", b"gone", 0, False)
    s, _ = authed(AuthAnswer(R.NOT_AUTHORIZED, reason="revoked"), will=will)
    out = s.handle_packet(auth(R.RE_AUTHENTICATE), 5.0)
    assert packets(out) == [Disconnect(R.NOT_AUTHORIZED)]
    assert of(out, Close) and of(out, PublishWill) and len(of(out, Ended)) == 1
    assert events(out)["auth.failed"]["action"] == "reauth"
    assert s.state is SessionState.CLOSED


def test_reauthentication_with_another_method_disconnects() -> None:
    """[MQTT-4.12.1-1]: the method stays the CONNECT's."""
    s, script = authed(AuthAnswer(0))
    out = s.handle_packet(auth(R.RE_AUTHENTICATE, method="OTHER"), 5.0)
    assert packets(out) == [Disconnect(R.PROTOCOL_ERROR)]  # DISCONNECT has no 0x8C
    assert "protocol.error" in events(out) and script.taken == 1  # only the CONNECT's


def test_another_method_during_a_reauthentication_disconnects() -> None:
    s, _ = authed(AuthAnswer(CONTINUE))
    s.handle_packet(auth(R.RE_AUTHENTICATE), 5.0)
    out = s.handle_packet(auth(method="OTHER"), 6.0)
    assert packets(out) == [Disconnect(R.PROTOCOL_ERROR)]


@pytest.mark.parametrize("first", [auth(CONTINUE), auth(R.SUCCESS), Auth(R.RE_AUTHENTICATE)])
def test_an_auth_out_of_turn_after_connack_is_a_protocol_error(first: Auth) -> None:
    s, _ = authed(AuthAnswer(0))
    out = s.handle_packet(first, 5.0)
    assert packets(out) == [Disconnect(R.PROTOCOL_ERROR)]


def test_a_second_reauthenticate_during_one_is_a_protocol_error() -> None:
    s, _ = authed(AuthAnswer(CONTINUE), AuthAnswer(0))
    s.handle_packet(auth(R.RE_AUTHENTICATE), 5.0)
    out = s.handle_packet(auth(R.RE_AUTHENTICATE), 6.0)
    assert packets(out) == [Disconnect(R.PROTOCOL_ERROR)]


def test_a_reauthentication_that_does_not_finish_in_time_disconnects() -> None:
    s, _ = authed(AuthAnswer(CONTINUE))
    s.handle_packet(auth(R.RE_AUTHENTICATE), 5.0)
    out = s.handle_timeout("auth", 15.0)
    assert packets(out) == [Disconnect(R.NOT_AUTHORIZED)]
    assert events(out)["auth.failed"]["reason"] == "re-authentication timed out"


def test_reauthentication_rounds_are_bounded() -> None:
    s, _ = authed(*[AuthAnswer(CONTINUE)] * (MAX_ROUNDS + 1))
    out = s.handle_packet(auth(R.RE_AUTHENTICATE), 5.0)
    for _ in range(MAX_ROUNDS - 1):
        out = s.handle_packet(auth(), 5.0)
        assert packets(out) == [auth(data=None)]
    out = s.handle_packet(auth(), 5.0)
    assert packets(out) == [Disconnect(R.NOT_AUTHORIZED)]


def test_auth_from_a_client_that_named_no_method_is_a_protocol_error() -> None:
    """[MQTT-4.12.0-7]: only a client that authenticated with a method may send AUTH."""
    s, script = session(AuthAnswer(0))
    s.handle_packet(connect_packet(5), 1.0)
    s.handle_registered(True, 1, False, False, 0, 1.0)
    out = s.handle_packet(auth(R.RE_AUTHENTICATE), 2.0)
    assert packets(out) == [Disconnect(R.PROTOCOL_ERROR)]
    assert "protocol.error" in events(out) and script.taken == 0


# -- the codec's part -------------------------------------------------------------------------


def test_auth_round_trips_with_method_and_data() -> None:
    pkt = Auth(CONTINUE, props("SCRAM", b"\x00\x01"))
    decoder = Decoder()
    decoder.protocol_version = 5
    assert decoder.feed(encode(pkt, 5)) == [pkt]


def test_a_malformed_auth_is_a_logged_protocol_error() -> None:
    """An AUTH with a reason code AUTH may not carry: malformed, DISCONNECT, logged."""
    s, _ = authed()
    decoder = Decoder()
    decoder.protocol_version = 5
    with pytest.raises(MQTTError) as exc:
        decoder.feed(bytes([0xF0, 0x02, 0x05, 0x00]))  # reason code 0x05: not AUTH's
    out = s.handle_protocol_error(exc.value, 5.0)
    assert packets(out) == [Disconnect(R.MALFORMED_PACKET)]
    assert "protocol.error" in events(out)
