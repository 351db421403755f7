"""Structured event logging: structlog for the API, a buffered JSON-lines writer underneath.

Each service writes ``log_dir/<service>.jsonl`` (rotated to ``.1``, ``.2`` … by size)
and, human-readable, to stderr. Every line carries the envelope of
``services.common.events`` (``ts``, ``level``, ``node``, ``service``, ``event``,
``schema``) plus the event's fields.

Why buffered: the listener logs several events per QoS >= 1 message; one ``write(2)``
per event would cost more than routing the message. Lines are gathered in memory and
written when the buffer holds 256 lines (some 64 KiB), when :func:`flush` is called (the
listener does so before it writes to client sockets, so a client never sees a message
whose event is not yet in the OS), and every 200 ms by a background thread. A process killed with
SIGKILL therefore loses at most the lines of its last, unflushed batch.

Hot paths call :func:`emit` directly: no structlog processor chain, one ``json.dumps``.
The per-message events (several per QoS >= 1 message) go through :func:`emitter`
instead: a function compiled once per event from its catalogue entry, which formats the
line with one f-string — a third of what ``emit`` costs (no kwargs dict, no generic
JSON encoder), the same JSON.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, MutableMapping
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import structlog

from services.common.events import EVENTS, SCHEMA_VERSION

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
FLUSH_LINES = 256  # buffered lines that trigger a write (lines are ~250 bytes)
_FLUSH_PERIOD = 0.2


class BufferedWriter:
    """Gathers lines (or, for the spool, records) and writes them out in batches: the
    base of :class:`JsonlWriter` and ``logspool.SpoolWriter``, which say how
    (``_flush_locked``, called with the lock held)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held while writing out
        # Lines go into a deque without the lock: ``append`` and ``popleft`` are atomic, so
        # a line added while another thread flushes is written now or by the next flush,
        # never lost. Compiled emitters append to ``lines`` themselves (as ``write``).
        self.lines: deque[Any] = deque()

    def write(self, line: str) -> None:
        lines = self.lines
        lines.append(line)
        if len(lines) >= FLUSH_LINES:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            with self._lock:
                self._flush_locked()

    def periodic(self) -> None:
        """What the flusher thread does every 200 ms."""
        self.flush()

    def _take(self) -> list[Any]:
        """Everything gathered so far, in order (with the lock held)."""
        buf = self.lines
        popleft = buf.popleft
        return [popleft() for _ in range(len(buf))]

    def _flush_locked(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class JsonlWriter(BufferedWriter):
    """Appends lines to a file, buffered, rotating by size (``path.1`` is the newest old file)."""

    def __init__(self, path: Path, rotate_size: int, keep: int) -> None:
        super().__init__()
        self.path = path
        self.rotate_size = rotate_size
        self.keep = keep
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size

    def _flush_locked(self) -> None:
        if not self.lines:
            return
        data = "".join(self._take()).encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)
        if self.rotate_size and self._size >= self.rotate_size:
            self._rotate()

    def _rotate(self) -> None:
        os.close(self._fd)
        for i in range(self.keep - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{i}")
            if src.exists():
                src.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = 0

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            os.close(self._fd)
            self._fd = -1


class _State:
    writer: BufferedWriter | None = None  # a JsonlWriter or a logspool.SpoolWriter
    spool = False  # compiled emitters hand records to the spool unformatted
    node = ""
    service = ""
    node_json = '""'
    service_json = '""'
    level = 20
    console = "on"
    message_events = True
    flusher: threading.Thread | None = None
    stop = threading.Event()


_state = _State()


def now_iso() -> str:
    """UTC ISO-8601 with microseconds and a ``Z`` suffix.

    Formatting a datetime per event was the single largest cost of logging; the seconds
    part changes once a second, so it is formatted then and reused."""
    return iso(time.time())


def iso(t: float) -> str:
    """:func:`now_iso` of the time ``t``."""
    sec = int(t)
    if sec != _clock.sec:
        _clock.tick(sec)
    return f"{_clock.prefix}{int((t - sec) * 1_000_000):06d}Z"


class _Clock:
    sec = -1
    prefix = ""

    def tick(self, sec: int) -> None:
        self.sec = sec
        self.prefix = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(sec))


_clock = _Clock()
dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode


def format_line(level: str, event: str, fields: dict[str, Any], t: float | None = None) -> str:
    """One JSON line (at time ``t``, default now); the envelope is formatted directly (its
    values need no escaping: node and service are escaped once at setup, event names come
    from the catalogue)."""
    ts = now_iso() if t is None else iso(t)
    head = (
        f'{{"ts":"{ts}","level":"{level}","node":{_state.node_json},'
        f'"service":{_state.service_json},"event":"{event}","schema":"{SCHEMA_VERSION}"'
    )
    if not fields:
        return head + "}\n"
    return head + "," + dumps(fields)[1:] + "\n"


