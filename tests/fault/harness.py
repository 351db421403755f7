"""The randomized fault run over replicated queues: three real nodes (R = 3, W = 2),
publishers and persistent subscribers spread over them, and a nemesis that SIGKILLs,
SIGSTOPs or partitions one node at a time and brings it back. What the clients saw is
recorded as a :class:`~tests.fault.checker.History` for the checker.

Why it is built this way:

- **Processes are ours alone.** Each node runs ``ternmq start`` in its own process group
  (``start_new_session``), on ports chosen free at start, so that the nemesis can signal
  exactly the group it started (``os.killpg`` of the pid it holds) and other tests'
  clusters on the dev ports (10053+) are never touched. Everything started is stopped in
  ``finally``.
- **Partitions need network namespaces** (as ``tests/support/netns.py``): each node gets
  a cluster link and a client link; a partition blackholes a node's cluster routes while
  the clients still reach it. The namespaces, bridges and subnets carry a slot number
  held with a lock file (``tfqS…``, ``10.(180+2S)`` and ``10.(181+2S)``), so two runs
  (the CI test and a long run) do not collide, and nothing is named ``tnq…``, which
  ``netns.py`` deletes. Without root or iproute2 the run falls back to loopback with
  kills and stops only, and says so in its summary.
- **Clients are driven, not threaded by paho**: each client's thread calls
  ``paho.loop()`` itself, so a stalled node can only stall that thread until its
  timeouts, and a subscriber reuses one paho object across connections (paho keeps the
  QoS 2 packet ids it has PUBRECed, which a resumed session's PUBREL refers to).
- **A subscriber whose session was lost subscribes again** (the checker flags the loss
  as ``session_lost``), so that one loss does not hide what later faults do.
- **Publishers publish one message at a time** and wait for its outcome (the checker's
  ordering rule relies on it); a timeout or a lost connection abandons the client, and
  the publisher goes on with the next seq on another node.
- **The nemesis schedule is a pure function of the seed** (:func:`schedule`); client
  timings are not deterministic (they race with the nodes), their random choices are
  seeded too.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import grpc
import paho.mqtt.client as mqtt
from paho.mqtt import _packet
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from services.common.pids import group_alive
from services.pb import msgstore_pb2, msgstore_pb2_grpc
from tests.fault.checker import (
    PROBE_PREFIX,
    Connect,
    Delivery,
    History,
    Publish,
    Report,
    Subscriber,
    check,
)
from tests.support.node import free_port

BIN = Path(sys.executable).parent
# partition: node k cut off from both others; bridge: k cut off from the next node
# only, the third still sees both (asymmetric); oneway: k's packets to the others are
# dropped, theirs still reach it.
KINDS = ("kill", "pause", "partition", "bridge", "oneway")
NETWORK_KINDS = ("partition", "bridge", "oneway")
READY_TIMEOUT = 120.0  # s for the cluster to be whole again after a fault (generous: 2 cores)
START_TIMEOUT = 120.0
STOP_TIMEOUT = 20.0  # s after SIGTERM before a node's group is SIGKILLed
ACK_TIMEOUT = 15.0  # s a publisher waits for an outcome (> msgstore.failover_timeout, 10 s)
CONNECT_TIMEOUT = 8.0  # s for a CONNACK
KEEPALIVE = 10
REPLICA_SETTLE = 30.0  # s for the copies of every queue to agree once the run is quiet
EVIDENCE_EVENTS = ("queue.", "session.", "node.", "netsplit.")


def utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


# -- the schedule ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # kill | pause | partition
    node: int  # 1-based
    hold: float  # s the node stays dead, stopped or cut off
    gap: float  # s of calm after the cluster is whole again


def schedule(
    seed: int,
    events: int,
    kinds: tuple[str, ...] = KINDS,
    hold: tuple[float, float] = (1.0, 5.0),
    gap: tuple[float, float] = (0.5, 2.0),
    nodes: int = 3,
) -> list[Fault]:
    """``events`` faults drawn from ``random.Random(seed)``: the same seed, the same run
    of faults (what the nodes and clients do meanwhile is not deterministic)."""
    rng = random.Random(seed)
    return [
        Fault(
            rng.choice(kinds),
            rng.randint(1, nodes),
            round(rng.uniform(*hold), 2),
            round(rng.uniform(*gap), 2),
        )
        for _ in range(events)
    ]


# -- the network: loopback, or namespaces for partitions ---------------------------------


def _sh(*args: str, ns: str | None = None, check: bool = True) -> str:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def netns_unavailable() -> str:
    """Why partitions cannot be made here ("" when they can)."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if shutil.which("ip") is None:
        return "needs iproute2"
    return ""


