"""Incremental runs: tables after runs over growing, rotating logs equal a full run's.

The logs are replayed through the broker's rotation scheme in phases: run 1 sees the
lines before a cut time (one live file ends in half a line), run 2 sees the rest (the
files rotated meanwhile: renamed files grew, new files started), run 3 runs after the
oldest rotated file was pruned. Then every table must equal that of a full run (``--full``)
over the same files, and a message published before the cut and delivered after it must
have been judged once, delivered, by run 2.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from spark_pipeline import extract, manifest
from spark_pipeline.cli import etl
from spark_pipeline.jobs import run_etl
from spark_pipeline.rotating import RotatingWriter
from spark_pipeline.synthetic import SynthConfig, generate
from spark_pipeline.tables import TABLE_NAMES

pytestmark = pytest.mark.spark
ROTATE = 40_000
# 23:59:57 UTC: the logs cross midnight, so an incremental run touches one date of two.
START = int(datetime(2026, 11, 22, 23, 59, 57, tzinfo=UTC).timestamp()) * 10**6


def snapshot(spark: SparkSession, out: Path) -> dict[str, list[str]]:
    return {
        name: sorted(repr(r) for r in spark.read.parquet(str(out / name)).collect())
        for name in TABLE_NAMES
    }


def chains(root: Path) -> dict[Path, list[str]]:
    """Each chain's lines (relative live path -> lines, oldest first)."""
    found: dict[Path, list[str]] = {}
    for f in extract.find_log_files(root):
        live = Path(manifest.chain_of(f)).relative_to(root)
        found.setdefault(live, []).extend(f.read_text().splitlines(keepends=True))
    return found


def ts_of(line: str) -> str:
    """The line's ts, or "" for a line without one (corrupt lines are kept in place)."""
    m = re.match(r'\{"ts":"([^"]+)"', line)
    return m.group(1) if m else ""


def test_incremental_runs_equal_a_full_run(spark: SparkSession, tmp_path: Path) -> None:
    cfg = SynthConfig(
        events=3000, nodes=2, lose=0.02, duplicate=0.02, reorder=0.02, corrupt=2,
        rotate_bytes=10**9, start_us=START, seed=5,
    )  # fmt: skip
    generate(cfg, tmp_path / "src")
    lines = chains(tmp_path / "src")
    stamps = sorted(ts_of(x) for ls in lines.values() for x in ls if ts_of(x))
    cut = stamps[len(stamps) * 3 // 5]
    logs, out = tmp_path / "logs", tmp_path / "out"
    writers = {p: RotatingWriter(logs / p, ROTATE) for p in lines}
    rest: dict[Path, list[str]] = {}
    for p, ls in lines.items():
        i = next((k for k, x in enumerate(ls) if ts_of(x) >= cut), len(ls))
        for x in ls[:i]:
            writers[p].write(x)
        rest[p] = ls[i:]
    half = next(p for p in rest if "listener" in str(p) and rest[p])
    writers[half].write(rest[half][0][:25])  # a line being written when run 1 reads
    rest[half][0] = rest[half][0][25:]
    for w in writers.values():
        w.flush()

    first = run_etl(logs, out, spark=spark)
    assert first["mode"] == "full"

    for p, ls in rest.items():
        for x in ls:
            writers[p].write(x)
    for w in writers.values():
        w.close()
    assert any(f.name.endswith(".jsonl.2") for f in extract.find_log_files(logs))
    second = run_etl(logs, out, spark=spark)
    total = sum(f.stat().st_size for f in extract.find_log_files(logs))
    assert second["mode"] == "incremental"
    # Only the new bytes, and the half line again (run 1 read it provisionally).
    assert second["read_bytes"] == total - first["read_bytes"] + 25 > 25
    cut_at = datetime.fromisoformat(cut)
    audit = spark.read.parquet(str(out / "delivery_audit"))
    spanning = audit.where(
        (audit.published_at < cut_at) & (audit.first_delivered_at >= cut_at)
    ).collect()
    assert spanning, "some message must be published in run 1 and delivered in run 2"
    assert not any(r["lost"] for r in spanning) and all(r["delivered"] for r in spanning)
    assert len({d.name for d in (out / "node_load").iterdir() if d.name.startswith("date=")}) == 2

    oldest = max(extract.find_log_files(logs), key=lambda f: f.name.endswith(".jsonl.2"))
    gone = oldest.stat().st_size
    oldest.unlink()
    third = run_etl(logs, out, spark=spark)
    assert third["mode"] == "incremental" and third["read_bytes"] == 0
    assert third["events"] < second["events"]
    incremental = snapshot(spark, out)

    res = CliRunner().invoke(
        etl, ["run", "--logs", str(logs), "--out", str(out), "--full", "--json", "--quiet"]
    )
    assert res.exit_code == 0, res.output
    full = json.loads(res.stdout)
    assert full["mode"] == "full" and full["read_bytes"] == total - gone
    assert snapshot(spark, out) == incremental
    assert {k: v for k, v in third.items() if k not in ("mode", "read_bytes")} == {
        k: v for k, v in full.items() if k not in ("mode", "read_bytes")
    }
