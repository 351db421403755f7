"""Failover and re-replication of a replicated persistent queue, timed from outside.

Why: with ``msgstore.replication_factor`` R > 1 a persistent session outlives the node
that holds its queue. The issue asks how long a client waits for its queued messages
when that node dies (goal: 1 s after a SIGKILL; detection time + 1 s after a SIGSTOP),
and how long a queue of 10,000 messages lives on fewer than R copies after a node loss.
One run of a 3-node dev cluster (R = 2 by default, write quorum a majority) measures
both:

* **failover**, ``--trials`` times each for SIGKILL and SIGSTOP: a persistent MQTT 5
  subscriber on node 3 subscribes and leaves; ``--backlog`` QoS 1 messages are
  published there and acknowledged (so they are on W copies). ``session show`` and the
  msgstore's ``/status`` must name node 3 the queue's primary, every copy with lag 0.
  Then node 3's process group gets the signal and at once the client CONNECTs to
  another node, retrying refusals every 10 ms. Timed from the signal: the CONNACK, the
  first PUBLISH of the backlog, the last. Each trial checks that every queued message
  came, in order. The node reconnected to alternates between the one holding the
  queue's other copy (``replica``) and the third (``other``). Detection: the
  survivors' ``node.down`` events, timed from the signal.
* **re-replication**, ``--rerepl-trials`` times each: ``--rerepl-messages`` queued, then
  node 3 is SIGKILLed, holding either the queue's replica (the primary, node 1, gives
  node 2 a copy: ``Claims.heal``) or its primary (the client stays away: after the
  orphan scan's grace the replica's node takes the session over offline and gives the
  third node a copy). Timed from the kill until the live primary's msgstore lists R
  copies, none on node 3, each with lag 0 (``/status``, polled every 0.1 s), and until
  the ``queue.rereplicated`` event (logged when a member joins an existing primary's
  set). Then the queue is drained through the new copy's node and checked whole and in
  order, before node 3 comes back.

Usage: ``flock /tmp/ternmq-dev-cluster.lock python -m bench.failover_time --base-dir
/tmp/ft [--trials 5] [--rerepl-trials 3] [--set KEY=VALUE]``; one JSON line per trial,
then a summary (p50 and max of each figure per case, the failure detector's parameters
and the timeouts in force). The nodes run with ``max_offline_messages = -1``: the default
1,000 would drop most of a 10,000-message backlog. A trial whose client is not let in
within 60 s, or that loses, reorders or cannot check its messages, is marked
``"ok": false`` and the run exits 1. Loopback only; the dev cluster's ports are fixed, so
hold the lock. Every process it starts is stopped by pid (each node is its own process
group).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shutil
import signal
import statistics
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from services.gossip.membership.timing import Config as DetectorConfig
from services.gossip.membership.timing import detection_bound
from services.node import dev_cluster as dc
from services.registry.cluster import orphans
from services.registry.leadership import replicas

LIMIT = 60.0  # s: any wait longer fails the trial
CONNACK_WAIT = 15.0  # s for one CONNECT's answer (a claim may wait on a paused node)
RETRY = 0.01  # s between a refused CONNECT and the next
POLL = 0.1  # s between two looks at /status
EXPIRY = 3600  # s: the subscriber's session expiry interval
TIMEOUT_KEYS = (
    "msgstore.replication_factor",
    "msgstore.write_quorum",
    "msgstore.failover_timeout",
    "registry.quorum_timeout",
    "registry.takeover_timeout",
    "registry.rpc_timeout",
    "cluster.forward_timeout",
)


class TrialFailed(Exception):
    """A wait ran out or a precondition did not hold: the trial measures nothing."""


# -- the cluster, from outside ---------------------------------------------------------


def http(port: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return None


def session_row(node: dc.DevNode, cid: str) -> dict[str, Any] | None:
    """``ternmq-admin session show --json`` for one client id, asked of ``node``."""
    rows = http(node.http_port, "/api/v1/session/show?client_id=" + urllib.parse.quote(cid))
    for row in rows if isinstance(rows, list) else []:
        if row.get("client_id") == cid:
            return dict(row)
    return None


def queue_row(node: dc.DevNode, cid: str) -> dict[str, Any] | None:
    """The queue of ``cid`` as its primary's msgstore reports it in ``/status`` (copies,
    last, committed, acked, each replica's lag); None if ``node`` is not its primary."""
    status = http(node.http_port, "/status")
    try:
        rows = status["services"]["msgstore"]["replication"]["primaries"]
    except (KeyError, TypeError):
        return None
    for row in rows:
        if row.get("client_id") == cid:
            return dict(row)
    return None


