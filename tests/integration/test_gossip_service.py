"""The gossip service as a real process: Put/Get/Watch over gRPC, SIGKILL, restart.

What this checks: Puts acknowledged over real gRPC are visible to a second client's Watch
as deltas; after a SIGKILL in the middle of a stream of concurrent Puts, a restarted
process's Watch snapshot holds every acknowledged write (and no deleted key); every
line the service logged is in the event catalogue.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.common.events import unknown_fields
from services.pb import common_pb2, common_pb2_grpc, gossip_pb2, gossip_pb2_grpc
from services.pb.common_pb2 import MqttMessage
from services.pb.gossip_pb2 import SubEntry, SubscriberRecord

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 30.0
NODE = "gossip-it@127.0.0.1"


@dataclass
class Node:
    base: Path
    address: str
    conf: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = (self.base / "stderr.txt").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.gossip", "--config", str(self.conf)],
            cwd=REPO,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        out.close()
        wait_ready(self)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stderr(self) -> str:
        return (self.base / "stderr.txt").read_text(errors="replace")


def wait_ready(node: Node) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    with grpc.insecure_channel(node.address) as ch:
        admin = common_pb2_grpc.AdminStub(ch)
        while time.monotonic() < deadline:
            assert node.proc is not None
            if node.proc.poll() is not None:
                pytest.fail(f"gossip exited with {node.proc.returncode}:\n{node.stderr()}")
            try:
                if admin.Status(common_pb2.StatusRequest(), timeout=1).ready:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    pytest.fail(f"gossip not ready after {READY_TIMEOUT_S}s:\n{node.stderr()}")


@pytest.fixture
def node() -> Iterator[Node]:
    # A short path: unix socket names are limited to ~100 bytes.
    base = Path(tempfile.mkdtemp(prefix="tg-", dir="/tmp"))
    conf = base / "ternmq.conf"
    address = f"unix:{base}/gossip.sock"
    conf.write_text(
        f"nodename = {NODE}\n"
        f"data_dir = {base}/data\n"
        f"log_dir = {base}/log\n"
        f"gossip.address = {address}\n"
        "log.console = off\n",
        encoding="utf-8",
    )
    n = Node(base, address, conf)
    try:
        yield n
    finally:
        if n.proc is not None and n.proc.poll() is None:
            os.kill(n.proc.pid, signal.SIGKILL)
            n.proc.wait(timeout=10)
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class WatchLog:
    """A Watch stream read on a thread: the state it describes, and how it ended."""

    snapshot_done: threading.Event = field(default_factory=threading.Event)
    state: dict[tuple[str, bytes], bytes] = field(default_factory=dict)
    events: int = 0
    ended: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def consume(self, call: Iterator[gossip_pb2.WatchEvent]) -> None:
        try:
            for event in call:
                with self.lock:
                    self.events += 1
                    for u in event.updates:
                        if u.deleted:
                            self.state.pop((u.prefix, u.key), None)
                        else:
                            self.state[(u.prefix, u.key)] = u.value
                if event.snapshot_done:
                    self.snapshot_done.set()
        except grpc.RpcError as exc:  # cancelled by the test or the server was killed
            self.ended = exc

    def copy(self) -> dict[tuple[str, bytes], bytes]:
        with self.lock:
            return dict(self.state)


def watch(channel: grpc.Channel, prefixes: list[str]) -> tuple[WatchLog, Any]:
    stub = gossip_pb2_grpc.GossipStub(channel)
    call = stub.Watch(gossip_pb2.WatchRequest(prefixes=prefixes))
    wlog = WatchLog()
    threading.Thread(target=wlog.consume, args=(call,), daemon=True).start()
    return wlog, call


def poll(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def sub_record(client: str) -> bytes:
    rec = SubscriberRecord(node=NODE, subs=[SubEntry(filter=f"devices/{client}/#", qos=1)])
    return rec.SerializeToString()


def retained(topic: str, payload: bytes) -> bytes:
    return MqttMessage(
        msg_id=f"m-{topic}", topic=topic, payload=payload, qos=1, retain=True, origin_node=NODE
    ).SerializeToString()


def key(client: str) -> bytes:
    return b"\0" + client.encode()  # mountpoint "" \0 client id / topic


def put(stub: gossip_pb2_grpc.GossipStub, *ops: gossip_pb2.MetaOp) -> None:
    reply = stub.Put(gossip_pb2.PutRequest(ops=list(ops)), timeout=10)
    assert reply.applied == len(ops)


def test_put_watch_sigkill_restart_keeps_everything_acknowledged(node: Node) -> None:
    node.start()
    writer_ch = grpc.insecure_channel(node.address)
    watcher_ch = grpc.insecure_channel(node.address)
    stub = gossip_pb2_grpc.GossipStub(writer_ch)
    expected: dict[tuple[str, bytes], bytes] = {}
    try:
        wlog, call = watch(watcher_ch, ["subs", "retain"])
        poll(wlog.snapshot_done.is_set, 20, "the (empty) snapshot")

        # -- writes seen as deltas by another client --------------------------------
        for i in range(20):
            expected[("subs", key(f"c{i}"))] = sub_record(f"c{i}")
            expected[("retain", key(f"t/{i}"))] = retained(f"t/{i}", b"p%d" % i)
        items = list(expected.items())
        for (prefix, k), v in items[:20]:
            put(stub, gossip_pb2.MetaOp(prefix=prefix, key=k, value=v))
        put(stub, *(gossip_pb2.MetaOp(prefix=p, key=k, value=v) for (p, k), v in items[20:]))
        put(
            stub,
            gossip_pb2.MetaOp(prefix="retain", key=key("t/0"), delete=True),
            gossip_pb2.MetaOp(prefix="sessions", key=key("c0"), value=b"not watched"),
        )
        del expected[("retain", key("t/0"))]
        reply = stub.Get(gossip_pb2.GetRequest(prefix="subs", key=key("c3")), timeout=10)
        assert reply.found and reply.value == sub_record("c3")
        assert not stub.Get(gossip_pb2.GetRequest(prefix="retain", key=key("t/0"))).found
        poll(lambda: wlog.copy() == expected, 20, "the watcher to see every delta")
        assert wlog.events < 44  # deltas were batched, not one event per change
        with pytest.raises(grpc.RpcError) as bad:
            stub.Put(gossip_pb2.PutRequest(ops=[gossip_pb2.MetaOp(prefix="nope", key=b"k")]))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        # -- SIGKILL in the middle of concurrent Puts -----------------------------
        acked: dict[tuple[str, bytes], bytes] = {}
        acked_lock = threading.Lock()
        stop_writers = threading.Event()
        errors: list[grpc.StatusCode] = []

        def writer(w: int) -> None:
            for i in range(100_000):
                if stop_writers.is_set():
                    return
                k = key(f"w{w}-{i}")
                v = retained(f"w{w}/{i}", b"x" * 64)
                try:
                    put(stub, gossip_pb2.MetaOp(prefix="retain", key=k, value=v))
                except grpc.RpcError as exc:
                    errors.append(exc.code())
                    return
                with acked_lock:
                    acked[("retain", k)] = v

        writers = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(4)]
        for t in writers:
            t.start()
        poll(lambda: len(acked) >= 200, 30, "200 acknowledged concurrent Puts")
        node.kill()
        stop_writers.set()
        for t in writers:
            t.join(timeout=20)
        assert not any(t.is_alive() for t in writers)
        poll(lambda: wlog.ended is not None, 20, "the watch stream to break")
        call.cancel()
        with acked_lock:
            expected.update(acked)
    finally:
        writer_ch.close()
        watcher_ch.close()

    # -- restart: the snapshot holds everything acknowledged -------------------------
    node.start()
    with grpc.insecure_channel(node.address) as ch:
        wlog2, call2 = watch(ch, [])  # no prefixes: all of them
        poll(wlog2.snapshot_done.is_set, 30, "the snapshot after restart")
        state = wlog2.copy()
        call2.cancel()
    missing = [k for k in expected if k not in state]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:3]}"
    assert all(state[k] == v for k, v in expected.items())
    assert ("retain", key("t/0")) not in state
    assert state[("sessions", key("c0"))] == b"not watched"

    # -- graceful stop, and the log speaks the catalogue ---------------------------
    assert node.proc is not None
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(timeout=20) == 0
    lines = (node.base / "log" / "gossip.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert sum(e["event"] == "service.started" for e in events) == 2
    for e in events:
        fields = {k: v for k, v in e.items() if k != "event"}
        assert unknown_fields(e["event"], fields) == [], e


def test_a_watcher_that_does_not_read_blocks_no_writer(node: Node) -> None:
    node.start()
    with grpc.insecure_channel(node.address) as slow_ch, grpc.insecure_channel(node.address) as ch:
        slow = gossip_pb2_grpc.GossipStub(slow_ch).Watch(
            gossip_pb2.WatchRequest(prefixes=["retain"])
        )
        first = next(slow)  # registered; from now on this client reads nothing
        assert first.snapshot_done
        stub = gossip_pb2_grpc.GossipStub(ch)
        big = b"x" * 200_000  # a few of these fill the HTTP/2 window of the idle stream
        started = time.monotonic()
        last: dict[bytes, bytes] = {}
        for i in range(150):
            k = key(f"hot/{i % 3}")
            last[k] = retained(f"hot/{i % 3}", big + b"%d" % i)
            put(stub, gossip_pb2.MetaOp(prefix="retain", key=k, value=last[k]))
        assert time.monotonic() - started < 60
        # Now read: the backlog was coalesced per key, and ends at the latest values.
        state: dict[bytes, bytes] = {}
        events = 0
        deadline = time.monotonic() + 30
        while state != last and time.monotonic() < deadline:
            event = next(slow)
            events += 1
            state.update({u.key: u.value for u in event.updates})
        slow.cancel()
        assert state == last
        assert events < 75, "the slow watcher got one event per change: nothing coalesced"
    assert node.proc is not None
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(timeout=20) == 0


def status(channel: grpc.Channel) -> dict[str, Any]:
    reply = common_pb2_grpc.AdminStub(channel).Status(common_pb2.StatusRequest(), timeout=5)
    details: dict[str, Any] = json.loads(reply.json)
    return details


def test_a_node_alone_collects_tombstones_at_the_next_gc(node: Node) -> None:
    """No peer can hold a value a tombstone deletes, so a node alone does not keep them
    for ``gossip.tombstone_ttl`` (services/gossip/gc.py): the subscription records of
    ended clean sessions no longer pile up with connection churn."""
    with node.conf.open("a") as conf:
        conf.write("gossip.gc_interval = 1s\n")
    node.start()
    with grpc.insecure_channel(node.address) as ch:
        stub = gossip_pb2_grpc.GossipStub(ch)
        clients = [f"gone-{i}" for i in range(50)]
        for c in clients:
            put(stub, gossip_pb2.MetaOp(prefix="subs", key=key(c), value=sub_record(c)))
        for c in clients:
            put(stub, gossip_pb2.MetaOp(prefix="subs", key=key(c), delete=True))
        poll(lambda: status(ch)["tombstones"] == 0, 15, "tombstones collected")
        assert status(ch)["keys"]["subs"] == 0
        put(stub, gossip_pb2.MetaOp(prefix="subs", key=key("gone-0"), value=sub_record("back")))
        wlog, call = watch(ch, ["subs"])
        poll(wlog.snapshot_done.is_set, 10, "snapshot")
        call.cancel()
        assert wlog.copy() == {("subs", key("gone-0")): sub_record("back")}
        assert status(ch)["dot_floor"] > 0  # collected dots are never handed out again
