"""PROXY protocol v1 and v2 headers (HAProxy's spec), sans-IO.

A load balancer in front of the broker (HAProxy, an AWS NLB, Kubernetes ingress) opens
the TCP connection itself, so the broker would see the balancer's address as every
client's. With ``listener.tcp.proxy_protocol = on`` each connection must start with a
PROXY header naming the real client; the listener reads it before any MQTT byte and uses
its source address as the peer (logs, ``client.connected``, the registry).

``parse(buf)`` returns None while the header is incomplete, else a :class:`Header`
(bytes consumed, and the source address, or None when the header carries none: v1
``UNKNOWN``, v2 ``LOCAL`` — a balancer's health check — or a family without one); it
raises :class:`ProxyHeaderError` for anything else, including a connection that starts
with MQTT instead. Worked example: ``PROXY TCP4 203.0.113.7 10.0.0.1 51000 1883\\r\\n``
-> ``Header(49, ("203.0.113.7", 51000))``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from services.listener.mqtt.errors import MalformedPacket

V1_PREFIX = b"PROXY "
V1_MAX = 107  # the longest v1 line, CRLF included
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_MAX = 16 + 1024  # fixed part + addresses and TLVs we are willing to buffer


class ProxyHeaderError(MalformedPacket):
    """Not a valid PROXY header: the stream is malformed from its first byte, and the
    connection ends as any malformed stream before CONNECT does (``client.rejected``)."""


@dataclass(frozen=True, slots=True)
class Header:
    consumed: int
    source: tuple[str, int] | None


class ProxyReader:
    """Gathers a connection's first bytes until its PROXY header is complete."""

    __slots__ = ("buf", "rest")

    def __init__(self) -> None:
        self.buf = b""
        self.rest = b""  # what followed the header (MQTT), once it is complete

    def feed(self, data: bytes) -> Header | None:
        """The header once complete (then ``rest`` holds what followed it), else None."""
        self.buf += data
        header = parse(self.buf)
        if header is not None:
            self.rest = self.buf[header.consumed :]
            self.buf = b""
        return header


def parse(buf: bytes) -> Header | None:
    if buf[:1] == b"P":
        if not V1_PREFIX.startswith(buf[:6]):
            raise ProxyHeaderError("no PROXY header")
        return _v1(buf)
    if buf[:1] == b"\r":
        if not V2_SIGNATURE.startswith(buf[:12]):
            raise ProxyHeaderError("no PROXY header")
        return _v2(buf)
    if buf:
        raise ProxyHeaderError("no PROXY header")
    return None


def _v1(buf: bytes) -> Header | None:
    end = buf.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        if len(buf) >= V1_MAX:
            raise ProxyHeaderError("PROXY v1 line longer than 107 bytes")
        return None
    try:
        line = buf[:end].decode("ascii")
    except UnicodeDecodeError:
        raise ProxyHeaderError("PROXY v1 line is not ASCII") from None
    parts = line.split(" ")
    if len(parts) >= 2 and parts[1] == "UNKNOWN":
        return Header(end + 2, None)
    if len(parts) != 6 or parts[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"bad PROXY v1 line {line[:60]!r}")
    _, proto, src, _dst, sport, _dport = parts
    try:
        addr = ipaddress.ip_address(src)
        port = int(sport)
    except ValueError:
        raise ProxyHeaderError(f"bad PROXY v1 address in {line[:60]!r}") from None
    if addr.version != (4 if proto == "TCP4" else 6) or not 0 <= port <= 65535:
        raise ProxyHeaderError(f"bad PROXY v1 address in {line[:60]!r}")
    return Header(end + 2, (str(addr), port))


def _v2(buf: bytes) -> Header | None:
    if len(buf) < 16:
        return None
    ver_cmd, fam = buf[12], buf[13]
    length = int.from_bytes(buf[14:16], "big")
    if ver_cmd >> 4 != 2:
        raise ProxyHeaderError(f"PROXY v2 header with version {ver_cmd >> 4}")
    command = ver_cmd & 0x0F
    if command > 1:
        raise ProxyHeaderError(f"PROXY v2 header with command {command}")
    if 16 + length > V2_MAX:
        raise ProxyHeaderError(f"PROXY v2 header of {16 + length} bytes")
    if len(buf) < 16 + length:
        return None
    consumed = 16 + length
    if command == 0:  # LOCAL: the balancer's own connection (health check)
        return Header(consumed, None)
    body = buf[16:consumed]
    family, transport = fam >> 4, fam & 0x0F
    if transport != 1:  # only TCP (STREAM) makes sense for MQTT
        if family == 0 and transport == 0:  # UNSPEC: keep the socket's address
            return Header(consumed, None)
        raise ProxyHeaderError(f"PROXY v2 header for transport {transport}")
    if family == 1:
        if length < 12:
            raise ProxyHeaderError("PROXY v2 IPv4 addresses cut short")
        return Header(consumed, (str(ipaddress.IPv4Address(body[0:4])), _port(body, 8)))
    if family == 2:
        if length < 36:
            raise ProxyHeaderError("PROXY v2 IPv6 addresses cut short")
        return Header(consumed, (str(ipaddress.IPv6Address(body[0:16])), _port(body, 32)))
    return Header(consumed, None)  # UNSPEC or UNIX: no IP address to report


def _port(body: bytes, at: int) -> int:
    return int.from_bytes(body[at : at + 2], "big")
