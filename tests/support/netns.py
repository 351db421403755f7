"""A 3-node cluster in network namespaces, for real partitions (cluster-scenarios S9,
S12, S25).

Each node runs in its own namespace with two links to the root namespace, one per bridge:

- the **cluster** net, ``10.77.0.K``: gossip, forwarding and the registries' rounds,
  the traffic a partition cuts;
- the **client** net, ``10.78.0.K``: MQTT and HTTP, so the test (in the root namespace)
  still reaches every node while the nodes cannot reach each other.

Partitions are blackhole routes on the cluster net (this kernel has no ``tc`` queueing
disciplines): all of a node's traffic dropped both ways (symmetric), only what it sends
(one-way: what others send still arrives, their connections' answers do not), or only
between two nodes (asymmetric). Everything is made by the test and removed after it: the
namespaces, the bridges, the links, the processes (by pid).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.node import complete_lines

BIN = Path(sys.executable).parent
PREFIX = "tnq"  # every namespace, bridge and link this module makes starts with it
MQTT_PORT, HTTP_PORT, CLUSTER_PORT = 1883, 8888, 4369


@functools.cache
def available() -> str:
    """Why partitions cannot be made here ("" when they can)."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2"
    probe = f"{PREFIX}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, timeout=30)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.decode().strip()}"
    return ""


def _sh(*args: str, ns: str | None = None, check: bool = True) -> None:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")


@dataclass
class NsNode:
    k: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def ns(self) -> str:
        return f"{PREFIX}ns{self.k}"

    @property
    def name(self) -> str:
        return f"ns{self.k}@10.77.0.{self.k}"

    @property
    def cluster_ip(self) -> str:
        return f"10.77.0.{self.k}"

    @property
    def client_ip(self) -> str:
        return f"10.78.0.{self.k}"


@dataclass
class NsCluster:
    base: Path
    nodes: list[NsNode] = field(default_factory=list)

    # -- nodes ---------------------------------------------------------------------
    def conf(self, node: NsNode, sets: dict[str, str]) -> Path:
        seeds = ",".join(f"{n.cluster_ip}:{CLUSTER_PORT}" for n in self.nodes if n is not node)
        values = {
            "nodename": node.name,
            "listener.tcp.default": f"{node.client_ip}:{MQTT_PORT}",
            "listener.http.default": f"{node.client_ip}:{HTTP_PORT}",
            "cluster.listen": f"{node.cluster_ip}:{CLUSTER_PORT}",
            "cluster.seeds": seeds,
            "cluster.forward_listen": f"{node.cluster_ip}:0",
            "cluster.registry_listen": f"{node.cluster_ip}:0",
            # replication too: the default, 127.0.0.1, is the namespace's own loopback
            "cluster.msgstore_listen": f"{node.cluster_ip}:0",
            "data_dir": str(node.dir / "data"),
            "log_dir": str(node.dir / "log"),
            "log.console": "off",
            **sets,
        }
        path = node.dir / "ternmq.conf"
        path.write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
        return path

    def start(self, node: NsNode) -> None:
        conf = node.dir / "ternmq.conf"
        with open(node.dir / "console.log", "ab") as out:
            node.proc = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    node.ns,
                    str(BIN / "ternmq"),
                    "start",
                    "--config",
                    str(conf),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self, node: NsNode) -> None:
        proc = node.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def get(self, node: NsNode, path: str) -> tuple[int, Any]:
        url = f"http://{node.client_ip}:{HTTP_PORT}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")
        except OSError:
            return 0, None

    def health(self, node: NsNode) -> int:
        return self.get(node, "/health")[0]

    def states(self, node: NsNode) -> dict[str, str]:
        status, rows = self.get(node, "/api/v1/cluster/show")
        return {r["node"]: r["state"] for r in rows} if status == 200 else {}

    def events(self, node: NsNode, name: str) -> list[dict[str, Any]]:
        """``node``'s logged events called ``name`` (as far as the logs are written)."""
        out = []
        for path in sorted((node.dir / "log").glob("*.jsonl*")):
            for line in complete_lines(path):
                if f'"event":"{name}"' in line:
                    out.append(json.loads(line))
        return out

    # -- faults --------------------------------------------------------------------
    def isolate(self, node: NsNode, outgoing_only: bool = False) -> None:
        """Drop everything ``node`` sends on the cluster net, and (unless
        ``outgoing_only``) everything the others send to it."""
        for other in self.nodes:
            if other is not node:
                self._drop_to(node, other)
                if not outgoing_only:
                    self._drop_to(other, node)

    def cut(self, a: NsNode, b: NsNode) -> None:
        """Drop the traffic between ``a`` and ``b`` only (both ways)."""
        self._drop_to(a, b)
        self._drop_to(b, a)

    def _drop_to(self, src: NsNode, dst: NsNode) -> None:
        _sh("ip", "route", "add", "blackhole", f"{dst.cluster_ip}/32", ns=src.ns)

    def heal(self) -> None:
        for node in self.nodes:
            for other in self.nodes:
                if other is not node:
                    _sh("ip", "route", "del", "blackhole", f"{other.cluster_ip}/32",
                        ns=node.ns, check=False)  # fmt: skip


