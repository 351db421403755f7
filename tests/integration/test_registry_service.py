"""The real registry process against fake msgstore and gossip servers (real gRPC, unix sockets).

The fakes record every call in one ordered log shared with the test, so the order of
events across services (a takeover's Disconnected before the new queue Open) is checked.
"""

from __future__ import annotations

import itertools
import json
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.common.events import unknown_fields
from services.pb import (
    common_pb2,
    common_pb2_grpc,
    gossip_pb2,
    gossip_pb2_grpc,
    msgstore_pb2,
    msgstore_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)
from tests.support.node import complete_lines

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
NEVER = 0xFFFFFFFF
TIMEOUT = 10.0


@dataclass
class CallLog:
    """Every call the fakes received, plus markers the test adds, in arrival order."""

    entries: list[tuple[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    fail_open: bool = False
    subs: dict[bytes, str] = field(default_factory=dict)  # gossip's subs: key -> owner node
    queues: dict[tuple[str, str], int] = field(default_factory=dict)  # the store's: -> epoch
    puts_open: threading.Event = field(default_factory=threading.Event)  # clear: Puts hang
    opens_open: threading.Event = field(default_factory=threading.Event)  # clear: Opens hang
    store_epoch: int = 0  # Opens below this epoch are refused, as by a store ahead of us
    opens_arrived: int = 0  # Opens received, answered or hanging

    def __post_init__(self) -> None:
        self.puts_open.set()
        self.opens_open.set()

    def add(self, name: str, request: Any) -> None:
        with self.lock:
            self.entries.append((name, request))

    def names(self) -> list[str]:
        with self.lock:
            return [n for n, _ in self.entries]

    def of(self, name: str) -> list[Any]:
        with self.lock:
            return [r for n, r in self.entries if n == name]

    def index(self, pred: Callable[[str, Any], bool]) -> int:
        with self.lock:
            return next(i for i, (n, r) in enumerate(self.entries) if pred(n, r))


class FakeMsgStore(msgstore_pb2_grpc.MsgStoreServicer):  # type: ignore[misc]
    def __init__(self, calls: CallLog) -> None:
        self.calls = calls

    def Open(self, request: Any, context: Any) -> Any:
        with self.calls.lock:
            self.calls.opens_arrived += 1
        self.calls.opens_open.wait(TIMEOUT)
        self.calls.add("Open", request)
        if self.calls.fail_open:
            context.abort(grpc.StatusCode.UNAVAILABLE, "fake store is down")
        if request.epoch < self.calls.store_epoch:
            return msgstore_pb2.QueueState(
                key=request.key, exists=True, epoch=self.calls.store_epoch, error="stale epoch"
            )
        if request.create:
            with self.calls.lock:
                self.calls.queues[(request.key.mountpoint, request.key.client_id)] = request.epoch
        return msgstore_pb2.QueueState(key=request.key, exists=True, epoch=request.epoch)

    def Delete(self, request: Any, context: Any) -> Any:
        self.calls.add("Delete", request)
        with self.calls.lock:
            self.calls.queues.pop((request.key.mountpoint, request.key.client_id), None)
        return msgstore_pb2.QueueState(key=request.key, exists=False, epoch=request.epoch)

    def Stream(self, requests: Any, context: Any) -> Any:
        """Batches of acks and marks (the registry's own: a handover's delivery state)."""
        for batch in requests:
            self.calls.add("Stream", batch)
            yield msgstore_pb2.StoreBatchResult(batch_id=batch.batch_id)

    def Queues(self, request: Any, context: Any) -> Any:
        """One page with every queue (the registry pages through ``next``)."""
        self.calls.add("Queues", request)
        with self.calls.lock:
            found = sorted(self.calls.queues.items())
        return msgstore_pb2.QueuesReply(
            queues=[
                msgstore_pb2.QueueState(
                    key=common_pb2.SessionKey(mountpoint=mp, client_id=cid), exists=True, epoch=e
                )
                for (mp, cid), e in found
            ]
        )


class FakeGossip(gossip_pb2_grpc.GossipServicer):  # type: ignore[misc]
    def __init__(self, calls: CallLog) -> None:
        self.calls = calls

    def Put(self, request: Any, context: Any) -> Any:
        self.calls.puts_open.wait(TIMEOUT)
        for op in request.ops:
            self.calls.add("Put", op)
        return gossip_pb2.PutReply(applied=len(request.ops))

    def Watch(self, request: Any, context: Any) -> Any:
        """The snapshot of the preloaded ``subs`` (the registry reads it at start-up)."""
        self.calls.add("Watch", request)
        updates = [
            gossip_pb2.MetaUpdate(
                prefix="subs", key=k, value=gossip_pb2.SubscriberRecord(node=n).SerializeToString()
            )
            for k, n in self.calls.subs.items()
            if "subs" in request.prefixes
        ]
        yield gossip_pb2.WatchEvent(updates=updates, snapshot_done=True)


def meta_key(cid: str, mp: str = "") -> bytes:
    return f"{mp}\0{cid}".encode()


def session_records(calls: CallLog, cid: str) -> list[Any]:
    """The sessions records written for a client id (None for a deletion), in order."""
    out: list[Any] = []
    for op in calls.of("Put"):
        if op.prefix == "sessions" and op.key == meta_key(cid):
            out.append(None if op.delete else gossip_pb2.SessionRecord.FromString(op.value))
    return out


def subs_deleted(calls: CallLog, cid: str) -> int:
    return sum(
        1 for op in calls.of("Put") if op.prefix == "subs" and op.key == meta_key(cid) and op.delete
    )


def wait_for(pred: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Watch:
    """A listener's Watch stream, read by a thread into a queue."""

    def __init__(
        self, stub: Any, listener_id: str, answer: Callable[[Any], None] | None = None
    ) -> None:
        self.commands: queue.Queue[Any] = queue.Queue()
        self._answer = answer
        self._call = stub.Watch(registry_pb2.WatchRequest(listener_id=listener_id, node="n"))
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for command in self._call:
                self.commands.put(command)
                if self._answer is not None:
                    self._answer(command)
        except grpc.RpcError as exc:
            if exc.code() not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE):
                self.commands.put(exc)

    def next(self, timeout: float = TIMEOUT) -> Any:
        return self.commands.get(timeout=timeout)

    def pending(self) -> int:
        return self.commands.qsize()

    def close(self) -> None:
        self._call.cancel()
        self._thread.join(TIMEOUT)


class Node:
    """Fake msgstore and gossip servers plus the registry process under test."""

    def __init__(self, base: Path, **settings: str) -> None:
        self.base = base
        self.calls = CallLog()
        self.fakes = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        msgstore_pb2_grpc.add_MsgStoreServicer_to_server(FakeMsgStore(self.calls), self.fakes)
        gossip_pb2_grpc.add_GossipServicer_to_server(FakeGossip(self.calls), self.fakes)
        self.fakes.add_insecure_port(f"unix:{base}/msgstore.sock")
        self.fakes.add_insecure_port(f"unix:{base}/gossip.sock")
        self.fakes.start()
        conf = {
            "nodename": "t1@127.0.0.1",
            "data_dir": f"{base}/data",
            "log_dir": f"{base}/log",
            "log.console": "off",
            "registry.address": f"unix:{base}/registry.sock",
            "msgstore.address": f"unix:{base}/msgstore.sock",
            "gossip.address": f"unix:{base}/gossip.sock",
            "registry.takeover_timeout": "3s",
            "registry.rpc_timeout": "2s",
            "registry.expiry_check_interval": "100ms",
            **settings,
        }
        self.conf = base / "ternmq.conf"
        self.conf.write_text("".join(f"{k} = {v}\n" for k, v in conf.items()))
        self.channel = grpc.insecure_channel(f"unix:{base}/registry.sock")
        self.stub = registry_pb2_grpc.RegistryStub(self.channel)
        self.admin = common_pb2_grpc.AdminStub(self.channel)
        self.proc: subprocess.Popen[bytes] | None = None
        self.watches: list[Watch] = []

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.registry", "--config", str(self.conf)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=open(self.base / "stderr.txt", "ab"),  # noqa: SIM115
        )

        def ready() -> bool:
            assert self.proc is not None and self.proc.poll() is None, self.stderr()
            try:
                return bool(self.admin.Status(common_pb2.StatusRequest(), timeout=1).ready)
            except grpc.RpcError:
                return False

        wait_for(ready, "the registry to serve")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)
        for w in self.watches:
            w.close()
        self.watches.clear()

    def stderr(self) -> str:
        return (self.base / "stderr.txt").read_text(errors="replace")

    def watch(self, listener_id: str, answer: bool = False) -> Watch:
        """Open a Watch stream; with ``answer`` it acts as a listener and answers takeovers."""

        def answer_takeover(command: Any) -> None:
            if command.WhichOneof("command") == "takeover":
                t = command.takeover
                self.calls.add(f"test:Disconnected:{t.old_epoch}", None)
                self.disconnected(t.key.client_id, t.old_epoch, listener_id, taken_over=True)

        w = Watch(self.stub, listener_id, answer_takeover if answer else None)
        self.watches.append(w)
        wait_for(lambda: listener_id in self.details()["watchers"], f"{listener_id}'s Watch")
        return w

    def details(self) -> dict[str, Any]:
        status = self.admin.Status(common_pb2.StatusRequest(), timeout=TIMEOUT)
        return dict(json.loads(status.json))

    def register(self, cid: str, listener: str = "L1", **kw: Any) -> Any:
        request = registry_pb2.RegisterRequest(
            key=common_pb2.SessionKey(mountpoint="", client_id=cid),
            node="t1@127.0.0.1",
            listener_id=listener,
            peer="127.0.0.1:40000",
            **{"proto_ver": 4, "session_expiry": NEVER, "clean_start": False, **kw},
        )
        return self.stub.Register(request, timeout=TIMEOUT)

    def disconnected(self, cid: str, epoch: int, listener: str = "L1", **kw: Any) -> bool:
        request = registry_pb2.DisconnectedRequest(
            key=common_pb2.SessionKey(client_id=cid), epoch=epoch, listener_id=listener, **kw
        )
        return bool(self.stub.Disconnected(request, timeout=TIMEOUT).ok)

    def session(self, cid: str) -> Any:
        found = self.stub.Sessions(registry_pb2.SessionsRequest(client_id=cid), timeout=TIMEOUT)
        assert len(found.sessions) <= 1
        return found.sessions[0] if found.sessions else None

    def events(self, name: str) -> list[dict[str, Any]]:
        path = self.base / "log" / "registry.jsonl"
        if not path.exists():
            return []
        lines = [json.loads(line) for line in complete_lines(path)]
        return [e for e in lines if e["event"] == name]

    def close(self) -> int | None:
        """Stop gracefully (flushing the event log); the exit status, None if it hung."""
        for w in self.watches:
            w.close()
        status = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                status = self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(TIMEOUT)
        self.channel.close()
        self.fakes.stop(None)
        return status


