"""Topic name / topic filter syntax [MQTT-4.7] and shared subscriptions [MQTT-4.8.2]."""

from __future__ import annotations

import pytest

from services.listener.mqtt.errors import TopicFilterInvalid, TopicNameInvalid
from services.listener.mqtt.topics import (
    parse_shared,
    validate_topic_filter,
    validate_topic_name,
)


@pytest.mark.parametrize("name", ["a", "a/b", "/", "a//b", "$SYS/x", " ", "é/日本", "a" * 65535])
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name", ["", "a/+", "+", "#", "a/#", "a+b", "x\x00y", "a" * 65536, "é" * 32768]
)
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(TopicNameInvalid):
        validate_topic_name(name)


@pytest.mark.parametrize(
    "flt",
    [
        "#",
        "+",
        "a/#",
        "a/+/b",
        "+/+",
        "/+",
        "a//#",
        "$SYS/#",
        "$share/g/a/b",
        "$share/g/#",
        "$share/group1/+/x",
        "$share",  # no slash: an ordinary filter
        "$sharex/a",
    ],
)
def test_valid_topic_filters(flt: str) -> None:
    validate_topic_filter(flt)


@pytest.mark.parametrize(
    "flt",
    [
        "",
        "a#",
        "a/#/b",
        "#/a",
        "a+",
        "a/+b/c",
        "++",
        "x\x00",
        "$share/",
        "$share//a",
        "$share/g",
        "$share/g/",
        "$share/+/a",
        "$share/g#/a",
        "$share/g/a#",
        "a" * 65536,
    ],
)
def test_invalid_topic_filters(flt: str) -> None:
    with pytest.raises(TopicFilterInvalid):
        validate_topic_filter(flt)


def test_parse_shared() -> None:
    assert parse_shared("a/b") == (None, "a/b")
    assert parse_shared("$share/g1/a/+/#") == ("g1", "a/+/#")
    assert parse_shared("$share/g/$SYS/x") == ("g", "$SYS/x")
    assert parse_shared("$share/g/a/b") == ("g", "a/b")
    assert parse_shared("$share/g/#") == ("g", "#")
    assert parse_shared("$shared/x") == (None, "$shared/x")
    for bad in ("$share/", "$share/g", "$share/g/", "$share//a"):
        with pytest.raises(TopicFilterInvalid):
            parse_shared(bad)
