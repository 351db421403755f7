"""Timer expiries: "connect", "keepalive" and "retry".

Theory of operation: the session asks for timers with ``SetTimer(name, at)`` and the
host calls ``handle_timeout(name, now)`` when one fires. A timer that fires early is
re-armed rather than trusted, so the host may fire lazily or late: the keepalive timer
is set once at CONNACK and, when it fires, compares ``now`` with the last packet's
time; only ``keepalive_factor`` x keepalive of silence ends the connection
[MQTT-3.1.2-24] (3.1.1) / [MQTT-3.1.2-22] (5.0). "connect" bounds the whole handshake,
the registry's answer included. "retry" belongs to ``Outbound`` (3.1/3.1.1 only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.listener.mqtt.types import Connack
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import Action, Close, Send, SetTimer
from services.listener.session.codes import connack_code
from services.listener.session.ending import end
from services.listener.session.state import SessionState

if TYPE_CHECKING:
    from services.listener.session.core import Session


def handle_timeout(s: Session, name: str, now: float) -> list[Action]:
    if name == "connect":
        return _connect(s, now)
    if name == "keepalive":
        return _keepalive(s, now)
    if name == "retry":
        return s.outbound.retry(now) if s.connected else []
    raise ValueError(f"unknown session timer {name!r}")


def _connect(s: Session, now: float) -> list[Action]:
    if s.state is SessionState.CONNECTING:
        s.state = SessionState.CLOSED
        return [Close("connect_timeout")]
    if s.state is SessionState.REGISTERING:
        # The registry did not answer in time: refuse, and undo the registration.
        refusal = Send(Connack(False, connack_code(s.protocol_version, R.SERVER_UNAVAILABLE)))
        return [
            refusal,
            *end(s, "connect_timeout", R.SERVER_UNAVAILABLE, disconnect=False, will=False),
        ]
    return []


def _keepalive(s: Session, now: float) -> list[Action]:
    if not s.connected or not s.keepalive:
        return []
    deadline = s.last_seen + s.keepalive * s.limits.keepalive_factor
    if now + 1e-6 < deadline:
        return [SetTimer("keepalive", deadline)]
    return end(s, "keepalive_timeout", R.KEEP_ALIVE_TIMEOUT, disconnect=True, will=True)
