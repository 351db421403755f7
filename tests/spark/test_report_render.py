"""Pure rendering: SVG charts, HTML report, query output formats."""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest

from spark_pipeline.query import format_csv, format_json, format_table
from spark_pipeline.report import ReportData, headline, render_html
from spark_pipeline.svg import bar_chart, time_chart

SVG = "{http://www.w3.org/2000/svg}"


def test_time_chart_draws_lines_and_points_with_labelled_axes() -> None:
    pts = {"a": [(0, 1), (60, 5), (120, 2)], "b": [(0, 2), (60, 0), (120, 1)]}
    svg = time_chart("T <&>", pts, "messages / minute")
    root = ET.fromstring(svg)
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2 and all(x.get("class") == "mark" for x in lines)
    ys = [float(p.split(",")[1]) for p in lines[0].get("points", "").split()]
    assert ys[0] > ys[1], "a larger value is drawn higher (smaller y)"
    assert len(root.findall(f"{SVG}circle")) == 6, "few points are marked"
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "T &lt;&amp;&gt;" in svg and "messages / minute" in texts
    assert "time (UTC, per minute)" in texts and "00:00" in texts


def test_a_single_minute_is_drawn_as_bars() -> None:
    svg = time_chart("one minute", {"published": [(420.0, 10)], "delivered": [(420.0, 7)]}, "n")
    rects = [r for r in ET.fromstring(svg).iter(f"{SVG}rect") if r.get("class") == "mark"]
    heights = sorted(float(r.get("height", "0")) for r in rects)
    assert len(rects) == 2 and heights[0] > 0 and heights[1] / heights[0] == pytest.approx(10 / 7)


def test_bar_chart_heights_are_proportional_and_stack() -> None:
    svg = bar_chart("drops", ["queue_full", "expired"], {"n": [10, 5]}, "messages", "reason")
    root = ET.fromstring(svg)
    heights = [float(r.get("height", "0")) for r in root.iter(f"{SVG}rect") if r.get("class")]
    assert heights[0] == 2 * heights[1] > 0
    stacked = bar_chart("w", ["s1"], {"lost": [3], "dup": [1]}, "pairs", "sub", stacked=True)
    marks = [r for r in ET.fromstring(stacked).iter(f"{SVG}rect") if r.get("class") == "mark"]
    bottom = [float(r.get("y", "0")) + float(r.get("height", "0")) for r in marks]
    assert bottom[1] == pytest.approx(float(marks[0].get("y", "0"))), "dup sits on lost"


def test_empty_charts_say_so() -> None:
    assert "no data" in bar_chart("x", [], {}, "y", "x")
    assert "no data" in time_chart("x", {"a": []}, "y")


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
    assert html.count("<svg") == 6
    assert "dev3" in html and 'id="audit"' in html


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
