"""MQTT 5 enhanced authentication (§4.12, §3.15): the AUTH exchange of a CONNECT that
names an Authentication Method, and re-authentication after CONNACK.

Theory of operation: the session never asks anyone itself. The host (the connection's
webhooks, ``on_auth_m5``) is asked *before* the session handles a CONNECT or AUTH that
carries the method, and keeps its verdict as an :class:`AuthAnswer`; the session takes
it through :class:`AuthAnswers` when it handles that packet (None: nobody speaks the
method). An answer is 0 (success), 0x18 (continue: send the client an AUTH with the
answer's data and wait for its next AUTH) or a refusal reason code.

Before CONNACK the session stays CONNECTING while an exchange runs, and keeps the
CONNECT until it succeeds; then the CONNECT is admitted as if it had just arrived
(``handle_connect.admit``: client id, will, ``authenticate``, Register), and the CONNACK
carries the method and the last answer's data [MQTT-4.12.0-5]. Only AUTH and
DISCONNECT may arrive meanwhile [MQTT-3.1.2-30]; the connect timer bounds the whole
exchange, and :data:`MAX_ROUNDS` its length. After CONNACK, an AUTH 0x19 with the same
method [MQTT-4.12.1-1] starts a re-authentication, bounded by the "auth" timer and the
same number of rounds; it ends with AUTH 0x00, or with a DISCONNECT carrying the reason
and the connection closed [MQTT-4.12.1-2]. An AUTH from a client that named no method
[MQTT-4.12.0-7], without a method, with a reason code out of turn, is a protocol error.

Worked example: CONNECT(method "SCRAM", data c1) -> host answers continue(s1) ->
[Send(AUTH 0x18 SCRAM s1)]; AUTH(0x18, SCRAM, c2) -> host answers success(s2) ->
[Register(...)] and, once registered, CONNACK(0, method SCRAM, data s2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from services.listener.mqtt.errors import MQTTError, ProtocolError
from services.listener.mqtt.types import Auth, Connect, Disconnect, Packet, Properties
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import Action, CancelTimer, Close, Send, SetTimer
from services.listener.session.handle_connect import admit, auth_failed, refusal
from services.listener.session.state import SessionState

if TYPE_CHECKING:
    from services.listener.session.core import Session

MAX_ROUNDS: Final = 16
"""AUTH packets the server sends in one exchange before it gives up (not authorised)."""


@dataclass(frozen=True, slots=True)
class AuthAnswer:
    """The host's verdict on one CONNECT or AUTH: ``code`` 0 success, 0x18 continue,
    else the refusal's reason code; ``data`` goes to the client; ``reason`` to the log."""

    code: int
    data: bytes | None = None
    reason: str = ""


class AuthAnswers(Protocol):
    """Where the session finds the verdict on the packet it is handling."""

    def auth_answer(self) -> AuthAnswer | None:
        """The verdict the host reached for the packet now handled (taken: asked once)."""
        ...


class EnhancedAuth:
    """A connection's enhanced authentication, from its CONNECT on (``Session.auth``)."""

    __slots__ = ("active", "connect", "method", "reply", "rounds")

    def __init__(self, method: str, connect: Connect | None) -> None:
        self.method = method  # the CONNECT's, fixed for the connection [MQTT-4.12.1-1]
        self.connect = connect  # kept while the CONNECT's exchange runs
        self.active = True  # an exchange (the CONNECT's or a re-authentication) runs
        self.rounds = 0  # AUTH 0x18 sent in the current exchange
        self.reply: bytes | None = None  # the last success's data, for the CONNACK


def begin(s: Session, pkt: Connect, now: float) -> list[Action]:
    """A v5 CONNECT with an Authentication Method, otherwise valid."""
    method = pkt.properties.authentication_method
    assert method is not None
    answer = _answer(s)
    if answer is None:  # nobody speaks it [MQTT-4.12.0-1]
        raise refusal(
            f"authentication method {method!r} not supported", R.BAD_AUTHENTICATION_METHOD
        )
    ea = s.auth = EnhancedAuth(method, pkt)
    return _connect_answer(s, ea, answer, now)


def during_connect(s: Session, pkt: Packet, now: float) -> list[Action]:
    """A packet while the CONNECT's exchange runs: only AUTH or DISCONNECT."""
    ea = s.auth
    assert ea is not None
    if isinstance(pkt, Disconnect):
        s.state = SessionState.CLOSED  # nothing registered: no will, no Ended
        return [Close("disconnected during authentication", pkt.reason_code)]
    if isinstance(pkt, Connect):
        raise ProtocolError("second CONNECT [MQTT-3.1.0-2]")
    if not isinstance(pkt, Auth):
        name = type(pkt).__name__
        raise ProtocolError(f"{name} during enhanced authentication [MQTT-3.1.2-30]")
    _check(ea, pkt, R.CONTINUE_AUTHENTICATION, False)
    answer = _answer(s)
    if answer is None:
        reason = f"nobody continues authentication method {ea.method!r}"
        raise refusal(reason, R.BAD_AUTHENTICATION_METHOD)
    return _connect_answer(s, ea, answer, now)


