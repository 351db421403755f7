"""A small asyncio MQTT client (3.1.1 and 5.0) for the soak: cheap enough to run a thousand.

It speaks only what the soak needs (CONNECT, SUBSCRIBE, UNSUBSCRIBE, PUBLISH QoS 0/1,
PUBACK, DISCONNECT, and abrupt close) and keeps no state beyond one connection. It is
written apart from the broker's codec on purpose: a soak that encoded with the code under
test would not notice the codec agreeing with itself. One ``asyncio.Protocol`` per
connection and no task of its own: a full-featured client (paho under aiomqtt, gmqtt)
costs several times more per packet, and here the client shares two cores with the broker.

Incoming PUBLISH packets go to ``on_message(topic, payload, qos, retain)`` and are
acknowledged at once (QoS 1); replies the caller waits for (CONNACK, SUBACK, UNSUBACK,
PUBACK) resolve futures keyed by packet type and id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

CONNACK, PUBLISH, PUBACK, SUBACK, UNSUBACK, PINGRESP, DISCONNECT = 2, 3, 4, 9, 11, 13, 14
SESSION_EXPIRY = 0x11  # MQTT 5 property id (four-byte integer)

MessageHandler = Callable[[str, bytes, int, bool], None]


class MqttError(Exception):
    """The broker refused, closed, or sent what the soak did not expect."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _str(s: str) -> bytes:
    raw = s.encode()
    return len(raw).to_bytes(2, "big") + raw


