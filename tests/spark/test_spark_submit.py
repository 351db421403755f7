"""The job file runs under spark-submit, whose --master wins (data that outgrows one
machine goes to a cluster this way), and its audit equals the in-process job's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_pipeline.synthetic import SynthConfig, generate

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def test_spark_submit_runs_the_job_file(tmp_path: Path) -> None:
    truth = generate(
        SynthConfig(events=3000, nodes=2, lose=0.02, duplicate=0.02), tmp_path / "logs"
    )
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(truth.expect))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SPARK_LOCAL_IP": "127.0.0.1"}
    res = subprocess.run(
        [
            str(bin_dir / "spark-submit"),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(ROOT / "spark_pipeline" / "__main__.py"),
            "run",
            "--logs",
            str(tmp_path / "logs"),
            "--out",
            str(tmp_path / "out"),
            "--expect",
            str(expect),
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout[res.stdout.index("{") :])
    assert summary["expect_mode"] == "filters"
    assert (summary["lost"], summary["duplicated"]) == (truth.lost, truth.duplicated)
    assert truth.lost > 0 and truth.duplicated > 0
    assert (tmp_path / "out" / "delivery_audit").is_dir()