def _connect_answer(s: Session, ea: EnhancedAuth, answer: AuthAnswer, now: float) -> list[Action]:
    if answer.code == R.CONTINUE_AUTHENTICATION:
        return _continue(s, ea, answer, "connect", now)
    if answer.code != R.SUCCESS:
        reason = answer.reason or "enhanced authentication failed"
        log = auth_failed(s, "connect", "", reason)
        return s.fail(refusal(reason, answer.code), now, before=[log])
    connect, ea.connect = ea.connect, None
    assert connect is not None
    ea.active, ea.reply = False, answer.data
    return admit(s, connect, now)


def handle_auth(s: Session, pkt: Auth, now: float) -> list[Action]:
    """AUTH from a connected client: a re-authentication starts or goes on."""
    ea = s.auth
    if ea is None:
        raise ProtocolError("AUTH from a client that named no method [MQTT-4.12.0-7]")
    out: list[Action] = []
    if not ea.active:
        _check(ea, pkt, R.RE_AUTHENTICATE, True)
        ea.active, ea.rounds = True, 0
        out.append(SetTimer("auth", now + s.limits.connect_timeout))
    else:
        _check(ea, pkt, R.CONTINUE_AUTHENTICATION, True)
    answer = _answer(s)
    if answer is None:
        return out + _reauth_failed(s, R.BAD_AUTHENTICATION_METHOD, "nobody answered")
    if answer.code == R.CONTINUE_AUTHENTICATION:
        return out + _continue(s, ea, answer, "reauth", now)
    if answer.code != R.SUCCESS:
        return out + _reauth_failed(s, answer.code, answer.reason or "re-authentication failed")
    ea.active = False
    props = Properties(authentication_method=ea.method, authentication_data=answer.data)
    return [*out, CancelTimer("auth"), Send(Auth(R.SUCCESS, props))]


def handle_timeout(s: Session, now: float) -> list[Action]:
    """The "auth" timer: a re-authentication that did not finish in time."""
    ea = s.auth
    if ea is None or not ea.active or not s.connected:
        return []
    return _reauth_failed(s, R.NOT_AUTHORIZED, "re-authentication timed out")


def _continue(
    s: Session, ea: EnhancedAuth, answer: AuthAnswer, action: str, now: float
) -> list[Action]:
    ea.rounds += 1
    if ea.rounds > MAX_ROUNDS:
        reason = f"more than {MAX_ROUNDS} AUTH rounds"
        if action == "reauth":
            return _reauth_failed(s, R.NOT_AUTHORIZED, reason)
        log = auth_failed(s, action, "", reason)
        return s.fail(refusal(reason, R.NOT_AUTHORIZED), now, before=[log])
    props = Properties(authentication_method=ea.method, authentication_data=answer.data)
    return [Send(Auth(R.CONTINUE_AUTHENTICATION, props))]


def _reauth_failed(s: Session, code: int, reason: str) -> list[Action]:
    """[MQTT-4.12.1-2]: DISCONNECT with the reason, close; the will is due."""
    log = auth_failed(s, "reauth", "", reason)
    return [log, *s.end("reauth_failed", code, disconnect=True, will=True)]


def _check(ea: EnhancedAuth, pkt: Auth, expected: int, connected: bool) -> None:
    """The AUTH is the one expected now, with the connection's method. Another method
    is refused with 0x8C before CONNACK; DISCONNECT has no such code: 0x82 after it."""
    method = pkt.properties.authentication_method
    if method is None:
        raise ProtocolError("AUTH without an Authentication Method [MQTT-3.15.2-1]")
    if method != ea.method:
        message = f"AUTH with method {method!r}, not the CONNECT's {ea.method!r}"
        if connected:
            raise ProtocolError(message + " [MQTT-4.12.1-1]")
        raise MQTTError(message + " [MQTT-4.12.0-5]", reason_code=R.BAD_AUTHENTICATION_METHOD)
    if pkt.reason_code != expected:
        raise ProtocolError(
            f"AUTH reason code 0x{pkt.reason_code:02X} where 0x{expected:02X} is due"
        )


def _answer(s: Session) -> AuthAnswer | None:
    answers = s.answers
    return None if answers is None else answers.auth_answer()
