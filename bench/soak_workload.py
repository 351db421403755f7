"""The soak's clients: who they are, what one cycle does, and the final inbox check.

Kinds of client, drawn once per client from the seed:

* clean (45 %): a clean session, half of them under a new client id every cycle;
* persistent (40 %): the same id every cycle, back well before its session could expire;
  it keeps an inbox subscription (QoS 1) that other clients publish to, and drops every
  other filter before it leaves. Every inbox message the broker acknowledged must reach
  it: what does not is counted as lost;
* vanishing (15 %): a persistent session under a new id every cycle, subscribed to one
  exact topic and never resumed, so the node must expire it and what it holds
  (``persistent_client_expiration``, or the MQTT 5 expiry).

A cycle: connect, subscribe to 1-3 filters of a bounded topic space (200 plain topics,
200 retained ones, wildcards among them), publish 1-3 messages (QoS 0 or 1, to a topic,
to a persistent client's inbox, retained, or clearing a retained topic with an empty
payload), receive for up to a second, unsubscribe, disconnect (10 % just close the
socket). So the working set is bounded: sessions ~ persistent clients + vanishing sessions
created per expiry period, retained messages <= 200, subscriptions and queued messages
<= what those sessions hold.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from soak_client import Connection, MqttError, open_connection

TOPIC_A, TOPIC_B = 20, 10  # plain and retained topics: <a>/<b>, 200 of each


@dataclass
class Plan:
    host: str
    port: int
    clients: int
    seconds: float
    seed: int
    expiry: int  # seconds: persistent_client_expiration, and the MQTT 5 session expiry
    sleep_min: float
    sleep_max: float
    timeout: float
    tag: str  # unique per run: client ids and topics of two runs never meet

    def topic(self, kind: str, *parts: object) -> str:
        return "/".join(["soak", self.tag, kind, *map(str, parts)])


@dataclass
class Stats:
    cycles: int = 0
    connects: int = 0
    session_present: int = 0
    subscribes: int = 0
    unsubscribes: int = 0
    abrupt_closes: int = 0
    open_connections: int = 0  # held by the clients now (the drain's not counted)
    published: Counter[str] = field(default_factory=Counter)
    received: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    inbox_acked: set[str] = field(default_factory=set)
    inbox_received: set[str] = field(default_factory=set)
    inbox_dups: int = 0
    seq: int = 0
    cycles_by_kind: Counter[str] = field(default_factory=Counter)
    inboxes_held: int = 0  # persistent sessions of returning clients
    vanished_until: list[float] = field(default_factory=list)  # heap: when each may expire

    def expected_sessions(self) -> int:
        """Persistent sessions the node is entitled to hold now: the returning clients'
        and the vanishing ones not yet past their expiry (``registry.expiry_check_interval``
        and a cycle's timing make the node's count trail this by a few)."""
        now = time.monotonic()
        while self.vanished_until and self.vanished_until[0] <= now:
            heapq.heappop(self.vanished_until)
        return self.inboxes_held + len(self.vanished_until)

    def load(self) -> dict[str, Any]:
        return {
            "sessions_expected": self.expected_sessions(),
            "open_connections": self.open_connections,
            "cycles_by_kind": dict(self.cycles_by_kind),
            "cycles": self.cycles,
            "connects": self.connects,
            "session_present": self.session_present,
            "subscribes": self.subscribes,
            "unsubscribes": self.unsubscribes,
            "abrupt_closes": self.abrupt_closes,
            "published": dict(self.published),
            "received": dict(self.received),
            "errors": dict(self.errors),
            "inbox_acked": len(self.inbox_acked),
            "inbox_received": len(self.inbox_received),
        }


@dataclass
class Client:
    index: int
    kind: str  # clean | persistent | vanishing
    version: int  # 4 = 3.1.1, 5 = 5.0
    fresh_ids: bool  # a new client id every cycle
    rng: random.Random
    generation: int = 0
    inbox_ready: bool = False  # its session holds the inbox subscription
    held: set[str] = field(default_factory=set)  # other filters its session holds

    def client_id(self, plan: Plan) -> str:
        base = f"soak-{plan.tag}-{self.kind[0]}{self.index}"
        return f"{base}-{self.generation}" if self.fresh_ids else base

    @property
    def clean(self) -> bool:
        return self.kind == "clean"

    def expiry(self, plan: Plan) -> int:
        """MQTT 5 session expiry; 3.1.1 sessions get the node's persistent_client_expiration."""
        if self.clean:
            return 0
        if self.kind == "vanishing":
            return self.rng.randint(plan.expiry // 2, plan.expiry)
        return plan.expiry


def make_clients(plan: Plan) -> list[Client]:
    rng = random.Random(plan.seed)
    out = []
    for i in range(plan.clients):
        r = rng.random()
        kind = "clean" if r < 0.45 else "persistent" if r < 0.85 else "vanishing"
        fresh = kind == "vanishing" or (kind == "clean" and rng.random() < 0.5)
        version = rng.choice((4, 5))
        out.append(Client(i, kind, version, fresh, random.Random(rng.getrandbits(64))))
    return out


class Workload:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.stats = Stats()
        self.clients = make_clients(plan)
        self.inboxes = [c for c in self.clients if c.kind == "persistent"]
        self.stop_at = 0.0

    # -- one cycle -------------------------------------------------------------------
    def _on_message(self, topic: str, payload: bytes, qos: int, retain: bool) -> None:
        st = self.stats
        kind = topic.split("/", 3)[2] if topic.count("/") >= 3 else "?"
        st.received[f"{kind}_qos{qos}{'_retained' if retain else ''}"] += 1
        if kind == "in":
            msg_id = payload.decode()
            if msg_id in st.inbox_received:
                st.inbox_dups += 1
            st.inbox_received.add(msg_id)

    def _filters(self, rng: random.Random, exact: bool) -> list[str]:
        """1-3 filters, or with ``exact`` one exact topic: a session that sits offline for
        minutes would otherwise queue a large share of all traffic."""
        p = self.plan
        out = set()
        for _ in range(1 if exact else rng.randint(1, 3)):
            a, b, r = rng.randrange(TOPIC_A), rng.randrange(TOPIC_B), rng.random()
            if r < 0.5 or exact:
                out.add(p.topic("t", a, b))
            elif r < 0.7:
                out.add(p.topic("t", a, "+"))
            elif r < 0.8:
                out.add(p.topic("t", "+", b))
            else:
                out.add(p.topic("r", a, "+"))  # up to 10 retained messages on subscribe
        return sorted(out)

    async def _publish(self, conn: Connection, rng: random.Random) -> None:
        p, st, t = self.plan, self.stats, self.plan.timeout
        for _ in range(rng.randint(1, 3)):
            a, b, r = rng.randrange(TOPIC_A), rng.randrange(TOPIC_B), rng.random()
            if r < 0.35:
                conn.publish0(p.topic("t", a, b), b"q0" * rng.randint(1, 64))
                st.published["qos0"] += 1
            elif r < 0.55:
                await conn.publish1(p.topic("t", a, b), b"q1" * rng.randint(1, 64), False, t)
                st.published["qos1"] += 1
            elif r < 0.8:
                await self._publish_inbox(conn, rng)
            elif r < 0.92:
                qos = rng.choice((0, 1))
                payload = b"r" * rng.randint(1, 256)
                if qos:
                    await conn.publish1(p.topic("r", a, b), payload, True, t)
                else:
                    conn.publish0(p.topic("r", a, b), payload, retain=True)
                st.published[f"retained_set_qos{qos}"] += 1
            else:
                await conn.publish1(p.topic("r", a, b), b"", True, t)
                st.published["retained_clear"] += 1

    async def _publish_inbox(self, conn: Connection, rng: random.Random) -> None:
        ready = [c for c in rng.sample(self.inboxes, min(8, len(self.inboxes))) if c.inbox_ready]
        if not ready:
            return
        target = ready[0]
        self.stats.seq += 1
        msg_id = f"{target.index}:{self.stats.seq}"
        topic = self.plan.topic("in", target.index)
        await conn.publish1(topic, msg_id.encode(), False, self.plan.timeout)
        self.stats.inbox_acked.add(msg_id)
        self.stats.published["inbox"] += 1

    async def cycle(self, client: Client) -> None:
        p, st, rng = self.plan, self.stats, client.rng
        conn = await open_connection(p.host, p.port, client.version, self._on_message, p.timeout)
        st.open_connections += 1
        try:
            expiry = client.expiry(p)
            present = await conn.handshake(client.client_id(p), client.clean, expiry, p.timeout)
            st.connects += 1
            st.session_present += present
            if client.kind == "vanishing":  # 3.1.1 sessions get persistent_client_expiration
                lasts = expiry if client.version >= 5 else p.expiry
                heapq.heappush(st.vanished_until, time.monotonic() + lasts + p.timeout)
            if client.kind == "persistent" and not client.inbox_ready:
                await conn.subscribe([p.topic("in", client.index)], 1, p.timeout)
                client.inbox_ready = True
                st.inboxes_held += 1
            filters = self._filters(rng, exact=client.kind == "vanishing")
            await conn.subscribe(filters, rng.choice((0, 1)), p.timeout)
            st.subscribes += 1
            if client.kind == "persistent":
                client.held.update(filters)
            await self._publish(conn, rng)
            await asyncio.sleep(rng.uniform(0.1, 1.0))  # receive
            await self._unsubscribe(conn, client, filters)
            if rng.random() < 0.1:
                conn.abort()
                st.abrupt_closes += 1
            else:
                await conn.disconnect(p.timeout)
        finally:
            conn.abort()
            st.open_connections -= 1
        st.cycles += 1
        st.cycles_by_kind[client.kind] += 1

    async def _unsubscribe(self, conn: Connection, client: Client, filters: list[str]) -> None:
        """A persistent session drops every filter but its inbox (also those a failed cycle
        left), so its offline queue holds only inbox messages and cannot overflow; a
        vanishing one mostly keeps them, for its expiry to collect; a clean one mostly
        unsubscribes, for the UNSUBSCRIBE path."""
        if client.kind == "persistent":
            drop = sorted(client.held)
        elif client.rng.random() < (0.3 if client.kind == "vanishing" else 0.8):
            drop = filters
        else:
            return
        await conn.unsubscribe(drop, self.plan.timeout)
        self.stats.unsubscribes += 1
        if client.kind == "persistent":
            client.held.clear()

    async def client_loop(self, client: Client) -> None:
        rng = client.rng
        await asyncio.sleep(rng.uniform(0, min(10.0, self.plan.sleep_max)))  # ramp up
        while time.monotonic() < self.stop_at:
            try:
                await self.cycle(client)
            except (MqttError, OSError, TimeoutError) as exc:
                self.stats.errors[_error_kind(exc)] += 1
            if client.fresh_ids:
                client.generation += 1
            left = self.stop_at - time.monotonic()
            await asyncio.sleep(
                min(max(left, 0), rng.uniform(self.plan.sleep_min, self.plan.sleep_max))
            )

    # -- the end ---------------------------------------------------------------------
    async def drain(self, wait: float) -> None:
        """Bring every persistent client back at once to collect its inbox (waiting up to
        ``wait`` seconds for what is owed), then end the sessions."""
        p, sem = self.plan, asyncio.Semaphore(50)
        conns: list[tuple[Client, Connection]] = []

        async def resume(client: Client) -> None:
            async with sem:
                conn = None
                try:
                    conn = await open_connection(
                        p.host, p.port, client.version, self._on_message, p.timeout
                    )
                    await conn.handshake(client.client_id(p), False, p.expiry, p.timeout)
                    conns.append((client, conn))
                except (MqttError, OSError, TimeoutError) as exc:
                    self.stats.errors[f"drain: {_error_kind(exc)}"] += 1
                    if conn is not None:
                        conn.abort()

        async def end(client: Client, conn: Connection) -> None:
            async with sem:
                try:
                    await self._end_session(client, conn)
                    self.stats.inboxes_held -= 1
                except (MqttError, OSError, TimeoutError) as exc:
                    self.stats.errors[f"drain: {_error_kind(exc)}"] += 1

        await asyncio.gather(*(resume(c) for c in self.inboxes if c.inbox_ready))
        deadline = time.monotonic() + wait
        while self.stats.inbox_acked - self.stats.inbox_received:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        await asyncio.gather(*(end(c, conn) for c, conn in conns))

    async def _end_session(self, client: Client, conn: Connection) -> None:
        p = self.plan
        try:
            await conn.disconnect(p.timeout, end_session=True)
        finally:
            conn.abort()
        if client.version < 5:  # 3.1.1 has no way to end a session but a clean connect
            conn = await open_connection(p.host, p.port, 4, self._on_message, p.timeout)
            try:
                await conn.handshake(client.client_id(p), True, 0, p.timeout)
                await conn.disconnect(p.timeout)
            finally:
                conn.abort()

    async def clear_retained(self) -> None:
        """Leave no retained message behind on a node that outlives the run."""
        p = self.plan
        conn = await open_connection(p.host, p.port, 4, self._on_message, p.timeout)
        try:
            await conn.handshake(f"soak-{p.tag}-cleanup", True, 0, p.timeout)
            topics = [p.topic("r", a, b) for a in range(TOPIC_A) for b in range(TOPIC_B)]
            await asyncio.gather(*(conn.publish1(t, b"", True, p.timeout) for t in topics))
            await conn.disconnect(p.timeout)
        finally:
            conn.abort()

    def lost(self) -> list[str]:
        return sorted(self.stats.inbox_acked - self.stats.inbox_received)


def _error_kind(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    for marker in ("no reply to packet type", "CONNACK refused", "SUBACK refused"):
        if text.startswith(marker):
            return text.split(" within")[0] if "within" in text else text
    if isinstance(exc, TimeoutError):
        return "TCP connect timeout"
    if isinstance(exc, ConnectionRefusedError):
        return "TCP connect refused"
    if isinstance(exc, OSError):
        return f"socket: {type(exc).__name__}"
    return text[:80]
