"""How a connection ends: the one place errors become packets, and the will and Ended.

Theory of operation: every way out of a session funnels through ``end`` (and protocol
errors through ``fail`` first), so the rules live once:

* nothing but a CONNACK before a successful CONNACK [MQTT-3.2.0-1]: while CONNECTING an
  error is answered by a CONNACK refusal when the version has a code for it (v5: any
  CONNACK reason code; 3.1.1: return codes 1-5 only), while REGISTERING by a bare close;
* a DISCONNECT only in v5 and only after a successful CONNACK [MQTT-3.14.0-1], with a
  reason code DISCONNECT may carry [MQTT-3.14.2-1] (else 0x80);
* the will only for an accepted connection, and at most once [MQTT-3.1.2-10];
* ``Ended`` exactly once after ``Register`` (the registry must learn the connection is
  over), never when the registry itself refused.

Worked example: a v5 client sends an unknown topic alias -> ``fail`` -> ``end`` gives
[Send(DISCONNECT 0x82), Close, PublishWill(will, delay), Ended("protocol_error", expiry)].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from services.listener.mqtt.errors import MQTTError
from services.listener.mqtt.types import Connack, Disconnect, PacketType
from services.listener.session.actions import Action, Close, Ended, LogEvent, PublishWill, Send
from services.listener.session.codes import v5_code
from services.listener.session.messages import OutboundMessage
from services.listener.session.state import SessionState

if TYPE_CHECKING:
    from services.listener.session.core import Session


def fail(s: Session, err: MQTTError, before: Sequence[Action] = ()) -> list[Action]:
    """The client broke the protocol (``err`` carries the reason code it is owed).

    Every error, whether the decoder or a handler found it, is logged here once: a
    refused CONNECT as ``client.rejected``, a broken protocol after it as ``protocol.error``."""
    out = list(before)
    if s.state is SessionState.CLOSED:
        return out
    out.append(_logged(s, err))
    if s.state is SessionState.CONNECTING:
        s.state = SessionState.CLOSED
        connack = _refusal(s, err)
        if connack is not None:
            out.append(Send(connack))
        out.append(Close(err.message, err.reason_code))
        return out
    code = err.reason_code
    return out + end(s, "protocol_error", code, disconnect=True, will=True, message=err.message)


def _logged(s: Session, err: MQTTError) -> LogEvent:
    common = (
        ("client_id", s.client_id or ""),
        ("peer", s.peer),
        ("reason", err.message),
        ("reason_code", int(err.reason_code)),
    )
    if s.state is SessionState.CONNECTING:
        return LogEvent("client.rejected", (*common, ("proto_ver", s.protocol_version)))
    return LogEvent("protocol.error", common)


def _refusal(s: Session, err: MQTTError) -> Connack | None:
    if s.protocol_version == 5:
        return Connack(False, v5_code(PacketType.CONNACK, err.reason_code))
    if err.return_code is None:
        return None  # 3.1.1 has no code for it: close without CONNACK [MQTT-3.2.2-6]
    # An unknown level is answered in 3.1.1 with return code 1 [MQTT-3.1.2-2].
    return Connack(False, err.return_code)


def end(
    s: Session,
    reason: str,
    reason_code: int,
    *,
    disconnect: bool,
    will: bool,
    taken_over: bool = False,
    close: bool = True,
    message: str | None = None,
) -> list[Action]:
    """Leave for CLOSED: DISCONNECT (v5, after CONNACK), Close, the will, Ended.

    ``disconnect`` and ``will`` say what the cause calls for; both only happen for a
    connection that got its successful CONNACK."""
    out: list[Action] = []
    if s.state is SessionState.CLOSED:
        return out
    connected = s.state is SessionState.CONNECTED
    if disconnect and connected and s.protocol_version == 5:
        out.append(Send(Disconnect(v5_code(PacketType.DISCONNECT, reason_code))))
    if close:
        out.append(Close(message or reason, reason_code))
    if will and connected and s.will is not None:
        out.append(PublishWill(s.will, will_delay(s)))
    s.will = None
    if s.register_sent and not s.ended:
        s.ended = True
        out.append(Ended(reason, s.session_expiry, taken_over, _unacked_shared(s)))
    s.state = SessionState.CLOSED
    return out


def _unacked_shared(s: Session) -> tuple[OutboundMessage, ...]:
    """The shared groups' copies this session holds unacknowledged, oldest first: the
    group still owes them to the publisher. Only a non-persistent session holds such
    copies outside its queue (a persistent member's are queued, and stay with it)."""
    ob = s.outbound
    out = [e.delivery for e in ob.inflight.values() if e.delivery.shared is not None]
    pending = ob.pending
    if pending:
        out += [m for m in pending if m.shared is not None]
    return tuple(out)


def will_delay(s: Session) -> int:
    """Seconds before the will goes out: its v5 delay, cut short by the session's end
    ("until the Will Delay Interval has passed or the Session ends", 3.1.3.2.2)."""
    if s.will is None or s.protocol_version != 5:
        return 0
    delay = s.will.properties.will_delay_interval or 0
    return min(delay, s.session_expiry)
