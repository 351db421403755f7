"""A raw-socket MQTT client for byte-level conformance tests against a running listener.

Theory of operation: ``RawClient`` owns one blocking TCP socket and one codec
``Decoder`` fed with what the broker sends, so every inbound packet is checked by the
same parser the broker uses on its own input (a malformed packet *from the broker* fails
the test loudly). Nothing is hidden: the test writes each packet (``send``) or each
byte (``send_raw``) and reads each answer (``recv``/``expect``). Every wait is bounded
by a timeout; a timeout is an ``AssertionError`` that says what was awaited.

``connected()`` is the one convenience: TCP connect, CONNECT, CONNACK accepted. Tests
of CONNECT itself use ``RawClient.connect`` and send their own CONNECT.

Worked example::

    sub, _ = connected(port, "sub-1")
    sub.subscribe("a/+", qos=1)
    pub, _ = connected(port, "pub-1")
    pub.send(Publish("a/b", b"x"))
    assert sub.expect(Publish).payload == b"x"
"""

from __future__ import annotations

import errno
import socket
import time
from collections import deque
from typing import TypeVar

from services.listener.mqtt import Decoder, MQTTError, encode
from services.listener.mqtt.types import (
    NO_PROPERTIES,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)

__all__ = ["Closed", "RawClient", "connected", "protocol_name"]

P = TypeVar("P", bound=Packet)

TIMEOUT = 5.0
"""Default wait for an answer the broker owes at once (generous: 2 shared cores)."""

QUIET = 0.5
"""Default wait when checking that nothing arrives."""

_RESET_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})


class Closed(AssertionError):
    """The broker closed the connection while the test awaited a packet."""


def protocol_name(version: int) -> str:
    """3.1 says ``MQIsdp``; 3.1.1 and 5.0 say ``MQTT`` [MQTT-3.1.2-1]."""
    return "MQIsdp" if version == 3 else "MQTT"


