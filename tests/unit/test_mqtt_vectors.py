"""Byte-exact wire vectors, worked out by hand from the MQTT 3.1.1 / 5.0 layouts.

Each vector is checked both ways: the bytes decode to the packet and the packet
encodes to exactly these bytes.
"""

from __future__ import annotations

import pytest

from services.listener.mqtt import _wire
from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.encoder import encode, encode_publish
from services.listener.mqtt.types import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Publish,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)

H = bytes.fromhex

VECTORS: list[tuple[str, int, str, Packet]] = [
    # 3.1.1 CONNECT: "MQTT", level 4, clean session, keep alive 60, empty client id
    ("connect-v4", 4, "10 0C 0004 4D515454 04 02 003C 0000", Connect("MQTT", 4, True, 60, "")),
    # 3.1 CONNECT: "MQIsdp", level 3, client id "ab"
    (
        "connect-v31",
        3,
        "10 10 0006 4D5149736470 03 02 003C 0002 6162",
        Connect("MQIsdp", 3, True, 60, "ab"),
    ),
    # 3.1.1 CONNECT with will (QoS 1, retain), user name and password
    (
        "connect-v4-full",
        4,
        "10 1B 0004 4D515454 04 EE 000A 0001 63 0001 77 0002 6279 0001 75 0002 7077",
        Connect("MQTT", 4, True, 10, "c", Will("w", b"by", 1, True), "u", b"pw"),
    ),
    # MQTT 5 CONNECT: Session Expiry Interval 10 as the only property
    (
        "connect-v5",
        5,
        "10 12 0004 4D515454 05 02 003C 05 11 0000000A 0000",
        Connect("MQTT", 5, True, 60, "", properties=Properties(session_expiry_interval=10)),
    ),
    ("connack-v4", 4, "20 02 00 00", Connack(False, 0)),
    ("connack-v4-present", 4, "20 02 01 00", Connack(True, 0)),
    ("connack-v4-refused", 4, "20 02 00 05", Connack(False, 5)),
    # MQTT 5 CONNACK: Receive Maximum 10, Maximum QoS 1 (the properties docstring example)
    (
        "connack-v5",
        5,
        "20 08 00 00 05 21000A 2401",
        Connack(False, 0, Properties(receive_maximum=10, maximum_qos=1)),
    ),
    ("connack-v5-refused", 5, "20 03 00 87 00", Connack(False, 0x87)),
    ("publish-qos0", 4, "30 05 0001 61 6869", Publish("a", b"hi")),
    ("publish-qos1", 4, "32 07 0001 61 000A 6869", Publish("a", b"hi", 1, False, False, 10)),
    (
        "publish-qos2-dup-retain",
        4,
        "3D 05 0001 61 FFFF",
        Publish("a", b"", 2, True, True, 0xFFFF),
    ),
    ("publish-v5-noprops", 5, "30 06 0001 61 00 6869", Publish("a", b"hi")),
    # MQTT 5 PUBLISH with a topic alias and an empty topic name
    (
        "publish-v5-alias",
        5,
        "30 07 0000 03 230001 78",
        Publish("", b"x", properties=Properties(topic_alias=1)),
    ),
    # Subscription Identifier 321 = C1 02, repeated (PUBLISH may carry several)
    (
        "publish-v5-subids",
        5,
        "30 0A 0001 61 05 0BC102 0B01 78",
        Publish("a", b"x", properties=Properties(subscription_identifiers=(321, 1))),
    ),
    ("puback-v4", 4, "40 02 0001", Puback(1)),
    ("puback-v5-short", 5, "40 02 0001", Puback(1)),
    ("puback-v5-reason", 5, "40 03 0001 10", Puback(1, 0x10)),
    (
        "puback-v5-props",
        5,
        "40 08 0001 00 04 1F 0001 78",
        Puback(1, 0, Properties(reason_string="x")),
    ),
    ("pubrel-v4", 4, "62 02 1234", Pubrel(0x1234)),
    ("subscribe-v4", 4, "82 06 0001 0001 23 01", Subscribe(1, (Subscription("#", 1),))),
    (
        "subscribe-v5-options",
        5,
        "82 09 0002 00 0003 612F2B 2E",  # QoS 2, no local, retain as published, RH 2
        Subscribe(2, (Subscription("a/+", 2, True, True, 2),)),
    ),
    ("suback-v4", 4, "90 04 0001 01 80", Suback(1, (1, 0x80))),
    ("suback-v5", 5, "90 05 0001 00 00 8F", Suback(1, (0, 0x8F))),
    ("unsubscribe-v4", 4, "A2 05 0003 0001 61", Unsubscribe(3, ("a",))),
    ("unsuback-v4", 4, "B0 02 0003", Unsuback(3)),
    ("unsuback-v5", 5, "B0 05 0003 00 00 11", Unsuback(3, (0, 0x11))),
    ("pingreq", 4, "C0 00", Pingreq()),
    ("pingresp", 5, "D0 00", Pingresp()),
    ("disconnect-v4", 4, "E0 00", Disconnect()),
    ("disconnect-v5-short", 5, "E0 00", Disconnect()),
    ("disconnect-v5-taken-over", 5, "E0 01 8E", Disconnect(0x8E)),
    (
        "disconnect-v5-expiry",
        5,
        "E0 07 00 05 1100000E10",
        Disconnect(0, Properties(session_expiry_interval=3600)),
    ),
    ("auth-v5-short", 5, "F0 00", Auth()),
    (
        "auth-v5-continue",
        5,
        "F0 08 18 06 150003 616263",
        Auth(0x18, Properties(authentication_method="abc")),
    ),
]