class Netns:
    """Namespaces ``tfqS n1..n3`` with a cluster bridge and a client bridge, slot S held
    by an exclusive lock on ``/tmp/ternmq-fault-netns-S.lock`` while the run lasts."""

    SLOTS = 10

    def __init__(self, count: int) -> None:
        self.count = count
        self.slot = -1
        self._lock: TextIO | None = None

    def acquire(self) -> None:
        for slot in range(self.SLOTS):
            f = open(f"/tmp/ternmq-fault-netns-{slot}.lock", "w")  # noqa: SIM115 - held
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            self.slot, self._lock = slot, f
            return
        raise RuntimeError("every netns slot is taken")

    @property
    def prefix(self) -> str:
        return f"tfq{self.slot}"

    def ns(self, k: int) -> str:
        return f"{self.prefix}n{k}"

    def cluster_ip(self, k: int) -> str:
        return f"10.{180 + 2 * self.slot}.0.{k}"

    def client_ip(self, k: int) -> str:
        return f"10.{181 + 2 * self.slot}.0.{k}"

    def build(self) -> None:
        self.teardown()  # what a killed earlier run with this slot left
        p = self.prefix
        for net, bridge in ((180, f"{p}bc"), (181, f"{p}bm")):
            _sh("ip", "link", "add", bridge, "type", "bridge")
            _sh("ip", "addr", "add", f"10.{net + 2 * self.slot}.0.254/24", "dev", bridge)
            _sh("ip", "link", "set", bridge, "up")
        for k in range(1, self.count + 1):
            ns = self.ns(k)
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "set", "lo", "up", ns=ns)
            for bridge, inner, ip in (
                (f"{p}bc", "c0", self.cluster_ip(k)),
                (f"{p}bm", "m0", self.client_ip(k)),
            ):
                outer = f"{p}{inner[0]}{k}"
                _sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
                _sh("ip", "link", "set", outer, "master", bridge)
                _sh("ip", "link", "set", outer, "up")
                _sh("ip", "addr", "add", f"{ip}/24", "dev", inner, ns=ns)
                _sh("ip", "link", "set", inner, "up", ns=ns)

    def isolate(self, k: int) -> None:
        """Blackhole everything between node k and the others on the cluster net."""
        for j in range(1, self.count + 1):
            if j != k:
                self.cut(k, j)
                self.cut(j, k)

    def cut(self, frm: int, to: int) -> None:
        """Drop what node ``frm`` sends to node ``to`` on the cluster net (one way)."""
        _sh("ip", "route", "add", "blackhole", f"{self.cluster_ip(to)}/32", ns=self.ns(frm))

    def inject(self, kind: str, k: int) -> None:
        """One of :data:`NETWORK_KINDS` around node ``k``."""
        other = k % self.count + 1
        if kind == "partition":
            self.isolate(k)
        elif kind == "bridge":
            self.cut(k, other)
            self.cut(other, k)
        elif kind == "oneway":
            for j in range(1, self.count + 1):
                if j != k:
                    self.cut(k, j)
        else:
            raise ValueError(kind)

    def heal(self) -> None:
        for k in range(1, self.count + 1):
            for j in range(1, self.count + 1):
                if j != k:
                    _sh(
                        "ip",
                        "route",
                        "del",
                        "blackhole",
                        f"{self.cluster_ip(j)}/32",
                        ns=self.ns(k),
                        check=False,
                    )

    def teardown(self) -> None:
        listed = _sh("ip", "-o", "link", "show", check=False)
        for line in listed.splitlines():
            name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
            if name.startswith(self.prefix):
                _sh("ip", "link", "del", name, check=False)
        for k in range(1, self.count + 1):
            _sh("ip", "netns", "del", self.ns(k), check=False)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


# -- the nodes ---------------------------------------------------------------------------


@dataclass
class NodeProc:
    k: int
    dir: Path
    name: str
    host: str  # where clients and the test reach it (MQTT, HTTP)
    mqtt_port: int
    http_port: int
    cluster: str  # host:port of cluster.listen
    bind: str  # host for the other inter-node listeners
    ns: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def conf(self) -> Path:
        return self.dir / "ternmq.conf"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def get(node: NodeProc, path: str, timeout: float = 3.0) -> tuple[int, Any]:
    url = f"http://{node.host}:{node.http_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return 0, None


