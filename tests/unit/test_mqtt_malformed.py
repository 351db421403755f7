"""Every violation the specs call malformed (or a protocol error) raises the right error."""

from __future__ import annotations

import pytest

from services.listener.mqtt import _wire
from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.errors import (
    ClientIdRejected,
    MalformedPacket,
    MQTTError,
    ProtocolError,
    TopicAliasInvalid,
    TopicFilterInvalid,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from services.listener.mqtt.types import Connect, Properties, Publish, Subscribe, Subscription


def s(text: str) -> bytes:
    """MQTT UTF-8 string: two byte length + bytes."""
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw


def frame(first: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    return bytes((first,)) + _wire.encode_varint(len(body)) + body


def connect(
    flags: int, payload: bytes, *, name: str = "MQTT", level: int = 4, props: bytes = b""
) -> bytes:
    v5 = b"" if level != 5 else _wire.encode_varint(len(props)) + props
    return frame(0x10, s(name), bytes((level, flags)), b"\x00\x3c", v5, payload)


def pub5(props: bytes, topic: str = "a") -> bytes:
    """MQTT 5 QoS 0 PUBLISH with the given raw properties."""
    return frame(0x30, s(topic), _wire.encode_varint(len(props)), props, b"hi")


def sub5(options: int, topic_filter: str = "a", props: bytes = b"") -> bytes:
    head = b"\x00\x01" + _wire.encode_varint(len(props)) + props
    return frame(0x82, head, s(topic_filter), bytes((options,)))


H = bytes.fromhex

CASES: list[tuple[str, int | None, bytes, type[MQTTError]]] = [
    # fixed header [MQTT-2.2]
    ("remaining-length-5-bytes", 4, H("30 FF FF FF FF 01"), MalformedPacket),
    ("remaining-length-not-minimal", 4, H("C0 80 00"), MalformedPacket),
    ("reserved-type-0", 4, H("00 00"), MalformedPacket),
    ("auth-before-v5", 4, H("F0 00"), MalformedPacket),
    ("subscribe-flags-0", 4, H("80 06 0001 0001 23 01"), MalformedPacket),
    ("unsubscribe-flags-0", 4, H("A0 05 0001 0001 23"), MalformedPacket),
    ("pubrel-flags-0", 4, H("60 02 0001"), MalformedPacket),
    ("puback-flags-set", 4, H("41 02 0001"), MalformedPacket),
    ("pingreq-flags-set", 4, H("C1 00"), MalformedPacket),
    ("pingreq-with-body", 4, H("C0 01 00"), MalformedPacket),
    ("disconnect-v4-with-body", 4, H("E0 01 00"), MalformedPacket),
    # PUBLISH [MQTT-3.3]
    ("publish-qos3", 4, H("36 07 0001 61 0001 6869"), MalformedPacket),
    ("publish-qos0-dup-v4", 4, H("38 05 0001 61 6869"), MalformedPacket),
    ("publish-qos0-dup-v5", 5, H("38 06 0001 61 00 6869"), ProtocolError),
    ("publish-packet-id-0", 4, H("32 07 0001 61 0000 6869"), MalformedPacket),
    ("publish-truncated-packet-id", 4, H("32 04 0001 61 00"), MalformedPacket),
    ("publish-topic-overruns", 4, H("30 03 0005 61"), MalformedPacket),
    ("publish-invalid-utf8", 4, H("30 05 0001 FF 6869"), MalformedPacket),
    ("publish-overlong-utf8", 4, H("30 06 0002 C0AF 6869"), MalformedPacket),
    ("publish-nul-in-topic", 4, H("30 05 0001 00 6869"), MalformedPacket),
    ("publish-surrogate-in-topic", 4, H("30 07 0003 EDA080 6869"), MalformedPacket),
    ("publish-hash-in-topic", 4, H("30 05 0001 23 6869"), TopicNameInvalid),
    ("publish-plus-in-topic", 4, H("30 06 0003 612F2B 68"), TopicNameInvalid),
    ("publish-empty-topic-v4", 4, H("30 04 0000 6869"), TopicNameInvalid),
    ("publish-empty-topic-v5-no-alias", 5, H("30 05 0000 00 6869"), ProtocolError),
    ("publish-v5-topic-alias-0", 5, pub5(H("23 0000")), TopicAliasInvalid),
    # MQTT 5 properties [MQTT-2.2.2]
    ("property-unknown-id", 5, pub5(H("05 00")), MalformedPacket),
    ("property-multibyte-id", 5, pub5(H("81 00 00")), MalformedPacket),
    ("property-not-allowed", 5, pub5(H("21 000A")), MalformedPacket),
    ("property-duplicate", 5, pub5(H("01 00 01 00")), ProtocolError),
    ("property-payload-format-2", 5, pub5(H("01 02")), ProtocolError),
    ("property-truncated-value", 5, pub5(H("02 0000")), MalformedPacket),
    ("property-block-overruns", 5, H("30 05 0001 61 0A 01"), MalformedPacket),
    ("property-string-overruns-block", 5, pub5(H("03 0005 61")), MalformedPacket),
    ("property-user-invalid-utf8", 5, pub5(H("26 0001 FF 0001 61")), MalformedPacket),
    ("property-subid-not-minimal", 5, pub5(H("0B 8100")), MalformedPacket),
    ("subscribe-subid-0", 5, sub5(0, props=H("0B 00")), ProtocolError),
    ("subscribe-subid-twice", 5, sub5(0, props=H("0B 01 0B 02")), ProtocolError),
    (
        "connect-receive-maximum-0",
        5,
        connect(0x02, s("c"), level=5, props=H("21 0000")),
        ProtocolError,
    ),
    (
        "connect-maximum-packet-size-0",
        5,
        connect(0x02, s("c"), level=5, props=H("27 00000000")),
        ProtocolError,
    ),
    (
        "connect-request-problem-info-2",
        5,
        connect(0x02, s("c"), level=5, props=H("17 02")),
        ProtocolError,
    ),
    (
        "connect-auth-data-without-method",
        5,
        connect(0x02, s("c"), level=5, props=H("16 0001 78")),
        ProtocolError,
    ),
    ("connack-v5-maximum-qos-2", 5, H("20 05 00 00 02 2402"), ProtocolError),
    ("connack-v5-topic-alias-not-allowed", 5, H("20 06 00 00 03 230001"), MalformedPacket),
    # CONNECT [MQTT-3.1]
    ("connect-reserved-flag", None, connect(0x03, s("c")), MalformedPacket),
    ("connect-will-qos-without-will", None, connect(0x0A, s("c")), MalformedPacket),
    ("connect-will-retain-without-will", None, connect(0x22, s("c")), MalformedPacket),
    (
        "connect-will-qos-3",
        None,
        connect(0x1E, s("c") + s("w") + s("x")),
        MalformedPacket,
    ),
    ("connect-password-without-username-v4", None, connect(0x42, s("c") + s("p")), MalformedPacket),
    ("connect-trailing-bytes", None, connect(0x02, s("c") + b"\x00"), MalformedPacket),
    ("connect-truncated-client-id", None, connect(0x02, H("0005 61")), MalformedPacket),
    ("connect-missing-will-payload", None, connect(0x06, s("c") + s("w")), MalformedPacket),
    ("connect-missing-username", None, connect(0x82, s("c")), MalformedPacket),
    (
        "connect-will-topic-wildcard",
        None,
        connect(0x06, s("c") + s("w/#") + s("x")),
        TopicNameInvalid,
    ),
    ("connect-will-topic-empty", None, connect(0x06, s("c") + s("") + s("x")), TopicNameInvalid),
    ("connect-level-6", None, connect(0x02, s("c"), level=6), UnsupportedProtocolVersion),
    ("connect-mqtt-level-3", None, connect(0x02, s("c"), level=3), UnsupportedProtocolVersion),
    (
        "connect-mqisdp-level-4",
        None,
        connect(0x02, s("c"), name="MQIsdp"),
        UnsupportedProtocolVersion,
    ),
    ("connect-unknown-name", None, connect(0x02, s("c"), name="HTTP"), UnsupportedProtocolVersion),
    ("connect-empty-id-persistent-v4", None, connect(0x00, s("")), ClientIdRejected),
    ("connect-empty-id-v31", None, connect(0x02, s(""), name="MQIsdp", level=3), ClientIdRejected),
    # CONNACK [MQTT-3.2]
    ("connack-reserved-flags", 4, H("20 02 02 00"), MalformedPacket),
    ("connack-v4-return-code-6", 4, H("20 02 00 06"), MalformedPacket),
    ("connack-v4-too-long", 4, H("20 03 00 00 00"), MalformedPacket),
    ("connack-truncated", 4, H("20 01 00"), MalformedPacket),
    ("connack-v5-bad-reason", 5, H("20 03 00 01 00"), MalformedPacket),
    # acknowledgements
    ("puback-packet-id-0", 4, H("40 02 0000"), MalformedPacket),
    ("puback-truncated", 4, H("40 01 00"), MalformedPacket),
    ("puback-v4-too-long", 4, H("40 03 0001 00"), MalformedPacket),
    ("puback-v5-bad-reason", 5, H("40 03 0001 05"), MalformedPacket),
    ("pubrel-v5-bad-reason", 5, H("62 03 0001 10"), MalformedPacket),
    ("puback-v5-trailing", 5, H("40 05 0001 00 00 00"), MalformedPacket),
    ("disconnect-v5-bad-reason", 5, H("E0 01 01"), MalformedPacket),
    ("auth-v5-bad-reason", 5, H("F0 01 01"), MalformedPacket),
    # SUBSCRIBE / SUBACK [MQTT-3.8, 3.9]
    ("subscribe-no-filters", 4, H("82 02 0001"), ProtocolError),
    ("subscribe-v5-no-filters", 5, H("82 03 0001 00"), ProtocolError),
    ("subscribe-packet-id-0", 4, H("82 06 0000 0001 61 00"), MalformedPacket),
    ("subscribe-empty-filter", 4, H("82 05 0001 0000 01"), TopicFilterInvalid),
    ("subscribe-hash-not-last", 4, H("82 08 0001 0003 232F61 00"), TopicFilterInvalid),
    ("subscribe-hash-in-level", 4, H("82 07 0001 0002 6123 00"), TopicFilterInvalid),
    ("subscribe-bad-share", 4, H("82 0C 0001 0007 2473686172652F 00"), TopicFilterInvalid),
    ("subscribe-missing-options", 4, H("82 05 0001 0001 61"), MalformedPacket),
    ("subscribe-v4-reserved-bits", 4, H("82 06 0001 0001 61 04"), MalformedPacket),
    ("subscribe-v4-qos-3", 4, H("82 06 0001 0001 61 03"), MalformedPacket),
    ("subscribe-filter-nul", 4, H("82 06 0001 0001 00 00"), MalformedPacket),
    ("subscribe-v5-reserved-bits", 5, sub5(0x40), MalformedPacket),
    ("subscribe-v5-qos-3", 5, sub5(0x03), MalformedPacket),
    ("subscribe-v5-retain-handling-3", 5, sub5(0x30), ProtocolError),
    ("subscribe-v5-no-local-shared", 5, sub5(0x04, "$share/g/a"), ProtocolError),
    ("suback-v4-bad-code", 4, H("90 03 0001 03"), MalformedPacket),
    ("suback-no-codes", 4, H("90 02 0001"), ProtocolError),
    ("suback-v5-bad-code", 5, H("90 04 0001 00 10"), MalformedPacket),
    # UNSUBSCRIBE / UNSUBACK [MQTT-3.10, 3.11]
    ("unsubscribe-no-filters", 4, H("A2 02 0001"), ProtocolError),
    ("unsubscribe-empty-filter", 4, H("A2 04 0001 0000"), TopicFilterInvalid),
    ("unsubscribe-bad-filter", 4, H("A2 06 0001 0002 2B61"), TopicFilterInvalid),
    ("unsubscribe-v5-subid-not-allowed", 5, H("A2 07 0001 02 0B01 0001 61"), MalformedPacket),
    ("unsuback-v4-too-long", 4, H("B0 03 0001 00"), MalformedPacket),
    ("unsuback-v5-no-codes", 5, H("B0 03 0001 00"), ProtocolError),
    ("unsuback-v5-bad-code", 5, H("B0 04 0001 00 01"), MalformedPacket),
]


@pytest.mark.parametrize(
    ("version", "data", "error"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_malformed(version: int | None, data: bytes, error: type[MQTTError]) -> None:
    decoder = Decoder()
    decoder.protocol_version = version
    with pytest.raises(error) as info:
        decoder.feed(data)
    assert type(info.value) is error
    assert info.value.reason_code == error.REASON_CODE


def test_reason_and_return_codes() -> None:
    assert MalformedPacket("x").reason_code == 0x81
    assert ProtocolError("x").reason_code == 0x82
    assert TopicFilterInvalid("x").reason_code == 0x8F
    assert TopicNameInvalid("x").reason_code == 0x90
    assert TopicAliasInvalid("x").reason_code == 0x94
    assert UnsupportedProtocolVersion("x").return_code == 1
    assert ClientIdRejected("x").return_code == 2
    assert MalformedPacket("x").return_code is None


def test_connect_errors_carry_the_clients_version() -> None:
    for level, payload, props in ((4, s(""), b""), (5, s("c"), H("21 0000"))):
        decoder = Decoder()
        with pytest.raises(MQTTError) as info:
            decoder.feed(connect(0x00, payload, level=level, props=props))
        assert info.value.protocol_version == level
    with pytest.raises(UnsupportedProtocolVersion) as unsupported:
        Decoder().feed(connect(0x02, s("c"), level=7))
    assert unsupported.value.protocol_version is None


def test_valid_neighbours_of_malformed_cases() -> None:
    """The boundaries the malformed cases sit on really are accepted."""
    d5 = Decoder()
    d5.protocol_version = 5
    # empty topic is fine with a topic alias; several subscription ids are fine in PUBLISH
    assert d5.feed(pub5(H("23 0001"), topic="")) == [
        Publish("", b"hi", properties=Properties(topic_alias=1))
    ]
    assert d5.feed(pub5(H("0B01 0B02"))) == [
        Publish("a", b"hi", properties=Properties(subscription_identifiers=(1, 2)))
    ]
    # no local on a non-shared filter
    assert d5.feed(sub5(0x04)) == [Subscribe(1, (Subscription("a", 0, no_local=True),))]
    # MQTT 5 allows a password without a user name; empty client id with clean start 0
    packets = Decoder().feed(connect(0x40, s("") + s("pw"), level=5))
    assert packets == [Connect("MQTT", 5, False, 60, "", password=b"pw")]
    # 3.1.1 accepts an empty client id with clean session
    assert Decoder().feed(connect(0x02, s(""))) == [Connect("MQTT", 4, True, 60, "")]


def test_property_cache_keeps_packet_type_rules() -> None:
    """A block valid (and cached) for PUBLISH is still refused where it is not allowed."""
    block = H("05 02 0000003C")  # Message Expiry Interval 60
    d5 = Decoder()
    d5.protocol_version = 5
    expected = Publish("a", b"hi", properties=Properties(message_expiry_interval=60))
    assert d5.feed(pub5(block[1:])) == [expected]
    assert d5.feed(pub5(block[1:])) == [expected]
    with pytest.raises(MalformedPacket):
        d5.feed(H("40 09 0001 00") + block)
