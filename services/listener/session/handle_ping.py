"""PINGREQ: answered with PINGRESP [MQTT-3.12.4-1].

Theory of operation: any packet keeps the connection alive (``Session.last_seen`` is
updated by the dispatcher before a handler runs); PINGREQ exists for clients with
nothing else to say, so its handler only answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.listener.mqtt.types import Pingreq, Pingresp
from services.listener.session.actions import Action, Send

if TYPE_CHECKING:
    from services.listener.session.core import Session


def handle_pingreq(s: Session, pkt: Pingreq, now: float) -> list[Action]:
    return [Send(Pingresp())]
