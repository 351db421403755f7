"""Encoder: every packet round-trips in every version; misuse raises EncodeError."""

from __future__ import annotations

import pytest

from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.encoder import encode, encode_publish
from services.listener.mqtt.errors import EncodeError
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

USER = (("k", "v"), ("k", "v2"), ("ü", ""))


def common(version: int) -> list[Packet]:
    """Packets whose meaning is the same in every version."""
    name = "MQIsdp" if version == 3 else "MQTT"
    return [
        Connect(name, version, True, 0, "id"),
        Connect(name, version, False, 65535, "é", Will("w/t", b"\x00\xff", 2, True), "u", b""),
        Connect(name, version, True, 5, "c", None, "user", b"pass"),
        Connack(False, 0),
        Publish("a/b/c", b"data", 0, True),
        Publish("a", b"", 1, False, True, 1),
        Publish("$SYS/x", b"\x00" * 70000, 2, False, False, 65535),
        Puback(1),
        Pubrec(2),
        Pubrel(3),
        Pubcomp(65535),
        Subscribe(9, (Subscription("a/+/#", 0), Subscription("$share/g/x", 2))),
        Suback(9, (0, 1, 2, 0x80)),
        Unsubscribe(10, ("a/+", "#")),
        Pingreq(),
        Pingresp(),
        Disconnect(),
    ]


V3_ONLY: list[Packet] = [Connack(False, 5), Unsuback(10)]
V4_ON: list[Packet] = [Connack(True, 0)]

V5_ONLY: list[Packet] = [
    Connect(
        "MQTT",
        5,
        False,
        30,
        "",
        Will(
            "w",
            b"bye",
            1,
            False,
            Properties(
                will_delay_interval=10,
                payload_format_indicator=1,
                message_expiry_interval=60,
                content_type="text/plain",
                response_topic="r/t",
                correlation_data=b"\x01",
                user_properties=USER,
            ),
        ),
        None,
        b"pw",
        Properties(
            session_expiry_interval=0xFFFFFFFF,
            receive_maximum=65535,
            maximum_packet_size=1,
            topic_alias_maximum=0,
            request_response_information=1,
            request_problem_information=0,
            authentication_method="SCRAM",
            authentication_data=b"\x00",
            user_properties=USER,
        ),
    ),
    Connack(
        True,
        0,
        Properties(
            session_expiry_interval=1,
            assigned_client_identifier="auto-1",
            server_keep_alive=0,
            response_information="resp",
            server_reference="other:1883",
            reason_string="ok",
            receive_maximum=1,
            topic_alias_maximum=10,
            maximum_qos=0,
            retain_available=0,
            maximum_packet_size=268435460,
            wildcard_subscription_available=1,
            subscription_identifier_available=0,
            shared_subscription_available=1,
            authentication_method="m",
            authentication_data=b"d",
            user_properties=USER,
        ),
    ),
    Connack(False, 0x9C, Properties(server_reference="x")),
    Publish(
        "t",
        b"p",
        1,
        False,
        False,
        7,
        Properties(subscription_identifiers=(1, 268435455), topic_alias=65535),
    ),
    Puback(1, 0x10),
    Pubrec(1, 0x80, Properties(reason_string="no", user_properties=USER)),
    Pubrel(1, 0x92),
    Pubcomp(1, 0, Properties(user_properties=USER)),
    Subscribe(
        1,
        (Subscription("a", 1, True, True, 2), Subscription("$share/g/b", 0, False, False, 1)),
        Properties(subscription_identifiers=(5,), user_properties=USER),
    ),
    Suback(1, (0x8F, 0xA2, 2), Properties(reason_string="r")),
    Unsubscribe(2, ("a",), Properties(user_properties=USER)),
    Unsuback(2, (0, 0x11)),
    Unsuback(2, (0x87,), Properties(reason_string="denied")),
    Disconnect(0x04),
    Disconnect(0x8B, Properties(server_reference="s", reason_string="bye")),
    Auth(),
    Auth(0x19, Properties(authentication_method="m", authentication_data=b"")),
]

