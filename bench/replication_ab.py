"""One run for an A/B of replicated throughput: a fresh 3-node dev cluster of the tree on
``PYTHONPATH`` at one ``msgstore.replication_factor``, ``mqload --mode pair --qos 1
--clean 0`` on node 1, and the CPU every ternmq process spent per message delivered
(utime + stime from /proc over the load), by node and service.

Alternate the trees being compared run by run (``PYTHONPATH=A``, then ``B``, then
``A`` …), several rounds, on as quiet a machine as can be had, and hold the dev-cluster
ports while a run uses them:

    cd /tmp && PYTHONPATH=TREE flock /tmp/ternmq-quiet.lock \\
        flock /tmp/ternmq-dev-cluster.lock TREE_PY -m bench.replication_ab \\
        --base-dir /tmp/rab --factor 2 --label after

Prints one JSON line: the label, messages/s, lost, publish-to-delivery p50, CPU per
message over all processes and ``per`` (``n1.msgstore`` …). ``--rate`` (per publisher)
fixes the load instead of running flat out, so that CPU per message compares at the same
batch sizes. Loopback only; every process it starts is stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.cluster_throughput import build_mqload
from services.node import dev_cluster as dc

SERVICES = ("msgstore", "listener", "registry", "gossip")
RUN_TIMEOUT = 180


def _ticks(groups: set[int]) -> dict[int, tuple[str, int]]:
    """pid -> (service, utime + stime) of every process in the process groups."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[2]) in groups:
            name = next((s for s in SERVICES if f"services.{s}" in cmd), "other")
            out[int(entry)] = (f"{int(fields[2])}.{name}", int(fields[11]) + int(fields[12]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-dir", type=Path, required=True)
    ap.add_argument("--factor", type=int, default=2)
    ap.add_argument("--label", default="")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--rate", type=int, default=0, help="messages/s per publisher (0: flat out)")
    ap.add_argument("--settle", type=float, default=8.0, help="idle seconds before the load")
    args = ap.parse_args()
    base: Path = args.base_dir
    exe = build_mqload(base / ".build")
    cluster = base / "cluster"
    shutil.rmtree(cluster, ignore_errors=True)
    msg = dc.start(cluster, 3, {"msgstore.replication_factor": str(args.factor)})
    try:
        if msg:
            raise RuntimeError(msg)
        nodes = dc.existing(cluster)
        node_of = {int(n.pid_file.read_text()): n.k for n in nodes}
        time.sleep(args.settle)
        before = _ticks(set(node_of))
        load = ["--mode", "pair", "--pubs", str(args.pairs), "--subs", str(args.pairs)]
        load += ["--size", "64", "--qos", "1", "--clean", "0", "--duration", str(args.duration)]
        if args.rate:
            load += ["--rate", str(args.rate)]
        done = subprocess.run(
            [str(exe), "--port", str(nodes[0].mqtt_port), *load, "--topic", "ab", "--id", "ab"],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
        after = _ticks(set(node_of))
        out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        dc.stop(cluster)
    hz = os.sysconf("SC_CLK_TCK")
    n = max(1, out["received"])
    spent: dict[str, int] = {}
    for pid, (key, ticks) in after.items():
        group, name = key.split(".")
        label = f"n{node_of[int(group)]}.{name}"
        spent[label] = spent.get(label, 0) + ticks - before.get(pid, (key, 0))[1]
    per = {k: round(v / hz / n * 1e6, 1) for k, v in sorted(spent.items()) if v}
    row = {
        "label": args.label,
        "factor": args.factor,
        "msgs_per_s": out["msgs_per_s"],
        "lost": out["lost"],
        "lat_p50_us": out.get("lat_p50_us"),
        "cpu_us_per_msg": round(sum(spent.values()) / hz / n * 1e6, 1),
        "per": per,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
