"""The driver JVM's class archive (``spark_pipeline.class_cache``): the first ``etl run``
leaves one, later runs start from it without a word about it, and the JVM can map it
(``-Xshare:on`` refuses to start otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_pipeline import class_cache
from tests.support.etl_cli import ROOT, run_etl

pytestmark = pytest.mark.spark
NOISE = ("WARN", "warning", "cds", "SharedArchiveFile")


def test_the_first_run_leaves_an_archive_that_later_sessions_start_from(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "dev1"
    logs.mkdir(parents=True)
    base = {"level": "info", "node": "dev1", "service": "listener", "schema": "1.0"}
    lines = [
        {"ts": f"2026-11-22T07:00:0{i}.000000Z", **base, "event": "client.connected"}
        for i in range(3)
    ]
    (logs / "listener.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    cache = tmp_path / "cache"
    env = {class_cache.ENV: str(cache)}
    out = str(tmp_path / "out")

    first = run_etl("run", "--logs", str(tmp_path / "logs"), "--out", out, env=env)
    assert first.returncode == 0, first.stderr
    assert "caching Spark's classes" in first.stderr
    made = list(cache.iterdir())
    assert len(made) == 1 and made[0].suffix == ".jsa" and made[0].stat().st_size > 0, made

    second = run_etl("run", "--logs", str(tmp_path / "logs"), "--out", out, env=env)
    assert second.returncode == 0, second.stderr
    assert "caching" not in second.stderr
    assert not [n for n in NOISE if n in second.stderr], second.stderr
    assert list(cache.iterdir()) == made  # used, not made again

    # The JVM maps it: with -Xshare:on a JVM that cannot use the archive does not start.
    probe = (
        "from spark_pipeline.session import build_spark; "
        f"s = build_spark(java_options='-Xshare:on -XX:SharedArchiveFile={made[0]}'); "
        "assert s.range(10).count() == 10; s.stop()"
    )
    mapped = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        stdin=subprocess.DEVNULL,
    )
    assert mapped.returncode == 0, mapped.stderr[-2000:]


def test_where_the_archive_goes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(class_cache.ENV, "off")
    assert class_cache.archive_path() is None
    assert class_cache.java_options(None) == ""
    monkeypatch.setenv(class_cache.ENV, str(tmp_path))
    path = class_cache.archive_path()
    assert path is not None and path.parent == tmp_path and path.suffix == ".jsa"
    assert class_cache.java_options(path) == ""  # not made yet: nothing to start from
    monkeypatch.delenv(class_cache.ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = class_cache.archive_path()
    assert path is not None and path.parent == tmp_path / "xdg" / "ternmq"


def test_a_cache_that_cannot_be_written_makes_no_archive_and_no_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert class_cache.build(blocked / "sub" / "spark.jsa") is False
