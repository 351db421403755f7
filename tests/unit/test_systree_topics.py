"""$SYS topic names and payloads for metric samples (VerneMQ's systree naming)."""

from __future__ import annotations

import pytest

from services.common.metrics import MetricsRegistry, SampleValue
from services.listener.mqtt.topics import validate_topic_name
from services.listener.routing.topics import topic_matches
from services.listener.systree_topics import payload_for, systree_messages, topic_for

NODE = "ternmq@127.0.0.1"


def test_an_unlabelled_metric_drops_the_prefix_and_splits_at_underscores() -> None:
    assert topic_for(NODE, "ternmq_connections", {}) == "$SYS/ternmq@127.0.0.1/connections"
    # VerneMQ's own example: mqtt_publish_received -> $SYS/<node>/mqtt/publish/received
    assert topic_for("n", "mqtt_publish_received", {}) == "$SYS/n/mqtt/publish/received"


def test_labels_add_name_and_value_levels_in_name_order() -> None:
    topic = topic_for(NODE, "ternmq_messages_dropped_total", {"reason": "queue_full", "a": "x"})
    assert topic == "$SYS/ternmq@127.0.0.1/messages/dropped/total/a/x/reason/queue_full"


@pytest.mark.parametrize("bad", ["a/b", "a+b", "a#b", "a\x00b"])
def test_separators_and_wildcards_never_reach_a_level(bad: str) -> None:
    topic = topic_for(bad, "ternmq_x", {"label": bad})
    assert topic == "$SYS/a_b/x/label/a_b"
    validate_topic_name(topic)  # a valid PUBLISH topic name


def test_payloads_are_plain_numbers() -> None:
    assert payload_for(42.0) == b"42"
    assert payload_for(0.0) == b"0"
    assert payload_for(-3.0) == b"-3"
    assert payload_for(0.0031) == b"0.0031"
    assert payload_for(1e300) == b"1e+300"  # beyond int64: not printed as 301 digits


def test_systree_messages_cover_every_sample_of_a_registry_sorted() -> None:
    reg = MetricsRegistry()
    reg.gauge("connections", "open connections").set(3)
    published = reg.counter("messages_published_total", "published", ["qos"])
    published.labels("0").inc(5)
    published.labels("1").inc(2)
    got = systree_messages(NODE, reg.samples())
    assert got == [
        ("$SYS/ternmq@127.0.0.1/connections", b"3"),
        ("$SYS/ternmq@127.0.0.1/messages/published/total/qos/0", b"5"),
        ("$SYS/ternmq@127.0.0.1/messages/published/total/qos/1", b"2"),
    ]


def test_first_level_wildcards_do_not_see_them_and_sys_filters_do() -> None:
    (topic, _), *_ = systree_messages(NODE, [SampleValue("ternmq_c", {}, 1.0, "gauge", "")])
    assert not topic_matches("#", topic)  # [MQTT-4.7.2-1]
    assert not topic_matches("+/ternmq@127.0.0.1/c", topic)
    assert topic_matches("$SYS/#", topic)
    assert topic_matches(f"$SYS/{NODE}/+", topic)


def test_an_empty_node_name_is_still_a_valid_topic() -> None:
    topic = topic_for("", "ternmq_connections", {})
    assert topic == "$SYS//connections"
    validate_topic_name(topic)  # empty levels are allowed [MQTT-4.7.1-3]
