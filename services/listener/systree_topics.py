"""``$SYS`` topic names and payloads for metric samples (pure: no I/O, see ``systree``).

Names follow VerneMQ's rule (``mqtt_publish_received`` -> ``$SYS/<node>/mqtt/publish/
received``) applied to ternmq's metric names without their ``ternmq_`` prefix; each
label adds two levels, its name and its value, in name order:

    ternmq_connections                        -> $SYS/<node>/connections
    ternmq_messages_published_total{qos="1"}  -> $SYS/<node>/messages/published/total/qos/1

The payload is the value as text (``42``, ``0.0031``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.common.metrics import SampleValue

PREFIX = "ternmq_"
_NOT_IN_A_LEVEL = str.maketrans({"/": "_", "+": "_", "#": "_", "\x00": "_"})


def level(text: str) -> str:
    """``text`` as one topic level: no separator, wildcard or U+0000 [MQTT-4.7.3-2]."""
    return text.translate(_NOT_IN_A_LEVEL)


def topic_for(node: str, name: str, labels: Mapping[str, str]) -> str:
    base = name.removeprefix(PREFIX).split("_")
    parts = ["$SYS", level(node), *(level(p) for p in base)]
    for key in sorted(labels):
        parts += [level(key), level(labels[key])]
    return "/".join(parts)


def payload_for(value: float) -> bytes:
    """Integers without a fraction (counters, gauges of things), others as ``repr``."""
    if value == int(value) and abs(value) < 2**63:
        return str(int(value)).encode()
    return repr(value).encode()


def systree_messages(node: str, samples: Iterable[SampleValue]) -> list[tuple[str, bytes]]:
    """(topic, payload) for each sample, in a stable order (sorted by topic)."""
    return sorted((topic_for(node, s.name, s.labels), payload_for(s.value)) for s in samples)
