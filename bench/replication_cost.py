"""What replicated queues cost, side by side in one run: Mosquitto, then a 3-node dev
cluster with ``msgstore.replication_factor`` 1, 2 and 3 (write quorum a majority: 1, 2, 2).

The load is persistent QoS 1 (``mqload --mode pair --qos 1 --clean 0``): every message is
appended to its subscriber's queue before the publisher's PUBACK, so with R = 3 the
PUBACK also waits for copies on other nodes. Publishers and subscribers are on
node 1 (their sessions' queues are primaries there). Reported: messages/s and the
publish-to-delivery latency percentiles mqload measures, and the ratios to R = 1 and to
Mosquitto.

Last, when ``rabbitmq-server`` is installed, the peer the goal is set against: a local
3-node RabbitMQ whose MQTT sessions' queues are quorum (Raft) queues on all three nodes
(``bench/rabbitmq_peer.py``), with the same load, twice: with ``mqtt.prefetch`` raised to
100 (``rabbitmq-quorum``: every copy arrives within the run) and with the stock 10
(``rabbitmq-stock``: the issue names no changed setting for its 1,100 msg/s); R = 3's
ratio to each.

Usage: ``python -m bench.replication_cost --base-dir /tmp/rc [--duration 10]``; one JSON
line per run, then a summary. Loopback only; every process it starts is stopped.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from bench import rabbitmq_peer
from bench.cluster_throughput import MOSQ_PORT, build_mqload, mqload, start_mosquitto
from services.node import dev_cluster as dc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-dir", type=Path, required=True)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--settle", type=float, default=10.0, help="idle seconds before a run")
    args = ap.parse_args()
    base: Path = args.base_dir
    base.mkdir(parents=True, exist_ok=True)
    exe = build_mqload(base / ".build")
    load = ["--mode", "pair", "--pubs", str(args.pairs), "--subs", str(args.pairs)]
    load += ["--duration", str(args.duration), "--size", "64", "--qos", "1", "--clean", "0"]
    results: dict[str, dict[str, Any]] = {}

    def record(name: str, row: dict[str, Any]) -> None:
        results[name] = row
        print(json.dumps({"run": name, **row}), flush=True)

    mosq = start_mosquitto(base)
    try:
        record("mosquitto", mqload(exe, MOSQ_PORT, *load, "--topic", "m", "--id", "m"))
    finally:
        mosq.terminate()
        mosq.wait(10)
    for r in (1, 2, 3):
        cluster_dir = base / f"cluster-r{r}"
        shutil.rmtree(cluster_dir, ignore_errors=True)
        msg = dc.start(cluster_dir, 3, {"msgstore.replication_factor": str(r)})
        devs = dc.existing(cluster_dir)
        try:
            if msg:
                raise RuntimeError(msg)
            time.sleep(args.settle)
            tag = f"r{r}"
            record(tag, mqload(exe, devs[0].mqtt_port, *load, "--topic", tag, "--id", tag))
        finally:
            dc.stop(cluster_dir)
    if rabbitmq_peer.available():
        # Twice: with the window raised to mqload's (every copy arrives within the run)
        # and stock (the issue names no changed setting for its 1,100 msg/s).
        for name, prefetch in (("rabbitmq-quorum", rabbitmq_peer.PREFETCH), ("rabbitmq-stock", 10)):
            extra = {"mqtt.prefetch": str(prefetch)}
            with rabbitmq_peer.rabbitmq_cluster(base / "rabbitmq", extra) as port:
                time.sleep(args.settle)
                row = mqload(exe, port, *load, "--topic", "rq", "--id", "rq")
                row["rabbitmq"] = rabbitmq_peer.version()
                row["mqtt_prefetch"] = prefetch
                row["queue_check"] = rabbitmq_peer.queue_check(base / "rabbitmq")
                record(name, row)
    else:
        print("rabbitmq-quorum: skipped, rabbitmq-server is not installed", flush=True)
    summary: dict[str, Any] = {
        "msgs_per_s": {k: v["msgs_per_s"] for k, v in results.items()},
        "lat_p50_us": {k: v["lat_p50_us"] for k, v in results.items()},
        "lat_p99_us": {k: v["lat_p99_us"] for k, v in results.items()},
        "lost": {k: v["lost"] for k, v in results.items()},
        "vs_r1": {k: _ratio(results, k, "r1") for k in ("r2", "r3")},
        "vs_mosquitto": {k: _ratio(results, k, "mosquitto") for k in ("r1", "r2", "r3")},
    }
    if "rabbitmq-quorum" in results:
        summary["r3_vs_rabbitmq_quorum"] = _ratio(results, "r3", "rabbitmq-quorum")
        summary["r3_vs_rabbitmq_quorum_stock"] = _ratio(results, "r3", "rabbitmq-stock")
        summary["rabbitmq_queues"] = {
            k: results[k]["queue_check"] for k in ("rabbitmq-quorum", "rabbitmq-stock")
        }
    print(json.dumps({"summary": summary}), flush=True)


def _ratio(results: dict[str, dict[str, Any]], a: str, b: str) -> float:
    return round(float(results[a]["msgs_per_s"]) / max(float(results[b]["msgs_per_s"]), 1.0), 2)


if __name__ == "__main__":
    main()