class Cluster:
    """Three nodes, R = 3, W = 2, each in its own process group; faults one at a time."""

    def __init__(
        self, base: Path, count: int = 3, netns: bool = True, sets: dict[str, str] | None = None
    ) -> None:
        self.base = base
        self.count = count
        self.sets = sets or {}
        why = netns_unavailable() if netns else "not asked for"
        self.net: Netns | None = Netns(count) if not why else None
        self.netns_note = why
        self.nodes: list[NodeProc] = []
        self.faulted: int | None = None  # the node under a fault now (clients avoid it)
        self._lock = threading.Lock()

    # -- set-up and teardown ---------------------------------------------------------
    def setup(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        if self.net is not None:
            self.net.acquire()
            self.net.build()
        for k in range(1, self.count + 1):
            d = self.base / f"n{k}"
            d.mkdir(parents=True, exist_ok=True)
            if self.net is not None:
                cip, mip = self.net.cluster_ip(k), self.net.client_ip(k)
                node = NodeProc(
                    k, d, f"f{k}@{cip}", mip, 1883, 8888, f"{cip}:4369", cip, ns=self.net.ns(k)
                )
            else:
                node = NodeProc(
                    k,
                    d,
                    f"f{k}@127.0.0.1",
                    "127.0.0.1",
                    free_port(),
                    free_port(),
                    f"127.0.0.1:{free_port()}",
                    "127.0.0.1",
                )
            self.nodes.append(node)
        cookie = f"fault-{os.getpid()}-{random.getrandbits(32):08x}"
        for node in self.nodes:
            values = {
                "nodename": node.name,
                "listener.tcp.default": f"{node.host}:{node.mqtt_port}",
                "listener.http.default": f"{node.host}:{node.http_port}",
                "cluster.listen": node.cluster,
                "cluster.seeds": ",".join(n.cluster for n in self.nodes if n is not node),
                "cluster.forward_listen": f"{node.bind}:0",
                "cluster.registry_listen": f"{node.bind}:0",
                "cluster.msgstore_listen": f"{node.bind}:0",
                "distributed_cookie": cookie,
                "data_dir": str(node.dir / "data"),
                "log_dir": str(node.dir / "log"),
                "log.console": "off",
                "log.level": "debug",  # session.claimed and friends: the evidence
                "msgstore.replication_factor": "3",
                "max_offline_messages": "1000000",
                "max_online_messages": "1000000",
                **self.sets,
            }
            node.conf.write_text(
                "# ternmq fault run\n" + "".join(f"{k} = {v}\n" for k, v in values.items())
            )

    def start(self, node: NodeProc) -> None:
        cmd = [str(BIN / "ternmq"), "start", "--config", str(node.conf)]
        if node.ns is not None:
            cmd = ["ip", "netns", "exec", node.ns, *cmd]  # execs: the pid is ternmq's
        with open(node.dir / "console.log", "ab") as out:
            node.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: the nemesis signals only it
            )
        node.paused = False

    def start_all(self) -> None:
        for node in self.nodes:
            self.start(node)
        why = self.wait_ready(START_TIMEOUT)
        if why:
            raise RuntimeError(f"the cluster did not come up: {why}")

    def shutdown(self) -> None:
        """Stop every node this run started (by the pid it holds), then the network."""
        for node in self.nodes:
            proc = node.proc
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for node in self.nodes:
            if node.proc is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.proc.pid, signal.SIGKILL)  # whatever of the group is left
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.proc.wait(10)
        if self.net is not None:
            with contextlib.suppress(Exception):
                self.net.heal()
            self.net.teardown()
            self.net.release()

    # -- watching --------------------------------------------------------------------
    def not_ready(self, node: NodeProc) -> str:
        if not node.running():
            return "not running"
        status, _ = get(node, "/health")
        if status != 200:
            return f"/health {status or 'no answer'}"
        status, rows = get(node, "/api/v1/cluster/show")
        if status != 200 or not isinstance(rows, list):
            return "cluster show does not answer"
        states = {r.get("node"): r.get("state") for r in rows}
        want = {n.name for n in self.nodes}
        if set(states) != want or any(states[n] != "up" for n in want):
            return f"sees {states}"
        return ""

    def wait_ready(self, timeout: float) -> str:
        """Until every node is healthy and sees every member up; "" or why not."""
        deadline = time.monotonic() + timeout
        while True:
            late = {n.name: why for n in self.nodes if (why := self.not_ready(n))}
            if not late:
                return ""
            for n in self.nodes:
                if n.proc is not None and n.proc.poll() is not None:
                    return f"{n.name} exited with {n.proc.returncode} (see {n.dir}/console.log)"
            if time.monotonic() >= deadline:
                return f"after {timeout:g}s: {late}"
            time.sleep(0.3)

    def live(self) -> list[NodeProc]:
        """The nodes not under a fault now (clients pick among them)."""
        with self._lock:
            faulted = self.faulted
        return [n for n in self.nodes if n.k != faulted] or list(self.nodes)

    # -- faults ------------------------------------------------------------------------
    def kill(self, node: NodeProc) -> None:
        assert node.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, signal.SIGKILL)
        node.proc.wait(30)
        deadline = time.monotonic() + 30
        while group_alive(node.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def pause(self, node: NodeProc) -> None:
        assert node.proc is not None
        os.killpg(node.proc.pid, signal.SIGSTOP)
        node.paused = True

    def resume(self, node: NodeProc) -> None:
        assert node.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, signal.SIGCONT)
        node.paused = False

    def inject(self, fault: Fault, log: Callable[[str], None]) -> dict[str, Any]:
        """Carry out one fault: break, hold, repair, wait until whole. The record of it."""
        node = self.nodes[fault.node - 1]
        rec: dict[str, Any] = {**asdict(fault), "name": node.name, "start": utc(time.time())}
        with self._lock:
            self.faulted = node.k
        t0 = time.monotonic()
        if fault.kind == "kill":
            self.kill(node)
            time.sleep(fault.hold)
            self.start(node)
        elif fault.kind == "pause":
            self.pause(node)
            time.sleep(fault.hold)
            self.resume(node)
        elif fault.kind in NETWORK_KINDS:
            assert self.net is not None, "partitions need network namespaces"
            self.net.inject(fault.kind, node.k)
            time.sleep(fault.hold)
            self.net.heal()
        else:
            raise ValueError(fault.kind)
        rec["repaired"] = utc(time.time())
        why = self.wait_ready(READY_TIMEOUT)
        rec["recovery_s"] = round(time.monotonic() - t0 - fault.hold, 2)
        rec["ready"] = utc(time.time()) if not why else None
        with self._lock:
            self.faulted = None
        if why:
            rec["not_ready"] = why
        log(json.dumps(rec))
        return rec

    # -- the nodes' event logs -------------------------------------------------------
    def events(self, keep: Callable[[dict[str, Any]], bool]) -> Iterator[dict[str, Any]]:
        for node in self.nodes:
            for path in sorted((node.dir / "log").glob("*.jsonl*")):
                opener = gzip.open if path.suffix == ".gz" else open
                with opener(path, "rt", errors="replace") as f:  # type: ignore[operator]
                    for line in f:
                        if '"event":"message.' in line:
                            continue  # the per-message events: far too many to scan
                        try:
                            rec = json.loads(line)
                        except ValueError:
                            continue
                        if keep(rec):
                            yield rec

    def queues(self, node: NodeProc) -> dict[tuple[str, str], msgstore_pb2.QueueState]:
        """Every queue ``node``'s msgstore holds (its own socket, so no cluster route is
        needed), by session key."""
        out: dict[tuple[str, str], msgstore_pb2.QueueState] = {}
        with grpc.insecure_channel(f"unix:{node.dir / 'data' / 'run' / 'msgstore.sock'}") as ch:
            stub = msgstore_pb2_grpc.MsgStoreStub(ch)
            after = b""
            while True:
                reply = stub.Queues(msgstore_pb2.QueuesRequest(after=after), timeout=10)
                for q in reply.queues:
                    out[(q.key.mountpoint, q.key.client_id)] = q
                if not reply.next:
                    return out
                after = reply.next

    def divergent(self, client_ids: set[str]) -> list[str]:
        """The replicated queues of ``client_ids`` whose copies differ: a primary (first
        of its replica set) and each replica it names must hold the same log, that is
        the same highest seq, and (once the acks have travelled) the same acked index."""
        held = {n.name: self.queues(n) for n in self.nodes}
        found: list[str] = []
        for name, queues in held.items():
            for key, q in queues.items():
                if key[1] not in client_ids or not q.replicas or q.replicas[0] != name:
                    continue
                for replica in q.replicas[1:]:
                    copy = held.get(replica, {}).get(key)
                    if copy is None:
                        found.append(f"{key[1]}: {replica} holds no copy of {name}'s queue")
                    elif (copy.last_seq, copy.acked) != (q.last_seq, q.acked):
                        found.append(
                            f"{key[1]}: {name} has seq {q.last_seq} acked {q.acked}, "
                            f"{replica} has seq {copy.last_seq} acked {copy.acked}"
                        )
        return found


