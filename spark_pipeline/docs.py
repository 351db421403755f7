"""Renders ``docs/events.md`` from the event catalogue; a test keeps the file fresh.

Regenerate with ``python -m spark_pipeline events-doc --write docs/events.md``.
"""

from __future__ import annotations

from services.common.events import ENVELOPE, EVENTS, SCHEMA_VERSION
from spark_pipeline.schemas import USED_FIELDS, spark_type

_HEAD = """# ternmq event log schema (version {version})

<!-- Generated from services/common/events.py by
     `python -m spark_pipeline events-doc --write docs/events.md`; do not edit by hand. -->

Every service writes one JSON object per line to `log_dir/<service>.jsonl`, rotated to
`<service>.jsonl.1`, `.2`, … (`.1` is the newest rotated file). Each line carries the
envelope fields below plus the fields of its event. Any field may be missing (read as
null). Timestamps are UTC ISO-8601 with microseconds, e.g. `2026-11-22T07:05:00.123456Z`.

The listener and the msgstore (`log.spool = on`, the default) do not format their lines
themselves: they append their events, as records, to `log_dir/spool/<service>.<pid>/`
before any client sees what an event reports, and a helper process turns them into the
same lines in the `.jsonl`, up to ~50 ms later. A service killed with SIGKILL loses none
of them (its helper converts the rest, then exits); a node killed as a whole leaves them
in the spool, and its next start converts them before anything new (or, for a node that
will not start again, `ternmq log convert --logs LOG_DIR`).

Versioning: `schema` is `MAJOR.MINOR`. Adding a field bumps MINOR; renaming or removing
one, or changing its type, bumps MAJOR. The ETL reads each line with an explicit Spark
schema built from this catalogue (never inferred); a line that is not JSON, lacks a
parseable `ts` or an `event`, or has a value of the wrong JSON type in a field the ETL
reads (marked below) is *corrupt*: it is counted in the `ingest` table and skipped.

Columns: *JSON* is the type the writer emits, *Spark* the type the ETL reads it as,
*ETL* marks fields the ETL's tables depend on.

## Envelope

| field | JSON | Spark |
|---|---|---|
"""


def _row(name: str, json_type: str, used: bool | None = None) -> str:
    cells = [f"`{name}`", json_type.replace("|", "\\|"), spark_type(json_type).simpleString()]
    if used is not None:
        cells.append("yes" if used else "")
    return "| " + " | ".join(cells) + " |"


def render_events_md() -> str:
    """The whole Markdown document."""
    lines = [_HEAD.format(version=SCHEMA_VERSION).rstrip("\n")]
    lines += [_row(k, v) for k, v in ENVELOPE.items()]
    lines += ["", "## Events", ""]
    lines += [f"- [`{name}`](#{name.replace('.', '')})" for name in EVENTS]
    for name, spec in EVENTS.items():
        used = USED_FIELDS.get(name, {})
        lines += ["", f"### {name}", "", spec.doc, ""]
        if not spec.fields:
            lines.append("No fields beyond the envelope.")
            continue
        lines += ["| field | JSON | Spark | ETL |", "|---|---|---|---|"]
        lines += [_row(k, v, k in used) for k, v in spec.fields.items()]
    return "\n".join(lines) + "\n"
