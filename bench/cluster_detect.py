"""Failure detection on a 3-node dev cluster: SIGKILL and SIGSTOP, measured from outside.

For each round: start a dev cluster (``services.node.dev_cluster``), then
* SIGKILL node 3's process group and time until nodes 1 and 2 both show it down
  (``/api/v1/cluster/show``, polled every 5 ms);
* restart it, wait until all are up again;
* SIGSTOP node 3 and time until both show it down (only the probes can tell), SIGCONT
  and time until both show it up again.

Usage: ``python -m bench.cluster_detect --base-dir /tmp/bd --rounds 5`` prints one JSON
line per round and a summary (median and max of each figure). Loopback only; the ports
are the dev cluster's fixed ones (10053..., see DESIGN §3), so nothing else may use them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from services.node import dev_cluster as dc

POLL = 0.005
LIMIT = 30.0  # s: a round that waits longer fails


def states(port: int) -> dict[str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/cluster/show", timeout=2) as r:
            return {row["node"]: row["state"] for row in json.loads(r.read())}
    except OSError:
        return {}


def time_until(predicate: object, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < LIMIT:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(POLL)
    raise SystemExit(f"cluster_detect: {what} not seen within {LIMIT:g}s")


def one_round(base: Path) -> dict[str, float]:
    nodes = dc.nodes(base, 3)
    problem = dc.start(base, 3, {})
    if problem:
        raise SystemExit(f"cluster_detect: {problem}")
    try:
        n3 = nodes[2]
        watchers = [n.http_port for n in nodes[:2]]

        def seen(state: str) -> bool:
            return all(states(p).get(n3.name) == state for p in watchers)

        pid = dc.running_pid(n3)
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        kill_s = time_until(lambda: seen("down"), "SIGKILL")
        dc.start_node(n3)
        time_until(lambda: seen("up") and states(n3.http_port).get(nodes[0].name) == "up", "rejoin")
        pid = dc.running_pid(n3)
        assert pid is not None
        os.killpg(pid, signal.SIGSTOP)
        try:
            stop_s = time_until(lambda: seen("down"), "SIGSTOP")
        finally:
            os.killpg(pid, signal.SIGCONT)
        back_s = time_until(lambda: seen("up"), "SIGCONT")
        return {"sigkill_s": kill_s, "sigstop_s": stop_s, "sigcont_s": back_s}
    finally:
        dc.stop(base)


def run_rounds(rounds: int, one_round: Callable[[int], dict[str, float]], **extra: object) -> None:
    """Run ``rounds`` rounds, print each as a JSON line, then the median and max of each
    figure (and ``extra``) as the last line."""
    results = []
    for i in range(rounds):
        r = one_round(i)
        results.append(r)
        print(json.dumps({"round": i, **{k: round(v, 3) for k, v in r.items()}}), flush=True)
    summary = {
        k: {
            "median": round(statistics.median(r[k] for r in results), 3),
            "max": round(max(r[k] for r in results), 3),
        }
        for k in results[0]
    }
    print(json.dumps({"summary": summary, **extra, "rounds": len(results)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-dir", required=True, type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    ns = ap.parse_args()
    run_rounds(ns.rounds, lambda i: one_round(ns.base_dir / f"round{i}"))
    sys.exit(0)


if __name__ == "__main__":
    main()