# -- clients -----------------------------------------------------------------------------


class _Paho(mqtt.Client):
    """paho, remembering PUBRECs that refused a QoS 2 publish (paho itself ignores their
    reason code and completes the exchange), and when each PUBLISH arrived.

    paho hands a QoS 2 message to the application at its PUBREL, so a QoS 1 message sent
    after it may be handed over first: the order the broker sent them in is the order of
    the PUBLISH packets (``arrival``), which is what the checker must judge.

    A QoS 2 PUBLISH whose PUBREL never came (its node died between the two) is sent
    again on the next connection, with DUP and often another packet id, and handed over
    only then, after the QoS 1 messages that followed it on the first connection. Its
    first arrival, kept by payload across connections (one paho object serves them
    all), is the broker's order; the resend's made the checker report a reorder the
    broker never made (the 1,000-fault run's 6 unexplained ones, QoS 2 at takeovers)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pubrec_failed: set[int] = set()
        self.arrival = 0  # of the PUBLISH being handled
        self.qos2_arrival: dict[int, int] = {}  # packet id -> its last PUBLISH's arrival
        self.qos2_first: dict[bytes, int] = {}  # payload -> its first PUBLISH's arrival

    def _handle_publish(self) -> MQTTErrorCode:
        self.arrival += 1
        header = self._in_packet["command"]
        if (header & 0x06) >> 1 == 2:
            result = _packet.decode_publish(header, self._in_packet["packet"], self._protocol)
            self.qos2_arrival[result.mid] = self.arrival
            self.qos2_first.setdefault(bytes(result.payload), self.arrival)
        return super()._handle_publish()

    def arrival_of(self, msg: mqtt.MQTTMessage) -> int:
        """When ``msg``'s PUBLISH first arrived (called from on_message)."""
        if msg.qos == 2:
            last = self.qos2_arrival.pop(msg.mid, self.arrival)
            return min(last, self.qos2_first.pop(bytes(msg.payload), last))
        return self.arrival

    def _handle_pubrec(self) -> MQTTErrorCode:
        result = _packet.decode_pubrec(
            self._in_packet["command"], self._in_packet["packet"], self._protocol
        )
        if result.reason is not None and result.reason.is_failure:
            self.pubrec_failed.add(result.mid)
        return super()._handle_pubrec()


def _paho(client_id: str, version: int, clean: bool) -> _Paho:
    protocol = mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311
    kwargs: dict[str, Any] = {} if version == 5 else {"clean_session": clean}
    c = _Paho(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=protocol,
        reconnect_on_failure=False,
        **kwargs,
    )
    c.max_inflight_messages_set(100)
    c.suppress_exceptions = True
    return c


