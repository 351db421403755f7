"""Compiled event emitters (``log.emitter``) write the same lines as ``log.emit``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common import events, log
from services.common.logwriter import FLUSH_LINES

SAMPLES: dict[str, Any] = {
    "str": 'a "quoted" é\n',
    "int": 12345678901,
    "bool": True,
    "float": 0.25,
    "list[str]": ["x", "y"],
}


@pytest.fixture(autouse=True)
def _restore_log_state() -> Iterator[None]:
    """``log.setup`` configures the process; put back what other tests run with."""
    state = log._state
    saved = {k: getattr(state, k) for k in ("node", "service", "level", "console")}
    saved_events = state.message_events
    yield
    log.shutdown()
    state.stop.clear()
    state.flusher = None
    log.setup(saved["service"], saved["node"], None, "info", saved["console"], saved_events)
    state.level = saved["level"]


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    log.setup("listener", 'node"1@host', str(tmp_path), console="off")
    yield tmp_path
    log.shutdown()


def _lines(log_dir: Path) -> list[dict[str, Any]]:
    log.flush()
    text = (log_dir / "listener.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("event", sorted(events.EVENTS))
def test_emitter_writes_what_emit_writes(log_dir: Path, event: str) -> None:
    fields = {name: SAMPLES[kind] for name, kind in events.EVENTS[event].fields.items()}
    log.emitter(event, "warning")(**fields)
    log.emit(event, "warning", **fields)
    compiled, generic = _lines(log_dir)
    assert compiled.pop("ts")[:4] == generic.pop("ts")[:4]
    assert compiled == generic
    assert events.unknown_fields(event, compiled) == []


def test_emitter_takes_fields_in_catalogue_order(log_dir: Path) -> None:
    log.emitter("message.acked")("m-1", "c-1", 1, 250)
    (line,) = _lines(log_dir)
    assert list(line)[-4:] == ["msg_id", "client_id", "qos", "latency_us"]
    assert (line["msg_id"], line["client_id"], line["qos"], line["latency_us"]) == (
        "m-1",
        "c-1",
        1,
        250,
    )
    assert line["node"] == 'node"1@host' and line["event"] == "message.acked"


def test_emitter_made_before_setup_uses_the_setup_envelope(tmp_path: Path) -> None:
    acked = log.emitter("message.acked")
    log.setup("msgstore", "late@host", str(tmp_path), console="off")
    try:
        acked("m", "c", 1, 2)
        log.flush()
        line = json.loads((tmp_path / "msgstore.jsonl").read_text())
    finally:
        log.shutdown()
    assert (line["node"], line["service"]) == ("late@host", "msgstore")


def test_emitter_respects_the_level(tmp_path: Path) -> None:
    log.setup("listener", "n", str(tmp_path), level="warning", console="off")
    try:
        log.emitter("message.acked")("m", "c", 1, 2)
        log.emitter("message.acked", "error")("m", "c", 1, 3)
        log.flush()
        lines = (tmp_path / "listener.jsonl").read_text().splitlines()
    finally:
        log.shutdown()
    assert [json.loads(line)["latency_us"] for line in lines] == [3]


def test_writer_flushes_by_line_count(log_dir: Path) -> None:
    acked = log.emitter("message.acked")
    for i in range(FLUSH_LINES):
        acked("m", "c", 1, i)
    text = (log_dir / "listener.jsonl").read_text()  # written without a flush() call
    assert len(text.splitlines()) == FLUSH_LINES
