"""What the soak samples from a node: RSS per process and the state it legitimately holds.

Processes come from ``GET /status`` (children -> pid); the supervisor is the children's
parent and the event-log converters are each service's own children (named
``<service>.logspool``). RSS is ``VmRSS`` of ``/proc/PID/status``: the soak only reads
``/proc``, it never signals a process it did not start.

The legitimate state is what clients are entitled to keep: sessions (``session show``),
retained messages (``retain show``), subscriptions and queues (``/metrics``). A service
whose RSS grows while these stay level is holding what nobody can reach. Deliveries
dropped (``messages_dropped_total``, by reason) are kept too: a dropped inbox message is
not lost if the node says why it dropped it.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

# /metrics series kept in each sample (summed over their labels), by short name
METRICS = {
    "connections": "ternmq_connections",
    "sessions_online": "ternmq_sessions_online",
    "subscriptions": "ternmq_subscriptions",
    "retained_listener": "ternmq_retained_messages",
    "registry_sessions": "ternmq_registry_sessions",
    "registry_online": "ternmq_registry_sessions_online",
    "registry_expired_total": "ternmq_registry_sessions_expired_total",
    "msgstore_queues": "ternmq_msgstore_queues",
    "msgstore_entries": "ternmq_msgstore_entries",
    "msgstore_bytes": "ternmq_msgstore_bytes",
    "gossip_tombstones": "ternmq_gossip_tombstones",
    "gossip_gc_collected_total": "ternmq_gossip_gc_collected_total",
    "protocol_errors_total": "ternmq_protocol_errors_total",
    "store_errors_total": "ternmq_store_errors_total",
    "dropped_total": "ternmq_messages_dropped_total",
}
SESSION_SHOW_LIMIT = 10000  # rows the node's session show returns at most
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


class NodeHttp:
    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.base = f"http://{host}:{port}"
        self.timeout = timeout

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.base + path, timeout=self.timeout) as resp:
            return bytes(resp.read())

    def json(self, path: str) -> Any:
        return json.loads(self.get(path))

    def healthy(self) -> bool:
        try:
            self.get("/health")
        except (OSError, urllib.error.HTTPError):
            return False
        return True


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and its anonymous part (RssAnon) in KiB; empty for a process that is gone.
    The difference is mostly file pages mapped in, such as an LMDB map: those belong to
    the page cache and come and go with what is read, not with what is held."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "RssAnon"):
            out[key] = int(line.split()[1])
    return out


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def _children(pids: set[int]) -> dict[int, int]:
    """Every process whose parent is in ``pids``: {child pid: parent pid}."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parent = _ppid(int(entry))
            if parent in pids:
                out[int(entry)] = parent
    return out


def processes(status: dict[str, Any]) -> dict[str, int]:
    """{name: pid} of the supervisor, its services and their log converters."""
    services = {
        name: int(child["pid"])
        for name, child in status.get("children", {}).items()
        if child.get("pid") is not None
    }
    out: dict[str, int] = {}
    parents = {_ppid(pid) for pid in services.values()} - {None, 1}
    if len(parents) == 1:
        out["supervisor"] = int(parents.pop())  # type: ignore[arg-type]
    out.update(services)
    by_pid = {pid: name for name, pid in services.items()}
    for child, parent in sorted(_children(set(by_pid)).items()):
        name = f"{by_pid[parent]}.logspool"
        out[name if name not in out else f"{name}.{child}"] = child
    return out


def parse_metrics(text: str) -> dict[str, float]:
    wanted = {series: short for short, series in METRICS.items()}
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) in wanted:
            short = wanted[m.group(1)]
            out[short] = out.get(short, 0.0) + float(m.group(3))
            reason = re.search(r'reason="([^"]*)"', m.group(2) or "")
            if reason:
                key = f"{short}:{reason.group(1)}"
                out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def sample_node(http: NodeHttp, pids: dict[str, int] | None) -> dict[str, Any]:
    """One sample; ``pids`` from the previous one is reused unless a service restarted."""
    rec: dict[str, Any] = {"kind": "sample", "problems": []}
    try:
        status = http.json("/status")
    except (OSError, ValueError) as exc:
        rec["problems"].append(f"/status: {exc}")
        return rec
    children = status.get("children", {})
    rec["restarts"] = {name: c.get("restarts", 0) for name, c in children.items()}
    rec["running"] = {name: bool(c.get("running")) for name, c in children.items()}
    now = {n: int(c["pid"]) for n, c in children.items() if c.get("pid") is not None}
    if pids is None or any(pids.get(n) != p for n, p in now.items()):
        pids = processes(status)
    rec["pids"] = pids
    memory = {name: memory_kb(pid) for name, pid in pids.items()}
    rec["rss_kb"] = {name: m.get("VmRSS") for name, m in memory.items()}
    rec["anon_kb"] = {name: m.get("RssAnon") for name, m in memory.items()}
    rec["service_status"] = {
        name: {k: v for k, v in s.items() if isinstance(v, int | float) and k != "started_us"}
        for name, s in status.get("services", {}).items()
    }
    state: dict[str, Any] = {}
    try:
        sessions = http.json("/api/v1/session/show")
        state["sessions"] = len(sessions)
        if len(sessions) < SESSION_SHOW_LIMIT:  # a cut list would undercount both
            state["sessions_persistent"] = sum(1 for s in sessions if s.get("persistent"))
            state["sessions_offline"] = sum(1 for s in sessions if not s.get("online"))
        else:
            rec["problems"].append(f"session show cut at {len(sessions)} rows")
    except (OSError, ValueError) as exc:
        rec["problems"].append(f"session show: {exc}")
    try:
        state["retained"] = len(http.json("/api/v1/retain/show"))
    except (OSError, ValueError) as exc:
        rec["problems"].append(f"retain show: {exc}")
    try:
        state.update(parse_metrics(http.get("/metrics").decode()))
    except (OSError, ValueError) as exc:
        rec["problems"].append(f"/metrics: {exc}")
    rec["state"] = state
    return rec
