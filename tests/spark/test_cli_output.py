"""What a person sees: no Spark start-up noise unless --verbose, a progress line that
stays plain off a terminal, corrupt lines named by file and line, aligned query tables.

The run and the verbose query run as their own processes, as a user runs them: the
noise comes from the JVM start-up, which an in-process session (the test fixture's) has
long passed. The plain query's table is checked in process.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from spark_pipeline.cli import etl
from tests.support.etl_cli import run_etl

pytestmark = pytest.mark.spark
NOISE = ("WARN", "log4j", "NativeCodeLoader", "native-hadoop", "incubator", "setLogLevel")


def _line(ts: str, event: str, **fields: object) -> str:
    base = {"ts": f"2026-11-22T07:00:{ts}Z", "level": "info", "node": "dev1"}
    return json.dumps({**base, "service": "listener", "event": event, "schema": "1.0", **fields})


def test_quiet_run_progress_bad_lines_and_query_tables(spark: SparkSession, tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "dev1"
    logs.mkdir(parents=True)
    good = [
        _line(f"{i:02d}.000000", "message.published", msg_id=f"m{i}", client_id="P",
              topic="t", qos=1, retain=False, size=10)
        for i in range(1, 6)
    ]  # fmt: skip
    lines = [*good[:3], '{"ts": "2026-11-22T07:00:09Z", "event": "message.pub', *good[3:]]
    (logs / "listener.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"

    res = run_etl("run", "--logs", str(tmp_path / "logs"), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert not [n for n in NOISE if n in res.stderr], res.stderr
    assert "\r" not in res.stderr, "off a terminal the bar prints plain lines"
    assert re.search(r"step 1/\d+ parse", res.stderr) and "events read" in res.stderr
    assert "events/s" in res.stderr
    assert f"{logs / 'listener.jsonl'}:4: " in res.stderr, "names the file and line"
    assert "corrupt_lines   1" in res.stdout

    sql = "SELECT 'a/long/topic' AS topic, 7 AS n UNION ALL SELECT 't', 12345"
    query = CliRunner().invoke(etl, ["query", sql, "--out", str(out)])  # the test's session
    assert query.exit_code == 0, query.output
    head, sep, row1, row2, count = query.stdout.splitlines()
    assert head == "topic        |     n" and set(sep) == {"-", "+"}
    assert row1 == "a/long/topic |     7" and row2 == "t            | 12345"
    assert count == "(2 rows)"

    res = run_etl("query", sql, "--out", str(out), "--verbose")
    assert res.returncode == 0, res.stderr
    assert [n for n in NOISE if n in res.stderr], "--verbose shows Spark's own output"
    assert res.stdout == query.stdout
