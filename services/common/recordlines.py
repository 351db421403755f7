"""Spooled event records to JSON lines: the log converter's per-record loop, compiled.

Why: the converter (``logspool``) formats four lines per persistent QoS 1 message (three
listener events and the store's ``message.queued``) on the same cores as the broker.
Unpacking each record into ``log.formatter``'s generated f-string costs markedly more
per line than this loop, compiled (setup.py); docs/benchmarks.md has the figures.

The text is exactly ``log.formatter``'s (``tests/integration/test_logspool.py`` compares
spooled lines with inline ones): a ``str`` field escaped as ``json`` escapes it, an
``int`` as ``format`` writes it, a ``bool`` as ``true``/``false``, anything else through
``dumps``. A record whose fields do not fit its event raises ``TypeError`` or
``ValueError`` from :meth:`RecordLines.lines`'s ``fallback``, which decides what to write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any, Final

# Final: compiled, a plain module global is a dict lookup at every use
_STR: Final = 0
_INT: Final = 1
_BOOL: Final = 2
_DUMPS: Final = 3
_KINDS = {"str": _STR, "int": _INT, "bool": _BOOL}


class _Event:
    """How the records of one ``"level event"`` key become lines."""

    def __init__(self, head: str, fields: dict[str, str]) -> None:
        self.head = head  # from the ``"`` that closes the timestamp to the schema
        self.names = [f',"{name}":' for name in fields]
        self.kinds = [_KINDS.get(kind, _DUMPS) for kind in fields.values()]
        self.size = len(fields) + 2  # key, time, fields


class RecordLines:
    """The lines of a batch of records (``str`` lines pass through unchanged).

    ``event_of(key)`` gives ``(head, fields)`` for a key not seen yet (the envelope head
    after the timestamp, and the catalogue's field types); ``fallback(record, exc)`` the
    line of a record that does not fit its event."""

    def __init__(
        self,
        event_of: Callable[[str], tuple[str, dict[str, str]]],
        fallback: Callable[[tuple[Any, ...], Exception], str],
        dumps: Callable[[Any], str],
    ) -> None:
        self._event_of = event_of
        self._fallback = fallback
        self._dumps = dumps
        self._events: dict[str, _Event] = {}
        self._sec = -1
        self._prefix = ""

    def lines(self, records: list[Any]) -> list[str]:
        out: list[str] = []
        for record in records:
            if isinstance(record, str):
                out.append(record)
                continue
            try:
                out.append(self._line(record))
            except (TypeError, ValueError) as exc:
                out.append(self._fallback(record, exc))
        return out

    def _line(self, record: tuple[Any, ...]) -> str:
        key: str = record[0]
        event = self._events.get(key)
        if event is None:
            head, fields = self._event_of(key)
            event = self._events[key] = _Event(head, fields)
        if len(record) != event.size:
            raise TypeError(f"{len(record) - 2} fields, {event.size - 2} expected")
        t: float = record[1]
        sec = int(t)
        if sec != self._sec:
            self._sec = sec
            self._prefix = time.strftime('{"ts":"%Y-%m-%dT%H:%M:%S.', time.gmtime(sec))
        micros = str(int((t - sec) * 1000000))
        parts = [self._prefix, "0" * (6 - len(micros)), micros, "Z", event.head]
        names = event.names
        kinds = event.kinds
        for i in range(len(names)):
            value = record[i + 2]
            parts.append(names[i])
            kind = kinds[i]
            if kind == _STR:
                parts.append(encode_basestring_ascii(value))
            elif kind == _INT:
                parts.append(str(value))  # what ``f"{value}"`` writes for an int
            elif kind == _BOOL:
                parts.append("true" if value else "false")
            else:
                parts.append(self._dumps(value))
        parts.append("}\n")
        return "".join(parts)
