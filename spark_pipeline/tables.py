"""The output tables: names, partition columns and what each holds.

One list so that ``run`` writes, ``query`` registers and the docs describe the same set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class TableSpec:
    """An output table: its directory name under ``--out`` and its partitioning."""

    name: str
    partition_by: tuple[str, ...]
    doc: str


TABLES: Final = (
    TableSpec("ingest", (), "One row: files and lines read, corrupt lines, schema versions."),
    TableSpec("sessions", ("date",), "One row per client connection."),
    TableSpec("message_flow", ("date",), "Per minute and topic: messages, bytes, QoS mix."),
    TableSpec("delivery_latency", ("date",), "Per minute and topic: latency percentiles."),
    TableSpec("latency_by_minute", (), "Per minute, all topics: latency percentiles."),
    TableSpec("latency_overall", (), "One row: latency percentiles of the whole run."),
    TableSpec("latency_histogram", (), "Per minute and doubling latency bucket: deliveries."),
    TableSpec(
        "delivery_audit",
        ("date",),
        "Per QoS>=1 message and subscriber: verdicts, and whether the publisher was refused.",
    ),
    TableSpec("audit_summary", (), "One row: lost, refused, duplicated, out of order, ..."),
    TableSpec("drops", (), "Per reason, node and QoS: dropped and expired messages."),
    TableSpec("node_load", ("date",), "Per node and minute: events by kind."),
    TableSpec("netsplits", (), "Cluster-wide netsplit windows."),
)
TABLE_NAMES: Final = tuple(t.name for t in TABLES)
