"""Benchmark the Spark ETL against a plain single-process Python audit.

    .venv/bin/python bench/gen_logs.py --events 500000 --out /tmp/logs500k
    .venv/bin/python bench/etl_bench.py --logs /tmp/logs500k --out /tmp/tables500k

Both run as child processes so that wall time, CPU time and peak memory are measured the
same way: the resident set size and the user + system CPU time of the child's whole
process tree (Python driver plus the JVM it starts), sampled from /proc every 0.2 s.
CPU seconds move much less than wall time when something else shares the machine. The
Spark run writes every table; the Python pass computes only the audit summary, so it is
the lower bound for that one answer, not a like-for-like replacement. Both summaries are compared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from spark_pipeline import class_cache

ROOT = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
AUDIT_KEYS = (
    "messages",
    "pairs",
    "expected",
    "delivered",
    "lost",
    "refused",
    "duplicated",
    "out_of_order",
    "unacked",
    "orphans",
)

PYTHON_PASS = """
import json, sys
from pathlib import Path
from spark_pipeline.expect import load_expectations
from spark_pipeline.reference import audit_logs
exp = load_expectations(Path(sys.argv[2])) if len(sys.argv) > 2 else None
print(json.dumps(audit_logs(Path(sys.argv[1]), exp)))
"""


TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Measured:
    """One child run: its wall time, tree CPU time, peak tree RSS and parsed JSON output."""

    seconds: float
    cpu_seconds: float
    peak_rss_mb: float
    output: dict[str, Any]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(entry.name))
    return kids


def tree_rss(pid: int, cpu: dict[int, int] | None = None) -> int:
    """Bytes resident in ``pid`` and all its descendants.

    ``cpu`` (pid -> user + system clock ticks) is updated with each process's latest
    figure, so a process that has exited still counts with its last sample.
    """
    kids, total, todo = _children(), 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE
            if cpu is not None:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
                cpu[p] = int(fields[11]) + int(fields[12])
        except OSError:
            continue
        todo.extend(kids.get(p, []))
    return total


def measure(cmd: list[str], timeout: float) -> Measured:
    """Run ``cmd``; its stdout must end with one JSON document."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    peak = 0
    cpu: dict[int, int] = {}
    while proc.poll() is None:
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise click.ClickException(f"timed out after {timeout:.0f} s: {cmd}")
        peak = max(peak, tree_rss(proc.pid, cpu))
        time.sleep(0.2)
    seconds = time.monotonic() - t0
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode:
        raise click.ClickException(f"{cmd[:4]} exited {proc.returncode}")
    start = out.index("{")
    return Measured(seconds, sum(cpu.values()) / TICK, peak / 2**20, json.loads(out[start:]))


@click.command()
@click.option(
    "--logs", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--master", default="local[*]", show_default=True)
@click.option("--driver-memory", default="4g", show_default=True)
@click.option(
    "--expect",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Defaults to LOGS/expect.json when it exists.",
)
@click.option("--timeout", default=3600.0, show_default=True, help="Per run, seconds.")
@click.option("--skip-python", is_flag=True, help="Only the Spark run.")
@click.option("--conf", "confs", multiple=True, help="KEY=VALUE, passed to `etl run --conf`.")
@click.option(
    "--json",
    "json_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the results here.",
)
def main(
    logs: Path,
    out: Path,
    master: str,
    driver_memory: str,
    expect: Path | None,
    timeout: float,
    skip_python: bool,
    confs: tuple[str, ...],
    json_file: Path | None,
) -> None:
    """Run both and print a Markdown table of the results."""
    if expect is None and (logs / "expect.json").exists():
        expect = logs / "expect.json"
    spark_cmd = [
        sys.executable,
        "-m",
        "spark_pipeline",
        "run",
        "--logs",
        str(logs),
        "--out",
        str(out),
        "--master",
        master,
        "--driver-memory",
        driver_memory,
        "--json",
        "--full",  # runs are incremental by default: measure a whole run every time
    ]
    if expect is not None:
        spark_cmd += ["--expect", str(expect)]
    for conf in confs:
        spark_cmd += ["--conf", conf]
    archive = class_cache.archive_path()
    if archive is not None and not archive.is_file():
        # made once by the first `etl run` after its work: made here, outside the timing
        click.echo(f"caching Spark's classes first: {archive}", err=True)
        class_cache.build(archive)
    click.echo(f"spark: {' '.join(spark_cmd[1:])}", err=True)
    spark = measure(spark_cmd, timeout)
    events = int(spark.output["events"])
    rows = [("spark ETL (all tables)", spark)]
    if not skip_python:
        py_cmd = [sys.executable, "-c", PYTHON_PASS, str(logs)]
        py_cmd += [] if expect is None else [str(expect)]
        click.echo("python: reference audit", err=True)
        rows.append(("python single pass (audit only)", measure(py_cmd, timeout)))
    size = sum(p.stat().st_size for p in logs.rglob("*.jsonl*")) / 2**20
    click.echo(f"\n{events:,} events, {size:,.0f} MiB of logs, master {master}\n")
    click.echo("| run | wall s | events/s | CPU s | peak RSS MiB |")
    click.echo("|---|---:|---:|---:|---:|")
    for name, m in rows:
        click.echo(
            f"| {name} | {m.seconds:.1f} | {events / m.seconds:,.0f} | {m.cpu_seconds:.0f}"
            f" | {m.peak_rss_mb:,.0f} |"
        )
    if len(rows) == 2:
        ratio = rows[1][1].seconds / rows[0][1].seconds
        click.echo(f"\npython pass wall time / spark wall time: {ratio:.2f}")
    result: dict[str, Any] = {
        "class_archive": str(archive) if archive is not None and archive.is_file() else "off",
        "events": events,
        "log_mib": round(size, 1),
        "master": master,
        "runs": {
            n: {
                "seconds": round(m.seconds, 2),
                "cpu_seconds": round(m.cpu_seconds, 1),
                "peak_rss_mib": round(m.peak_rss_mb),
                "summary": m.output,
            }
            for n, m in rows
        },
    }
    if len(rows) == 2:
        a, b = rows[0][1].output, rows[1][1].output
        diff = {k: (a.get(k), b.get(k)) for k in AUDIT_KEYS if a.get(k) != b.get(k)}
        result["summaries_agree"] = not diff
        click.echo(f"\naudit summaries agree: {diff or 'yes'}")
        click.echo("audit: " + ", ".join(f"{k}={a.get(k)}" for k in AUDIT_KEYS))
    if json_file is not None:
        json_file.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
