"""The audit's ``--expect`` file: who should receive what.

Format: a JSON list of ``{"subscriber": client_id, "topic_filter": "a/#", "from": iso_ts
or null}``. A subscriber is expected to receive every QoS >= 1 message published on a
topic its filters match, at or after ``from`` (no lower bound when null). Errors name
the entry; the file is read whole before any Spark work starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from spark_pipeline.topics import FilterError, filter_regex


@dataclass(frozen=True, slots=True)
class Expectation:
    """One subscription the audit holds the broker to."""

    subscriber: str
    topic_filter: str
    since: datetime | None

    @property
    def regex(self) -> str:
        return filter_regex(self.topic_filter)


class ExpectError(ValueError):
    """The expect file is not what the format above says."""


def _parse_ts(value: object, where: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ExpectError(f"{where}: 'from' must be an ISO timestamp string or null")
    try:
        ts = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ExpectError(f"{where}: bad 'from' timestamp {value!r}") from exc
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def parse_expectations(data: object) -> list[Expectation]:
    """Validate decoded JSON; raise ``ExpectError`` naming the first bad entry."""
    if not isinstance(data, list):
        raise ExpectError("expect file must hold a JSON list")
    out: list[Expectation] = []
    for i, entry in enumerate(data):
        where = f"entry {i}"
        if not isinstance(entry, dict):
            raise ExpectError(f"{where}: must be an object")
        unknown = set(entry) - {"subscriber", "topic_filter", "from"}
        if unknown:
            raise ExpectError(f"{where}: unknown keys {sorted(unknown)}")
        sub, flt = entry.get("subscriber"), entry.get("topic_filter")
        if not isinstance(sub, str) or not sub:
            raise ExpectError(f"{where}: 'subscriber' must be a non-empty string")
        if not isinstance(flt, str):
            raise ExpectError(f"{where}: 'topic_filter' must be a string")
        try:
            filter_regex(flt)
        except FilterError as exc:
            raise ExpectError(f"{where}: {exc}") from exc
        out.append(Expectation(sub, flt, _parse_ts(entry.get("from"), where)))
    return out


def load_expectations(path: Path) -> list[Expectation]:
    """Read and validate an expect file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ExpectError(f"{path}: not JSON: {exc}") from exc
    return parse_expectations(data)
