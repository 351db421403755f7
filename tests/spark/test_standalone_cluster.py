"""The ETL on a real Spark standalone cluster writes the tables a local run writes.

A master and two workers (1 core, 1 GiB each) are started from the pyspark package's own
``spark-class`` on 127.0.0.1 with ephemeral ports; ``ternmq etl run --master
spark://127.0.0.1:PORT`` then runs as a user would run it, its executors in separate
JVMs reading the logs and writing the tables. Everything started here is stopped by pid.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.jobs import run_etl
from spark_pipeline.synthetic import SynthConfig, generate
from spark_pipeline.tables import TABLE_NAMES

pytestmark = pytest.mark.spark
SPARK_CLASS = Path(sys.executable).parent / "spark-class"
MASTER_URL = re.compile(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)")


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "PYSPARK_PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }


def _wait_for(log: Path, pattern: re.Pattern[str], proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        m = pattern.search(log.read_text(errors="replace"))
        if m:
            return m.group(1) if pattern.groups else m.group(0)
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    raise AssertionError(f"{pattern.pattern!r} not in {log}:\n{log.read_text()[-3000:]}")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in reversed(procs):
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A master and two workers; yields the master URL."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        with log.open("wb") as fh:
            # spark-class ends in exec: the pid is the JVM's.
            proc = subprocess.Popen(
                [str(SPARK_CLASS), *args],
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=_env(),
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
            )
        procs.append(proc)
        return proc, log

    try:
        master, log = start(
            "master",
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
        )
        url = _wait_for(log, MASTER_URL, master)
        workers = [
            start(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
                *("--cores", "1", "--memory", "1g", "--work-dir", str(tmp_path / f"work{i}")),
                url,
            )
            for i in (1, 2)
        ]
        for worker, wlog in workers:
            _wait_for(wlog, re.compile("Successfully registered with master"), worker)
        yield url
    finally:
        _stop(procs)


def snapshot(spark: SparkSession, out: Path) -> dict[str, list[str]]:
    return {
        name: sorted(repr(r) for r in spark.read.parquet(str(out / name)).collect())
        for name in TABLE_NAMES
    }


def test_cluster_run_equals_local_run(spark: SparkSession, cluster: str, tmp_path: Path) -> None:
    cfg = SynthConfig(
        events=1200, nodes=2, lose=0.02, duplicate=0.02, reorder=0.02, corrupt=2,
        rotate_bytes=150_000, seed=11,
    )  # fmt: skip
    generate(cfg, tmp_path / "logs")
    local = run_etl(tmp_path / "logs", tmp_path / "local", spark=spark)
    res = subprocess.run(
        [
            sys.executable,
            *("-m", "spark_pipeline", "run", "--master", cluster),
            *("--logs", str(tmp_path / "logs"), "--out", str(tmp_path / "cluster")),
            *("--driver-memory", "1g", "--conf", "spark.executor.memory=512m"),
            *("--conf", "spark.executor.cores=1", "--conf", "spark.cores.max=2"),
            # As the test session (conftest): tiny frames, so no per-query compile or
            # per-stage re-planning; the tables do not depend on either.
            *("--conf", "spark.sql.adaptive.enabled=false"),
            *("--conf", "spark.sql.codegen.wholeStage=false"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert re.search(r"step 1/\d+ parse", res.stderr)
    workers = sorted((tmp_path / "work1").glob("app-*")) + sorted(
        (tmp_path / "work2").glob("app-*")
    )
    assert len(workers) == 2, "both workers ran an executor of the job"
    remote = res.stdout[res.stdout.index("{") :]
    assert json.loads(remote) == local
    assert local["lost"] > 0 and local["duplicated"] > 0
    assert snapshot(spark, tmp_path / "cluster") == snapshot(spark, tmp_path / "local")
