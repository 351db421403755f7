"""The valid round trip run between the garbage: the service a real client expects.

CONNECT, CONNACK accepted; SUBSCRIBE at QoS 1, SUBACK granting it; PUBLISH QoS 1 to that
topic, then both the PUBACK and the message itself, which is acknowledged; DISCONNECT,
and the broker closes. Any other outcome within the timeout is a failure, described by
the step it stopped at. Clean round trips use a fresh client id and topic; persistent
ones take an id from a small pool (each with its own topic), so the sessions and
subscriptions they leave are bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.fuzz.conn import Conn
from bench.fuzz.wire import frame, prop, props, string, u16

PERSISTENT_POOL = 16


@dataclass(frozen=True, slots=True)
class Plan:
    n: int
    version: int  # 4 or 5
    persistent: bool
    client_id: str
    topic: str

    @classmethod
    def of(cls, seed: int, n: int) -> Plan:
        version = 5 if n % 2 else 4
        if n % 3 == 2:
            k = n // 3 % PERSISTENT_POOL
            return cls(n, version, True, f"fzrt-p{k}", f"fzrt/p{k}")
        return cls(n, version, False, f"fzrt-{seed}-{n}", f"fzrt/{seed}/{n}")


class Failed(Exception):
    pass


def _connect(p: Plan) -> bytes:
    flags = 0x00 if p.persistent and p.version == 4 else 0x02
    body = string("MQTT") + bytes((p.version, flags)) + u16(60)
    if p.version == 5:
        body += props(prop(0x11, 600)) if p.persistent else props()
    return frame(0x10, body + string(p.client_id))


def _v5_props_end(body: bytes, at: int) -> int:
    length, shift = 0, 0
    while True:
        byte = body[at]
        at += 1
        length |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return at + length
        shift += 7


async def _expect(conn: Conn, kind: int, step: str, timeout: float) -> bytes:
    try:
        first, body = await conn.next_frame(timeout)
    except TimeoutError:
        raise Failed(f"{step}: nothing within {timeout:.0f}s") from None
    except ConnectionError as exc:
        raise Failed(f"{step}: {exc}") from None
    if first >> 4 != kind:
        raise Failed(f"{step}: got packet type {first >> 4} ({body[:16].hex()})")
    return body


async def run(host: str, port: int, seed: int, n: int, timeout: float) -> tuple[Plan, str]:
    """One round trip; the failure's description, or "" when it went through."""
    plan = Plan.of(seed, n)
    try:
        conn = await Conn.open(host, port, timeout)
    except (OSError, TimeoutError) as exc:
        return plan, f"tcp connect: {exc!r}"
    try:
        await _steps(conn, plan, timeout)
    except Failed as exc:
        return plan, str(exc)
    finally:
        conn.close()
    return plan, ""


async def _steps(conn: Conn, p: Plan, timeout: float) -> None:
    v5 = p.version == 5
    conn.write(_connect(p))
    body = await _expect(conn, 2, "connack", timeout)
    if len(body) < 2 or body[1] != 0:
        raise Failed(f"connack: refused ({body.hex()})")
    sub = u16(1) + (props() if v5 else b"") + string(p.topic) + b"\x01"
    conn.write(frame(0x82, sub))
    body = await _expect(conn, 9, "suback", timeout)
    codes = body[_v5_props_end(body, 2) :] if v5 else body[2:]
    if codes != b"\x01":
        raise Failed(f"suback: granted {codes.hex()}")
    payload = f"rt {p.n}".encode()
    pub = string(p.topic) + u16(2) + (props() if v5 else b"") + payload
    conn.write(frame(0x32, pub))
    acked = delivered = False
    while not (acked and delivered):
        first, body = await _next(conn, "puback/publish", timeout)
        if first >> 4 == 4:
            if body[:2] != u16(2) or (len(body) > 2 and body[2] >= 0x80):
                raise Failed(f"puback: {body.hex()}")
            acked = True
        elif first >> 4 == 3:
            delivered = delivered or _check_publish(conn, p, first, body, payload)
        else:
            raise Failed(f"puback/publish: got packet type {first >> 4}")
    conn.write(b"\xe0\x00")
    if not await conn.wait_closed(timeout):
        raise Failed(f"disconnect: still open after {timeout:.0f}s")


async def _next(conn: Conn, step: str, timeout: float) -> tuple[int, bytes]:
    try:
        return await conn.next_frame(timeout)
    except TimeoutError:
        raise Failed(f"{step}: nothing within {timeout:.0f}s") from None
    except ConnectionError as exc:
        raise Failed(f"{step}: {exc}") from None


def _check_publish(conn: Conn, p: Plan, first: int, body: bytes, payload: bytes) -> bool:
    """Acknowledge a delivery; True when it is this round trip's message."""
    qos = first >> 1 & 3
    n = int.from_bytes(body[:2], "big")
    topic = body[2 : 2 + n].decode("utf-8", "replace")
    at = 2 + n
    pid = b""
    if qos:
        pid, at = body[at : at + 2], at + 2
    if p.version == 5:
        at = _v5_props_end(body, at)
    if qos == 1:
        conn.write(frame(0x40, pid))
    elif qos == 2:
        raise Failed(f"publish: delivered at QoS 2 ({topic})")
    if topic != p.topic:
        raise Failed(f"publish: topic {topic!r}, expected {p.topic!r}")
    return body[at:] == payload
