"""Benchmark an incremental ETL run against a full rerun after the logs grew by a tenth.

    .venv/bin/python bench/etl_incremental.py --events 500000 --work /tmp/etl-inc

Generates ``events * (1 + grow)`` events (``bench/gen_logs.py``'s mix), then replays them
through the broker's rotation scheme: the lines before a cut time, a first (full) run, the
rest (files rotate meanwhile), an incremental run, and a full rerun over the same files.
Each run is a child process measured as in ``etl_bench.py`` (wall, tree CPU, peak RSS);
the incremental and the full rerun's summaries must agree.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.etl_bench import Measured, measure
from spark_pipeline.extract import find_log_files
from spark_pipeline.manifest import chain_of
from spark_pipeline.rotating import RotatingWriter
from spark_pipeline.synthetic import SynthConfig, generate

TS = re.compile(r'\{"ts":"([^"]+)"')


def _ts(line: str) -> str:
    m = TS.match(line)
    return m.group(1) if m else ""


def _chains(root: Path) -> dict[Path, list[str]]:
    found: dict[Path, list[str]] = {}
    for f in find_log_files(root):
        live = Path(chain_of(f)).relative_to(root)
        with f.open(encoding="utf-8", errors="surrogateescape") as fh:
            found.setdefault(live, []).extend(fh)
    return found


def _etl(logs: Path, out: Path, full: bool, timeout: float) -> Measured:
    cmd = [sys.executable, "-m", "spark_pipeline", "run", "--logs", str(logs)]
    cmd += ["--out", str(out), "--json", "--quiet"] + (["--full"] if full else [])
    return measure(cmd, timeout)


@click.command()
@click.option("--events", default=500_000, show_default=True, type=click.IntRange(min=1000))
@click.option("--grow", default=0.1, show_default=True, help="Share appended after run 1.")
@click.option("--work", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--rotate-mb", default=16.0, show_default=True)
@click.option("--timeout", default=3600.0, show_default=True)
@click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path))
def main(
    events: int, grow: float, work: Path, rotate_mb: float, timeout: float, json_file: Path | None
) -> None:
    """Full run, grow the logs, incremental run, full rerun; print a Markdown table."""
    shutil.rmtree(work, ignore_errors=True)
    cfg = SynthConfig(
        events=int(events * (1 + grow)), lose=0.0005, duplicate=0.001, reorder=0.0005,
        refuse=0.0005, corrupt=10, rotate_bytes=10**12,
    )  # fmt: skip
    generate(cfg, work / "src")
    lines = _chains(work / "src")
    stamps = sorted(t for ls in lines.values() for x in ls if (t := _ts(x)))
    cut = stamps[int(len(stamps) / (1 + grow))]
    limit = int(rotate_mb * 2**20)
    writers = {p: RotatingWriter(work / "logs" / p, limit) for p in lines}
    rest: dict[Path, list[str]] = {}
    for p, ls in lines.items():
        i = next((k for k, x in enumerate(ls) if _ts(x) >= cut), len(ls))
        for x in ls[:i]:
            writers[p].write(x)
        rest[p] = ls[i:]
    for w in writers.values():
        w.flush()
    click.echo(
        f"run 1 over the first {len(stamps) - sum(map(len, rest.values())):,} lines", err=True
    )
    first = _etl(work / "logs", work / "tables", True, timeout)
    for p, ls in rest.items():
        for x in ls:
            writers[p].write(x)
    for w in writers.values():
        w.close()
    click.echo("incremental run", err=True)
    inc = _etl(work / "logs", work / "tables", False, timeout)
    click.echo("full rerun", err=True)
    full = _etl(work / "logs", work / "tables-full", True, timeout)
    total = int(full.output["events"])
    rows = [
        ("run 1 (full)", first),
        (f"incremental, +{grow:.0%}", inc),
        ("full rerun", full),
    ]
    click.echo(f"\n{total:,} events in the end, {grow:.0%} appended after run 1\n")
    click.echo("| run | wall s | bytes parsed MiB | CPU s | peak RSS MiB |")
    click.echo("|---|---:|---:|---:|---:|")
    for name, m in rows:
        click.echo(
            f"| {name} | {m.seconds:.1f} | {m.output['read_bytes'] / 2**20:,.1f} "
            f"| {m.cpu_seconds:.0f} | {m.peak_rss_mb:,.0f} |"
        )
    skip = {"mode", "read_bytes"}
    agree = {k: v for k, v in inc.output.items() if k not in skip} == {
        k: v for k, v in full.output.items() if k not in skip
    }
    click.echo(f"\nincremental / full rerun wall time: {inc.seconds / full.seconds:.2f}")
    click.echo(f"summaries agree: {'yes' if agree else 'NO'}")
    result: dict[str, Any] = {
        "events": total,
        "grow": grow,
        "summaries_agree": agree,
        "runs": {n: {"seconds": round(m.seconds, 2), "cpu_seconds": round(m.cpu_seconds, 1),
                     "peak_rss_mib": round(m.peak_rss_mb), "summary": m.output}
                 for n, m in rows},
    }  # fmt: skip
    if json_file is not None:
        json_file.write_text(json.dumps(result, indent=1) + "\n")
    if not agree:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
