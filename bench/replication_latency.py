"""Publish-to-delivery latency of persistent QoS 1 at light load, replicated or not: the
cost of a replication round trip on its own, where ``bench.replication_cost``'s full-speed
runs measure queueing.

A fresh 3-node dev cluster per ``msgstore.replication_factor`` given, then ``mqload
--mode pair --qos 1 --clean 0`` with a few publishers at a fixed rate, clients on node 1.

Usage: ``python -m bench.replication_latency --base-dir /tmp/rl [--factors 1,2]
[--pairs 2] [--rate 300] [--duration 8] [--rounds 2]``; one JSON line per run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from bench.cluster_throughput import build_mqload, mqload
from services.node import dev_cluster as dc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-dir", type=Path, required=True)
    ap.add_argument("--factors", default="1,2")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--rate", type=int, default=300, help="messages/s per publisher")
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    base: Path = args.base_dir
    base.mkdir(parents=True, exist_ok=True)
    exe = build_mqload(base / ".build")
    for rnd in range(args.rounds):
        for r in args.factors.split(","):
            cluster = base / f"r{r}"
            shutil.rmtree(cluster, ignore_errors=True)
            msg = dc.start(cluster, 3, {"msgstore.replication_factor": r})
            try:
                if msg:
                    raise RuntimeError(msg)
                time.sleep(5)
                port = dc.existing(cluster)[0].mqtt_port
                load = ["--mode", "pair", "--pubs", str(args.pairs), "--subs", str(args.pairs)]
                load += ["--qos", "1", "--clean", "0", "--rate", str(args.rate)]
                load += ["--duration", str(args.duration), "--size", "64"]
                row = mqload(exe, port, *load, "--topic", f"rl{r}", "--id", f"rl{r}")
                keys = ("msgs_per_s", "lat_p50_us", "lat_p90_us", "lat_p99_us", "lost")
                print(json.dumps({"round": rnd, "r": int(r), **{k: row[k] for k in keys}}))
            finally:
                dc.stop(cluster)


if __name__ == "__main__":
    main()
