"""The Spark schemas agree with the event catalogue, and docs/events.md is fresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.events import ENVELOPE, EVENTS, EventSpec
from spark_pipeline.docs import render_events_md
from spark_pipeline.schemas import (
    CORRUPT_COLUMN,
    EVENT_SCHEMAS,
    LINE_SCHEMA,
    USED_FIELDS,
    build_line_schema,
    spark_type,
)

ROOT = Path(__file__).resolve().parents[2]
# Written out independently of schemas._TYPES on purpose.
EXPECTED_SPARK = {
    "str": "string",
    "int": "bigint",
    "float": "double",
    "bool": "boolean",
    "list[str]": "array<string>",
}


def test_every_event_has_a_schema_and_no_more() -> None:
    assert set(EVENT_SCHEMAS) == set(EVENTS)


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_event_schema_matches_catalogue(name: str) -> None:
    schema = EVENT_SCHEMAS[name]
    expected = {**ENVELOPE, **EVENTS[name].fields}
    assert [f.name for f in schema.fields] == list(expected)
    for f in schema.fields:
        assert f.dataType.simpleString() == EXPECTED_SPARK[expected[f.name]], f.name
        assert f.nullable


def test_line_schema_is_the_union_of_all_fields() -> None:
    union = dict(ENVELOPE)
    for spec in EVENTS.values():
        union.update(spec.fields)
    got = {f.name: f.dataType.simpleString() for f in LINE_SCHEMA.fields}
    assert got.pop(CORRUPT_COLUMN) == "string"
    assert got == {k: EXPECTED_SPARK[v] for k, v in union.items()}


@pytest.mark.parametrize("event", sorted(USED_FIELDS))
def test_fields_the_etl_reads_exist_with_their_types(event: str) -> None:
    assert event in EVENTS, f"the ETL reads {event}, which the catalogue no longer lists"
    fields = EVENTS[event].fields
    for name, json_type in USED_FIELDS[event].items():
        assert fields.get(name) == json_type, f"{event}.{name}"


def test_conflicting_field_types_are_refused() -> None:
    events = {
        "a.b": EventSpec("a.b", {"size": "int"}, ""),
        "c.d": EventSpec("c.d", {"size": "str"}, ""),
    }
    with pytest.raises(ValueError, match=r"size: int in a\.b but str in c\.d"):
        build_line_schema(events)


def test_unknown_catalogue_type_is_refused() -> None:
    with pytest.raises(ValueError, match="no Spark mapping"):
        spark_type("dict[str, int]")


def test_events_doc_is_fresh() -> None:
    path = ROOT / "docs" / "events.md"
    assert path.read_text(encoding="utf-8") == render_events_md(), (
        "regenerate: python -m spark_pipeline events-doc --write docs/events.md"
    )


def test_events_doc_lists_every_event_and_field() -> None:
    text = render_events_md()
    for name, spec in EVENTS.items():
        assert f"### {name}" in text
        for field in spec.fields:
            assert f"`{field}`" in text