@pytest.fixture
def make_node() -> Iterator[Callable[..., Node]]:
    # Unix socket paths must stay short: use /tmp, not pytest's deep tmp_path.
    base = Path(tempfile.mkdtemp(prefix="tmreg-", dir="/tmp"))
    nodes: list[Node] = []

    def make(**settings: str) -> Node:
        node = Node(base, **settings)
        nodes.append(node)
        node.start()
        return node

    yield make
    statuses = [node.close() for node in nodes]
    assert statuses == [0] * len(nodes), (statuses, [n.stderr() for n in nodes])
    for line in (base / "log" / "registry.jsonl").read_text().splitlines():
        event = json.loads(line)
        fields = {k: v for k, v in event.items() if k != "event"}
        assert unknown_fields(event["event"], fields) == [], event
    shutil.rmtree(base, ignore_errors=True)


def test_register_takeover_and_disconnect(make_node: Callable[..., Node]) -> None:
    node = make_node()
    w1 = node.watch("L1")
    first = node.register("c1", "L1")
    assert first.ok and first.persistent and not first.session_present and first.epoch > 0
    (open1,) = node.calls.of("Open")
    assert (open1.epoch, open1.create, open1.clean) == (first.epoch, True, True)
    # online: max_online_messages (1000) + max_inflight_messages (20); offline: the
    # node's max_offline_messages, for appends the listener marks offline
    assert (open1.max_len, open1.max_offline_len) == (1020, 1000)
    # written behind the answer: a node alone has nothing of a new id to drop first
    rec = wait_for(lambda: session_records(node.calls, "c1"), "the directory record")[-1]
    assert (rec.node, rec.epoch, rec.online, rec.listener_id) == (
        "t1@127.0.0.1",
        first.epoch,
        True,
        "L1",
    )
    assert list(rec.replicas) == ["t1@127.0.0.1"]
    assert subs_deleted(node.calls, "c1") == 0

    # A second CONNECT for c1 on L2: L1 is told, and the reply waits for L1's Disconnected.
    result: dict[str, Any] = {}
    second = threading.Thread(target=lambda: result.update(r=node.register("c1", "L2")))
    second.start()
    command = w1.next()
    assert command.WhichOneof("command") == "takeover"
    takeover = command.takeover
    assert takeover.key.client_id == "c1" and takeover.old_epoch == first.epoch
    assert takeover.new_epoch > first.epoch and takeover.new_node == "t1@127.0.0.1"
    time.sleep(0.3)
    assert second.is_alive() and len(node.calls.of("Open")) == 1
    node.calls.add("test:Disconnected", None)
    assert node.disconnected("c1", first.epoch, "L1", taken_over=True, session_expiry=NEVER)
    second.join(TIMEOUT)
    reply = result["r"]
    assert reply.ok and reply.session_present and reply.persistent
    assert reply.epoch == takeover.new_epoch
    marker = node.calls.index(lambda n, _: n == "test:Disconnected")
    reopen = node.calls.index(lambda n, r: n == "Open" and r.epoch == reply.epoch)
    assert marker < reopen and not node.calls.of("Open")[-1].clean
    assert subs_deleted(node.calls, "c1") == 0  # the session carried on: subscriptions kept
    (event,) = wait_for(lambda: node.events("session.takeover"), "the takeover event")
    assert event["client_id"] == "c1" and event["epoch"] == reply.epoch

    # A late report from the replaced connection changes nothing.
    assert not node.disconnected("c1", first.epoch, "L1", session_expiry=NEVER)
    info = node.session("c1")
    assert info.online and info.epoch == reply.epoch and info.listener_id == "L2"

    # The new connection ends: the persistent session goes offline and is kept.
    assert node.disconnected("c1", reply.epoch, "L2", session_expiry=NEVER)
    info = node.session("c1")
    assert not info.online and info.persistent and info.disconnected_us > 0
    wait_for(lambda: not session_records(node.calls, "c1")[-1].online, "the offline record")
    assert not node.calls.of("Delete")
    # offline now: no queue call (its Open set the offline limit)
    assert [r.epoch for r in node.calls.of("Open")] == [first.epoch, reply.epoch]