def emit(event: str, level: str = "info", **fields: Any) -> None:
    """Write one event line without structlog's processor chain (hot paths)."""
    if _LEVELS[level] < _state.level:
        return
    line = format_line(level, event, fields)
    if _state.writer is not None:
        _state.writer.write(line)
    if _state.console != "off":
        _console(level, event, line, fields)


# How a compiled emitter writes a field of each catalogue type; the same text that
# ``dumps`` produces (ASCII-escaped strings). An "int" field must be given an int
# (IntEnums are fine; a bool would be written True): ``{x}`` costs a third of ``{x:d}``.
_FIELD_FORMATS = {
    "str": "{_esc(%s)}",
    "int": "{%s}",
    "bool": '{"true" if %s else "false"}',
    "float": "{_dumps(%s)}",
    "list[str]": "{_dumps(%s)}",
}


def _line_expr(event: str) -> tuple[list[str], str]:
    """The field names of ``event`` and the f-string expression of its whole line, given
    ``t`` (its time) and ``sec`` (``int(t)``, with ``_clock`` ticked to it)."""
    spec = EVENTS[event]
    names = list(spec.fields)
    body = "".join(f',"{n}":' + _FIELD_FORMATS[t] % n for n, t in spec.fields.items())
    line = (
        'f\'{{"ts":"{_clock.prefix}{str(int((t - sec) * 1000000)).zfill(6)}Z'
        + "{_head}"
        + body
        + "}}\\n'"
    )
    return names, line


def _namespace(level: str, event: str, envelope: tuple[str, str] | None = None) -> dict[str, Any]:
    """The globals of a generated emitter or formatter. Its envelope follows ``setup``
    unless ``envelope`` (node, service) fixes it."""
    namespace: dict[str, Any] = {
        "_state": _state,
        "_time": time.time,
        "_clock": _clock,
        "_esc": encode_basestring_ascii,
        "_dumps": dumps,
        "_console": _console,
        "_sys": sys,
    }
    if envelope is None:
        _set_head(namespace, level, event)
        _emitters.append((namespace, level, event))
    else:
        _set_head(namespace, level, event, json.dumps(envelope[0]), json.dumps(envelope[1]))
    return namespace


def formatter(
    event: str, level: str = "info", envelope: tuple[str, str] | None = None
) -> Callable[..., str]:
    """``f(t, *fields)``: the line a compiled emitter of ``event`` writes at time ``t``
    (with ``envelope``: as node and service, not this process's). The spool's converter
    (:mod:`services.common.logspool`) formats spooled records with it."""
    names, line = _line_expr(event)
    source = (
        f"def format_event(t, {', '.join(names)}):\n"
        "    sec = int(t)\n"
        "    if sec != _clock.sec:\n"
        "        _clock.tick(sec)\n"
        f"    return {line}\n"
    )
    namespace = _namespace(level, event, envelope)
    exec(compile(source, f"<formatter {event}>", "exec"), namespace)
    fn: Callable[..., str] = namespace["format_event"]
    return fn


def emitter(event: str, level: str = "info") -> Callable[..., None]:
    """A fast :func:`emit` for one catalogued event: every field of the catalogue entry
    is a required argument (positional in catalogue order, or by name).

    Worked example: ``emitter("message.acked")`` returns
    ``f(msg_id, client_id, qos, latency_us)``, which writes the line that
    ``emit("message.acked", msg_id=..., client_id=..., qos=..., latency_us=...)`` would.
    The function is generated from a template (as ``dataclasses`` generates ``__init__``)
    so that the whole line is one f-string; a wrong type raises, as it does in ``emit``
    (with a spool it is the converter that meets it: it keeps the event, written as ``emit``
    writes any, and says so on stderr).
    """
    names, line = _line_expr(event)
    args = ", ".join(names)
    fields = ", ".join(f"{n}={n}" for n in names)
    # The timestamp is now_iso() inlined; ``_head`` is the envelope after it, a constant
    # refreshed by ``setup`` (see ``_set_head``); the writer's ``write`` is inlined too.
    # Message events never go to the human-readable console (see ``_console``). With a
    # spool (``_state.spool``) the line is not formatted here at all: the record goes to
    # the spool as a tuple and the converter process formats it (see logspool).
    if event.startswith("message."):
        console = "    if _state.console == 'json':\n        _sys.stderr.write(line)\n"
    else:
        console = (
            "    if _state.console != 'off':\n"
            f"        _console({level!r}, {event!r}, line, dict({fields}))\n"
        )
    source = (
        f"def emit_event({args}):\n"
        f"    if {_LEVELS[level]} < _state.level:\n"
        "        return\n"
        "    if _state.spool:\n"
        "        lines = _state.writer.lines\n"
        f"        lines.append(({level + ' ' + event!r}, _time(), {args}))\n"
        f"        if len(lines) >= {FLUSH_LINES}:\n"
        "            _state.writer.flush()\n"
        "        return\n"
        "    t = _time()\n"
        "    sec = int(t)\n"
        "    if sec != _clock.sec:\n"
        "        _clock.tick(sec)\n"
        f"    line = {line}\n"
        "    writer = _state.writer\n"
        "    if writer is not None:\n"
        "        lines = writer.lines\n"
        "        lines.append(line)\n"
        f"        if len(lines) >= {FLUSH_LINES}:\n"
        "            writer.flush()\n"
        f"{console}"
    )
    namespace = _namespace(level, event)
    exec(compile(source, f"<emitter {event}>", "exec"), namespace)
    fn: Callable[..., None] = namespace["emit_event"]
    fn.__qualname__ = fn.__name__ = "emit_" + event.replace(".", "_")
    return fn


