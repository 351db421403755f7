"""How the cluster's design behaves beyond this machine: simulations of the pure cores.

Four figures, each from the code the services run, with no I/O:

* **detector**: the SWIM failure detector (``membership.detector``) on N nodes under
  message loss (``tests/unit/membership_sim.py``): how long until every live node sees a
  paused node down (only probes can tell), how many times a live node was wrongly seen
  down over a quiet minute, and messages per node per second;
* **directory**: the CASPaxos register (``registry.quorum``): messages per CONNECT for a
  round of one client id and for a batch of many, on N members;
* **digest**: anti-entropy's bucket digest (``gossip.replication.digest``): bytes per
  round, and the digest's memory and update cost per record at 1M records;
* **trie**: memory per subscription in the routing table every listener holds.

Usage: ``python -m bench.scaling_sim [--quick]`` prints one JSON line per figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from functools import partial

from services.gossip.replication.digest import BUCKETS, Digest
from services.listener.routing.model import SubOptions
from services.listener.routing.trie import SubscriptionTrie
from services.registry.quorum.acceptor import Acceptor
from services.registry.quorum.messages import Send
from services.registry.quorum.proposer import Proposer
from services.registry.quorum.register import Claim
from tests.unit.membership_sim import Sim


def detector(n: int, loss: float, seed: int, quiet_s: float) -> dict[str, float]:
    sim = Sim(n, seed, loss=loss)
    for name in sim.names:
        sim.start(name, incarnation=1)
    sim.settle(limit=30.0)
    start, sent = sim.now, sim.messages
    sim.run(quiet_s)
    false_downs = len(sim.downs(since=start))
    per_node_s = (sim.messages - sent) / n / quiet_s
    victim = sim.names[-1]
    paused_at = sim.now
    sim.pause(victim)
    observers = [x for x in sim.names if x != victim]
    while sim.now - paused_at < 60.0:
        sim.run(0.05)
        seen = [sim.declared_down(o, victim, paused_at) for o in observers]
        if all(t is not None for t in seen):
            break
    seen_at = [t for o in observers if (t := sim.declared_down(o, victim, paused_at))]
    return {
        "nodes": n,
        "loss": loss,
        "detect_all_s": round(max(seen_at) - paused_at, 3) if seen_at else -1.0,
        "detect_first_s": round(min(seen_at) - paused_at, 3) if seen_at else -1.0,
        "false_downs_per_min": round(false_downs * 60.0 / quiet_s, 2),
        "messages_per_node_s": round(per_node_s, 1),
    }


def directory(n: int, batch: int) -> dict[str, float]:
    """One proposer, n acceptors, a lossless network: messages and round trips."""
    names = [f"n{i}" for i in range(n)]
    acceptors = {m: Acceptor(m, 1) for m in names}
    proposer = Proposer(names[0], 1)
    keys = {("", f"client-{i}"): Claim(names[0], ()) for i in range(batch)}
    _ballot, out = proposer.propose(keys, names)
    messages, trips, committed = 0, 0, 0
    sends: tuple[Send, ...] = out.sends
    while sends:
        trips += 1
        replies = []
        for send in sends:
            messages += 2  # the request and its reply
            ready = acceptors[send.to].step(send.message)
            if ready.reply is not None:
                replies.append(ready.reply)
        nxt: list[Send] = []
        for reply in replies:
            step = proposer.step(reply)
            nxt.extend(step.sends)
            committed += len(step.outcomes)
        sends = tuple(nxt)
    return {
        "members": n,
        "connects_in_round": batch,
        "round_trips": trips,
        "messages": messages,
        "messages_per_connect": round(messages / batch, 2),
        "committed": committed,
    }


def digest(records: int) -> dict[str, float]:
    tracemalloc.start()
    d = Digest()
    base = tracemalloc.take_snapshot()
    t0 = time.perf_counter()
    for i in range(records):
        d.put(("subs", b"\0client-%d" % i), b"state-%d" % i)
    elapsed = time.perf_counter() - t0
    used = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(base, "filename"))
    tracemalloc.stop()
    return {
        "records": records,
        "digest_bytes_per_round": BUCKETS * 8,
        "put_us": round(elapsed / records * 1e6, 2),
        "memory_bytes_per_record": round(used / records, 1),
        "records_per_bucket": round(records / BUCKETS, 1),
    }


def trie(subs: int) -> dict[str, float]:
    tracemalloc.start()
    t = SubscriptionTrie()
    base = tracemalloc.take_snapshot()
    for i in range(subs):
        t.add(("", f"dev-{i}"), f"devices/{i}/cmd/#", SubOptions(1, node="n1", persistent=True))
    used = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(base, "filename"))
    tracemalloc.stop()
    return {"subscriptions": subs, "bytes_per_subscription": round(used / subs, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test)")
    ns = ap.parse_args()
    quiet = 10.0 if ns.quick else 60.0
    seeds = (1,) if ns.quick else (1, 2, 3)
    runs: list[Callable[[], dict[str, float]]] = []
    for n in (3, 10) if ns.quick else (3, 10, 50):
        for loss in (0.0, 0.05) if ns.quick else (0.0, 0.01, 0.05):
            runs.append(partial(_detector_median, n, loss, seeds, quiet))
    for n in (3, 10, 50):
        for batch in (1, 100):
            runs.append(partial(directory, n, batch))
    size = 100_000 if ns.quick else 1_000_000
    runs.append(partial(digest, size))
    runs.append(partial(trie, size))
    for run in runs:
        print(json.dumps(run()), flush=True)


def _detector_median(n: int, loss: float, seeds: tuple[int, ...], quiet: float) -> dict[str, float]:
    return _median([detector(n, loss, s, quiet) for s in seeds])


def _median(rows: list[dict[str, float]]) -> dict[str, float]:
    out = dict(rows[0])
    for k in rows[0]:
        if k not in ("nodes", "loss"):
            out[k] = statistics.median(r[k] for r in rows)
    return out


if __name__ == "__main__":
    main()
