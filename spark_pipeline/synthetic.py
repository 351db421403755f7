"""Synthetic ternmq event logs with known, injected faults.

Theory of operation: a seeded random cluster (N nodes, publishers and subscribers
spread over them, each subscriber with a few topic filters) publishes at a fixed rate.
Every event is pushed on a heap keyed by its timestamp and written once time has moved
past it, so each log file is in time order as a real one is. Delivery to a
(publisher, subscriber) pair never overtakes an earlier one, so the logs are ordered
unless a fault is injected. Faults (QoS >= 1 pairs only, at most one per pair and
message): *lose* (never delivered), *duplicate* (redelivered with DUP later), *reorder*
(held back and delivered right after the pair's next message). *refuse* acts on a whole
QoS >= 1 message: its publisher is refused (``message.refused``), and either no
subscriber gets it or every subscriber does (even odds); no other fault hits it, and the
audit must count it ``refused``, never ``lost``. ``Truth`` records what was injected;
with the matching expect file the audit must find exactly that.
Files rotate like ``RotatingFileHandler`` (see ``rotating``).
"""

from __future__ import annotations

import heapq
import json
import random
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from services.common.events import SCHEMA_VERSION
from spark_pipeline.rotating import RotatingWriter, format_ts
from spark_pipeline.topics import matches

START_US: Final = int(datetime(2026, 11, 22, 7, 0, tzinfo=UTC).timestamp()) * 10**6
SERVICES: Final = ("listener", "registry", "gossip", "msgstore")


@dataclass(frozen=True, slots=True)
class SynthConfig:
    """What to generate; ``events`` is the target number of good lines (approximate)."""

    events: int = 100_000
    nodes: int = 3
    publishers: int = 30
    subscribers: int = 20
    topics: int = 3
    rate: float = 300.0
    lose: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    refuse: float = 0.0
    corrupt: int = 0
    rotate_bytes: int = 64 * 1024 * 1024
    seed: int = 1
    start_us: int = START_US


@dataclass(slots=True)
class Truth:
    """What was generated and injected."""

    events: int = 0
    messages: int = 0
    deliveries: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    refused: int = 0  # messages whose publisher was refused
    refused_pairs: int = 0  # their (message, subscriber) pairs under the expect file
    corrupt_lines: int = 0
    expect: list[dict[str, object]] = field(default_factory=list)


Event = tuple[int, int, int, str, str, str, dict[str, object]]


