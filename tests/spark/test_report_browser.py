"""The HTML report as a browser draws it: headless Chromium renders the report of logs
that span a single minute (a short incident: a line chart has one point per series) and
every chart must have drawn marks inside its own frame. The page's screenshot is kept
as an artefact (``report.png`` in the test's directory, and in ``$TERNMQ_ARTIFACTS``
when set).

A script appended to a copy of the page counts each chart's marks with their laid-out
boxes; ``--dump-dom`` hands the result back, ``--screenshot`` takes the picture.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.jobs import run_etl
from spark_pipeline.report import load_report, render_html
from spark_pipeline.synthetic import SynthConfig, generate
from tests.support.browser import headless

pytestmark = pytest.mark.spark
START = int(datetime(2026, 11, 22, 7, 0, 5, tzinfo=UTC).timestamp()) * 10**6
COUNT_MARKS = """<script>
const charts = [...document.querySelectorAll("svg.chart")].map((svg) => {
  const box = svg.getBoundingClientRect();
  const drawn = [...svg.querySelectorAll(".mark")].filter((m) => {
    const r = m.getBoundingClientRect();
    const inside = r.right > box.left && r.left < box.right &&
      r.bottom > box.top && r.top < box.bottom;
    return (r.width > 0 || r.height > 0) && inside;
  });
  return {chart: svg.dataset.chart, marks: drawn.length,
          kinds: [...new Set(drawn.map((m) => m.tagName))].sort()};
});
const pre = document.createElement("pre");
pre.id = "marks";
pre.textContent = JSON.stringify(charts);
document.body.appendChild(pre);
</script>"""


def _chromium(tmp_path: Path, *args: str) -> str:
    res = subprocess.run(
        headless(tmp_path / "profile", "1360,1900", *args),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def test_every_chart_draws_marks_for_a_single_minute(spark: SparkSession, tmp_path: Path) -> None:
    cfg = SynthConfig(
        events=2500, nodes=2, lose=0.03, duplicate=0.03, reorder=0.03, start_us=START, seed=7
    )
    generate(cfg, tmp_path / "logs")
    run_etl(tmp_path / "logs", tmp_path / "out", spark=spark)
    data = load_report(spark, tmp_path / "out")
    assert len(data.throughput) == 1, "the logs span a single minute"
    assert data.drops and data.worst and len({n for _, n, _, _ in data.node_load}) == 2
    page = tmp_path / "report.html"
    page.write_text(render_html(data), encoding="utf-8")
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", COUNT_MARKS + "</body>"))

    dom = _chromium(tmp_path, "--dump-dom", probe.as_uri())
    found = re.search(r'<pre id="marks">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    charts = json.loads(found.group(1).replace("&quot;", '"'))
    names = [c["chart"] for c in charts]
    assert len(names) == 6, names
    assert all(c["marks"] > 0 for c in charts), charts
    throughput = next(c for c in charts if c["chart"].startswith("throughput"))
    assert throughput["kinds"] == ["rect"], "one minute is drawn as bars"

    shot = tmp_path / "report.png"
    _chromium(tmp_path, f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:4] == b"\x89PNG"
    keep = os.environ.get("TERNMQ_ARTIFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "etl-report.png")
        shutil.copy(page, Path(keep) / "etl-report.html")
