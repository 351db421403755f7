"""The parsed staging frame's line key, and the job's speed levers keeping tables equal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_pipeline import extract
from spark_pipeline.jobs import BYTES_PER_PARTITION, shuffle_partitions, write_tables
from spark_pipeline.tables import TableSpec
from spark_pipeline.transforms import audit


def test_file_ranks_put_each_chain_oldest_rotation_first() -> None:
    paths = [
        "file:/l/dev2/listener.jsonl",
        "file:/l/dev1/listener.jsonl.1",
        "file:/l/dev1/listener.jsonl",
        "file:/l/dev1/listener.jsonl.10",
        "file:/l/dev1/listener.jsonl.2",
        "file:/l/dev1/gossip.jsonl",
    ]
    ranks = extract.file_ranks(paths)
    assert sorted(ranks, key=ranks.__getitem__) == [
        "file:/l/dev1/gossip.jsonl",
        "file:/l/dev1/listener.jsonl.10",
        "file:/l/dev1/listener.jsonl.2",
        "file:/l/dev1/listener.jsonl.1",
        "file:/l/dev1/listener.jsonl",
        "file:/l/dev2/listener.jsonl",
    ]


def test_scan_path_spells_local_files_as_the_scan_does() -> None:
    assert extract.scan_path("file:///tmp/a%20b.jsonl") == "file:/tmp/a%20b.jsonl"
    assert extract.scan_path("file:/tmp/a.jsonl") == "file:/tmp/a.jsonl"
    assert extract.scan_path("hdfs://nn:8020/a.jsonl") == "hdfs://nn:8020/a.jsonl"


def _line(i: int) -> str:
    rec = {"ts": "2026-11-22T07:00:00Z", "event": "x.y", "node": "n", "msg_id": f"m{i}"}
    return json.dumps(rec) + "\n"


@pytest.mark.spark
def test_equal_timestamps_sort_in_file_chain_order(spark: SparkSession, tmp_path: Path) -> None:
    """Every line has the same ts: ``_lk`` alone must give the order they were written in,
    across rotations (``.2`` before ``.1`` before the live file), with no string in it."""
    log = tmp_path / "dev1" / "log"
    log.mkdir(parents=True)
    chunks = {"listener.jsonl.2": (0, 3), "listener.jsonl.1": (3, 6), "listener.jsonl": (6, 9)}
    for name, (lo, hi) in chunks.items():
        (log / name).write_text("".join(_line(i) for i in range(lo, hi)))
    (log / "a b.jsonl").write_text(_line(99))  # a name the scan percent-encodes
    raw = extract.read_raw(spark, extract.find_log_files(tmp_path))
    lk = raw.schema["_lk"].dataType
    assert isinstance(lk, T.StructType)
    assert [f.name for f in lk.fields] == ["ts", "file", "block", "row"]
    assert not any(isinstance(f.dataType, T.StringType) for f in lk.fields)
    got = [r.msg_id for r in raw.orderBy("_lk").select("msg_id").collect()]
    assert got == ["m99", *[f"m{i}" for i in range(9)]]


def _pairs_frame(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, "msg_id string, subscriber string")


@pytest.mark.spark
def test_expected_pairs_drop_listed_subscribers_before_the_deliveries_rule(
    spark: SparkSession,
) -> None:
    """Same pairs as running the deliveries rule first and dropping listed ones after."""
    audited = spark.createDataFrame(
        [(f"m{i}", "P", "t", 1, i, None) for i in range(1, 7)],
        "msg_id string, publisher string, topic string, qos long, pub_seq long,"
        " published_at timestamp",
    )
    pairs = _pairs_frame(spark, [("m1", "A"), ("m4", "A"), ("m2", "B"), ("m5", "B")])
    expectations = spark.createDataFrame([("A", "^t$", None)], audit.EXPECT_SCHEMA)
    got = audit.expected_pairs(audited, pairs, expectations)
    listed = expectations.select("subscriber").distinct()
    derived = audit.expected_from_deliveries(audited, pairs).join(listed, "subscriber", "left_anti")
    want = derived.select(*audit.PAIR).unionByName(
        audit.expected_from_filters(audited, expectations)
    )
    key = [F.col("msg_id"), F.col("subscriber")]
    assert sorted(got.select(*key).collect()) == sorted(want.distinct().select(*key).collect())
    assert {r.subscriber for r in got.collect()} == {"A", "B"}
    assert sorted(r.msg_id for r in got.where("subscriber = 'A'").collect()) == [
        f"m{i}" for i in range(1, 7)
    ]


@pytest.mark.spark
def test_write_tables_writes_each_table_once_whatever_the_writers(
    spark: SparkSession, tmp_path: Path
) -> None:
    frames = {f"t{i}": spark.range(i + 1).withColumn("date", F.lit("2026-11-22")) for i in range(5)}
    builders = {name: (lambda df=df: df) for name, df in frames.items()}
    specs = [TableSpec(name, ("date",) if i % 2 else (), "") for i, name in enumerate(frames)]
    said: list[str] = []
    for writers in (1, 3):
        write_tables(builders, specs, tmp_path / str(writers), said.append, writers)
        for i, name in enumerate(frames):
            back = spark.read.parquet(str(tmp_path / str(writers) / name))
            assert back.count() == i + 1
    assert len(said) == 2 * len(frames)
    assert said[-1].startswith(f"[{len(frames)}/{len(frames)}]")


def test_shuffle_partitions_follow_the_input_size_in_multiples_of_cores() -> None:
    assert shuffle_partitions(1_000, 2) == 2
    assert shuffle_partitions(0, 4) == 4
    assert shuffle_partitions(int(1.1 * 2**30), 2) == 6
    assert shuffle_partitions(10 * BYTES_PER_PARTITION + 1, 4) == 12
    assert shuffle_partitions(10**15, 8) == 2000
    assert shuffle_partitions(10**9, 0) == 4