def test_takeover_goes_ahead_when_the_old_listener_never_answers(
    make_node: Callable[..., Node],
) -> None:
    node = make_node(**{"registry.takeover_timeout": "1s"})
    w1 = node.watch("L1")
    first = node.register("c1", "L1")
    started = time.monotonic()
    second = node.register("c1", "L2")
    waited = time.monotonic() - started
    assert second.ok and second.epoch > first.epoch and second.session_present
    assert 0.9 <= waited < 3.0
    assert w1.next().takeover.old_epoch == first.epoch
    late = wait_for(lambda: node.events("session.takeover_unanswered"), "the unanswered event")
    assert late[0]["reason"] == "timeout" and late[0]["listener_id"] == "L1"
    assert late[0]["client_id"] == "c1" and late[0]["epoch"] == second.epoch
    # The old connection may have sent entries no delivered mark records: before the
    # answer, every entry counts as sent, so the resume replays each with DUP.
    (batch,) = node.calls.of("Stream")
    (ack,) = batch.acks
    assert ack.key.client_id == "c1" and ack.epoch == second.epoch
    assert ack.delivered_upto >= 2**63 - 1
    # Without a Watch stream there is nobody to wait for (nor to confirm anything).
    started = time.monotonic()
    third = node.register("c1", "L3")
    assert third.ok and time.monotonic() - started < 0.9
    assert [b.acks[0].epoch for b in node.calls.of("Stream")] == [second.epoch, third.epoch]
    # A takeover its old listener answers leaves the marks as they are.
    w3 = node.watch("L3")
    request = registry_pb2.RegisterRequest(
        key=common_pb2.SessionKey(client_id="c1"),
        node="t1@127.0.0.1",
        listener_id="L4",
        proto_ver=4,
        session_expiry=NEVER,
    )
    fourth = node.stub.Register.future(request, timeout=TIMEOUT)
    assert w3.next().takeover.old_epoch == third.epoch
    assert node.disconnected("c1", third.epoch, "L3", taken_over=True)
    assert fourth.result().ok and fourth.result().session_present
    assert len(node.calls.of("Stream")) == 2