def whole(row: dict[str, Any] | None, r: int, dead: str) -> bool:
    """R copies, none on ``dead``, each holding everything its primary holds."""
    if row is None:
        return False
    copies = list(row["replicas"])
    return len(copies) == r and dead not in copies and all(v == 0 for v in row["lag"].values())


def wait(predicate: Callable[[], bool], what: str, limit: float = LIMIT) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > limit:
            raise TrialFailed(f"{what}: not within {limit:g}s")
        time.sleep(POLL)
    return time.monotonic() - start


class LogTail:
    """The event lines a set of nodes log from now on, for the events' own times (the
    listener's and msgstore's lines reach their files late, through the spool, but
    carry the time they were emitted)."""

    def __init__(self, nodes: list[dc.DevNode], service: str) -> None:
        self.paths = {n.name: n.dir / "log" / f"{service}.jsonl" for n in nodes}
        self.offsets = {name: _size(p) for name, p in self.paths.items()}

    def first(self, event: str, since: float, limit: float, **fields: Any) -> dict[str, float]:
        """Seconds from ``since`` (wall clock) to the first ``event`` with ``fields`` on
        each node, waiting up to ``limit`` for every node to have one."""
        found: dict[str, float] = {}
        deadline = time.monotonic() + limit
        while True:
            for name, path in self.paths.items():
                if name in found:
                    continue
                for rec in _lines(path, self.offsets[name], event):
                    if all(rec.get(k) == v for k, v in fields.items()):
                        found[name] = round(_wall(rec["ts"]) - since, 4)
                        break
            if len(found) == len(self.paths) or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _lines(path: Path, offset: int, event: str) -> list[dict[str, Any]]:
    tag = f'"event":"{event}"'.encode()
    try:
        with open(path, "rb") as f:
            if _size(path) >= offset:  # else rotated since: read the new file whole
                f.seek(offset)
            data = f.read()
    except OSError:
        return []
    out = []
    for line in data.splitlines():
        if tag in line:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def _wall(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


# -- MQTT --------------------------------------------------------------------------------


class Conn:
    """One paho MQTT 5 connection, its network loop driven from this thread, so a time
    recorded in a callback is when the packet was read, with no hand-off between."""

    def __init__(self, cid: str, port: int) -> None:
        self.port = port
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=cid,
            protocol=mqtt.MQTTv5,
            reconnect_on_failure=False,
        )
        self.client.max_inflight_messages_set(100)
        self.connack: tuple[bool, int] | None = None  # (session present, reason code)
        self.closed = False
        self.subacked = False
        self.received: list[tuple[float, bytes, bool]] = []  # (monotonic, payload, DUP)
        self.unique: set[bytes] = set()
        self.acks: dict[int, int] = {}  # mid -> PUBACK reason code
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.on_publish = self._on_publish
        self.client.on_subscribe = self._on_subscribe

    def _on_connect(self, _c: Any, _u: Any, flags: Any, rc: Any, _p: Any) -> None:
        self.connack = (bool(flags.session_present), int(rc.value))

    def _on_disconnect(self, *_a: Any) -> None:
        self.closed = True

    def _on_message(self, _c: Any, _u: Any, msg: mqtt.MQTTMessage) -> None:
        payload = bytes(msg.payload)
        self.received.append((time.monotonic(), payload, bool(msg.dup)))
        self.unique.add(payload)

    def _on_publish(self, _c: Any, _u: Any, mid: int, rc: Any, _p: Any) -> None:
        self.acks[mid] = int(rc.value)

    def _on_subscribe(self, _c: Any, _u: Any, _mid: int, codes: Any, _p: Any) -> None:
        self.subacked = all(int(c.value) == 1 for c in codes)

    def open(self, clean: bool, expiry: int) -> None:
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = expiry
        self.client.connect("127.0.0.1", self.port, 60, clean_start=clean, properties=props)

    def pump(self, done: Callable[[], bool], limit: float) -> bool:
        deadline = time.monotonic() + limit
        while not done():
            if time.monotonic() > deadline:
                return False
            if self.client.loop(0.01) != mqtt.MQTT_ERR_SUCCESS:
                self.closed = True
                time.sleep(0.01)
        return True

    def answered(self) -> bool:
        """Wait for the CONNACK (or the connection's end); whether one came."""
        self.pump(lambda: self.connack is not None or self.closed, CONNACK_WAIT)
        return self.connack is not None

    def connected(self, clean: bool, expiry: int) -> Conn:
        self.open(clean, expiry)
        if not self.answered():
            raise TrialFailed(f"no CONNACK on port {self.port}")
        if self.connack is None or self.connack[1] != 0:
            raise TrialFailed(f"CONNECT on port {self.port} refused: {self.connack}")
        return self

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if not self.closed:
                self.client.disconnect()
                self.pump(lambda: self.closed, 2.0)
        with contextlib.suppress(Exception):
            sock = self.client.socket()
            if sock is not None:
                sock.close()