def _frame(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def _props(version: int, props: bytes = b"") -> bytes:
    return _varint(len(props)) + props if version >= 5 else b""


def connect_packet(client_id: str, version: int, clean: bool, expiry: int) -> bytes:
    """CONNECT; ``expiry`` is the MQTT 5 session expiry interval (ignored for 3.1.1)."""
    props = b""
    if version >= 5 and expiry:
        props = bytes([SESSION_EXPIRY]) + expiry.to_bytes(4, "big")
    flags = 0x02 if clean else 0x00
    head = _str("MQTT") + bytes([version, flags]) + (60).to_bytes(2, "big")
    return _frame(0x10, head + _props(version, props) + _str(client_id))


def subscribe_packet(pid: int, filters: list[str], qos: int, version: int) -> bytes:
    body = pid.to_bytes(2, "big") + _props(version)
    body += b"".join(_str(f) + bytes([qos]) for f in filters)
    return _frame(0x82, body)


def unsubscribe_packet(pid: int, filters: list[str], version: int) -> bytes:
    body = pid.to_bytes(2, "big") + _props(version) + b"".join(_str(f) for f in filters)
    return _frame(0xA2, body)


def publish_packet(
    topic: str, payload: bytes, qos: int, retain: bool, pid: int, version: int
) -> bytes:
    body = _str(topic) + (pid.to_bytes(2, "big") if qos else b"") + _props(version) + payload
    return _frame(0x30 | (qos << 1) | int(retain), body)


def puback_packet(pid: int) -> bytes:
    return b"\x40\x02" + pid.to_bytes(2, "big")


DISCONNECT_PACKET = b"\xe0\x00"


def _read_varint(data: bytes | bytearray, pos: int) -> tuple[int, int] | None:
    """(value, next position), or None while the bytes are not all there yet."""
    value, shift = 0, 0
    for i in range(4):
        if pos + i >= len(data):
            return None
        byte = data[pos + i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos + i + 1
        shift += 7
    raise MqttError("malformed remaining length")


class Connection(asyncio.Protocol):
    """One MQTT connection. ``connect()`` opens it; the methods wait for their replies."""

    def __init__(self, version: int, on_message: MessageHandler) -> None:
        self.version = version
        self.on_message = on_message
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiting: dict[tuple[int, int], asyncio.Future[bytes]] = {}
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.next_pid = 0
        self.eof_sent = False  # after DISCONNECT: nothing more may be written

    # -- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            if len(self.buf) < 2:
                return
            head = _read_varint(self.buf, 1)
            if head is None:
                return
            length, start = head
            end = start + length
            if len(self.buf) < end:
                return
            first, body = self.buf[0], bytes(self.buf[start:end])
            del self.buf[:end]
            self._packet(first >> 4, first & 0x0F, body)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(MqttError("connection closed by the broker"))
        self.waiting.clear()

    # -- inbound ---------------------------------------------------------------------
    def _packet(self, ptype: int, flags: int, body: bytes) -> None:
        if ptype == PUBLISH:
            self._publish(flags, body)
        elif ptype == CONNACK:
            self._resolve((CONNACK, 0), body)
        elif ptype in (PUBACK, SUBACK, UNSUBACK):
            self._resolve((ptype, int.from_bytes(body[:2], "big")), body[2:])
        elif ptype == DISCONNECT:
            reason = body[0] if body else 0
            self._fail(MqttError(f"DISCONNECT from the broker, reason 0x{reason:02x}"))
        elif ptype != PINGRESP:
            self._fail(MqttError(f"unexpected packet type {ptype}"))

    def _publish(self, flags: int, body: bytes) -> None:
        qos, retain = (flags >> 1) & 3, bool(flags & 1)
        tlen = int.from_bytes(body[:2], "big")
        topic = body[2 : 2 + tlen].decode()
        pos, pid = 2 + tlen, 0
        if qos:
            pid, pos = int.from_bytes(body[pos : pos + 2], "big"), pos + 2
        if self.version >= 5:
            props = _read_varint(body, pos)
            if props is None:
                raise MqttError("truncated PUBLISH properties")
            pos = props[1] + props[0]
        self.on_message(topic, body[pos:], qos, retain)
        if qos and self.transport is not None and not self.eof_sent:
            self.transport.write(puback_packet(pid))

    def _resolve(self, key: tuple[int, int], body: bytes) -> None:
        fut = self.waiting.pop(key, None)
        if fut is None:
            self._fail(MqttError(f"reply nobody waits for: {key}"))
        elif not fut.done():
            fut.set_result(body)

    def _fail(self, exc: MqttError) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(exc)
        self.waiting.clear()
        self.abort()

    # -- outbound --------------------------------------------------------------------
    def _pid(self) -> int:
        self.next_pid = self.next_pid % 0xFFFF + 1
        return self.next_pid

    async def _request(self, key: tuple[int, int], packet: bytes, timeout: float) -> bytes:
        if self.transport is None or self.transport.is_closing():
            raise MqttError("not connected")
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting[key] = fut
        self.transport.write(packet)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.waiting.pop(key, None)
            raise MqttError(f"no reply to packet type {key[0] - 1} within {timeout}s") from None

    async def handshake(self, client_id: str, clean: bool, expiry: int, timeout: float) -> bool:
        """CONNECT → CONNACK; returns session-present, raises on refusal."""
        packet = connect_packet(client_id, self.version, clean, expiry)
        body = await self._request((CONNACK, 0), packet, timeout)
        if len(body) < 2 or body[1] != 0:
            self.abort()
            raise MqttError(f"CONNACK refused: {body[:2].hex()}")
        return bool(body[0] & 1)

    async def subscribe(self, filters: list[str], qos: int, timeout: float) -> None:
        pid = self._pid()
        packet = subscribe_packet(pid, filters, qos, self.version)
        body = await self._request((SUBACK, pid), packet, timeout)
        codes = body[_props_len(body, self.version) :]
        if any(code >= 0x80 for code in codes):
            raise MqttError(f"SUBACK refused: {codes.hex()}")

    async def unsubscribe(self, filters: list[str], timeout: float) -> None:
        pid = self._pid()
        await self._request(
            (UNSUBACK, pid), unsubscribe_packet(pid, filters, self.version), timeout
        )

    def publish0(self, topic: str, payload: bytes, retain: bool = False) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(publish_packet(topic, payload, 0, retain, 0, self.version))

    async def publish1(self, topic: str, payload: bytes, retain: bool, timeout: float) -> None:
        """QoS 1 PUBLISH; returns once the PUBACK says the broker took it."""
        pid = self._pid()
        packet = publish_packet(topic, payload, 1, retain, pid, self.version)
        body = await self._request((PUBACK, pid), packet, timeout)
        if body and body[0] >= 0x80:
            raise MqttError(f"PUBACK refused: 0x{body[0]:02x}")

    async def disconnect(self, timeout: float, end_session: bool = False) -> None:
        """DISCONNECT, then wait until the broker closes the socket (as a real client would
        not, but the soak wants the cycle over before the next one starts).
        ``end_session`` sets an MQTT 5 session expiry of 0: the session ends here."""
        if self.transport is None or self.transport.is_closing():
            return
        if end_session and self.version >= 5:
            props = bytes([SESSION_EXPIRY]) + (0).to_bytes(4, "big")
            self.transport.write(_frame(0xE0, b"\x00" + _props(self.version, props)))
        else:
            self.transport.write(DISCONNECT_PACKET)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.eof_sent = True
        try:
            await asyncio.wait_for(asyncio.shield(self.closed), timeout)
        except TimeoutError:
            self.abort()
            raise MqttError("the broker did not close after DISCONNECT") from None

    def abort(self) -> None:
        """Close without DISCONNECT, as a client whose network went away."""
        if self.transport is not None:
            self.transport.abort()


def _props_len(body: bytes, version: int) -> int:
    """Where an ack's reason codes start, after its MQTT 5 properties."""
    if version < 5:
        return 0
    head = _read_varint(body, 0)
    if head is None:
        raise MqttError("truncated ack properties")
    return head[1] + head[0]


async def open_connection(
    host: str, port: int, version: int, on_message: MessageHandler, timeout: float
) -> Connection:
    loop = asyncio.get_running_loop()
    _, conn = await asyncio.wait_for(
        loop.create_connection(lambda: Connection(version, on_message), host, port), timeout
    )
    return conn