def test_clean_sessions_end_and_persistent_ones_expire(make_node: Callable[..., Node]) -> None:
    node = make_node()
    w = node.watch("L1")
    before = len(node.calls.entries)
    clean = node.register("c2", proto_ver=5, session_expiry=0, clean_start=True)
    assert clean.ok and not clean.persistent and not clean.session_present
    assert node.session("c2").online
    # a clean session replacing nothing costs no queue, directory or subscription call
    assert len(node.calls.entries) == before
    assert node.disconnected("c2", clean.epoch, session_expiry=0)
    assert node.session("c2") is None
    # it may have subscribed (no_subscriptions not set): only its subscriptions go
    assert node.calls.names()[before:] == ["Put"] and subs_deleted(node.calls, "c2") == 1
    quiet = node.register("c2b", proto_ver=4, session_expiry=0, clean_start=True)
    assert node.disconnected("c2b", quiet.epoch, no_subscriptions=True)
    assert node.session("c2b") is None and len(node.calls.entries) == before + 1

    short = node.register("c3", proto_ver=5, session_expiry=1)
    assert short.ok and short.persistent
    assert node.disconnected("c3", short.epoch, session_expiry=1)
    assert node.session("c3") is not None
    command = w.next(timeout=5)
    assert command.WhichOneof("command") == "expire" and command.expire.client_id == "c3"
    assert node.session("c3") is None
    gone = [d for d in node.calls.of("Delete") if d.key.client_id == "c3"]
    assert [d.epoch for d in gone] == [short.epoch] and gone[0].reason == "expired"
    assert session_records(node.calls, "c3")[-1] is None
    (event,) = wait_for(lambda: node.events("session.expired"), "the session.expired event")
    assert event["client_id"] == "c3"


