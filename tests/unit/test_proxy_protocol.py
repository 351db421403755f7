"""PROXY protocol v1/v2 header parsing (HAProxy's spec), fed whole and byte by byte."""

from __future__ import annotations

import pytest

from services.listener.proxy_protocol import V2_SIGNATURE, Header, ProxyHeaderError, parse

CONNECT = b"\x10\x10\x00\x04MQTT\x04\x02\x00\x3c\x00\x04abcd"


def v2(command: int, fam: int, body: bytes) -> bytes:
    return V2_SIGNATURE + bytes([0x20 | command, fam]) + len(body).to_bytes(2, "big") + body


V1_TCP4 = b"PROXY TCP4 203.0.113.7 10.0.0.1 51000 1883\r\n"
V2_TCP4 = v2(
    1, 0x11, bytes([198, 51, 100, 9, 10, 0, 0, 1]) + (41000).to_bytes(2, "big") + b"\x07\x5b"
)
V2_TCP6 = v2(
    1,
    0x21,
    bytes.fromhex("20010db8000000000000000000000007")
    + bytes(16)
    + (51001).to_bytes(2, "big")
    + (1883).to_bytes(2, "big")
    + b"\x04\x00\x02ab",  # a TLV after the addresses: skipped
)


@pytest.mark.parametrize(
    ("header", "source"),
    [
        (V1_TCP4, ("203.0.113.7", 51000)),
        (b"PROXY TCP6 2001:db8::7 2001:db8::1 51000 1883\r\n", ("2001:db8::7", 51000)),
        (b"PROXY UNKNOWN\r\n", None),
        (b"PROXY UNKNOWN ffff::1 ffff::2 1 2\r\n", None),
        (V2_TCP4, ("198.51.100.9", 41000)),
        (V2_TCP6, ("2001:db8::7", 51001)),
        (v2(0, 0x00, b""), None),  # LOCAL: a health check from the balancer itself
        (v2(1, 0x00, b""), None),  # UNSPEC
        (v2(1, 0x31, bytes(216)), None),  # UNIX sockets: no IP address
    ],
)
def test_valid_headers_give_their_length_and_source(
    header: bytes, source: tuple[str, int] | None
) -> None:
    assert parse(header + CONNECT) == Header(len(header), source)
    for cut in range(len(header)):  # every shorter prefix asks for more
        assert parse(header[:cut]) is None


@pytest.mark.parametrize(
    "data",
    [
        CONNECT,  # the client spoke MQTT at once
        b"GET / HTTP/1.1\r\n",
        b"PROXI TCP4 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",
        b"PROXY TCP4 1.2.3.400 5.6.7.8 1 2\r\n",
        b"PROXY TCP4 2001:db8::7 5.6.7.8 1 2\r\n",  # v6 address announced as TCP4
        b"PROXY TCP4 1.2.3.4 5.6.7.8 70000 2\r\n",
        b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",
        b"PROXY " + b"x" * 120,  # no CRLF within 107 bytes
        b"PROXY TCP4 \xff\xfe 5.6.7.8 1 2\r\n",
        b"\r\n\r\n\x00\r\nQUIX\n" + bytes(4),
        V2_SIGNATURE + b"\x10\x11\x00\x00",  # version 1 in a v2 header
        V2_SIGNATURE + b"\x22\x11\x00\x00",  # command 2
        v2(1, 0x12, bytes(12)),  # UDP
        v2(1, 0x11, bytes(11)),  # IPv4 addresses cut short
        v2(1, 0x21, bytes(35)),
        V2_SIGNATURE + b"\x21\x11\xff\xff",  # 64 KiB of TLVs: more than we buffer
    ],
)
def test_anything_else_is_refused(data: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse(data)


def test_nothing_yet_is_not_an_error() -> None:
    assert parse(b"") is None
