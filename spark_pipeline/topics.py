"""MQTT topic filters: validation, matching, and the same match as a regex for Spark.

Rules (MQTT 3.1.1 §4.7, 5.0 §4.7): levels split on ``/``; ``+`` matches exactly one
level (possibly empty); ``#`` must be the last level and matches the parent level and
everything below it (``a/#`` matches ``a``, ``a/b``, ``a/b/c``); a filter starting with
a wildcard does not match topics starting with ``$``. Shared subscriptions
(``$share/group/filter``) are rejected: a message goes to one member of the group, so
no single subscriber can be expected to receive it.

Example: ``sport/+/player1`` matches ``sport/tennis/player1`` but not
``sport/tennis/x/player1``; its regex is ``^sport/[^/]*/player1$``, and ``+/x`` gets a
``(?!\\$)`` lookahead after the ``^``.
"""

from __future__ import annotations

from typing import Final

_META: Final = frozenset("\\^$.|?*+()[]{}")


class FilterError(ValueError):
    """A topic filter that MQTT would refuse, or one the audit cannot use."""


def validate_filter(topic_filter: str) -> None:
    """Raise ``FilterError`` unless ``topic_filter`` is a valid, non-shared filter."""
    if not topic_filter:
        raise FilterError("empty topic filter")
    if topic_filter.startswith("$share/"):
        raise FilterError(f"shared subscription {topic_filter!r} cannot be audited")
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise FilterError(f"'#' must be a whole last level in {topic_filter!r}")
        if "+" in level and level != "+":
            raise FilterError(f"'+' must be a whole level in {topic_filter!r}")


def matches(topic_filter: str, topic: str) -> bool:
    """Whether ``topic`` matches ``topic_filter`` (assumed valid)."""
    if topic_filter[:1] in ("+", "#") and topic.startswith("$"):
        return False
    flevels, tlevels = topic_filter.split("/"), topic.split("/")
    for i, f in enumerate(flevels):
        if f == "#":
            return True
        if i >= len(tlevels):
            return False
        if f != "+" and f != tlevels[i]:
            return False
    return len(flevels) == len(tlevels)


def _escape(text: str) -> str:
    # Backslash before a non-letter is a literal in both Java and Python regexes.
    return "".join("\\" + c if c in _META else c for c in text)


def filter_regex(topic_filter: str) -> str:
    """An anchored regex (valid in Java and Python) equivalent to ``matches``."""
    validate_filter(topic_filter)
    levels = topic_filter.split("/")
    tail = ""
    if levels[-1] == "#":
        levels = levels[:-1]
        tail = "(/.*)?" if levels else ".*"
    body = "/".join("[^/]*" if lv == "+" else _escape(lv) for lv in levels)
    guard = "(?!\\$)" if topic_filter[:1] in ("+", "#") else ""
    return f"^{guard}{body}{tail}$"
