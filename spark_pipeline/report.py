"""``etl report``: headline numbers on stdout and a one-page HTML report.

``load_report`` reads the small tables (and aggregates the big ones down to one row per
minute) into plain Python; ``headline`` and ``render_html`` are pure functions of that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from spark_pipeline.query import plain, register_tables
from spark_pipeline.svg import bar_chart, line_chart


@dataclass(slots=True)
class ReportData:
    """Everything the report shows, as plain values."""

    headline: dict[str, Any] = field(default_factory=dict)
    audit: dict[str, Any] = field(default_factory=dict)
    throughput: list[tuple[datetime, int, int]] = field(default_factory=list)
    latency: list[tuple[datetime, float, float, float]] = field(default_factory=list)
    drops: list[tuple[str, int]] = field(default_factory=list)
    netsplits: list[dict[str, Any]] = field(default_factory=list)


def _one(spark: SparkSession, sql: str) -> dict[str, Any]:
    row = spark.sql(sql).first()
    return {} if row is None else {k: plain(v) for k, v in row.asDict().items()}


def load_report(spark: SparkSession, out_dir: Path) -> ReportData:
    """Query the tables under ``out_dir`` for the report."""
    tables = set(register_tables(spark, out_dir))
    missing = {"sessions", "message_flow", "latency_overall", "audit_summary"} - tables
    if missing:
        raise FileNotFoundError(f"tables missing under {out_dir}: {sorted(missing)}")
    data = ReportData()
    data.headline = {
        **_one(
            spark, "SELECT count(*) AS sessions, count(DISTINCT client_id) AS clients FROM sessions"
        ),
        **_one(
            spark,
            "SELECT coalesce(sum(messages), 0) AS messages, "
            "coalesce(sum(bytes), 0) AS bytes, coalesce(sum(deliveries), 0) "
            "AS deliveries FROM message_flow",
        ),
        **_one(spark, "SELECT p50_us, p95_us, p99_us, max_us FROM latency_overall"),
    }
    if "ingest" in tables:
        data.headline.update(_one(spark, "SELECT lines, corrupt_lines FROM ingest"))
    data.audit = _one(spark, "SELECT * FROM audit_summary")
    data.throughput = [
        (r[0], int(r[1]), int(r[2]))
        for r in spark.sql(
            "SELECT minute, sum(messages), sum(deliveries) FROM message_flow "
            "GROUP BY minute ORDER BY minute"
        ).collect()
    ]
    if "latency_by_minute" in tables:
        data.latency = [
            (r[0], float(r[1]), float(r[2]), float(r[3]))
            for r in spark.sql(
                "SELECT minute, p50_us, p95_us, p99_us FROM latency_by_minute ORDER BY minute"
            ).collect()
        ]
    if "drops" in tables:
        data.drops = [
            (str(r[0]), int(r[1]))
            for r in spark.sql(
                "SELECT reason, sum(drops) AS n FROM drops GROUP BY reason ORDER BY n DESC"
            ).collect()
        ]
    if "netsplits" in tables:
        data.netsplits = [
            {k: plain(v) for k, v in r.asDict().items()}
            for r in spark.sql("SELECT * FROM netsplits ORDER BY started_at").collect()
        ]
    return data


def headline(data: ReportData) -> str:
    """The text printed by ``etl report``."""
    h, a = data.headline, data.audit

    def g(d: dict[str, Any], k: str) -> str:
        v = d.get(k)
        return "n/a" if v is None else f"{v:,}" if isinstance(v, int) else str(v)

    lines = [
        f"sessions      {g(h, 'sessions')} ({g(h, 'clients')} clients)",
        f"messages      {g(h, 'messages')} published, {g(h, 'deliveries')} deliveries, "
        f"{g(h, 'bytes')} bytes",
        f"latency       p50 {g(h, 'p50_us')} us, p99 {g(h, 'p99_us')} us, max {g(h, 'max_us')} us",
        f"audit         {g(a, 'pairs')} pairs: {g(a, 'lost')} lost, "
        f"{g(a, 'duplicated')} duplicated, {g(a, 'out_of_order')} out of order, "
        f"{g(a, 'unacked')} unacked, {g(a, 'refused')} refused",
        f"netsplits     {len(data.netsplits)}",
    ]
    if "corrupt_lines" in h:
        lines.append(f"input         {g(h, 'lines')} lines, {g(h, 'corrupt_lines')} corrupt")
    return "\n".join(lines)


def _hhmm(x: float) -> str:
    return datetime.fromtimestamp(x, UTC).strftime("%H:%M")


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>None.</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(r[c]))}</td>" for c in cols) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(data: ReportData, title: str = "ternmq ETL report") -> str:
    """A self-contained page: headline, audit, three inline SVG charts, netsplits."""
    thr = line_chart(
        "Throughput per minute",
        {
            "published": [(t.timestamp(), float(m)) for t, m, _ in data.throughput],
            "delivered": [(t.timestamp(), float(d)) for t, _, d in data.throughput],
        },
        _hhmm,
        "messages / min",
    )
    lat = line_chart(
        "Delivery latency percentiles",
        {
            "p50": [(t.timestamp(), p50 / 1000.0) for t, p50, _, _ in data.latency],
            "p95": [(t.timestamp(), p95 / 1000.0) for t, _, p95, _ in data.latency],
            "p99": [(t.timestamp(), p99 / 1000.0) for t, _, _, p99 in data.latency],
        },
        _hhmm,
        "ms",
    )
    drops = bar_chart("Drops by reason", [(r, float(n)) for r, n in data.drops], "messages")
    audit_rows = [{"measure": k, "value": v} for k, v in data.audit.items()]
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; max-width: 1320px; }}
pre {{ background: #f6f6f6; padding: .8em; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 1em; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; }}
.cols {{ display: flex; gap: 3em; }}
</style></head><body>
<h1>{escape(title)}</h1>
<pre>{escape(headline(data))}</pre>
<div class="charts">{thr}{lat}{drops}</div>
<div class="cols"><div><h2>Delivery audit</h2>{_table(audit_rows)}</div>
<div><h2>Netsplits</h2>{_table(data.netsplits)}</div></div>
</body></html>
"""
