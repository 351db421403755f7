"""Spark schemas derived from the event catalogue (``services.common.events``).

Theory of operation: every log line is parsed once with ``LINE_SCHEMA``, the union of
the envelope and of every event's fields, so one pass over the files serves all
tables. That union is only sound while a field name means the same type in every event;
``build_line_schema`` refuses a catalogue where it does not. ``EVENT_SCHEMAS`` gives the
per-event view (envelope + that event's fields, in catalogue order) that transforms
select from the union. Nothing is inferred: a value of the wrong JSON type makes its
line corrupt, which is counted, not guessed at.

``USED_FIELDS`` lists what the transforms read; a test checks the catalogue still
provides each of them with the same type, so a renamed field breaks a test, not a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pyspark.sql import types as T

from services.common.events import ENVELOPE, EVENTS, SCHEMA_VERSION, EventSpec

CORRUPT_COLUMN: Final = "_corrupt_record"
SUPPORTED_MAJOR: Final = SCHEMA_VERSION.split(".")[0]

_TYPES: Final[dict[str, T.DataType]] = {
    "str": T.StringType(),
    "int": T.LongType(),
    "float": T.DoubleType(),
    "bool": T.BooleanType(),
    "list[str]": T.ArrayType(T.StringType(), containsNull=True),
}


def spark_type(json_type: str) -> T.DataType:
    """The Spark type a catalogue type is read as; unknown types are a contract error."""
    try:
        return _TYPES[json_type]
    except KeyError:
        raise ValueError(f"event catalogue type {json_type!r} has no Spark mapping") from None


def event_schema(spec: EventSpec, envelope: Mapping[str, str] = ENVELOPE) -> T.StructType:
    """Envelope fields then the event's own, all nullable (a writer may omit any)."""
    fields = {**envelope, **spec.fields}
    return T.StructType([T.StructField(k, spark_type(v), True) for k, v in fields.items()])


def build_line_schema(
    events: Mapping[str, EventSpec], envelope: Mapping[str, str] = ENVELOPE
) -> T.StructType:
    """Union of all fields; raises if two events give one field name different types."""
    types: dict[str, str] = dict(envelope)
    owner: dict[str, str] = dict.fromkeys(envelope, "<envelope>")
    conflicts: list[str] = []
    for spec in events.values():
        for name, json_type in spec.fields.items():
            if name in types and types[name] != json_type:
                conflicts.append(
                    f"{name}: {types[name]} in {owner[name]} but {json_type} in {spec.name}"
                )
            types.setdefault(name, json_type)
            owner.setdefault(name, spec.name)
    if conflicts:
        raise ValueError("field types disagree across events: " + "; ".join(conflicts))
    fields = [T.StructField(k, spark_type(v), True) for k, v in types.items()]
    return T.StructType([*fields, T.StructField(CORRUPT_COLUMN, T.StringType(), True)])


LINE_SCHEMA: Final = build_line_schema(EVENTS)
EVENT_SCHEMAS: Final[dict[str, T.StructType]] = {
    name: event_schema(spec) for name, spec in EVENTS.items()
}

# What the transforms read, per event; checked against the catalogue by a test. The job
# parses only these fields (plus the envelope): a transform that reads anything else
# fails with a missing column in the job test.
USED_FIELDS: Final[dict[str, dict[str, str]]] = {
    "client.connected": {
        "client_id": "str",
        "mountpoint": "str",
        "peer": "str",
        "proto_ver": "int",
        "clean_start": "bool",
        "session_present": "bool",
        "keepalive": "int",
        "session_expiry": "int",
        "username": "str",
        "listener": "str",
    },
    "client.disconnected": {
        "client_id": "str",
        "mountpoint": "str",
        "reason": "str",
        "reason_code": "int",
        "duration_s": "float",
    },
    "message.published": {
        "msg_id": "str",
        "client_id": "str",
        "topic": "str",
        "qos": "int",
        "retain": "bool",
        "size": "int",
    },
    "message.delivered": {
        "msg_id": "str",
        "client_id": "str",
        "topic": "str",
        "qos": "int",
        "dup": "bool",
        "latency_us": "int",
        "publisher": "str",
    },
    "message.acked": {"msg_id": "str", "client_id": "str"},
    "message.dropped": {"msg_id": "str", "client_id": "str", "qos": "int", "reason": "str"},
    "message.refused": {"msg_id": "str"},
    "message.expired": {"msg_id": "str", "client_id": "str"},
    "netsplit.detected": {"unreachable": "list[str]", "members": "int"},
    "netsplit.healed": {"duration_s": "float", "members": "int"},
    "auth.failed": {"client_id": "str"},
}


def used_columns() -> list[str]:
    """Envelope and every field in ``USED_FIELDS``, in ``LINE_SCHEMA`` order."""
    wanted = set(ENVELOPE) | {f for fields in USED_FIELDS.values() for f in fields}
    return [f.name for f in LINE_SCHEMA.fields if f.name in wanted]