def test_a_restart_drops_the_subscriptions_of_sessions_it_does_not_know(
    make_node: Callable[..., Node],
) -> None:
    """Clean sessions are not on disk: after a restart their subscriptions are orphans."""
    node = make_node()
    kept = node.register("p1")  # persistent: on disk, keeps its subscriptions
    clean = node.register("c8", proto_ver=4, session_expiry=0, clean_start=True)
    assert kept.ok and clean.ok
    node.calls.subs.update(
        {meta_key("p1"): "t1@127.0.0.1", meta_key("c8"): "t1@127.0.0.1", meta_key("x"): "other"}
    )
    node.kill()
    node.start()
    assert subs_deleted(node.calls, "c8") == 1
    assert subs_deleted(node.calls, "p1") == 0  # known: its subscriptions are kept
    assert subs_deleted(node.calls, "x") == 0  # another node's session is not ours to drop
    assert node.session("c8") is None and node.session("p1") is not None
    # The connection that lived through the restart ends: unknown now, its report is stale,
    # but whatever it subscribed since is dropped too.
    assert not node.disconnected("c8", clean.epoch)
    assert subs_deleted(node.calls, "c8") == 2
    assert not node.disconnected("c8", clean.epoch, no_subscriptions=True)
    assert subs_deleted(node.calls, "c8") == 2


