"""A message's MQTT 5 properties in webhook JSON, as VerneMQ's ``vmq_webhooks`` writes and
reads them: in the bodies of ``auth_on_publish_m5``, ``on_publish_m5`` and
``on_deliver_m5``, and in the ``properties`` modifier of the first and the last.

The names are VerneMQ's (``p_content_type``, …). The payload format is ``"utf8"`` or
``"unspecified"``; user properties are a list of ``{"key": …, "val": …}``, each string
base64-encoded unless the hook's payloads are not (VerneMQ ties both to the same option
here, ``base64_payload``); correlation data is a string (its UTF-8 bytes; bytes that are
not UTF-8 are shown as U+FFFD).

A modifier replaces the properties it names and keeps the others; ``null`` removes one.
Names that do not belong to a message (``p_topic_alias``, …) are returned as ignored.
Pure: no I/O.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import replace
from typing import Any

from services.listener.mqtt.types import Properties

__all__ = ["Properties", "apply", "encode", "with_expiry"]

FORMAT = "p_payload_format_indicator"
EXPIRY = "p_message_expiry_interval"
CONTENT_TYPE = "p_content_type"
RESPONSE_TOPIC = "p_response_topic"
CORRELATION = "p_correlation_data"
USER = "p_user_property"
_FORMATS = {"unspecified": 0, "utf8": 1}
_MAX_EXPIRY = 0xFFFFFFFF


def with_expiry(props: Properties, expires_at: float | None, now: float) -> Properties:
    """A message's properties as a hook sees them: its expiry as seconds left (a message
    keeps it as a time, ``expires_at``, so that it survives queueing)."""
    if expires_at is None:
        return props
    return replace(props, message_expiry_interval=max(0, int(expires_at - now)))


def encode(props: Properties, b64: bool) -> dict[str, Any]:
    """The properties a hook is shown (only those present)."""
    out: dict[str, Any] = {}
    if props.payload_format_indicator is not None:
        out[FORMAT] = "utf8" if props.payload_format_indicator else "unspecified"
    if props.message_expiry_interval is not None:
        out[EXPIRY] = props.message_expiry_interval
    if props.content_type is not None:
        out[CONTENT_TYPE] = props.content_type
    if props.response_topic is not None:
        out[RESPONSE_TOPIC] = props.response_topic
    if props.correlation_data is not None:
        out[CORRELATION] = props.correlation_data.decode("utf-8", "replace")
    if props.user_properties:
        out[USER] = [{"key": _enc(k, b64), "val": _enc(v, b64)} for k, v in props.user_properties]
    return out


def apply(props: Properties, mods: Any, b64: bool) -> tuple[Properties, list[str]] | str:
    """``props`` with a ``properties`` modifier applied, and the names it ignored; or why
    the modifier cannot be applied (then nothing of it is)."""
    if not isinstance(mods, dict):
        return "properties must be an object"
    changes: dict[str, Any] = {}
    ignored: list[str] = []
    for name, value in mods.items():
        field = _FIELDS.get(name)
        if field is None:
            ignored.append(name)
            continue
        if value is None:
            changes[field] = () if field == "user_properties" else None
            continue
        parsed = _PARSERS[name](value, b64)
        if isinstance(parsed, _Invalid):
            return f"{name}: {parsed.why}"
        changes[field] = parsed
    return replace(props, **changes), ignored


class _Invalid:
    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _enc(text: str, b64: bool) -> str:
    return base64.b64encode(text.encode()).decode() if b64 else text


def _dec(value: Any, b64: bool) -> str | _Invalid:
    if not isinstance(value, str):
        return _Invalid(f"{value!r} is not a string")
    if not b64:
        return value
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return _Invalid(f"{value!r} is not base64 of UTF-8 text")


def _format(value: Any, b64: bool) -> int | _Invalid:
    if value not in _FORMATS:
        return _Invalid(f"{value!r} is neither 'utf8' nor 'unspecified'")
    return _FORMATS[value]


def _expiry(value: Any, b64: bool) -> int | _Invalid:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_EXPIRY:
        return _Invalid(f"{value!r} is not a number of seconds")
    return value


def _text(value: Any, b64: bool) -> str | _Invalid:
    if not isinstance(value, str) or "\0" in value:
        return _Invalid(f"{value!r} is not a string")
    return value


def _topic(value: Any, b64: bool) -> str | _Invalid:
    text = _text(value, b64)
    if isinstance(text, str) and (not text or "+" in text or "#" in text):
        return _Invalid(f"{value!r} is not a topic name")
    return text


def _correlation(value: Any, b64: bool) -> bytes | _Invalid:
    text = _text(value, b64)
    return text.encode() if isinstance(text, str) else text


def _user(value: Any, b64: bool) -> tuple[tuple[str, str], ...] | _Invalid:
    if not isinstance(value, list):
        return _Invalid("must be a list of {key, val}")
    pairs: list[tuple[str, str]] = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"key", "val"}:
            return _Invalid(f"{item!r} is not {{key, val}}")
        key, val = _dec(item["key"], b64), _dec(item["val"], b64)
        if isinstance(key, _Invalid):
            return key
        if isinstance(val, _Invalid):
            return val
        pairs.append((key, val))
    return tuple(pairs)


_FIELDS = {
    FORMAT: "payload_format_indicator",
    EXPIRY: "message_expiry_interval",
    CONTENT_TYPE: "content_type",
    RESPONSE_TOPIC: "response_topic",
    CORRELATION: "correlation_data",
    USER: "user_properties",
}
_PARSERS: dict[str, Any] = {
    FORMAT: _format,
    EXPIRY: _expiry,
    CONTENT_TYPE: _text,
    RESPONSE_TOPIC: _topic,
    CORRELATION: _correlation,
    USER: _user,
}
