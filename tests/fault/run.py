"""Run the randomized fault test alone, for as long as you like:

    .venv/bin/python -m tests.fault.run --events 1000 --base-dir /tmp/fault --seed 7

Prints a JSON summary (also written to ``BASE_DIR/summary.json``, next to the nodes'
directories ``n1``..``n3``, ``history.jsonl.gz``, ``faults.json`` and, when the checker
found something, ``evidence.jsonl``: the nodes' queue/session/node events about the
clients involved). Exits 0 when the run is clean, 1 on a violation, 2 when the harness
itself failed (the cluster did not come up or did not heal). The same seed gives the same
faults (kind, node, hold, gap) in the same order.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from tests.fault.harness import KINDS, Options, run
from tests.fault.incident import tell


def _pair(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    return float(low), float(high or low)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.fault.run", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--events", type=int, default=30, help="faults to inject (default 30)")
    ap.add_argument(
        "--base-dir", type=Path, required=True, help="where the nodes live (made fresh)"
    )
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument(
        "--kinds", default=",".join(KINDS), help=f"comma-separated, of {','.join(KINDS)}"
    )
    ap.add_argument("--hold", type=_pair, default=(1.0, 5.0), help="LOW,HIGH s a fault lasts")
    ap.add_argument("--gap", type=_pair, default=(0.5, 2.0), help="LOW,HIGH s between faults")
    ap.add_argument("--publishers", type=int, default=3)
    ap.add_argument("--subscribers", type=int, default=4)
    ap.add_argument("--rate", type=float, default=20.0, help="messages/s per publisher")
    ap.add_argument("--no-netns", action="store_true", help="loopback only: no partitions")
    ap.add_argument("--max-seconds", type=float, default=0.0, help="stop injecting after this")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra ternmq.conf line for every node",
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print every fault")
    args = ap.parse_args(argv)
    if args.base_dir.exists() and any(args.base_dir.iterdir()):
        ap.error(f"{args.base_dir} is not empty")
    opts = Options(
        base_dir=args.base_dir,
        seed=args.seed,
        events=args.events,
        kinds=tuple(k for k in args.kinds.split(",") if k),
        hold=args.hold,
        gap=args.gap,
        publishers=args.publishers,
        subscribers=args.subscribers,
        rate=args.rate,
        netns=not args.no_netns,
        max_seconds=args.max_seconds,
        sets=dict(item.split("=", 1) for item in args.set),
        verbose=args.verbose,
    )
    unknown = set(opts.kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown fault kinds {sorted(unknown)}")
    # SIGTERM (and SIGINT, which a shell may have ignored for a background job) end the
    # run through the harness's cleanup: every node it started is stopped.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupt)
    result = run(opts, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(result.summary(), indent=1))
    story = tell(result.history, result.report.violations, opts.base_dir)
    if story:
        print(story, file=sys.stderr)
    if result.errors:
        return 2
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