def _network(nodes: list[NsNode]) -> None:
    for net, bridge in (("77", f"{PREFIX}brc"), ("78", f"{PREFIX}brm")):
        _sh("ip", "link", "add", bridge, "type", "bridge")
        _sh("ip", "addr", "add", f"10.{net}.0.254/24", "dev", bridge)
        _sh("ip", "link", "set", bridge, "up")
    for node in nodes:
        _sh("ip", "netns", "add", node.ns)
        _sh("ip", "link", "set", "lo", "up", ns=node.ns)
        for net, bridge, inner in (("77", f"{PREFIX}brc", "c0"), ("78", f"{PREFIX}brm", "m0")):
            outer = f"{PREFIX}{inner}n{node.k}"
            _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", node.ns)
            _sh("ip", "link", "set", outer, "master", bridge)
            _sh("ip", "link", "set", outer, "up")
            _sh("ip", "addr", "add", f"10.{net}.0.{node.k}/24", "dev", inner, ns=node.ns)
            _sh("ip", "link", "set", inner, "up", ns=node.ns)


def _teardown(nodes: list[NsNode]) -> None:
    """Delete every link this module made, then the namespaces. The links go first and
    by name: a deleted namespace is dismantled later, by the kernel, and its veth pairs
    with it, so the next run could find their names still taken."""
    listed = subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=30, check=False
    )
    for line in listed.stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(PREFIX):
            _sh("ip", "link", "del", name, check=False)
    for node in nodes:
        _sh("ip", "netns", "del", node.ns, check=False)


@contextlib.contextmanager
def ns_cluster(
    base: Path, sets: dict[str, str] | None = None, count: int = 3
) -> Iterator[NsCluster]:
    """Start ``count`` nodes, each in its namespace; return once all are healthy and
    see each other up; stop and remove everything on exit."""
    cluster = NsCluster(base, [NsNode(k, base / f"ns{k}") for k in range(1, count + 1)])
    # The names are fixed: a second run on this machine waits rather than tearing ours down.
    lock = open(f"/tmp/ternmq-{PREFIX}-netns.lock", "w")  # noqa: SIM115 - held to the end
    fcntl.flock(lock, fcntl.LOCK_EX)
    _teardown(cluster.nodes)  # what a killed earlier run may have left
    try:
        _network(cluster.nodes)
        for node in cluster.nodes:
            node.dir.mkdir(parents=True, exist_ok=True)
            cluster.conf(node, sets or {})
        for node in cluster.nodes:
            cluster.start(node)
        deadline = time.monotonic() + 120
        names = {n.name for n in cluster.nodes}
        while time.monotonic() < deadline:
            if all(
                cluster.health(n) == 200
                and set(cluster.states(n)) == names
                and all(s == "up" for s in cluster.states(n).values())
                for n in cluster.nodes
            ):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("the namespace cluster did not come up in 120 s")
        yield cluster
    finally:
        for node in cluster.nodes:
            cluster.stop(node)
        _teardown(cluster.nodes)
        lock.close()