def resume(cid: str, port: int, t0: float, attempts: list[str]) -> Conn:
    """CONNECT (resuming the session) until accepted, again ``RETRY`` after each refusal
    or close, as a client that comes back at once; each failure is noted in ``attempts``
    as "seconds from t0:why"."""
    while time.monotonic() - t0 < LIMIT:
        conn = Conn(cid, port)
        why = "closed without CONNACK"
        try:
            conn.open(False, EXPIRY)
            if conn.answered():
                assert conn.connack is not None
                if conn.connack[1] == 0:
                    return conn
                why = f"0x{conn.connack[1]:02x}"
        except OSError as exc:
            why = repr(exc)
        attempts.append(f"{time.monotonic() - t0:.3f}:{why}")
        conn.close()
        time.sleep(RETRY)
    raise TrialFailed(f"no CONNACK 0 within {LIMIT:g}s ({len(attempts)} refusals)")


def queue_backlog(
    cid: str, node: dc.DevNode, topic: str, tag: str, count: int, r: int
) -> dict[str, Any]:
    """A persistent subscriber of ``topic`` on ``node`` leaves, ``count`` QoS 1 messages
    are published there and acknowledged; returns its ``session show`` row once its queue
    is on R copies, each with lag 0 (else the kill would race the replication)."""
    sub = Conn(cid, node.mqtt_port).connected(True, EXPIRY)
    try:
        sub.client.subscribe(topic, 1)
        if not sub.pump(lambda: sub.subacked, LIMIT):
            raise TrialFailed("no SUBACK granting QoS 1")
    finally:
        sub.close()
    wait(lambda: (session_row(node, cid) or {}).get("online") is False, "subscriber offline")
    pub = Conn(cid + "-pub", node.mqtt_port).connected(True, 0)
    try:
        for i in range(count):
            pub.client.publish(topic, f"{tag}:{i}".encode(), 1)
        if not pub.pump(lambda: len(pub.acks) >= count, LIMIT + count / 100):
            raise TrialFailed(f"{len(pub.acks)} of {count} PUBACKs")
    finally:
        pub.close()
    refused = sum(1 for code in pub.acks.values() if code >= 0x80)
    if refused:
        raise TrialFailed(f"{refused} publishes refused")
    row = session_row(node, cid)
    if row is None or row["node"] != node.name or len(row["replicas"]) != r:
        raise TrialFailed(f"the session is not on {node.name} with {r} copies: {row}")
    wait(lambda: whole(queue_row(node, cid), r, ""), "the backlog on R copies, lag 0")
    q = queue_row(node, cid) or {}
    queued = int(q.get("last", 0)) - int(q.get("acked", 0))
    if queued < count:  # e.g. max_offline_messages dropped some: nothing to measure
        raise TrialFailed(f"{queued} of {count} acknowledged messages queued: {q}")
    return row