class _Generator:
    def __init__(self, cfg: SynthConfig, out: Path) -> None:
        self.cfg, self.out = cfg, out
        self.rng = random.Random(cfg.seed)
        self.heap: list[Event] = []
        self.pushed = 0
        self.truth = Truth()
        self.writers: dict[tuple[int, str], RotatingWriter] = {}
        self.corrupt_at = set(self.rng.sample(range(cfg.events), min(cfg.corrupt, cfg.events)))
        self.written = 0
        self.last: dict[tuple[int, int], int] = {}
        self.pending: dict[tuple[int, int], tuple[str, int, str, int]] = {}
        self.connected_at: dict[str, int] = {}
        filters = {j: self._filters(j) for j in range(cfg.subscribers)}
        self.truth.expect = [
            {"subscriber": f"sub-{j:03d}", "topic_filter": f, "from": None}
            for j, fs in filters.items()
            for f in fs
        ]
        self.fanout = {
            (p, k): [
                j for j, fs in filters.items() if any(matches(f, self.topic(p, k)) for f in fs)
            ]
            for p in range(cfg.publishers)
            for k in range(cfg.topics)
        }

    def _filters(self, j: int) -> list[str]:
        p = self.cfg.publishers
        fs = [f"site/p{(2 * j) % p:03d}/#", f"site/p{(2 * j + 1) % p:03d}/#"]
        return [*fs, "site/+/sensor0"] if j == 0 else fs

    @staticmethod
    def topic(p: int, k: int) -> str:
        return f"site/p{p:03d}/sensor{k}"

    def emit(
        self, ts: int, node: int, service: str, event: str, level: str = "info", **fields: object
    ) -> None:
        heapq.heappush(self.heap, (ts, self.pushed, node, service, event, level, fields))
        self.pushed += 1

    def flush(self, before: int | None = None) -> None:
        while self.heap and (before is None or self.heap[0][0] < before):
            ts, _n, node, service, event, level, fields = heapq.heappop(self.heap)
            rec = {
                "ts": format_ts(ts),
                "level": level,
                "node": f"dev{node + 1}",
                "service": service,
                "event": event,
                "schema": SCHEMA_VERSION,
                **fields,
            }
            line = json.dumps(rec, separators=(",", ":")) + "\n"
            writer = self._writer(node, service)
            if self.written in self.corrupt_at:
                bad = line[: len(line) // 2] + "\n" if self.written % 2 else "\x00 not json\n"
                writer.write(bad)
                self.truth.corrupt_lines += 1
            writer.write(line)
            self.written += 1

    def _writer(self, node: int, service: str) -> RotatingWriter:
        key = (node, service)
        if key not in self.writers:
            path = self.out / f"dev{node + 1}" / "log" / f"{service}.jsonl"
            self.writers[key] = RotatingWriter(path, self.cfg.rotate_bytes)
        return self.writers[key]

    def latency(self) -> int:
        extra = 50_000 if self.rng.random() < 0.001 else 0
        return 200 + int(self.rng.expovariate(1 / 800)) + extra

    def connect(self, ts: int, client: str, node: int) -> None:
        self.connected_at[client] = ts
        self.emit(
            ts,
            node,
            "listener",
            "client.connected",
            client_id=client,
            mountpoint="",
            peer=f"127.0.0.1:{40000 + len(self.connected_at)}",
            proto_ver=5,
            clean_start=False,
            session_present=False,
            keepalive=60,
            session_expiry=3600,
            username=client,
            listener="tcp/default",
        )

    def disconnect(self, ts: int, client: str, node: int, reason: str) -> None:
        dur = (ts - self.connected_at.pop(client)) / 1e6
        self.emit(
            ts,
            node,
            "listener",
            "client.disconnected",
            client_id=client,
            mountpoint="",
            peer="127.0.0.1",
            reason=reason,
            reason_code=0,
            duration_s=dur,
        )


def _deliver(
    g: _Generator, pair: tuple[int, int], msg: tuple[str, int, str, int], at: int, dup: bool = False
) -> None:
    msg_id, t, topic, qos = msg
    p, j = pair
    node = j % g.cfg.nodes
    sub = f"sub-{j:03d}"
    g.emit(
        at,
        node,
        "listener",
        "message.delivered",
        msg_id=msg_id,
        client_id=sub,
        topic=topic,
        qos=qos,
        dup=dup,
        latency_us=at - t,
        publisher=f"pub-{p:03d}",
        seq=0,
    )
    g.truth.deliveries += 1
    if qos:
        g.emit(
            at + 150 + g.rng.randrange(300),
            node,
            "listener",
            "message.acked",
            msg_id=msg_id,
            client_id=sub,
            qos=qos,
            latency_us=at - t,
        )


def _refuse(g: _Generator, pk: tuple[int, int], msg: tuple[str, int, str, int]) -> bool:
    """Refuse ``msg``'s publisher; True if no subscriber is to get the message."""
    msg_id, t, topic, qos = msg
    p = pk[0]
    code, reason = g.rng.choice(((0x80, "store_error"), (0x83, "netsplit")))
    g.emit(
        t + 300 + g.rng.randrange(500),
        p % g.cfg.nodes,
        "listener",
        "message.refused",
        msg_id=msg_id,
        client_id=f"pub-{p:03d}",
        topic=topic,
        qos=qos,
        reason_code=code,
        reason=reason,
    )
    g.truth.refused += 1
    g.truth.refused_pairs += len(g.fanout[pk])
    return g.rng.random() < 0.5


def _publish(g: _Generator, i: int, t: int) -> None:
    cfg, rng = g.cfg, g.rng
    p, k = rng.randrange(cfg.publishers), rng.randrange(cfg.topics)
    node = p % cfg.nodes
    qos = rng.choices((0, 1, 2), (3, 5, 2))[0]
    msg_id, topic = f"n{node + 1}-{i:07x}", g.topic(p, k)
    if rng.random() < 0.0002:
        g.disconnect(t - 2, f"pub-{p:03d}", node, "keepalive_timeout")
        g.connect(t - 1, f"pub-{p:03d}", node)
    g.emit(
        t,
        node,
        "listener",
        "message.published",
        msg_id=msg_id,
        client_id=f"pub-{p:03d}",
        topic=topic,
        qos=qos,
        retain=False,
        size=32 + rng.randrange(200),
        mountpoint="",
    )
    g.truth.messages += 1
    refused = qos >= 1 and cfg.refuse > 0 and rng.random() < cfg.refuse
    if refused and _refuse(g, (p, k), (msg_id, t, topic, qos)):
        return
    for j in g.fanout[(p, k)]:
        pair, msg = (p, j), (msg_id, t, topic, qos)
        at = max(t + g.latency(), g.last.get(pair, 0) + 1)
        if qos == 0:
            if rng.random() < 0.002:
                g.emit(
                    at,
                    j % cfg.nodes,
                    "listener",
                    "message.dropped",
                    msg_id=msg_id,
                    client_id=f"sub-{j:03d}",
                    topic=topic,
                    qos=0,
                    reason=rng.choice(("queue_full", "offline")),
                )
            else:
                g.last[pair] = at
                _deliver(g, pair, msg, at)
            continue
        held = g.pending.pop(pair, None)
        roll = rng.random() if held is None and not refused else 1.0
        if roll < cfg.lose:
            g.truth.lost += 1
            continue
        if roll < cfg.lose + cfg.reorder:
            g.pending[pair] = msg
            continue
        g.last[pair] = at
        _deliver(g, pair, msg, at)
        if j % 2 == 0:
            g.emit(
                t + 50,
                j % cfg.nodes,
                "msgstore",
                "message.queued",
                msg_id=msg_id,
                client_id=f"sub-{j:03d}",
                mountpoint="",
                seq=i,
                epoch=1,
                qos=qos,
            )
        if roll < cfg.lose + cfg.reorder + cfg.duplicate:
            g.truth.duplicated += 1
            _deliver(g, pair, msg, at + 20_000, dup=True)
        if held is not None:
            g.last[pair] = at + 1 + rng.randrange(50)
            _deliver(g, pair, held, g.last[pair])
            g.truth.reordered += 1


def _netsplit(g: _Generator, t: int) -> None:
    n = g.cfg.nodes
    if n < 2:
        return
    lone, rest = n - 1, [f"dev{i + 1}" for i in range(n - 1)]
    for node in range(n):
        unreachable = [f"dev{n}"] if node != lone else rest
        g.emit(
            t + node * 300,
            node,
            "gossip",
            "netsplit.detected",
            level="warning",
            unreachable=unreachable,
            members=n,
        )
        for peer in unreachable:
            g.emit(t + node * 300 + 1, node, "gossip", "node.down", level="warning", peer=peer)
            g.emit(t + 5_000_000 + node * 200, node, "gossip", "node.up", peer=peer)
        g.emit(
            t + 5_000_100 + node * 200,
            node,
            "gossip",
            "netsplit.healed",
            duration_s=(5_000_100 - 100 * node) / 1e6,
            members=n,
        )
    g.emit(
        t + 1_000_000,
        0,
        "listener",
        "rpc.failed",
        level="error",
        target=f"dev{n}",
        method="Forward",
        code="UNAVAILABLE",
        reason="netsplit",
    )


def generate(cfg: SynthConfig, out: Path) -> Truth:
    """Write logs for ``cfg`` under ``out/devK/log/`` and return what was injected."""
    g = _Generator(cfg, out)
    t0 = cfg.start_us
    for node in range(cfg.nodes):
        for s, service in enumerate(SERVICES):
            g.emit(
                t0 + s,
                node,
                service,
                "service.started",
                address=f"127.0.0.1:{9000 + s}",
                pid=1000 + 10 * node + s,
            )
    clients = [(f"pub-{p:03d}", p) for p in range(cfg.publishers)]
    clients += [(f"sub-{j:03d}", j) for j in range(cfg.subscribers)]
    for c, (client, i) in enumerate(clients):
        g.connect(t0 + 100_000 + c * 37, client, i % cfg.nodes)
    gap = max(2, int(1e6 / cfg.rate))
    base, i, split_done = t0 + 1_000_000, 0, False
    while g.pushed < cfg.events - len(clients) and i < 100 * cfg.events + 1000:
        t = base + i * gap + g.rng.randrange(gap // 2)
        g.flush(t)
        _publish(g, i, t)
        if i % 1000 == 999:
            for node in range(cfg.nodes):
                g.emit(
                    t + 10,
                    node,
                    "msgstore",
                    "store.commit",
                    entries=1000,
                    bytes=150_000,
                    fsync_us=400 + g.rng.randrange(800),
                )
        if i % 5000 == 4999:
            g.emit(
                t + 5,
                g.rng.randrange(cfg.nodes),
                "listener",
                "auth.failed",
                level="warning",
                client_id="intruder",
                peer="127.0.0.1:1",
                username="x",
                action="connect",
                topic="",
                reason="bad_password",
            )
        if not split_done and g.pushed >= cfg.events // 2:
            _netsplit(g, t + 1000)
            split_done = True
        i += 1
    end = base + (i + 1) * gap + 200_000
    for pair, msg in sorted(g.pending.items()):
        g.last[pair] = end
        _deliver(g, pair, msg, end)
    for c, (client, n) in enumerate(clients):
        g.disconnect(end + 1_000_000 + c, client, n % cfg.nodes, "normal")
    g.flush()
    for writer in g.writers.values():
        writer.close()
    g.truth.events = g.written
    return g.truth


def write_truth(truth: Truth, out: Path) -> None:
    """``out/truth.json`` (all counts) and ``out/expect.json`` (for ``--expect``)."""
    (out / "truth.json").write_text(json.dumps(asdict(truth), indent=1) + "\n")
    (out / "expect.json").write_text(json.dumps(truth.expect, indent=1) + "\n")