CASES = (
    [(3, p) for p in common(3) + V3_ONLY]
    + [(4, p) for p in common(4) + V3_ONLY + V4_ON]
    + [(5, p) for p in common(5) + V4_ON + V5_ONLY]
)


@pytest.mark.parametrize(("version", "packet"), CASES)
def test_round_trip(version: int, packet: Packet) -> None:
    data = encode(packet, version)
    decoder = Decoder()
    decoder.protocol_version = version
    assert decoder.feed(data) == [packet]
    # byte by byte gives the same packet
    decoder = Decoder()
    decoder.protocol_version = version
    out: list[Packet] = []
    for byte in data:
        out += decoder.feed(bytes((byte,)))
    assert out == [packet]


def test_every_packet_type_is_covered() -> None:
    covered = {type(p) for _v, p in CASES}
    assert {type(p) for p in common(5) + V3_ONLY + V5_ONLY} == covered
    assert len(covered) == 15


MISUSE: list[tuple[str, Packet, int]] = [
    ("qos1-without-packet-id", Publish("a", b"", 1), 4),
    ("qos0-with-packet-id", Publish("a", b"", 0, packet_id=1), 4),
    ("qos0-with-dup", Publish("a", b"", 0, dup=True), 4),
    ("qos3", Publish("a", b"", 3, packet_id=1), 4),
    ("packet-id-0", Puback(0), 4),
    ("packet-id-65536", Pubrel(65536), 5),
    ("topic-too-long", Publish("a" * 65536, b""), 4),
    ("surrogate-in-string", Publish("\ud800", b""), 4),
    ("property-not-allowed", Puback(1, 0, Properties(topic_alias=1)), 5),
    ("property-value-out-of-range", Connack(False, 0, Properties(receive_maximum=0)), 5),
    ("property-too-wide", Connack(False, 0, Properties(server_keep_alive=65536)), 5),
    (
        "two-subids-in-subscribe",
        Subscribe(1, (Subscription("a", 0),), Properties(subscription_identifiers=(1, 2))),
        5,
    ),
    ("auth-before-v5", Auth(), 4),
    ("v3-connack-code", Connack(False, 0x80), 4),
    ("password-without-username", Connect("MQTT", 4, True, 0, "c", password=b"p"), 4),
    ("empty-subscribe", Subscribe(1, ()), 4),
    ("empty-unsubscribe", Unsubscribe(1, ()), 4),
    ("empty-suback", Suback(1, ()), 4),
    ("v5-unsuback-without-codes", Unsuback(1), 5),
    ("v5-options-in-v4", Subscribe(1, (Subscription("a", 0, no_local=True),)), 4),
    ("retain-handling-3", Subscribe(1, (Subscription("a", 0, retain_handling=3),)), 5),
    ("reason-code-too-wide", Suback(1, (256,)), 4),
]


@pytest.mark.parametrize(("packet", "version"), [m[1:] for m in MISUSE], ids=[m[0] for m in MISUSE])
def test_misuse_raises_encode_error(packet: Packet, version: int) -> None:
    with pytest.raises(EncodeError):
        encode(packet, version)


def test_v31_connack_has_no_session_present_flag() -> None:
    assert encode(Connack(True, 0), 3) == bytes.fromhex("20 02 00 00")


def test_encode_rejects_non_packets() -> None:
    # compiled (setup.py), the argument's declared type is checked at the call instead
    with pytest.raises((EncodeError, TypeError)):
        encode(Properties(), 5)  # type: ignore[arg-type]


def test_encode_publish_validates() -> None:
    with pytest.raises(EncodeError):
        encode_publish(b"a", b"", 1, False, False, None, b"", 4)
    with pytest.raises(EncodeError):
        encode_publish(b"a" * 65536, b"", 0, False, False, None, b"", 4)
