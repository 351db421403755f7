"""Watching the node from outside: its /status, each service's memory, its state counts.

Read-only: the fuzzer learns the services' pids from the node's ``/status`` and reads
``/proc/PID/status``; it never signals a process. ``VmRSS`` is what the issue measures;
``RssAnon`` leaves out the file pages LMDB maps, which come and go with the page cache,
so a leak shows in it first.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SERVICES = ("listener", "registry", "gossip", "msgstore")


def get_json(http: str, path: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(f"http://{http}{path}", timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_healthy(http: str, timeout: float) -> None:
    """Wait until the node's /health says 200 (a node still starting refuses MQTT)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://{http}/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{http}/health not 200 within {timeout:.0f}s")
        time.sleep(0.2)


def memory_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, RssAnon) of ``pid`` in KiB; None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon"):
            found[key] = int(rest.split()[0])
    if len(found) < 2:
        return None
    return found["VmRSS"], found["RssAnon"]


@dataclass(slots=True)
class Sample:
    """One look at the node: children by name -> (pid, restarts), memory by name."""

    children: dict[str, tuple[int, int]]
    memory: dict[str, tuple[int, int]]
    services: dict[str, Any]


def sample(http: str) -> Sample:
    status = get_json(http, "/status")
    children = {
        name: (int(c.get("pid") or 0), int(c.get("restarts") or 0))
        for name, c in status.get("children", {}).items()
    }
    memory = {}
    for name, (pid, _) in children.items():
        mem = memory_kib(pid) if pid else None
        if mem is not None:
            memory[name] = mem
    return Sample(children, memory, status.get("services", {}))


def state_counts(services: dict[str, Any]) -> dict[str, int]:
    """The node's table sizes, as its services report them in /status."""
    reg = services.get("registry", {})
    gos = services.get("gossip", {})
    store = services.get("msgstore", {})
    keys = gos.get("keys", {})
    return {
        "sessions": int(reg.get("sessions", 0)),
        "online": int(reg.get("online", 0)),
        "listener_sessions": int(services.get("listener", {}).get("sessions", 0)),
        "subscriptions": int(keys.get("subs", 0)),
        "retained": int(keys.get("retain", 0)),
        "directory": int(keys.get("sessions", 0)),
        "gossip_tombstones": int(gos.get("tombstones", 0)),
        "queues": int(store.get("queues", 0)),
        "queued_messages": int(store.get("entries", 0)),
        "queued_bytes": int(store.get("bytes", 0)),
        **{k: int(v) for k, v in store.items() if k.startswith("tombstone")},
    }


LISTENER_GAUGES = {
    "ternmq_subscriptions": "listener_subscriptions",
    "ternmq_retained_messages": "listener_retained",
}


def listener_counts(http: str, timeout: float = 10.0) -> dict[str, int]:
    """The listener's routing replica, from /metrics: subscriptions in its trie and
    retained messages it holds (they must follow gossip's, expired sessions' included)."""
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=timeout) as resp:
        text = resp.read().decode()
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name in LISTENER_GAUGES and 'service="listener"' in rest:
            out[LISTENER_GAUGES[name]] = int(float(rest.rsplit(" ", 1)[1]))
    return out


@dataclass(slots=True)
class MemoryTrack:
    """Per service: memory at the start, the peak, the latest; restarts seen."""

    start: dict[str, tuple[int, int]] = field(default_factory=dict)
    peak: dict[str, tuple[int, int]] = field(default_factory=dict)
    last: dict[str, tuple[int, int]] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)

    def add(self, s: Sample) -> list[str]:
        """Record ``s``; the services that restarted or changed pid since the last look."""
        changed = []
        for name, (pid, restarts) in s.children.items():
            if name in self.pids and (pid != self.pids[name] or restarts > self.restarts[name]):
                changed.append(name)
            self.pids[name], self.restarts[name] = pid, restarts
        for name, mem in s.memory.items():
            self.start.setdefault(name, mem)
            old = self.peak.get(name, (0, 0))
            self.peak[name] = (max(old[0], mem[0]), max(old[1], mem[1]))
            self.last[name] = mem
        return changed

    def mark(self) -> dict[str, int]:
        """VmRSS of each service now, in KiB."""
        return {name: mem[0] for name, mem in sorted(self.last.items())}
