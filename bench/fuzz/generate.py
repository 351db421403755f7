"""Valid MQTT packet sequences, drawn from a seeded ``random.Random``.

A sequence is what one client could legally send on one connection: a CONNECT (3.1,
3.1.1 or 5.0; clean or persistent; maybe a will, credentials, MQTT 5 properties) and a
few packets after it (PUBLISH at any QoS, retained or not, SUBSCRIBE, UNSUBSCRIBE, the
acknowledgements, PINGREQ, AUTH, DISCONNECT). The mutators (``mutate.py``) then break it.

Client ids and topics come from bounded pools (``Pools``), so the state the valid
packets create — persistent sessions, their subscriptions and queues, retained
messages — stops growing once the pools are used up, and a second run of the same size
creates no more of it. Clean sessions get fresh random ids: they must leave nothing.

Worked example: ``Generator(random.Random(1), Pools()).sequence()`` is a list such as
``[CONNECT(v4, "fz-p17", clean=0), SUBSCRIBE("fz/b/3", qos 1), PUBLISH(...)]``, each
item the bytes of one packet.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench.fuzz.wire import frame, prop, props, string, u16

VERSIONS = (3, 4, 5)
LEVELS = "abcd"


@dataclass(frozen=True, slots=True)
class Pools:
    """The bounded name spaces of the valid packets (see the module docstring)."""

    prefix: str = "fz"
    persistent_ids: int = 500
    topics: int = 200
    max_payload: int = 16384  # the rare large payloads are up to this many bytes


class Generator:
    """One sequence per call; all randomness comes from ``rng``."""

    def __init__(self, rng: random.Random, pools: Pools) -> None:
        self.rng = rng
        self.pools = pools
        self.version = 4
        self.next_id = 1

    # -- names ------------------------------------------------------------------------
    def topic(self) -> str:
        r, p = self.rng, self.pools
        return f"{p.prefix}/{r.choice(LEVELS)}/{r.randrange(p.topics)}"

    def topic_filter(self) -> str:
        r, p = self.rng, self.pools
        roll = r.random()
        if roll < 0.6:
            flt = self.topic()
        elif roll < 0.8:
            flt = f"{p.prefix}/+/{r.randrange(p.topics)}"
        elif roll < 0.95:
            flt = f"{p.prefix}/{r.choice(LEVELS)}/#"
        else:
            flt = f"{p.prefix}/#"
        if r.random() < 0.1:
            flt = f"$share/g{r.randrange(4)}/{flt}"
        return flt

    def packet_id(self) -> int:
        pid = self.next_id
        self.next_id = pid % 65535 + 1
        return pid

    def payload(self) -> bytes:
        r = self.rng
        if r.random() < 0.98:
            size = r.choice((0, 1, 8, 64, 200))
        else:
            size = r.randrange(1, max(2, self.pools.max_payload))
        return r.randbytes(size)

    # -- CONNECT ----------------------------------------------------------------------
    def connect(self) -> bytes:
        r, p = self.rng, self.pools
        v = self.version = r.choice(VERSIONS)
        kind = r.random()
        if kind < 0.45:
            client_id, clean = f"{p.prefix}-p{r.randrange(p.persistent_ids)}", False
        elif kind < 0.9:
            client_id, clean = f"{p.prefix}-c{r.getrandbits(48):012x}", True
        elif kind < 0.95 and v > 3:  # 3.1 has no empty ids [MQTT-3.1.3-8]
            client_id, clean = "", True
        else:  # long; past max_client_id_size some are refused
            client_id, clean = f"{p.prefix}-L" + "x" * r.randrange(20, 130), True
        flags = 0x02 if clean else 0x00
        if v == 5 and not clean:  # persistence is the expiry; clean_start may still wipe
            flags = 0x02 if r.random() < 0.3 else 0x00
        will = b""
        if r.random() < 0.3:
            wqos = r.randrange(3)
            flags |= 0x04 | (wqos << 3) | (0x20 if r.random() < 0.3 else 0)
            wprops = props(*self.will_props()) if v == 5 else b""
            will = wprops + string(self.topic()) + string(self.payload()[:256])
        creds = b""
        if r.random() < 0.2:
            flags |= 0x80
            creds += string(f"u{r.randrange(10)}")
            if r.random() < 0.7:
                flags |= 0x40
                creds += string(r.randbytes(r.randrange(12)))
        name = "MQIsdp" if v == 3 else "MQTT"
        keepalive = r.choice((0, 1, 5, 60, 600, 65535))
        body = string(name) + bytes((v, flags)) + u16(keepalive)
        if v == 5:
            body += props(*self.connect_props(clean, client_id))
        return frame(0x10, body + string(client_id) + will + creds)

    def connect_props(self, clean: bool, client_id: str) -> list[bytes]:
        r = self.rng
        out: list[bytes] = []
        if not clean or client_id.startswith(f"{self.pools.prefix}-p"):
            out.append(prop(0x11, r.choice((10, 60, 3600, 0xFFFFFFFF))))
        elif r.random() < 0.2:
            out.append(prop(0x11, 0))
        if r.random() < 0.3:
            out.append(prop(0x21, r.randrange(1, 65536)))
        if r.random() < 0.2:
            out.append(prop(0x27, r.choice((128, 1024, 65536, 268435455))))
        if r.random() < 0.3:
            out.append(prop(0x22, r.randrange(0, 20)))
        if r.random() < 0.1:
            out.append(prop(0x17, r.randrange(2)))
            out.append(prop(0x19, r.randrange(2)))
        if r.random() < 0.1:
            out.append(prop(0x26, ("k", "v" * r.randrange(10))))
        if r.random() < 0.03:
            out.append(prop(0x15, "SCRAM-SHA-1"))
        return out

    def will_props(self) -> list[bytes]:
        r = self.rng
        out: list[bytes] = []
        if r.random() < 0.3:
            out.append(prop(0x18, r.choice((0, 1, 5))))
        if r.random() < 0.2:
            out.append(prop(0x02, r.choice((1, 60))))
        if r.random() < 0.2:
            out.append(prop(0x01, 1))
            out.append(prop(0x03, "text/plain"))
        return out

    # -- after CONNECT ----------------------------------------------------------------
    def publish(self) -> bytes:
        r = self.rng
        qos = r.choice((0, 0, 1, 1, 2))
        retain = r.random() < 0.15
        first = 0x30 | (qos << 1) | int(retain)
        topic = self.topic()
        head = string(topic) + (u16(self.packet_id()) if qos else b"")
        if self.version == 5:
            extra = []
            if r.random() < 0.1:
                extra.append(prop(0x23, r.randrange(1, 5)))
            if r.random() < 0.1:
                extra.append(prop(0x02, r.choice((1, 30))))
            if r.random() < 0.05:
                extra += [prop(0x08, self.topic()), prop(0x09, r.randbytes(4))]
            head += props(*extra)
        return frame(first, head + self.payload())

    def subscribe(self) -> bytes:
        r = self.rng
        body = u16(self.packet_id())
        if self.version == 5:
            body += props(prop(0x0B, r.randrange(1, 1000))) if r.random() < 0.2 else props()
        for _ in range(r.randrange(1, 4)):
            flt = self.topic_filter()
            options = r.randrange(3)
            if self.version == 5:
                options |= r.randrange(16) << 2 & 0x2C  # no local, retain as published, handling
                if flt.startswith("$share/"):
                    options &= ~0x04  # no local is a protocol error there [MQTT-3.8.3-4]
            body += string(flt) + bytes((options,))
        return frame(0x82, body)

    def unsubscribe(self) -> bytes:
        body = u16(self.packet_id()) + (props() if self.version == 5 else b"")
        for _ in range(self.rng.randrange(1, 3)):
            body += string(self.topic_filter())
        return frame(0xA2, body)

    def ack(self) -> bytes:
        """PUBACK, PUBREC, PUBREL or PUBCOMP for some packet id, maybe one never used."""
        first = self.rng.choice((0x40, 0x50, 0x62, 0x70))
        body = u16(self.rng.randrange(1, 70))
        if self.version == 5 and self.rng.random() < 0.5:
            codes = (0x00, 0x10, 0x80) if first < 0x60 else (0x00, 0x92)
            body += bytes((self.rng.choice(codes),)) + props()
        return frame(first, body)

    def disconnect(self) -> bytes:
        if self.version != 5 or self.rng.random() < 0.5:
            return b"\xe0\x00"
        reason = self.rng.choice((0x00, 0x04, 0x80))
        extra = [prop(0x11, 0)] if self.rng.random() < 0.2 else []
        return frame(0xE0, bytes((reason,)) + props(*extra))

    def auth(self) -> bytes:
        return frame(0xF0, bytes((0x18,)) + props(prop(0x15, "SCRAM-SHA-1")))

    def sequence(self) -> list[bytes]:
        """CONNECT, 0-6 packets a client may send after it, maybe DISCONNECT."""
        r = self.rng
        out = [self.connect()]
        for _ in range(r.randrange(7)):
            roll = r.random()
            if roll < 0.45:
                out.append(self.publish())
            elif roll < 0.7:
                out.append(self.subscribe())
            elif roll < 0.78:
                out.append(self.unsubscribe())
            elif roll < 0.88:
                out.append(self.ack())
            elif roll < 0.95:
                out.append(b"\xc0\x00")
            elif self.version == 5:
                out.append(self.auth())
        if r.random() < 0.5:
            out.append(self.disconnect())
        return out


__all__ = ["Generator", "Pools"]
