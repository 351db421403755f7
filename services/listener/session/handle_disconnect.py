"""DISCONNECT from the client: the normal end of a connection.

Theory of operation: a DISCONNECT with reason 0 (and every 3.1/3.1.1 DISCONNECT)
discards the will [MQTT-3.1.2-10] / [MQTT-3.14.4-3]; v5 reason 0x04 (Disconnect with
Will Message), or any error code, publishes it. A v5 client may change its Session
Expiry Interval here, within ``max_session_expiry_interval``, but not from 0 to
non-zero (3.14.2.2.2: a Protocol Error, answered with DISCONNECT 0x82).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.listener.mqtt.errors import ProtocolError
from services.listener.mqtt.types import Disconnect
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import Action

if TYPE_CHECKING:
    from services.listener.session.core import Session


def handle_disconnect(s: Session, pkt: Disconnect, now: float) -> list[Action]:
    code = pkt.reason_code if s.protocol_version == 5 else R.NORMAL_DISCONNECTION
    if s.protocol_version == 5:
        _update_expiry(s, pkt)
    if code == R.NORMAL_DISCONNECTION:
        s.will = None
        reason = "disconnect"
    elif code == R.DISCONNECT_WITH_WILL_MESSAGE:
        reason = "disconnect_with_will"
    else:
        reason = "client_error"
    return s.end(reason, code, disconnect=False, will=True)


def _update_expiry(s: Session, pkt: Disconnect) -> None:
    expiry = pkt.properties.session_expiry_interval
    if expiry is None:
        return
    if not s.connect_expiry and expiry:
        raise ProtocolError(
            "DISCONNECT sets a Session Expiry Interval after CONNECT had 0 (3.14.2.2.2)"
        )
    cap = s.limits.max_session_expiry_interval
    s.session_expiry = expiry if cap < 0 else min(expiry, cap)