def check(conn: Conn, tag: str, count: int) -> dict[str, Any]:
    """Whether the ``count`` messages of ``tag`` all came, each first copy in order."""
    seen: set[int] = set()
    last, in_order, dups, dups_unflagged, foreign, flagged = -1, True, 0, 0, 0, 0
    for _, payload, dup in conn.received:
        head, _, index = payload.decode().partition(":")
        if head != tag:
            foreign += 1
            continue
        i = int(index)
        flagged += dup
        if i in seen:
            dups += 1
            dups_unflagged += not dup
            continue
        in_order = in_order and i > last
        seen.add(i)
        last = i
    missing = count - len(seen)
    return {
        "received": len(seen),
        "missing": missing,
        "in_order": in_order,
        "duplicates": dups,
        "duplicates_without_dup": dups_unflagged,
        "dup_flagged": flagged,
        "foreign": foreign,
        "ok": missing == 0 and in_order and not dups_unflagged and not foreign,
    }


def drain(conn: Conn, count: int, t0: float) -> dict[str, Any]:
    """Read the backlog to its end (bounded); first and last arrival from ``t0``."""
    conn.pump(lambda: len(conn.unique) >= count or conn.closed, LIMIT + count / 200)
    conn.pump(lambda: False, 0.3)  # a late duplicate would show here
    times = [t for t, _, _ in conn.received]
    return {
        "first_s": round(times[0] - t0, 4) if times else None,
        "all_s": round(times[-1] - t0, 4) if times else None,
    }


def end_session(cid: str, node: dc.DevNode) -> None:
    """A clean start with expiry 0: the session and its queue go, so a later kill has no
    queue of this trial to heal (it would load the node meanwhile)."""
    with contextlib.suppress(TrialFailed, OSError):
        Conn(cid, node.mqtt_port).connected(True, 0).close()


# -- the trials --------------------------------------------------------------------------


