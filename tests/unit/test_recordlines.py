"""The converter's compiled record formatter writes exactly what ``log.formatter`` writes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.common import log
from services.common.events import EVENTS
from services.common.recordlines import RecordLines

SAMPLES: dict[str, list[Any]] = {
    "str": ["", 'c\u00e9\x00"\\/\n', "plain"],
    "int": [0, -7, 2**40],
    "bool": [True, False],
    "float": [0.0, 1.5, -2.25e-7],
    "list[str]": [[], ["a", "\u00e9"]],
}
ENVELOPE = ("n\u00f6de@127.0.0.1", "listener")
TIMES = [1_700_000_000.0, 1_700_000_000.25, 1_700_000_001.999999, 1_700_003_600.000001]


def _converter(fallbacks: list[tuple[tuple[Any, ...], Exception]]) -> RecordLines:
    def event_of(key: str) -> tuple[str, dict[str, str]]:
        level, event = key.split(" ", 1)
        return log.record_head(level, event, ENVELOPE), dict(EVENTS[event].fields)

    def fallback(record: tuple[Any, ...], exc: Exception) -> str:
        fallbacks.append((record, exc))
        return "fallback\n"

    return RecordLines(event_of, fallback, log.dumps)


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_every_event_is_formatted_as_the_generated_formatter_does(event: str) -> None:
    fallbacks: list[tuple[tuple[Any, ...], Exception]] = []
    lines = _converter(fallbacks)
    kinds = list(EVENTS[event].fields.values())
    for level in ("info", "warning"):
        expected = log.formatter(event, level, ENVELOPE)
        for i, t in enumerate(TIMES):
            fields = tuple(SAMPLES[k][i % len(SAMPLES[k])] for k in kinds)
            record = (f"{level} {event}", t, *fields)
            assert lines.lines([record]) == [expected(t, *fields)]
    assert fallbacks == []


def test_lines_pass_through_and_order_is_kept() -> None:
    lines = _converter([])
    acked = ("info message.acked", TIMES[1], "m1", "c1", 1, 5)
    got = lines.lines(["already a line\n", acked, "another\n"])
    assert got[0] == "already a line\n" and got[2] == "another\n"
    assert json.loads(got[1])["msg_id"] == "m1"


def test_a_record_that_does_not_fit_its_event_goes_to_the_fallback() -> None:
    fallbacks: list[tuple[tuple[Any, ...], Exception]] = []
    lines = _converter(fallbacks)
    wrong_type = ("info message.acked", TIMES[0], 17, "c1", 1, 5)  # msg_id is a str field
    short = ("info message.acked", TIMES[0], "m1")
    good = ("info message.acked", TIMES[0], "m2", "c1", 1, 5)
    got = lines.lines([wrong_type, short, good])
    assert got[:2] == ["fallback\n", "fallback\n"]
    assert json.loads(got[2])["msg_id"] == "m2"
    assert [r for r, _ in fallbacks] == [wrong_type, short]
    assert all(isinstance(e, TypeError) for _, e in fallbacks)
