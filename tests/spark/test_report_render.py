"""Pure rendering: SVG charts, HTML report, query output formats."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from spark_pipeline.query import format_csv, format_json, format_table
from spark_pipeline.report import ReportData, headline, render_html
from spark_pipeline.svg import bar_chart, line_chart

SVG = "{http://www.w3.org/2000/svg}"


def test_line_chart_is_valid_svg_with_one_polyline_per_series() -> None:
    svg = line_chart("T <&>", {"a": [(0, 1), (60, 5)], "b": [(0, 2), (60, 0)]}, lambda x: f"{x:g}s")
    root = ET.fromstring(svg)
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2
    ys = [float(p.split(",")[1]) for p in lines[0].get("points", "").split()]
    assert ys[0] > ys[1], "a larger value is drawn higher (smaller y)"
    assert "T &lt;&amp;&gt;" in svg


def test_bar_chart_heights_are_proportional() -> None:
    root = ET.fromstring(bar_chart("drops", [("queue_full", 10), ("expired", 5)]))
    heights = [float(r.get("height", "0")) for r in root.findall(f"{SVG}rect")]
    assert heights[0] == 2 * heights[1] > 0


def test_empty_charts_say_so() -> None:
    assert "no data" in bar_chart("x", [])
    assert "no data" in line_chart("x", {"a": []}, str)


def _data() -> ReportData:
    t = datetime(2026, 11, 22, 7, 5, tzinfo=UTC)
    return ReportData(
        headline={"sessions": 3, "clients": 2, "messages": 10, "p99_us": 900},
        audit={
            "pairs": 7,
            "lost": 1,
            "duplicated": 0,
            "out_of_order": 2,
            "unacked": 0,
            "refused": 3,
        },
        throughput=[(t, 10, 7)],
        latency=[(t, 100.0, 500.0, 900.0)],
        drops=[("queue_full", 4)],
        netsplits=[{"split_id": 1, "nodes": ["dev1", "dev3"]}],
    )


def test_headline_and_html() -> None:
    text = headline(_data())
    assert "1 lost" in text and "2 out of order" in text and "p99 900 us" in text
    assert "3 refused" in text
    html = render_html(_data())
    assert html.count("<svg") == 3
    assert "dev3" in html


def test_query_formats() -> None:
    cols = ["topic", "n", "tags"]
    rows: list[list[object]] = [["a/b", 3, ["x"]], [None, 12, None]]
    table = format_table(cols, rows).splitlines()
    assert table[0].split("|")[0].strip() == "topic"
    assert table[2].endswith(' 3 | ["x"]')
    assert [json.loads(x) for x in format_json(cols, rows).splitlines()][1] == {
        "topic": None,
        "n": 12,
        "tags": None,
    }
    parsed = list(csv.reader(io.StringIO(format_csv(cols, rows))))
    assert parsed == [cols, ["a/b", "3", '["x"]'], ["", "12", ""]]
