"""Generate realistic ternmq event logs over several node directories.

    .venv/bin/python bench/gen_logs.py --events 5000000 --out /tmp/logs5m

writes ``OUT/devK/log/<service>.jsonl`` (rotated), plus ``OUT/truth.json`` (what was
injected) and ``OUT/expect.json`` (subscriptions, for ``etl run --expect``).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_pipeline.synthetic import SynthConfig, generate, write_truth


@click.command()
@click.option("--events", default=5_000_000, show_default=True, type=click.IntRange(min=100))
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(min=1, max=50))
@click.option("--publishers", default=30, show_default=True, type=click.IntRange(min=1))
@click.option("--subscribers", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--rate", default=300.0, show_default=True, help="Messages per second.")
@click.option("--lose", default=0.0005, show_default=True, help="Fraction of QoS>=1 pairs.")
@click.option("--duplicate", default=0.001, show_default=True)
@click.option("--reorder", default=0.0005, show_default=True)
@click.option(
    "--refuse", default=0.0005, show_default=True, help="Fraction of QoS>=1 messages refused."
)
@click.option("--corrupt", default=10, show_default=True, help="Corrupt lines to insert.")
@click.option("--rotate-mb", default=64.0, show_default=True, help="Rotate files past this.")
@click.option("--seed", default=1, show_default=True)
def main(
    events: int,
    out: Path,
    nodes: int,
    publishers: int,
    subscribers: int,
    rate: float,
    lose: float,
    duplicate: float,
    reorder: float,
    refuse: float,
    corrupt: int,
    rotate_mb: float,
    seed: int,
) -> None:
    """Write the logs and print what was generated."""
    if out.exists() and any(out.iterdir()):
        raise click.ClickException(f"{out} is not empty")
    cfg = SynthConfig(
        events=events,
        nodes=nodes,
        publishers=publishers,
        subscribers=subscribers,
        rate=rate,
        lose=lose,
        duplicate=duplicate,
        reorder=reorder,
        refuse=refuse,
        corrupt=corrupt,
        rotate_bytes=int(rotate_mb * 1024 * 1024),
        seed=seed,
    )
    t0 = time.monotonic()
    truth = generate(cfg, out)
    write_truth(truth, out)
    counts = {k: v for k, v in asdict(truth).items() if k != "expect"}
    click.echo(json.dumps({**counts, "seconds": round(time.monotonic() - t0, 1)}))


if __name__ == "__main__":
    main()