def test_a_restart_deletes_the_queues_of_sessions_it_does_not_know(
    make_node: Callable[..., Node],
) -> None:
    """A queue opened for a registration the registry never committed (it died in between)
    is deleted before the restarted registry serves; known sessions' queues are kept."""
    node = make_node()
    kept = node.register("p1")
    assert kept.ok and ("", "p1") in node.calls.queues
    node.calls.queues[("", "lost")] = kept.epoch + 1  # opened, then the registry died
    node.kill()
    node.start()
    deletes = [(r.key.client_id, r.reason) for r in node.calls.of("Delete")]
    assert deletes == [("lost", "orphan")]
    (delete,) = node.calls.of("Delete")
    # At its own epoch, not the reserved one: the tombstone keeps the delete's epoch,
    # and a newer primary elsewhere (a failover meanwhile) must not be fenced by it.
    assert delete.epoch == kept.epoch + 1
    assert set(node.calls.queues) == {("", "p1")}
    assert node.register("lost").ok  # the id registers afresh


def test_connections_stream_answers_ops_in_batches(make_node: Callable[..., Node]) -> None:
    node = make_node()
    ops = [
        registry_pb2.ConnectionOp(
            id=100 + i,
            register=registry_pb2.RegisterRequest(
                key=common_pb2.SessionKey(client_id=f"s{i}"),
                node="t1@127.0.0.1",
                listener_id="L1",
                proto_ver=4,
            ),
        )
        for i in range(50)
    ]
    ops.append(registry_pb2.ConnectionOp(id=7))  # no op at all: answered, not fatal
    requests: queue.Queue[Any] = queue.Queue()
    requests.put(registry_pb2.ConnectionOps(ops=ops))

    def gen() -> Iterator[Any]:
        while (item := requests.get(timeout=TIMEOUT)) is not None:
            yield item

    call = node.stub.Connections(gen(), timeout=TIMEOUT)
    results: dict[int, Any] = {}
    batches = 0
    for batch in call:
        batches += 1
        results.update((r.id, r) for r in batch.results)
        if len(results) == 51:
            break
    assert batches < 51  # answers travel in batches
    regs = [results[100 + i].register for i in range(50)]
    assert all(r.ok and not r.persistent for r in regs)
    assert len({r.epoch for r in regs}) == 50
    assert results[7].WhichOneof("result") is None
    down = [
        registry_pb2.ConnectionOp(
            id=300 + i,
            disconnected=registry_pb2.DisconnectedRequest(
                key=common_pb2.SessionKey(client_id=f"s{i}"),
                epoch=regs[i].epoch,
                no_subscriptions=True,
            ),
        )
        for i in range(50)
    ]
    requests.put(registry_pb2.ConnectionOps(ops=down))
    done: dict[int, Any] = {}
    for batch in call:
        done.update((r.id, r) for r in batch.results)
        if len(done) == 50:
            break
    assert all(done[300 + i].disconnected.ok for i in range(50))
    assert node.details()["sessions"] == 0
    requests.put(None)
    call.cancel()


def test_store_failure_refuses_the_connect_and_the_registry_lives_on(
    make_node: Callable[..., Node],
) -> None:
    node = make_node()
    node.calls.fail_open = True
    refused = node.register("c5")
    assert not refused.ok and refused.reason_code == 0x88 and "UNAVAILABLE" in refused.reason
    assert node.session("c5") is None
    failed = wait_for(lambda: node.events("rpc.failed"), "the rpc.failed event")
    assert failed[0]["target"] == "msgstore" and failed[0]["method"] == "Open"
    node.calls.fail_open = False
    accepted = node.register("c5")
    assert accepted.ok and accepted.epoch > 0


def test_sigkill_and_restart_keep_sessions_and_epochs_growing(
    make_node: Callable[..., Node],
) -> None:
    node = make_node()
    epochs = [node.register("c1").epoch for _ in range(3)]
    epochs.append(node.register("c6", proto_ver=5, session_expiry=0).epoch)
    assert epochs == sorted(set(epochs))
    assert node.session("c1").online
    node.kill()
    node.start()
    info = node.session("c1")
    assert info is not None and not info.online and info.epoch == epochs[2]
    # The recovered session's directory record was corrected before serving.
    assert not session_records(node.calls, "c1")[-1].online
    # The clean session that was online is ended by the restarted registry.
    wait_for(lambda: node.session("c6") is None, "the ended clean session to be dropped")
    again = node.register("c1")
    assert again.ok and again.session_present and again.epoch > max(epochs)
    fresh = node.register("c7")
    assert fresh.epoch > again.epoch
    # And once more, now that the reservation was written by this run.
    node.kill()
    node.start()
    assert node.register("c1").epoch > fresh.epoch


