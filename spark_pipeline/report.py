"""``etl report``: headline numbers on stdout and a one-page HTML report.

``load_report`` reads the small tables (and aggregates the big ones down to one row per
minute, node, bucket or subscriber) into plain Python; ``headline`` and ``render_html``
are pure functions of that. The page: headline, the delivery audit's own panel (lost,
duplicated, out of order, the worst subscribers), then throughput, per-node load,
latency over time and as a histogram, drops by reason, and netsplits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession

from spark_pipeline.query import plain, register_tables
from spark_pipeline.svg import bar_chart, time_chart

WORST: Final = 10
PROBLEMS: Final = ("lost", "duplicated", "out_of_order", "unacked")
CHARTS: Final = ("throughput", "node_load", "latency", "histogram", "drops")


@dataclass(slots=True)
class ReportData:
    """Everything the report shows, as plain values."""

    headline: dict[str, Any] = field(default_factory=dict)
    audit: dict[str, Any] = field(default_factory=dict)
    throughput: list[tuple[datetime, int, int]] = field(default_factory=list)
    latency: list[tuple[datetime, float, float, float]] = field(default_factory=list)
    drops: list[tuple[str, int]] = field(default_factory=list)
    netsplits: list[dict[str, Any]] = field(default_factory=list)
    # (minute, node, published, delivered)
    node_load: list[tuple[datetime, str, int, int]] = field(default_factory=list)
    # (bucket lower bound in µs, deliveries)
    latency_histogram: list[tuple[int, int]] = field(default_factory=list)
    # the subscribers with the most audit problems: subscriber and PROBLEMS counts
    worst: list[dict[str, Any]] = field(default_factory=list)


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
    if "node_load" in tables:
        data.node_load = [
            (r[0], str(r[1]), int(r[2]), int(r[3]))
            for r in spark.sql(
                "SELECT minute, node, sum(published), sum(delivered) FROM node_load "
                "GROUP BY minute, node ORDER BY minute, node"
            ).collect()
        ]
    if "latency_histogram" in tables:
        data.latency_histogram = [
            (int(r[0]), int(r[1]))
            for r in spark.sql(
                "SELECT bucket_us, sum(deliveries) FROM latency_histogram "
                "GROUP BY bucket_us ORDER BY bucket_us"
            ).collect()
        ]
    if "delivery_audit" in tables:
        counts = ", ".join(f"count_if({p}) AS {p}" for p in PROBLEMS)
        data.worst = [
            {k: plain(v) for k, v in r.asDict().items()}
            for r in spark.sql(
                f"SELECT subscriber, {counts}, count(*) AS pairs FROM delivery_audit "
                f"GROUP BY subscriber HAVING {' + '.join(f'count_if({p})' for p in PROBLEMS)} > 0 "
                f"ORDER BY lost + duplicated + out_of_order + unacked DESC, subscriber "
                f"LIMIT {WORST}"
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


def duration(us: int) -> str:
    """A latency bucket's lower bound for an axis, three digits at most: 512us, 32.8ms, 1.05s."""
    if us >= 1_000_000:
        return f"{us / 1e6:.3g}s"
    if us >= 1000:
        return f"{us / 1000:.3g}ms"
    return f"{us}us"


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>None.</p>"
    cols = list(rows[0])
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(r[c]))}</td>" for c in cols) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def charts(data: ReportData) -> dict[str, str]:
    """Every chart of the page as SVG, by panel name."""
    minutes = {
        "published": [(t.timestamp(), float(m)) for t, m, _ in data.throughput],
        "delivered": [(t.timestamp(), float(d)) for t, _, d in data.throughput],
    }
    per_node: dict[str, list[tuple[float, float]]] = {}
    for t, node, published, delivered in data.node_load:
        per_node.setdefault(node, []).append((t.timestamp(), float(published + delivered)))
    lat = {
        name: [(t.timestamp(), row[i] / 1000.0) for t, *row in data.latency]
        for i, name in enumerate(("p50", "p95", "p99"))
    }
    hist = [(duration(b), float(n)) for b, n in data.latency_histogram]
    worst = {p.replace("_", " "): [float(w[p]) for w in data.worst] for p in PROBLEMS}
    return {
        "worst": bar_chart(
            "Worst subscribers (audit problems)",
            [str(w["subscriber"]) for w in data.worst],
            worst,
            "(message, subscriber) pairs",
            "subscriber",
            stacked=True,
        ),
        "throughput": time_chart("Throughput per minute", minutes, "messages / minute"),
        "node_load": time_chart(
            "Load per node (published + delivered)", per_node, "messages / minute"
        ),
        "latency": time_chart("Delivery latency percentiles", lat, "latency (ms)"),
        "histogram": bar_chart(
            "Delivery latency histogram",
            [h[0] for h in hist],
            {"deliveries": [h[1] for h in hist]},
            "deliveries",
            "latency (lower bound of a doubling bucket)",
        ),
        "drops": bar_chart(
            "Drops by reason",
            [r for r, _ in data.drops],
            {"drops": [float(n) for _, n in data.drops]},
            "messages dropped",
            "reason",
        ),
    }


def _tiles(audit: dict[str, Any]) -> str:
    keys = ("lost", "duplicated", "out_of_order", "unacked", "refused", "pairs")
    return "".join(
        f'<div class="tile{" bad" if k in PROBLEMS and audit.get(k) else ""}">'
        f"<b>{escape(str(audit.get(k, 'n/a')))}</b><span>{escape(k.replace('_', ' '))}</span></div>"
        for k in keys
    )


def render_html(data: ReportData, title: str = "ternmq ETL report") -> str:
    """A self-contained page: headline, audit panel, charts, netsplits."""
    c = charts(data)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; max-width: 1320px; }}
pre {{ background: #f6f6f6; padding: .8em; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 1em; }}
.panel {{ border: 1px solid #ccc; border-radius: 6px; padding: .5em 1em 1em; margin: 1em 0; }}
.tiles {{ display: flex; gap: 1em; margin: .5em 0 1em; }}
.tile {{ border: 1px solid #ccc; border-radius: 4px; padding: .4em 1em; min-width: 6em; }}
.tile b {{ display: block; font-size: 22px; }}
.tile span {{ color: #555; font-size: 12px; }}
.tile.bad b {{ color: #c00; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 2px 8px; text-align: left; }}
.cols {{ display: flex; gap: 3em; align-items: flex-start; }}
</style></head><body>
<h1>{escape(title)}</h1>
<pre>{escape(headline(data))}</pre>
<section class="panel" id="audit"><h2>Delivery audit</h2>
<div class="tiles">{_tiles(data.audit)}</div>
<div class="cols">{c["worst"]}<div><h3>Worst subscribers</h3>{_table(data.worst)}</div></div>
</section>
<div class="charts">{"".join(c[k] for k in CHARTS)}</div>
<div class="cols"><div><h2>Audit summary</h2>{_table(_audit_rows(data.audit))}</div>
<div><h2>Netsplits</h2>{_table(data.netsplits)}</div></div>
</body></html>
"""


def _audit_rows(audit: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"measure": k, "value": v} for k, v in audit.items()]
