"""``ternmq dev-cluster``: N local nodes on fixed ports, as VerneMQ's ``make dev1 dev2 dev3``.

DESIGN §3 fixes the layout, so scripts and tests can rely on it: node k (1-based) is
``devK@127.0.0.1``, listens for MQTT on ``10003 + 50·k`` and HTTP on ``10008 + 50·k``,
and keeps ``DIR/devK/ternmq.conf``, ``DIR/devK/node.pid`` (the supervisor's pid, which
leads the node's own process group), ``DIR/devK/data/`` and ``DIR/devK/log/``. The
inter-node port, which DESIGN leaves open, is ``10004 + 50·k``. Every node lists the
others as ``cluster.seeds``, so they join each other as they come up, and
``ternmq start --config DIR/devK/ternmq.conf`` brings a stopped node back with its data.

The command returns once every node answers ``/health`` and sees all N members up, so a
script can use the cluster at once; it exits 1 naming the node that is not ready.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.pids import alive

READY_TIMEOUT = 60.0  # s for every node to be healthy and joined
STOP_TIMEOUT = 15.0  # s after SIGTERM before a node's group is killed


@dataclass(frozen=True, slots=True)
class DevNode:
    k: int
    base: Path

    @property
    def name(self) -> str:
        return f"dev{self.k}@127.0.0.1"

    @property
    def dir(self) -> Path:
        return self.base / f"dev{self.k}"

    @property
    def mqtt_port(self) -> int:
        return 10003 + 50 * self.k

    @property
    def http_port(self) -> int:
        return 10008 + 50 * self.k

    @property
    def cluster_port(self) -> int:
        return 10004 + 50 * self.k

    @property
    def conf(self) -> Path:
        return self.dir / "ternmq.conf"

    @property
    def pid_file(self) -> Path:
        return self.dir / "node.pid"


def nodes(base: Path, count: int) -> list[DevNode]:
    return [DevNode(k, base) for k in range(1, count + 1)]


def conf_text(node: DevNode, peers: list[DevNode], sets: dict[str, str]) -> str:
    values = {
        "nodename": node.name,
        "listener.tcp.default": f"127.0.0.1:{node.mqtt_port}",
        "listener.http.default": f"127.0.0.1:{node.http_port}",
        "cluster.listen": f"127.0.0.1:{node.cluster_port}",
        "cluster.seeds": ",".join(f"127.0.0.1:{p.cluster_port}" for p in peers if p != node),
        "data_dir": str(node.dir / "data"),
        "log_dir": str(node.dir / "log"),
        "log.console": "off",
        **sets,
    }
    lines = [f"# ternmq dev-cluster node {node.k}"]
    lines += [f"{key} = {value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def running_pid(node: DevNode) -> int | None:
    try:
        pid = int(node.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def start_node(node: DevNode) -> int:
    """Start ``ternmq start`` for ``node`` in its own process group; return its pid."""
    node.dir.mkdir(parents=True, exist_ok=True)
    ternmq = Path(sys.executable).parent / "ternmq"
    command = [str(ternmq), "start", "--config", str(node.conf)]
    with open(node.dir / "console.log", "ab") as out:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: SIGKILL to it kills the node
        )
    node.pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def _get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return 0, None


def not_ready(node: DevNode, expected: int) -> str:
    """Why ``node`` is not ready yet ("" when it is healthy and sees ``expected`` up)."""
    status, _ = _get(node.http_port, "/health")
    if status != 200:
        return f"/health answers {status or 'nothing'}"
    status, members = _get(node.http_port, "/api/v1/cluster/show")
    if status != 200 or not isinstance(members, list):
        return "cluster show does not answer"
    up = [m for m in members if m.get("state") == "up"]
    if len(up) < expected:
        return f"sees {len(up)} of {expected} members up"
    return ""


def wait_ready(devs: list[DevNode], timeout: float) -> str:
    """Poll every node until all are ready; "" or the first node's reason at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        reasons = {d.name: not_ready(d, len(devs)) for d in devs}
        late = {n: r for n, r in reasons.items() if r}
        if not late:
            return ""
        for d in devs:
            if d.name in late and running_pid(d) is None:
                return f"{d.name} exited (see {d.dir / 'console.log'})"
        if time.monotonic() >= deadline:
            name, reason = next(iter(late.items()))
            return f"{name}: {reason} after {timeout:g}s"
        time.sleep(0.2)


def start(base: Path, count: int, sets: dict[str, str], timeout: float = READY_TIMEOUT) -> str:
    devs = nodes(base, count)
    for d in devs:
        if running_pid(d) is not None:
            return f"{d.name} is already running (pid {running_pid(d)}); stop it first"
    for d in devs:
        d.dir.mkdir(parents=True, exist_ok=True)
        d.conf.write_text(conf_text(d, devs, sets), encoding="utf-8")
    for d in devs:
        start_node(d)
    return wait_ready(devs, timeout)


def existing(base: Path) -> list[DevNode]:
    found = []
    for path in sorted(base.glob("dev*/node.pid")):
        suffix = path.parent.name[3:]
        if suffix.isdigit():
            found.append(DevNode(int(suffix), base))
    return sorted(found, key=lambda d: d.k)


def stop(base: Path, timeout: float = STOP_TIMEOUT) -> list[str]:
    """SIGTERM every node's supervisor (it stops its services in order), SIGKILL the
    group of any still running after ``timeout``; return the names of those that ran."""
    running = {d: pid for d in existing(base) if (pid := running_pid(d)) is not None}
    for pid in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in running.values()):
        time.sleep(0.1)
    for pid in running.values():
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    for d in existing(base):
        d.pid_file.unlink(missing_ok=True)
    return [d.name for d in running]