class Bench:
    def __init__(self, base: Path, r: int, settle: float) -> None:
        self.base = base
        self.r = r
        self.settle = settle
        self.devs = dc.nodes(base, 3)
        self.stopped: int | None = None  # a SIGSTOPped node's pid, for the finally

    def send(self, node: dc.DevNode, sig: signal.Signals) -> tuple[float, float]:
        """Send ``sig`` to ``node``'s process group; (monotonic, wall) just before."""
        pid = dc.running_pid(node)
        if pid is None:
            raise TrialFailed(f"{node.name} is not running")
        t0, wall = time.monotonic(), time.time()
        os.killpg(pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped = pid
        return t0, wall

    def restore(self, node: dc.DevNode) -> None:
        """SIGCONT a paused node, restart a killed one; wait until all see all up."""
        if self.stopped is not None:
            os.killpg(self.stopped, signal.SIGCONT)
            self.stopped = None
        if dc.running_pid(node) is None:
            dc.start_node(node)
        problem = dc.wait_ready(self.devs, 120)
        if problem:
            raise SystemExit(f"failover_time: {problem}")
        time.sleep(self.settle)

    def failover(
        self, trial: int, sig: signal.Signals, target_kind: str, backlog: int
    ) -> dict[str, Any]:
        victim = self.devs[2]
        tag = f"f{trial}{sig.name[3:].lower()}"
        cid, topic = f"ft-{tag}", f"ft/{tag}"
        row: dict[str, Any] = {"case": "failover", "signal": sig.name, "trial": trial}
        row |= {"target": target_kind, "backlog": backlog}
        before = queue_backlog(cid, victim, topic, tag, backlog, self.r)
        holder = next(n for n in self.devs if n.name == before["replicas"][1])
        other = next(n for n in self.devs if n not in (victim, holder))
        target = holder if target_kind == "replica" else other
        row["to"] = target.name
        gossip = LogTail([d for d in self.devs if d != victim], "gossip")
        store = LogTail([target], "msgstore")
        conn: Conn | None = None
        try:
            t0, wall = self.send(victim, sig)
            attempts: list[str] = []
            try:
                conn = resume(cid, target.mqtt_port, t0, attempts)
            except TrialFailed as exc:  # still worth knowing: detection, failover events
                row |= {"ok": False, "error": str(exc)}
            row["refused"] = attempts
            if conn is not None:
                assert conn.connack is not None
                row["connack_s"] = round(time.monotonic() - t0, 4)
                row["session_present"] = conn.connack[0]
                row |= drain(conn, backlog, t0)
                row |= check(conn, tag, backlog)
            downs = gossip.first("node.down", wall, 10.0, peer=victim.name)
            row["detect_s"] = {name.split("@")[0]: s for name, s in downs.items()}
            if sig == signal.SIGSTOP and row.get("first_s") is not None and downs:
                row["first_after_detect_s"] = round(row["first_s"] - max(downs.values()), 4)
            fo = store.first("queue.failover", wall, 10.0, client_id=cid, state="done")
            row["failover_event_s"] = fo.get(target.name)
        finally:
            if conn is not None:
                conn.close()
            self.restore(victim)
            end_session(cid, target)
        return row

    def rereplication(self, trial: int, lost: str, count: int) -> dict[str, Any]:
        """``lost``: "replica" (node 3 holds the copy, node 1 the primary) or "primary"."""
        n1, n2, n3 = self.devs
        tag = f"r{trial}{lost}"
        topic = f"ft/{tag}"
        names = [d.name for d in self.devs]
        if lost == "replica":  # an id whose ring puts node 3 after node 1
            cid = next(
                c
                for k in range(10_000)
                if replicas(("", c := f"ft-{tag}-{k}"), n1.name, names, self.r)[1] == n3.name
            )
            primary = n1
        else:
            cid, primary = f"ft-{tag}", n3
        row: dict[str, Any] = {"case": "rereplication", "lost": lost, "trial": trial}
        row["messages"] = count
        before = queue_backlog(cid, primary, topic, tag, count, self.r)
        if n3.name not in before["replicas"]:
            raise TrialFailed(f"node 3 holds no copy: {before}")
        survivors = [n1, n2]
        store = LogTail(survivors, "msgstore")
        t0, wall = self.send(n3, signal.SIGKILL)
        try:
            seen: dict[str, float] = {}
            live: dict[str, Any] | None = None
            while "whole" not in seen:
                if time.monotonic() - t0 > LIMIT:
                    raise TrialFailed(f"not on {self.r} live copies within {LIMIT:g}s: {live}")
                for node in survivors:
                    q = queue_row(node, cid)
                    if q is None or n3.name in q["replicas"]:
                        continue
                    live = q | {"node": node.name}
                    seen.setdefault("set_s", round(time.monotonic() - t0, 3))
                    if whole(q, self.r, n3.name):
                        seen["whole"] = round(time.monotonic() - t0, 3)
                time.sleep(POLL)
            assert live is not None
            row["new_primary"], row["copies"] = live["node"], live["replicas"]
            row["set_changed_s"], row["rereplicated_s"] = seen["set_s"], seen["whole"]
            ev = store.first("queue.rereplicated", wall, 10.0, client_id=cid)
            row["rereplicated_event_s"] = min(ev.values()) if ev else None
            if lost == "primary":
                fo = store.first("queue.failover", wall, 5.0, client_id=cid, state="done")
                row["failover_event_s"] = min(fo.values()) if fo else None
            after = session_row(n1, cid) or {}
            row["directory_agrees"] = after.get("replicas") == live["replicas"]
            # The queue, read through the node that took the new copy: whole, in order.
            via = next(n for n in survivors if n.name != live["node"])
            t1 = time.monotonic()
            conn = Conn(cid, via.mqtt_port)
            try:
                conn.connected(False, EXPIRY)
                row |= {f"drain_{k}": v for k, v in drain(conn, count, t1).items()}
                row |= check(conn, tag, count)
                row["ok"] = row["ok"] and row["directory_agrees"]
            finally:
                conn.close()
        finally:
            self.restore(n3)
            end_session(cid, n1)
        return row


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and max of each figure, per case (signal or lost copy, and target)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["case"] == "failover":
            key = f"failover.{row['signal']}.{row['target']}"
            groups.setdefault(f"failover.{row['signal']}", []).append(row)
        else:
            key = f"rereplication.{row['lost']}"
        groups.setdefault(key, []).append(row)
    out: dict[str, Any] = {}
    for key, group in sorted(groups.items()):
        figures: dict[str, Any] = {"trials": len(group), "ok": sum(1 for g in group if g.get("ok"))}
        for name in sorted({k for g in group for k, v in g.items() if k.endswith("_s")}):
            values = [_num(g.get(name)) for g in group]
            vals = [v for v in values if v is not None]
            if vals:
                figures[name] = {
                    "p50": round(statistics.median(vals), 3),
                    "max": round(max(vals), 3),
                }
        out[key] = figures
    return out


def _num(value: Any) -> float | None:
    """A figure; for per-node figures (detection), the last node's."""
    if isinstance(value, dict):
        return max(value.values()) if value else None
    return float(value) if isinstance(value, int | float) else None


def settings(node: dc.DevNode) -> dict[str, Any]:
    """What bounds the figures: the failure detector's parameters (fixed in code), the
    orphan scan's pace and the timeouts in force on the cluster."""
    det = DetectorConfig()
    keys = "&".join(f"key={k}" for k in TIMEOUT_KEYS)
    return {
        "detector": {
            "probe_interval_s": det.probe_interval,
            "ack_timeout_s": det.ack_timeout,
            "nack_timeout_s": det.nack_timeout,
            "indirect_probes": det.indirect_probes,
            "suspicion_min_s": det.suspicion_min,
            "suspicion_max_s": det.suspicion_max,
            "sigstop_bound_3_nodes_s": round(detection_bound(det, 3), 3),
        },
        "orphan_scan": {"grace_s": orphans.GRACE, "retry_s": orphans.RETRY},
        "config": http(node.http_port, f"/api/v1/show?{keys}"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-dir", type=Path, required=True)
    ap.add_argument("--trials", type=int, default=5, help="failover trials per signal")
    ap.add_argument("--backlog", type=int, default=1000, help="queued messages per failover")
    ap.add_argument("--target", choices=("alternate", "replica", "other"), default="alternate")
    ap.add_argument("--rerepl-trials", type=int, default=3, help="per lost copy")
    ap.add_argument("--rerepl-messages", type=int, default=10_000)
    ap.add_argument("--replication-factor", type=int, default=2)
    ap.add_argument("--settle", type=float, default=3.0, help="idle seconds after a restore")
    ap.add_argument("--signals", default="SIGKILL,SIGSTOP", help="failover faults, in order")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="extra conf lines"
    )
    args = ap.parse_args()
    sigs = [signal.Signals[name.strip()] for name in args.signals.split(",") if name.strip()]
    base: Path = args.base_dir / "cluster"
    shutil.rmtree(base, ignore_errors=True)
    conf = {
        "msgstore.replication_factor": str(args.replication_factor),
        # The default (1000, as VerneMQ's) would drop most of a 10,000-message backlog.
        "max_offline_messages": "-1",
    }
    conf |= dict(kv.split("=", 1) for kv in args.set)
    problem = dc.start(base, 3, conf)
    bench = Bench(base, args.replication_factor, args.settle)
    rows: list[dict[str, Any]] = []

    def record(run: Callable[[], dict[str, Any]], **what: Any) -> None:
        try:
            row = run()
        except TrialFailed as exc:
            row = {**what, "ok": False, "error": str(exc)}
        rows.append(row)
        print(json.dumps(row), flush=True)

    try:
        if problem:
            raise SystemExit(f"failover_time: {problem}")
        time.sleep(args.settle)
        for i in range(args.trials):
            kind = args.target
            if kind == "alternate":
                kind = ("replica", "other")[i % 2]
            for sig in sigs:
                record(
                    functools.partial(bench.failover, i, sig, kind, args.backlog),
                    case="failover",
                    signal=sig.name,
                    trial=i,
                    target=kind,
                )
        for i in range(args.rerepl_trials):
            for lost in ("replica", "primary"):
                record(
                    functools.partial(bench.rereplication, i, lost, args.rerepl_messages),
                    case="rereplication",
                    lost=lost,
                    trial=i,
                )
        cfg = settings(bench.devs[0])
    finally:
        if bench.stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(bench.stopped, signal.SIGCONT)
        dc.stop(base)
    summary = summarize(rows)
    print(json.dumps({"summary": summary, "settings": cfg, "conf": conf}), flush=True)
    sys.exit(0 if rows and all(r.get("ok") for r in rows) else 1)


if __name__ == "__main__":
    main()
