"""How fast this machine's CPU was while a benchmark run went on.

Why this exists: on the 2-core VM the benchmarks run on, the same pure-Python loop takes
~20 ms or ~36 ms from one second to the next with nothing else running in the guest
(thread CPU time equal to wall time, no steal: the host's other tenants, not our load).
A run that fell into a slow phase is slower for a reason that has nothing to do with
the broker, so ``run.sh`` samples the speed beside every run and ``summarize.py`` shows
it next to the figures: Mosquitto's and ternmq's runs can then be compared knowing the
machine they had.

Every ``period`` seconds the probe times a fixed interpreted loop (~1.5 ms at the fast
speed) by its own thread CPU time, so waiting for a core under load does not count, only
how fast the core ran. It stops on SIGTERM or after ``limit`` seconds and writes
``{"n", "p10_ms", "p50_ms", "p90_ms"}`` of the loop's time to OUT (lower is faster). Its
own cost is under 1 % of one core.

    python3 bench/speed_probe.py OUT [--period 0.25] [--limit 200]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import time
from types import FrameType

_WORK = 20_000  # loop iterations per sample


def sample() -> float:
    """CPU milliseconds one fixed piece of interpreted work took."""
    start = time.thread_time()
    x = 0
    for i in range(_WORK):
        x += i ^ (x >> 3)
    return (time.thread_time() - start) * 1000


def summary(samples: list[float]) -> dict[str, float | int]:
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)

    return {
        "n": len(ordered),
        "p10_ms": pct(0.1),
        "p50_ms": round(statistics.median(ordered), 3),
        "p90_ms": pct(0.9),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--period", type=float, default=0.25)
    parser.add_argument("--limit", type=float, default=200.0)
    args = parser.parse_args()
    stop = False

    def on_term(_sig: int, _frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    samples: list[float] = []
    end = time.monotonic() + args.limit
    while not stop and time.monotonic() < end:
        samples.append(sample())
        time.sleep(args.period)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(summary(samples), f)


if __name__ == "__main__":
    main()
