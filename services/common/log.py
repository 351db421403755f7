"""Structured event logging: structlog for the API, a buffered JSON-lines writer underneath.

Each service writes ``log_dir/<service>.jsonl`` (rotated to ``.1``, ``.2`` … by size)
and, human-readable, to stderr. Every line carries the envelope of
``services.common.events`` (``ts``, ``level``, ``node``, ``service``, ``event``,
``schema``) plus the event's fields. Lines are written in batches (``logwriter``): the
listener logs several events per QoS >= 1 message, and one ``write(2)`` each would cost
more than routing the message.

Hot paths call :func:`emit` directly: no structlog processor chain, one ``json.dumps``.
The per-message events go through :func:`emitter` instead: a function compiled once per
event from its catalogue entry, which formats the line with one f-string (no kwargs
dict, no generic JSON encoder) into the same JSON. With a spool (``spoolwriter``) it does
not format at all: it hands the record to a converter process.
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

import structlog

from services.common.events import EVENTS, SCHEMA_VERSION
from services.common.logwriter import FLUSH_LINES, BufferedWriter, JsonlWriter
from services.common.spoolwriter import SpoolWriter

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_FLUSH_PERIOD = 0.2  # s between the flusher thread's flushes: what a SIGKILL can lose


class _State:
    writer: BufferedWriter | None = None  # a JsonlWriter or a SpoolWriter
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

    Formatting a whole datetime per event would be the largest cost of logging; the
    seconds part changes once a second, so it is formatted then and reused."""
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


def enabled(level: str) -> bool:
    """Whether a line at ``level`` would be written: lets a caller skip building the
    fields of an event nobody reads (a debug event on a per-connection path)."""
    return _LEVELS[level] >= _state.level


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
# (IntEnums are fine; a bool would be written True): ``{x}`` is cheaper than ``{x:d}``.
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


def set_level(level: str) -> None:
    """``ternmq-admin set log.level=...`` while the process runs (emitters read it per
    call)."""
    _state.level = _LEVELS[level]


def set_message_events(on: bool) -> None:
    """``ternmq-admin set log.message_events=...`` while the process runs."""
    _state.message_events = on


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
    stem: str = "",
) -> None:
    """Configure logging for this process; call once at start-up.

    ``stem``: the log file's name without ``.jsonl`` (default ``service``), for a service
    that runs as several processes on one node, each with its own file.

    ``spool``: the per-message events are not formatted here but written, as records, to
    a spool that a converter process turns into the same JSON lines
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
        _state.writer = SpoolWriter(
            Path(log_dir), service, node, rotate_size, rotate_keep, stem or service
        )
        _state.spool = True
    elif log_dir:
        _state.writer = JsonlWriter(
            Path(log_dir) / f"{stem or service}.jsonl", rotate_size, rotate_keep
        )
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
