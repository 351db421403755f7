"""Delivery to the client: inflight window, packet ids, pending queue, topic aliases, retries.

Theory of operation. ``deliver`` either writes a PUBLISH now or parks the message:

* QoS 1/2 messages occupy a slot of the *window* — min(``max_inflight_messages``, the
  v5 client's Receive Maximum) [MQTT-3.3.4-9] — from PUBLISH until PUBACK, PUBCOMP, or a
  PUBACK/PUBREC with a reason code >= 0x80 [MQTT-4.4.0-2]. Beyond the window they wait
  in ``pending`` (FIFO, so order per publisher is kept [MQTT-4.6.0-6]).
* QoS 0 messages bypass the window; they wait only while the socket is *congested*
  (``pending0``). Ordering is per QoS in MQTT, so QoS 0 may overtake QoS 1/2.
* Both queues together hold at most ``max_online_messages``; beyond that a delivery is
  ``Dropped("queue_full")`` — unless it has a ``seq``: it is then already durable in the
  session's queue, which ``max_offline_messages`` bounds, and dropping it here would
  have it redelivered after later messages on the next reconnect (breaking I2).
  Expired messages are dropped when they would be written
  [MQTT-3.3.2-5], oversized ones too [MQTT-3.1.2-25]; once a PUBLISH has been written
  (``dup``) it is never expired again [MQTT-4.3.3-7].

Packet ids: a message with a queue position ``seq`` gets ``(seq - 1) % 65535 + 1``, the
same id on every (re)delivery, so a resumed session resends with its original id
[MQTT-4.4.0-1]; other messages take the next id not in use. A seq-derived id still in
use (wrapped around, or taken by a counter id) holds the queue until it is freed.

Worked example, window 2, QoS 1 messages m1..m3 with seq 1..3: deliver(m1) and
deliver(m2) send PUBLISH ids 1 and 2, deliver(m3) queues; PUBACK 1 gives Acked(m1)
and sends m3 with id 3.

Retries: 3.1/3.1.1 resend unacknowledged PUBLISH (DUP=1) and PUBREL after
``retry_interval``; MQTT 5 forbids resending except on reconnect [MQTT-4.4.0-1].
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from services.listener.mqtt.encoder import encode
from services.listener.mqtt.types import (
    NO_PROPERTIES,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import (
    Acked,
    Action,
    Dropped,
    Send,
    SendPublish,
    SetTimer,
    StoreMark,
)
from services.listener.session.codes import MARK_OUTBOUND_PUBREL
from services.listener.session.limits import MAX_PACKET_ID, SessionLimits
from services.listener.session.messages import Message, OutboundMessage


def packet_id_for_seq(seq: int) -> int:
    """The packet id of queue entry ``seq``: stable across reconnects, never 0."""
    return (seq - 1) % MAX_PACKET_ID + 1


@dataclass(slots=True, init=False)
class Inflight:
    """One unacknowledged QoS 1/2 delivery; ``released`` once PUBREL was sent."""

    delivery: OutboundMessage
    packet: Publish | None
    sent_at: float
    released: bool = False

    def __init__(
        self,
        delivery: OutboundMessage,
        packet: Publish | None,
        sent_at: float,
        released: bool = False,
    ) -> None:
        self.delivery = delivery
        self.packet = packet
        self.sent_at = sent_at
        self.released = released


class Outbound:
    """The outbound half of a session (see the module docstring). The queues are
    created when something first waits in them: most clients never fill their window."""

    __slots__ = (
        "_next_id",
        "_retry_at",
        "alias_max",
        "aliases",
        "congested",
        "inflight",
        "limits",
        "max_packet_size",
        "pending",
        "pending0",
        "persistent",
        "ready",
        "version",
        "window",
    )

    def __init__(self, limits: SessionLimits) -> None:
        self.limits = limits
        self.version = 4
        self.window = limits.inflight_window
        self.alias_max = 0
        self.max_packet_size: int | None = None
        self.persistent = False
        self.ready = False  # CONNACK sent: PUBLISH may be written
        self.congested = False
        self.inflight: dict[int, Inflight] = {}
        self.pending: deque[OutboundMessage] | None = None
        self.pending0: deque[OutboundMessage] | None = None
        self.aliases: dict[str, int] = {}
        self._next_id = 1
        self._retry_at: float | None = None

    # -- set-up -----------------------------------------------------------------------------

    def configure(self, version: int, props: Properties) -> None:
        """Apply what the client announced in CONNECT (v5 properties)."""
        self.version = version
        if version != 5:
            return
        if props.receive_maximum:
            self.window = min(self.window, props.receive_maximum)
        self.alias_max = min(self.limits.topic_alias_max_broker, props.topic_alias_maximum or 0)
        self.max_packet_size = props.maximum_packet_size

    def start(self, persistent: bool) -> None:
        self.persistent = persistent
        self.ready = True

    # -- delivering ---------------------------------------------------------------------------

    def deliver(self, msg: OutboundMessage, now: float) -> list[Action]:
        bounded = msg.seq is None  # durable entries are bounded by the store
        if _expired(msg, now):
            return self.drop(msg, "expired")
        if msg.qos == 0:
            if self.ready and not self.congested:
                return self._send(msg, now)
            return self._park(True, msg, bounded)
        if self.ready and not self.congested and not self.pending and self._fits(msg):
            return self._send(msg, now)
        return self._park(False, msg, bounded)

    def drop(self, msg: OutboundMessage, reason: str) -> list[Action]:
        return [Dropped(msg, reason)]

    def backlog(self) -> int:
        """Deliveries not yet acknowledged by the client: queued here or in flight."""
        return len(self.pending or ()) + len(self.pending0 or ()) + len(self.inflight)

    def drain(self, now: float) -> list[Action]:
        """Write what the congestion flag and the window allow, oldest first."""
        out: list[Action] = []
        if not self.ready or self.congested:
            return out
        pending0 = self.pending0
        while pending0:
            out += self._send(pending0.popleft(), now)
        pending = self.pending
        while pending and len(self.inflight) < self.window:
            msg = pending[0]
            if _expired(msg, now):
                pending.popleft()
                out.append(Dropped(msg, "expired"))
                continue
            if not self._fits(msg):
                break
            pending.popleft()
            out += self._send(msg, now)
        return out

    def set_congested(self, flag: bool, now: float) -> list[Action]:
        self.congested = flag
        return [] if flag else self.drain(now)

    def _park(self, qos0: bool, msg: OutboundMessage, bounded: bool) -> list[Action]:
        limit = self.limits.max_online_messages
        if bounded and 0 <= limit <= len(self.pending or ()) + len(self.pending0 or ()):
            return [Dropped(msg, "queue_full")]
        if qos0:
            if self.pending0 is None:
                self.pending0 = deque()
            self.pending0.append(msg)
        else:
            if self.pending is None:
                self.pending = deque()
            self.pending.append(msg)
        return []

    def _fits(self, msg: OutboundMessage) -> bool:
        if len(self.inflight) >= self.window:
            return False
        return msg.seq is None or packet_id_for_seq(msg.seq) not in self.inflight

    def _free_id(self) -> int:
        """The next id not in use (taken only once the PUBLISH is actually written)."""
        pid = self._next_id
        while pid in self.inflight:  # bounded: the window is below 65535 ids
            pid = pid % MAX_PACKET_ID + 1
        return pid

    def _send(self, msg: OutboundMessage, now: float) -> list[Action]:
        pid: int | None = None
        if msg.qos:
            pid = self._free_id() if msg.seq is None else packet_id_for_seq(msg.seq)
        packet, new_alias = self._build(msg, pid, now)
        if self.max_packet_size is not None and (
            len(encode(packet, self.version)) > self.max_packet_size
        ):
            return [Dropped(msg, "too_large")]
        if new_alias:
            self.aliases[msg.message.topic] = new_alias
        out: list[Action] = [SendPublish(packet, msg)]
        if pid is not None:
            if msg.seq is None:
                self._next_id = pid % MAX_PACKET_ID + 1
            self.inflight[pid] = Inflight(msg, packet, now)
            out += self._arm_retry(now)
        return out

    def _build(self, msg: OutboundMessage, pid: int | None, now: float) -> tuple[Publish, int]:
        """The PUBLISH for ``msg``, and the topic alias it newly binds (0 if none)."""
        message = msg.message
        dup = msg.dup and msg.qos > 0  # DUP is 0 for QoS 0 [MQTT-3.3.1-2]
        if self.version != 5:
            packet = Publish(message.topic, message.payload, msg.qos, msg.retain, dup, pid)
            return packet, 0
        topic, alias, new_alias = self._alias(message.topic)
        props = _v5_properties(message, msg.sub_ids, alias, now)
        return Publish(topic, message.payload, msg.qos, msg.retain, dup, pid, props), new_alias

    def _alias(self, topic: str) -> tuple[str, int | None, int]:
        """(topic to write, alias to write, alias newly bound). Aliases are bound first
        come, first served, up to the client's Topic Alias Maximum [MQTT-3.1.2-26]."""
        if not self.alias_max:
            return topic, None, 0
        alias = self.aliases.get(topic)
        if alias is not None:
            return "", alias, 0
        if len(self.aliases) < self.alias_max:
            alias = len(self.aliases) + 1
            return topic, alias, alias
        return topic, None, 0

    # -- acknowledgements from the client ---------------------------------------------

    def on_puback(self, pkt: Puback, now: float) -> list[Action]:
        entry = self.inflight.get(pkt.packet_id)
        if entry is None or entry.delivery.qos != 1:
            return []  # unknown id: nothing to acknowledge, and no reply exists for PUBACK
        del self.inflight[pkt.packet_id]
        return [Acked(entry.delivery), *self.drain(now)]

    def on_pubrec(self, pkt: Pubrec, now: float) -> list[Action]:
        pid = pkt.packet_id
        entry = self.inflight.get(pid)
        if entry is None or entry.delivery.qos != 2:
            # Let the client finish a flow this session does not know (v5: say so).
            code = R.PACKET_IDENTIFIER_NOT_FOUND if self.version == 5 else 0
            return [Send(Pubrel(pid, code))]
        if self.version == 5 and pkt.reason_code >= 0x80:
            del self.inflight[pid]  # refused: acknowledged, never resent [MQTT-4.4.0-2]
            return [Acked(entry.delivery), *self.drain(now)]
        out: list[Action] = []
        if not entry.released:
            entry.released = True
            entry.packet = None  # the PUBLISH is never resent now [MQTT-4.3.3-6]
            if entry.delivery.shared is not None:
                entry.delivery.shared.released = True  # received: the group's is done
            seq = entry.delivery.seq
            if self.persistent and seq is not None:
                out.append(StoreMark(MARK_OUTBOUND_PUBREL, seq, True))
        entry.sent_at = now
        out.append(Send(Pubrel(pid)))  # [MQTT-4.3.3-4]
        return out

    def on_pubcomp(self, pkt: Pubcomp, now: float) -> list[Action]:
        entry = self.inflight.get(pkt.packet_id)
        if entry is None or not entry.released:
            return []
        del self.inflight[pkt.packet_id]
        out: list[Action] = [Acked(entry.delivery)]
        seq = entry.delivery.seq
        if self.persistent and seq is not None:
            out.append(StoreMark(MARK_OUTBOUND_PUBREL, seq, False))
        return out + self.drain(now)

    # -- reconnect and retries ------------------------------------------------------------

    def resume(
        self, queued: Sequence[OutboundMessage], outbound_pubrel: Iterable[int], now: float
    ) -> list[Action]:
        """Resend PUBREL for the ``outbound_pubrel`` seqs, then redeliver ``queued`` in
        order, all with their original packet ids [MQTT-4.4.0-1]. An entry of
        ``queued`` whose seq awaits PUBCOMP is not resent as a PUBLISH [MQTT-4.3.3-6]."""
        by_seq = {m.seq: m for m in queued if m.seq is not None}
        released: set[int] = set()
        out: list[Action] = []
        for seq in outbound_pubrel:
            pid = packet_id_for_seq(seq)
            if seq in released or pid in self.inflight:
                continue
            released.add(seq)
            delivery = by_seq.get(seq) or _placeholder(seq, now)
            self.inflight[pid] = Inflight(delivery, None, now, released=True)
            out.append(Send(Pubrel(pid)))
        if released:
            out += self._arm_retry(now)
        for msg in queued:
            if msg.seq is None or msg.seq not in released:
                out += self.deliver(msg, now)
        return out

    def _arm_retry(self, now: float) -> list[Action]:
        interval = self.limits.retry_interval
        if self.version == 5 or interval <= 0 or self._retry_at is not None:
            return []
        self._retry_at = now + interval
        return [SetTimer("retry", self._retry_at)]

    def retry(self, now: float) -> list[Action]:
        """3.1/3.1.1: resend what waited ``retry_interval`` for its acknowledgement."""
        self._retry_at = None
        interval = self.limits.retry_interval
        if self.version == 5 or interval <= 0 or not self.inflight:
            return []
        out: list[Action] = []
        if not self.congested:
            for pid, entry in self.inflight.items():
                if entry.sent_at + interval > now + 1e-6:
                    continue
                entry.sent_at = now
                if entry.released or entry.packet is None:
                    out.append(Send(Pubrel(pid)))
                    continue
                entry.packet = replace(entry.packet, dup=True)  # [MQTT-3.3.1-1]
                entry.delivery = replace(entry.delivery, dup=True)
                out.append(SendPublish(entry.packet, entry.delivery))
        earliest = min(entry.sent_at for entry in self.inflight.values())
        self._retry_at = max(earliest + interval, now + min(interval, 1.0))
        out.append(SetTimer("retry", self._retry_at))
        return out


def _expired(msg: OutboundMessage, now: float) -> bool:
    expires_at = msg.message.expires_at
    return expires_at is not None and not msg.dup and now >= expires_at


def _v5_properties(
    message: Message, sub_ids: tuple[int, ...], alias: int | None, now: float
) -> Properties:
    """Forwarded properties plus what is per delivery: the remaining expiry
    [MQTT-3.3.2-6], subscription identifiers [MQTT-3.3.4-3], the topic alias."""
    props = message.properties
    expiry = props.message_expiry_interval
    if message.expires_at is not None:
        expiry = max(0, math.ceil(message.expires_at - now))
    if expiry is None and not sub_ids and alias is None:
        return props
    return replace(
        props if props is not NO_PROPERTIES else Properties(),
        message_expiry_interval=expiry,
        subscription_identifiers=sub_ids or props.subscription_identifiers,
        topic_alias=alias,
    )


def _placeholder(seq: int, now: float) -> OutboundMessage:
    """Stands for a queue entry awaiting PUBCOMP that the host did not pass in
    ``queued``; only its ``seq`` matters (for ``Acked``)."""
    message = Message("", "", b"", 2, False, "", "", now)
    return OutboundMessage(message, qos=2, retain=False, seq=seq, dup=True)