class _Conn:
    """One paho object's connection state, driven by whoever calls :meth:`pump`."""

    def __init__(self, paho: _Paho, version: int, clean: bool) -> None:
        self.paho = paho
        self.version = version
        self.clean = clean
        self.connack: Any = None
        self.session_present = False
        self.connected = False
        self.node: NodeProc | None = None
        paho.on_connect = self._on_connect
        paho.on_disconnect = self._on_disconnect

    def _on_connect(self, c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
        self.connack = rc
        self.session_present = bool(flags.session_present)
        self.connected = not rc.is_failure

    def _on_disconnect(self, c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
        self.connected = False

    def pump(self, seconds: float) -> None:
        """Run paho's network loop for about ``seconds``."""
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return
            if self.paho.socket() is None:
                time.sleep(min(left, 0.05))
                continue
            rc = self.paho.loop(min(left, 0.05))
            if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                self.connected = False
                time.sleep(min(max(end - time.monotonic(), 0), 0.05))

    def connect(self, node: NodeProc) -> bool:
        """CONNECT to ``node`` and wait for a successful CONNACK."""
        self.abandon()
        self.connack, self.connected, self.node = None, False, node
        try:
            if self.version == 5:
                props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
                if not self.clean:
                    props.SessionExpiryInterval = 0xFFFFFFFF
                self.paho.connect(
                    node.host, node.mqtt_port, KEEPALIVE, clean_start=self.clean, properties=props
                )
            else:
                self.paho.connect(node.host, node.mqtt_port, KEEPALIVE)
        except (OSError, ValueError):
            self.abandon()
            return False
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while self.connack is None and time.monotonic() < deadline:
            if self.paho.loop(0.05) != MQTTErrorCode.MQTT_ERR_SUCCESS:
                break
        if not self.connected:
            self.abandon()
            return False
        return True

    def disconnect(self) -> None:
        """A clean DISCONNECT (the session stays, as it is persistent)."""
        if self.connected:
            self.paho.disconnect()
            with contextlib.suppress(Exception):
                for _ in range(10):
                    if self.paho.loop(0.02) != MQTTErrorCode.MQTT_ERR_SUCCESS:
                        break
        self.abandon()

    def abandon(self) -> None:
        """Close the socket without a DISCONNECT (an abnormal end, to the broker)."""
        sock = self.paho.socket()
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):
                sock.shutdown(socket.SHUT_RDWR)  # type: ignore[attr-defined]
            with contextlib.suppress(OSError):
                sock.close()
            with contextlib.suppress(Exception):
                self.paho._sock_close()
        self.connected = False


class Publisher(threading.Thread):
    """Publishes ``"<name>:<seq>"`` on its own topic, one at a time, ``rate`` a second."""

    def __init__(
        self,
        name: str,
        topic: str,
        version: int,
        qos: tuple[int, ...],
        rate: float,
        cluster: Cluster,
        rng: random.Random,
        stop: threading.Event,
    ) -> None:
        super().__init__(name=f"pub-{name}", daemon=True)
        self.client_name, self.topic, self.version, self.qos = name, topic, version, qos
        self.rate, self.cluster, self.rng, self.stop_event = rate, cluster, rng, stop
        self.publishes: list[Publish] = []
        self.error: BaseException | None = None
        self._outcome: tuple[int, Any] | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the harness, never raised in a thread
            self.error = exc

    def _new(self) -> _Conn:
        paho = _paho(self.client_name, self.version, clean=True)
        paho.on_publish = self._on_publish
        return _Conn(paho, self.version, clean=True)

    def _on_publish(self, c: Any, u: Any, mid: int, rc: Any, props: Any) -> None:
        self._outcome = (mid, rc)

    def _run(self) -> None:
        conn: _Conn | None = None
        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            if conn is None or not conn.connected:
                if conn is not None:
                    conn.abandon()
                conn = self._new()
                if not conn.connect(self.rng.choice(self.cluster.live())):
                    conn = None
                    self.stop_event.wait(0.3)
                    continue
            assert conn.node is not None
            seq += 1
            qos = self.rng.choice(self.qos)
            payload = f"{self.client_name}:{seq}"
            self._outcome = None
            sent = time.time()
            try:
                info = conn.paho.publish(self.topic, payload, qos)
            except (OSError, ValueError, RuntimeError):
                info = None
            outcome = "disconnected"
            acked = False
            deadline = time.monotonic() + ACK_TIMEOUT
            while info is not None:
                if self._outcome is not None and self._outcome[0] == info.mid:
                    rc = self._outcome[1]
                    failed = bool(getattr(rc, "is_failure", False))
                    if qos == 2 and info.mid in conn.paho.pubrec_failed:
                        failed, rc = True, f"PUBREC {rc}"
                    acked = not failed
                    outcome = "ok" if acked else f"refused {rc}"
                    break
                if not conn.connected:
                    break
                if time.monotonic() >= deadline:
                    outcome = "timeout"
                    break
                conn.pump(0.05)
            conn.paho.pubrec_failed.discard(info.mid if info is not None else -1)
            self.publishes.append(
                Publish(
                    self.client_name,
                    seq,
                    self.topic,
                    qos,
                    acked,
                    conn.node.name,
                    outcome,
                    sent,
                    time.time(),
                )
            )
            if outcome in ("timeout", "disconnected"):
                conn.abandon()  # what it had in flight is indeterminate; go elsewhere
                conn = None
            next_at = max(next_at + interval, time.monotonic())
            while not self.stop_event.is_set() and time.monotonic() < next_at:
                if conn is not None:
                    conn.pump(min(0.05, next_at - time.monotonic()))
                else:
                    time.sleep(min(0.05, max(0.0, next_at - time.monotonic())))
        if conn is not None:
            conn.disconnect()


class Sub(threading.Thread):
    """A persistent subscriber that goes offline and comes back on any live node."""

    def __init__(
        self,
        name: str,
        topics: frozenset[str],
        version: int,
        qos: int,
        cluster: Cluster,
        rng: random.Random,
        stop: threading.Event,
        online: tuple[float, float],
        offline: tuple[float, float],
    ) -> None:
        super().__init__(name=f"sub-{name}", daemon=True)
        self.client_name, self.topics, self.version, self.qos = name, topics, version, qos
        self.cluster, self.rng, self.stop_event = cluster, rng, stop
        self.online, self.offline = online, offline
        self.deliveries: list[Delivery] = []
        self.connects: list[Connect] = []
        self.error: BaseException | None = None
        self.last_message = 0.0
        self.resubscribe = False
        paho = _paho(name, version, clean=False)
        paho.on_message = self._on_message
        self.conn = _Conn(paho, version, clean=False)

    @property
    def spec(self) -> Subscriber:
        return Subscriber(self.client_name, self.topics, self.qos)

    def _on_message(self, c: Any, u: Any, msg: mqtt.MQTTMessage) -> None:
        node = self.conn.node.name if self.conn.node is not None else ""
        self.deliveries.append(
            Delivery(
                self.client_name,
                msg.topic,
                msg.payload.decode(errors="replace"),
                msg.qos,
                bool(msg.dup),
                node,
                time.time(),
                self.conn.paho.arrival_of(msg),
            )
        )
        self.last_message = time.monotonic()

    def connect(self, node: NodeProc) -> bool:
        ok = self.conn.connect(node)
        if not ok:
            return False
        first = not self.connects
        self.connects.append(
            Connect(self.client_name, node.name, self.conn.session_present, first, time.time())
        )
        if not first and not self.conn.session_present:
            self.resubscribe = True  # the broker lost the session (a violation)
        if self.resubscribe:
            # Subscribe again, so that what is lost stays bounded to the gap and later
            # faults are still checked for this subscriber.
            with contextlib.suppress(RuntimeError):
                self.subscribe()
                self.resubscribe = False
        return self.conn.connected

    def subscribe(self) -> None:
        """Subscribe to every topic at once (before the first publish)."""
        done: list[int] = []
        self.conn.paho.on_subscribe = lambda *a: done.append(1)
        self.conn.paho.subscribe([(t, self.qos) for t in sorted(self.topics)])
        deadline = time.monotonic() + 15
        while not done and time.monotonic() < deadline:
            self.conn.pump(0.05)
        if not done:
            raise RuntimeError(f"{self.client_name}: no SUBACK")

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the harness, never raised in a thread
            self.error = exc

    def _run(self) -> None:
        while not self.stop_event.is_set():
            if not self.conn.connected and not self.connect(self.rng.choice(self.cluster.live())):
                self.stop_event.wait(self.rng.uniform(0.2, 1.0))
                continue
            until = time.monotonic() + self.rng.uniform(*self.online)
            while not self.stop_event.is_set() and self.conn.connected:
                left = until - time.monotonic()
                if left <= 0:
                    break
                self.conn.pump(min(left, 0.1))
            if self.stop_event.is_set():
                break
            if self.conn.connected:  # away for a while: politely or not
                if self.rng.random() < 0.5:
                    self.conn.disconnect()
                else:
                    self.conn.abandon()
            self.stop_event.wait(self.rng.uniform(*self.offline))
        self.conn.disconnect()

    def drain(self, nodes: list[NodeProc], quiet: float, bound: float) -> bool:
        """Reconnect (on one of ``nodes``) and take everything until ``quiet`` seconds pass
        without a message; False if it could not connect within ``bound``."""
        deadline = time.monotonic() + bound
        while not self.connect(self.rng.choice(nodes)):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
        self.last_message = time.monotonic()
        while time.monotonic() < deadline and self.conn.connected:
            self.conn.pump(0.1)
            if time.monotonic() - self.last_message >= quiet:
                break
        self.conn.disconnect()
        return True


# -- the run -----------------------------------------------------------------------------


@dataclass
class Options:
    base_dir: Path
    seed: int = 1
    events: int = 30
    kinds: tuple[str, ...] = KINDS
    hold: tuple[float, float] = (1.0, 5.0)
    gap: tuple[float, float] = (0.5, 2.0)
    publishers: int = 3
    subscribers: int = 4
    rate: float = 20.0  # messages a second per publisher
    online: tuple[float, float] = (1.0, 6.0)  # s a subscriber stays connected
    offline: tuple[float, float] = (0.5, 4.0)  # s it stays away
    netns: bool = True
    drain_quiet: float = 3.0
    drain_bound: float = 180.0
    max_seconds: float = 0.0  # stop injecting faults after this long (0: no bound)
    sets: dict[str, str] = field(default_factory=dict)
    verbose: bool = False


@dataclass
class Result:
    options: Options
    history: History
    report: Report
    faults: list[dict[str, Any]]
    notes: list[str]
    netns: str  # "" when partitions ran, else why not
    started: float
    seconds: float
    setup_seconds: float
    errors: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)  # copies that differ at the end

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.errors and not self.diverged

    def summary(self, limit: int = 20) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for f in self.faults:
            kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
        recovery = sorted(f["recovery_s"] for f in self.faults)
        return {
            "ok": self.ok,
            "seed": self.options.seed,
            "events": len(self.faults),
            "events_asked": self.options.events,
            "faults": kinds,
            "partitions": "on" if not self.netns else f"off ({self.netns})",
            "started": utc(self.started),
            "seconds": round(self.seconds, 1),
            "setup_seconds": round(self.setup_seconds, 1),
            "recovery_s": {
                "median": recovery[len(recovery) // 2] if recovery else None,
                "max": recovery[-1] if recovery else None,
            },
            "errors": self.errors,
            "diverged": self.diverged[:limit],
            "notes": self.notes,
            "base_dir": str(self.options.base_dir),
            **self.report.summary(limit),
        }


def topic_of(run_id: str, publisher: str) -> str:
    return f"ft/{run_id}/{publisher}"


def _route_probes(cluster: Cluster, subs: list[Sub], bound: float = 60.0) -> None:
    """Subscriptions reach other nodes through gossip: from each node, publish QoS 0
    probes on each topic until every subscriber of it got one."""
    for node in cluster.nodes:
        prober = _Conn(_paho(f"prober-{node.k}", 4, clean=True), 4, clean=True)
        if not prober.connect(node):
            raise RuntimeError(f"the prober cannot connect to {node.name}")
        try:
            topics = sorted(set().union(*(s.topics for s in subs)))
            for topic in topics:
                payload = f"{PROBE_PREFIX}{node.name}:{topic}"
                waiting = [s for s in subs if topic in s.topics]
                deadline = time.monotonic() + bound
                while waiting:
                    if time.monotonic() >= deadline:
                        raise RuntimeError(f"probes on {topic} from {node.name} do not arrive")
                    prober.paho.publish(topic, payload, 0)
                    prober.pump(0.05)
                    for s in waiting:
                        s.conn.pump(0.05)
                    waiting = [
                        s for s in waiting if not any(d.payload == payload for d in s.deliveries)
                    ]
        finally:
            prober.disconnect()


def run(opts: Options, log: Callable[[str], None] = lambda line: None) -> Result:
    """One fault run: set up, load and faults, quiesce, drain, check. Every process it
    started is stopped before it returns, whatever happens."""
    started, t0 = time.time(), time.monotonic()
    run_id = f"{opts.seed}x{random.getrandbits(24):06x}"
    network = set(NETWORK_KINDS) & set(opts.kinds)
    if network and (not opts.netns or netns_unavailable()):
        kinds = tuple(k for k in opts.kinds if k not in network) or ("kill", "pause")
    else:
        kinds = opts.kinds
    faults_planned = schedule(opts.seed, opts.events, kinds, opts.hold, opts.gap)
    cluster = Cluster(
        opts.base_dir, netns=opts.netns and bool(network & set(kinds)), sets=opts.sets
    )
    rng = random.Random(opts.seed)
    stop_pubs, stop_subs = threading.Event(), threading.Event()
    pubs: list[Publisher] = []
    subs: list[Sub] = []
    faults: list[dict[str, Any]] = []
    errors: list[str] = []
    notes: list[str] = []
    setup_seconds = 0.0
    diverged: list[str] = []
    try:
        cluster.setup()
        cluster.start_all()
        log(
            f"cluster up in {time.monotonic() - t0:.1f}s at {opts.base_dir}"
            f" (partitions {'on' if cluster.net else 'off: ' + cluster.netns_note})"
        )
        names = [f"p{i + 1}" for i in range(opts.publishers)]
        topics = {p: topic_of(run_id, p) for p in names}
        for i in range(opts.subscribers):
            chosen = frozenset(topics[p] for p in names if rng.random() < 0.7) or frozenset(
                {topics[names[i % len(names)]]}
            )
            sub = Sub(
                f"s{i + 1}-{run_id}",
                chosen,
                5 if i % 2 else 4,
                2 if i % 4 >= 2 else 1,
                cluster,
                random.Random(f"{opts.seed}-s{i}"),
                stop_subs,
                opts.online,
                opts.offline,
            )
            node = cluster.nodes[i % len(cluster.nodes)]
            if not sub.connect(node):
                raise RuntimeError(f"{sub.client_name} cannot connect to {node.name}")
            sub.subscribe()
            subs.append(sub)
        _route_probes(cluster, subs)
        for i, p in enumerate(names):
            pubs.append(
                Publisher(
                    f"{p}-{run_id}",
                    topics[p],
                    4 if i % 2 else 5,
                    (1, 2) if i % 3 == 2 else ((1,) if i % 3 == 0 else (2,)),
                    opts.rate,
                    cluster,
                    random.Random(f"{opts.seed}-p{i}"),
                    stop_pubs,
                )
            )
        # the checker knows publishers by their payload prefix: "<name>:<seq>"
        setup_seconds = time.monotonic() - t0
        for t in [*subs, *pubs]:
            t.start()
        time.sleep(2.0)  # some load before the first fault
        for i, fault in enumerate(faults_planned):
            if opts.max_seconds and time.monotonic() - t0 > opts.max_seconds:
                notes.append(f"stopped after {i} faults: max_seconds {opts.max_seconds:g}")
                break
            rec = cluster.inject(fault, log if opts.verbose else lambda line: None)
            rec["i"] = i
            faults.append(rec)
            if "not_ready" in rec:
                errors.append(
                    f"fault {i} ({fault.kind} {rec['name']}): not whole again {rec['not_ready']}"
                )
                break
            if (i + 1) % 10 == 0:
                log(
                    f"{i + 1} faults, {sum(len(p.publishes) for p in pubs)} publishes, "
                    f"{time.monotonic() - t0:.0f}s"
                )
            time.sleep(fault.gap)
        # quiesce: no more faults, everything up, load stops, subscribers drain
        stop_pubs.set()
        for publisher in pubs:
            publisher.join(ACK_TIMEOUT + 10)
        stop_subs.set()
        for s in subs:
            s.join(CONNECT_TIMEOUT + 10)
        for node in cluster.nodes:
            if not node.running():
                cluster.start(node)
            elif node.paused:
                cluster.resume(node)
        if cluster.net is not None:
            cluster.net.heal()
        why = cluster.wait_ready(READY_TIMEOUT)
        if why:
            errors.append(f"not whole for the final drain: {why}")
        for t in [*pubs, *subs]:
            if t.is_alive():
                errors.append(f"{t.name} did not stop")
            if getattr(t, "error", None) is not None:
                errors.append(f"{t.name} failed: {t.error!r}")  # type: ignore[attr-defined]
        for rnd in range(2):  # twice, on (likely) different nodes
            for s in subs:
                if not s.is_alive() and not s.drain(
                    cluster.nodes, opts.drain_quiet, opts.drain_bound
                ):
                    errors.append(f"{s.client_name} could not reconnect for the drain ({rnd})")
        log(f"drained after {time.monotonic() - t0:.0f}s")
        # Quiescent: the copies of every subscriber's queue converge (acks reach the
        # replicas with the primary's next probe, within a second or so).
        ids = {s.client_name for s in subs}
        deadline = time.monotonic() + REPLICA_SETTLE
        while (diverged := cluster.divergent(ids)) and time.monotonic() < deadline:
            time.sleep(0.5)
    except (Exception, KeyboardInterrupt) as exc:  # still stop everything, and report
        errors.append(f"harness: {exc!r}")
    finally:
        stop_pubs.set()
        stop_subs.set()
        for t in [*pubs, *subs]:
            if t.is_alive():
                t.join(ACK_TIMEOUT + 10)
        cluster.shutdown()
    history = History(
        subscribers=[s.spec for s in subs],
        publishes=sorted((p for pub in pubs for p in pub.publishes), key=lambda p: p.sent_at),
        deliveries=[d for s in subs for d in sorted(s.deliveries, key=lambda d: d.order)],
        connects=[c for s in subs for c in s.connects],
    )
    report = check(history)
    result = Result(
        opts,
        history,
        report,
        faults,
        notes,
        cluster.netns_note if cluster.net is None else "",
        started,
        time.monotonic() - t0,
        setup_seconds,
        errors,
        diverged,
    )
    _write(result, cluster)
    return result


def _write(result: Result, cluster: Cluster) -> None:
    """The history, the faults and, when something broke, the nodes' events about the
    clients involved, next to the nodes' own files."""
    base = result.options.base_dir
    with contextlib.suppress(OSError):
        base.mkdir(parents=True, exist_ok=True)
        with gzip.open(base / "history.jsonl.gz", "wt") as f:
            for s in result.history.subscribers:
                f.write(
                    json.dumps({"subscriber": s.name, "topics": sorted(s.topics), "qos": s.qos})
                    + "\n"
                )
            for p in result.history.publishes:
                f.write(json.dumps({"publish": asdict(p)}) + "\n")
            for c in result.history.connects:
                f.write(json.dumps({"connect": asdict(c)}) + "\n")
            for d in result.history.deliveries:
                f.write(json.dumps({"delivery": asdict(d)}) + "\n")
        (base / "faults.json").write_text(json.dumps(result.faults, indent=1))
        involved = {v.subscriber for v in result.report.violations}
        involved |= {v.publisher for v in result.report.violations if v.publisher}
        if involved:
            _evidence(base / "evidence.jsonl", result.faults, cluster, involved)
        (base / "summary.json").write_text(json.dumps(result.summary(), indent=1))


def _evidence(
    path: Path, faults: list[dict[str, Any]], cluster: Cluster, involved: set[str]
) -> None:
    """The nodes' queue/session events about ``involved`` client ids, their node and
    netsplit events, and the nemesis' own steps, in one timeline (by ``ts``)."""

    def keep(r: dict[str, Any]) -> bool:
        event = str(r.get("event", ""))
        if not event.startswith(EVIDENCE_EVENTS):
            return False
        return r.get("client_id") in involved or event.startswith(("node.", "netsplit."))

    rows = list(cluster.events(keep))
    for f in faults:
        for phase in ("start", "repaired", "ready"):
            if f.get(phase):
                rows.append(
                    {
                        "ts": f[phase].replace("Z", "000Z"),
                        "event": f"nemesis.{f['kind']}",
                        "node": f["name"],
                        "phase": phase,
                        "i": f.get("i"),
                    }
                )
    rows.sort(key=lambda r: str(r.get("ts", "")))
    with open(path, "w") as out:
        for r in rows:
            out.write(json.dumps(r) + "\n")
