"""The whole ``run`` job on log directories, through ``run_etl`` and the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from spark_pipeline import extract, reference
from spark_pipeline.cli import etl
from spark_pipeline.expect import parse_expectations
from spark_pipeline.jobs import expectations_frame, run_etl, write_table
from spark_pipeline.query import register_tables
from spark_pipeline.synthetic import SynthConfig, generate
from spark_pipeline.tables import TABLE_NAMES
from spark_pipeline.transforms.audit import audit_events, audit_summary

ROOT = Path(__file__).resolve().parents[2]


def line(ts: str, node: str, event: str, **fields: Any) -> str:
    rec = {
        "ts": f"2026-11-22T07:00:{ts}Z",
        "level": "info",
        "node": node,
        "service": "listener",
        "event": event,
        "schema": "1.0",
        **fields,
    }
    return json.dumps(rec, separators=(",", ":")) + "\n"


def published(ts: str, i: int) -> str:
    return line(
        ts,
        "dev1",
        "message.published",
        msg_id=f"m{i}",
        client_id="P",
        topic="a/b",
        qos=1,
        retain=False,
        size=64,
        mountpoint="",
    )


def delivered(ts: str, i: int, dup: bool = False) -> str:
    return line(
        ts,
        "dev2",
        "message.delivered",
        msg_id=f"m{i}",
        client_id="S",
        topic="a/b",
        qos=1,
        dup=dup,
        latency_us=1000 + i,
        publisher="P",
        seq=i,
    )


def acked(ts: str, i: int) -> str:
    return line(ts, "dev2", "message.acked", msg_id=f"m{i}", client_id="S", qos=1, latency_us=5)


def connected(ts: str, node: str, client: str) -> str:
    return line(
        ts,
        node,
        "client.connected",
        client_id=client,
        mountpoint="",
        peer="p",
        proto_ver=4,
        clean_start=True,
        session_present=False,
        keepalive=60,
        session_expiry=0,
        username="u",
        listener="tcp",
    )


def make_logs(base: Path) -> Path:
    """Two nodes; m1 (rotated file) and m2 share a ts, so do m3 and m4 (same file).

    S receives m1 m2 m3 m4 m7 m6 m6(dup): m5 lost, m6 duplicated and out of order.
    """
    d1, d2 = base / "dev1" / "log", base / "dev2" / "log"
    d1.mkdir(parents=True)
    d2.mkdir(parents=True)
    (d1 / "listener.jsonl.1").write_text(
        connected("00.000000", "dev1", "P") + published("01.000000", 1)
    )
    (d1 / "listener.jsonl").write_text(
        published("01.000000", 2)
        + published("02.000000", 3)
        + '{"ts":"2026-11-22T07:00:02Z","event":"message.pub\n'
        + published("02.000000", 4)
        + "not json at all\n"
        + published("03.000000", 5)
        + published("04.000000", 6)
        + published("05.000000", 7)
        + line(
            "09.000000",
            "dev1",
            "client.disconnected",
            client_id="P",
            mountpoint="",
            peer="p",
            reason="normal",
            reason_code=0,
            duration_s=9.0,
        )
    )
    (d1 / "listener.log").write_text("07:00:00 human readable console log, not read\n")
    s = connected("00.500000", "dev2", "S")
    for n, (i, dup) in enumerate([(1, 0), (2, 0), (3, 0), (4, 0), (7, 0), (6, 0), (6, 1)]):
        s += delivered(f"06.{n:06d}", i, bool(dup)) + acked(f"07.{n:06d}", i)
    s += '{"ts":"2026-11-22T07:00:08Z","event":"message.del'  # crash mid-write
    (d2 / "listener.jsonl").write_text(s)
    for node, peer, start, end in (
        ("dev1", "dev2", "03.0", "03.5"),
        ("dev2", "dev1", "03.2", "03.7"),
    ):
        (base / node / "log" / "gossip.jsonl").write_text(
            line(f"{start}00000", node, "netsplit.detected", unreachable=[peer], members=2)
            + line(f"{end}00000", node, "netsplit.healed", duration_s=0.5, members=2)
        )
    return base


def snapshot(spark: SparkSession, out: Path) -> dict[str, list[str]]:
    return {
        name: sorted(repr(r) for r in spark.read.parquet(str(out / name)).collect())
        for name in TABLE_NAMES
    }


@pytest.mark.spark
@pytest.mark.slow
def test_run_job_twice_and_query_it(spark: SparkSession, tmp_path: Path) -> None:
    logs, out = make_logs(tmp_path / "logs"), tmp_path / "out"
    progress: list[str] = []
    summary = run_etl(logs, out, spark=spark, progress=progress.append)
    assert {k: summary[k] for k in ("files", "corrupt_lines", "lost", "duplicated")} == {
        "files": 5,
        "corrupt_lines": 3,
        "lost": 1,
        "duplicated": 1,
    }
    assert (summary["out_of_order"], summary["pairs"], summary["expected"]) == (1, 7, 7)
    assert summary["expect_mode"] == "deliveries"
    assert any("delivery_audit written" in p for p in progress)

    audit = {r["msg_id"]: r for r in spark.read.parquet(str(out / "delivery_audit")).collect()}
    assert [audit[f"m{i}"]["pub_seq"] for i in range(1, 8)] == [1, 2, 3, 4, 5, 6, 7]
    assert [m for m, r in sorted(audit.items()) if r["lost"]] == ["m5"]
    assert [m for m, r in sorted(audit.items()) if r["out_of_order"]] == ["m6"]
    assert all(r["acked"] for m, r in audit.items() if m != "m5")
    sessions = sorted(
        (r["client_id"], r["node"], r["complete"], r["duration_s"])
        for r in spark.read.parquet(str(out / "sessions")).collect()
    )
    assert sessions == [("P", "dev1", True, 9.0), ("S", "dev2", False, None)]
    splits = spark.read.parquet(str(out / "netsplits")).collect()
    assert [(r["nodes"], r["duration_s"], r["reports"]) for r in splits] == [
        (["dev1", "dev2"], 0.7, 2)
    ]
    flow = spark.read.parquet(str(out / "message_flow")).collect()
    assert sum(r["messages"] for r in flow) == 7 and sum(r["deliveries"] for r in flow) == 7
    assert (out / "message_flow" / "date=2026-11-22").is_dir()
    first = snapshot(spark, out)

    runner = CliRunner()
    res = runner.invoke(etl, ["run", "--logs", str(logs), "--out", str(out), "--quiet", "--json"])
    assert res.exit_code == 0, res.output
    again = json.loads(res.stdout)
    # Nothing is read again but the last line of the writer that crashed mid-line.
    assert (again.pop("mode"), again.pop("read_bytes")) == ("incremental", 49)
    assert again == {k: v for k, v in summary.items() if k not in ("mode", "read_bytes")}
    assert snapshot(spark, out) == first, "a second run must give the same tables"

    res = runner.invoke(
        etl,
        [
            "query",
            "SELECT msg_id, pub_seq FROM delivery_audit WHERE lost OR duplicated ORDER BY msg_id",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    assert [json.loads(x) for x in res.stdout.splitlines()] == [
        {"msg_id": "m5", "pub_seq": 5},
        {"msg_id": "m6", "pub_seq": 6},
    ]
    res = runner.invoke(etl, ["query", "SELECT nope FROM sessions", "--out", str(out)])
    assert res.exit_code == 1 and "query failed" in res.output
    html = tmp_path / "report.html"
    res = runner.invoke(etl, ["report", "--out", str(out), "--html", str(html)])
    assert res.exit_code == 0, res.output
    assert "1 lost, 1 duplicated, 1 out of order" in res.stdout
    assert html.read_text().count('<svg xmlns="http://www.w3.org/2000/svg" class="chart') == 6

    register_tables(spark, out)
    queries = re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "analytics.md").read_text(), re.S)
    assert len(queries) == 10
    for sql in queries:
        assert spark.sql(sql).columns, sql  # analysis resolves tables, columns, functions


@pytest.mark.spark
def test_spark_audit_agrees_with_reference_and_truth(spark: SparkSession, tmp_path: Path) -> None:
    cfg = SynthConfig(
        events=2_500,
        lose=0.03,
        duplicate=0.03,
        reorder=0.03,
        refuse=0.03,
        corrupt=3,
        rotate_bytes=50_000,
        seed=3,
    )
    truth = generate(cfg, tmp_path)
    files = extract.find_log_files(tmp_path)
    events = extract.valid_events(extract.read_raw(spark, files)).cache()
    expectations = parse_expectations(truth.expect)
    for exp in (None, expectations):
        exp_df = None if exp is None else expectations_frame(spark, exp)
        row = audit_summary(audit_events(events, exp_df)).first()
        assert row is not None
        want = reference.audit(reference.scan(files), exp)
        assert row.asDict() == want
    assert (want["lost"], want["duplicated"], want["out_of_order"]) == (
        truth.lost,
        truth.duplicated,
        truth.reordered,
    )
    assert want["refused"] == truth.refused_pairs > 0
    events.unpersist()


def test_module_entry_point_lists_the_commands() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "spark_pipeline", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for command in ("run", "query", "report", "events-doc"):
        assert command in res.stdout
    # `ternmq --help` adds this group; it must not pay for (or need) pyspark.
    probe = "import sys, spark_pipeline.cli; print('pyspark' in sys.modules)"
    res = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert res.stdout.strip() == "False"


def test_run_refuses_bad_input_before_starting_spark(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "console.log").write_text("not a jsonl file\n")
    runner = CliRunner()
    res = runner.invoke(etl, ["run", "--logs", str(tmp_path / "logs"), "--out", str(tmp_path)])
    assert res.exit_code == 1 and "no *.jsonl" in res.output
    bad = tmp_path / "expect.json"
    bad.write_text('[{"subscriber": "s", "topic_filter": "a/#/b"}]')
    args = ["run", "--logs", str(tmp_path), "--out", str(tmp_path), "--expect", str(bad)]
    res = runner.invoke(etl, args)
    assert res.exit_code == 1 and "entry 0" in res.output


def test_an_empty_partitioned_table_can_be_read_back(spark: SparkSession, tmp_path: Path) -> None:
    """A run with no matching events leaves tables with no rows; they must still carry
    their schema (etl query reads every table; the audit summary reads delivery_audit)."""
    empty = spark.createDataFrame([("n1", 1)], "node string, n int").filter("n > 1")
    write_table(empty, tmp_path / "t", ("node",))
    back = spark.read.parquet(str(tmp_path / "t"))
    assert sorted(back.columns) == ["n", "node"] and back.count() == 0
    full = spark.createDataFrame([("n1", 1), ("n2", 2)], "node string, n int")
    write_table(full, tmp_path / "t", ("node",))  # partitioned again once it has rows
    assert sorted(r.n for r in spark.read.parquet(str(tmp_path / "t")).collect()) == [1, 2]
    assert (tmp_path / "t" / "node=n1").is_dir()
