"""Syntax of MQTT topic names and topic filters (spec section 4.7, 4.8.2).

Theory of operation: a *topic name* (what PUBLISH carries) is a non-empty string
without wildcards; a *topic filter* (what SUBSCRIBE carries) may use ``+`` as a whole
level and ``#`` as a whole, last level, e.g. ``sport/+/player1`` and ``sport/#`` are
valid, ``sport+`` and ``sport/#/x`` are not. A filter ``$share/{group}/{filter}``
is a shared subscription: the group is one non-empty level without wildcards and the
rest is an ordinary filter. Both kinds are at most 65,535 UTF-8 bytes and never
contain U+0000. The checks raise ``TopicNameInvalid`` / ``TopicFilterInvalid`` so
callers can map them to reason codes 0x90 / 0x8F.
"""

from __future__ import annotations

from .errors import TopicFilterInvalid, TopicNameInvalid

__all__ = [
    "MAX_TOPIC_BYTES",
    "SHARE_PREFIX",
    "parse_shared",
    "validate_topic_filter",
    "validate_topic_name",
]

MAX_TOPIC_BYTES = 65535
SHARE_PREFIX = "$share/"


def _utf8_len_ok(s: str) -> bool:
    # A code point takes at most 4 bytes, so short strings skip the encoding.
    return (
        len(s) * 4 <= MAX_TOPIC_BYTES or len(s.encode("utf-8", "surrogatepass")) <= MAX_TOPIC_BYTES
    )


def validate_topic_name(name: str) -> None:
    """Raise ``TopicNameInvalid`` unless ``name`` may be published to [MQTT-3.3.2-2]."""
    if not name:
        raise TopicNameInvalid("empty topic name [MQTT-4.7.3-1]")
    if "+" in name or "#" in name:
        raise TopicNameInvalid(f"wildcard in topic name {name!r} [MQTT-3.3.2-2]")
    if "\x00" in name:
        raise TopicNameInvalid("U+0000 in topic name [MQTT-4.7.3-2]")
    if not _utf8_len_ok(name):
        raise TopicNameInvalid("topic name longer than 65535 bytes")


def _validate_plain_filter(flt: str) -> None:
    if not flt:
        raise TopicFilterInvalid("empty topic filter [MQTT-4.7.3-1]")
    if "\x00" in flt:
        raise TopicFilterInvalid("U+0000 in topic filter [MQTT-4.7.3-2]")
    if "+" in flt or "#" in flt:
        levels = flt.split("/")
        last = len(levels) - 1
        for i, level in enumerate(levels):
            if level in ("+", "#"):
                if level == "#" and i != last:
                    raise TopicFilterInvalid(f"'#' not last in {flt!r} [MQTT-4.7.1-1]")
            elif "+" in level or "#" in level:
                raise TopicFilterInvalid(f"wildcard inside a level of {flt!r} [MQTT-4.7.1-2]")


def parse_shared(topic_filter: str) -> tuple[str | None, str]:
    """Split ``$share/group/filter`` into ``(group, filter)``; ``(None, f)`` if not shared.

    Raises ``TopicFilterInvalid`` for a malformed shared filter [MQTT-4.8.2-1, -2].
    The returned filter is not validated further; ``validate_topic_filter`` does both.
    """
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    group, sep, flt = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not group:
        raise TopicFilterInvalid("empty share name [MQTT-4.8.2-1]")
    if "+" in group or "#" in group:
        raise TopicFilterInvalid(f"wildcard in share name {group!r} [MQTT-4.8.2-2]")
    if not sep or not flt:
        raise TopicFilterInvalid(f"no topic filter after share name {group!r} [MQTT-4.8.2-2]")
    return group, flt


def validate_topic_filter(topic_filter: str) -> None:
    """Raise ``TopicFilterInvalid`` unless ``topic_filter`` may be subscribed to."""
    if not _utf8_len_ok(topic_filter):
        raise TopicFilterInvalid("topic filter longer than 65535 bytes")
    _group, flt = parse_shared(topic_filter)
    _validate_plain_filter(flt)
