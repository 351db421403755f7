"""Property tests: random valid packets round-trip; random or mutated bytes never raise
anything but ``MQTTError`` (invariant I5, no crash on garbage)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.listener.mqtt._wire import encode_varint, read_varint
from services.listener.mqtt.decoder import Decoder
from services.listener.mqtt.encoder import encode
from services.listener.mqtt.errors import MQTTError
from services.listener.mqtt.properties import ALLOWED, WILL
from services.listener.mqtt.rules import V3_SUBACK_CODES, V5_REASON_CODES
from services.listener.mqtt.topics import parse_shared, validate_topic_filter
from services.listener.mqtt.types import (
    NO_PROPERTIES,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Properties,
    PropertyId,
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

T = PacketType
P = PropertyId
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
level = st.text(st.characters(codec="utf-8", exclude_characters="\x00/+#"), max_size=6)
topic_name = st.lists(level, min_size=1, max_size=4).map("/".join).filter(bool)
blob = st.binary(max_size=24)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
packet_id = st.integers(1, 0xFFFF)
flag = st.integers(0, 1)


@st.composite
def topic_filter(draw: st.DrawFn) -> str:
    levels = draw(st.lists(st.one_of(level, st.just("+")), min_size=1, max_size=4))
    if draw(st.booleans()):
        levels.append("#")
    flt = "/".join(levels)
    if draw(st.booleans()):
        flt = f"$share/{draw(level.filter(bool))}/{flt}"
    try:
        validate_topic_filter(flt)
    except MQTTError:
        return "a/#"
    return flt


VALUES: dict[int, st.SearchStrategy[Any]] = {
    P.PAYLOAD_FORMAT_INDICATOR: flag,
    P.MESSAGE_EXPIRY_INTERVAL: u32,
    P.CONTENT_TYPE: text,
    P.RESPONSE_TOPIC: topic_name,
    P.CORRELATION_DATA: blob,
    P.SESSION_EXPIRY_INTERVAL: u32,
    P.ASSIGNED_CLIENT_IDENTIFIER: text,
    P.SERVER_KEEP_ALIVE: u16,
    P.AUTHENTICATION_METHOD: text,
    P.AUTHENTICATION_DATA: blob,
    P.REQUEST_PROBLEM_INFORMATION: flag,
    P.WILL_DELAY_INTERVAL: u32,
    P.REQUEST_RESPONSE_INFORMATION: flag,
    P.RESPONSE_INFORMATION: text,
    P.SERVER_REFERENCE: text,
    P.REASON_STRING: text,
    P.RECEIVE_MAXIMUM: st.integers(1, 0xFFFF),
    P.TOPIC_ALIAS_MAXIMUM: u16,
    P.TOPIC_ALIAS: st.integers(1, 0xFFFF),
    P.MAXIMUM_QOS: flag,
    P.RETAIN_AVAILABLE: flag,
    P.MAXIMUM_PACKET_SIZE: st.integers(1, 0xFFFFFFFF),
    P.WILDCARD_SUBSCRIPTION_AVAILABLE: flag,
    P.SUBSCRIPTION_IDENTIFIER_AVAILABLE: flag,
    P.SHARED_SUBSCRIPTION_AVAILABLE: flag,
}
FIELDS = {pid: P(pid).name.lower() for pid in VALUES}


@st.composite
def properties(draw: st.DrawFn, ptype: int) -> Properties:
    values: dict[str, Any] = {}
    for pid in sorted(ALLOWED[ptype]):
        if not draw(st.booleans()):
            continue
        if pid == P.USER_PROPERTY:
            values["user_properties"] = tuple(draw(st.lists(st.tuples(text, text), max_size=3)))
        elif pid == P.SUBSCRIPTION_IDENTIFIER:
            most = 3 if ptype == T.PUBLISH else 1
            ids = draw(st.lists(st.integers(1, 268_435_455), min_size=1, max_size=most))
            values["subscription_identifiers"] = tuple(ids)
        else:
            values[FIELDS[pid]] = draw(VALUES[pid])
    if "authentication_data" in values and "authentication_method" not in values:
        values["authentication_method"] = "m"
    return Properties(**values)


def props(version: int, ptype: int) -> st.SearchStrategy[Properties]:
    return properties(ptype) if version == 5 else st.just(NO_PROPERTIES)


def code(version: int, ptype: int) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(V5_REASON_CODES[ptype])) if version == 5 else st.just(0)


@st.composite
def connect(draw: st.DrawFn, version: int) -> Connect:
    clean = draw(st.booleans())
    client_id = draw(text)
    if not client_id and (version == 3 or (version == 4 and not clean)):
        client_id = "c"
    will = None
    if draw(st.booleans()):
        will = Will(
            draw(topic_name),
            draw(blob),
            draw(st.integers(0, 2)),
            draw(st.booleans()),
            draw(props(version, WILL)),
        )
    username = draw(st.none() | text)
    password = draw(st.none() | blob)
    if version < 5 and username is None:
        password = None
    name = "MQIsdp" if version == 3 else "MQTT"
    properties = draw(props(version, T.CONNECT))
    return Connect(name, version, clean, draw(u16), client_id, will, username, password, properties)


@st.composite
def publish(draw: st.DrawFn, version: int) -> Publish:
    qos = draw(st.integers(0, 2))
    pid = draw(packet_id) if qos else None
    dup = draw(st.booleans()) if qos else False
    return Publish(
        draw(topic_name), draw(blob), qos, draw(st.booleans()), dup, pid, draw(props(version, 3))
    )


@st.composite
def subscription(draw: st.DrawFn, version: int) -> Subscription:
    flt = draw(topic_filter())
    qos = draw(st.integers(0, 2))
    if version < 5:
        return Subscription(flt, qos)
    no_local = draw(st.booleans()) and parse_shared(flt)[0] is None
    return Subscription(flt, qos, no_local, draw(st.booleans()), draw(st.integers(0, 2)))


def packets(version: int) -> st.SearchStrategy[Packet]:
    v = version
    acks: list[st.SearchStrategy[Packet]] = [
        st.builds(cls, packet_id, code(v, ptype), props(v, ptype))
        for cls, ptype in ((Puback, T.PUBACK), (Pubrec, T.PUBREC), (Pubrel, T.PUBREL),
                           (Pubcomp, T.PUBCOMP))
    ]  # fmt: skip
    suback_codes = sorted(V5_REASON_CODES[T.SUBACK] if v == 5 else V3_SUBACK_CODES)
    unsuback_codes = (
        st.lists(code(v, T.UNSUBACK), min_size=1, max_size=4).map(tuple) if v == 5 else st.just(())
    )
    connack_code = code(v, T.CONNACK) if v == 5 else st.integers(0, 5)
    options: list[st.SearchStrategy[Packet]] = [
        connect(v),
        st.builds(
            Connack, st.booleans() if v > 3 else st.just(False), connack_code, props(v, T.CONNACK)
        ),
        publish(v),
        *acks,
        st.builds(
            Subscribe,
            packet_id,
            st.lists(subscription(v), min_size=1, max_size=4).map(tuple),
            props(v, T.SUBSCRIBE),
        ),
        st.builds(
            Suback,
            packet_id,
            st.lists(st.sampled_from(suback_codes), min_size=1, max_size=4).map(tuple),
            props(v, T.SUBACK),
        ),
        st.builds(
            Unsubscribe,
            packet_id,
            st.lists(topic_filter(), min_size=1, max_size=4).map(tuple),
            props(v, T.UNSUBSCRIBE),
        ),
        st.builds(Unsuback, packet_id, unsuback_codes, props(v, T.UNSUBACK)),
        st.just(Pingreq()),
        st.just(Pingresp()),
        st.builds(Disconnect, code(v, T.DISCONNECT), props(v, T.DISCONNECT)),
    ]
    if v == 5:
        options.append(st.builds(Auth, code(v, T.AUTH), props(v, T.AUTH)))
    return st.one_of(options)


PACKETS = {v: packets(v) for v in (3, 4, 5)}
versioned_packets = st.sampled_from([3, 4, 5]).flatmap(
    lambda v: st.tuples(st.just(v), st.lists(PACKETS[v], min_size=1, max_size=5))
)


def _decoder(version: int | None, max_size: int | None = None) -> Decoder:
    decoder = Decoder(max_size)
    decoder.protocol_version = version
    return decoder


@FUZZ
@given(versioned_packets, st.lists(st.integers(1, 64), min_size=1, max_size=20))
def test_round_trip_in_random_chunks(case: tuple[int, list[Packet]], sizes: list[int]) -> None:
    version, pkts = case
    data = b"".join(encode(p, version) for p in pkts)
    decoder = _decoder(version)
    out: list[Packet] = []
    pos = i = 0
    while pos < len(data):
        step = sizes[i % len(sizes)]
        out += decoder.feed(data[pos : pos + step])
        pos += step
        i += 1
    assert out == pkts
    assert decoder.buffered == 0


def _decode_only_mqtt_errors(decoder: Decoder, data: bytes, version: int) -> None:
    """Decoding may fail only with MQTTError; whatever decodes must re-encode and re-decode."""
    try:
        decoded = decoder.feed(data)
    except MQTTError as err:
        decoded = list(err.preceding)
    for pkt in decoded:
        again = version if not isinstance(pkt, Connect) else pkt.protocol_version
        assert _decoder(again).feed(encode(pkt, again)) == [pkt]


@settings(FUZZ, max_examples=500)
@given(st.sampled_from([None, 3, 4, 5]), st.none() | st.integers(2, 64), st.binary(max_size=200))
def test_random_bytes_raise_only_mqtt_errors(
    version: int | None, max_size: int | None, data: bytes
) -> None:
    _decode_only_mqtt_errors(_decoder(version, max_size), data, version or 4)


@FUZZ
@given(
    versioned_packets,
    st.lists(
        st.tuples(
            st.sampled_from(["set", "insert", "delete"]), st.integers(0), st.integers(0, 255)
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_frames_raise_only_mqtt_errors(
    case: tuple[int, list[Packet]], mutations: list[tuple[str, int, int]]
) -> None:
    version, pkts = case
    data = bytearray(b"".join(encode(p, version) for p in pkts))
    for op, index, value in mutations:
        i = index % (len(data) + 1)
        if op == "insert":
            data.insert(i, value)
        elif data and i < len(data):
            if op == "set":
                data[i] = value
            else:
                del data[i]
    _decode_only_mqtt_errors(_decoder(version), bytes(data), version)


mutation_ops = st.lists(
    st.tuples(
        st.sampled_from(["set", "insert", "delete", "truncate", "flags"]),
        st.integers(0),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=3,
)


@FUZZ
@given(versioned_packets, st.integers(0), mutation_ops)
def test_mutated_bodies_with_consistent_length_raise_only_mqtt_errors(
    case: tuple[int, list[Packet]], which: int, mutations: list[tuple[str, int, int]]
) -> None:
    """Mutate one packet's body and fix its Remaining Length, so parsers see the damage."""
    version, pkts = case
    frames = [encode(p, version) for p in pkts]
    k = which % len(frames)
    victim = frames[k]
    first, (_length, start) = victim[0], read_varint(victim, 1, len(victim))
    body = bytearray(victim[start:])
    for op, index, value in mutations:
        i = index % (len(body) + 1)
        if op == "insert":
            body.insert(i, value)
        elif op == "flags":
            first = (first & 0xF0) | (value & 0x0F)
        elif op == "truncate":
            del body[i:]
        elif i < len(body):
            if op == "set":
                body[i] = value
            else:
                del body[i]
    frames[k] = bytes((first,)) + encode_varint(len(body)) + bytes(body)
    _decode_only_mqtt_errors(_decoder(version), b"".join(frames), version)