@pytest.mark.parametrize(
    ("version", "wire", "packet"),
    [v[1:] for v in VECTORS],
    ids=[v[0] for v in VECTORS],
)
def test_vector(version: int, wire: str, packet: Packet) -> None:
    data = H(wire)
    decoder = Decoder()
    decoder.protocol_version = version
    assert decoder.feed(data) == [packet]
    assert encode(packet, version) == data


def test_v4_encoder_drops_v5_only_fields() -> None:
    props = Properties(reason_string="ignored")
    assert encode(Puback(1, 0x10, props), 4) == H("40 02 0001")
    assert encode(Disconnect(0x8E, props), 4) == H("E0 00")
    assert encode(Unsuback(3, (0x11,), props), 4) == H("B0 02 0003")
    assert encode(Publish("a", b"hi", properties=Properties(topic_alias=2)), 4) == H(
        "30 05 0001 61 6869"
    )


def test_encode_publish_fast_path_matches_encode() -> None:
    props = Properties(message_expiry_interval=5, user_properties=(("k", "v"),))
    pkt = Publish("t/é", b"payload", 1, True, False, 42, props)
    for version in (3, 4, 5):
        raw = b"" if version < 5 else H("02 00000005 26 0001 6B 0001 76")
        fast = encode_publish("t/é".encode(), b"payload", 1, True, False, 42, raw, version)
        assert fast == encode(pkt, version)


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (0, "00"),
        (127, "7F"),
        (128, "8001"),
        (321, "C102"),
        (16_383, "FF7F"),
        (16_384, "808001"),
        (2_097_151, "FFFF7F"),
        (2_097_152, "80808001"),
        (268_435_455, "FFFFFF7F"),
    ],
)
def test_variable_byte_integer(value: int, wire: str) -> None:
    assert _wire.encode_varint(value) == H(wire)
    assert _wire.read_varint(H(wire), 0, len(H(wire))) == (value, len(H(wire)))


def test_remaining_length_two_bytes() -> None:
    payload = b"x" * 200
    data = encode(Publish("a", payload), 4)
    assert data[:3] == H("30 CB 01")  # 203 = 0x4B + 1*128
    assert Decoder().feed(data) == [Publish("a", payload)]