_emitters: list[tuple[dict[str, Any], str, str]] = []


def _set_head(
    namespace: dict[str, Any],
    level: str,
    event: str,
    node_json: str | None = None,
    service_json: str | None = None,
) -> None:
    """The envelope of a compiled emitter's lines, from the ``"`` that closes the
    timestamp to the schema (node and service are known only after ``setup``)."""
    node_json = _state.node_json if node_json is None else node_json
    service_json = _state.service_json if service_json is None else service_json
    namespace["_head"] = (
        f'","level":"{level}","node":{node_json},"service":{service_json},'
        f'"event":"{event}","schema":"{SCHEMA_VERSION}"'
    )


def record_head(level: str, event: str, envelope: tuple[str, str] | None = None) -> str:
    """The envelope that follows the timestamp in a line of ``event`` (``formatter``'s),
    as node and service ``envelope`` if given, else this process's."""
    namespace: dict[str, Any] = {}
    if envelope is None:
        _set_head(namespace, level, event)
    else:
        _set_head(namespace, level, event, json.dumps(envelope[0]), json.dumps(envelope[1]))
    head: str = namespace["_head"]
    return head


def _console(level: str, event: str, line: str, fields: dict[str, Any]) -> None:
    if _state.console == "json":
        sys.stderr.write(line)
    elif _state.console == "on" and _LEVELS[level] >= 20 and not event.startswith("message."):
        sys.stderr.write(_human(level, event, fields))


def message_events_enabled() -> bool:
    return _state.message_events


def flush() -> None:
    if _state.writer is not None:
        _state.writer.flush()


def _human(level: str, event: str, fields: dict[str, Any]) -> str:
    kv = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"{now_iso()} [{level:<7}] {_state.service}: {event} {kv}\n"


def _structlog_sink(_logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> str:
    level = "warning" if method == "warn" else method
    if level == "exception":
        level = "error"
    event = str(event_dict.pop("event"))
    emit(event, level, **event_dict)
    raise structlog.DropEvent


def setup(
    service: str,
    node: str,
    log_dir: str | None,
    level: str = "info",
    console: str = "on",
    message_events: bool = True,
    rotate_size: int = 100 * 1024 * 1024,
    rotate_keep: int = 10,
    spool: bool = False,
) -> None:
    """Configure logging for this process; call once at start-up.

    ``spool``: the per-message events are not formatted here but written, as records, to
    a spool that a helper process turns into the same JSON lines
    (:mod:`services.common.logspool`); for the services that log several events per
    message. Not with ``console = json`` (the lines must be formatted here for stderr)."""
    _state.node = node
    _state.service = service
    _state.node_json = json.dumps(node)
    _state.service_json = json.dumps(service)
    for namespace, event_level, event in _emitters:
        _set_head(namespace, event_level, event)
    _state.level = _LEVELS[level]
    _state.console = console
    _state.message_events = message_events
    if log_dir and spool and console != "json":
        from services.common.logspool import SpoolWriter

        _state.writer = SpoolWriter(Path(log_dir), service, node, rotate_size, rotate_keep)
        _state.spool = True
    elif log_dir:
        _state.writer = JsonlWriter(Path(log_dir) / f"{service}.jsonl", rotate_size, rotate_keep)
    if log_dir:
        if _state.flusher is None:
            _state.stop.clear()
            _state.flusher = threading.Thread(target=_flush_loop, name="log-flush", daemon=True)
            _state.flusher.start()
        atexit.register(shutdown)
    structlog.configure(
        processors=[
            structlog.processors.format_exc_info,
            _structlog_sink,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_state.level),
        cache_logger_on_first_use=True,
    )


def _flush_loop() -> None:
    while not _state.stop.wait(_FLUSH_PERIOD):
        try:
            writer = _state.writer
            if writer is not None:
                writer.periodic()
        except OSError as exc:  # disk full: say so on stderr, keep serving
            sys.stderr.write(f"ternmq: cannot write the event log: {exc}\n")


def shutdown() -> None:
    _state.stop.set()
    if _state.writer is not None:
        try:
            _state.writer.close()
        except OSError as exc:
            sys.stderr.write(f"ternmq: cannot flush the event log: {exc}\n")
        _state.writer = None
        _state.spool = False


def get_logger(**bound: Any) -> Any:
    """A structlog logger; ``log.info("client.connected", client_id=...)``."""
    return structlog.get_logger(**bound)
