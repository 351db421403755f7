"""PUBACK, PUBREC, PUBREL, PUBCOMP from the client: the acknowledgement half of QoS 1/2.

Theory of operation: PUBACK, PUBREC and PUBCOMP acknowledge deliveries *to* the client
and belong to ``Outbound`` (the window, ``Acked``, the PUBREL and its store mark).
PUBREL is the second half of an inbound QoS 2 flow: it releases a packet id from
``Inbound.awaiting_pubrel`` and is always answered with PUBCOMP [MQTT-4.3.3-11];
for an id the session does not hold, v5 says 0x92 (Packet Identifier not found), and
3.1.1 completes anyway so a client that lost track can free its id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.listener.mqtt.types import Puback, Pubcomp, Pubrec, Pubrel
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import Action, Send, StoreMark
from services.listener.session.codes import MARK_INBOUND_QOS2

if TYPE_CHECKING:
    from services.listener.session.core import Session


def handle_puback(s: Session, pkt: Puback, now: float) -> list[Action]:
    return s.outbound.on_puback(pkt, now)


def handle_pubrec(s: Session, pkt: Pubrec, now: float) -> list[Action]:
    return s.outbound.on_pubrec(pkt, now)


def handle_pubcomp(s: Session, pkt: Pubcomp, now: float) -> list[Action]:
    return s.outbound.on_pubcomp(pkt, now)


def handle_pubrel(s: Session, pkt: Pubrel, now: float) -> list[Action]:
    pid = pkt.packet_id
    if s.inbound is None or not s.inbound.release(pid):
        code = R.PACKET_IDENTIFIER_NOT_FOUND if s.protocol_version == 5 else 0
        return [Send(Pubcomp(pid, code))]
    out: list[Action] = []
    if s.persistent:
        out.append(StoreMark(MARK_INBOUND_QOS2, pid, False))
    out.append(Send(Pubcomp(pid)))
    return out