def test_concurrent_connects_for_one_id_are_serialised_and_the_last_wins(
    make_node: Callable[..., Node],
) -> None:
    node = make_node()
    listeners = [f"L{i}" for i in range(6)]
    watches = {name: node.watch(name, answer=True) for name in listeners}
    replies: dict[str, Any] = {}
    threads = [
        threading.Thread(target=lambda n=name: replies.update({n: node.register("cc", n)}))
        for name in listeners
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert all(r.ok for r in replies.values()) and len(replies) == len(listeners)
    by_epoch = sorted(replies.items(), key=lambda item: item[1].epoch)
    epochs = [r.epoch for _, r in by_epoch]
    assert len(set(epochs)) == len(epochs)
    # Each registration took over exactly the one before it, and only after its answer.
    for (old_listener, old), (_, new) in itertools.pairwise(by_epoch):
        command = watches[old_listener].next()
        assert (command.takeover.old_epoch, command.takeover.new_epoch) == (old.epoch, new.epoch)
        answered = node.calls.index(lambda n, _, e=old.epoch: n == f"test:Disconnected:{e}")
        opened = node.calls.index(lambda n, r, e=new.epoch: n == "Open" and r.epoch == e)
        assert answered < opened
    last_listener, last = by_epoch[-1]
    assert watches[last_listener].commands.empty()
    info = node.session("cc")
    assert info.online and info.epoch == last.epoch and info.listener_id == last_listener
    assert [r.session_present for _, r in by_epoch] == [False] + [True] * (len(epochs) - 1)


def test_a_resumed_session_does_not_wait_for_its_directory_record(
    make_node: Callable[..., Node],
) -> None:
    """The record of a session that keeps its subscriptions is written behind the answer,
    in order; one that drops them is written before it (the new session subscribes next)."""
    node = make_node()
    first = node.register("r1")
    assert first.ok and subs_deleted(node.calls, "r1") == 0  # a new id on a node alone
    assert node.disconnected("r1", first.epoch, session_expiry=NEVER)
    wait_for(
        lambda: (records := session_records(node.calls, "r1")) and not records[-1].online,
        "the offline record",
    )
    node.calls.puts_open.clear()  # gossip stops answering
    resumed = node.register("r1")
    assert resumed.ok and resumed.session_present and resumed.epoch > first.epoch
    assert not session_records(node.calls, "r1")[-1].online  # not written yet
    node.calls.puts_open.set()
    rec = wait_for(
        lambda: (r := session_records(node.calls, "r1")[-1]).online and r, "the online record"
    )
    assert rec.epoch == resumed.epoch
    node.calls.puts_open.clear()
    result: dict[str, Any] = {}
    fresh = threading.Thread(
        target=lambda: result.update(
            r=node.register("r1", proto_ver=5, session_expiry=60, clean_start=True)
        )
    )
    fresh.start()
    time.sleep(0.3)
    assert fresh.is_alive()  # a clean start drops the subscriptions before it answers
    node.calls.puts_open.set()
    fresh.join(TIMEOUT)
    assert result["r"].ok and not result["r"].session_present
    assert subs_deleted(node.calls, "r1") == 1


def test_a_failed_queue_open_leaves_the_session_as_it_was(make_node: Callable[..., Node]) -> None:
    node = make_node()
    first = node.register("f1")
    assert node.disconnected("f1", first.epoch, session_expiry=NEVER)
    node.calls.fail_open = True
    # a clean start opens a clean queue before it answers
    refused = node.register("f1", proto_ver=5, session_expiry=60, clean_start=True)
    assert not refused.ok and refused.reason_code == 0x88
    info = node.session("f1")
    assert info is not None and info.epoch == first.epoch and not info.online
    assert info.session_expiry == NEVER
    node.calls.fail_open = False
    node.kill()  # what is on disk says the same
    node.start()
    info = node.session("f1")
    assert info is not None and info.epoch == first.epoch and not info.online
    again = node.register("f1")
    assert again.ok and again.session_present and again.epoch > first.epoch


def test_a_resumed_sessions_queue_opens_behind_the_answer_and_before_its_next_call(
    make_node: Callable[..., Node],
) -> None:
    node = make_node()
    first = node.register("o1")
    assert node.disconnected("o1", first.epoch, session_expiry=NEVER)
    arrived = node.calls.opens_arrived
    node.calls.opens_open.clear()  # the store stops answering Opens
    resumed = node.register("o1")
    assert resumed.ok and resumed.session_present and resumed.persistent
    # the end is answered at once, and makes no queue call (the Open set both limits)
    assert node.disconnected("o1", resumed.epoch, session_expiry=NEVER)
    result: dict[str, Any] = {}
    fresh = threading.Thread(
        target=lambda: result.update(r=node.register("o1", proto_ver=5, clean_start=True))
    )
    fresh.start()  # a clean start: its Open must reach the store after the resume's
    time.sleep(0.3)
    assert fresh.is_alive() and node.calls.opens_arrived == arrived + 1  # the resume's, hanging
    node.calls.opens_open.set()
    fresh.join(TIMEOUT)
    assert result["r"].ok and not result["r"].session_present
    opens = [(o.epoch, o.max_len, o.max_offline_len, o.clean) for o in node.calls.of("Open")]
    assert opens[-2:] == [
        (resumed.epoch, 1020, 1000, False),
        (result["r"].epoch, 1020, 1000, True),
    ]


def test_a_reconnect_right_after_the_end_resumes_at_once_without_a_takeover(
    make_node: Callable[..., Node],
) -> None:
    """A client that reconnects right after its DISCONNECT, while the store does not
    answer: neither the end nor the CONNECT waits for it, nothing is taken over (no
    command to the old listener, no event), and the end makes no queue call at all."""
    node = make_node(**{"registry.rpc_timeout": "30s"})  # a hanging store is never given up on
    w = node.watch("L1")
    first = node.register("q1")
    node.calls.opens_open.clear()  # the store stops answering
    result: dict[str, Any] = {}

    def end_then_reconnect() -> None:
        result["ended"] = node.disconnected("q1", first.epoch, session_expiry=NEVER)
        result["r"] = node.register("q1")

    both = threading.Thread(target=end_then_reconnect)
    both.start()
    both.join(TIMEOUT / 2)  # the store hangs for TIMEOUT (10 s): neither may wait for it
    assert not both.is_alive(), "the end or the CONNECT waited for the store"
    reply = result["r"]
    assert result["ended"] and reply.ok and reply.session_present and reply.epoch > first.epoch
    assert w.pending() == 0  # no takeover command went to L1
    assert node.events("session.takeover") == []
    node.calls.opens_open.set()
    wait_for(lambda: node.calls.of("Open")[-1].epoch == reply.epoch, "the resume's Open")
    opens = [(o.epoch, o.max_len, o.max_offline_len) for o in node.calls.of("Open")]
    assert opens == [(first.epoch, 1020, 1000), (reply.epoch, 1020, 1000)]


def test_a_store_that_refuses_a_resumed_epoch_closes_its_connection(
    make_node: Callable[..., Node],
) -> None:
    node = make_node()
    w = node.watch("L1")
    first = node.register("z1")
    assert node.disconnected("z1", first.epoch, session_expiry=NEVER)
    node.calls.store_epoch = first.epoch + 1000  # the store saw epochs this registry lost
    resumed = node.register("z1")
    assert resumed.ok  # answered before the Open
    command = w.next()
    assert command.WhichOneof("command") == "takeover"
    assert command.takeover.old_epoch == resumed.epoch
    assert node.disconnected("z1", resumed.epoch, "L1", taken_over=True, session_expiry=NEVER)
    node.calls.store_epoch = 0
    assert node.register("z1").epoch > first.epoch + 1000
