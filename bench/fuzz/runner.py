"""Running cases against a node: parallel connections, round trips, memory samples.

Theory of operation. ``Fuzzer.batch(lo, hi)`` runs cases ``lo..hi-1`` on ``parallel``
connections at once (each worker takes the next index). Every ``roundtrip_every``-th
index also runs a valid round trip (``roundtrip.py``) on that worker, so round trips
interleave with the garbage at a steady rate whatever the speed. Beside the workers a
probe reads the node's ``/status`` every ``sample_every`` seconds: the services' pids and
restarts, and their memory. A batch ends with ``settle`` seconds of quiet, then one more
sample: the memory and table sizes the batch left behind.

Failures are printed as they happen, each with what replays it: a round trip with the
cases that ran just before it, a case the broker did not close after EOF, or a frame
from the broker that is not MQTT, with the case's seed and bytes.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.fuzz import probe, roundtrip
from bench.fuzz.cases import Case, make_case
from bench.fuzz.conn import Conn
from bench.fuzz.generate import Pools

CLOSE_WAIT = 0.02  # how long a "close" case waits for answers before closing


@dataclass(frozen=True, slots=True)
class Options:
    host: str = "127.0.0.1"
    port: int = 1883
    http: str = ""  # the node's HTTP address (host:port); "" = no /status probing
    cases: int = 10_000  # per run
    runs: int = 1
    seed: int = 1
    parallel: int = 50
    time_limit: float = 0.0  # seconds per run; 0 = none
    roundtrip_every: int = 500
    valid_share: float = 0.1
    pools: Pools = field(default_factory=Pools)
    case_timeout: float = 10.0
    rt_timeout: float = 15.0
    settle: float = 5.0
    sample_every: float = 1.0
    progress_every: float = 10.0


@dataclass
class Batch:
    """What one run of ``cases`` did and left behind."""

    first: int
    cases: int = 0
    duration_s: float = 0.0
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    mutations: collections.Counter[str] = field(default_factory=collections.Counter)
    roundtrips_ok: int = 0
    roundtrips_failed: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    peak_kib: dict[str, int] = field(default_factory=dict)
    peak_anon_kib: dict[str, int] = field(default_factory=dict)
    after_kib: dict[str, int] = field(default_factory=dict)
    after_anon_kib: dict[str, int] = field(default_factory=dict)
    state: dict[str, int] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        rate = self.cases / self.duration_s if self.duration_s else 0.0
        return {
            "first_case": self.first,
            "cases": self.cases,
            "duration_s": round(self.duration_s, 1),
            "cases_per_s": round(rate, 1),
            "roundtrips_ok": self.roundtrips_ok,
            "roundtrips_failed": self.roundtrips_failed,
            "failures": self.failures,
            "outcomes": dict(self.outcomes.most_common()),
            "mutations": dict(self.mutations.most_common()),
            "rss_peak_kib": self.peak_kib,
            "anon_peak_kib": self.peak_anon_kib,
            "rss_after_kib": self.after_kib,
            "anon_after_kib": self.after_anon_kib,
            "state": self.state,
        }


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Fuzzer:
    def __init__(self, opts: Options, say: Callable[[str], None] = _say) -> None:
        self.opts = opts
        self.say = say
        self.recent: collections.deque[str] = collections.deque(maxlen=2 * opts.parallel)
        self.memory = probe.MemoryTrack()
        self.changes: list[dict[str, Any]] = []
        self.rt_locks: dict[str, asyncio.Lock] = {}
        self.batch_now: Batch | None = None
        self.start_kib: dict[str, int] = {}
        self.start_state: dict[str, int] = {}

    # -- one case -------------------------------------------------------------------
    async def case(self, b: Batch, c: Case) -> None:
        self.recent.append(c.ref)
        b.mutations.update(c.mutations or ("none",))
        opts = self.opts
        try:
            conn = await Conn.open(opts.host, opts.port, opts.case_timeout)
        except (OSError, TimeoutError) as exc:
            b.outcomes["tcp_connect_failed"] += 1
            self.fail(b, "tcp connect", f"{exc!r}", c)
            return
        try:
            for chunk in c.chunks:
                conn.write(chunk)
                if len(c.chunks) > 1:
                    await asyncio.sleep(0)
            if c.ending == "eof":
                conn.write_eof()
                if not await conn.wait_closed(opts.case_timeout):
                    self.fail(b, "open after eof", f"not closed in {opts.case_timeout}s", c)
            elif c.ending == "close":
                await conn.wait_closed(CLOSE_WAIT)
            else:
                await asyncio.sleep(0)
                conn.reset()
        finally:
            conn.close()
        b.outcomes[self.answer(conn)] += 1
        if conn.malformed:
            self.fail(b, "broker sent a malformed frame", conn.malformed, c)

    @staticmethod
    def answer(conn: Conn) -> str:
        if not conn.frames:
            return "no_answer"
        first, body = conn.frames[0]
        if first >> 4 == 2 and len(body) >= 2:
            return "connack_ok" if body[1] == 0 else f"connack_{body[1]:02x}"
        return f"first_type_{first >> 4}"

    def fail(self, b: Batch, what: str, detail: str, c: Case | None = None) -> None:
        entry: dict[str, Any] = {"what": what, "detail": detail}
        if c is not None:
            entry["case"] = c.ref
            entry["mutations"] = list(c.mutations)
            entry["bytes"] = c.data[:512].hex()
            self.say(f"FAIL {what}: {detail}; case {c.ref} {list(c.mutations)} {entry['bytes']}")
        else:
            entry["recent_cases"] = list(self.recent)
            self.say(f"FAIL {what}: {detail}; cases just before: {' '.join(self.recent)}")
        b.failures.append(entry)

    async def roundtrip(self, b: Batch, n: int) -> None:
        plan = roundtrip.Plan.of(self.opts.seed, n)
        lock = self.rt_locks.setdefault(plan.client_id, asyncio.Lock())
        async with lock:
            _, error = await roundtrip.run(
                self.opts.host, self.opts.port, self.opts.seed, n, self.opts.rt_timeout
            )
        if error:
            b.roundtrips_failed += 1
            self.fail(b, f"round trip {n} ({plan.client_id}, v{plan.version})", error)
        else:
            b.roundtrips_ok += 1

    # -- batches --------------------------------------------------------------------
    async def batch(self, lo: int, hi: int) -> Batch:
        opts = self.opts
        b = self.batch_now = Batch(first=lo)
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + opts.time_limit if opts.time_limit else None
        indices = iter(range(lo, hi))
        self.peak_reset()

        async def worker() -> None:
            for i in indices:
                if deadline is not None and loop.time() > deadline:
                    return
                if (i + 1) % opts.roundtrip_every == 0:
                    await self.roundtrip(b, i // opts.roundtrip_every)
                await self.case(b, make_case(opts.seed, i, opts.pools, opts.valid_share))
                b.cases += 1

        await asyncio.gather(*(worker() for _ in range(opts.parallel)))
        b.duration_s = loop.time() - started
        b.peak_kib = {k: v[0] for k, v in sorted(self.memory.peak.items())}
        b.peak_anon_kib = {k: v[1] for k, v in sorted(self.memory.peak.items())}
        await asyncio.sleep(opts.settle)
        if opts.http:
            s = await self.look()
            b.after_kib = self.memory.mark()
            b.after_anon_kib = {k: v[1] for k, v in sorted(s.memory.items())}
            b.state = probe.state_counts(s.services)
            b.state.update(await asyncio.to_thread(probe.listener_counts, opts.http))
        return b

    def peak_reset(self) -> None:
        self.memory.peak = dict(self.memory.last)

    async def look(self) -> probe.Sample:
        s = await asyncio.to_thread(probe.sample, self.opts.http)
        for name in self.memory.add(s):
            change = {"service": name, "restarts": self.memory.restarts[name]}
            change["pid"] = self.memory.pids[name]
            change["recent_cases"] = list(self.recent)
            self.changes.append(change)
            self.say(f"FAIL service {name} restarted; cases just before: {' '.join(self.recent)}")
        return s

    async def watch(self) -> None:
        """Sample the node and print progress until cancelled."""
        loop = asyncio.get_running_loop()
        last_print = loop.time()
        while True:
            await asyncio.sleep(self.opts.sample_every)
            try:
                await self.look()
            except OSError as exc:
                self.say(f"warning: /status unreadable: {exc!r}")
            if loop.time() - last_print >= self.opts.progress_every and self.batch_now:
                last_print = loop.time()
                b = self.batch_now
                mem = " ".join(f"{k}={v // 1024}MB" for k, v in self.memory.mark().items())
                self.say(
                    f"{b.cases} cases, {b.roundtrips_ok} round trips ok, "
                    f"{b.roundtrips_failed} failed; rss {mem}"
                )

    async def run(self) -> dict[str, Any]:
        opts = self.opts
        started = time.time()
        watcher = None
        if opts.http:
            await asyncio.to_thread(probe.wait_healthy, opts.http, 120.0)
            s = await self.look()
            self.start_kib = self.memory.mark()
            self.start_state = probe.state_counts(s.services)
            watcher = asyncio.create_task(self.watch())
        batches = []
        try:
            for k in range(opts.runs):
                batches.append(await self.batch(k * opts.cases, (k + 1) * opts.cases))
                self.say(f"run {k + 1}: {batches[-1].report()['cases_per_s']} cases/s")
        finally:
            if watcher is not None:
                watcher.cancel()
        failed = sum(b.roundtrips_failed + len(b.failures) for b in batches) + len(self.changes)
        return {
            "ok": failed == 0,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            "options": {
                "seed": opts.seed,
                "cases_per_run": opts.cases,
                "runs": opts.runs,
                "parallel": opts.parallel,
                "roundtrip_every": opts.roundtrip_every,
                "valid_share": opts.valid_share,
                "pools": {
                    "persistent_ids": opts.pools.persistent_ids,
                    "topics": opts.pools.topics,
                },
            },
            "rss_start_kib": self.start_kib,
            "state_start": self.start_state,
            "service_restarts": self.changes,
            "runs": [b.report() for b in batches],
        }
