"""``ternmq-admin trace client client-id=ID``: what one client sends and receives, live,
as VerneMQ's ``vmq-admin trace client`` prints it.

Why here, on the packets: an operator asks "what does this device actually send, and
what do we answer" while it misbehaves in production, and the event log holds neither
the packets nor their fields. A trace costs nothing while none runs: a connection looks
up its client id among :data:`ACTIVE` once, at its CONNECT, and checks one attribute
per packet after that. A connection already online when a trace starts is attached to
it by the listener (``server``). Each line is rate-limited (``rate_max`` lines per
``rate_interval``; the lines over it are dropped and counted) and the queue to the
reader is bounded, so a chatty client cannot make a trace hold the listener's memory.
Passwords are never printed.

The lines, from the broker's side (RECV: from the client, SEND: to it)::

    New connection <10.0.0.7:5342> for client "c1"
    <10.0.0.7:5342> MQTT RECV: CID: "c1" CONNECT(c: c1, v: 4, u: al, p: ******, cs: 1, ka: 30)
    <10.0.0.7:5342> MQTT SEND: CID: "c1" CONNACK(sp: 0, rc: 0)
    <10.0.0.7:5342> MQTT RECV: CID: "c1" SUBSCRIBE(m1) with topics:
        q:1, t: "a/b"
    <10.0.0.7:5342> MQTT SEND: CID: "c1" SUBACK(m1, qt[1])
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from services.listener.mqtt.types import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)

QUEUE_MAX: Final = 1000  # lines waiting for the reader; more are dropped and counted
SessionKey = tuple[str, str]


class Trace:
    """One running ``trace client``: its settings, its rate limit and its lines."""

    def __init__(
        self,
        mountpoint: str,
        client_id: str,
        rate_max: int = 10,
        rate_interval: float = 0.1,
        payload_limit: int = 200,
    ) -> None:
        self.key: SessionKey = (mountpoint, client_id)
        self.rate_max = rate_max
        self.rate_interval = rate_interval
        self.payload_limit = payload_limit
        self.lines: asyncio.Queue[str] = asyncio.Queue(QUEUE_MAX)
        self._window = 0.0
        self._count = 0
        self.dropped = 0  # over the rate limit or the queue, since the last report

    def put(self, text: str) -> None:
        now = time.monotonic()
        if now - self._window >= self.rate_interval:
            self._window, self._count = now, 0
            if self.dropped:
                self._enqueue(
                    f"... {self.dropped} lines dropped (rate limit: {self.rate_max} lines "
                    f"per {self.rate_interval * 1000:g} ms)"
                )
                self.dropped = 0
        if self._count >= self.rate_max:
            self.dropped += 1
            return
        self._count += 1
        self._enqueue(text)

    def _enqueue(self, text: str) -> None:
        try:
            self.lines.put_nowait(text)
        except asyncio.QueueFull:
            self.dropped += 1


# The traces running in this listener process, by session key. A connection holds its
# key's list (``tracing``): a trace added to it later reaches the connection too.
ACTIVE: dict[SessionKey, list[Trace]] = {}


def start(trace: Trace) -> list[Trace]:
    """Run ``trace``; returns the list connections of its key must hold."""
    traces = ACTIVE.setdefault(trace.key, [])
    traces.append(trace)
    return traces


def stop(trace: Trace) -> None:
    traces = ACTIVE.get(trace.key)
    if traces is None:
        return
    if trace in traces:
        traces.remove(trace)
    if not traces:
        del ACTIVE[trace.key]


def received(traces: list[Trace], who: str, client_id: str, pkt: Packet) -> None:
    if isinstance(pkt, Connect):
        for t in traces:
            t.put(f'New connection <{who}> for client "{client_id}"')
    _put(traces, who, client_id, "RECV", pkt)


def sent(traces: list[Trace], who: str, client_id: str, pkt: Packet) -> None:
    _put(traces, who, client_id, "SEND", pkt)


def _put(traces: list[Trace], who: str, client_id: str, way: str, pkt: Packet) -> None:
    limit = max(t.payload_limit for t in traces) if traces else 0
    text = f'<{who}> MQTT {way}: CID: "{client_id}" {describe(pkt, limit)}'
    for t in traces:
        t.put(text)


def describe(pkt: Packet, payload_limit: int = 200) -> str:
    """One packet as VerneMQ's trace shows it (m: packet id, q: QoS, r: retain, d: dup)."""
    if isinstance(pkt, Publish):
        mid = f", m{pkt.packet_id}" if pkt.packet_id is not None else ""
        head = f'PUBLISH(d{int(pkt.dup)}, q{pkt.qos}, r{int(pkt.retain)}{mid}, "{pkt.topic}")'
        return f"{head} with payload:\n    {payload(pkt.payload, payload_limit)}"
    if isinstance(pkt, Puback | Pubrec | Pubrel | Pubcomp):
        code = f", rc: {pkt.reason_code}" if pkt.reason_code else ""
        return f"{type(pkt).__name__.upper()}(m{pkt.packet_id}{code})"
    if isinstance(pkt, Connect):
        user = pkt.username if pkt.username is not None else ""
        secret = "******" if pkt.password is not None else ""
        text = (
            f"CONNECT(c: {pkt.client_id}, v: {pkt.protocol_version}, u: {user}, p: {secret}, "
            f"cs: {int(pkt.clean_start)}, ka: {pkt.keepalive})"
        )
        if pkt.will is not None:
            w = pkt.will
            text += f' with will q:{w.qos}, r:{int(w.retain)}, t: "{w.topic}":\n    '
            text += payload(w.payload, payload_limit)
        return text
    if isinstance(pkt, Connack):
        return f"CONNACK(sp: {int(pkt.session_present)}, rc: {pkt.reason_code})"
    if isinstance(pkt, Subscribe):
        lines = "".join(f'\n    q:{s.qos}, t: "{s.topic_filter}"' for s in pkt.subscriptions)
        return f"SUBSCRIBE(m{pkt.packet_id}) with topics:{lines}"
    if isinstance(pkt, Suback):
        codes = ", ".join(str(c) for c in pkt.reason_codes)
        return f"SUBACK(m{pkt.packet_id}, qt[{codes}])"
    if isinstance(pkt, Unsubscribe):
        lines = "".join(f'\n    t: "{f}"' for f in pkt.topic_filters)
        return f"UNSUBSCRIBE(m{pkt.packet_id}) with topics:{lines}"
    if isinstance(pkt, Unsuback):
        return f"UNSUBACK(m{pkt.packet_id})"
    if isinstance(pkt, Pingreq | Pingresp):
        return f"{type(pkt).__name__.upper()}()"
    if isinstance(pkt, Disconnect | Auth):
        return f"{type(pkt).__name__.upper()}(rc: {pkt.reason_code})"
    return f"{type(pkt).__name__.upper()}()"


def payload(data: bytes, limit: int) -> str:
    """The payload as text, cut at ``limit`` bytes: bytes that are not UTF-8, and
    characters a terminal would act on (newlines, escapes, NUL), escaped."""
    text = data[:limit].decode("utf-8", errors="backslashreplace")
    shown = "".join(c if c.isprintable() else _escape(c) for c in text)
    if len(data) > limit:
        shown += f"... ({len(data)} bytes)"
    return shown


def _escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