class RawClient:
    """One blocking TCP connection to the broker with an MQTT decoder on its input."""

    def __init__(self, sock: socket.socket, version: int = 4) -> None:
        self.sock = sock
        self.version = version
        self.decoder = Decoder()
        self.decoder.protocol_version = version
        self.pending: deque[Packet] = deque()
        self.closed = False
        self.next_id = 1

    @classmethod
    def connect(
        cls,
        port: int,
        version: int = 4,
        timeout: float = TIMEOUT,
        rcvbuf: int | None = None,
    ) -> RawClient:
        """Open the TCP connection only (no CONNECT). ``rcvbuf`` shrinks SO_RCVBUF
        before connecting, for clients that must look slow to the broker."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.connect(("127.0.0.1", port))
        return cls(sock, version)

    # -- output ---------------------------------------------------------------------------

    def send(self, packet: Packet, version: int | None = None) -> None:
        """Encode ``packet`` for ``version`` (default: this client's) and send it."""
        if isinstance(packet, Connect):
            self.version = packet.protocol_version
            self.decoder.protocol_version = packet.protocol_version
        self.send_raw(encode(packet, self.version if version is None else version))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def packet_id(self) -> int:
        """A fresh packet identifier (1..65535, wrapping)."""
        pid = self.next_id
        self.next_id = pid % 65535 + 1
        return pid

    # -- input ----------------------------------------------------------------------------

    def _fill(self, deadline: float) -> bool:
        """Read once from the socket into ``pending``; False on timeout. Raises ``Closed``
        on EOF or reset."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if self.closed:
            raise Closed("connection already closed by the broker")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError as exc:
            if exc.errno in _RESET_ERRNOS:
                self.closed = True
                raise Closed(f"connection reset: {exc}") from None
            raise
        if not data:
            self.closed = True
            raise Closed("connection closed by the broker (EOF)")
        try:
            self.pending.extend(self.decoder.feed(data))
        except MQTTError as exc:
            raise AssertionError(f"broker sent a malformed packet: {exc.message}") from exc
        return True

    def recv(self, timeout: float = TIMEOUT) -> Packet:
        """The next packet from the broker; AssertionError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.pending:
            if not self._fill(deadline):
                raise AssertionError(f"no packet from the broker within {timeout}s")
        return self.pending.popleft()

    def expect(self, type_: type[P], timeout: float = TIMEOUT) -> P:
        """The next packet, which must be a ``type_``."""
        pkt = self.recv(timeout)
        if not isinstance(pkt, type_):
            raise AssertionError(f"expected {type_.__name__}, got {pkt!r}")
        return pkt

    def expect_closed(self, timeout: float = TIMEOUT) -> None:
        """The broker closes the connection (EOF or reset) without sending anything."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                if self.pending:
                    raise AssertionError(f"expected close, got {self.pending[0]!r}")
                if not self._fill(deadline):
                    raise AssertionError(f"connection still open after {timeout}s")
        except Closed:
            if self.pending:
                raise AssertionError(f"expected close, got {self.pending[0]!r}") from None
            self.sock.close()

    def no_packet(self, timeout: float = QUIET) -> None:
        """Nothing arrives for ``timeout`` seconds, and the connection stays open."""
        deadline = time.monotonic() + timeout
        while self._fill(deadline):
            if self.pending:
                raise AssertionError(f"expected silence, got {self.pending[0]!r}")

    def collect(self, timeout: float = QUIET) -> list[Packet]:
        """Every packet that arrives within ``timeout`` seconds (for "one or more copies"),
        or until the broker closes the connection (``closed`` tells)."""
        deadline = time.monotonic() + timeout
        try:
            while self._fill(deadline):
                pass
        except Closed:
            pass
        out = list(self.pending)
        self.pending.clear()
        return out

    def expect_bytes(self, expected: bytes, timeout: float = TIMEOUT) -> None:
        """The broker's next bytes are exactly ``expected`` (mosquitto-style byte check)."""
        assert not self.pending and not self.decoder.buffered, "packets already decoded"
        deadline = time.monotonic() + timeout
        got = b""
        while len(got) < len(expected):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(len(expected) - len(got))
            except TimeoutError:
                break
            except OSError as exc:
                if exc.errno not in _RESET_ERRNOS:
                    raise
                chunk = b""
            if not chunk:
                self.closed = True
                break
            got += chunk
        assert got == expected, f"expected bytes {expected.hex(' ')}, got {got.hex(' ')}"

    def close(self) -> None:
        self.sock.close()

    # -- conveniences over send/expect ---------------------------------------------------

    def subscribe(
        self,
        topic_filter: str,
        qos: int = 0,
        properties: Properties = NO_PROPERTIES,
        **options: bool | int,
    ) -> Suback:
        """SUBSCRIBE one filter and return its SUBACK (packet id checked)."""
        pid = self.packet_id()
        sub = Subscription(topic_filter, qos, **options)  # type: ignore[arg-type]
        self.send(Subscribe(pid, (sub,), properties))
        suback = self.expect(Suback)
        assert suback.packet_id == pid, "SUBACK must echo the packet id [MQTT-3.8.4-2]"
        return suback

    def unsubscribe(self, *filters: str) -> Unsuback:
        pid = self.packet_id()
        self.send(Unsubscribe(pid, filters))
        unsuback = self.expect(Unsuback)
        assert unsuback.packet_id == pid, "UNSUBACK must echo the packet id [MQTT-3.10.4-4]"
        return unsuback

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        properties: Properties = NO_PROPERTIES,
    ) -> None:
        """PUBLISH and complete the publisher's side of the QoS flow."""
        if not qos:
            self.send(Publish(topic, payload, 0, retain, properties=properties))
            return
        pid = self.packet_id()
        self.send(Publish(topic, payload, qos, retain, packet_id=pid, properties=properties))
        if qos == 1:
            assert self.expect(Puback).packet_id == pid
            return
        assert self.expect(Pubrec).packet_id == pid
        self.send(Pubrel(pid))
        assert self.expect(Pubcomp).packet_id == pid

    def receive(self, timeout: float = TIMEOUT) -> Publish:
        """The next PUBLISH, acknowledged as its QoS asks (QoS 2: PUBREC, PUBREL, PUBCOMP)."""
        pub = self.expect(Publish, timeout)
        if pub.qos == 1:
            assert pub.packet_id is not None
            self.send(Puback(pub.packet_id))
        elif pub.qos == 2:
            assert pub.packet_id is not None
            self.send(Pubrec(pub.packet_id))
            self._await_pubrel(pub.packet_id, timeout)
            self.send(Pubcomp(pub.packet_id))
        return pub

    def _await_pubrel(self, packet_id: int, timeout: float) -> None:
        """Read up to the PUBREL for ``packet_id``; packets before it (further PUBLISHes
        of the window) stay pending, in order."""
        skipped: list[Packet] = []
        while True:
            pkt = self.recv(timeout)
            if isinstance(pkt, Pubrel) and pkt.packet_id == packet_id:
                break
            skipped.append(pkt)
        self.pending.extendleft(reversed(skipped))

    def disconnect(self, reason_code: int = 0) -> None:
        """A normal DISCONNECT, then wait for the broker to close the socket."""
        self.send(Disconnect(reason_code))
        self.expect_closed()
        self.close()


def connected(
    port: int,
    client_id: str,
    version: int = 4,
    *,
    clean: bool = True,
    keepalive: int = 60,
    will: Will | None = None,
    username: str | None = None,
    password: bytes | None = None,
    properties: Properties = NO_PROPERTIES,
    rcvbuf: int | None = None,
) -> tuple[RawClient, Connack]:
    """TCP connect, CONNECT, and a CONNACK that must accept the connection."""
    client = RawClient.connect(port, version, rcvbuf=rcvbuf)
    client.send(
        Connect(
            protocol_name(version),
            version,
            clean,
            keepalive,
            client_id,
            will,
            username,
            password,
            properties,
        )
    )
    connack = client.expect(Connack)
    assert connack.reason_code == 0, f"CONNECT of {client_id!r} refused: {connack!r}"
    return client, connack
