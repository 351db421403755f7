"""Declaring configuration keys: each key is declared once, with its type, default and doc.

Services declare their keys in their own ``config.py`` as a list of :class:`Setting`;
``services.node.schema`` gathers them. The parser, the rendered default
``ternmq.conf`` and ``ternmq-admin show`` all read the same declarations, so a key
cannot exist in one place and not another.

Value syntax follows ``vernemq.conf``: ``on``/``off`` for flags, plain integers, sizes
with an optional unit (``64KB``, ``10MB``), durations with a unit (``30s``, ``5m``,
``1h``, ``2d``, ``1w``; a bare number is seconds), addresses ``host:port``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Value = Any


class SettingError(ValueError):
    """A value that does not fit its key's type; the message is shown to the operator."""


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1024,
    "mb": 1024**2,
    "gb": 1024**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_DURATION_UNITS = {
    "": 1,
    "ms": 0.001,
    "s": 1,
    "m": 60,
    "h": 3600,
    "d": 86400,
    "w": 604800,
    "y": 31536000,
}
_NUM_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("on", "true", "yes", "1", "enabled"):
        return True
    if low in ("off", "false", "no", "0", "disabled"):
        return False
    raise SettingError(f"expected on or off, got {raw!r}")


def parse_int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise SettingError(f"expected an integer, got {raw!r}") from None


def parse_float(raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise SettingError(f"expected a number, got {raw!r}") from None


def parse_size(raw: str) -> int:
    """Bytes; ``0`` usually means unlimited (the key's doc says)."""
    m = _NUM_UNIT.match(raw)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise SettingError(f"expected a size like 1024, 64KB or 10MB, got {raw!r}")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def parse_duration(raw: str) -> float:
    """Seconds. ``never`` is -1 (used by expiry keys)."""
    if raw.strip().lower() == "never":
        return -1.0
    m = _NUM_UNIT.match(raw)
    if not m or m.group(2).lower() not in _DURATION_UNITS:
        raise SettingError(f"expected a duration like 30s, 5m, 1h, 2d or never, got {raw!r}")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2).lower()]


def parse_str(raw: str) -> str:
    return raw.strip()


def parse_list(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def parse_address(raw: str) -> str:
    """``host:port`` (``[v6]:port`` too), ``unix:PATH``, or ``auto`` (chosen at start-up)."""
    value = raw.strip()
    if value == "auto" or value.startswith("unix:") or value == "off":
        return value
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise SettingError(f"expected host:port, got {raw!r}")
    try:
        port_no = int(port)
    except ValueError:
        raise SettingError(f"port must be a number in {raw!r}") from None
    if not 0 <= port_no <= 65535:
        raise SettingError(f"port out of range in {raw!r}")
    return value


PARSERS: dict[str, Callable[[str], Value]] = {
    "bool": parse_bool,
    "int": parse_int,
    "float": parse_float,
    "size": parse_size,
    "duration": parse_duration,
    "str": parse_str,
    "list": parse_list,
    "address": parse_address,
    "enum": parse_str,
}


def render_value(kind: str, value: Value) -> str:
    """The inverse of parsing, for the rendered default conf and ``show``."""
    if kind == "bool":
        return "on" if value else "off"
    if kind == "list":
        return ",".join(value)
    if kind == "duration":
        if value == -1:
            return "never"
        return f"{value:g}s"
    return str(value)


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration key.

    ``pattern`` keys (e.g. ``listener.tcp.*``) take any suffix; ``choices`` restricts an
    ``enum``; ``minimum``/``maximum`` bound numbers; ``runtime`` keys may be changed with
    ``ternmq-admin set``.
    """

    key: str
    kind: str
    default: str
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    runtime: bool = False
    pattern: bool = field(default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", "*" in self.key)

    def parse(self, raw: str) -> Value:
        value = PARSERS[self.kind](raw)
        if self.choices and value not in self.choices:
            raise SettingError(f"expected one of {', '.join(self.choices)}, got {raw.strip()!r}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.minimum is not None and value < self.minimum and value != -1:
                raise SettingError(f"must be at least {self.minimum:g}, got {raw.strip()!r}")
            if self.maximum is not None and value > self.maximum:
                raise SettingError(f"must be at most {self.maximum:g}, got {raw.strip()!r}")
        return value

    def matches(self, key: str) -> bool:
        """Exact keys match themselves; in a pattern each ``*`` stands for one dotless part."""
        if not self.pattern:
            return key == self.key
        want = self.key.split(".")
        have = key.split(".")
        return len(want) == len(have) and all(
            w in ("*", h) for w, h in zip(want, have, strict=True)
        )
