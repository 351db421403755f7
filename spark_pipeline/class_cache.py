"""The driver JVM's class-data archive (HotSpot's dynamic CDS): Spark's classes mapped
from one file instead of loaded, verified and linked one by one at every start.

Why: every ``ternmq etl`` command starts a JVM that loads thousands of Spark's classes
before its first job. On the 2-core development VM a session took 4.7 to 5.9 s to start
and its first small job 2.5 to 3.0 s; with an archive, 2.6 to 3.3 s and 1.5 to 2.7 s.

How: the first ``etl run`` that finds no archive builds one when it is done, in a child
process (:func:`build`) that runs a small ETL over generated logs under
``-XX:ArchiveClassesAtExit`` and writes the archive at its JVM's exit, under a temporary
name renamed into place only once complete. Later sessions start with
``-XX:SharedArchiveFile`` (:func:`java_options`). An archive that does not match the JVM
or Spark's jars is ignored by the JVM (``-Xshare:auto``, the default), so a stale one
costs nothing but its disk space; its name carries the pyspark version, the jars' path
and the Java binary (its path and modification time), so an upgrade makes a new one.

Where: ``$TERNMQ_ETL_CLASS_CACHE`` (a directory), else ``$XDG_CACHE_HOME/ternmq``, else
``~/.cache/ternmq``. ``TERNMQ_ETL_CLASS_CACHE=off`` disables it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from services.common.pids import group_alive

ENV: Final = "TERNMQ_ETL_CLASS_CACHE"
BUILD_TIMEOUT: Final = 600.0  # s the building child may take
# The JVM's CDS messages (an archive it cannot use, classes it skips) are not the user's.
_QUIET: Final = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def archive_path() -> Path | None:
    """Where this installation's archive is (it may not exist yet); None when disabled."""
    setting = os.environ.get(ENV, "")
    if setting.lower() == "off":
        return None
    if setting:
        base = Path(setting)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = Path(cache) / "ternmq"
    import pyspark

    # The JVM Spark starts (JAVA_HOME's, else the first on PATH), as a file: a JVM upgraded
    # in place gets an archive of its own.
    home = os.environ.get("JAVA_HOME", "")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java") or ""
    real = os.path.realpath(java) if java else ""
    stamp = os.stat(real).st_mtime_ns if real and os.path.exists(real) else 0
    key = f"{pyspark.__version__}|{Path(pyspark.__file__).parent}|{real}|{stamp}"
    digest = hashlib.sha256(key.encode())
    return base / f"spark-{pyspark.__version__}-{digest.hexdigest()[:12]}.jsa"


def java_options(path: Path | None) -> str:
    """The driver JVM's options to start from the archive at ``path`` ("" without one)."""
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {_QUIET}"


def build(path: Path) -> bool:
    """Make the archive at ``path`` in a child process; whether it now exists. A failure
    leaves nothing behind (the next run tries again)."""
    try:  # a cache directory that cannot be written (a read-only home) makes no archive
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError:
        return False
    os.close(fd)
    partial = Path(name)
    partial.unlink()  # the JVM creates it, at its exit
    deadline = time.monotonic() + BUILD_TIMEOUT
    child = subprocess.Popen(
        [sys.executable, "-m", "spark_pipeline.class_cache", str(partial)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its JVM too: see below
    )
    try:
        code = child.wait(BUILD_TIMEOUT)
        # The JVM writes the archive as it exits, which it does once the child that
        # started it has gone: wait for the child's whole process group.
        while group_alive(child.pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        if code != 0 or not partial.is_file() or partial.stat().st_size == 0:
            return False
        os.replace(partial, path)
        for old in path.parent.glob("spark-*.jsa"):  # made for a pyspark or JVM since gone
            if old != path:
                old.unlink(missing_ok=True)
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        if group_alive(child.pid):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        partial.unlink(missing_ok=True)


def _train(out: Path) -> None:
    """The child's work: an ETL over a small generated log directory, so the archive
    holds the classes a real run loads (JSON reading, Parquet writing, the joins)."""
    from spark_pipeline.jobs import run_etl
    from spark_pipeline.session import build_spark
    from spark_pipeline.synthetic import SynthConfig, generate

    with tempfile.TemporaryDirectory(prefix="ternmq-etl-cds-") as tmp:
        logs = Path(tmp) / "logs"
        generate(SynthConfig(events=2_000), logs)
        spark = build_spark(java_options=f"-XX:ArchiveClassesAtExit={out} {_QUIET}")
        try:
            run_etl(logs, Path(tmp) / "out", spark=spark, full=True)
        finally:
            spark.stop()


if __name__ == "__main__":
    _train(Path(sys.argv[1]))
